"""Profiles: bundled ones load, user ones override, and every bad input names file, line and field."""

from __future__ import annotations

import textwrap

import pytest
from click.testing import CliRunner
from fuzz_values import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devenv.cli import main
from devenv.config import profiles
from devenv.errors import ProfileError


def write(home, kind, name, text):
    path = home / "profiles" / kind / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_bundled_profiles_load():
    assert {"local", "a100-box"} <= set(profiles.names("hosts"))
    assert {"cuda", "cpu"} <= set(profiles.names("envs"))
    local = profiles.load_host("local")
    assert local.local and local.ssh is None
    box = profiles.load_host("a100-box")
    assert box.ssh.alias == "a100-box" and box.default_env == "cuda"
    cuda = profiles.load_env("cuda")
    assert cuda.cuda == "12.8" and cuda.torch.endswith("+cu128")
    assert profiles.load_env("cpu").cuda is None


def test_user_profile_overrides_bundled_by_name(isolated_home):
    write(isolated_home, "hosts", "a100-box", """
        ssh: {hostname: 10.1.2.3, user: ml, port: 2200, proxy_jump: "bastion,inner"}
        runtime: host
        python: /opt/conda/bin/python
    """)
    box = profiles.load_host("a100-box")
    assert box.ssh.hostname == "10.1.2.3" and box.ssh.port == 2200
    assert box.ssh.proxy_jump == ("bastion", "inner")
    assert box.runtime == "host" and box.python == "/opt/conda/bin/python"
    assert str(isolated_home) in box.source


def test_cuda_version_keeps_its_text(isolated_home):
    # unquoted 12.10 would be the float 12.1 in plain YAML: we read the scalar's text
    write(isolated_home, "envs", "e", "image: x\ncuda: 12.10\n")
    assert profiles.load_env("e").cuda == "12.10"


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("ssh:\n  alias: a\nruntme: docker\n", 3, ["field 'runtme'", "not a known field", "runtime"]),
        ("ssh:\n  alias: a\n  port: eighty\n", 3, ["field 'ssh.port'", "integer"]),
        ("ssh:\n  alias: a\nruntime: podman\n", 3, ["field 'runtime'", "docker, host"]),
        ("ssh:\n  user: me\n", 2, ["field 'ssh'", "alias"]),
        ("ssh: [a, b]\n", 1, ["field 'ssh'", "expected a mapping"]),
        ("ssh:\n  alias: a\n bad: indent\n", None, ["malformed YAML"]),
        ("description: no ssh\n", None, ["'ssh' is missing"]),
    ],
)
def test_bad_host_profile_names_file_line_and_field(isolated_home, text, line, words):
    path = write(isolated_home, "hosts", "broken", text)
    with pytest.raises(ProfileError) as err:
        profiles.load_host("broken")
    message = err.value.message
    assert message.startswith(str(path)), message
    if line:
        assert f"{path}:{line}:" in message
    for word in words:
        assert word in message + (err.value.hint or ""), (word, message, err.value.hint)
    assert err.value.hint


@pytest.mark.parametrize(
    "text, words",
    [
        ("cuda: '12.8'\n", ["'image'", "missing"]),
        ("image: x\ncuda: twelve\n", ["field 'cuda'", "12.8"]),
        ("image: x\ntorch: 2.8.0+cu128\ncuda: '12.8'\nports: {jupyter: 99999}\n", ["ports.jupyter", "65535"]),
        ("image: x\ngpus: some\n", ["field 'gpus'"]),
        ("image: x\ntorch: 2.8.0+cpu\ncuda: '12.8'\n", ["CPU build"]),
        ("image: x\njupyter: maybe\n", ["true or false"]),
        ("", ["empty"]),
    ],
)
def test_bad_env_profile(isolated_home, text, words):
    write(isolated_home, "envs", "broken", text)
    with pytest.raises(ProfileError) as err:
        profiles.load_env("broken")
    for word in words:
        assert word in err.value.message, (word, err.value.message)


def test_unknown_host_lists_known_ones():
    with pytest.raises(ProfileError) as err:
        profiles.load_host("nope")
    assert "unknown host 'nope'" in err.value.message
    assert "a100-box" in err.value.hint and "local" in err.value.hint


def test_cli_profiles_list_show_validate(isolated_home):
    runner = CliRunner()
    result = runner.invoke(main, ["profiles", "list", "--json"])
    assert result.exit_code == 0
    assert '"a100-box"' in result.output
    result = runner.invoke(main, ["profiles", "show", "cuda", "--json"])
    assert result.exit_code == 0 and '"12.8"' in result.output
    assert runner.invoke(main, ["profiles", "validate"]).exit_code == 0


