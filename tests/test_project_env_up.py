"""A project's devcontainer gets its own environment (issue 28, point 1), through the real `up` over the in-memory
engine (tests/contract's memory place: devenv's docker backend on tests/memory_runtime.py): with the default
environment running, `up` of a project with a devcontainer.json makes `<project>` beside it (it offered to
replace the running one), and `--env <project>` reattaches to it from another folder with no YAML."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "contract"))

from places import memory_place  # noqa: E402  (tests/contract's helpers, by path)


def test_a_projects_devcontainer_gets_its_own_environment_beside_the_running_one(tmp_path):
    place = memory_place(tmp_path / "home")
    try:
        first = place.up()
        assert first["env"] == place.env and first["action"] == "created"
        project = tmp_path / "work" / "myproj"
        (project / ".devcontainer").mkdir(parents=True)
        (project / ".devcontainer" / "devcontainer.json").write_text('{"image": "devenv-base:bookworm"}')
        made = place.devenv("up", place.host, "--devcontainer", str(project), "--detach", "--json")
        assert made.returncode == 0, made.stderr
        result = json.loads(made.stdout)
        assert result["env"] == "myproj" and result["action"] == "created"
        assert f"its own environment 'myproj' (on '{place.env}'" in made.stderr
        listed = json.loads(place.ok("status", place.host, "--json").stdout)["environments"]
        assert {row["env"]: row["state"] for row in listed if row["env"] in (place.env, "myproj")} == \
            {place.env: "running", "myproj": "running"}
        again = json.loads(place.ok("up", place.host, "--env", "myproj", "--detach", "--json").stdout)
        assert again["env"] == "myproj" and again["action"] == "reattached"
        assert again["devcontainer"]["source"] == str(project / ".devcontainer" / "devcontainer.json")
        place.ok("down", place.host, "--env", "myproj", "--purge", "--yes")
    finally:
        place.remove_everything()


def test_ctrl_c_during_up_says_what_is_left_and_how_up_finishes_it(tmp_path):
    import signal

    from places import Wait

    place = memory_place(tmp_path / "home")
    try:
        wait = Wait("building", r"==> Building ")
        running = place.start("up", place.host, "--detach", extra_env=place.arrange(wait))
        running.wait_line(wait.line, timeout=120)
        running.proc.send_signal(signal.SIGINT)
        assert running.finish() == 130, running.output
        assert f"`up` stopped before '{place.env}' was ready: what it made so far stays on {place.host}; " \
               f"`devenv up {place.host}` finishes it, `devenv down {place.host}` removes it." in running.output
        finished = place.up(extra_env=place.release(wait))
        assert finished["action"] in ("created", "started"), finished
    finally:
        place.remove_everything()
