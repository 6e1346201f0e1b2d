"""A project's own environment name (config.project_envs): named after the project, never a profile's name nor
another project's, remembered so that `--env NAME` resolves it with no YAML (services.session.resolve_env)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devenv.config import profiles, project_envs
from devenv.config.profiles import HostProfile
from devenv.errors import ProfileError
from devenv.services.session import resolve_env


def test_the_name_is_the_projects_and_a_clash_gets_a_suffix(isolated_home, tmp_path):
    a, b = tmp_path / "one" / "app", tmp_path / "two" / "app"
    assert project_envs.name_for(a, None, set()) == "app"
    assert project_envs.name_for(a, "My Project!", set()) == "my-project"
    project_envs.remember(project_envs.ProjectEnv("app", "cpu", str(a / ".devcontainer.json"), str(a)))
    assert project_envs.name_for(a, None, set()) == "app"               # the same project: the same name
    other = project_envs.name_for(b, None, set())
    assert other.startswith("app-") and other != "app"                  # another project of that folder name
    assert project_envs.name_for(tmp_path / "cpu", None, {"cpu"}).startswith("cpu-")  # a profile's name is taken


def test_a_remembered_project_env_resolves_by_name_on_its_base(isolated_home, tmp_path):
    host = HostProfile(name="box", source="test", default_env="cpu")
    with pytest.raises(ProfileError):
        resolve_env(host, "myproj")
    project_envs.remember(project_envs.ProjectEnv("myproj", "cpu", str(tmp_path / "dc.json"), str(tmp_path)))
    env = resolve_env(host, "myproj")
    assert env.name == "myproj" and env.image == profiles.load_env("cpu").image
    assert (Path(isolated_home) / "state" / "projects.json").stat().st_mode & 0o777 == 0o600
