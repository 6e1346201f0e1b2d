"""The build context sent to a host (L0): bundled files, the optional CA bundle and wheelhouse, build args."""

from __future__ import annotations

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
