"""devcontainer.json's Dockerfile build, mounts and remoteUser (L0): what is built from where, what is mounted,
what is refused, and what is named as not honoured."""

from __future__ import annotations

import json
import os
import tarfile

import pytest

from devenv.config.profiles import BuildSpec, EnvProfile
from devenv.env import devcontainer, image_context, project_context
from devenv.env import spec as envspec
from devenv.errors import ProfileError

ENV = EnvProfile(name="cuda", source="t", image="devenv/pytorch:cu128",
                 build=BuildSpec("pytorch.Dockerfile", {"BASE_IMAGE": "nvidia/cuda:12.8", "TORCH_VERSION": "2.8.0"}))


def parse(data: dict, folder: str = ".devcontainer"):
    return devcontainer.parse(json.dumps(data), "p/.devcontainer/devcontainer.json", folder)


def test_legacy_dockerfile_key_and_build_target():
    dc = parse({"dockerFile": "Dockerfile", "context": "..", "build": {"target": "dev", "args": {"A": "1"}}})
    assert (dc.dockerfile, dc.context, dc.target, dc.build_args) == (".devcontainer/Dockerfile", ".", "dev",
                                                                      {"A": "1"})
    with pytest.raises(ProfileError, match="not a stage name"):
        parse({"build": {"dockerfile": "D", "target": "x;y"}})


def test_mount_forms_string_and_object():
    dc = parse({"image": "x:1", "mounts": [
        "type=bind,source=/data/sets,target=/data,readonly",
        {"type": "bind", "source": "/scratch/me", "target": "/scratch"},
        "source=pipcache,target=/home/dev/.cache/pip,type=volume",
        {"type": "tmpfs", "target": "/tmp/fast"},
        "type=bind,source=${localWorkspaceFolder}/data,target=/d",
        "type=bind,source=/data/x,target=/x,bind-propagation=rshared",
        {"type": "npipe", "source": "a", "target": "/b"},
    ]})
    assert [(m.type, m.source, m.target, m.readonly) for m in dc.mounts] == [
        ("bind", "/data/sets", "/data", True), ("bind", "/scratch/me", "/scratch", False),
        ("tmpfs", "", "/tmp/fast", False), ("bind", "/data/x", "/x", False)]
    assert dc.volumes == {"pipcache": "/home/dev/.cache/pip"}
    notes = "\n".join(dc.not_honoured)
    assert "a path on this machine" in notes and "use `devenv sync`" in notes      # named, not dropped
    assert "option bind-propagation not honoured" in notes
    assert "type 'npipe' is not supported" in notes


@pytest.mark.parametrize("source", ["/", "/etc", "/etc/ssl", "/root/x", "/var/run/docker.sock",
                                    "/run/podman/podman.sock", "/var/lib/docker/volumes", "/home", "/home/alice",
                                    "/home/alice/.ssh", "/data/.aws/creds", "/proc/1", "/usr/lib", "/data/../etc",
                                    "/srv/app.sock", "relative/path", "/a:b"])
def test_unsafe_host_paths_are_refused(source):
    with pytest.raises(ProfileError, match="mount"):
        parse({"image": "x:1", "mounts": [f"type=bind,source={source},target=/mnt/x"]})


@pytest.mark.parametrize("target", ["/", "/etc/devenv", "/etc/ssh/sshd_config.d", "/opt/venv", "/usr/local/bin",
                                    "/etc/passwd", "relative"])
def test_mounts_over_devenvs_own_files_are_refused(target):
    with pytest.raises(ProfileError):
        parse({"image": "x:1", "mounts": [f"type=bind,source=/data/x,target={target}"]})


def test_a_mount_on_the_workspace_is_refused_at_overlay():
    dc = parse({"image": "x:1", "mounts": ["type=bind,source=/data/x,target=/workspace"]})
    with pytest.raises(ProfileError, match="workspace"):
        devcontainer.overlay(ENV, dc)


