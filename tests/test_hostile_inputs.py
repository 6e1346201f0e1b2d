"""Hostile and broken inputs at the boundary (issue 14): each is bad input (exit 2) with file:line and the
field, nothing runs, and no error repeats a whole value (a private key pasted by mistake is not printed)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import not_a_file
import pytest
from click.testing import CliRunner

from devenv.cli import main
from devenv.config import profiles
from devenv.config.profiles import HostProfile, SSHTarget
from devenv.errors import DevenvError, ProfileError
from devenv.remote import openssh

KEY = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
       "-----END OPENSSH PRIVATE KEY-----")


def write(home: Path, kind: str, name: str, text: str | bytes) -> Path:
    folder = home / "profiles" / kind
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


HOSTILE_HOSTS = [
    # (profile text, the field the error names)
    ('ssh:\n  hostname: "-oProxyCommand=touch CANARY"\nruntime: host\n', "ssh.hostname"),
    ('ssh:\n  alias: "-oProxyCommand=touch CANARY"\nruntime: host\n', "ssh.alias"),
    ('ssh:\n  alias: box\n  user: "-oProxyCommand=touch CANARY"\nruntime: host\n', "ssh.user"),
    ('ssh:\n  alias: box\n  identity_file: "/k\\nMatch exec \\"touch CANARY\\""\nruntime: host\n', "ssh.identity_file"),
    ('ssh:\n  alias: box\n  proxy_jump: ["-oProxyCommand=touch CANARY"]\nruntime: host\n', "ssh.proxy_jump"),
    ('ssh:\n  alias: box\n  proxy_jump: "bastion,-oProxyCommand=touch CANARY"\nruntime: host\n', "ssh.proxy_jump"),
    ('ssh:\n  hostname: "box\\u0000x"\nruntime: host\n', "ssh.hostname"),
    ('ssh:\n  hostname: "box evil"\nruntime: host\n', "ssh.hostname"),
    ('ssh:\n  alias: box\n  port: "٢٢"\n', "ssh.port"),
    ('ssh:\n  alias: box\n  port: ' + "9" * 5000 + "\n", "ssh.port"),
    ('ssh:\n  alias: box\n  connect_timeout: .nan\n', "ssh.connect_timeout"),
    ('ssh:\n  alias: box\n  connect_timeout: .inf\n', "ssh.connect_timeout"),
    ('ssh:\n  alias: box\n  connect_timeout: 1e300\n', "ssh.connect_timeout"),
    ('ssh:\n  alias: box\npython: "python3; touch CANARY"\n', "python"),
    ('ssh:\n  alias: box\ngroups: ["../x"]\n', "groups[0]"),
    ('ssh:\n  alias: box\ndescription: !!python/object:os.system "touch CANARY"\n', "tag"),
    ('ssh:\n  alias: !secret box\n', "tag"),
]


@pytest.mark.parametrize("text,where", HOSTILE_HOSTS)
def test_hostile_host_profiles_are_bad_input_and_run_nothing(isolated_home, tmp_path, monkeypatch, text, where):
    canary = tmp_path / "canary"
    path = write(isolated_home, "hosts", "evil", text.replace("CANARY", str(canary)))
    with pytest.raises(ProfileError) as err:
        profiles.load_host("evil")
    assert err.value.exit_code == 2
    assert err.value.message.startswith(f"{path}:"), err.value.message
    assert where in err.value.message, err.value.message
    assert str(canary) not in err.value.message  # the value is not echoed whole
    if shutil.which("ssh"):
        result = cli("ssh", "evil")
        assert result.exit_code == 2, result.output
        assert not canary.exists()


def test_a_pasted_private_key_is_not_printed(isolated_home):
    import yaml

    write(isolated_home, "hosts", "oops", yaml.safe_dump({"ssh": {"alias": KEY}}))
    result = cli("check", "oops")
    assert result.exit_code == 2
    assert "PRIVATE KEY" not in result.output and "b3BlbnNzaC1rZXkt" not in result.output
    assert "oops.yaml:" in result.output and "ssh.alias" in result.output


@pytest.mark.parametrize("field", ["partition", "account", "qos", "gpu_type", "time", "mem", "mem_per_gpu",
                                   "constraint", "extra_sbatch"])
def test_a_bad_slurm_value_is_not_echoed_whole(isolated_home, field):
    import yaml

    value = KEY if field != "extra_sbatch" else [KEY]
    write(isolated_home, "hosts", "login", yaml.safe_dump({"ssh": {"alias": "box"}, "runtime": "slurm",
                                                          "slurm": {field: value}}))
    with pytest.raises(ProfileError) as err:
        profiles.load_host("login")
    shown = err.value.message + (err.value.hint or "")
    assert f"slurm.{field}" in shown and "PRIVATE KEY" not in shown and "b3BlbnNzaC1rZXkt" not in shown, shown
    write(isolated_home, "hosts", "login", yaml.safe_dump({"ssh": {"alias": "box"}, "runtime": "slurm",
                                                          "slurm": {field: "x;" + "a" * 60}}))
    with pytest.raises(ProfileError) as err:
        profiles.load_host("login")
    assert "a" * 30 not in err.value.message and "(62 characters)" in err.value.message, err.value.message


BAD_ENVS = [
    ("image: ''\n", "image"),
    ('image: "devenv/x:1\\nRUN evil"\n', "image"),
    ("image: -x\n", "image"),
    ("image: a\ngpus: []\n", "gpus"),
    ("image: a\ngpus: [0, 0]\n", "gpus"),
    ("image: a\nports: {jupyterr: 8888}\n", "ports.jupyterr"),
    ("image: a\nports: {jupyter: 0}\n", "ports.jupyter"),
    ("image: a\nports: {jupyter: 8888, ssh: 8888}\n", "ports"),
    ("image: a\nvolumes: {workspace: workspace}\n", "volumes.workspace"),
    ("image: a\nvolumes: {workspace: '/w:/etc'}\n", "volumes.workspace"),
    ("image: a\nshm_size: 0\n", "shm_size"),
    ("image: a\nshm_size: 99999999g\n", "shm_size"),
    ("image: a\nimage_size_gb: .nan\n", "image_size_gb"),
    ("image: a\nimage_size_gb: 1e300\n", "image_size_gb"),
    ("image: a\nimage_size_gb: -1\n", "image_size_gb"),
    ("image: a\nenv: {A: \"x\\u001b[2J\"}\n", "env.A"),
    ("image: a\nbuild: {dockerfile: \"x\\ny\"}\n", "build.dockerfile"),
]


@pytest.mark.parametrize("text,where", BAD_ENVS)
def test_bad_env_values_are_refused_with_the_field(isolated_home, text, where):
    path = write(isolated_home, "envs", "bad", text)
    with pytest.raises(ProfileError) as err:
        profiles.load_env("bad")
    assert err.value.message.startswith(f"{path}:") and where in err.value.message, err.value.message


def _bomb() -> str:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        lines.append(f"{chr(97 + i)}: &{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}"] * 9) + "]")
    return "\n".join(lines) + "\ndescription: *i\n"


BROKEN_FILES = [
    ("utf16", "ssh:\n  alias: box\n".encode("utf-16"), "UTF-16"),
    ("latin1", b"description: caf\xe9\nssh:\n  alias: box\n", "not UTF-8"),
    ("nul", b"ssh:\n  alias: box\x00\n", "NUL"),
    ("deep", ("x: " + "[" * 5000 + "]" * 5000 + "\n").encode(), "nested"),
    ("bomb", _bomb().encode(), "aliases"),
    ("huge", b"description: " + b"x" * 300_000 + b"\nssh: {alias: a}\n", "larger than"),
]


@pytest.mark.parametrize("name,data,words", BROKEN_FILES, ids=[b[0] for b in BROKEN_FILES])
def test_broken_files_are_bad_input_not_internal_errors(isolated_home, name, data, words):
    write(isolated_home, "hosts", name, data)
    result = cli("check", name)
    assert result.exit_code == 2, (result.exit_code, result.output[-400:], result.exception)
    assert words in result.output, result.output


def test_a_profile_that_is_a_fifo_or_a_device_is_refused_without_hanging(isolated_home):
    folder = isolated_home / "profiles" / "hosts"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "pipe.yaml")
    (folder / "zero.yaml").symlink_to("/dev/zero")
    for name in ("pipe", "zero"):
        result = cli("check", name)
        assert result.exit_code == 2 and "not a regular file" in result.output, result.output
    assert cli("profiles", "validate", str(folder / "pipe.yaml")).exit_code == 2


@pytest.mark.parametrize("args", [
    ["up", "127.0.0.1:9", "--ready-timeout", "nan"],
    ["up", "127.0.0.1:9", "--ready-timeout", "inf"],
    ["up", "127.0.0.1:9", "--ready-timeout", "1e300"],
    ["monitor", "127.0.0.1:9", "--once", "--interval", "nan"],
    ["logs", "127.0.0.1:9", "--tail", "٣"],
    ["logs", "127.0.0.1:9", "--tail", "²"],
    ["logs", "127.0.0.1:9", "--tail", "9" * 5000],
    ["sanity", "127.0.0.1:9", "--only", "bogus"],
    ["up", "127.0.0.1:9", "--ca-bundle", "/nonexistent.pem"],
    ["up", "127.0.0.1:9", "--wheelhouse", "/nonexistent"],
    ["image", "build", "127.0.0.1:9", "--ca-bundle", "/nonexistent.pem"],
    ["status", "../.."],
    ["status", "a" * 300],
    ["status", "-oProxyCommand=x"],
    ["status", "box:٢٢"],
    ["monitor", "127.0.0.1:9", "--once", "--prometheus", "127.0.0.1:0"],  # it served forever, --once ignored
    ["monitor", "127.0.0.1:9", "--once", "--json", "--watch"],
    # issue 28: a bad env name was found only after connecting (so an unreachable host said exit 3)
    *[[command, "127.0.0.1:9", "--env", "../x", *rest] for command, rest in (
        ("exec", ["--", "true"]), ("logs", []), ("jupyter", []), ("ssh", []), ("sanity", []), ("up", []))],
    ["sanity", "127.0.0.1:9", "--only", ",,,"],
    ["sanity", "127.0.0.1:9", "--only", " , "],
    ["compat", "--cuda", "١٢.٨", "--driver", "535.104.05"],
    ["compat", "--cuda", "12.8", "--driver", "٥٣٥.104.05"],
    ["compat", "--gpu-cc", "٨.٠"],
])
def test_bad_options_are_exit_2_before_connecting(args):
    # 127.0.0.1:9 (discard) is closed: a command that tried to connect would exit 3, not 2
    result = cli(*args)
    assert result.exit_code == 2, (result.exit_code, result.output[-400:])


@pytest.mark.parametrize("command", [["status", "127.0.0.1:9"], ["exec", "127.0.0.1:9", "--", "true"],
                                     ["check", "127.0.0.1:9"], ["profiles", "list"]])
def test_devenv_home_that_is_a_file_is_exit_2_before_connecting(monkeypatch, tmp_path, command):
    (tmp_path / "afile").write_text("x")
    for home in (tmp_path / "afile", tmp_path / "afile" / "below"):
        monkeypatch.setenv("DEVENV_HOME", str(home))
        result = cli(*command)
        assert result.exit_code == 2 and "DEVENV_HOME" in result.output, (command, result.output[-400:])


def test_a_bad_devenv_ssh_key_is_exit_2_before_connecting(monkeypatch, tmp_path):
    monkeypatch.setenv("DEVENV_SSH_KEY", str(tmp_path / "missing"))
    assert cli("status", "127.0.0.1:9").exit_code == 2
    monkeypatch.setenv("DEVENV_SSH_KEY", "/k\nMatch exec true")
    assert cli("status", "127.0.0.1:9").exit_code == 2


# --- OpenSSH command lines and config, whatever made the HostProfile -------------------------------------

def _host(**ssh) -> HostProfile:
    return HostProfile(name="box", source="test", ssh=SSHTarget(**ssh))


@pytest.mark.parametrize("ssh", [
    {"hostname": "-oProxyCommand=touch /tmp/x"}, {"alias": "-oProxyCommand=touch /tmp/x"},
    {"alias": "box", "user": "-oProxyCommand=x"}, {"alias": "box", "identity_file": "/k\nMatch exec true"},
    {"alias": "box", "proxy_jump": ("-oProxyCommand=x",)}, {"alias": "box\nMatch exec true"},
])
def test_ssh_argv_and_config_refuse_option_like_or_multi_line_values(ssh):
    with pytest.raises(DevenvError) as err:
        openssh.host_options(_host(**ssh))
    assert err.value.exit_code == 2
    with pytest.raises(DevenvError):
        openssh.env_config_entry("devenv-box-cpu", _host(**ssh), 2222, Path("/c/id"), Path("/c/kh"))


def test_every_ssh_argv_puts_the_destination_after_double_dash():
    argv = openssh.host_options(_host(hostname="10.0.0.5", user="me", port=22))
    assert argv[-2:] == ["--", "10.0.0.5"]
    entry = openssh.env_config_entry("devenv-box-cpu", _host(alias="box", identity_file="/k/50%h"), 2222,
                                     Path("/c/id"), Path("/c/kh"))
    proxy = next(line for line in entry.splitlines() if "ProxyCommand" in line)
    assert "-i /k/50%%h " in proxy  # a literal % is not a token
    assert proxy.endswith("-W %h:%p -- box")


@pytest.mark.parametrize("path", ["/c/id\nMatch exec \"touch /tmp/x\"", '/c/"id', "/c/\x00id"])
def test_config_entries_refuse_paths_that_cannot_be_quoted(path):
    with pytest.raises(DevenvError):
        openssh.env_config_entry("devenv-local-cpu", HostProfile(name="local", source="t", local=True), 2222,
                                 Path(path), Path("/c/kh"))
    with pytest.raises(DevenvError):
        openssh.known_hosts_line("devenv-local-cpu", "ssh-ed25519 AAAA\nMatch exec true")


def test_a_path_with_a_blank_is_quoted():
    entry = openssh.env_config_entry("devenv-local-cpu", HostProfile(name="local", source="t", local=True), 2222,
                                     Path("/my keys/id"), Path("/c/kh"))
    assert 'IdentityFile "/my keys/id"' in entry


# --- paths and files named on the command line -------------------------------------------------------

BROKEN_DEVCONTAINERS = [
    ("latin1", b'{"image": "caf\xe9"}', "not UTF-8"),
    ("utf16", '{"image": "x"}'.encode("utf-16"), "UTF-16"),
    ("deep", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("huge", b'{"name": "' + b"x" * 300_000 + b'"}', "larger than"),
]


@pytest.mark.parametrize("name,data,words", BROKEN_DEVCONTAINERS, ids=[b[0] for b in BROKEN_DEVCONTAINERS])
def test_a_broken_devcontainer_json_is_bad_input_not_an_internal_error(tmp_path, name, data, words):
    folder = tmp_path / name / ".devcontainer"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_bytes(data)
    result = cli("up", "127.0.0.1:9", "--devcontainer", str(tmp_path / name))
    assert result.exit_code == 2 and words in result.output, (result.exit_code, result.output[-300:])


def test_a_devcontainer_json_that_is_a_fifo_is_refused_without_hanging(tmp_path):
    folder = tmp_path / "p" / ".devcontainer"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "devcontainer.json")
    result = cli("up", "127.0.0.1:9", "--devcontainer", str(folder / "devcontainer.json"))
    assert result.exit_code == 2, result.output


@pytest.mark.parametrize("args", [
    ["profiles", "validate", "a" * 300],
    ["sync", "127.0.0.1:9", "a" * 300],
    ["up", "127.0.0.1:9", "--devcontainer", "a" * 300],
    ["profiles", "validate", "a\0b"],
    ["sync", "127.0.0.1:9", "a\0b"],
    ["up", "127.0.0.1:9", "--sync", "a\0b"],
    ["up", "127.0.0.1:9", "--devcontainer", "a\0b"],
])
def test_paths_the_os_cannot_look_up_are_exit_2(args):
    result = cli(*args)
    assert result.exit_code == 2, (result.exit_code, result.output[-300:])
    assert "a" * 100 not in result.output  # not echoed whole


@pytest.mark.parametrize("text", ['{"image": "x", "forwardPorts": 8888}', '{"image": "x", "forwardPorts": null}',
                                  '{"image": "x", "forwardPorts": true}'])
def test_forward_ports_that_are_no_list_are_bad_input(text):
    from devenv.env import devcontainer

    with pytest.raises(ProfileError) as err:
        devcontainer.parse(text, "dc.json")
    assert "forwardPorts must be a list" in err.value.message


def test_devcontainer_errors_show_no_control_characters_or_long_names():
    from devenv.env import devcontainer

    for text in ('{"image": "x", "containerEnv": {"\\u001b[2J' + "A" * 60 + '": "1"}}',
                 '{"build": {"dockerfile": "../../' + "d" * 60 + '"}}'):
        with pytest.raises(ProfileError) as err:
            devcontainer.parse(text, "dc.json")
        assert "\x1b" not in err.value.message and "A" * 30 not in err.value.message
        assert "d" * 50 not in err.value.message, err.value.message
    assert devcontainer.parse('{"image": "x", "forwardPorts": [true, 6006]}', "dc.json").forward_ports == (6006,)


@pytest.mark.parametrize("kind", not_a_file.KINDS)
def test_an_ssh_config_that_is_no_regular_file_is_exit_2_not_a_hang(isolated_home, monkeypatch, tmp_path, kind):
    """`ssh-config install/show/uninstall` read the user's ssh config: a FIFO hung, /dev/zero never ended and a
    folder was exit 70."""
    path = not_a_file.make(tmp_path / "config", kind)
    monkeypatch.setenv("DEVENV_SSH_CONFIG", str(path))
    for args in (["ssh-config", "install", "--yes"], ["ssh-config", "show"], ["ssh-config", "uninstall"]):
        result = cli(*args)
        assert result.exit_code == 2 and "not a regular file" in result.output, (args, result.output)


def test_known_hosts_that_are_no_regular_file_hold_no_keys_and_take_none(tmp_path):
    from devenv.errors import HostKeyError
    from devenv.remote import hostkeys

    fifo = tmp_path / "known_hosts"
    os.mkfifo(fifo)
    assert hostkeys.known_keys("box", 22, files=[fifo, Path("/dev/zero"), Path(os.devnull)]) == []
    with pytest.raises(HostKeyError):
        hostkeys.record("box", "ssh-ed25519", b"k" * 32, fifo)
    hostkeys.record("box", "ssh-ed25519", b"k" * 32, Path(os.devnull))  # keeps nothing, as ssh does


@pytest.mark.parametrize("args", [
    ["check", "127.0.0.1:9", "--env", "KEY"], ["status", "KEY"], ["profiles", "show", "KEY"],
    ["compat", "--cuda", "KEY"], ["sanity", "127.0.0.1:9", "--suite", "KEY"], ["jupyter", "127.0.0.1:9", "-p", "KEY"],
    ["monitor", "127.0.0.1:9", "--prometheus", "KEY"], ["image", "build", "127.0.0.1:9", "--ca-bundle", "KEY"],
    ["hosts", "add", "KEY"], ["logs", "127.0.0.1:9", "--tail", "KEY"], ["KEY"],
])
def test_no_error_repeats_a_key_pasted_as_an_argument(isolated_home, args):
    result = cli(*[KEY if a == "KEY" else a for a in args])
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "PRIVATE KEY" not in result.output and "b3BlbnNzaC1rZXkt" not in result.output, result.output
    long = "x-" * 30  # no valid name either
    result = cli(*[long if a == "KEY" else a for a in args])
    assert result.exit_code == 0 or long not in result.output, result.output


@pytest.mark.parametrize("fields,words", [
    ("build: {dockerfile: ../../etc/Dockerfile}\n", "is not in"),
    ("build: {dockerfile: /etc/hostname}\n", "is not in"),
    ("build: {dockerfile: no-such.Dockerfile}\n", "is not in"),
    ("volumes: {workspace: /}\n", "is the container's root"),
    ("volumes: {workspace: /./}\n", "is the container's root"),
])
def test_profiles_validate_refuses_what_up_refuses(isolated_home, fields, words):
    path = write(isolated_home, "envs", "mine", "image: devenv/mine:1\n" + fields)
    validated = cli("profiles", "validate", str(path))
    assert validated.exit_code == 2 and words in validated.output, validated.output[-400:]
    assert "ok    " not in validated.output
    everything = cli("profiles", "validate")  # every profile, this one among them
    assert everything.exit_code == 2 and words in everything.output
    up = cli("up", "127.0.0.1:9", "--env", "mine")
    if "volumes" in fields:  # refused when the profile is read: before dialling
        assert up.exit_code == 2 and words in up.output, up.output[-400:]


def test_profiles_validate_takes_a_dockerfile_in_the_build_context_folder(isolated_home, tmp_path, monkeypatch):
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "mine.Dockerfile").write_text("FROM scratch\n")
    path = write(isolated_home, "envs", "mine", "image: devenv/mine:1\nbuild: {dockerfile: mine.Dockerfile}\n")
    assert cli("profiles", "validate", str(path)).exit_code == 2
    monkeypatch.setenv("DEVENV_BUILD_CONTEXT", str(context))
    result = cli("profiles", "validate", str(path))
    assert result.exit_code == 0 and f"ok    {path}" in result.output, result.output
