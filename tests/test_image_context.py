"""The build context sent to a host (L0): bundled files, the optional CA bundle and wheelhouse, build args."""

from __future__ import annotations

import os

import pytest

from devenv.config.profiles import BuildSpec, EnvProfile
from devenv.env import image_context
from devenv.env.image_context import BuildInputs
from devenv.errors import DevenvError, ProfileError

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def env(**overrides) -> EnvProfile:
    fields = dict(name="cu", source="test", image="devenv/pytorch:cu128", cuda="12.8", torch="2.8.0+cu128",
                  build=BuildSpec("pytorch.Dockerfile", {"TORCH_INDEX": "cu128", "TORCH_VERSION": "2.8.0"}))
    fields.update(overrides)
    return EnvProfile(**fields)


def test_context_has_the_bundled_dockerfile_and_scripts_only_by_default():
    files = image_context.context_bytes_for_test(env(), BuildInputs())
    assert {"pytorch.Dockerfile", "entrypoint.sh", "install-os.sh", "install-python.sh", "ready.py",
            "jupyter_server_config.py", "sshd_devenv.conf"} <= set(files)
    assert "extra-ca.crt" not in files and not any(name.startswith("wheels/") for name in files)
    assert b"ARG BASE_IMAGE" in files["pytorch.Dockerfile"]


