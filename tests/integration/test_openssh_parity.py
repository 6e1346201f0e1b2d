"""devenv connects exactly when OpenSSH does: every case writes one ssh config, runs
`ssh -F cfg -o BatchMode=yes HOST true` and devenv's connection on the same config, against real sshds on
loopback (tests/sshd_fixture.py), and compares the outcomes. Where devenv's policy is deliberately stricter
(an unknown or changed host key under StrictHostKeyChecking no), the case says so and checks both sides.

Classes (issue 9): Include, Match, tokens, IdentityAgent, certificates (user and host), each known_hosts
option, revoked keys, ProxyCommand with shell syntax and a dying proxy, three-hop chains with per-hop users
and keys, ConnectTimeout against a silent server and a slow link, a non-root user whose $USER differs; second
sweep: file names as 9.2 expands them (or does not), AddressFamily, BindAddress, and the configs devenv refuses
because ssh would offer no key (PubkeyAuthentication no, PreferredAuthentications without publickey).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sshd_fixture import SSHD, SSHAgent, make_key

from devenv.config.profiles import SSHTarget
from devenv.errors import ConnectError, DevenvError, ProfileError
from devenv.remote.pool import close_all
from devenv.remote.ssh import SSHConnection

pytestmark = pytest.mark.timeout(90)
HOP_USER = "devenv-hopuser"   # a non-root account made for these tests (no password, not locked)


# --- the lab: keys, CAs, servers, an agent -------------------------------------------------------------

def _ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", "/bin/sh", name], check=True, capture_output=True)
        subprocess.run(["usermod", "-p", "*", name], check=True, capture_output=True)  # not locked: sshd lets it in
        return pwd.getpwnam(name)


def _sign(ca: Path, pub: Path, *, host: bool, principals: str, ident: str = "test") -> Path:
    argv = ["ssh-keygen", "-q", "-s", str(ca), "-I", ident, "-n", principals, "-V", "-5m:+1h"]
    if host:
        argv.append("-h")
    subprocess.run([*argv, str(pub)], check=True, capture_output=True)
    return pub.with_name(pub.name.removesuffix(".pub") + "-cert.pub")


@dataclass
class Lab:
    root: Path
    keys: dict
    servers: dict
    agent: SSHAgent
    host_ca: Path
    user_ca: Path
    values: dict = field(default_factory=dict)

    def fmt(self, text: str) -> str:
        return textwrap.dedent(text).format(**self.values)


@pytest.fixture(scope="module")
def lab():
    _ensure_user(HOP_USER)
    root = Path(tempfile.mkdtemp(prefix="devenv-parity-"))
    root.chmod(0o755)  # sshd reads authorized_keys as the login user, so the hop user must reach them
    keys = {name: make_key(root / "keys" / name) for name in ("main", "hop1", "hop2", "hop3", "agentonly")}
    keys["enc"] = make_key(root / "keys" / "enc", passphrase="s3cret")
    keys["certonly"] = make_key(root / "keys" / "certonly")
    (root / "keys").chmod(0o755)
    for k in keys.values():
        k.path.chmod(0o600)
    for ca in ("host_ca", "user_ca"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / ca)], check=True)
    _sign(root / "user_ca", keys["certonly"].path.with_name("certonly.pub"), host=False, principals="root")
    # the agent holds agentonly (whose private file is then deleted) and enc (whose .pub is deleted)
    agent = SSHAgent(root / "agent").__enter__()
    agent.add(keys["agentonly"].path)
    agent.add(keys["enc"].path, passphrase="s3cret")
    keys["agentonly"].path.unlink()
    keys["enc"].path.with_name("enc.pub").unlink()

    main_keys = [keys[k].public for k in ("main", "agentonly", "enc")]
    servers = {}
    try:
        servers["a"] = SSHD(root / "a", authorized_keys=main_keys).start()
        servers["b"] = SSHD(root / "b", authorized_keys=main_keys).start()
        certsrv = SSHD(root / "cert", authorized_keys=[keys["main"].public],
                       extra_config=f"TrustedUserCAKeys {root / 'user_ca.pub'}")
        host_cert = _sign(root / "host_ca", certsrv.host_key_pub, host=True, principals="127.0.0.1,certhost")
        certsrv.config_path.write_text(certsrv.config_path.read_text() + f"HostCertificate {host_cert}\n")
        servers["cert"] = certsrv.start()
        servers["hop1"] = SSHD(root / "hop1", authorized_keys=[keys["hop1"].public]).start()
        servers["hop2"] = SSHD(root / "hop2", authorized_keys=[keys["hop2"].public]).start()
        servers["hop3"] = SSHD(root / "hop3", authorized_keys=[keys["hop3"].public]).start()
        for s in servers.values():
            s.workdir.chmod(0o755)
            s.authorized_keys_path.chmod(0o644)
        lab = Lab(root, keys, servers, agent, root / "host_ca", root / "user_ca")
        lab.values = {
            **{f"{n}_port": s.port for n, s in servers.items()},
            **{f"key_{n}": str(k.path) for n, k in keys.items()},
            "root": str(root), "hop_user": HOP_USER,
            "agent": str(agent.socket_path),
        }
        yield lab
    finally:
        for s in servers.values():
            s.stop()
        agent.__exit__(None, None, None)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def case_dir(lab, tmp_path, monkeypatch):
    """A per-case folder for the config and known_hosts; devenv points at the same files ssh reads."""
    d = Path(tempfile.mkdtemp(prefix="case-", dir=lab.root))
    d.chmod(0o755)
    monkeypatch.setenv("DEVENV_SSH_CONFIG", str(d / "config"))
    monkeypatch.delenv("DEVENV_KNOWN_HOSTS", raising=False)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("HOME", str(d / "home"))
    (d / "home" / ".ssh").mkdir(parents=True)
    yield d
    close_all()
    shutil.rmtree(d, ignore_errors=True)


def known_line(server: SSHD, name: str | None = None) -> str:
    kind, blob = server.host_key_pub.read_text().split()[:2]
    return f"{name or f'[127.0.0.1]:{server.port}'} {kind} {blob}\n"


def ssh_outcome(cfg: Path, host: str, env: dict | None = None) -> tuple[bool, str]:
    proc = subprocess.run(["ssh", "-F", str(cfg), "-o", "BatchMode=yes", host, "true"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})
    return proc.returncode == 0, proc.stderr


def devenv_outcome(host: str, accept_new: bool = False) -> tuple[bool, DevenvError | None]:
    conn = SSHConnection(SSHTarget(alias=host), name=host, accept_new_host=accept_new)
    try:
        ok = conn.run("true", timeout=30).ok
        return ok, None
    except DevenvError as e:
        assert e.hint, e.message  # every failure says what to do
        return False, e
    finally:
        conn.close()


def compare(lab: Lab, d: Path, config: str, host: str, *, expect: bool, error: str = "",
            env: dict | None = None) -> DevenvError | None:
    """Write the config, run ssh and devenv on it, and require both to reach `expect`."""
    cfg = d / "config"
    cfg.write_text(lab.fmt(config))
    if env:
        for k, v in env.items():
            os.environ[k] = v
    try:
        ssh_ok, ssh_err = ssh_outcome(cfg, host)
        outcomes = {}
        for resolver, no_client in (("ssh -G", None), ("built-in parser", "1")):
            # both of devenv's resolvers: OpenSSH's `ssh -G`, and the parser used where no ssh client exists
            if no_client:
                os.environ["DEVENV_NO_SSH_CLIENT"] = no_client
            try:
                outcomes[resolver] = devenv_outcome(host)
            finally:
                os.environ.pop("DEVENV_NO_SSH_CLIENT", None)
    finally:
        for k in env or {}:
            os.environ.pop(k, None)
    assert ssh_ok == expect, f"ssh itself: expected {'success' if expect else 'failure'}; stderr: {ssh_err}"
    for resolver, (dev_ok, dev_err) in outcomes.items():
        assert dev_ok == ssh_ok, (f"devenv ({resolver}) differs from ssh (ssh ok={ssh_ok}): "
                                  f"{dev_err and dev_err.message}")
        if not expect:
            assert isinstance(dev_err, (ConnectError, ProfileError)), dev_err
            assert error.lower() in dev_err.message.lower(), (resolver, error, dev_err.message)
    return outcomes["ssh -G"][1]


def only_ssh_connects(cfg: Path, host: str) -> DevenvError:
    """A deliberate difference: ssh connects on cfg, devenv refuses; devenv's error, for the case's asserts."""
    assert ssh_outcome(cfg, host)[0], "ssh itself did not connect"
    ok, err = devenv_outcome(host)
    assert not ok and err is not None
    return err


KH = "UserKnownHostsFile {kh}"


def kh(lab: Lab, d: Path, *servers: str, name: str | None = None) -> Path:
    path = d / "known_hosts"
    path.write_text("".join(known_line(lab.servers[s], name) for s in servers))
    lab.values["kh"] = str(path)
    return path


# --- Include, Match and Host patterns: configs that reach server a as root (or fail to) ---------------------

ON_A = "  HostName 127.0.0.1\n  Port {a_port}\n  User root\n  IdentityFile {key_main}\n  UserKnownHostsFile {kh}\n"

# name: (files written in the case folder {d} first, the config, the host, expect, error)
CONFIGS = {
    "include_glob_defines_the_host": (
        {"conf.d/10-lab.conf": "Host inc-a\n  HostName 127.0.0.1\n  Port {a_port}\n  User root\n"
                               "  IdentityFile {key_main}\n"},
        "Include {d}/conf.d/*.conf\nHost *\n  UserKnownHostsFile {kh}\n", "inc-a", True, ""),
    "include_inside_a_non_matching_block_applies_nothing": (
        {"wrong-port.conf": "Port 1\n"}, "Host other\n  Include {d}/wrong-port.conf\nHost inc-b\n" + ON_A,
        "inc-b", True, ""),
    "match_host_sees_the_hostname_and_match_user": (
        {}, "Host m-a\n  HostName 127.0.0.1\n  User root\nMatch host 127.0.0.1 user root\n  Port {a_port}\n"
            "  IdentityFile {key_main}\nHost *\n  UserKnownHostsFile {kh}\n", "m-a", True, ""),
    "match_host_before_hostname_does_not_see_it": (
        {}, "Match host 127.0.0.1\n  Port 1\nHost m-b\n" + ON_A, "m-b", True, ""),
    "match_exec_and_originalhost": (
        {}, 'Match originalhost m-c exec "test %n = m-c"\n  HostName 127.0.0.1\n  Port {a_port}\nHost m-c\n'
            "  User root\n  IdentityFile {key_main}\n  UserKnownHostsFile {kh}\n", "m-c", True, ""),
    # `cl-a` keeps its own name: a comma is no list separator in Host
    "host_comma_is_part_of_the_pattern": (
        {}, "Host cl-a,cl-b\n  HostName 127.0.0.1\nHost cl-*\n  Port {a_port}\n  User root\n"
            "  IdentityFile {key_main}\n  UserKnownHostsFile {kh}\n  ConnectTimeout 5\n", "cl-a", False, "cl-a"),
    # `Host case-a` (before) is not for CASE-A
    "host_patterns_are_case_sensitive_and_keywords_are_not": (
        {}, 'Host case-a\n  Port 1\nhost CASE-A\n  HOSTNAME=127.0.0.1\n  pOrT = {a_port}\n  "User" "root"\n'
            '  IdentityFile="{key_main}"\n  userknownhostsfile {kh}\n', "CASE-A", True, ""),
    "match_final_pass_matches_host_against_the_hostname": (
        {}, "Host fp\n  HostName 127.0.0.1\nMatch final\nHost 127.0.0.1\n" + ON_A, "fp", True, ""),
}


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_config(lab, case_dir, case):
    files, config, host, expect, error = CONFIGS[case]
    kh(lab, case_dir, "a")
    lab.values["d"] = str(case_dir)
    for name, text in files.items():
        (case_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (case_dir / name).write_text(lab.fmt(text))
    compare(lab, case_dir, config, host, expect=expect, error=error)


# --- tokens and comments -------------------------------------------------------------------------------

def test_tokens_in_identityfile_knownhosts_and_env_vars(lab, case_dir, monkeypatch):
    shutil.copy(lab.keys["main"].path, case_dir / f"root_127.0.0.1_{lab.servers['a'].port}_t-a")
    kh(lab, case_dir, "a")
    Path(lab.values["kh"]).rename(case_dir / f"kh_127.0.0.1_{lab.servers['a'].port}")
    monkeypatch.setenv("PARITY_DIR", str(case_dir))
    compare(lab, case_dir, """
        Host t-a
          HostName 127.0.0.1   # the lab's first server
          Port {a_port}
          User root
          IdentityFile ${{PARITY_DIR}}/%r_%h_%p_%n
          UserKnownHostsFile ${{PARITY_DIR}}/kh_%h_%p
        """, "t-a", expect=True)


# --- identities: agent, .pub-only, encrypted, certificates ----------------------------------------------

def test_user_certificate_from_certificatefile(lab, case_dir):
    kh(lab, case_dir, "cert")
    cert = lab.keys["certonly"].path.with_name("certonly-cert.pub")
    moved = case_dir / "elsewhere-cert.pub"
    shutil.copy(cert, moved)  # named only by CertificateFile (not beside the key)
    cert.rename(cert.with_name("hidden"))
    try:
        compare(lab, case_dir, f"""
            Host uc-a
              HostName 127.0.0.1
              Port {{cert_port}}
              User root
              IdentityFile {{key_certonly}}
              CertificateFile {moved}
              UserKnownHostsFile {{kh}}
            """, "uc-a", expect=True)
    finally:
        cert.with_name("hidden").rename(cert)


def test_key_without_its_certificate_is_refused(lab, case_dir):
    kh(lab, case_dir, "cert")
    cert = lab.keys["certonly"].path.with_name("certonly-cert.pub")
    cert.rename(cert.with_name("hidden"))
    try:
        compare(lab, case_dir, """
            Host uc-b
              HostName 127.0.0.1
              Port {cert_port}
              User root
              IdentityFile {key_certonly}
              UserKnownHostsFile {kh}
            """, "uc-b", expect=False, error="refused every key")
    finally:
        cert.with_name("hidden").rename(cert)


def _ca_line(lab: Lab, pattern: str) -> str:
    kind, blob = (lab.root / "host_ca.pub").read_text().split()[:2]
    return f"@cert-authority {pattern} {kind} {blob}\n"


# name: (the @cert-authority line's host pattern, "" for the server's own [127.0.0.1]:port; extra lines;
# expect; error)
HOST_CERTIFICATES = {
    "from_a_cert_authority": ("", (), True, ""),
    "for_another_name_is_refused": ("*", ("HostKeyAlias not-a-principal",), False, "certificate"),
    # ssh falls back to the plain key inside an invalid certificate (sshconnect.c: "Retry with plain key");
    # devenv refused it outright
    "for_another_name_but_its_plain_key_is_known": ("*", ("HostKeyAlias not-a-principal",), True, ""),
}


@pytest.mark.parametrize("case", sorted(HOST_CERTIFICATES))
def test_host_certificate(lab, case_dir, case):
    pattern, lines, expect, error = HOST_CERTIFICATES[case]
    path = case_dir / "known_hosts"
    plain = known_line(lab.servers["cert"], "not-a-principal") if "plain_key" in case else ""
    path.write_text(_ca_line(lab, pattern or f"[127.0.0.1]:{lab.servers['cert'].port}") + plain)
    lab.values["kh"] = str(path)
    host = f"hc-{case.replace('_', '-')}"
    compare(lab, case_dir, "\n".join([
        f"Host {host}", "  HostName 127.0.0.1", "  Port {cert_port}", "  User root", "  IdentityFile {key_main}",
        *(f"  {line}" for line in lines), "  UserKnownHostsFile {kh}", "  StrictHostKeyChecking yes"]) + "\n",
        host, expect=expect, error=error)


def test_a_host_certificate_signed_with_sha1_rsa_is_not_trusted_through_its_ca(lab, case_dir):
    """OpenSSH 9.2 takes no SHA-1 RSA signature from a CA (CASignatureAlgorithms); devenv trusted any signature
    paramiko could verify. `CASignatureAlgorithms +ssh-rsa` lets it in on both sides."""
    ca = case_dir / "rsa_ca"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(ca)], check=True)
    server = SSHD(case_dir / "sha1", authorized_keys=[lab.keys["main"].public])
    subprocess.run(["ssh-keygen", "-q", "-s", str(ca), "-t", "ssh-rsa", "-I", "sha1", "-h", "-n", "127.0.0.1",
                    "-V", "-5m:+1h", str(server.host_key_pub)], check=True, capture_output=True)
    cert = server.host_key_pub.with_name(server.host_key_pub.name.removesuffix(".pub") + "-cert.pub")
    assert "ssh-rsa" in subprocess.run(["ssh-keygen", "-L", "-f", str(cert)], capture_output=True,
                                       text=True).stdout.split("Signing CA:")[1].split("\n")[0]
    server.config_path.write_text(server.config_path.read_text() + f"HostCertificate {cert}\n")
    server.workdir.chmod(0o755)
    server.authorized_keys_path.chmod(0o644)
    server.start()
    try:
        kind, blob = (case_dir / "rsa_ca.pub").read_text().split()[:2]
        (case_dir / "known_hosts").write_text(f"@cert-authority * {kind} {blob}\n")
        lab.values.update(kh=str(case_dir / "known_hosts"), sha1_port=str(server.port))
        config = """
            Host sha1
              HostName 127.0.0.1
              Port {sha1_port}
              User root
              IdentityFile {key_main}
              UserKnownHostsFile {kh}
              StrictHostKeyChecking yes
            """
        compare(lab, case_dir, config, "sha1", expect=False, error="CASignatureAlgorithms")
        compare(lab, case_dir, config + "  CASignatureAlgorithms +ssh-rsa\n", "sha1", expect=True)
    finally:
        server.stop()


# --- known_hosts options -------------------------------------------------------------------------------

def test_several_user_known_hosts_files_and_a_global_one(lab, case_dir):
    (case_dir / "first").write_text(known_line(lab.servers["b"]))
    (case_dir / "second").write_text(known_line(lab.servers["a"]))
    (case_dir / "global").write_text(known_line(lab.servers["b"], f"[127.0.0.1]:{lab.servers['b'].port}"))
    lab.values["d"] = str(case_dir)
    config = """
        Host kh-a
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {d}/first {d}/second
          StrictHostKeyChecking yes
        Host kh-b
          HostName 127.0.0.1
          Port {b_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {d}/none-here
          GlobalKnownHostsFile {d}/global
          StrictHostKeyChecking yes
        """
    compare(lab, case_dir, config, "kh-a", expect=True)   # a's key is only in the second user file
    compare(lab, case_dir, config, "kh-b", expect=True)   # b's key is only in the global file


def test_hashed_known_hosts_with_an_upper_case_hostname(lab, case_dir):
    path = kh(lab, case_dir, "a", name=f"[localhost]:{lab.servers['a'].port}")
    subprocess.run(["ssh-keygen", "-H", "-f", str(path)], check=True, capture_output=True)
    assert path.read_text().startswith("|1|")
    compare(lab, case_dir, """
        Host kh-d
          HostName LOCALHOST
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          StrictHostKeyChecking yes
          CheckHostIP no
        """, "kh-d", expect=True)


def accept_new_on_both_sides(lab, case_dir, alias: str, extra: str = "") -> str:
    """ssh, then devenv, each from an empty known_hosts of its own (kh-ssh, kh-devenv), connect under
    `StrictHostKeyChecking accept-new`; returns the config's template (KH stands for the known_hosts path)."""
    for side in ("ssh", "devenv"):
        (case_dir / f"kh-{side}").write_text("")
    cfg = case_dir / "config"
    template = lab.fmt(f"""
        Host {alias}
          HostName 127.0.0.1
          Port {{a_port}}
          User root
          IdentityFile {{key_main}}
          UserKnownHostsFile KH
          StrictHostKeyChecking accept-new
        """ + extra)
    cfg.write_text(template.replace("KH", str(case_dir / "kh-ssh")))
    assert ssh_outcome(cfg, alias)[0]
    cfg.write_text(template.replace("KH", str(case_dir / "kh-devenv")))
    assert devenv_outcome(alias) == (True, None)
    return template


def test_accept_new_in_the_users_config_records_the_key(lab, case_dir):
    accept_new_on_both_sides(lab, case_dir, "kh-f")   # each must record the same line
    blob = lab.servers["a"].host_key_pub.read_text().split()[1]
    for side in ("ssh", "devenv"):
        assert blob in (case_dir / f"kh-{side}").read_text()
    assert devenv_outcome("kh-f") == (True, None)  # now known


def test_changed_key_is_refused_even_with_accept_new(lab, case_dir):
    kh(lab, case_dir, "b", name=f"[127.0.0.1]:{lab.servers['a'].port}")  # b's key filed under a's address
    compare(lab, case_dir, """
        Host kh-g
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          StrictHostKeyChecking accept-new
        """, "kh-g", expect=False, error="CHANGED")


def test_strict_no_is_never_consent_for_devenv(lab, case_dir):
    """Deliberate difference: ssh connects under `StrictHostKeyChecking no` (an unknown key, or a changed one
    with password logins disabled); devenv refuses both and says how to consent."""
    kh(lab, case_dir, "b", name=f"[127.0.0.1]:{lab.servers['a'].port}")
    cfg = case_dir / "config"
    cfg.write_text(lab.fmt("""
        Host kh-h
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          StrictHostKeyChecking no
        """))
    assert "CHANGED" in only_ssh_connects(cfg, "kh-h").message
    Path(lab.values["kh"]).write_text("")
    assert ssh_outcome(cfg, "kh-h")[0]
    Path(lab.values["kh"]).write_text("")
    ok, err = devenv_outcome("kh-h")
    assert not ok and "not known" in err.message and "StrictHostKeyChecking no" in err.hint


# --- revoked keys --------------------------------------------------------------------------------------

def test_revoked_marker_in_known_hosts(lab, case_dir):
    path = kh(lab, case_dir, "a")
    kind, blob = lab.servers["a"].host_key_pub.read_text().split()[:2]
    path.write_text(path.read_text() + f"@revoked * {kind} {blob}\n")
    compare(lab, case_dir, """
        Host rv-a
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
        """, "rv-a", expect=False, error="revoked")


@pytest.mark.parametrize("form", ["plain", "krl", "missing"])
def test_revokedhostkeys_file(lab, case_dir, form):
    kh(lab, case_dir, "a")
    revoked = case_dir / "revoked"
    if form == "plain":
        shutil.copy(lab.servers["a"].host_key_pub, revoked)
    elif form == "krl":
        subprocess.run(["ssh-keygen", "-q", "-k", "-f", str(revoked), str(lab.servers["a"].host_key_pub)],
                       check=True, capture_output=True)
    lab.values["revoked"] = str(revoked)
    compare(lab, case_dir, """
        Host rv-b
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          RevokedHostKeys {revoked}
        """, "rv-b", expect=False, error="revoked" if form != "missing" else "RevokedHostKeys")


def test_revokedhostkeys_listing_another_key_lets_the_host_in(lab, case_dir):
    kh(lab, case_dir, "a")
    shutil.copy(lab.servers["b"].host_key_pub, case_dir / "revoked")
    lab.values["revoked"] = str(case_dir / "revoked")
    compare(lab, case_dir, """
        Host rv-c
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          RevokedHostKeys {revoked}
        """, "rv-c", expect=True)


# --- ProxyCommand and ProxyJump ------------------------------------------------------------------------

def test_proxycommand_with_shell_syntax(lab, case_dir, monkeypatch):
    kh(lab, case_dir, "a", "b")
    monkeypatch.setenv("PARITY_KH", lab.values["kh"])
    compare(lab, case_dir, """
        Host pc-a
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          ProxyCommand ssh -F none -i {key_main} -p {b_port} -o BatchMode=yes -o "UserKnownHostsFile=$PARITY_KH" -W %h:%p root@127.0.0.1 2>/dev/null # bastion b
        """, "pc-a", expect=True)  # noqa: E501 (one ProxyCommand line)


def test_dying_proxycommand_is_noticed_with_its_stderr(lab, case_dir):
    kh(lab, case_dir, "a")
    err = compare(lab, case_dir, """
        Host pc-b
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          ProxyCommand sh -c 'echo "bastion says no" >&2; exit 7'
        """, "pc-b", expect=False, error="ProxyCommand")
    assert "exited with code 7" in err.message and "bastion says no" in err.message


def test_first_of_proxycommand_and_proxyjump_wins(lab, case_dir):
    kh(lab, case_dir, "a", "b")
    compare(lab, case_dir, """
        Host pj-a
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          ProxyJump root@127.0.0.1:{b_port}
          ProxyCommand false
        Host *
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
        """, "pj-a", expect=True)
    compare(lab, case_dir, """
        Host pj-b
          HostName 127.0.0.1
          Port {a_port}
          User root
          ProxyCommand false
          ProxyJump root@127.0.0.1:{b_port}
        Host *
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
        """, "pj-b", expect=False, error="ProxyCommand")


def test_three_hop_chain_with_per_hop_users_and_keys(lab, case_dir):
    kh(lab, case_dir, "hop1", "hop2", "hop3", "a")
    config = """
        Host chain-target
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          ProxyJump chain-3
        Host chain-3
          HostName 127.0.0.1
          Port {hop3_port}
          User {hop_user}
          IdentityFile {key_hop3}
          ProxyJump chain-2
        Host chain-2
          HostName 127.0.0.1
          Port {hop2_port}
          User root
          IdentityFile {key_hop2}
          ProxyJump chain-1
        Host chain-1
          HostName 127.0.0.1
          Port {hop1_port}
          User {hop_user}
          IdentityFile {key_hop1}
        Host *
          IdentitiesOnly yes
          UserKnownHostsFile {kh}
        """
    compare(lab, case_dir, config, "chain-target", expect=True)
    for hop, user in (("hop1", HOP_USER), ("hop2", "root"), ("hop3", HOP_USER)):
        assert f"Accepted publickey for {user}" in lab.servers[hop].log_text()
    # a wrong key on the middle hop: both fail, and devenv names that hop
    err = compare(lab, case_dir, config.replace("{key_hop2}", "{key_hop1}"), "chain-target", expect=False,
                  error="chain-2")
    assert "jump host" in err.message and "refused every key" in err.message


# --- timeouts ------------------------------------------------------------------------------------------

@pytest.fixture
def silent_server():
    """A port that accepts TCP connections and never says a word (no SSH banner)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1]
    stop.set()
    listener.close()
    for s in held:
        s.close()


def test_connecttimeout_against_a_silent_server(lab, case_dir, silent_server):
    kh(lab, case_dir, "a")
    lab.values["silent_port"] = silent_server
    err = compare(lab, case_dir, """
        Host to-a
          HostName 127.0.0.1
          Port {silent_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          ConnectTimeout 2
        """, "to-a", expect=False, error="timed out")
    assert "banner" in err.message and "No existing session" not in err.message


class SlowRelay:
    """127.0.0.1:<port> -> target, holding every chunk `delay` seconds in each direction (a long, slow link)."""

    def __init__(self, target_port: int, delay: float):
        self.target_port, self.delay = target_port, delay
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client = self.listener.accept()[0]
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src, dst):
        try:
            while data := src.recv(65536):
                time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()


def test_connecttimeout_covers_connect_and_banner_only_on_a_slow_link(lab, case_dir):
    """0.4 s each way: the banner comes within ConnectTimeout 1, the whole handshake takes several seconds.
    ssh connects; so must devenv (it used to apply ConnectTimeout to the whole key exchange)."""
    relay = SlowRelay(lab.servers["a"].port, 0.4)
    try:
        kh(lab, case_dir, "a", name=f"[127.0.0.1]:{relay.port}")
        lab.values["relay_port"] = relay.port
        compare(lab, case_dir, """
            Host to-b
              HostName 127.0.0.1
              Port {relay_port}
              User root
              IdentityFile {key_main}
              UserKnownHostsFile {kh}
              ConnectTimeout 1
            """, "to-b", expect=True)
    finally:
        relay.close()


def test_refused_port_names_the_cause(lab, case_dir):
    kh(lab, case_dir, "a")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    lab.values["closed_port"] = closed.getsockname()[1]
    closed.close()
    compare(lab, case_dir, """
        Host to-c
          HostName 127.0.0.1
          Port {closed_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
        """, "to-c", expect=False, error="connection refused")


# --- one host on server a: the cases that differ only in their lines ---------------------------------------

@dataclass(frozen=True)
class OneHost:
    """`Host <case>` on server a as root with these lines, UserKnownHostsFile {kh} holding a's key (filed under
    known_as when given; empty when not known); env: "agent" sets SSH_AUTH_SOCK to the lab's agent,
    "agent_var" sets PARITY_AGENT to it."""
    lines: tuple[str, ...]
    expect: bool
    error: str = ""
    env: str | None = None
    known: bool = True
    known_as: str | None = None


ONE_HOST = {
    "unknown_token_fails_like_ssh": OneHost(
        ("IdentityFile {key_main}", "ProxyCommand ssh -W %h:%Z nowhere"), False, "token"),
    "identityagent_path_serves_a_key_that_exists_only_in_the_agent": OneHost(
        ("IdentityAgent {agent}", "IdentityFile {key_agentonly}.pub", "IdentitiesOnly yes"), True),
    "identityagent_names_an_environment_variable": OneHost(
        ("IdentityAgent $PARITY_AGENT", "IdentityFile {key_agentonly}.pub"), True, env="agent_var"),
    "identityagent_none_ignores_ssh_auth_sock": OneHost(
        ("IdentityAgent none", "IdentityFile {key_agentonly}.pub"), False, "authentication", env="agent"),
    "encrypted_key_in_the_agent_without_its_pub_and_identitiesonly": OneHost(
        ("IdentityFile {key_enc}", "IdentitiesOnly yes"), True, env="agent"),
    "hostkeyalias_names_the_known_hosts_entry": OneHost(
        ("IdentityFile {key_main}", "HostKeyAlias lab-a-alias", "StrictHostKeyChecking yes"), True,
        known_as="lab-a-alias"),
    "unknown_key_with_strict_yes_is_refused": OneHost(
        ("IdentityFile {key_main}", "StrictHostKeyChecking yes"), False, "not known", known=False),
    "proxyjump_none_leaves_a_later_proxycommand": OneHost(
        ("IdentityFile {key_main}", "ProxyJump none", "ProxyCommand sh -c 'echo \"proxy in use\" >&2; exit 4'"),
        False, "ProxyCommand"),
    # the agent holds keys a accepts; hop1's it does not
    "identitiesonly_yes_with_an_agent_holding_other_keys": OneHost(
        ("IdentityFile {key_hop1}", "IdentitiesOnly yes"), False, "refused every key", env="agent"),
    "identitiesonly_no_with_an_agent_holding_other_keys": OneHost(
        ("IdentityFile {key_hop1}", "IdentitiesOnly no"), True, env="agent"),
    # ssh offers no key at all here (and BatchMode allows no password): devenv, key-only, refuses clearly
    # instead of logging in with the keys ssh would not offer (it used to connect)
    "pubkeyauthentication_no_is_refused_not_ignored": OneHost(
        ("IdentityFile {key_main}", "PubkeyAuthentication no"), False, "PubkeyAuthentication no"),
    "preferredauthentications_without_publickey_is_refused": OneHost(
        ("IdentityFile {key_main}", "PreferredAuthentications keyboard-interactive,password"), False,
        "PreferredAuthentications"),
    # ssh dials only the addresses of its AddressFamily (devenv dialled any, and reached 127.0.0.1)
    "addressfamily_inet6_dials_no_ipv4_address": OneHost(
        ("IdentityFile {key_main}", "AddressFamily inet6"), False, "AddressFamily inet6"),
    "addressfamily_inet_dials_ipv4": OneHost(("IdentityFile {key_main}", "AddressFamily inet"), True),
    "preferredauthentications_with_publickey_connects": OneHost(
        ("IdentityFile {key_main}", "PreferredAuthentications password,publickey", "PubkeyAuthentication unbound"),
        True),
}


@pytest.mark.parametrize("case", sorted(ONE_HOST))
def test_one_host(lab, case_dir, case):
    spec = ONE_HOST[case]
    kh(lab, case_dir, *(["a"] if spec.known else []), name=spec.known_as)
    agent = str(lab.agent.socket_path)
    env = {"agent": {"SSH_AUTH_SOCK": agent}, "agent_var": {"PARITY_AGENT": agent}}.get(spec.env or "")
    config = "\n".join([f"Host {case}", "  HostName 127.0.0.1", "  Port {a_port}", "  User root",
                        *(f"  {line}" for line in spec.lines), "  UserKnownHostsFile {kh}"]) + "\n"
    compare(lab, case_dir, config, case, expect=spec.expect, error=spec.error, env=env)


def test_bindaddress_is_the_source_address_on_both_sides(lab, case_dir):
    """BindAddress 127.0.0.2: sshd sees ssh, and devenv through each resolver, come from it (devenv ignored it)."""
    kh(lab, case_dir, "a")
    before = lab.servers["a"].log_text().count("Accepted publickey for root from 127.0.0.2 ")
    compare(lab, case_dir, """
        Host bind
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          BindAddress 127.0.0.2
        """, "bind", expect=True)
    assert lab.servers["a"].log_text().count("Accepted publickey for root from 127.0.0.2 ") - before == 3


# --- file names OpenSSH 9.2 takes as written ------------------------------------------------------------

LITERAL_NAMES = {
    # ssh expands UserKnownHostsFile once: %%h is the two characters %h (devenv expanded it again)
    "userknownhostsfile_percent_percent": ("kh_%h", "UserKnownHostsFile {d}/kh_%%h", True, ""),
    # GlobalKnownHostsFile takes no %-tokens (devenv read global_127.0.0.1)
    "globalknownhostsfile_has_no_tokens": ("global_%h", "GlobalKnownHostsFile {d}/global_%h", True, ""),
    # RevokedHostKeys takes no ${VAR} (nor ~): ssh cannot read that path and refuses; devenv used to expand it,
    # find a list without a's key, and connect
    "revokedhostkeys_has_no_variables": ("revoked", "RevokedHostKeys ${{PARITY_DIR}}/revoked", False,
                                         "RevokedHostKeys"),
}


@pytest.mark.parametrize("case", sorted(LITERAL_NAMES))
def test_file_names_are_taken_as_ssh_takes_them(lab, case_dir, case):
    file_name, line, expect, error = LITERAL_NAMES[case]
    (case_dir / "empty").write_text("")
    listed = lab.servers["b" if file_name == "revoked" else "a"]
    (case_dir / file_name).write_text(known_line(listed) if file_name != "revoked"
                                      else listed.host_key_pub.read_text())
    if file_name == "revoked":
        kh(lab, case_dir, "a")
    lab.values["d"] = str(case_dir)
    known = "{kh}" if file_name == "revoked" else "{d}/empty"
    compare(lab, case_dir, f"""
        Host {case}
          HostName 127.0.0.1
          Port {{a_port}}
          User root
          IdentityFile {{key_main}}
          {line}
          UserKnownHostsFile {known}
          StrictHostKeyChecking yes
        """, case, expect=expect, error=error, env={"PARITY_DIR": str(case_dir)})


# --- who we are: the real uid, not $USER ----------------------------------------------------------------

def _as_user(user: pwd.struct_passwd, fn) -> tuple[bool, str]:
    """Run fn() in a forked child with the user's uid/gid (paramiko is already imported) and USER=impostor."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            os.environ.update(USER="impostor", LOGNAME="impostor", HOME="/nonexistent")
            ok, detail = fn()
            os.write(w, f"{int(ok)}{detail}".encode())
        except BaseException as e:  # report, never return into pytest in the child
            os.write(w, f"0{type(e).__name__}: {e}".encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    return out[:1] == "1", out[1:]


def test_non_root_user_whose_USER_differs(lab, case_dir):
    user = pwd.getpwnam(HOP_USER)
    kh(lab, case_dir, "hop1")
    key = case_dir / "hopkey"
    shutil.copy(lab.keys["hop1"].path, key)
    os.chown(key, user.pw_uid, user.pw_gid)
    key.chmod(0o600)
    lab.values["hopkey"] = str(key)
    cfg = case_dir / "config"
    cfg.write_text(lab.fmt("""
        Host who
          HostName 127.0.0.1
          Port {hop1_port}
          IdentityFile {hopkey}
          UserKnownHostsFile {kh}
        """))  # no User: both must log in as the real uid's name, not $USER
    os.chmod(case_dir, 0o755)
    cfg.chmod(0o644)

    def run_ssh():
        proc = subprocess.run(["ssh", "-F", str(cfg), "-o", "BatchMode=yes", "who", "id -un"],
                              capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        return proc.returncode == 0, proc.stdout.strip() or proc.stderr.strip()

    def run_devenv():
        conn = SSHConnection(SSHTarget(alias="who"), name="who")
        try:
            result = conn.run("id -un", timeout=30)
            return result.ok, result.stdout.strip()
        except DevenvError as e:
            return False, e.message
        finally:
            conn.close()

    ssh_result = _as_user(user, run_ssh)
    devenv_result = _as_user(user, run_devenv)
    assert ssh_result == (True, HOP_USER)
    assert devenv_result == ssh_result


# --- the fidelity sweep: configs where devenv (one resolver or both) used to differ from ssh ---------------

def test_userknownhostsfile_none_reads_no_user_file(lab, case_dir):
    """`UserKnownHostsFile none`: ssh reads no user file, so a key known only in ~/.ssh/known_hosts is unknown
    (devenv used to fall back to that file and connect)."""
    (case_dir / "home" / ".ssh" / "known_hosts").write_text(known_line(lab.servers["a"]))
    (case_dir / "global").write_text(known_line(lab.servers["b"]))
    lab.values["d"] = str(case_dir)
    config = """
        Host khn-{which}
          HostName 127.0.0.1
          Port {{{which}_port}}
          User root
          IdentityFile {{key_main}}
          UserKnownHostsFile none
          GlobalKnownHostsFile {{d}}/global
          StrictHostKeyChecking {strict}
        """
    compare(lab, case_dir, config.format(which="a", strict="yes"), "khn-a", expect=False, error="not known")
    compare(lab, case_dir, config.format(which="b", strict="yes"), "khn-b", expect=True)  # the global file
    # accept-new with nowhere to record the key: ssh refuses, and so does devenv
    compare(lab, case_dir, config.format(which="a", strict="accept-new"), "khn-a", expect=False, error="none")


@pytest.mark.parametrize("case", ["the_key", "another_key", "with_hostkeyalias", "port_entry_differs"])
def test_a_bare_host_entry_serves_a_host_on_another_port_as_in_ssh(lab, case_dir, case):
    """ssh's "checking without port identifier": for a host on a port other than 22, with no HostKeyAlias and
    no key of the type known as [host]:port, an entry for the bare host name with this very key lets it in
    (devenv said "not known"); another key there does not, nor does it with a HostKeyAlias, and a different
    key known as [host]:port is still a changed key."""
    a, b = lab.servers["a"], lab.servers["b"]
    lines = {"the_key": known_line(a, "127.0.0.1"), "another_key": known_line(b, "127.0.0.1"),
             "with_hostkeyalias": known_line(a, "127.0.0.1"),
             "port_entry_differs": known_line(b, f"[127.0.0.1]:{a.port}") + known_line(a, "127.0.0.1")}
    path = case_dir / "known_hosts"
    path.write_text(lines[case])
    lab.values["kh"] = str(path)
    alias = "  HostKeyAlias somealias\n" if case == "with_hostkeyalias" else ""
    compare(lab, case_dir, """
        Host bare
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          GlobalKnownHostsFile none
          StrictHostKeyChecking yes
        """ + alias, "bare", expect=case == "the_key",
            error={"port_entry_differs": "changed"}.get(case, "not known"))


@pytest.fixture(scope="module")
def legacy_server(lab):
    """An sshd that speaks only a CBC cipher: OpenSSH 9.2's client offers none by default (paramiko does)."""
    server = SSHD(lab.root / "legacy", authorized_keys=[lab.keys["main"].public],
                  extra_config="Ciphers aes128-cbc").start()
    server.workdir.chmod(0o755)
    server.authorized_keys_path.chmod(0o644)
    yield server
    server.stop()


ALGORITHM_CASES = {
    # name: (server, the Host block's algorithm line, does ssh connect)
    "a_cbc_only_server_is_refused_by_default": ("legacy", "", False),
    "plus_cbc_in_the_config_reaches_it": ("legacy", "Ciphers +aes128-cbc", True),
    "hostkeyalgorithms_without_the_servers_key_type": ("a", "HostKeyAlgorithms rsa-sha2-512,rsa-sha2-256", False),
    "one_kex_the_server_has": ("a", "KexAlgorithms diffie-hellman-group14-sha256", True),
    "minus_every_kex_the_server_has": ("a", "KexAlgorithms -*", False),
    "macs_narrowed_with_caret": ("a", "MACs ^hmac-sha2-512", True),
    # the user's key is ed25519: not offered when the list leaves its type out (devenv offered it anyway)
    "pubkeyaccepted_without_the_keys_type": ("a", "PubkeyAcceptedAlgorithms rsa-sha2-512,rsa-sha2-256", False),
    "pubkeyaccepted_minus_the_keys_type": ("a", "PubkeyAcceptedAlgorithms -ssh-ed25519*", False),
    "pubkeyaccepted_with_the_keys_type": ("a", "PubkeyAcceptedAlgorithms ssh-ed25519", True),
}


@pytest.mark.parametrize("case", sorted(ALGORITHM_CASES))
def test_algorithm_lists_are_the_ones_ssh_offers(lab, case_dir, legacy_server, case):
    """devenv offers what the user's ssh would offer (KexAlgorithms, Ciphers, MACs, HostKeyAlgorithms, with
    their +, - and ^ forms), not paramiko's longer defaults: it reached a CBC-only server that ssh refuses, and
    ignored a HostKeyAlgorithms that leaves out the server's key type."""
    which, line, expect = ALGORITHM_CASES[case]
    server = legacy_server if which == "legacy" else lab.servers["a"]
    path = case_dir / "known_hosts"
    path.write_text(known_line(server))
    lab.values.update(kh=str(path), port=str(server.port))
    config = """
        Host alg
          HostName 127.0.0.1
          Port {port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          StrictHostKeyChecking yes
        """ + (f"  {line}\n" if line else "")
    compare(lab, case_dir, config, "alg", expect=expect)


def test_an_algorithm_list_devenv_cannot_speak_is_refused_before_dialling(lab, case_dir):
    """Where devenv differs: `Ciphers chacha20-poly1305@openssh.com` alone suits ssh, but paramiko has no
    chacha20; devenv says so (exit 2, naming the option) instead of offering other ciphers."""
    kh(lab, case_dir, "a")
    cfg = case_dir / "config"
    cfg.write_text(lab.fmt("""
        Host cc
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          Ciphers chacha20-poly1305@openssh.com
        """))
    err = only_ssh_connects(cfg, "cc")
    assert isinstance(err, ProfileError) and err.exit_code == 2
    assert "Ciphers chacha20-poly1305@openssh.com" in err.message and "aes128-ctr" in err.hint


def test_connectionattempts_waits_for_a_server_that_comes_up_late(lab, case_dir):
    """ConnectionAttempts 4: ssh tries the connect again a second apart, so a server that starts listening
    1.5 s later is reached; with one attempt (the default) it is refused. devenv tried once whatever the
    config said."""
    late = SSHD(case_dir / "late", authorized_keys=[lab.keys["main"].public])
    late.workdir.chmod(0o755)
    late.authorized_keys_path.chmod(0o644)
    (case_dir / "known_hosts").write_text(known_line(late))
    lab.values.update(kh=str(case_dir / "known_hosts"), late_port=str(late.port))
    cfg = case_dir / "config"
    config = """
        Host late
          HostName 127.0.0.1
          Port {late_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          ConnectionAttempts {attempts}
        """
    outcomes = []
    for attempts in (4, 1):
        cfg.write_text(lab.fmt(config.replace("{attempts}", str(attempts))))
        for client in (lambda: ssh_outcome(cfg, "late")[0], lambda: devenv_outcome("late")[0]):
            timer = threading.Timer(1.5, late.start)
            timer.start()
            try:
                outcomes.append((attempts, client()))
            finally:
                timer.join()
                late.stop()
                close_all()
    assert outcomes == [(4, True), (4, True), (1, False), (1, False)]


def test_nohostauthenticationforlocalhost_is_not_taken_by_devenv(lab, case_dir):
    """Where devenv differs: ssh skips the host-key check for a loopback address under
    NoHostAuthenticationForLocalhost yes; devenv still checks the key, and its hint says why."""
    (case_dir / "empty").write_text("")
    lab.values["d"] = str(case_dir)
    cfg = case_dir / "config"
    cfg.write_text(lab.fmt("""
        Host lo
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {d}/empty
          GlobalKnownHostsFile none
          StrictHostKeyChecking yes
          NoHostAuthenticationForLocalhost yes
        """))
    err = only_ssh_connects(cfg, "lo")
    assert "not known" in err.message
    assert "NoHostAuthenticationForLocalhost" in err.hint and not (case_dir / "empty").read_text()


def test_known_hosts_files_whose_paths_hold_spaces(lab, case_dir):
    """`UserKnownHostsFile "{d}/my  dir/kh" {d}/second`: ssh reads both files; devenv split ssh -G's line at
    each space and found neither (the host's key "not known")."""
    spaced = case_dir / "my  dir"
    spaced.mkdir()
    (spaced / "kh").write_text(known_line(lab.servers["a"]))
    (case_dir / "second").write_text(known_line(lab.servers["b"]))
    (spaced / "global").write_text(known_line(lab.servers["b"]))
    lab.values["d"] = str(case_dir)
    config = """
        Host sp-a
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile "{d}/my  dir/kh" {d}/second
          StrictHostKeyChecking yes
        Host sp-b
          HostName 127.0.0.1
          Port {b_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {d}/none-here
          GlobalKnownHostsFile "{d}/my  dir/global"
          StrictHostKeyChecking yes
        """
    compare(lab, case_dir, config, "sp-a", expect=True)
    compare(lab, case_dir, config, "sp-b", expect=True)


def test_knownhostscommand_is_run_as_ssh_runs_it(lab, case_dir):
    """KnownHostsCommand: the same invocations with the same words as ssh's (ORDER, then HOSTNAME with the
    presented key's type, fingerprint and base64), its key trusted with no known_hosts file; a command that
    fails ends the connection on both sides."""
    log = case_dir / "invocations"
    command = case_dir / "keys"
    command.write_text(f'#!/bin/sh\necho "$*" >> {log}\ncat {case_dir}/serve\nexit "$(cat {case_dir}/code)"\n')
    command.chmod(0o755)
    (case_dir / "serve").write_text(known_line(lab.servers["a"]))
    (case_dir / "code").write_text("0")
    (case_dir / "empty").write_text("")
    lab.values.update(cmd=str(command), d=str(case_dir))
    config = """
        Host khc
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {d}/empty
          GlobalKnownHostsFile none
          StrictHostKeyChecking yes
          KnownHostsCommand {cmd} %I %H %t %f "%K" "%r at %h"
        """
    cfg = case_dir / "config"
    cfg.write_text(lab.fmt(config))
    assert ssh_outcome(cfg, "khc")[0]
    by_ssh = log.read_text().splitlines()
    log.unlink()
    assert devenv_outcome("khc")[0]
    by_devenv = log.read_text().splitlines()
    kind, blob = lab.servers["a"].host_key_pub.read_text().split()[:2]
    assert by_ssh[-1].startswith(f"HOSTNAME [127.0.0.1]:{lab.servers['a'].port} {kind} SHA256:")
    assert by_ssh[-1].endswith(f"{blob} root at 127.0.0.1") and any(w.startswith("ORDER") for w in by_ssh)
    assert by_devenv == by_ssh
    assert not (case_dir / "empty").read_text()         # nothing recorded, on either side
    (case_dir / "code").write_text("4")
    compare(lab, case_dir, config, "khc", expect=False, error="KnownHostsCommand")


def test_unknown_keyword_fails_like_ssh_naming_the_line(lab, case_dir):
    kh(lab, case_dir, "a")
    config = """
        Host uk
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
          {extra}
          NoSuchOption yes
        """
    err = compare(lab, case_dir, config.replace("{extra}", ""), "uk", expect=False,
                  error="Bad configuration option: nosuchoption")
    assert "line 9" in err.message
    compare(lab, case_dir, config.replace("{extra}", "IgnoreUnknown NoSuch*"), "uk", expect=True)


def test_crlf_config_and_port_user_from_match(lab, case_dir):
    kh(lab, case_dir, "a")
    cfg = case_dir / "config"
    text = lab.fmt("""
        Host crlf
          HostName 127.0.0.1
          IdentityFile {key_main}
          UserKnownHostsFile {kh}
        Match host 127.0.0.1 originalhost crlf
          Port {a_port}
          User root
        """).replace("\n", "\r\n")
    compare(lab, case_dir, text.replace("{", "{{").replace("}", "}}"), "crlf", expect=True)
    assert b"\r\n" in cfg.read_bytes()


def test_identityfile_several_times_the_second_is_accepted(lab, case_dir):
    kh(lab, case_dir, "a")
    compare(lab, case_dir, """
        Host idf
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_hop1}
          IdentityFile {key_hop2}
        Host *
          IdentityFile {key_main}
          IdentitiesOnly yes
          UserKnownHostsFile {kh}
        """, "idf", expect=True)
    assert "Accepted publickey for root" in lab.servers["a"].log_text()


def test_hashknownhosts_accept_new_records_hashed_entries_on_both_sides(lab, case_dir):
    template = accept_new_on_both_sides(lab, case_dir, "hk", "  HashKnownHosts yes\n")
    cfg = case_dir / "config"
    for side in ("ssh", "devenv"):
        text = (case_dir / f"kh-{side}").read_text()
        assert text.startswith("|1|") and f"127.0.0.1]:{lab.servers['a'].port}" not in text
    # each side reads the other's hashed line
    cfg.write_text(template.replace("KH", str(case_dir / "kh-ssh")).replace("accept-new", "yes"))
    assert ssh_outcome(cfg, "hk")[0] and devenv_outcome("hk") == (True, None)


def test_addkeystoagent_is_left_to_ssh(lab, case_dir):
    """Deliberate difference: `AddKeysToAgent yes` makes ssh load the key it used into the agent; devenv never
    changes the user's agent (it connects all the same)."""
    kh(lab, case_dir, "a")
    with SSHAgent(case_dir / "agent2") as agent:
        env = {"SSH_AUTH_SOCK": str(agent.socket_path)}
        config = """
            Host ak
              HostName 127.0.0.1
              Port {a_port}
              User root
              IdentityFile {key_main}
              UserKnownHostsFile {kh}
              AddKeysToAgent yes
            """

        def agent_keys() -> str:
            return subprocess.run(["ssh-add", "-l"], env={**os.environ, **env}, capture_output=True,
                                  text=True).stdout
        (case_dir / "config").write_text(lab.fmt(config))
        os.environ.update(env)
        try:
            assert devenv_outcome("ak") == (True, None)
            assert "test-main" not in agent_keys()
            assert ssh_outcome(case_dir / "config", "ak")[0]
            assert "test-main" in agent_keys()
        finally:
            os.environ.pop("SSH_AUTH_SOCK", None)


def _on_a_terminal(fn) -> str:
    """Run fn() in a child whose stdin/stdout/stderr are a new pty; answer any prompt with an empty line and
    return everything the child wrote there (its last line: fn's verdict)."""
    import pty
    import select

    pid, fd = pty.fork()
    if pid == 0:  # child
        try:
            os.write(1, f"VERDICT {fn()}\n".encode())  # fd 1 is the pty (pytest captures sys.stdout)
        finally:
            os._exit(0)
    out, deadline = b"", time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        if b"passphrase" in chunk.lower():
            os.write(fd, b"\n")
    os.waitpid(pid, 0)
    return out.decode(errors="replace")


def test_batchmode_never_asks_for_a_passphrase_even_on_a_terminal(lab, case_dir):
    """ssh with BatchMode yes does not prompt on a terminal; devenv used to ask for the key's passphrase."""
    kh(lab, case_dir, "a")
    cfg = case_dir / "config"
    cfg.write_text(lab.fmt("""
        Host bm
          HostName 127.0.0.1
          Port {a_port}
          User root
          IdentityFile {key_enc}
          IdentitiesOnly yes
          IdentityAgent none
          UserKnownHostsFile {kh}
          BatchMode yes
        """))

    def by_ssh():
        return subprocess.run(["ssh", "-F", str(cfg), "bm", "true"], timeout=30).returncode

    def by_devenv():
        ok, err = devenv_outcome("bm")
        return f"{ok} {err and err.message}"

    ssh_out, devenv_out = _on_a_terminal(by_ssh), _on_a_terminal(by_devenv)
    assert "VERDICT 255" in ssh_out and "passphrase for key" not in ssh_out.lower(), ssh_out
    assert "Enter passphrase" not in devenv_out, devenv_out
    assert "VERDICT False" in devenv_out and "BatchMode yes" in devenv_out, devenv_out
