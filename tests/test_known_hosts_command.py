"""KnownHostsCommand as OpenSSH 9.2 runs it: real commands (sh scripts) print known_hosts lines that devenv
trusts, refuses (@revoked) or, when the command fails, ends the connection on, as ssh does. What ssh itself
passes the command on the same config is compared in tests/integration/test_openssh_parity.py."""

from __future__ import annotations

import base64
import subprocess

import pytest

from devenv.errors import HostKeyError
from devenv.remote import hostkeys, known_hosts_command
from devenv.remote.sshconfig import from_options
from devenv.remote.sshlib import paramiko


@pytest.fixture
def key(tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "hostkey")], check=True)
    key_type, b64 = (tmp_path / "hostkey.pub").read_text().split()[:2]
    return paramiko.PKey.from_type_string(key_type, base64.b64decode(b64))


def script(tmp_path, body: str, name: str = "keys") -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def hop(tmp_path, command: str, **more):
    (tmp_path / "kh").touch()
    return from_options({"hostname": "gpu.example", "port": "2222", "user": "me",
                         "userknownhostsfile": str(tmp_path / "kh"), "knownhostscommand": command, **more},
                        "gpu", "gpu")


def line(key, name="[gpu.example]:2222", marker="") -> str:
    return f"{marker}{name} {key.get_name()} {base64.b64encode(key.asbytes()).decode()}"


def test_the_commands_key_is_trusted_and_it_gets_ssh_s_tokens(tmp_path, key):
    log = tmp_path / "args"
    cmd = script(tmp_path, f'printf "%s\\n" "$@" > {log}\necho "{line(key)}"\n')
    target = hop(tmp_path, f'{cmd} %H %I %t %f "%K" "two words" %r@%h:%p ${{HOME}}')
    assert hostkeys.verify_hop(target, key, accept_new=False) == "known"
    assert log.read_text().splitlines() == [
        "[gpu.example]:2222", "HOSTNAME", "ssh-ed25519", hostkeys.fingerprint(key.asbytes()),
        base64.b64encode(key.asbytes()).decode(), "two words", "me@gpu.example:2222",
        str(__import__("os").environ["HOME"])]
    assert not (tmp_path / "kh").read_text()          # nothing recorded: the command is the source


def test_before_a_key_is_known_the_key_tokens_are_NONE(tmp_path):
    log = tmp_path / "args"
    cmd = script(tmp_path, f'printf "%s\\n" "$@" > {log}\n')
    asked = known_hosts_command.run(hop(tmp_path, f"{cmd} %H %I %t %f %K"), "ORDER", "gpu.example")
    assert asked.keys == [] and asked.problem is None
    assert log.read_text().splitlines() == ["gpu.example", "ORDER", "NONE", "NONE", "NONE"]


def test_a_revoked_line_from_the_command_refuses_the_key(tmp_path, key):
    cmd = script(tmp_path, f'echo "{line(key)}"\necho "{line(key, "*", "@revoked ")}"\n')
    with pytest.raises(HostKeyError, match="revoked"):
        hostkeys.verify_hop(hop(tmp_path, cmd), key, accept_new=False)


def test_a_failing_command_ends_the_connection_with_its_stderr(tmp_path, key):
    cmd = script(tmp_path, f'echo "{line(key)}"\necho "vault sealed" >&2\nexit 3\n')
    with pytest.raises(HostKeyError) as caught:
        hostkeys.verify_hop(hop(tmp_path, cmd), key, accept_new=True)    # even with consent to a new key
    assert "exited with code 3: vault sealed" in caught.value.message and cmd in caught.value.hint


def test_a_command_that_cannot_be_executed_ends_the_connection(tmp_path, key):
    path = tmp_path / "not-executable"
    path.write_text("echo hi\n")
    with pytest.raises(HostKeyError, match="cannot be executed"):
        hostkeys.verify_hop(hop(tmp_path, str(path)), key, accept_new=True)


@pytest.mark.parametrize("command, why", [
    ("/nonexistent/keys %H", "does not exist"),
    ("keys %H", "is not absolute"),
])
def test_a_command_ssh_would_not_run_gives_no_keys_and_the_unknown_key_error_says_why(tmp_path, key, command, why):
    with pytest.raises(HostKeyError) as caught:
        hostkeys.verify_hop(hop(tmp_path, command), key, accept_new=False)
    assert "not known" in caught.value.message and why in caught.value.hint


def test_bad_quotes_and_unknown_tokens_are_errors_not_a_shell(tmp_path, key):
    with pytest.raises(HostKeyError, match="invalid quotes"):
        hostkeys.verify_hop(hop(tmp_path, '/bin/echo "open'), key, accept_new=False)
    with pytest.raises(Exception, match="unknown token %Z"):
        hostkeys.verify_hop(hop(tmp_path, "/bin/echo %Z"), key, accept_new=False)
    marker = tmp_path / "ran"
    cmd = script(tmp_path, 'printf "%s\\n" "$@"\n')
    # words are arguments, never shell syntax: nothing after ';' runs
    asked = known_hosts_command.run(hop(tmp_path, f"{cmd} x; touch {marker}"), "ORDER", "gpu.example")
    assert asked.keys == [] and not marker.exists()


def test_none_means_no_command(tmp_path, key):
    assert known_hosts_command.run(hop(tmp_path, "none"), "HOSTNAME", "x", key) == known_hosts_command.CommandKeys()


def test_a_runaway_command_is_stopped_not_read_into_memory(tmp_path, key, monkeypatch):
    monkeypatch.setattr(known_hosts_command, "TIMEOUT_S", 5.0)
    cmd = script(tmp_path, 'exec yes "[gpu.example]:2222 ssh-ed25519 AAAA"\n')
    with pytest.raises(HostKeyError, match="printed more than 1 MiB"):
        hostkeys.verify_hop(hop(tmp_path, cmd), key, accept_new=False)


def test_a_command_that_hangs_is_stopped_at_the_time_limit(tmp_path, key, monkeypatch):
    monkeypatch.setattr(known_hosts_command, "TIMEOUT_S", 0.5)
    cmd = script(tmp_path, "sleep 30\n")
    with pytest.raises(HostKeyError, match="did not finish within 0.5 s"):
        hostkeys.verify_hop(hop(tmp_path, cmd), key, accept_new=False)