def test_remote_user_over_container_user_and_bad_names():
    dc = parse({"image": "x:1", "remoteUser": "dev", "containerUser": "svc"})
    assert dc.remote_user == "dev" and any("containerUser svc" in n for n in dc.not_honoured)
    assert parse({"image": "x:1", "containerUser": "svc"}).remote_user == "svc"
    with pytest.raises(ProfileError):
        parse({"image": "x:1", "remoteUser": "-oProxyCommand=x"})


def test_overlay_with_an_image_mounts_and_user():
    dc = parse({"image": "mcr.microsoft.com/devcontainers/python:3", "remoteUser": "vscode",
                "mounts": ["type=bind,source=/data/x,target=/data", "source=cache,target=/c,type=volume"]})
    env, _ = devcontainer.overlay(ENV, dc)
    assert env.build.args["BASE_IMAGE"] == "mcr.microsoft.com/devcontainers/python:3"
    assert env.build.args["TORCH_VERSION"] == "2.8.0" and env.project_build is None
    assert env.user == "vscode" and env.volumes == {"workspace": "/workspace", "dc-cache": "/c"}
    spec = envspec.desired_spec(env, "sha256:i", "k")
    assert spec["user"] == "vscode" and spec["mounts"] == [["bind", "/data/x", "/data", False]]
    request = envspec.container_request(spec, "me", "h", "v")
    assert request.mounts == (("bind", "/data/x", "/data", False),) and request.user == "vscode"
    assert request.environment["DEVENV_USER"] == "vscode"
    assert request.environment["DEVENV_USER_DIRS"] == "/c:/workspace"
    assert image_context.build_args(env, image_context.BuildInputs())["DEVENV_USER"] == "vscode"


def test_an_environment_without_user_mounts_or_packages_keeps_its_spec_hash():
    """Environments made before these fields exist must not be asked to recreate."""
    plain = envspec.desired_spec(ENV, "sha256:i", "k")
    assert "user" not in plain and "mounts" not in plain
    assert image_context.content_hash(ENV) == ""
    assert "DEVENV_USER" not in image_context.build_args(ENV, image_context.BuildInputs())


def _project(tmp_path):
    root = tmp_path / "proj"
    (root / ".devcontainer").mkdir(parents=True)
    (root / ".devcontainer" / "Dockerfile").write_text("FROM debian\nCOPY . /src\n")
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("a = 1\n")
    (root / "data.bin").write_bytes(b"x" * 10)
    (root / "notes").mkdir()
    (root / "notes" / "keep.md").write_text("keep\n")
    (root / "notes" / "drop.md").write_text("drop\n")
    (root / ".dockerignore").write_text("# comment\n*.bin\nnotes\n!notes/keep.md\n")
    secret = tmp_path / "outside-secret"
    secret.write_text("PRIVATE\n")
    os.symlink(secret, root / "link-out")
    os.mkfifo(root / "a-fifo")
    return root, secret


def test_the_context_is_the_projects_files_dockerignore_honoured_links_sent_as_links(tmp_path):
    root, secret = _project(tmp_path)
    pc = project_context.resolve(root, ".", ".devcontainer/Dockerfile")
    fileobj, dockerfile = project_context.make_tar(pc)
    with tarfile.open(fileobj=fileobj) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile(members[dockerfile]).read() == b"FROM debian\nCOPY . /src\n"
    assert "src/a.py" in members and "notes/keep.md" in members
    assert "data.bin" not in members and "notes/drop.md" not in members and "a-fifo" not in members
    link = members["link-out"]
    assert link.issym() and link.linkname == str(secret)      # the link, never the file it points at
    fileobj.seek(0)
    assert b"PRIVATE" not in fileobj.read()
    # the digest follows the content: a change rebuilds, an ignored file does not
    before = pc.digest
    (root / "data.bin").write_bytes(b"y")
    assert project_context.resolve(root, ".", ".devcontainer/Dockerfile").digest == before
    (root / "src" / "a.py").write_text("a = 2\n")
    assert project_context.resolve(root, ".", ".devcontainer/Dockerfile").digest != before