def test_ca_bundle_and_wheelhouse_travel_in_the_context(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_bytes(PEM)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.8.0+cu128-cp311-cp311-linux_x86_64.whl").write_bytes(b"wheel")
    (wheels / "notes.txt").write_text("not a wheel")
    files = image_context.context_bytes_for_test(env(), BuildInputs(ca, wheels))
    assert files["extra-ca.crt"] == PEM
    assert files["wheels/torch-2.8.0+cu128-cp311-cp311-linux_x86_64.whl"] == b"wheel"
    assert "wheels/notes.txt" not in files


def test_build_args_declare_what_the_labels_say():
    args = image_context.build_args(env(), BuildInputs(offline=False))
    assert args == {"TORCH_INDEX": "cu128", "TORCH_VERSION": "2.8.0", "DEVENV_CUDA": "12.8",
                    "DEVENV_TORCH": "2.8.0+cu128", "OFFLINE": "0"}
    cpu = image_context.build_args(env(cuda=None, torch=None), BuildInputs())
    assert cpu["DEVENV_CUDA"] == "" and cpu["DEVENV_TORCH"] == ""


def test_inputs_from_flags_win_over_environment_and_are_validated(tmp_path, monkeypatch):
    ca = tmp_path / "ca.pem"
    ca.write_bytes(PEM)
    monkeypatch.setenv("DEVENV_BUILD_CA_BUNDLE", str(ca))
    assert BuildInputs.from_options(None, None).ca_bundle == ca
    other = tmp_path / "other.pem"
    other.write_bytes(PEM)
    assert BuildInputs.from_options(str(other), None).ca_bundle == other
    not_pem = tmp_path / "x.txt"
    not_pem.write_text("hello")
    with pytest.raises(DevenvError, match="no PEM certificate"):
        BuildInputs.from_options(str(not_pem), None)
    with pytest.raises(DevenvError, match="--offline needs a wheelhouse"):
        BuildInputs.from_options(None, None, offline=True)


def test_env_without_build_section_or_with_unknown_dockerfile_is_a_profile_error():
    with pytest.raises(ProfileError, match="no build section"):
        image_context.dockerfile_path(env(build=None))
    with pytest.raises(ProfileError, match="is not in"):
        image_context.dockerfile_path(env(build=BuildSpec("nope.Dockerfile", {})))


# --- the context is confined to images/ (or the folder the user named) --------------------------------

def _canary_tree(tmp_path):
    """A folder outside images/ with a Dockerfile and a secret next to it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "Dockerfile").write_text("FROM scratch\n")
    (outside / "id_rsa").write_text("CANARY-SECRET\n")
    return outside


@pytest.mark.parametrize("dockerfile", ["../../outside/Dockerfile", "ABSOLUTE", "../images/../../outside/Dockerfile",
                                        "sub/../../outside/Dockerfile"])
def test_a_dockerfile_outside_images_is_refused_and_nothing_outside_is_sent(tmp_path, dockerfile):
    outside = _canary_tree(tmp_path)
    if dockerfile == "ABSOLUTE":
        dockerfile = str(outside / "Dockerfile")
    else:  # relative to images/: climb from the bundled folder up to the canary's folder
        from devenv.config import paths
        up = os.path.relpath(outside, paths.bundled_dir("images"))
        dockerfile = dockerfile.replace("../../outside", up)
    with pytest.raises(ProfileError) as err:
        image_context.context_bytes_for_test(env(build=BuildSpec(dockerfile, {})), BuildInputs())
    assert "DEVENV_BUILD_CONTEXT" in err.value.hint
    assert "CANARY" not in err.value.message


def test_a_named_build_context_is_used_and_links_out_of_it_are_not_followed(tmp_path, monkeypatch):
    outside = _canary_tree(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "my.Dockerfile").write_text("FROM scratch\nCOPY run.sh /\n")
    (mine / "run.sh").write_text("echo hi\n")
    (mine / "leak").symlink_to(outside / "id_rsa")
    monkeypatch.setenv("DEVENV_BUILD_CONTEXT", str(mine))
    inputs = BuildInputs.from_options(None, None)
    assert inputs.context_dir == mine
    for name in ("my.Dockerfile", str(mine / "my.Dockerfile")):
        files = image_context.context_bytes_for_test(env(build=BuildSpec(name, {})), inputs)
        assert set(files) == {"my.Dockerfile", "run.sh"}
        assert not any(b"CANARY" in data for data in files.values())
    assert image_context.context_root(env(build=BuildSpec("my.Dockerfile", {})), inputs) == mine.resolve()
    # even with a context named, a Dockerfile elsewhere is refused
    with pytest.raises(ProfileError):
        image_context.context_bytes_for_test(env(build=BuildSpec(str(outside / "Dockerfile"), {})), inputs)


def test_a_build_context_that_is_not_a_folder_is_bad_input(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVENV_BUILD_CONTEXT", str(tmp_path / "nope"))
    with pytest.raises(DevenvError) as err:
        BuildInputs.from_options(None, None)
    assert err.value.exit_code == 2


# --- the venv by run + commit (Docker): what goes into the container, and the cache's fingerprint ------------

def test_the_runtime_stage_comes_before_the_builder_and_the_final_stage_adds_only_the_venv():
    """The classic builder builds every stage before --target: the runtime stage must not need the builder's
    (torch's) work. A plain build's final stage is the runtime stage plus the venv, so both ways make one image."""
    text = image_context.context_bytes_for_test(env(), BuildInputs())["pytorch.Dockerfile"].decode()
    runtime, builder = text.index("FROM base AS runtime"), text.index("FROM base AS builder")
    assert runtime < builder
    final = text[text.index("\nFROM runtime\n"):]
    assert [line.split()[0] for line in final.splitlines() if line and not line.startswith("#")] == \
        ["FROM", "ARG", "COPY"]
    assert "COPY --from=builder --chown=${DEVENV_USER} /opt/venv /opt/venv" in final
    assert "ENTRYPOINT" in text[runtime:builder]


def test_build_args_file_is_sourced_by_sh_to_the_same_values(tmp_path):
    """Values are shell-quoted: none runs, each comes back as given (a value never becomes shell text)."""
    hostile = {"DEVENV_PIP": "numpy==2.1 'x' \"y\" $(touch pwned) `touch pwned2`; rm -rf /", "OFFLINE": "0",
               "EMPTY": "", "NL": "a\nb"}
    (tmp_path / "args").write_bytes(image_context.args_file(hostile))
    script = "set -a; . ./args; set +a; " + "; ".join(f'printf "%s\\0" "${k}"' for k in sorted(hostile))
    import subprocess

    done = subprocess.run(["sh", "-c", script], cwd=tmp_path, capture_output=True, check=True)
    assert done.stdout.split(b"\0")[:-1] == [hostile[k].encode() for k in sorted(hostile)]
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


def test_a_build_arg_name_that_is_no_shell_name_is_refused():
    with pytest.raises(DevenvError, match="not a valid name"):
        image_context.args_file({"A;touch x": "1"})


def test_commit_build_puts_scripts_wheels_and_args_under_tmp_and_removes_them(tmp_path):
    import tarfile

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.8.0+cu128-cp311-cp311-linux_x86_64.whl").write_bytes(b"wheel")
    made = image_context.commit_build(env(), BuildInputs(wheelhouse=wheels))
    with tarfile.open(fileobj=made.archive) as tar:
        names = {m.name: m for m in tar.getmembers()}
        driver = tar.extractfile(names["devenv-build-run.sh"]).read().decode()  # type: ignore[union-attr]
        args = tar.extractfile(names["devenv-build-args"]).read().decode()  # type: ignore[union-attr]
    assert {"devenv-build", "devenv-build/install-python.sh", "devenv-build/install-extra.sh",
            "devenv-build/torch-2.8.0+cu128-cp311-cp311-linux_x86_64.whl"} <= set(names)
    assert all(m.uid == 0 and m.gid == 0 for m in names.values())
    assert made.command == ["/bin/sh", "/tmp/devenv-build-run.sh"]
    assert "TORCH_VERSION=2.8.0\n" in args and "DEVENV_TORCH=2.8.0+cu128\n" in args
    # the wheelhouse, the arguments and the driver are gone before the commit: in no layer
    assert driver.rstrip().splitlines()[-1] == \
        "rm -rf /tmp/devenv-build /tmp/devenv-build-args /tmp/devenv-build-run.sh"
    made.close()


def test_the_fingerprint_changes_with_each_input(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = wheels / "torch-2.8.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"wheel")

    def key(e=None, inputs=None, runtime="sha256:1", labels=None):
        made = image_context.commit_build(e or env(), inputs or BuildInputs(wheelhouse=wheels))
        made.close()
        return made.fingerprint(runtime, labels or {"org.devenv.env": "cu"})

    first = key()
    assert key() == first
    assert key(runtime="sha256:2") != first
    assert key(labels={"org.devenv.env": "other"}) != first
    assert key(e=env(pip=("numpy",))) != first
    assert key(inputs=BuildInputs()) != first
    wheel.write_bytes(b"a bigger wheel")
    key_of_bigger = key()
    assert key_of_bigger != first
    # rebuilt under the same name, the same size and even the same mtime: still another wheel
    stat = wheel.stat()
    wheel.write_bytes(b"another wheel!")
    os.utime(wheel, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert wheel.stat().st_size == stat.st_size
    assert key() != key_of_bigger


def test_only_the_bundled_dockerfile_is_built_by_commit(tmp_path):
    assert image_context.is_bundled(env(), BuildInputs())
    (tmp_path / "pytorch.Dockerfile").write_text("FROM scratch\n")
    assert not image_context.is_bundled(env(), BuildInputs(context_dir=tmp_path))


def sourced(tmp_path, text: bytes, names: list[str]) -> dict[str, str | None]:
    """What sh has for names after sourcing text as the build's driver does (set -a; . file)."""
    import subprocess

    (tmp_path / "args").write_bytes(text)
    script = "set -a; . ./args; set +a; " + "; ".join(f'printf "%s=%s\\0" "${{{n}+set}}" "${n}"' for n in names)
    out = subprocess.run(["sh", "-c", script], cwd=tmp_path, capture_output=True, check=True).stdout
    pairs = [item.split(b"=", 1) for item in out.split(b"\0")[:-1]]
    return {n: (v.decode() if flag == b"set" else None) for n, (flag, v) in zip(names, pairs, strict=True)}


def test_the_container_gets_the_builder_stages_args_with_the_dockerfiles_defaults(tmp_path):
    """What the builder stage's RUNs see in a plain build: its ARGs, given or defaulted (a profile without
    TORCH_VERSION gets the Dockerfile's torch, and TORCH_INDEX_URL follows TORCH_INDEX), not the other stages'
    arguments; and the user, for the venv's owner."""
    import tarfile

    def args_of(e) -> dict[str, str | None]:
        made = image_context.commit_build(e, BuildInputs())
        with tarfile.open(fileobj=made.archive) as tar:
            text = tar.extractfile("devenv-build-args").read()  # type: ignore[union-attr]
        made.close()
        return sourced(tmp_path, text, ["TORCH_VERSION", "TORCH_INDEX", "TORCH_INDEX_URL", "DEVENV_TORCH",
                                        "OFFLINE", "DEVENV_PIP", "DEVENV_USER", "DEVENV_APT", "DEVENV_CUDA"])

    got = args_of(env(user="dev", pip=("numpy",), apt=("git",),
                      build=BuildSpec("pytorch.Dockerfile", {"TORCH_INDEX": "cpu"})))
    assert got == {"TORCH_VERSION": "2.11.0", "TORCH_INDEX": "cpu",
                   "TORCH_INDEX_URL": "https://download.pytorch.org/whl/cpu", "DEVENV_TORCH": "2.8.0+cu128",
                   "OFFLINE": "0", "DEVENV_PIP": "numpy", "DEVENV_USER": "dev", "DEVENV_APT": None,
                   "DEVENV_CUDA": None}
    given = args_of(env(build=BuildSpec("pytorch.Dockerfile", {"TORCH_VERSION": "", "TORCH_INDEX_URL": "x"})))
    assert given["TORCH_VERSION"] == "" and given["TORCH_INDEX_URL"] == "x" and given["TORCH_INDEX"] == "cu128"
    assert given["DEVENV_USER"] is None and given["DEVENV_PIP"] == ""   # ARG DEVENV_PIP= : set, empty


def test_stage_args_reads_one_stages_args_in_order():
    text = "ARG G=1\nFROM x AS a\nARG A1=2\nFROM a AS builder\nARG B1=3\nARG B2\n  ARG B3=${B1}/y\nFROM a\nARG C=4\n"
    assert image_context.stage_args(text, "builder") == {"B1": "3", "B2": None, "B3": "${B1}/y"}


def test_a_default_a_shell_would_read_as_code_is_refused():
    for default in ("$(id)", "`id`", "a;b", "${X:-$(id)}", "a b", "'q'"):
        with pytest.raises(DevenvError, match="cannot pass on"):
            image_context.args_file({}, {"X": default})
    assert image_context.args_file({}, {"X": "https://h/w/${Y}", "Z": ""}) == b"X=https://h/w/${Y}\nZ=\n"


def test_tar_without_padding_ends_after_the_end_blocks_and_stays_whole(tmp_path):
    """Python's tarfile pads to 10240 bytes; podman's copier stops reading after the two end blocks (the rest
    broke the pipe): what put_archive sends ends there, and reads back the same."""
    import io
    import tarfile

    from devenv.runtimes.docker_runtime import tar_without_padding

    for sizes in ([], [1], [700, 5000], [10240 - 3 * 512]):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for i, size in enumerate(sizes):
                info = tarfile.TarInfo(f"f{i}")
                info.size = size
                tar.addfile(info, io.BytesIO(b"x" * size))
        padded = len(buf.getvalue())
        assert padded % 10240 == 0
        sent = tar_without_padding(buf)
        data = sent.read()
        content = sum(512 + -(-size // 512) * 512 for size in sizes)
        assert len(data) == content + 1024 <= padded and data[-1024:] == bytes(1024), (sizes, len(data))
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            assert [(m.name, m.size) for m in tar.getmembers()] == [(f"f{i}", s) for i, s in enumerate(sizes)]


def test_the_venv_is_built_by_commit_only_where_the_engine_commits_and_not_when_told_copy(monkeypatch):
    from devenv.services.environments.docker.images import builds_venv_by_commit

    class Engine:
        commit_builds = True

    monkeypatch.setenv("DEVENV_BUILD_VENV", "commit")
    assert builds_venv_by_commit(Engine(), env(), BuildInputs())  # type: ignore[arg-type]
    monkeypatch.setenv("DEVENV_BUILD_VENV", "copy")
    assert not builds_venv_by_commit(Engine(), env(), BuildInputs())  # type: ignore[arg-type]
    monkeypatch.setenv("DEVENV_BUILD_VENV", "commit")
    Engine.commit_builds = False   # podman
    assert not builds_venv_by_commit(Engine(), env(), BuildInputs())  # type: ignore[arg-type]
