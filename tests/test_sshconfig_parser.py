"""The fallback ssh_config parser (used where no `ssh` client exists) against OpenSSH's own `ssh -G`, on the
same config files: every case resolves once through `ssh -G` and once through our parser, and the two
ResolvedTargets must be equal. The cases are the ones paramiko's parser got wrong (issue 9)."""

from __future__ import annotations

import dataclasses
import shutil
import textwrap

import pytest

from devenv.config import paths
from devenv.config.profiles import SSHTarget
from devenv.errors import ConnectError, ProfileError
from devenv.remote import ssh_g
from devenv.remote.sshconfig import local_user, resolve

assert shutil.which("ssh"), "these tests compare with OpenSSH's client: install openssh-client"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch, isolated_home):
    h = tmp_path / "home"
    (h / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("USER", "not-the-real-user")
    monkeypatch.setenv("LOGNAME", "not-the-real-user")
    monkeypatch.setenv("PROJ", "projdir")
    return h


def both(target: SSHTarget, monkeypatch):
    """(ssh -G's ResolvedTarget, our parser's), compared without the fields that name the resolver."""
    def strip(r):
        return dataclasses.replace(r, resolved_by="", options={},
                                   jumps=tuple(strip(j) for j in r.jumps))
    monkeypatch.delenv("DEVENV_NO_SSH_CLIENT", raising=False)
    assert ssh_g.ssh_binary()
    by_ssh = strip(resolve(target))
    monkeypatch.setenv("DEVENV_NO_SSH_CLIENT", "1")
    assert ssh_g.ssh_binary() is None
    ours = strip(resolve(target))
    monkeypatch.delenv("DEVENV_NO_SSH_CLIENT")
    return by_ssh, ours


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


CASES = {
    "include_relative_glob": ({"conf.d/a.conf": """
        Host inc-*
          HostName 10.1.1.1
          User incuser
          Port 2022
        """}, """
        Include {dir}/conf.d/*.conf
        Host *
          User fallback
        """, SSHTarget(alias="inc-box")),
    "include_inside_host_block_keeps_state": ({"conf.d/b.conf": """
          Port 2300
        """}, """
        Host other
          Include {dir}/conf.d/b.conf
        Host wanted
          HostName 10.2.2.2
        """, SSHTarget(alias="wanted")),
    "match_host_sees_hostname_set_so_far": ({}, """
        Match host 10.3.*
          User early
        Host short
          HostName 10.3.3.3
        Match host 10.3.*
          Port 2444
        """, SSHTarget(alias="short")),
    "match_originalhost_user_localuser_exec": ({}, f"""  # noqa
        Match originalhost orig* localuser {local_user()}
          HostName 10.4.4.4
        Match user nobody
          Port 9
        Match exec "test %h = 10.4.4.4"
          User execuser
        """, SSHTarget(alias="orig-host")),
    "tokens_in_hostname_identity_and_agent": ({}, """
        Host tok
          HostName %h.example.com
          User tokuser
          IdentityFile ~/.ssh/%r_%h_%p_%n_%u_%%
          IdentityFile ${HOME}/keys/${PROJ}/k
          CertificateFile ~/.ssh/%h-cert.pub
          IdentityAgent /run/agent-%r-%h.sock
          UserKnownHostsFile /etc/kh_%h_%p /etc/kh2
        """, SSHTarget(alias="tok")),
    "first_of_proxycommand_and_proxyjump_wins": ({}, """
        Host pc-first
          ProxyCommand nc %h %p 2>/dev/null # keeps its comment, for the shell
          ProxyJump ignored
        Host pj-first
          ProxyJump jumper
          ProxyCommand ignored
        Host jumper
          HostName 10.5.5.5
          User jumpuser
        """, SSHTarget(alias="pc-first")),
    "proxyjump_first_then_its_hop": ({}, """
        Host pj-first
          ProxyJump jumper
          ProxyCommand ignored
        Host jumper
          HostName 10.5.5.5
          User jumpuser
        """, SSHTarget(alias="pj-first")),
    "trailing_comments_and_equals": ({}, """
        Host cm   # the lab box
          HostName=10.6.6.6 # its address
          Port = 2600
          User "quoted user"
        """, SSHTarget(alias="cm")),
    "first_value_wins_and_wildcards": ({}, """
        Host *.lab
          User labuser
          Port 2201
        Host a100.lab
          User ignored
        Host *
          ConnectTimeout 7
          StrictHostKeyChecking accept-new
          HostKeyAlias shared-alias
          RevokedHostKeys ~/.ssh/revoked
        """, SSHTarget(hostname="a100.lab")),
    "profile_user_applies_before_the_lookup_like_-l": ({}, """
        Match user deploy
          Port 2800
          IdentityFile ~/.ssh/deploy_key
        Host box
          User someoneelse
        """, SSHTarget(alias="box", user="deploy")),
    "default_user_is_the_real_uid": ({}, "", SSHTarget(hostname="plain.example")),
    "negated_host_pattern": ({}, """
        Host *.corp !bastion.corp
          ProxyJump bastion.corp
        Host bastion.corp
          User b
        """, SSHTarget(hostname="gpu.corp")),
    "match_final_second_pass": ({}, """
        Host fin
          HostName 10.7.7.7
        Match final host 10.7.7.7
          User finaluser
        """, SSHTarget(alias="fin")),
    "three_hop_jump_chain_per_hop_users": ({}, """
        Host target
          HostName 10.9.0.3
          ProxyJump alice@hop1,bob@hop2:2202,hop3
        Host hop1
          HostName 10.9.0.1
          ProxyJump zed@hop0
        Host hop2
          HostName 10.9.0.2
          ProxyJump never-followed
        Host hop3
          HostName 10.9.0.4
          User carol
          IdentityFile ~/.ssh/carol
        """, SSHTarget(alias="target")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fallback_parser_resolves_like_ssh_G(case, home, monkeypatch):
    includes, main, target = CASES[case]
    directory = paths.ssh_config_path().parent
    for rel, text in includes.items():
        write(directory / rel, text)
    write(paths.ssh_config_path(), main.replace("{dir}", str(directory)))
    by_ssh, ours = both(target, monkeypatch)
    assert ours == by_ssh


def test_a_host_name_is_never_an_option(monkeypatch):
    paths.ssh_config_path().write_text("")
    for bad in ("-oProxyCommand=touch /tmp/pwned", "-F/etc/passwd", "a b", "x\nProxyCommand y"):
        with pytest.raises(ConnectError) as ei:
            resolve(SSHTarget(hostname=bad))
        assert "invalid" in ei.value.message and ei.value.hint
    with pytest.raises(ConnectError):
        resolve(SSHTarget(hostname="ok.example", user="-oProxyCommand=x"))
    with pytest.raises(ConnectError):
        resolve(SSHTarget(hostname="ok.example", proxy_jump=("-oProxyCommand=x",)))


# --- the fidelity sweep: each case below differed from ssh -G before (OpenSSH 9.2's readconf.c) ----------

SWEEP = {
    "host_comma_is_no_list": ("Host a,b\n  Port 2000\n", SSHTarget(alias="a")),
    "host_pattern_is_case_sensitive": ("Host gpu\n  Port 2001\nHost GPU\n  Port 2002\n", SSHTarget(alias="GPU")),
    "host_brackets_are_literal": ("Host [ab]\n  Port 2003\n", SSHTarget(alias="a")),
    "final_pass_host_sees_the_hostname": (
        "Host fin\n  HostName 10.7.7.7\nMatch final host 10.7.7.7\n  User finaluser\nHost 10.7.*\n  Port 2222\n",
        SSHTarget(alias="fin")),
    "final_pass_sees_the_hostname_lower_cased": (
        "Host x\n  HostName MiXed.Example\nMatch final\nHost MiXed.Example\n  Port 98\nHost mixed.*\n  Port 97\n",
        SSHTarget(alias="x")),
    "proxyjump_none_then_proxycommand": ("Host x\n  ProxyJump none\n  ProxyCommand nc %h %p\n", SSHTarget(alias="x")),
    "proxyjump_none_stops_a_later_proxyjump": (
        "Host bastion\n  HostName 10.0.0.1\n  ProxyJump none\nHost *\n  ProxyJump bastion\n",
        SSHTarget(alias="bastion")),
    "backslashes_as_argv_split": ("Host x\n  IdentityFile /tmp/a\\b\n  CertificateFile \"/tmp/it\\'s\"\n",
                                  SSHTarget(alias="x")),
    "time_values": ("Host x\n  ConnectTimeout 1m\n  ServerAliveInterval 1m30s\n", SSHTarget(alias="x")),
    "batchmode_keepalive_default": ("Host x\n  BatchMode yes\n", SSHTarget(alias="x")),
    "port_by_service_name": ("Port ssh\n", SSHTarget(alias="x")),
    "ignoreunknown_before_the_option": ("IgnoreUnknown foo*,Bar\nHost x\n  FooBar 1\n  bar 2\n", SSHTarget(alias="x")),
    "crlf_line_endings": ("Host x\r\n  Port 2003\r\n  User bob\r\n", SSHTarget(alias="x")),
    "very_long_line": ("Host x\n  IdentityFile /tmp/" + "a" * 5000 + "\n  Port 2004\n", SSHTarget(alias="x")),
    # second sweep (each differed from ssh -G before)
    "match_criterion_and_value_split_by_equals": ('Match host=x exec="test 1 = 1"\n  Port 2005\n',
                                                  SSHTarget(alias="x")),
    "pubkeyauthentication_host_bound": ("Host x\n  PubkeyAuthentication host-bound\n  Port 2007\n",
                                        SSHTarget(alias="x")),
    "addkeystoagent_confirm_with_a_lifetime": ("Host x\n  AddKeysToAgent confirm 5m\n  Port 2008\n",
                                               SSHTarget(alias="x")),
    "hostname_percent_percent_h": ("Host x\n  HostName a%%h.example\n", SSHTarget(alias="x")),
    "missing_profile_key_leaves_the_default_keys": ("Host x\n  Port 2009\n",
                                                    SSHTarget(alias="x", identity_file="/nonexistent/key")),
}


@pytest.mark.parametrize("case", sorted(SWEEP))
def test_sweep_resolves_like_ssh_G(case, monkeypatch):
    text, target = SWEEP[case]
    paths.ssh_config_path().write_bytes(text.encode())
    by_ssh, ours = both(target, monkeypatch)
    assert ours == by_ssh


def both_errors(target: SSHTarget, monkeypatch) -> tuple[str, str]:
    """Both resolvers must refuse the config: (ssh -G's message, our parser's)."""
    monkeypatch.delenv("DEVENV_NO_SSH_CLIENT", raising=False)
    with pytest.raises(ProfileError) as by_ssh:
        resolve(target)
    monkeypatch.setenv("DEVENV_NO_SSH_CLIENT", "1")
    with pytest.raises(ProfileError) as ours:
        resolve(target)
    monkeypatch.delenv("DEVENV_NO_SSH_CLIENT")
    assert ours.value.hint
    return by_ssh.value.message, ours.value.message


REFUSED = {
    # config, what both messages say (ssh's own words), the line it is on
    "unknown_keyword": ("Host x\n  FooBar yes\n", "Bad configuration option: foobar", 2),
    "unknown_keyword_in_a_block_that_does_not_apply": ("Host other\n  FooBar yes\n",
                                                       "Bad configuration option: foobar", 2),
    "ignoreunknown_after_the_option": ("Host x\n  FooBar 1\n  IgnoreUnknown foo*\n",
                                       "Bad configuration option: foobar", 2),
    "ignoreunknown_in_a_block_that_does_not_apply": ("Host other\n  IgnoreUnknown foo*\nHost *\n  FooBar 1\n",
                                                     "Bad configuration option: foobar", 4),
    "bom": ("\ufeffHost x\n  Port 2003\n", "Bad configuration option", 1),
    "bad_port": ("Host x\n  Port 0x10\n", "Bad port '0x10'", 2),
    "port_out_of_range": ("Host x\n  Port 99999\n", "Bad port '99999'", 2),
    "extra_arguments": ("Host x\n  User=bob Port=5\n", "extra arguments at end of line", 2),
    "bad_flag": ("Host x\n  IdentitiesOnly maybe\n", 'unsupported option "maybe"', 2),
    "invalid_quotes": ('Host x\n  User "unterminated\n', "invalid quotes", 2),
    # second sweep (our parser accepted each before)
    "hostname_token_other_than_h": ("Host x\n  HostName %r.example\n", "unknown key %r", 2),
    "match_all_with_another_criterion": ("Match all host x\n  Port 2\n", "'all' cannot be combined", 1),
    "empty_quoted_user": ('Host x\n  User ""\n', "Missing argument.", 2),
    "keyword_without_argument": ("Host x\n  SendEnv\n", 'no argument after keyword "sendenv"', 2),
    "negative_serveralivecountmax": ("Host x\n  ServerAliveCountMax -1\n", "integer value too small", 2),
    "bad_addkeystoagent": ("Host x\n  AddKeysToAgent maybe\n", "unsupported option", 2),
    "known_hosts_none_with_another_file": ("Host x\n  UserKnownHostsFile none /a\n",
                                           '"none" argument must appear alone', 2),
    "bad_addressfamily": ("Host x\n  AddressFamily ipv4\n", 'unsupported option "ipv4"', 2),
    "match_single_quotes_do_not_group": ("Match exec 'test 1 = 1'\n  Port 2\n", "Unsupported Match attribute 1", 1),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_sweep_refuses_like_ssh_G_naming_file_and_line(case, monkeypatch):
    text, words, line = REFUSED[case]
    cfg = paths.ssh_config_path()
    cfg.write_bytes(text.encode())
    by_ssh, ours = both_errors(SSHTarget(alias="x"), monkeypatch)
    assert words in by_ssh.replace("\\357\\273\\277", "\ufeff")
    assert words in ours and f"{cfg} line {line}" in ours


def test_expanded_paths_are_the_ones_ssh_G_prints(monkeypatch, tmp_path):
    """ssh -G prints UserKnownHostsFile and IdentityAgent expanded: a '%' or '${' left there is part of the
    name (devenv expanded them a second time: kh_%%h became kh_x, not the kh_%h ssh reads). GlobalKnownHostsFile
    and RevokedHostKeys, which 9.2 takes literally (but ~ in the first), are checked against real ssh in
    tests/integration/test_openssh_parity.py."""
    monkeypatch.setenv("PARITY_VALUE", "v%h${HOME}")
    paths.ssh_config_path().write_text("Host x\n  UserKnownHostsFile /kh_%%h_%h /e_${PARITY_VALUE}\n"
                                       "  IdentityAgent /ag_%%h_${PARITY_VALUE}\n")
    printed = ssh_g.query([], "x", str(paths.ssh_config_path()))
    by_ssh, ours = both(SSHTarget(alias="x"), monkeypatch)
    assert ours == by_ssh
    assert by_ssh.known_hosts_files == tuple(str(printed["userknownhostsfile"]).split())
    assert by_ssh.known_hosts_files == ("/kh_%h_x", "/e_v%h${HOME}")
    assert by_ssh.identity_agent == printed["identityagent"] == "/ag_%h_v%h${HOME}"


def test_match_exec_after_a_false_criterion_is_not_run(monkeypatch, tmp_path):
    """ssh skips an `exec` once an earlier criterion of the line failed; our parser used to run it."""
    ran = tmp_path / "ran"
    paths.ssh_config_path().write_text(f'Match host nomatch exec "touch {ran}"\n  Port 2\n'
                                       f'Match !host x exec "touch {ran}-negated"\n  Port 3\n')
    by_ssh, ours = both(SSHTarget(alias="x"), monkeypatch)
    assert ours == by_ssh and by_ssh.port == 22
    assert not ran.exists() and not ran.with_name("ran-negated").exists()


@pytest.mark.parametrize("line", ["ProxyUseFdpass yes", "BindInterface lo"])
def test_what_devenv_cannot_dial_is_said_by_both_resolvers(line, monkeypatch):
    """ssh would reach the host another way (a passed socket, a bound interface): devenv says it cannot,
    before dialling, instead of connecting as if the line were not there."""
    paths.ssh_config_path().write_text(f"Host x\n  {line}\n")
    by_ssh, ours = both_errors(SSHTarget(alias="x"), monkeypatch)
    assert by_ssh == ours and line in ours and "devenv does not support" in ours


def test_included_file_writable_by_others_is_refused_like_ssh(monkeypatch):
    cfg = paths.ssh_config_path()
    loose = cfg.with_name("loose.conf")
    loose.write_text("Port 2\n")
    loose.chmod(0o666)
    cfg.write_text(f"Include {loose}\n")
    by_ssh, ours = both_errors(SSHTarget(alias="x"), monkeypatch)
    assert f"Bad owner or permissions on {loose}" in by_ssh and f"Bad owner or permissions on {loose}" in ours
    loose.chmod(0o644)
    assert both(SSHTarget(alias="x"), monkeypatch)[0].port == 2


def test_config_that_is_a_directory_reads_as_empty_like_ssh(monkeypatch, tmp_path):
    d = tmp_path / "cfgdir"
    d.mkdir()
    monkeypatch.setenv("DEVENV_SSH_CONFIG", str(d))
    by_ssh, ours = both(SSHTarget(alias="x"), monkeypatch)
    assert ours == by_ssh and by_ssh.port == 22


def test_what_the_parser_cannot_do_is_a_clear_error(monkeypatch):
    """CanonicalizeHostname needs ssh's own DNS canonicalization: ssh -G does it, the parser says so."""
    paths.ssh_config_path().write_text("Host x\n  CanonicalizeHostname yes\nMatch canonical\n  Port 2104\n")
    monkeypatch.delenv("DEVENV_NO_SSH_CLIENT", raising=False)
    assert resolve(SSHTarget(alias="x")).port == 2104
    monkeypatch.setenv("DEVENV_NO_SSH_CLIENT", "1")
    with pytest.raises(ProfileError) as ei:
        resolve(SSHTarget(alias="x"))
    assert "line 2" in ei.value.message and "CanonicalizeHostname" in ei.value.message
    assert "openssh-client" in ei.value.hint
    paths.ssh_config_path().write_text("Match localnetwork 10.0.0.0/8\n  Port 2\n")
    with pytest.raises(ProfileError) as ei:
        resolve(SSHTarget(alias="x"))
    assert "localnetwork" in ei.value.message and "line 1" in ei.value.message


def test_known_hosts_paths_with_spaces_are_one_path_each(monkeypatch, tmp_path):
    """ssh reads `UserKnownHostsFile "/x/my dir/kh" /x/other` as two files; ssh -G prints them joined by
    spaces, and devenv split that line at every space (three files, none of them the first)."""
    spaced = tmp_path / "my  dir"
    paths.ssh_config_path().write_text(f'Host x\n  UserKnownHostsFile "{spaced}/kh" {tmp_path}/other\n'
                                       f'  GlobalKnownHostsFile "{spaced}/global"\n')
    by_ssh, ours = both(SSHTarget(alias="x"), monkeypatch)
    assert ours == by_ssh
    assert by_ssh.known_hosts_files == (f"{spaced}/kh", f"{tmp_path}/other")
    assert by_ssh.global_known_hosts_files == (f"{spaced}/global",)


@pytest.mark.parametrize("lines", [
    "",
    "  Ciphers +aes128-cbc\n  MACs ^hmac-sha1\n",
    "  KexAlgorithms -*sha1*,diffie-hellman-group14-sha256\n  HostKeyAlgorithms -*-cert-v01@openssh.com\n",
    "  Ciphers aes256-ctr,aes128-ctr\n  KexAlgorithms -*\n",
])
def test_algorithm_lists_resolve_as_ssh_G_prints_them(monkeypatch, tmp_path, lines):
    """The parser's KexAlgorithms, Ciphers, MACs and HostKeyAlgorithms (what devenv's transport offers) are
    ssh -G's, with the +, - and ^ forms resolved against OpenSSH 9.2's defaults."""
    from devenv.remote import sshconfig_parser
    from devenv.remote.algorithms import OPENSSH_DEFAULTS
    from devenv.remote.sshconfig import Overrides

    paths.ssh_config_path().write_text("Host x\n" + lines)
    printed = ssh_g.query([], "x", str(paths.ssh_config_path()))
    ours = sshconfig_parser.lookup("x", Overrides(), paths.ssh_config_path())
    for keyword in OPENSSH_DEFAULTS:
        assert ours[keyword] == printed[keyword], keyword
