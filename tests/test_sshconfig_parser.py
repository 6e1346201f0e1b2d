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
from devenv.errors import ConnectError
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
