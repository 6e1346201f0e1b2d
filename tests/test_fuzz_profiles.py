"""Fuzzing the profile boundary (issue 14): host and environment profiles built from hostile values, YAML soup
and random bytes. Every input is either a valid profile whose every value is safe for a command line and an
ssh config, or a ProfileError (exit 2) naming the file; never another exception (exit 70), and never a build
context with a file from outside images/."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import yaml
from fuzz_values import HOSTILE, YAML_SOUP, examples, scalar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devenv.cluster.slurm_job import JobRequest
from devenv.config import paths, profiles, validate
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.env import devcontainer, image_context
from devenv.env.image_context import BuildInputs
from devenv.errors import ProfileError
from devenv.remote import openssh

FUZZ = settings(max_examples=examples(), deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
COUNT: dict[str, int] = {}

SSH_FIELDS = ["alias", "hostname", "user", "port", "identity_file", "proxy_jump", "connect_timeout"]
HOST_FIELDS = ["description", "runtime", "python", "default_env", "groups", "engine", "gpu_devices", "local"]
SLURM_FIELDS = ["partition", "account", "qos", "time", "nodes", "gpus_per_node", "gpu_type", "cpus_per_gpu",
                "mem_per_gpu", "cpus_per_node", "mem", "constraint", "extra_sbatch", "queue_timeout"]
ENV_FIELDS = ["description", "image", "cuda", "torch", "image_size_gb", "ports", "volumes", "env", "shm_size",
              "gpus", "jupyter", "sshd", "pip", "apt", "user", "build"]
# config lines devenv writes for an environment, and nothing else
CONFIG_KEYS = {"Host", "HostName", "Port", "User", "IdentityFile", "IdentitiesOnly", "HostKeyAlias",
               "UserKnownHostsFile", "StrictHostKeyChecking", "ServerAliveInterval", "ProxyCommand"}


def _counted(name: str) -> None:
    COUNT[name] = COUNT.get(name, 0) + 1


def _valid_or_profile_error(parse, text: str, source: str, doc=None):
    try:
        return parse(text, "fz", source)
    except ProfileError as exc:
        assert exc.exit_code == 2
        assert exc.message.startswith(source), exc.message
        shown = exc.message + (exc.hint or "")
        for value in _strings(doc):  # a value is never echoed whole: a short prefix at most
            assert len(value) <= 20 or value not in shown, (value, exc.message)
        assert "PRIVATE KEY" not in shown
        return None


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(k) + _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _check_host_is_safe(host: HostProfile) -> None:
    for text in _strings(host.to_dict()):
        assert validate.text_problem(text) is None, repr(text)
    if host.slurm is not None:  # every sbatch word is one --option=value, none a second option or command
        request = JobRequest(host.slurm, "devenv-fz-cpu", "h", "/w/job-%j.log", "/w")
        for word in request.options():
            assert word.startswith("--") and validate.text_problem(word) is None and " " not in word, word
    if host.ssh is None:
        return
    argv = openssh.host_options(host)
    assert argv[-2] == "--" and not argv[-1].startswith("-")
    for flag, value in zip(argv, argv[1:]):
        if flag in ("-l", "-p", "-i", "-J", "-F"):
            assert not value.startswith("-"), argv
    entry = openssh.env_config_entry("devenv-fz-cpu", host, 2222, Path("/c/id"), Path("/c/kh"))
    lines = [line for line in entry.splitlines() if line != openssh.ENTRY_MARK]  # devenv's own fixed comment
    assert len(lines) == len(entry.splitlines()) - 1
    assert len(lines) == len(CONFIG_KEYS)  # one line per key: no value made a line of its own
    assert {line.split()[0] for line in lines} == CONFIG_KEYS


def host_docs() -> st.SearchStrategy[dict]:
    ssh_value = st.one_of(scalar(), st.sampled_from(["127.0.0.1", "box", "me", 22, "~/.ssh/id", ["bastion"], 5]))
    ssh = st.dictionaries(st.sampled_from(SSH_FIELDS + ["aliass"]), ssh_value, min_size=1, max_size=5)
    top = st.dictionaries(st.sampled_from(HOST_FIELDS), scalar(), max_size=4)
    slurm_value = st.one_of(scalar(), st.sampled_from(["gpu", "01:00:00", "32G", "a100&ib", ["--exclusive"], 2]))
    slurm = st.one_of(st.none(), st.dictionaries(st.sampled_from(SLURM_FIELDS), slurm_value, max_size=4))
    return st.tuples(ssh, top, slurm).map(
        lambda p: {**p[1], "ssh": p[0]} if p[2] is None else {**p[1], "ssh": p[0], "runtime": "slurm", "slurm": p[2]})


def env_docs() -> st.SearchStrategy[dict]:
    value = st.one_of(scalar(), st.sampled_from(["devenv/x:1", "12.8", "2.8.0+cu128", 20, {"jupyter": 8888},
                                                 {"workspace": "/workspace"}, "16g", "all", [0, 1], True,
                                                 ["numpy==2.1.0"], ["ffmpeg"], "dev",
                                                 {"dockerfile": "pytorch.Dockerfile", "args": {"A": "1"}}]))
    return st.dictionaries(st.sampled_from(ENV_FIELDS + ["imag"]), value, max_size=6).map(
        lambda d: {"image": "devenv/x:1", **d} if "imag" not in d else d)


def _dump(doc: dict) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


@FUZZ
@given(doc=host_docs())
def test_fuzzed_host_profiles_are_valid_and_safe_or_bad_input(doc):
    _counted("host profiles")
    host = _valid_or_profile_error(profiles.parse_host, _dump(doc), "fz.yaml", doc)
    if host is not None:
        _check_host_is_safe(host)


@FUZZ
@given(doc=env_docs())
def test_fuzzed_env_profiles_are_valid_and_safe_or_bad_input(doc):
    _counted("env profiles")
    env = _valid_or_profile_error(profiles.parse_env, _dump(doc), "fz.yaml", doc)
    if env is not None:
        for text in _strings(env.to_dict()):
            assert validate.text_problem(text) is None, repr(text)
        assert validate.image_problem(env.image) is None
        assert set(env.ports) <= {"jupyter", "ssh"} and all(1 <= p <= 65535 for p in env.ports.values())
        assert all(p.startswith("/") for p in env.volumes.values())
        assert env.image_size_gb is None or 0 < env.image_size_gb <= 1e6


@FUZZ
@given(field=st.sampled_from(["description", "ssh.alias", "ssh.port", "groups", "python", "runtime"]),
       soup=st.sampled_from(YAML_SOUP + HOSTILE), nested=st.booleans())
def test_yaml_soup_in_any_field_is_bad_input_or_a_plain_value(field, soup, nested):
    _counted("yaml soup")
    value = soup.replace("\n", "\n    ") if nested else soup.replace("\n", "\n  ")
    if field.startswith("ssh."):
        text = f"ssh:\n  {field[4:]}: {value}\n" + ("" if field == "ssh.alias" else "  alias: box\n")
    else:
        text = f"ssh:\n  alias: box\n{field}: {value}\n"
    host = _valid_or_profile_error(profiles.parse_host, text, "fz.yaml")
    if host is not None:
        _check_host_is_safe(host)


@FUZZ
@given(data=st.binary(max_size=200), prefix=st.sampled_from([b"", b"\xff\xfe", b"\xef\xbb\xbf", b"ssh:\n  alias: "]))
def test_random_bytes_are_bad_input_or_a_profile(isolated_home, data, prefix):
    _counted("random bytes")
    folder = isolated_home / "profiles" / "hosts"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fz.yaml").write_bytes(prefix + data)
    try:
        host = profiles.load_host("fz")
    except ProfileError as exc:
        assert exc.message.startswith(str(folder / "fz.yaml"))
    else:
        _check_host_is_safe(host)


_DOCKERFILES = st.one_of(
    st.sampled_from(["pytorch.Dockerfile", "../pytorch.Dockerfile", "../../outside/Dockerfile", "/etc/passwd",
                     "OUTSIDE", "OUTSIDE_REL", "./pytorch.Dockerfile", "images/../pytorch.Dockerfile", ".",
                     "..", "/", "~", "~/Dockerfile", "entrypoint.sh", "link-out"]),
    st.lists(st.sampled_from(["..", ".", "images", "outside", "Dockerfile", "pytorch.Dockerfile", "", "x"]),
             min_size=1, max_size=6).map("/".join),
)


@FUZZ
@given(dockerfile=_DOCKERFILES, named=st.booleans())
def test_no_build_context_carries_a_file_from_outside(tmp_path_factory, dockerfile, named):
    _counted("build contexts")
    base = tmp_path_factory.mktemp("ctx")
    outside = base / "outside"
    outside.mkdir()
    (outside / "Dockerfile").write_text("FROM scratch\n")
    (outside / "secret").write_text("CANARY-OUTSIDE\n")
    mine = base / "mine"
    mine.mkdir()
    (mine / "Dockerfile").write_text("FROM scratch\n")
    (mine / "link-out").symlink_to(outside / "secret")
    images = paths.bundled_dir("images")
    dockerfile = {"OUTSIDE": str(outside / "Dockerfile"),
                  "OUTSIDE_REL": os.path.relpath(outside / "Dockerfile", images)}.get(dockerfile, dockerfile)
    env = EnvProfile(name="fz", source="fz.yaml", image="x", build=profiles.BuildSpec(dockerfile, {}))
    inputs = BuildInputs(context_dir=mine if named else None)
    try:
        files = image_context.context_bytes_for_test(env, inputs)
    except ProfileError:
        return
    allowed = {p.name: p.read_bytes() for p in images.iterdir() if p.is_file()}
    if named:
        allowed.update({p.name: p.read_bytes() for p in mine.iterdir() if p.is_file() and not p.is_symlink()})
    for name, data in files.items():
        assert b"CANARY-OUTSIDE" not in data, name
        assert allowed.get(name) == data, name


DEVCONTAINER_KEYS = ["name", "image", "build", "dockerFile", "context", "forwardPorts", "containerEnv", "remoteEnv",
                     "mounts", "onCreateCommand", "postCreateCommand", "postStartCommand", "remoteUser",
                     "containerUser", "workspaceFolder", "customizations", "runArgs"]


def devcontainer_docs() -> st.SearchStrategy[dict]:
    value = st.one_of(scalar(), st.sampled_from(["devenv/x:1", 8888, [8888, "db:5432"], {"A": "1"}, "Dockerfile",
                                                 ["type=bind,source=/data,target=/data"], "dev", "/workspace",
                                                 ["type=volume,source=cache,target=/cache"], ["echo", "hi"]]))
    build = st.dictionaries(st.sampled_from(["dockerfile", "context", "args", "target"]), value, max_size=3)
    return st.tuples(st.dictionaries(st.sampled_from(DEVCONTAINER_KEYS), value, max_size=6),
                     st.one_of(st.none(), build)).map(lambda p: p[0] if p[1] is None else {**p[0], "build": p[1]})


@FUZZ
@given(doc=devcontainer_docs())
def test_fuzzed_devcontainer_json_is_a_devcontainer_or_bad_input(doc):
    """Every devcontainer.json is parsed or refused (exit 2) with a message of plain one-line text that does not
    repeat a long value; what it keeps is safe for an environment (names, ports, one-line strings)."""
    _counted("devcontainer.json")
    text = json.dumps(doc)
    try:
        dc = devcontainer.parse(text, "dc.json")
    except ProfileError as exc:
        assert exc.exit_code == 2 and exc.message.startswith("dc.json")
        assert validate.text_problem(exc.message.replace("\n", " ")) is None, repr(exc.message)
        for value in _strings(doc):
            assert len(value) <= 40 or value not in exc.message, (value, exc.message)
        return
    for note in dc.not_honoured:
        assert validate.text_problem(note) is None, repr(note)
        for value in _strings(doc):
            assert len(value) <= 40 or value not in note, (value, note)
    assert all(isinstance(p, int) and 0 < p < 65536 for p in dc.forward_ports)
    for name, value in dc.env.items():
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and "\0" not in value, (name, value)
    for text_value in (dc.image, dc.remote_user, dc.workspace_folder, dc.dockerfile, dc.target):
        assert text_value is None or validate.text_problem(text_value) is None, repr(text_value)
    assert dc.dockerfile is None or not (dc.dockerfile.startswith("/") or ".." in dc.dockerfile.split("/"))


def test_fuzz_count_is_reported():
    """Runs last in this file (pytest keeps file order): the number of generated profile inputs."""
    total = sum(COUNT.values())
    print(f"\nfuzz (profiles): {total} inputs {COUNT}")
    if len(COUNT) == 6:  # the whole file ran
        assert total >= 6 * 100, COUNT
