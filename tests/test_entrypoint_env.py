"""The environment's own variables reach ssh sessions (issue 28, point 2): the image's entrypoint writes them
into sshd's SetEnv (exec with stdin, `devenv ssh`, login shells and VS Code go through sshd, which starts
sessions with a fresh environment). Run here with the real sh and checked by the real sshd's config test."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from devenv.config.profiles import EnvProfile
from devenv.env import spec as envspec

IMAGES = Path(__file__).resolve().parents[1] / "images"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _setenv_step() -> str:
    """The entrypoint's own lines that make sshd's SetEnv line: the loop over the variables (from `extra=$(env`
    to its `done`) and the sed that writes the line, pointed at a copy of the config here."""
    text = (IMAGES / "entrypoint.sh").read_text()
    start = text.index("    extra=$(env")
    loop = text[start:text.index("\n    done\n", start) + len("\n    done\n")]
    sed_at = text.index('    sed -i "s|^SetEnv', start)
    sed = text[sed_at:text.index("/etc/ssh/sshd_config.d/00-devenv.conf", sed_at)] + "conf\n"
    return loop + sed


def test_the_container_request_names_the_environments_variables():
    env = EnvProfile(name="e", source="t", image="i:1", env={"B_VAR": "2", "A_VAR": "1"})
    spec = envspec.desired_spec(env, "sha256:x", "fp")
    request = envspec.container_request(spec, "o", "h", "v")
    assert request.environment["DEVENV_ENV_VARS"] == "A_VAR B_VAR" and request.environment["A_VAR"] == "1"
    bare = envspec.container_request(envspec.desired_spec(EnvProfile(name="e", source="t", image="i:1"), "x", "f"),
                                     "o", "h", "v")
    assert "DEVENV_ENV_VARS" not in bare.environment


@pytest.mark.skipif(not Path(SSHD).exists(), reason="sshd is installed by testhost/setup")
def test_the_entrypoint_gives_them_to_sshd_and_names_what_it_cannot_carry(tmp_path):
    conf = tmp_path / "conf"
    shutil.copy(IMAGES / "sshd_devenv.conf", conf)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "hk")], check=True)
    environ = {"PATH": "/usr/bin:/bin", "DEVENV_ENV": "x", "DEVENV_ENV_VARS": "DC_MODE DC_SPACED BAD_Q DC_EMPTY",
               "DC_MODE": "project", "DC_SPACED": "a b=c,d", "BAD_Q": 'say "hi"; rm -rf /', "DC_EMPTY": ""}
    done = subprocess.run(["sh", "-c", _setenv_step()], cwd=tmp_path, env=environ, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "BAD_Q is not given to ssh sessions" in done.stderr
    check = subprocess.run([SSHD, "-T", "-f", str(conf), "-h", str(tmp_path / "hk"), "-C",
                            "user=root,host=x,addr=127.0.0.1"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    setenv = re.findall(r"^setenv (.*)$", check.stdout, re.M)
    assert {"DC_MODE=project", "DC_SPACED=a b=c,d", "DC_EMPTY=", "DEVENV_ENV=x"} <= set(setenv), setenv
    assert not any(v.startswith("BAD_Q") for v in setenv) and setenv[0].startswith("PATH=/opt/venv/bin")
