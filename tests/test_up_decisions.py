"""`up`'s decision table (docs/environments.md, "What `up` decides") against an in-memory runtime: seconds,
no root, no engine. The docker backend, its specs, labels and waits, and the session's ssh
entry are the real ones; only the container engine is tests/memory_runtime.py."""

from __future__ import annotations

import pytest
from memory_runtime import HOST_KEY, MemoryRuntime

from devenv.checks.report import FAIL, PASS, CheckReport, CheckResult
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.env import spec as envspec
from devenv.errors import DevenvError
from devenv.remote.local import LocalConnection
from devenv.services.environments.contract import PreflightFailed, QuietEvents, UpOptions
from devenv.services.environments.docker.backend import Provisioner
from devenv.services.session import EnvSession
from devenv.services.ssh_entry import ssh_files

HOST = HostProfile(name="memhost", source="test", local=True, runtime="docker")
ENV = EnvProfile(name="py", source="test", image="devenv/test:1", ports={"jupyter": 8888, "ssh": 2222})
OWNER = "tester"
NAME = envspec.container_name(OWNER, ENV.name)


class Recorder(QuietEvents):
    def __init__(self, answer: bool = False):
        self.answer = answer
        self.questions: list[tuple[str, list[str]]] = []
        self.reports: list[CheckReport] = []
        self.steps: list[str] = []

    def step(self, text: str) -> None:
        self.steps.append(text)

    def checked(self, report: CheckReport) -> None:
        self.reports.append(report)

    def confirm(self, question: str, details: list[str]) -> bool:
        self.questions.append((question, details))
        return self.answer


class Checks:
    """The preflight, counted; failing when told to."""

    def __init__(self, ok: bool = True):
        self.ok = ok
        self.runs = 0

    def __call__(self, env: EnvProfile) -> CheckReport:
        self.runs += 1
        status = PASS if self.ok else FAIL
        return CheckReport(HOST.name, env.name, [CheckResult("docker.daemon", "Docker daemon", status, "seen")])


class Key:
    public_line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyOfTheUserForTheEnvironmentsSshd000000 me@laptop"
    fingerprint = "SHA256:userkey"
    private_path = None


def backend(runtime: MemoryRuntime, checks: Checks | None = None) -> Provisioner:
    return Provisioner(runtime, HOST, checks or Checks(), owner=OWNER)


def labels_for(runtime_image: str, env: EnvProfile = ENV) -> dict[str, str]:
    spec = envspec.desired_spec(env, runtime_image, Key.fingerprint)
    return envspec.labels(spec, OWNER, HOST.name, "test")


def test_nothing_there_checks_gets_the_image_and_makes_everything():
    runtime, checks, events = MemoryRuntime(), Checks(), Recorder()
    result = backend(runtime, checks).up(ENV, Key(), events=events, options=UpOptions())
    assert result.action == "created" and result.image_action == "pulled"
    assert checks.runs == 1 and [r.ok for r in events.reports] == [True]
    assert runtime.did("ensure_volume") == [f"ensure_volume {envspec.volume_name(OWNER, 'py', 'workspace')}"]
    assert runtime.did("create") == [f"create {NAME}"]
    container = result.status.container
    assert runtime.files[(container, "/etc/devenv/authorized_keys")].decode().strip() == Key.public_line
    assert len(runtime.files[(container, "/etc/devenv/jupyter_token")].strip()) >= 32
    assert result.status.running and result.host_key == HOST_KEY


def test_running_with_the_same_spec_is_reattached_without_check_or_image_work():
    runtime, checks = MemoryRuntime(images={ENV.image: "sha256:img"}), Checks()
    runtime.add_container(NAME, "running", labels_for("sha256:img"))
    result = backend(runtime, checks).up(ENV, Key(), events=Recorder(), options=UpOptions())
    assert result.action == "reattached"
    assert checks.runs == 0
    assert not runtime.did("pull") and not runtime.did("create") and not runtime.did("start")


