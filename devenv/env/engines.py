"""Container engines (L0): Docker and podman behind one Docker-compatible API, and how each is given GPUs.

devenv speaks the Docker API to both: podman serves it too, and `podman system dial-stdio` bridges it over SSH
exactly as `docker system dial-stdio` does. Where the two disagree is GPUs. Docker with the NVIDIA toolkit takes
device requests (`--gpus`); podman takes CDI device names (`--device nvidia.com/gpu=all`), and its
Docker-compatible create ignores device requests and rejects CDI names (seen with podman 4.3.1), so podman
containers are created through podman's own API. Docker 25+ with CDI enabled takes CDI names as device requests
with the "cdi" driver.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

ENGINES = ("docker", "podman")
CDI_GPU_KIND = "nvidia.com/gpu"
# A CLI-less fallback: `auto` uses docker's bridge when its CLI exists, else podman's.
_AUTO_DIAL = ("if command -v docker >/dev/null 2>&1; then exec docker system dial-stdio; fi; "
              "exec podman system dial-stdio")


@dataclass(frozen=True)
class EngineInfo:
    """What answered on the other end of the API: its name, version and API version."""

    name: str                 # docker | podman
    version: str
    api_version: str

    def describe(self) -> str:
        return f"{self.name} {self.version} (API {self.api_version})"


def dial_command(engine: str) -> str:
    """The host command that bridges the engine's API socket to stdin/stdout (one SSH channel each)."""
    if engine == "docker":
        return "docker system dial-stdio"
    if engine == "podman":
        return "podman system dial-stdio"
    return _AUTO_DIAL


def identify(version: dict[str, Any]) -> EngineInfo:
    """Which engine answered a `/version` request: podman names itself in the components it lists."""
    components = version.get("Components") or []
    podman = next((c for c in components if "podman" in str(c.get("Name", "")).lower()), None)
    if podman is not None:
        return EngineInfo("podman", str(podman.get("Version") or version.get("Version") or "?"),
                          str(version.get("ApiVersion") or "?"))
    return EngineInfo("docker", str(version.get("Version") or "?"), str(version.get("ApiVersion") or "?"))


def gpu_request_kind(engine: str, gpu_devices: str) -> str:
    """'cdi' or 'toolkit': how the engine is asked for GPUs (a host profile's `gpu_devices` overrides auto)."""
    if engine == "podman":
        return "cdi"  # podman has no device-request path to the toolkit: CDI is NVIDIA's way there
    return "cdi" if gpu_devices == "cdi" else "toolkit"


def cdi_device_names(gpus: str, kind: str = CDI_GPU_KIND) -> list[str]:
    """CDI names for an environment's `gpus` (all | none | "0,1"): nvidia.com/gpu=all, nvidia.com/gpu=0, ..."""
    if gpus == "none":
        return []
    if gpus == "all" or gpus.startswith("free:"):  # a count is picked at `up`: until then, any of them
        return [f"{kind}=all"]
    return [f"{kind}={index.strip()}" for index in gpus.split(",") if index.strip()]


# --- the engine's own CLI on the host, for what its API does not stream as well: `save` into `load` -----------

_AUTO_CLI = '"$(command -v docker >/dev/null 2>&1 && echo docker || echo podman)"'
# What `image inspect` says of a name it does not know: docker, podman (two spellings across versions).
_NO_SUCH_IMAGE = ("no such image", "image not known", "no such object", "failed to find image")


def engine_cli(engine: str) -> str:
    """The engine's CLI as one shell word: docker, podman, or for `auto` docker where its CLI is, else podman
    (as dial_command decides)."""
    return engine if engine in ENGINES else _AUTO_CLI


def image_id_command(engine: str, image: str) -> str:
    """Prints the image's id and size in bytes, or fails saying there is no such image."""
    return f"{engine_cli(engine)} image inspect --format '{{{{.Id}}}} {{{{.Size}}}}' {shlex.quote(image)}"


def save_command(engine: str, image: str) -> str:
    """The image as a docker-archive tar on stdout (both engines' default format: each loads the other's)."""
    return f"exec {engine_cli(engine)} save {shlex.quote(image)}"


LOAD_TMP_PREFIX = "devenv-load."


def load_command(engine: str) -> str:
    """`load` from stdin, in a private TMPDIR removed however it ends: podman copies its input to a temp file
    first, and leaves it behind when it is killed (a cut stream); dockerd cleans its own. The load runs in the
    background (its stdin given explicitly) and the shell `wait`s for it: a TERM then runs the trap at once (a
    shell waiting on a foreground child runs it only once the child has exited, and docker's CLI ignores TERM: the
    KILL that follows left the directory behind)."""
    return (f'd=$(mktemp -d "${{TMPDIR:-/var/tmp}}/{LOAD_TMP_PREFIX}XXXXXX") || exit 1\n'
            f'p=\ntrap \'rm -rf "$d"\' EXIT\n'
            f'trap \'[ -z "$p" ] || kill -KILL "$p" 2>/dev/null; rm -rf "$d"; exit 143\' TERM INT HUP\n'
            f'TMPDIR="$d" {engine_cli(engine)} load -q <&0 &\np=$!\nwait "$p"')


def name_image_command(engine: str, image_id: str, image: str) -> str:
    """One round trip: the image named `image` unless that name already points at image_id (a load names it
    as the source did: podman adds a registry prefix docker does not, and the reverse), then its id and size."""
    bare = bare_image_id(image_id)
    if not bare or not all(c in "0123456789abcdef" for c in bare):
        raise ValueError(f"not an image id: {image_id!r}")
    cli, name = engine_cli(engine), shlex.quote(image)
    return (f"e={cli}; id=$($e image inspect --format '{{{{.Id}}}}' {name} 2>/dev/null)\n"
            f'case "$id" in *{bare}) ;; *) $e tag {bare} {name} || exit 1 ;; esac\n'
            f"exec $e image inspect --format '{{{{.Id}}}} {{{{.Size}}}}' {name}")


def is_no_such_image(stderr: str) -> bool:
    text = stderr.lower()
    return any(words in text for words in _NO_SUCH_IMAGE)


def bare_image_id(image_id: str) -> str:
    """docker says sha256:HEX, podman HEX: the same id both ways (the digest of the image's config)."""
    return image_id.strip().removeprefix("sha256:")
