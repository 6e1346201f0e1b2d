"""The environment's ssh alias names one (host, env) pair (issue 14): host `a` + env `b-c` and host `a-b` + env
`c` once both wrote `devenv-a-b-c`, so the second `up` took the first one's entry. Now each pair has its own
alias (checked by decoding it back, for generated pairs), the usual names read as before, and an old entry is
migrated when its pair writes again. Two real entries, resolved by OpenSSH's own `ssh -G`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from fuzz_values import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from devenv.config.profiles import HostProfile, SSHTarget
from devenv.remote import openssh
from devenv.services import ssh_entry

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMemoryRuntimeHostKeyOfTheEnvironment0000"


def _unescape(text: str, dash: str) -> str:
    data, i = bytearray(), 0
    while i < len(text):
        if text.startswith("+", i):
            data.append(int(text[i + 1:i + 3], 16))
            i += 3
        elif dash and text.startswith(dash, i):
            data += b"-"
            i += len(dash)
        else:
            data += text[i].encode()
            i += 1
    return data.decode()


def decode(alias: str) -> tuple[str, str]:
    """(host, env) back from an alias: the env's dashes come in pairs, so the last single dash ends the host."""
    body = alias.removeprefix("devenv-")
    runs = [m for m in re.finditer(r"-+", body) if len(m.group()) % 2]
    sep = runs[-1].start()
    host, env = body[:sep], body[sep + 1:]
    return ("" if host == "+" else _unescape(host, "")), ("" if env == "+" else _unescape(env, "--"))


names = st.text(alphabet=st.sampled_from("ab-._Z@:+é1"), max_size=8)


@settings(max_examples=examples(), deadline=None)
@given(names, names)
def test_every_alias_decodes_back_to_its_own_host_and_env(host, env):
    alias = openssh.env_alias(host, env)
    assert re.fullmatch(r"[a-z0-9._+-]+", alias), alias  # a plain ssh_config word, case-free
    assert decode(alias) == (host, env)


def test_the_colliding_pairs_of_issue_14_have_two_aliases_and_usual_names_keep_theirs():
    assert openssh.env_alias("a", "b-c") != openssh.env_alias("a-b", "c")
    assert openssh.env_alias("a100-box", "default") == "devenv-a100-box-default"  # as before
    assert openssh.env_alias("testbox", "my-env") == "devenv-testbox-my--env"


def _host(name: str) -> HostProfile:
    return HostProfile(name=name, source="test", ssh=SSHTarget(alias="box"))


def _ssh_g(config: Path, alias: str) -> dict[str, str]:
    out = subprocess.run(["ssh", "-G", "-F", str(config), alias], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def test_two_real_entries_that_once_collided_lead_to_their_own_ports(isolated_home):
    first = ssh_entry.write_env_entry(_host("a"), "b-c", 40001, KEY, Path("/k/id"))
    second = ssh_entry.write_env_entry(_host("a-b"), "c", 40002, KEY, Path("/k/id"))
    config, known = ssh_entry.ssh_files()
    assert first != second
    assert _ssh_g(config, first)["port"] == "40001"
    assert _ssh_g(config, second)["port"] == "40002"
    assert _ssh_g(config, first)["hostkeyalias"] == first
    assert {line.split()[0] for line in known.read_text().splitlines()} == {first, second}


def test_an_old_entry_is_migrated_when_its_pair_writes_again_and_a_current_one_is_left(isolated_home):
    config, known = ssh_entry.ssh_files()
    config.parent.mkdir(parents=True, exist_ok=True)
    # what devenv wrote before: no entry mark, the old alias (shared by (a, b-c) and (a-b, c))
    old_block = openssh.env_config_entry("devenv-a-b-c", _host("a"), 40001, Path("/k/id"), known)
    old_block = old_block.replace(openssh.ENTRY_MARK + "\n", "")
    config.write_text("Host other\n  Port 7\n\n" + old_block)
    known.write_text(f"devenv-a-b-c {KEY}\nother-host {KEY}\n")

    alias = ssh_entry.write_env_entry(_host("a"), "b-c", 40003, KEY, Path("/k/id"))
    assert alias == "devenv-a-b--c"
    text = config.read_text()
    assert "Host devenv-a-b-c\n" not in text and f"Host {alias}\n" in text and "Host other\n" in text
    assert [ln.split()[0] for ln in known.read_text().splitlines()] == ["other-host", alias]
    # the old name no longer leads anywhere devenv wrote; the new one leads to the new port
    assert _ssh_g(config, "devenv-a-b-c")["port"] == "22"
    assert _ssh_g(config, alias)["port"] == "40003"

    # (a-b, c) now owns devenv-a-b-c; a later write of (a, b-c) leaves that current entry alone
    ssh_entry.write_env_entry(_host("a-b"), "c", 40004, KEY, Path("/k/id"))
    ssh_entry.write_env_entry(_host("a"), "b-c", 40005, KEY, Path("/k/id"))
    assert _ssh_g(config, "devenv-a-b-c")["port"] == "40004"
    assert _ssh_g(config, alias)["port"] == "40005"
