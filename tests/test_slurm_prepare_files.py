"""The Slurm env's files in one round trip (HostRuntime.prepare_in_one), run for real by bash on this machine
(LocalConnection) in a temporary $HOME: what `up` writes before sbatch, and what it keeps."""

from __future__ import annotations

import stat
import sys

import pytest

from devenv.config.profiles import HostProfile
from devenv.errors import DevenvError
from devenv.remote.local import LocalConnection
from devenv.runtimes.host_runtime import HostRuntime
from devenv.services.environments.slurm.backend import _FACTS, SlurmEnvironments

FAKE_FACTS = 'import json, sys\nprint(json.dumps({"python": "3.x", "jupyterlab": %s}))\nsys.exit(%d)\n'


def _runtime(monkeypatch, tmp_path) -> HostRuntime:
    monkeypatch.setenv("HOME", str(tmp_path))
    return HostRuntime(LocalConnection(), HostProfile(name="box", source="t", local=True, python=sys.executable))


def test_one_round_trip_writes_private_files_and_keeps_a_valid_token(monkeypatch, tmp_path):
    files = _runtime(monkeypatch, tmp_path)
    calls = []
    run = files.conn.run
    monkeypatch.setattr(files.conn, "run", lambda *a, **kw: calls.append(a[0]) or run(*a, **kw))
    first = files.prepare_in_one("me-env", "~/devenv-workspaces/env", "a" * 48, FAKE_FACTS % ('"4.6"', 0),
                                 {"launch.py": b"print('launcher')\n"}, lambda facts: None)
    assert len(calls) == 1
    assert first.token == "a" * 48 and first.home == str(tmp_path) and first.facts["jupyterlab"] == "4.6"
    env_dir = tmp_path / ".devenv" / "envs" / "me-env"
    assert stat.S_IMODE(env_dir.stat().st_mode) == 0o700
    for name in ("jupyter_token", "jupyter_server_config.py", "launch.py"):
        assert stat.S_IMODE((env_dir / name).stat().st_mode) == 0o600, name
    assert (env_dir / "jupyter_token").read_text() == "a" * 48 + "\n"
    assert (env_dir / "launch.py").read_text() == "print('launcher')\n"
    assert "IdentityProvider.token" in (env_dir / "jupyter_server_config.py").read_text()
    assert (tmp_path / "devenv-workspaces" / "env").is_dir()
    again = files.prepare_in_one("me-env", "~/devenv-workspaces/env", "b" * 48, FAKE_FACTS % ('"4.6"', 0),
                                 {"launch.py": b"v2\n"}, lambda facts: None)
    assert again.token == "a" * 48                       # the token in force is kept (a running job reads it)
    assert (env_dir / "launch.py").read_text() == "v2\n"
    assert "a" * 48 not in calls[0]                      # never on the command line


def test_no_jupyterlab_stops_before_anything_is_written(monkeypatch, tmp_path):
    files = _runtime(monkeypatch, tmp_path)
    svc = SlurmEnvironments(HostProfile(name="box", source="t", local=True, python=sys.executable),
                            files.conn, None, files)
    with pytest.raises(DevenvError, match="has no JupyterLab"):
        files.prepare_in_one("me-env", "~/devenv-workspaces/env", "a" * 48, FAKE_FACTS % ("None", 3), {},
                             svc._need_jupyterlab)
    assert not (tmp_path / ".devenv").exists()


def test_a_python_that_does_not_run_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    files = HostRuntime(LocalConnection(), HostProfile(name="box", source="t", local=True,
                                                       python=str(tmp_path / "no-python")))
    with pytest.raises(DevenvError, match="does not run on box") as caught:
        files.prepare_in_one("me-env", "~/ws", "a" * 48, _FACTS, {}, lambda facts: None)
    assert "python:" in (caught.value.hint or "")
    assert not (tmp_path / ".devenv").exists()


def test_a_job_found_running_keeps_its_jupyters_token_or_says_there_is_none():
    """The files' round trip now runs beside the job lookup: a token it had to write anew (none was there) is
    not the running Jupyter's, so reattaching with it would hand out a URL that answers 403."""
    from types import SimpleNamespace

    from devenv.env import state as envstate
    from devenv.runtimes.host_runtime import PreparedFiles
    from devenv.services.background import Background

    fake = SimpleNamespace(host=SimpleNamespace(name="cl"), _token=lambda env: "from-the-file")
    fake._no_token = lambda env: SlurmEnvironments._no_token(fake, env)  # type: ignore[arg-type]
    kept = "k" * 40
    found = Background(lambda: PreparedFiles({}, kept, "/home/u"), "test")
    assert SlurmEnvironments._reattach_token(fake, "e", found, "f" * 40) == kept   # type: ignore[arg-type]
    written = Background(lambda: PreparedFiles({}, "f" * 40, "/home/u"), "test")
    with pytest.raises(DevenvError, match="no Jupyter token for 'e' on cl"):
        SlurmEnvironments._reattach_token(fake, "e", written, "f" * 40)   # type: ignore[arg-type]

    def python_check_failed():
        raise DevenvError("no jupyterlab", "install it")

    failed = Background(python_check_failed, "test")
    assert SlurmEnvironments._reattach_token(fake, "e", failed, "f" * 40) == "from-the-file"  # type: ignore[arg-type]
    envstate.update("cl", "e", token="c" * 40)
    assert SlurmEnvironments._reattach_token(fake, "e", written, "f" * 40) == "c" * 40   # type: ignore[arg-type]
