"""A signal that comes after the URL is printed, before the tunnel's loop has taken over (a `kill` right after
the URL, while hold() is still being set up), closes the tunnel and ends with 0, as one during hold() does:
not "Interrupted" and 130/143, as if the environment had not been made (test_env_idempotent's `up` saw 143 under
load in a full run)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

from click.testing import CliRunner

from devenv.cli import jupyter_cmd, main


def test_an_interrupt_between_the_url_and_the_held_tunnel_closes_it_with_0(monkeypatch):
    forward = SimpleNamespace(local_port=18888)
    tunnel = SimpleNamespace(forwards=[forward], kind="ssh")
    access = SimpleNamespace(port=8888, status=SimpleNamespace(env="cpu"))

    class Session:
        env = SimpleNamespace(name="cpu")
        backend = SimpleNamespace(jupyter_access=lambda name: access)

        def open_jupyter(self, access, local_port=None):
            return "http://127.0.0.1:18888/lab?token=t0ken", tunnel

    @contextlib.contextmanager
    def open_env(host, env, accept_new_host=False):
        yield Session()

    def reopen_jupyter(*args, **kwargs):
        raise KeyboardInterrupt   # the signal, after the URL and before hold() took it

    def hold(*args, **kwargs):
        raise AssertionError("hold() must not be reached: the interrupt came before it")

    monkeypatch.setattr(jupyter_cmd, "open_env", open_env)
    monkeypatch.setattr(jupyter_cmd, "reopen_jupyter", reopen_jupyter)
    monkeypatch.setattr(jupyter_cmd, "hold", hold)
    done = CliRunner().invoke(main, ["jupyter", "box"])
    assert done.exit_code == 0, (done.exit_code, done.output)
    assert "http://127.0.0.1:18888/lab?token=t0ken" in done.stdout
    assert "Tunnels closed." in done.stderr and "Interrupted" not in done.stderr
