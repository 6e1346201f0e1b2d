"""Zero-YAML without dead ends (issue 28, point 5), the parts that need no host: "did you mean" for a mistyped
command or host (the README's codes: 2 for a command, 3 for a host name that does not resolve), `hosts add
--env`, `hosts list`, `hosts rm`, and completion that offers your ssh config's Host names."""

from __future__ import annotations

import json

from click.testing import CliRunner

from devenv.cli import main
from devenv.cli.completion_cmd import host_names


def cli(*args: str, **kw):
    return CliRunner().invoke(main, list(args), **kw)


def test_a_mistyped_command_gets_did_you_mean_and_exit_2(isolated_home):
    typo = cli("stauts")
    assert typo.exit_code == 2 and "Did you mean 'status'?" in typo.output, typo.output
    sub = cli("hosts", "lst")
    assert sub.exit_code == 2 and "Did you mean 'list'?" in sub.output, sub.output
    assert "Did you mean" not in cli("xyzzy").output


def test_a_mistyped_host_gets_did_you_mean_and_exit_3(isolated_home):
    (isolated_home / "ssh_config").write_text("Host testbox gpu-one\n  HostName 127.0.0.1\n  Port 9\n")
    result = cli("check", "testbx.invalid")
    assert result.exit_code == 3 and "did you mean" not in result.output  # nothing close: no guess
    (isolated_home / "ssh_config").write_text("Host testbox.invalid\n  HostName 127.0.0.1\n  Port 9\n")
    result = cli("check", "testbx.invalid")
    assert result.exit_code == 3 and "did you mean testbox.invalid?" in result.output, result.output


def test_hosts_add_with_env_list_and_rm(isolated_home):
    added = cli("hosts", "add", "gpu1", "--ssh", "me@10.0.0.7:2222", "--env", "cpu", "--group", "lab")
    assert added.exit_code == 0, added.output
    unknown = cli("hosts", "add", "gpu2", "--env", "nope")
    assert unknown.exit_code == 2 and "unknown environment 'nope'" in unknown.output
    listed = json.loads(cli("hosts", "list", "--json").output)["hosts"]
    mine = next(h for h in listed if h["name"] == "gpu1")
    assert mine["ssh"] == "me@10.0.0.7:2222" and mine["default_env"] == "cpu" and mine["groups"] == ["lab"]
    assert any(h["name"] == "a100-box" and h["example"] for h in listed)
    assert "gpu1      me@10.0.0.7:2222  runtime auto  env cpu  groups lab" in cli("hosts", "list").output
    near = cli("hosts", "rm", "gpu")
    assert near.exit_code == 2 and "did you mean 'gpu1'?" in near.output
    bundled = cli("hosts", "rm", "a100-box")
    assert bundled.exit_code == 2 and "bundled" in bundled.output
    assert cli("hosts", "rm", "gpu1").exit_code == 0
    assert not (isolated_home / "profiles" / "hosts" / "gpu1.yaml").exists()


def test_completion_offers_the_ssh_configs_host_names(isolated_home):
    more = isolated_home / "more.conf"
    more.write_text("Host=included-box\n")
    (isolated_home / "ssh_config").write_text(f"Include {more}\nHost gpu1 gpu2 *.lab !bad\n  User me\n"
                                              "Host bastion # the jump host\n")
    names = host_names()
    assert {"included-box", "gpu1", "gpu2", "bastion"} <= set(names)
    assert not any(n in names for n in ("*.lab", "!bad", "#"))
    shell = CliRunner().invoke(main, [], prog_name="devenv", env={
        "_DEVENV_COMPLETE": "bash_complete", "COMP_WORDS": "devenv check gp", "COMP_CWORD": "2"})
    offered = [line.split(",", 1)[1] for line in shell.output.splitlines() if "," in line]
    assert {"gpu1", "gpu2"} <= set(offered), shell.output
