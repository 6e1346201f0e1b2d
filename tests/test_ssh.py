"""The SSH layer against real OpenSSH servers on loopback (tests/sshd_fixture.py), and LocalConnection.

Every failure is checked for one clear message and a hint; nothing reads the real ~/.ssh (HOME,
DEVENV_SSH_CONFIG and DEVENV_KNOWN_HOSTS point at temporary files).
"""

from __future__ import annotations

import linecache
import os
import pty
import pwd
import select
import signal
import stat
import subprocess
import sys
import threading
import time

import not_a_file
import pytest
from sshd_fixture import SSHD, SSHAgent, find_processes, free_port, make_key

from devenv.config import paths
from devenv.config.profiles import HostProfile, SSHTarget
from devenv.errors import (
    CommandFailed,
    CommandTimeout,
    ConnectError,
    DevenvError,
    HostKeyError,
)
from devenv.remote.base import Connection
from devenv.remote.local import LocalConnection
from devenv.remote.pool import close_all, get_connection
from devenv.remote.ssh import SSHConnection

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def ssh_home(tmp_path, monkeypatch, isolated_home):
    """A fake HOME (so ~/.ssh/id_* defaults are ours) and a pool emptied after each test."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    yield home
    close_all()


@pytest.fixture
def key(tmp_path):
    return make_key(tmp_path / "keys" / "id_ed25519")


@pytest.fixture
def server(tmp_path, key):
    with SSHD(tmp_path / "sshd", authorized_keys=[key.public]) as s:
        yield s


def trust(*servers: SSHD) -> None:
    known = paths.known_hosts_path()
    with known.open("a") as f:
        for s in servers:
            f.write(s.known_hosts_line())


def target(server: SSHD, key, **kw) -> SSHTarget:
    fields = dict(hostname="127.0.0.1", port=server.port, user="root", identity_file=str(key.path))
    fields.update(kw)
    return SSHTarget(**fields)


def host(name: str, ssh: SSHTarget) -> HostProfile:
    return HostProfile(name=name, source="test", ssh=ssh)


def clear_error(excinfo, kind=DevenvError) -> DevenvError:
    """The error is a DevenvError of the right kind, with a message and a hint, and chains no traceback."""
    err = excinfo.value
    assert isinstance(err, kind), repr(err)
    assert err.message and err.hint, (err.message, err.hint)
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__), "leaks a traceback"
    return err


# --- commands ------------------------------------------------------------------------------------------

def test_run_returns_stdout_stderr_and_exit_code(server, key):
    trust(server)
    conn = SSHConnection(target(server, key), name="box")
    assert isinstance(conn, Connection)
    assert not conn.is_connected  # lazy: nothing dialled yet
    with conn:
        r = conn.run("echo out; echo err >&2; exit 3")
        assert (r.stdout, r.stderr, r.exit_code, r.ok) == ("out\n", "err\n", 3, False)
        assert r.command == "echo out; echo err >&2; exit 3"
        assert conn.run("printf %s \"$GREETING\"; cat", stdin="world", env={"GREETING": "it's "}
                        ).stdout == "it's world"
        big = os.urandom(3 << 20).hex().encode()  # larger than the SSH window both ways
        assert conn.run("cat", stdin=big).stdout.encode() == big
    conn.close()  # twice is fine
    assert not conn.is_connected


@pytest.mark.parametrize("kind", ["ssh", "local"])
def test_a_background_child_holding_stdout_does_not_hang_run(kind, request):
    """`ssh host 'daemon &'` hangs OpenSSH until the daemon exits; we return ~2 s after the command exits."""
    if kind == "ssh":
        server, key = request.getfixturevalue("server"), request.getfixturevalue("key")
        trust(server)
        conn = SSHConnection(target(server, key), name="box")
    else:
        conn = LocalConnection()
    marker = f"sleep 61{os.getpid()}"
    try:
        r = conn.run(f"{marker} & echo started", timeout=20)
        # returned (no CommandTimeout at 20 s) while the 61 s child still runs: it did not wait for the child
        assert (r.stdout, r.exit_code) == ("started\n", 0)
        assert find_processes(marker, exact=True)  # like ssh, a backgrounded child is left running
    finally:
        conn.close()
        for pid in find_processes(marker, exact=True):
            os.kill(pid, 9)


def test_check_true_raises_command_failed_with_stderr(server, key):
    trust(server)
    with SSHConnection(target(server, key), name="box") as conn, pytest.raises(CommandFailed) as ei:
        conn.run("echo something broke >&2; exit 7", check=True)
    err = ei.value
    assert err.result.exit_code == 7 and "exit code 7" in err.message and "something broke" in err.message


def test_command_timeout_kills_the_remote_command(server, key):
    trust(server)
    marker = f"sleep 31{os.getpid()}"  # unique command line to look for on the (local) sshd host
    with SSHConnection(target(server, key), name="box") as conn:
        with pytest.raises(CommandTimeout) as ei:
            conn.run(f"{marker} || true; sleep 30", timeout=1)
        err = clear_error(ei, CommandTimeout)
        assert "timed out after 1s on box" in err.message
        assert _gone(marker), f"remote command still running: {find_processes(marker)}"
        assert conn.run("echo still usable").stdout == "still usable\n"


def test_stream_yields_lines_and_closing_stops_the_remote_loop(server, key):
    trust(server)
    marker = f"STREAM{os.getpid()}"
    with SSHConnection(target(server, key), name="box") as conn:
        lines = conn.stream(f"while true; do date +%s%N; sleep 0.1; done  # {marker}")
        stamps = [int(next(lines)) for _ in range(5)]
        assert stamps == sorted(stamps) and stamps[-1] - stamps[0] >= 0.3e9  # live, ~0.1 s apart
        assert find_processes(marker), "the loop should be running while we read"
        lines.close()
        assert _gone(marker), f"remote loop survived closing the stream: {find_processes(marker)}"
        assert list(conn.stream("printf 'a\\nb\\nlast'")) == ["a", "b", "last"]
        with pytest.raises(CommandFailed) as ei:
            list(conn.stream("echo one; echo no gpu >&2; exit 9"))
        assert "no gpu" in ei.value.message
        with pytest.raises(CommandTimeout):
            list(conn.stream(f"echo first; sleep 30 # {marker}", timeout=0.5))
        assert _gone(marker)


def test_put_writes_a_file_with_its_mode(server, key, tmp_path):
    trust(server)
    dest = tmp_path / "remote" / "token"
    dest.parent.mkdir()
    with SSHConnection(target(server, key), name="box") as conn:
        conn.put(b"s3cret\n\x00binary", str(dest), mode=0o600)
        assert dest.read_bytes() == b"s3cret\n\x00binary"
        assert stat.S_IMODE(dest.stat().st_mode) == 0o600
        conn.put(b"v2", str(dest), mode=0o640)  # replaces atomically, no temp left behind
        assert dest.read_bytes() == b"v2" and stat.S_IMODE(dest.stat().st_mode) == 0o640
        assert [p.name for p in dest.parent.iterdir()] == ["token"]
        with pytest.raises(DevenvError) as ei:
            conn.put(b"x", str(tmp_path / "missing-dir" / "f"))
        assert "cannot write" in clear_error(ei).message
    assert "s3cret" not in server.log_text()  # data went over stdin, not a command line


def test_probe_forwarding_tells_whether_sshd_allows_tunnels(tmp_path, key):
    with SSHD(tmp_path / "open", authorized_keys=[key.public]) as open_sshd, \
         SSHD(tmp_path / "closed", authorized_keys=[key.public], extra_config="AllowTcpForwarding no") as closed:
        trust(open_sshd, closed)
        with SSHConnection(target(open_sshd, key), name="open") as conn:
            assert conn.probe_forwarding()[0] is True
        with SSHConnection(target(closed, key), name="closed") as conn:
            allowed, detail = conn.probe_forwarding()
            assert allowed is False and "prohibited" in detail


# --- host keys -----------------------------------------------------------------------------------------

def test_unknown_host_key_is_refused_with_its_fingerprint(server, key):
    conn = SSHConnection(target(server, key), name="box")
    with pytest.raises(HostKeyError) as ei:
        conn.run("true")
    err = clear_error(ei, HostKeyError)
    assert server.host_key_fingerprint() in err.message  # same as `ssh-keygen -lf` on the host
    assert "ED25519" in err.message and f"[127.0.0.1]:{server.port}" in err.message
    assert "--accept-new-host" in err.hint and "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub" in err.hint
    assert "Accepted publickey" not in server.log_text()  # no key offered to an unverified host
    assert not paths.known_hosts_path().exists()


def test_accept_new_host_records_the_key_then_it_is_known(server, key, ssh_home):
    known = ssh_home / ".ssh" / "devenv" / "known_hosts"  # a directory that does not exist yet
    os.environ["DEVENV_KNOWN_HOSTS"] = str(known)
    with SSHConnection(target(server, key), name="box", accept_new_host=True) as conn:
        assert conn.run("echo ok").stdout == "ok\n"
    assert known.read_text() == server.known_hosts_line()
    assert stat.S_IMODE(known.stat().st_mode) == 0o600 and stat.S_IMODE(known.parent.stat().st_mode) == 0o700
    out = subprocess.run(["ssh-keygen", "-F", f"[127.0.0.1]:{server.port}", "-f", str(known)],
                         capture_output=True, text=True)
    assert out.returncode == 0  # OpenSSH reads what we wrote
    with SSHConnection(target(server, key), name="box") as conn:  # without the flag: now simply known
        assert conn.run("echo again").stdout == "again\n"
    assert known.read_text() == server.known_hosts_line()  # recorded once


def test_hashed_known_hosts_entry_is_honoured(server, key):
    trust(server)
    subprocess.run(["ssh-keygen", "-H", "-f", str(paths.known_hosts_path())], check=True, capture_output=True)
    assert paths.known_hosts_path().read_text().startswith("|1|")
    with SSHConnection(target(server, key), name="box") as conn:
        assert conn.run("echo ok").stdout == "ok\n"


def test_changed_host_key_is_refused_even_with_accept_new(server, key, tmp_path):
    impostor = make_key(tmp_path / "old_host_key")
    kind, blob = impostor.public.split()[:2]
    paths.known_hosts_path().write_text(f"[127.0.0.1]:{server.port} {kind} {blob}\n")
    before = paths.known_hosts_path().read_text()
    conn = SSHConnection(target(server, key), name="box", accept_new_host=True)
    with pytest.raises(HostKeyError) as ei:
        conn.run("true")
    err = clear_error(ei, HostKeyError)
    assert "CHANGED" in err.message
    assert impostor.fingerprint() in err.message and server.host_key_fingerprint() in err.message
    assert "ssh-keygen" in err.hint and "-R" in err.hint
    assert paths.known_hosts_path().read_text() == before  # never overwritten


# --- authentication and reachability -------------------------------------------------------------------

def test_wrong_client_key_is_an_auth_error_naming_the_key(server, tmp_path):
    trust(server)
    stranger = make_key(tmp_path / "stranger" / "id_ed25519")
    with pytest.raises(ConnectError) as ei:
        SSHConnection(target(server, stranger), name="box").run("true")
    err = clear_error(ei, ConnectError)
    assert "authentication to root@127.0.0.1" in err.message and "refused every key" in err.message
    assert str(stranger.path) in err.message and stranger.fingerprint() in err.message
    assert "ssh-copy-id" in err.hint and "IdentityFile" in err.hint and "ssh-agent" in err.hint
    assert not isinstance(err, HostKeyError)


def test_default_identity_comes_from_the_passwd_home_not_HOME_like_ssh(server, key, ssh_home):
    """ssh looks for ~/.ssh/id_* in the real uid's passwd home and ignores $HOME; so does devenv. Here $HOME
    (a temp dir) holds an authorized default key: neither ssh nor devenv uses it."""
    trust(server)
    assert str(ssh_home) != pwd.getpwuid(os.getuid()).pw_dir
    os.link(key.path, ssh_home / ".ssh" / "id_ed25519")
    ssh = subprocess.run(["ssh", "-F", "none", "-o", "BatchMode=yes",
                          "-o", f"UserKnownHostsFile={paths.known_hosts_path()}",
                          "-p", str(server.port), "root@127.0.0.1", "true"], capture_output=True, timeout=30)
    with pytest.raises(ConnectError) as ei:
        SSHConnection(target(server, key, identity_file=None), name="box").run("true")
    assert ssh.returncode != 0 and "no key to offer" in ei.value.message


def test_no_key_at_all_says_how_to_make_one(server):
    trust(server)
    with pytest.raises(ConnectError) as ei:
        SSHConnection(SSHTarget(hostname="127.0.0.1", port=server.port, user="root"), name="box").run("true")
    err = clear_error(ei, ConnectError)
    assert "no key to offer" in err.message and "SSH_AUTH_SOCK is unset" in err.message
    assert "ssh-keygen" in err.hint


def test_closed_port_is_a_clear_unreachable_error(key):
    port = free_port()
    conn = SSHConnection(SSHTarget(hostname="127.0.0.1", port=port, user="root", identity_file=str(key.path)),
                         name="box")
    with pytest.raises(ConnectError) as ei:
        conn.run("true")
    err = clear_error(ei, ConnectError)
    assert f"127.0.0.1:{port}" in err.message and "connection refused" in err.message
    assert f"port {port}" in err.hint


def test_dialling_ahead_is_one_connection_and_its_failure_is_the_first_commands_error(server, key):
    """`up` dials while it still prepares (dial_ahead): the commands then use that connection; a dial that
    failed is raised once by the first command, with the same message and hint as without dialling ahead."""
    trust(server)
    conn = SSHConnection(target(server, key), name="box")
    conn.dial_ahead()
    conn.dial_ahead()  # once is enough: no second dial
    assert conn.run("echo one").stdout == "one\n"
    assert server.log_text().count("Accepted publickey") == 1
    conn.close()

    port = free_port()
    refused = SSHTarget(hostname="127.0.0.1", port=port, user="root", identity_file=str(key.path))
    with pytest.raises(ConnectError) as plain:
        SSHConnection(refused, name="box").run("true")
    ahead = SSHConnection(refused, name="box")
    ahead.dial_ahead()
    with pytest.raises(ConnectError) as first:
        ahead.run("true")
    assert (clear_error(first, ConnectError).message, first.value.hint) == (plain.value.message, plain.value.hint)
    with pytest.raises(ConnectError):  # dialled again, as any later command does after a failure
        ahead.run("true")


def test_unknown_host_name_is_a_clear_dns_error(key):
    with pytest.raises(ConnectError) as ei:
        SSHConnection(SSHTarget(hostname="no-such-host.invalid", user="root"), name="box").run("true")
    assert "cannot resolve host name 'no-such-host.invalid'" in clear_error(ei, ConnectError).message


def test_encrypted_key_without_a_terminal_says_to_use_ssh_agent(server, tmp_path, monkeypatch):
    trust(server)
    locked = make_key(tmp_path / "locked" / "id_ed25519", passphrase="correct horse")
    server.authorized_keys_path.write_text(locked.public + "\n")
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # a real non-terminal stdin
    with pytest.raises(ConnectError) as ei:
        SSHConnection(target(server, locked), name="box").run("true")
    sys.stdin.close()
    err = clear_error(ei, ConnectError)
    assert "encrypted" in err.message and str(locked.path) in err.message
    assert f"ssh-add {locked.path}" in err.hint


def test_encrypted_key_passphrase_is_asked_on_a_terminal(server, tmp_path):
    """A child process on a real pty (its controlling terminal) is asked for the passphrase, as ssh asks."""
    trust(server)
    locked = make_key(tmp_path / "locked" / "id_ed25519", passphrase="correct horse")
    server.authorized_keys_path.write_text(locked.public + "\n")
    script = (f"from devenv.config.profiles import SSHTarget\nfrom devenv.remote.ssh import SSHConnection\n"
              f"t = SSHTarget(hostname='127.0.0.1', port={server.port}, user='root', "
              f"identity_file={str(locked.path)!r})\n"
              f"print('RESULT', SSHConnection(t, name='box').run('echo unlocked').stdout.strip())\n")
    pid, fd = pty.fork()
    if pid == 0:  # the child: a new session whose controlling terminal is the pty
        os.execvpe(sys.executable, [sys.executable, "-c", script], dict(os.environ))
    output = _read_pty_until(fd, b"Enter passphrase for key")
    os.write(fd, b"correct horse\n")
    output += _read_pty_until(fd, b"RESULT unlocked")
    status = os.waitpid(pid, 0)[1]  # before closing the terminal, which would SIGHUP the child
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, output
    assert f"Enter passphrase for key '{locked.path}'".encode() in output
    assert b"correct horse" not in output  # not echoed


def test_encrypted_key_works_through_a_real_ssh_agent(server, tmp_path, monkeypatch):
    trust(server)
    locked = make_key(tmp_path / "locked" / "id_ed25519", passphrase="correct horse")
    other = make_key(tmp_path / "other" / "id_ed25519")
    server.authorized_keys_path.write_text(locked.public + "\n")
    paths.ssh_config_path().write_text("Host box\n  IdentitiesOnly yes\n")
    monkeypatch.setattr(sys, "stdin", open(os.devnull))
    with SSHAgent(tmp_path / "agent") as agent:
        agent.add(other.path)  # offered first by an agent, but IdentitiesOnly must skip it
        agent.add(locked.path, passphrase="correct horse")
        monkeypatch.setenv("SSH_AUTH_SOCK", str(agent.socket_path))
        t = SSHTarget(alias="box", hostname="127.0.0.1", port=server.port, user="root",
                      identity_file=str(locked.path))
        with SSHConnection(t, name="box") as conn:
            assert conn.run("echo agent-signed").stdout == "agent-signed\n"
    sys.stdin.close()
    log = server.log_text()
    assert "Accepted publickey for root" in log and locked.fingerprint() in log
    assert other.fingerprint() not in log  # IdentitiesOnly kept the agent's other key back


# --- ProxyJump and ssh config --------------------------------------------------------------------------

def test_two_hop_proxy_jump_goes_through_both_jump_hosts(tmp_path, key):
    with SSHD(tmp_path / "jump1", authorized_keys=[key.public]) as j1, \
         SSHD(tmp_path / "jump2", authorized_keys=[key.public]) as j2, \
         SSHD(tmp_path / "target", authorized_keys=[key.public]) as dest:
        hops = (f"root@127.0.0.1:{j1.port}", f"root@127.0.0.1:{j2.port}")
        t = target(dest, key, proxy_jump=hops)  # the profile's identity_file serves the hops too

        with pytest.raises(HostKeyError) as ei:  # jump hosts are checked like the target, first hop first
            SSHConnection(t, name="box").run("true")
        err = clear_error(ei, HostKeyError)
        assert "jump host" in err.message and j1.host_key_fingerprint() in err.message

        with SSHConnection(t, name="box", accept_new_host=True) as conn:
            assert conn.run("echo through").stdout == "through\n"
        assert sorted(paths.known_hosts_path().read_text().splitlines()) == sorted(
            s.known_hosts_line().strip() for s in (j1, j2, dest))

    assert f"target 127.0.0.1 port {j2.port}" in _direct_tcpip(j1)   # jump1 forwarded to jump2
    assert f"target 127.0.0.1 port {dest.port}" in _direct_tcpip(j2)  # jump2 forwarded to the target
    assert "Accepted publickey for root" in dest.log_text()


def test_proxycommand_from_ssh_config_is_used(tmp_path, key):
    with SSHD(tmp_path / "bastion", authorized_keys=[key.public]) as bastion, \
         SSHD(tmp_path / "gpu", authorized_keys=[key.public]) as gpu:
        trust(bastion, gpu)
        kh = paths.known_hosts_path()
        paths.ssh_config_path().write_text(
            f"Host gpu-box\n  HostName 127.0.0.1\n  Port {gpu.port}\n  User root\n  IdentityFile {key.path}\n"
            f"  ProxyCommand ssh -F none -i {key.path} -p {bastion.port} -o BatchMode=yes "
            f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={kh} -W %h:%p root@127.0.0.1\n")
        with SSHConnection(SSHTarget(alias="gpu-box"), name="gpu-box") as conn:
            assert conn.run("echo proxied").stdout == "proxied\n"
    assert f"target 127.0.0.1 port {gpu.port}" in _direct_tcpip(bastion)


def test_jump_host_that_cannot_reach_the_target_says_so(server, key):
    trust(server)
    closed = free_port()
    conn = SSHConnection(target(server, key, port=closed, proxy_jump=(f"root@127.0.0.1:{server.port}",)),
                         name="box")
    with pytest.raises(ConnectError) as ei:
        conn.run("true")
    err = clear_error(ei, ConnectError)
    assert f"jump host root@127.0.0.1:{server.port}" in err.message
    assert f"cannot reach box (127.0.0.1:{closed})" in err.message


def test_ssh_config_alias_with_its_own_proxyjump_alias(tmp_path, key, ssh_home):
    keyfile = key.path
    with SSHD(tmp_path / "bastion", authorized_keys=[key.public]) as bastion, \
         SSHD(tmp_path / "gpu", authorized_keys=[key.public]) as gpu:
        trust(bastion, gpu)
        paths.ssh_config_path().write_text(
            f"Host bastion\n  HostName 127.0.0.1\n  Port {bastion.port}\n  User root\n"
            f"  IdentityFile {keyfile}\n\n"
            f"Host gpu-box\n  HostName 127.0.0.1\n  Port {gpu.port}\n  User root\n"
            f"  IdentityFile {keyfile}\n  ProxyJump bastion\n  ServerAliveInterval 7\n"
            f"  ConnectTimeout 4\n")
        conn = get_connection(host("gpu-box", SSHTarget(alias="gpu-box")))
        r = conn.resolved
        assert (r.hostname, r.port, r.user, r.identity_files) == ("127.0.0.1", gpu.port, "root", (str(keyfile),))
        assert (r.server_alive_interval, r.connect_timeout) == (7, 4)
        assert [(j.label, j.port) for j in r.jumps] == [("bastion", bastion.port)]
        assert conn.run("echo aliased").stdout == "aliased\n"
        assert f"target 127.0.0.1 port {gpu.port}" in _direct_tcpip(bastion)


# --- pooling, concurrency, lost connections ------------------------------------------------------------

def test_pool_reuses_one_connection_for_parallel_commands(server, key):
    trust(server)
    profile = host("box", target(server, key))
    conn = get_connection(profile)
    assert get_connection(profile) is conn
    assert isinstance(get_connection(HostProfile(name="local", source="test", local=True)), LocalConnection)
    results: dict[int, str] = {}

    def work(i):
        results[i] = get_connection(profile).run(f"sleep 0.3; echo {i}").stdout.strip()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: str(i) for i in range(8)}
    assert server.log_text().count("Accepted publickey") == 1  # one SSH connection carried all of them
    close_all()
    assert not conn.is_connected


def test_connection_lost_mid_command_then_pool_reconnects(server, key):
    trust(server)
    profile = host("box", target(server, key))
    marker = f"sleep 41{os.getpid()}"
    errors: list[BaseException] = []

    def long_command():
        try:
            get_connection(profile).run(f"{marker}", timeout=30)
        except BaseException as e:
            errors.append(e)

    worker = threading.Thread(target=long_command)
    worker.start()
    deadline = time.monotonic() + 10
    while not find_processes(marker, exact=True) and time.monotonic() < deadline:
        time.sleep(0.05)  # the sleep itself runs: the connection is mid-command
    assert server.kill_sessions() > 0
    worker.join(15)
    assert not worker.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], ConnectError), errors
    err = errors[0]
    assert err.message.startswith("connection to box (127.0.0.1:") and "lost" in err.message
    assert marker in err.message and "re-run" in err.hint
    assert get_connection(profile).run("echo back").stdout == "back\n"  # a fresh transport replaced it
    assert server.log_text().count("Accepted publickey") == 2


def test_silent_host_is_dropped_after_unanswered_keepalives(server, key):
    trust(server)
    paths.ssh_config_path().write_text("Host 127.0.0.1\n  ServerAliveInterval 1\n  ServerAliveCountMax 1\n")
    with SSHConnection(target(server, key), name="box") as conn:
        lines = conn.stream("while true; do echo tick; sleep 0.1; done")  # the GPU monitor's shape: no timeout
        assert next(lines) == "tick"
        assert server.pause_sessions() > 0  # TCP stays up, nothing answers any more
        with pytest.raises(ConnectError) as ei:
            for _ in lines:
                pass
        message = clear_error(ei, ConnectError).message
        assert "connection to box" in message and "lost" in message
        # dropped by the keepalive's count (~1 s + 1 x 1 s), not by the OS's TCP timeout
        assert "no reply to 1 SSH keepalives" in message, message


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_as_a_message_gets_the_send_lock_leaves_the_connection_usable(server, key, sig):
    """Ctrl-C (or SIGTERM, SIGHUP through cli/signals) handled just as a command's message gets the transport's
    send lock, which another thread held (the keepalive's): the KeyboardInterrupt leaves the lock free, so the
    stop of the interrupted command, closing and the next command go through. paramiko raised it with the lock
    held, and `up` interrupted while it waited for Jupyter on the bare host hung for good (the contract suite's
    host-SIGINT case, 1 run in 5 here)."""
    from devenv.cli.signals import ending_signals_interrupt

    trust(server)
    with SSHConnection(target(server, key), name="box") as conn, ending_signals_interrupt():
        transport = conn.transport()
        main = threading.get_ident()

        def waits_for_the_send_lock() -> bool:
            frame = sys._current_frames().get(main)
            return (frame is not None and frame.f_code.co_name == "_send_user_message"
                    and "clear_to_send_lock" in linecache.getline(frame.f_code.co_filename, frame.f_lineno))

        def keepalive_holding_the_lock() -> None:
            with transport.clear_to_send_lock:
                deadline = time.monotonic() + 10
                while not waits_for_the_send_lock() and time.monotonic() < deadline:
                    time.sleep(0.01)
                # handled in this thread: pending for the main thread, which is blocked on the lock until now
                signal.pthread_kill(threading.get_ident(), sig)

        holder = threading.Thread(target=keepalive_holding_the_lock)
        holder.start()
        with pytest.raises(KeyboardInterrupt):
            transport.global_request("keepalive@openssh.com", wait=False)
        holder.join(10)
        assert transport.clear_to_send_lock.acquire(timeout=5), "the interrupt left the transport's send lock held"
        transport.clear_to_send_lock.release()
        assert conn.run("echo still here", timeout=30).stdout == "still here\n"


# --- local ---------------------------------------------------------------------------------------------

def test_local_connection_runs_times_out_streams_and_puts(tmp_path):
    conn = LocalConnection()
    assert isinstance(conn, Connection)
    r = conn.run("echo out; echo err >&2; exit 2", env={"X": "1"})
    assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 2)
    assert conn.run("cat; echo $X", stdin=b"in ", env={"X": "y"}).stdout == "in y\n"
    with pytest.raises(CommandFailed):
        conn.run("exit 5", check=True)
    marker = f"sleep 51{os.getpid()}"
    with pytest.raises(CommandTimeout):
        conn.run(f"{marker} || true; sleep 30", timeout=0.5)
    assert _gone(marker)
    stream_marker = f"LOCALSTREAM{os.getpid()}"
    lines = conn.stream(f"while true; do echo tick; sleep 0.05; done # {stream_marker}")
    assert [next(lines) for _ in range(3)] == ["tick"] * 3
    lines.close()
    assert _gone(stream_marker)
    conn.put(b"data", str(tmp_path / "f"), mode=0o600)
    assert (tmp_path / "f").read_bytes() == b"data" and stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o600
    with conn:
        pass
    conn.close()


# --- helpers -------------------------------------------------------------------------------------------

def _gone(marker: str, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not find_processes(marker):
            return True
        time.sleep(0.05)
    return False


def _read_pty_until(fd: int, wanted: bytes, within: float = 20) -> bytes:
    seen = b""
    deadline = time.monotonic() + within
    while wanted not in seen and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    assert wanted in seen, seen
    return seen


def _direct_tcpip(server: SSHD) -> str:
    return "\n".join(line for line in server.log_text().splitlines() if "direct_tcpip" in line or
                     "direct-tcpip" in line)


def test_debug_log_names_each_command_its_exit_and_duration_and_each_reconnect(server, key, caplog):
    """What `devenv -v` / DEVENV_DEBUG=1 shows (the "devenv" logger): a slow command explained afterwards."""
    import logging

    trust(server)
    caplog.set_level(logging.DEBUG, logger="devenv")
    profile = host("box", target(server, key))
    assert get_connection(profile).run("echo one; exit 3").exit_code == 3
    assert server.kill_sessions() > 0   # the server side goes away, as when a laptop sleeps through it
    deadline = time.monotonic() + 10
    while get_connection(profile).is_connected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert get_connection(profile).run("echo two").stdout == "two\n"
    lines = [r.getMessage() for r in caplog.records if r.name == "devenv.remote.ssh"]
    assert any(line.startswith("box: exit 3 in ") and line.endswith(": echo one; exit 3") for line in lines), lines
    assert any("reconnecting" in line for line in lines), lines
    assert sum("connected to 127.0.0.1:" in line for line in lines) == 2, lines
    assert any(line.endswith(": echo two") for line in lines), lines


@pytest.mark.parametrize("kind", not_a_file.KINDS)
def test_an_identity_file_that_is_no_regular_file_is_bad_input_not_a_hang(tmp_path, server, key, kind):
    """A FIFO would block the key's read forever, /dev/zero would fill the memory (issue 14)."""
    path = not_a_file.make(tmp_path / "not-a-key", kind)
    trust(server)
    with pytest.raises(DevenvError) as err, SSHConnection(target(server, key, identity_file=str(path))) as conn:
        conn.run("true")
    assert err.value.exit_code == 2 and "not a regular file" in err.value.message, err.value.message
