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