def test_created_or_exited_with_the_same_spec_gets_its_secrets_again_and_starts():
    for state in ("created", "exited"):
        runtime = MemoryRuntime(images={ENV.image: "sha256:img"})
        cid = runtime.add_container(NAME, state, labels_for("sha256:img"))
        result = backend(runtime).up(ENV, Key(), events=Recorder(), options=UpOptions())
        assert result.action == "started", state
        assert not runtime.did("create") and runtime.did("start") == [f"start {cid}"]
        assert (cid, "/etc/devenv/authorized_keys") in runtime.files


def test_another_spec_is_shown_and_left_alone_unless_confirmed():
    runtime = MemoryRuntime(images={ENV.image: "sha256:img"})
    old_env = EnvProfile(name="py", source="test", image=ENV.image, shm_size="1g")
    cid = runtime.add_container(NAME, "running", labels_for("sha256:img", old_env))
    events = Recorder(answer=False)
    with pytest.raises(DevenvError, match="differs from its profile") as err:
        backend(runtime).up(ENV, Key(), events=events, options=UpOptions())
    assert "shm_size: 1g -> 8g" in err.value.message
    assert err.value.exit_code == 2 and "--yes" in (err.value.hint or "")  # not confirmed: as every such step
    assert events.questions and "shm_size: 1g -> 8g" in events.questions[0][1]
    assert runtime.find(cid) is not None and not runtime.did("remove")

    volume = envspec.volume_name(OWNER, "py", "workspace")
    runtime.volumes[volume] = {"keep": "me"}
    result = backend(runtime).up(ENV, Key(), events=Recorder(answer=True), options=UpOptions())
    assert result.action == "recreated" and runtime.did("remove") == [f"remove {cid}"]
    assert runtime.volumes[volume] == {"keep": "me"}  # the workspace is kept


def test_yes_recreates_without_asking():
    runtime = MemoryRuntime(images={ENV.image: "sha256:img"})
    runtime.add_container(NAME, "exited", labels_for("sha256:img", EnvProfile(name="py", source="t", image="x:0")))
    events = Recorder(answer=False)
    result = backend(runtime).up(ENV, Key(), events=events, options=UpOptions(assume_yes=True))
    assert result.action == "recreated" and not events.questions


def test_a_container_with_our_name_but_no_labels_is_refused():
    runtime = MemoryRuntime(images={ENV.image: "sha256:img"})
    runtime.add_container(NAME, "running", {})
    with pytest.raises(DevenvError, match="exists on memhost but is not this environment"):
        backend(runtime).up(ENV, Key(), events=Recorder(), options=UpOptions())
    assert not runtime.did("remove") and not runtime.did("create")


def test_a_failed_check_stops_up_before_anything_is_made():
    runtime, events = MemoryRuntime(), Recorder()
    with pytest.raises(PreflightFailed, match="Docker daemon"):
        backend(runtime, Checks(ok=False)).up(ENV, Key(), events=events, options=UpOptions())
    assert [r.ok for r in events.reports] == [False]  # the front end got the report to show
    assert not runtime.did("pull") and not runtime.did("create") and not runtime.did("ensure_volume")


def test_a_taken_preferred_port_is_replaced_and_said():
    runtime = MemoryRuntime(images={ENV.image: "sha256:img"})
    runtime.taken_ports.add(8888)
    result = backend(runtime).up(ENV, Key(), events=Recorder(), options=UpOptions())
    assert result.status.ports["jupyter"] != 8888
    assert any("127.0.0.1:8888 is taken" in note for note in result.notes)


@pytest.fixture(autouse=True)
def _early_checks_end_with_their_test():
    """A session whose backend was put in by hand (not opened) starts an early check that nothing consumes: it
    runs to its end on its own thread. Waited for here, so that it does not call the next test's monkeypatched
    check (it asks the facts first now, so it ends later than it did)."""
    import threading

    yield
    for thread in threading.enumerate():
        if thread.name == "devenv-early-check":
            thread.join(60)


def test_the_session_writes_the_environments_ssh_entry():
    runtime = MemoryRuntime(images={ENV.image: "sha256:img"})
    session = EnvSession(HOST, LocalConnection(HOST.name), events=Recorder())
    session.env = ENV  # the profile under test, instead of a bundled one
    session._backend = backend(runtime)
    result = session.up(UpOptions())
    config, known_hosts = ssh_files()
    alias = "devenv-memhost-py"
    assert f"Host {alias}" in config.read_text()
    assert f"Port {result.status.ports['ssh']}" in config.read_text()
    assert HOST_KEY.split()[1] in known_hosts.read_text()