def test_cli_bad_input_is_one_message_with_hint_and_no_traceback(isolated_home):
    path = write(isolated_home, "hosts", "broken", "ssh:\n  alias: a\nruntme: docker\n")
    runner = CliRunner()
    for args in (["profiles", "validate", str(path)], ["profiles", "show", "nope"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        assert "Error:" in result.output
        assert "hint" in result.output.lower()


SEVERAL_ERRORS = """\
description: several mistakes, one run names them all
image: "-rm"
build:
  dockerfile: pytorch.Dockerfile
ports:
  jupyter: 99999
  web: 8080
gpus: lots
pip:
  - numpy>=2,<3
  - "requests; rm -rf /"
  - --index-url=http://evil.example
apt: [ffmpeg, "vim && curl x|sh", "$(id)"]
shm_size: 1t
colour: blue
"""


def test_validate_lists_every_error_of_a_file_with_its_line(tmp_path):
    """Before: validation stopped at a file's first error (line 2), so fixing a file took one run per error."""
    path = tmp_path / "envs" / "bad.yaml"
    path.parent.mkdir()
    path.write_text(SEVERAL_ERRORS)
    result = CliRunner().invoke(main, ["profiles", "validate", str(path)])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error ")]
    lines = [int(e.split(f"{path}:")[1].split(":")[0]) for e in errors]
    assert lines == [2, 6, 7, 8, 11, 12, 13, 13, 14, 15], result.output
    assert "field 'ports.web' is not a service" in result.output
    assert "field 'pip[2]' '--index-url" in result.output and "starts with '-'" in result.output
    assert "field 'colour' is not a known field" in result.output
    assert "10 error(s) in 1 of 1 profile(s)" in result.output
    # the same errors reach `up` (the loader raises them all at once)
    with pytest.raises(profiles.ProfileErrors) as info:
        profiles.parse_env(SEVERAL_ERRORS, "bad", "bad.yaml")
    assert len(info.value.errors) == 10


@pytest.mark.parametrize("spec", ["numpy", "torch==2.8.0+cu128", "rich[jupyter]>=13,<14", "a.b-c_d~=1.0",
                                  "pkg!=1.*"])
def test_pip_specs_that_are_packages_pass(spec):
    from devenv.config import validate

    assert validate.pip_spec_problem(spec) is None


@pytest.mark.parametrize("spec", ["-e .", "--extra-index-url=x", "pkg @ https://x/y.whl", "./local", "a;b", "a b",
                                  "$(id)", "`id`", "a|b", "a&&b", "pkg>1 ; python_version<'3'", "a\nb", "/etc/x",
                                  "git+https://x"])
def test_pip_options_urls_paths_and_shell_text_are_refused(spec):
    from devenv.config import validate

    assert validate.pip_spec_problem(spec) is not None


@pytest.mark.parametrize("pkg, ok", [("ffmpeg", True), ("libsndfile1=1.2.0-1", True), ("g++", True),
                                     ("gcc:amd64", True), ("-y", False), ("a", False), ("Vim", False),
                                     ("x;y", False), ("x y", False), ("pkg=$(id)", False)])
def test_apt_names(pkg, ok):
    from devenv.config import validate

    assert (validate.apt_package_problem(pkg) is None) is ok


def test_pip_apt_user_need_a_build_and_root_is_the_default():
    text = "image: x:1\npip: [numpy]\nuser: dev\n"
    with pytest.raises(profiles.ProfileErrors) as info:
        profiles.parse_env(text, "e", "e.yaml")
    assert [e.message.split(":")[1] for e in info.value.errors] == ["2", "3"]
    built = profiles.parse_env("image: x:1\nbuild: {dockerfile: pytorch.Dockerfile}\npip: [numpy]\napt: [tree]\n"
                               "user: root\n", "e", "e.yaml")
    assert built.pip == ("numpy",) and built.apt == ("tree",) and built.user is None


def test_every_unsupported_tag_is_named_with_its_line():
    text = "image: !secret x\nenv:\n  A: !!binary aGk=\n  B: !!python/name:os.system x\n"
    with pytest.raises(profiles.ProfileErrors) as info:
        profiles.parse_env(text, "x", "t.yaml")
    assert [e.message.split(":")[1] for e in info.value.errors] == ["1", "3", "4"]


# --- libyaml's parser and PyYAML's own read every profile the same ----------------------------------------------

def _outcome(parse, text: str, loader, monkeypatch) -> tuple:
    """What parse makes of text with profiles.FAST_LOADER = loader: the profile, or the error's message and hint."""
    monkeypatch.setattr(profiles, "FAST_LOADER", loader)
    try:
        return ("profile", parse(text, "t", "t.yaml").to_dict())
    except ProfileError as exc:
        return ("error", exc.message, exc.hint)


def _texts() -> list[str]:
    from fuzz_values import HOSTILE, YAML_SOUP

    bundled = [p.read_text() for p in profiles.paths.bundled_dir("profiles").glob("*/*.yaml")]
    bad = ["ssh:\n  alias: a\n bad: indent\n", "ssh: [a, b]\n", "", "image: !secret x\nenv:\n  A: !!binary aGk=\n",
           "a: &x [*x]\n", "- [" * 40, "image: x\n\tcuda: '12.8'\n", "image: 'x\n", "\ufeffimage: x\n"]
    soup = [f"ssh:\n  alias: box\ndescription: {value.replace(chr(10), chr(10) + '  ')}\n"
            for value in YAML_SOUP + HOSTILE]
    return bundled + bad + soup


@pytest.mark.skipif(not hasattr(__import__("yaml"), "CSafeLoader"), reason="PyYAML built without libyaml")
def test_libyaml_and_pure_pyyaml_give_the_same_profiles_and_errors(monkeypatch):
    """profiles parse with libyaml's CSafeLoader where PyYAML has it, else PyYAML's SafeLoader: the same profile
    or the same message (with its line) for bundled profiles, malformed YAML, tags, aliases and hostile values."""
    import yaml

    assert profiles.FAST_LOADER is yaml.CSafeLoader   # the fast path is the one taken here
    texts = _texts()
    assert len(texts) > 90
    kinds = {"profile": 0, "error": 0}
    for text in texts:
        for parse in (profiles.parse_host, profiles.parse_env):
            fast = _outcome(parse, text, yaml.CSafeLoader, monkeypatch)
            pure = _outcome(parse, text, yaml.SafeLoader, monkeypatch)
            assert fast == pure, text
            kinds[fast[0]] += 1
    assert kinds["profile"] > 20 and kinds["error"] > 20   # both outcomes are compared, not one
    assert sum(bool(profiles._FAST_TEXT.fullmatch(t)) for t in texts) > 30   # and the fast path is taken


# YAML soup: what the fast parser is given (profiles._FAST_TEXT), and anything
_FAST_SOUP = [*"ab:-[]{}&*?#\n ,.01\\'\"=<$~^_;()+/", "<<: ", "---\n", "...\n", "\\x41", "? ", "- ", "  "]
_ANY_SOUP = [*_FAST_SOUP, *"|>!%@`\t\r", "!!str ", "! ", "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "|#", ">-\n"]


@pytest.mark.skipif(not hasattr(__import__("yaml"), "CSafeLoader"), reason="PyYAML built without libyaml")
@settings(max_examples=examples(), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(st.lists(st.sampled_from(_FAST_SOUP), max_size=40).map("".join),
                      st.lists(st.sampled_from(_ANY_SOUP), max_size=40).map("".join)))
def test_libyaml_and_pure_pyyaml_agree_on_yaml_soup(monkeypatch, text):
    """The same on random YAML soup after a valid start: half of it the characters the fast parser is given,
    half anything (tags, directives, block scalars, tabs), which must go to the pure one whatever FAST_LOADER."""
    import yaml

    text = "ssh:\n  alias: box\n" + text
    assert _outcome(profiles.parse_host, text, yaml.CSafeLoader, monkeypatch) == \
        _outcome(profiles.parse_host, text, yaml.SafeLoader, monkeypatch)


@pytest.mark.skipif(not hasattr(__import__("yaml"), "CSafeLoader"), reason="PyYAML built without libyaml")
def test_bundled_tables_read_the_same_with_libyaml_and_pure_pyyaml():
    """devenv's own data tables (compat, sanity) load through libyaml's loader: the same data as PyYAML's own."""
    from pathlib import Path

    import yaml

    import devenv

    tables = sorted(Path(devenv.__file__).parent.glob("*/data/*.yaml"))
    assert len(tables) >= 5
    for table in tables:
        text = table.read_text()
        assert yaml.load(text, Loader=yaml.CSafeLoader) == yaml.safe_load(text), table
