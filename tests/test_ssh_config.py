"""ssh config resolution and known_hosts matching, without a network (the live paths are in test_ssh.py)."""

from __future__ import annotations

import base64
import os
import subprocess
import textwrap

import pytest

from devenv.config import paths
from devenv.config.profiles import SSHTarget
from devenv.errors import ConnectError, HostKeyError
from devenv.remote import hostkeys
from devenv.remote.sshconfig import local_home, local_user, parse_hop, resolve


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch, isolated_home):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("USER", "localme")
    monkeypatch.setenv("LOGNAME", "localme")
    return tmp_path / "home"


def config(text: str) -> None:
    paths.ssh_config_path().write_text(textwrap.dedent(text))


def test_alias_takes_every_field_from_the_config_file(home):
    config("""
        Host gpu
          HostName 10.0.0.7
          User ml
          Port 2200
          IdentityFile ~/.ssh/gpu_ed25519
          IdentityFile ~/.ssh/backup_rsa
          IdentitiesOnly yes
          ConnectTimeout 5
          ServerAliveInterval 12
          ServerAliveCountMax 4
    """)
    r = resolve(SSHTarget(alias="gpu"))
    assert (r.hostname, r.user, r.port) == ("10.0.0.7", "ml", 2200)
    pw_home = local_home()  # ~ in ssh config is the passwd home, as for ssh (not $HOME, set to a temp dir here)
    assert r.identity_files == (f"{pw_home}/.ssh/gpu_ed25519", f"{pw_home}/.ssh/backup_rsa")
    assert r.identities_only and (r.connect_timeout, r.server_alive_interval, r.server_alive_count_max) == (5, 12, 4)
    assert r.jumps == () and r.address == "10.0.0.7:2200" and r.describe() == "ml@10.0.0.7:2200"


def test_profile_fields_override_the_config_file_like_ssh_flags(home):
    config("""
        Host gpu
          HostName 10.0.0.7
          User ml
          Port 2200
          IdentityFile ~/.ssh/gpu_ed25519
          ProxyJump bastion
          ConnectTimeout 5
    """)
    home.mkdir(parents=True, exist_ok=True)
    (home / "k").write_text("")  # ssh drops an -i file that does not exist
    r = resolve(SSHTarget(alias="gpu", hostname="10.9.9.9", user="me", port=22, identity_file="~/k",
                          proxy_jump=("none",), connect_timeout=2.5))
    assert (r.hostname, r.user, r.port, r.connect_timeout) == ("10.9.9.9", "me", 22, 2.5)
    # like `ssh -i ~/k` typed in a shell ($HOME) first, then the config's (the passwd home, as ssh expands it)
    assert r.identity_files == (f"{home}/k", f"{local_home()}/.ssh/gpu_ed25519")
    assert r.jumps == ()


def test_defaults_without_any_config_file():
    r = resolve(SSHTarget(hostname="box.example"))
    # the default user is the real uid's login name, as OpenSSH takes it, not $USER (set to "localme" here)
    assert (r.hostname, r.port, r.user, r.identity_files, r.identities_only) == ("box.example", 22, local_user(),
                                                                              (), False)
    assert local_user() != "localme"
    assert (r.connect_timeout, r.server_alive_interval) == (15, 30)


def test_hostname_lookup_applies_wildcard_sections():
    config("""
        Host *.lab
          User researcher
          Port 2022
    """)
    r = resolve(SSHTarget(hostname="a100.lab", port=2200))
    assert (r.user, r.port) == ("researcher", 2200)


def test_proxyjump_hops_resolve_each_with_their_own_section_and_first_hop_recursion():
    config("""
        Host outer
          HostName 1.1.1.1
          User o
        Host inner
          HostName 2.2.2.2
          Port 2202
          ProxyJump ignored-for-later-hops
        Host bastion
          HostName 3.3.3.3
          ProxyJump outer
        Host gpu
          HostName 10.0.0.7
          ProxyJump bastion,admin@inner:2300
    """)
    r = resolve(SSHTarget(alias="gpu"))
    assert [(j.label, j.user, j.hostname, j.port) for j in r.jumps] == [
        ("outer", "o", "1.1.1.1", 22),           # bastion's own ProxyJump, dialled first
        ("bastion", local_user(), "3.3.3.3", 22),
        ("admin@inner:2300", "admin", "2.2.2.2", 2300),
    ]
    assert all(j.jumps == () for j in r.jumps)


def test_proxyjump_loop_is_an_error_not_a_hang():
    config("""
        Host a
          ProxyJump b
        Host b
          ProxyJump a
    """)
    with pytest.raises(ConnectError) as ei:
        resolve(SSHTarget(alias="a"))
    assert "loop" in ei.value.message and ei.value.hint


@pytest.mark.parametrize("spec, expected", [
    ("host", (None, "host", None)),
    ("u@host", ("u", "host", None)),
    ("u@host:2222", ("u", "host", 2222)),
    ("ssh://u@host:2222", ("u", "host", 2222)),
    ("[::1]:2222", (None, "::1", 2222)),
    ("fe80::1", (None, "fe80::1", None)),
])
def test_parse_hop(spec, expected):
    assert parse_hop(spec) == expected