@pytest.fixture
def short_repair(monkeypatch):
    """The repair's grace and sshd's second chance, short: the decisions are under test, not the patience."""
    from devenv.services.environments.docker import backend as provision

    monkeypatch.setattr(provision, "REPAIR_GRACE_S", 0.3)
    monkeypatch.setattr(provision, "SSHD_RESTART_S", 0.3)


def test_running_with_sshd_dead_gets_sshd_started_again_and_keeps_jupyter(short_repair):
    runtime = MemoryRuntime(images={ENV.image: "sha256:img"})
    cid = runtime.add_container(NAME, "running", labels_for("sha256:img"))
    runtime.dead = {"sshd"}
    events = Recorder()
    result = backend(runtime).up(ENV, Key(), events=events, options=UpOptions())
    assert result.action == "repaired" and not runtime.dead
    assert any("sshd" in note and "started it again" in note for note in result.notes)
    assert [c for c in runtime.did("exec") if "sshd -D" in c], runtime.calls
    assert not runtime.did("stop") and not runtime.did("start")  # Jupyter (and its kernels) lived on
    assert result.status.container == cid


def test_running_with_jupyter_dead_is_restarted_with_its_secrets_and_workspace(short_repair):
    runtime = MemoryRuntime(images={ENV.image: "sha256:img"})
    cid = runtime.add_container(NAME, "running", labels_for("sha256:img"))
    runtime.dead = {"jupyter"}
    result = backend(runtime).up(ENV, Key(), events=Recorder(), options=UpOptions())
    assert result.action == "repaired" and not runtime.dead
    assert runtime.did("stop") == [f"stop {cid}"] and runtime.did("start") == [f"start {cid}"]
    assert not runtime.did("create") and not runtime.did("remove")  # the same container, its volume kept
    assert (cid, "/etc/devenv/authorized_keys") in runtime.files
    assert any("jupyter not answering" in note and "restarted its container" in note for note in result.notes)


def test_sshd_that_does_not_come_back_gets_the_container_restarted(short_repair):
    runtime = MemoryRuntime(images={ENV.image: "sha256:img"})
    cid = runtime.add_container(NAME, "running", labels_for("sha256:img"))
    runtime.dead, runtime.sshd_comes_back = {"sshd"}, False
    result = backend(runtime).up(ENV, Key(), events=Recorder(), options=UpOptions())
    assert result.action == "repaired" and runtime.did("start") == [f"start {cid}"]


def test_a_running_environment_that_answers_is_only_reattached():
    runtime = MemoryRuntime(images={ENV.image: "sha256:img"})
    runtime.add_container(NAME, "running", labels_for("sha256:img"))
    result = backend(runtime).up(ENV, Key(), events=Recorder(), options=UpOptions())
    assert result.action == "reattached" and not result.notes
    assert len([c for c in runtime.did("exec") if "devenv-ready" in c]) == 1  # one look, no wait


def test_the_check_starts_before_the_engine_is_asked_when_this_laptop_knows_no_environment(monkeypatch):
    import threading

    from devenv.env import state as envstate
    from devenv.services import preflight, preflight_cache

    seen: list[str] = []

    def run_check(conn, host, env, on_result=None, allow_busy=False, with_engine=False):
        seen.append(threading.current_thread().name)
        return CheckReport(host.name, env.name, [CheckResult("docker.daemon", "Docker daemon", PASS, "seen")])

    monkeypatch.setattr(preflight, "run_check", run_check)
    for cached, expected in ((None, ["devenv-early-check"]), ("c-old", [threading.current_thread().name])):
        seen.clear()
        envstate.forget(HOST.name, ENV.name)
        preflight_cache.forget(HOST.name, ENV.name)  # the full check each time (not the last one's answers)
        if cached:
            envstate.update(HOST.name, ENV.name, container=cached)
        runtime, events = MemoryRuntime(images={ENV.image: "sha256:img"}), Recorder()
        session = EnvSession(HOST, LocalConnection(HOST.name), events=events)
        session.env = ENV
        session._backend = Provisioner(runtime, HOST, session._preflight, owner=OWNER)
        result = session.up(UpOptions())
        assert result.action == "created" and seen == expected
        assert [r.ok for r in events.reports] == [True]  # the report reached the front end either way


