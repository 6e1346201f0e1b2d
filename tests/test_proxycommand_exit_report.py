"""A ProxyCommand that dies is quoted with what it wrote to stderr, even when its exit is seen before the
watcher thread has read that stderr (CI, stop 20: "exited with code 7 (no error output)" for a command that
wrote "bastion says no"). Real commands, run by sh."""

from __future__ import annotations

import time

from devenv.remote.dial import ProxySocket


def test_the_stderr_of_a_dead_command_is_quoted_even_when_read_late(monkeypatch):
    watch = ProxySocket._watch

    def late_watch(self):
        time.sleep(0.3)         # the scheduler runs the reader after the command has exited
        watch(self)

    monkeypatch.setattr(ProxySocket, "_watch", late_watch)
    sock = ProxySocket.spawn("""sh -c 'echo "bastion says no" >&2; exit 7'""")
    try:
        sock.proc.wait(5)
        assert sock.exit_report() == "exited with code 7: bastion says no"
    finally:
        sock.close()


def test_a_command_still_running_has_no_report():
    sock = ProxySocket.spawn("sleep 5")
    try:
        assert sock.exit_report(wait=0.1) is None
    finally:
        sock.close()


def test_a_dead_command_whose_child_keeps_stderr_open_is_reported_within_the_wait():
    sock = ProxySocket.spawn("""sh -c 'echo "gone" >&2; sleep 30 & exit 3'""")
    try:
        sock.proc.wait(5)
        assert sock.exit_report(wait=1.0) == "exited with code 3: gone"   # not held for the child's 30 s
    finally:
        sock.close()
