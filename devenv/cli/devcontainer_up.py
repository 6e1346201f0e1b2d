"""`up` with a project's devcontainer.json (found in the current folder, or named with --devcontainer).

The devcontainer's image, or the image its Dockerfile builds from the project folder, is the base of devenv's
own image; its environment variables, mounts, remoteUser, postCreateCommand (once, when the container is
made) and postStartCommand (whenever it starts) and forwardPorts are honoured; what devenv cannot honour is
printed, never dropped silently.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click

from devenv.config import profiles, validate
from devenv.env.devcontainer import Devcontainer, overlay, parse
from devenv.errors import BadInputError, DevenvError

if TYPE_CHECKING:
    from devenv.services.environments.contract import UpResult
    from devenv.services.session import EnvSession, Tunnel


def find(named: str | None) -> tuple[Devcontainer, Path] | None:
    """(the devcontainer, the project root) named by --devcontainer (a file or a project folder), else the one
    in the current folder, else None."""
    candidates: list[Path]
    if named:
        problem = validate.local_path_problem(named)
        if problem:
            raise BadInputError(f"--devcontainer {validate.preview(named)} {problem}",
                                "name the file, or a folder that has .devcontainer/devcontainer.json")
        path = Path(named).expanduser().resolve()
        candidates = [path] if path.is_file() else [path / ".devcontainer" / "devcontainer.json",
                                                     path / ".devcontainer.json"]
    else:
        here = Path.cwd()
        candidates = [here / ".devcontainer" / "devcontainer.json", here / ".devcontainer.json"]
    for candidate in candidates:
        if candidate.is_file():
            root = candidate.parent.parent if candidate.parent.name == ".devcontainer" else candidate.parent
            folder = str(candidate.parent.relative_to(root)) if candidate.parent != root else "."
            # read as profiles are: a regular file of bounded size, UTF-8 (never a FIFO, a device or UTF-16)
            return parse(profiles.read_text(candidate), str(candidate), folder), root
    if named:
        raise BadInputError(f"no devcontainer.json at {named}",
                            "name the file, or a folder that has .devcontainer/devcontainer.json")
    return None


def apply(session: EnvSession, dc: Devcontainer, root: Path) -> None:
    """Lay the devcontainer under the session's environment profile; say what is used and what is not."""
    from devenv.env import project_context

    digest = ""
    if dc.dockerfile is not None:
        pc = project_context.resolve(root, dc.context, dc.dockerfile, dc.source)
        digest = pc.digest
    env, notes = overlay(session.env, dc, str(root), digest)
    if not session.kind.builds_images:
        notes.append(f"image, build, mounts, remoteUser: {session.host.name} runs environments without containers "
                     "(runtime: host or slurm), so none of them is used there")
    session.env = env
    if env.project_build is not None:
        click.echo(f"Using {dc.source}: the image its Dockerfile {dc.dockerfile} builds "
                   f"({env.project_build.tag}) under devenv's ({env.image})", err=True)
        click.echo(f"  build context: {pc.context} ({pc.files} files, {pc.size_bytes / 1e6:.1f} MB), inside the "
                   f"project folder {pc.root} (the folder named; nothing outside it is sent)", err=True)
    else:
        click.echo(f"Using {dc.source}: image {dc.image} under devenv's ({env.image})", err=True)
    if env.user:
        click.echo(f"  user: {env.user} (exec, ssh, sync and Jupyter run as {env.user}; sshd admits only "
                   f"{env.user})", err=True)
    for mount in dc.mounts:
        what = f"host path {mount.source}" if mount.type == "bind" else "a tmpfs"
        click.echo(f"  mount: {what} at {mount.target}{' (read-only)' if mount.readonly else ''}", err=True)
    for name, target in dc.volumes.items():
        click.echo(f"  mount: volume {name} at {target}, as this environment's own volume (kept by `down`, "
                   "removed by `down --purge`)", err=True)
    for note in notes:
        click.secho(f"  not honoured: {note}", fg="yellow", err=True)


def after_up(session: EnvSession, result: UpResult, dc: Devcontainer, project: str | None = None) -> None:
    """onCreateCommand, updateContentCommand and postCreateCommand when the container was made, postStartCommand
    whenever it (re)started, postAttachCommand at every `up` (the spec's order); as the environment's user, in
    the project's folder there (`up --sync`, synced before them), else in the workspace."""
    commands = []
    if result.action in ("created", "recreated"):   # the spec's order: onCreate, updateContent, postCreate
        commands += [("onCreateCommand", c) for c in dc.on_create]
        commands += [("updateContentCommand", c) for c in dc.update_content]
        commands += [("postCreateCommand", c) for c in dc.post_create]
    if result.action in ("created", "recreated", "started"):
        commands += [("postStartCommand", c) for c in dc.post_start]
    commands += [("postAttachCommand", c) for c in dc.post_attach]  # every `up`: devenv attaches each time
    workspace = project or session.env.volumes.get("workspace", "/workspace")
    for key, command in commands:
        click.echo(f"Running {key}: {command}", err=True)
        script = f"cd {shlex.quote(workspace)} && {command}"
        chunks, exit_code = session.backend.exec(session.env.name, ["sh", "-c", script])
        for out, err in chunks:
            for data in (out, err):
                if data:
                    click.echo(data.decode(errors="replace"), nl=False, err=True)
        code = exit_code()
        if code:
            raise DevenvError(f"{key} failed with exit code {code}: {command}",
                              "fix it in devcontainer.json; the environment is up: `devenv exec HOST -- sh` to look")


def port_notes(host: str, dc: Devcontainer) -> list[str]:
    return [f"forwardPorts {p}: devenv tunnel {host} {p}" for p in dc.forward_ports]


def open_forwards(session: EnvSession, result: UpResult, dc: Devcontainer) -> Tunnel | None:
    """Tunnels for forwardPorts (each on the same local port when free), or None."""
    if not dc.forward_ports or session.host.local or not result.status.address:
        return None
    tunnel = session.forward([(f"port {p}", result.status.address, p, p) for p in dc.forward_ports])
    for f in tunnel.forwards:
        click.echo(f"  forwardPorts: 127.0.0.1:{f.local_port} -> {session.env.name}:{f.remote_port}")
    return tunnel