def test_a_check_started_ahead_is_used_unless_dropped_or_asked_for_other_gpus(monkeypatch):
    """`up` starts its check as the connection opens (check_ahead), before the push offer: up() uses that
    answer; after a push (drop_check_ahead) or with another allow_busy it checks anew, on its own thread."""
    import threading

    from devenv.env import state as envstate
    from devenv.services import preflight, preflight_cache

    seen: list[tuple[str, bool]] = []

    def run_check(conn, host, env, on_result=None, allow_busy=False, with_engine=False):
        seen.append((threading.current_thread().name, allow_busy))
        return CheckReport(host.name, env.name, [CheckResult("docker.daemon", "Docker daemon", PASS, "seen")])

    monkeypatch.setattr(preflight, "run_check", run_check)
    cases = ((False, False, [("devenv-early-check", False)]),          # used as started
             (True, False, [("devenv-early-check", False), ("devenv-early-check", False)]),  # dropped: anew
             (False, True, [("devenv-early-check", False), (threading.current_thread().name, True)]))
    for drop, allow_busy, expected in cases:
        seen.clear()
        envstate.forget(HOST.name, ENV.name)
        preflight_cache.forget(HOST.name, ENV.name)
        session = EnvSession(HOST, LocalConnection(HOST.name), events=Recorder())
        session.env = ENV
        session._backend = Provisioner(MemoryRuntime(images={ENV.image: "sha256:img"}), HOST, session._preflight,
                                       owner=OWNER)
        session.check_ahead(allow_busy=False)
        ahead = session._early_check[2]  # type: ignore[index]
        if drop:
            ahead.wait()                                  # the dropped one has run (up does not wait for it)
            preflight_cache.forget(HOST.name, ENV.name)   # its answer kept: the full check counted again
            session.drop_check_ahead()
        result = session.up(UpOptions(allow_busy=allow_busy))
        ahead.wait()   # a check up did not use ends on its own: waited for here, so it is counted (in any order)
        assert result.action == "created" and sorted(seen) == sorted(expected), (drop, allow_busy, seen)


def test_the_wait_asks_again_only_what_has_not_answered_yet():
    """Each sshd probe is a line pair in the environment's log: once sshd answered, only Jupyter is polled."""
    runtime = MemoryRuntime(images={ENV.image: "sha256:img"})
    runtime.slow = {"jupyter": 3}
    result = backend(runtime).up(ENV, Key(), events=Recorder(), options=UpOptions())
    probes = [c.split(" ", 2)[2] for c in runtime.did("exec") if "devenv-ready" in c]
    assert result.action == "created"
    assert probes == ["devenv-ready jupyter sshd"] + ["devenv-ready jupyter"] * 3, probes


def test_the_host_key_is_read_once_while_jupyter_still_starts():
    """The environment's sshd host key is read as soon as sshd answers, during the wait for Jupyter, so the
    URL does not wait for that read after Jupyter answers; once, and the result carries it."""
    runtime = MemoryRuntime(images={ENV.image: "sha256:img"})
    runtime.slow = {"jupyter": 3}
    result = backend(runtime).up(ENV, Key(), events=Recorder(), options=UpOptions())
    reads = [i for i, c in enumerate(runtime.calls) if c.startswith("read_file") and "ssh_host" in c]
    last_probe = max(i for i, c in enumerate(runtime.calls) if "devenv-ready" in c)
    assert len(reads) == 1 and reads[0] < last_probe, runtime.calls
    assert result.host_key == HOST_KEY


