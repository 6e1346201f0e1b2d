"""Fuzzing the command line (issue 14): every command with hostile host names, option values, environment
variables and profiles. Hosts are unreachable (127.0.0.1:9 is closed) so nothing needs a network: a command
that got as far as connecting exits 3. Checked: never exit 70, only documented codes (2 for bad input), and
nothing executed (the canary file never appears)."""

from __future__ import annotations

import os

import yaml
from click.testing import CliRunner
from fuzz_values import CANARY, HOSTILE, examples, hostile_text
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from devenv.cli import main, shown_whole

DOCUMENTED = {0, 1, 2, 3, 4, 5, 6}
UNREACHABLE = "127.0.0.1:9"
CLI_OVERRIDE = "DEVENV_FUZZ_CLI_EXAMPLES"   # a budget of its own for a long hunt (fuzz_values.examples)
FUZZ = settings(max_examples=examples(override=CLI_OVERRIDE), deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
COUNT = {"cli": 0}
CODES: dict[int, int] = {}

# what each command takes after its HOST argument (values are drawn per option)
COMMANDS = {
    "check": ["--env"], "status": ["--json"], "up": ["--env", "--ready-timeout", "--detach", "--gpus", "--ca-bundle",
                                                    "--wheelhouse"],
    "down": ["--env", "--purge"], "logs": ["--env", "--tail", "--follow"], "exec": ["--env"],
    "jupyter": ["--env", "--port"], "ssh": ["--env", "--config"], "tunnel": ["--env"],
    "sanity": ["--env", "--only", "--python", "--suite", "--gpus", "--wait-idle"],
    "monitor": ["--once", "--interval", "--json"], "image build": ["--env", "--ca-bundle", "--wheelhouse"],
    "code": ["--env", "--path", "--print"], "sync": ["--env", "--to", "--pull", "--interval"],
    "up --devcontainer": ["--env", "--gpus", "--sync"], "exec -t": ["--env"], "down --yes": ["--env", "--json"],
}
# commands that take no HOST: their arguments are drawn whole
NO_HOST = {
    "compat": ["--driver", "--cuda", "--gpu-cc", "--gpu-name", "--torch", "--arch-list", "--json"],
    "hosts add": ["--ssh", "--group", "--description", "--runtime"],
    "profiles show": ["--kind", "--json"], "profiles validate": ["--kind"], "completion": [],
}
FLAGS = {"--json", "--detach", "--purge", "--follow", "--config", "--once", "--print"}
NUMBERS = ["nan", "inf", "-inf", "1e300", "0", "-1", "٣", "²", "9" * 5000, "1", "30", "0.5", "1_0", " 5"]
PATHS = [".", "..", "/", "/dev/zero", "/etc/passwd", "a" * 300, "a/" * 2100, "../../../../etc", "~", "/nonexistent"]


def host_args() -> st.SearchStrategy[str]:
    # never a reachable host and never `local` (that would act on this machine's own Docker)
    return st.one_of(st.sampled_from([UNREACHABLE, "fz", "@fz", "@nogroup"]), hostile_text()).filter(
        lambda h: h not in ("local", "a100-box") and not h.startswith("local"))


def option_value(option: str) -> st.SearchStrategy[str]:
    if option in ("--ready-timeout", "--interval", "--tail", "--port", "--wait-idle", "--nodes", "--gpu-cc",
                  "--driver", "--cuda"):
        return st.one_of(st.sampled_from(NUMBERS), hostile_text())
    if option in ("--sync", "--devcontainer", "--ca-bundle", "--wheelhouse", "--path", "--to", "--pull"):
        return st.one_of(st.sampled_from(PATHS), hostile_text())
    if option == "--only":
        return st.one_of(st.sampled_from(["matmul", "gpt,bogus", "", ",,,"]), hostile_text())
    return hostile_text()


@st.composite
def invocations(draw) -> tuple[list[str], dict[str, str]]:
    command = draw(st.sampled_from(sorted(COMMANDS) + sorted(NO_HOST)))
    words = command.split()
    if command in NO_HOST:  # NAME / FILE / SHELL, or nothing (compat)
        argv = words + ([] if command == "compat" else [draw(st.one_of(st.sampled_from(PATHS), hostile_text()))])
        options = NO_HOST[command]
    else:
        argv = words[:1] + [draw(host_args())] + words[1:]
        options = COMMANDS[command]
        if command in ("tunnel", "sync"):  # [LOCAL:]PORT / LOCAL_DIR after HOST
            argv.append(draw(st.one_of(st.sampled_from(["8888", "8888:0", "0", "65536", "1:99999"] + PATHS),
                                       hostile_text())))
        if command == "up --devcontainer":
            argv.append(draw(st.one_of(st.sampled_from(PATHS), hostile_text())))
    for option in draw(st.lists(st.sampled_from(options), max_size=3, unique=True)) if options else []:
        argv += [option] if option in FLAGS else [option, draw(option_value(option))]
    if words[0] in ("exec", "ssh") and draw(st.booleans()):
        argv += ["--", "touch", CANARY]  # a command for the environment: must never run here
    env = {}
    if draw(st.booleans()):
        name = draw(st.sampled_from(["DEVENV_SSH_KEY", "DEVENV_ENV", "DEVENV_OWNER", "DEVENV_BUILD_CONTEXT",
                                     "DEVENV_WHEELHOUSE", "DEVENV_BUILD_CA_BUNDLE"]))
        env[name] = draw(hostile_text())
    return argv, env


def fz_profile() -> st.SearchStrategy[str]:
    """A host profile for `fz`: reachable only at 127.0.0.1:9, with hostile values in the other fields."""
    ssh = st.fixed_dictionaries({"hostname": st.just("127.0.0.1"), "port": st.just(9)},
                                optional={"user": hostile_text(), "identity_file": hostile_text(),
                                          "proxy_jump": st.lists(hostile_text(), max_size=2),
                                          "connect_timeout": st.sampled_from([1, "nan", "1e300"])})
    doc = st.fixed_dictionaries({"ssh": ssh}, optional={"runtime": st.sampled_from(["docker", "host", "auto"]),
                                                        "groups": st.just(["fz"]), "python": hostile_text(),
                                                        "default_env": hostile_text()})
    return doc.map(lambda d: yaml.safe_dump(d, allow_unicode=True))


def _substitute(text: str, canary: str) -> str:
    return text.replace(CANARY, canary)


@FUZZ
@given(call=invocations(), profile=fz_profile())
@example(call=(["check", "\n"], {}), profile="ssh: {hostname: 127.0.0.1, port: 9}\n")  # found by the fuzzer once
# found by the fuzzer in --quick: a host of an @group failing on a long --env value printed it whole (per_host)
@example(call=(["check", "@fz", "--env", "-oProxyCommand=touch @CANARY@"], {}),
         profile="groups:\n- fz\nssh:\n  hostname: 127.0.0.1\n  port: 9\n")
# found by the fuzzer in --quick: a host name Python's IDNA codec refuses (an empty label) was an internal error
@example(call=(["check", "0.."], {}), profile="ssh:\n  hostname: 127.0.0.1\n  port: 9\n")
def test_fuzzed_command_lines_never_crash_or_run_anything(isolated_home, tmp_path_factory, call, profile):
    COUNT["cli"] += 1
    canary = str(tmp_path_factory.getbasetemp() / "cli-canary")
    folder = isolated_home / "profiles" / "hosts"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fz.yaml").write_text(_substitute(profile, canary))
    argv, env = call
    argv = [_substitute(a, canary) for a in argv]
    env = {k: _substitute(v, canary) for k, v in env.items()}
    if any("\x00" in v for v in env.values()):
        env = {}  # the OS refuses a NUL in an environment variable before devenv sees it
    result = CliRunner().invoke(main, argv, env=env)
    code = result.exit_code
    CODES[code] = CODES.get(code, 0) + 1
    if os.environ.get("DEVENV_FUZZ_SHOW") and code in (0, 1):
        print("FUZZ", code, argv[:4], env, result.output[-200:].replace("\n", " | "))
    assert code != 70 and code in DOCUMENTED, (argv, env, code, result.output[-600:])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError((argv, env, result.output[-600:])) from result.exception
    assert not os.path.exists(canary), (argv, env)
    errors = "\n".join(line for line in result.output.splitlines() if line.startswith(("Error", "Hint")))
    for value in argv:  # no error repeats a long value given (a private key pasted as an argument?)
        # (a value of blanks alone, such as '\n', is "in" any two lines joined: nothing of it can be shown)
        assert shown_whole(value) or not value.strip() or value not in errors, (argv, errors[-600:])


def test_fuzz_cli_count():
    print(f"\nfuzz (cli): {COUNT['cli']} inputs, exit codes {dict(sorted(CODES.items()))}")
    assert COUNT["cli"] == 0 or COUNT["cli"] >= 100


@given(host=st.sampled_from([h for h in HOSTILE if h.startswith("-") or "\n" in h]))
@settings(max_examples=examples(40 / 400, CLI_OVERRIDE), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_option_like_or_multi_line_host_names_are_bad_input(host):
    for command in ("status", "check", "ssh", "up", "down"):
        result = CliRunner().invoke(main, [command, "--", host] if command == "status" else [command, "--", host])
        assert result.exit_code == 2, (command, host, result.output)


# --- the before-dialling class (issue 28): what can be checked here is checked before the host is dialled -----
# The host is unreachable (a closed loopback port), so a command that dialled first would exit 3, not 2.
ENV_COMMANDS = [["exec", "--", "true"], ["logs"], ["jupyter"], ["ssh"], ["sanity"], ["up"], ["down"], ["check"],
                ["tunnel", "6006"], ["code"], ["sync"], ["image", "build"]]
NON_ASCII_DIGITS = st.characters(categories=["Nd"]).filter(lambda c: not c.isascii())


def _dialled(result) -> bool:
    return result.exit_code == 3 or "cannot connect" in result.output


@settings(max_examples=examples(1 / 4, CLI_OVERRIDE), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(ENV_COMMANDS), name=hostile_text().filter(lambda n: n.strip() != ""),
       via_variable=st.booleans())
def test_an_env_that_cannot_be_loaded_is_exit_2_before_dialling(isolated_home, command, name, via_variable):
    from devenv.config import profiles

    if name in profiles.names("envs") or "\x00" in name:
        return  # an env that exists is not the class under test (a NUL cannot reach a real command line)
    argv = command[:1] + [UNREACHABLE] + command[1:]
    if command[:2] == ["image", "build"]:
        argv = ["image", "build", UNREACHABLE]
    if via_variable:
        result = CliRunner().invoke(main, argv, env={"DEVENV_ENV": name})
    else:
        result = CliRunner().invoke(main, argv[:-2] + ["--env", name] + argv[-2:] if argv[-2:] == ["--", "true"]
                                    else argv + ["--env", name])
    assert result.exit_code == 2 and not _dialled(result), (argv, name, via_variable, result.output[-400:])


@settings(max_examples=examples(60 / 400, CLI_OVERRIDE), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(only=st.text(alphabet=", \t", min_size=1, max_size=8).filter(lambda s: s.strip() != ""))
def test_an_only_that_names_no_stage_is_exit_2_before_dialling(isolated_home, only):
    result = CliRunner().invoke(main, ["sanity", UNREACHABLE, "--only", only])
    assert result.exit_code == 2 and not _dialled(result), (only, result.output[-400:])


@settings(max_examples=examples(60 / 400, CLI_OVERRIDE), deadline=None, database=None)
@given(digits=st.lists(NON_ASCII_DIGITS, min_size=1, max_size=3), flag=st.sampled_from(["--cuda", "--driver"]))
def test_versions_with_digits_other_than_ascii_are_bad_input(digits, flag):
    version = ".".join(digits) if flag == "--cuda" else "5" + "".join(digits) + "0.1"
    other = {"--cuda": ["--driver", "535.104.05"], "--driver": ["--cuda", "12.8"]}[flag]
    result = CliRunner().invoke(main, ["compat", flag, version, *other])
    assert result.exit_code == 2, (flag, version, result.output[-400:])


@settings(max_examples=examples(40 / 400, CLI_OVERRIDE), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from([["status", UNREACHABLE], ["exec", UNREACHABLE, "--", "true"], ["check", UNREACHABLE],
                                ["sanity", UNREACHABLE], ["logs", UNREACHABLE]]),
       below=st.sampled_from(["", "state", "a/b"]))
def test_devenv_home_through_a_file_is_exit_2_before_dialling(tmp_path_factory, command, below):
    afile = tmp_path_factory.mktemp("home-file") / "afile"
    afile.write_text("x")
    home = afile / below if below else afile
    result = CliRunner().invoke(main, command, env={"DEVENV_HOME": str(home)})
    assert result.exit_code == 2 and not _dialled(result), (command, str(home), result.output[-400:])