def test_a_context_or_dockerfile_that_leads_out_of_the_project_is_refused(tmp_path):
    root, _ = _project(tmp_path)
    os.symlink(tmp_path, root / "up")
    with pytest.raises(ProfileError, match="outside the project folder"):
        project_context.resolve(root, "up", ".devcontainer/Dockerfile")
    (tmp_path / "Dockerfile.evil").write_text("FROM x\n")
    os.symlink(tmp_path / "Dockerfile.evil", root / "Dockerfile")
    with pytest.raises(ProfileError, match="outside the project folder"):
        project_context.resolve(root, ".", "Dockerfile")


def test_overlay_of_a_dockerfile_build_tags_by_content(tmp_path):
    root, _ = _project(tmp_path)
    dc = parse({"name": "Trainer", "build": {"dockerfile": "Dockerfile", "context": "..", "args": {"PY": "3.11"}}})
    digest = project_context.resolve(root, dc.context, dc.dockerfile).digest
    env, notes = devcontainer.overlay(ENV, dc, str(root), digest)
    build = env.project_build
    assert build is not None and build.tag.startswith("devenv-dc-base/trainer:")
    assert build.args == {"PY": "3.11"} and build.project_root == str(root)
    assert env.build.args["BASE_IMAGE"] == build.tag and "PY" not in env.build.args   # args are the project's
    assert env.image.startswith("devenv-dc/trainer:")
    other, _ = devcontainer.overlay(ENV, dc, str(root), "another-digest")
    assert other.project_build.tag != build.tag and other.image != env.image
    assert not any("build" in n for n in notes)


def test_the_ssh_entry_names_the_environments_user(tmp_path):
    from devenv.config.profiles import HostProfile
    from devenv.errors import BadInput
    from devenv.remote import openssh

    host = HostProfile(name="h", source="t", local=True)
    block = openssh.env_config_entry("devenv-h-e", host, 2222, tmp_path / "k", tmp_path / "kh", "ssh", "dev")
    assert "  User dev\n" in block and "User root" not in block
    with pytest.raises(BadInput):
        openssh.env_config_entry("devenv-h-e", host, 2222, tmp_path / "k", tmp_path / "kh", "ssh", "-oProxy=x")


def test_podman_gets_the_same_mounts():
    from devenv.config.profiles import MountSpec
    from devenv.runtimes.docker_runtime import podman_create_spec

    env = EnvProfile(name="e", source="t", image="x:1", user="dev",
                     mounts=(MountSpec("bind", target="/srv/d", source="/data", readonly=True),))
    request = envspec.container_request(envspec.desired_spec(env, "sha256:i", "k"), "me", "h", "v")
    spec = podman_create_spec(request)
    assert spec["mounts"] == [{"destination": "/srv/d", "type": "bind", "source": "/data", "options": ["rbind", "ro"]}]
    assert spec["env"]["DEVENV_USER"] == "dev"


def test_up_refuses_an_unsafe_mount_as_bad_input_before_connecting(isolated_home, tmp_path, monkeypatch):
    """A cloned repository's devcontainer.json asking for the host's Docker socket: exit 2, nothing touched
    (the host is unreachable: reaching it would be exit 3)."""
    from click.testing import CliRunner

    from devenv.cli import main

    project = tmp_path / "evil"
    (project / ".devcontainer").mkdir(parents=True)
    (project / ".devcontainer" / "devcontainer.json").write_text(json.dumps(
        {"image": "x:1", "mounts": ["type=bind,source=/var/run/docker.sock,target=/var/run/docker.sock"]}))
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, ["up", "nohost.invalid", "--detach"])
    assert result.exit_code == 2, result.output
    assert "refused: the host path /var/run/docker.sock is under /var/run" in result.output


def test_lifecycle_commands_in_the_specs_order():
    dc = parse({"image": "x:1", "onCreateCommand": "echo 1", "updateContentCommand": ["echo", "2"],
                "postCreateCommand": {"a": "echo 3"}, "postStartCommand": "echo 4", "postAttachCommand": "echo 5"})
    assert (dc.on_create, dc.update_content, dc.post_create, dc.post_start, dc.post_attach) == (
        ("echo 1",), ("echo 2",), ("echo 3",), ("echo 4",), ("echo 5",))
    assert not any(note.startswith("postAttachCommand") for note in dc.not_honoured)  # run at every `up`