def test_a_running_environment_whose_image_predates_its_pip_list_is_rebuilt_not_reattached():
    """Before: the fast path compared the container's spec hash only, and reattached to an image without
    the profile's new pip package (seen on the test host: `up` after adding pip: said reattached)."""
    from devenv.config.profiles import BuildSpec
    from devenv.env import image_context

    env = EnvProfile(name="py", source="test", image="devenv/test:1", build=BuildSpec("pytorch.Dockerfile"),
                     pip=("inflection==0.5.1",), user="alice", ports={"jupyter": 8888, "ssh": 2222})
    runtime = MemoryRuntime(images={env.image: "sha256:img"})          # built before: no content label
    runtime.add_container(NAME, "running", labels_for("sha256:img", env))
    result = backend(runtime).up(env, Key(), events=Recorder(), options=UpOptions(assume_yes=True))
    assert result.image_action == "built" and result.action == "recreated"
    assert runtime.image_labels[env.image][image_context.CONTENT_LABEL] == image_context.content_hash(env)
    assert runtime.build_args["DEVENV_PIP"] == "inflection==0.5.1" and runtime.build_args["DEVENV_USER"] == "alice"
    # the same again: the image is current now, so reattached without building
    again = backend(runtime).up(env, Key(), events=Recorder(), options=UpOptions())
    assert again.action == "reattached" and len(runtime.did("build")) == 1


def test_exec_runs_as_the_environments_user_and_its_container_knows_it():
    env = EnvProfile(name="py", source="test", image="devenv/test:1", user="alice",
                     ports={"jupyter": 8888, "ssh": 2222})
    runtime = MemoryRuntime(images={env.image: "sha256:img"})
    provisioner = backend(runtime)
    result = provisioner.up(env, Key(), events=Recorder(), options=UpOptions())
    request = runtime._requested[result.status.container]
    assert request.environment["DEVENV_USER"] == "alice" and request.user == "alice"
    provisioner.exec("py", ["whoami"])
    assert runtime.exec_users == ["alice"]
    assert provisioner.ssh_target("py").user == "alice"
    plain = MemoryRuntime(images={ENV.image: "sha256:img"})
    backend(plain).up(ENV, Key(), events=Recorder(), options=UpOptions())
    backend(plain).exec("py", ["whoami"])
    assert plain.exec_users == [""]          # root: the request is the same as before users existed


def test_on_a_slurm_cluster_the_login_nodes_check_starts_beside_the_job_lookup(monkeypatch):
    """`up CLUSTER` with no job known here: the preflight batch (partitions, GRES, limits) runs on its own thread
    while the backend looks for the env's job and writes its files, instead of after the lookup; a job this
    laptop recorded (a re-`up`) is looked up first, as before, and the check runs where the backend asks."""
    import threading

    from devenv.env import state as envstate
    from devenv.services.environments.slurm import check as cluster_check
    from devenv.services.environments.slurm.backend import SlurmEnvironments

    cluster = HostProfile(name="memcluster", source="test", local=True, runtime="slurm")
    seen: list[str] = []

    def run_cluster_preflight(conn, host, env):
        seen.append(threading.current_thread().name)
        return CheckReport(host.name, env.name, [CheckResult("slurm.version", "Slurm", PASS, "22.05")])

    class Backend:
        """Stands in for SlurmEnvironments: its up() looks for the job, then asks its preflight, as the real one."""
        traits = SlurmEnvironments.traits
        host = cluster

        def __init__(self, check):
            self.check = check

        def up(self, env, key, *, events, options):
            seen.append("lookup")
            events.checked(self.check(env))
            return "up"

        def close(self):
            pass

    monkeypatch.setattr(cluster_check, "run_cluster_preflight", run_cluster_preflight)
    for recorded, expected in ((None, {"devenv-early-check", "lookup"}), ("12", {"lookup", "MainThread"})):
        seen.clear()
        envstate.forget(cluster.name, ENV.name)
        if recorded:
            envstate.update(cluster.name, ENV.name, container=recorded)
        events = Recorder()
        session = EnvSession(cluster, LocalConnection(cluster.name), events=events)
        session.env = ENV
        session._backend = Backend(session._preflight)  # type: ignore[assignment]
        session.up(UpOptions(pick_gpus=lambda *a: None))
        assert set(seen) == expected and len(seen) == 2
        assert [r.ok for r in events.reports] == [True]