def test_bad_hop_port_is_a_clear_error():
    with pytest.raises(ConnectError) as ei:
        parse_hop("u@host:http")
    assert "bad port 'http'" in ei.value.message


# --- known_hosts ---------------------------------------------------------------------------------------

def _key_line(tmp_path, name="k", kind="ed25519"):
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(tmp_path / name)], check=True)
    key_type, b64 = (tmp_path / f"{name}.pub").read_text().split()[:2]
    return key_type, base64.b64decode(b64), b64


def test_fingerprint_matches_ssh_keygen(tmp_path):
    key_type, blob, _ = _key_line(tmp_path)
    out = subprocess.run(["ssh-keygen", "-lf", str(tmp_path / "k.pub")], capture_output=True, text=True).stdout
    assert hostkeys.fingerprint(blob) == out.split()[1]


def test_known_hosts_forms_plain_port_wildcard_negation_and_junk(tmp_path):
    key_type, blob, b64 = _key_line(tmp_path)
    paths.known_hosts_path().write_text(
        "# comment\n\ngarbage line\nbad.example ssh-ed25519 !!notbase64!!\n"
        f"plain.example,10.0.0.1 {key_type} {b64}\n"
        f"[ported.example]:2222 {key_type} {b64}\n"
        f"*.lab,!evil.lab {key_type} {b64}\n"
        f"@cert-authority *.ca.example {key_type} {b64}\n")
    assert hostkeys.known_keys("plain.example", 22) and hostkeys.known_keys("10.0.0.1", 22)
    assert hostkeys.known_keys("ported.example", 2222) and not hostkeys.known_keys("ported.example", 22)
    assert not hostkeys.known_keys("plain.example", 2222)  # a non-22 port needs its [host]:port entry
    assert hostkeys.known_keys("a100.lab", 22) and not hostkeys.known_keys("evil.lab", 22)
    assert [k.ca for k in hostkeys.known_keys("x.ca.example", 22)] == [True]  # a CA, never a host key itself
    hostkeys.verify("box", "plain.example", 22, key_type, blob, accept_new=False)


def test_hashed_entries_written_by_ssh_keygen_match(tmp_path):
    key_type, blob, b64 = _key_line(tmp_path)
    kh = paths.known_hosts_path()
    kh.write_text(f"[gpu.example]:2200 {key_type} {b64}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(kh)], check=True, capture_output=True)
    assert kh.read_text().startswith("|1|")
    assert hostkeys.known_keys("gpu.example", 2200) and not hostkeys.known_keys("gpu.example", 22)


def test_revoked_key_is_refused_even_with_accept_new(tmp_path):
    key_type, blob, b64 = _key_line(tmp_path)
    paths.known_hosts_path().write_text(f"@revoked * {key_type} {b64}\n")
    with pytest.raises(HostKeyError) as ei:
        hostkeys.verify("box", "any.example", 22, key_type, blob, accept_new=True)
    assert "revoked" in ei.value.message


def test_a_host_known_with_another_key_type_is_a_change_not_an_unknown(tmp_path):
    rsa_type, rsa_blob, rsa_b64 = _key_line(tmp_path, "r", "rsa")
    ed_type, ed_blob, _ = _key_line(tmp_path, "e", "ed25519")
    paths.known_hosts_path().write_text(f"gpu.example {rsa_type} {rsa_b64}\n")
    assert hostkeys.preferred_key_types(hostkeys.known_keys("gpu.example", 22))[0] == "rsa-sha2-512"
    with pytest.raises(HostKeyError) as ei:
        hostkeys.verify("box", "gpu.example", 22, ed_type, ed_blob, accept_new=True)
    assert "CHANGED" in ei.value.message and hostkeys.fingerprint(rsa_blob) in ei.value.message


def test_record_appends_on_a_new_line_and_keeps_the_file_private(tmp_path):
    kh = tmp_path / "new" / "known_hosts"
    key_type, blob, b64 = _key_line(tmp_path)
    hostkeys.record("[a]:2200", key_type, blob, kh)
    assert oct(os.stat(kh).st_mode & 0o777) == "0o600" and oct(os.stat(kh.parent).st_mode & 0o777) == "0o700"
    with kh.open("a") as f:
        f.write("# no newline at the end")
    hostkeys.record("b", key_type, blob, kh)
    assert kh.read_text().splitlines() == [f"[a]:2200 {key_type} {b64}", "# no newline at the end",
                                           f"b {key_type} {b64}"]


def test_unknown_key_hint_says_a_missing_knownhostscommand_was_not_run(tmp_path):
    """ssh skips a KnownHostsCommand that is not there (and logs it); devenv too, and an unknown key says so."""
    from devenv.remote.sshconfig import from_options
    from devenv.remote.sshlib import paramiko

    key_type, blob, _ = _key_line(tmp_path)
    (tmp_path / "kh").write_text("")
    hop = from_options({"hostname": "gpu.example", "userknownhostsfile": str(tmp_path / "kh"),
                        "knownhostscommand": "/usr/local/bin/keys %H"}, "gpu", "gpu")
    with pytest.raises(HostKeyError) as ei:
        hostkeys.verify_hop(hop, paramiko.PKey.from_type_string(key_type, blob), accept_new=False)
    assert "not known" in ei.value.message and "KnownHostsCommand was not run" in ei.value.hint
