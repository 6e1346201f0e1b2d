"""devcontainer.json (JSONC) read into what devenv honours, and what it cannot named."""

from __future__ import annotations

import json

import pytest

from devenv.env import devcontainer, jsonc
from devenv.errors import ProfileError

REAL = """// a devcontainer.json as VS Code writes it
{
  "name": "trainer", /* block
  comment */ "build": {
    "dockerfile": "Dockerfile",   // next to this file
    "context": "..",
    "args": {"PY": "3.11",},
  },
  "forwardPorts": [6006, "db:5432",],
  "containerEnv": {"WANDB_MODE": "offline", "DEBUG": true},
  "remoteEnv": {"DEBUG": "0"},
  "mounts": ["type=volume,source=cache,target=/root/.cache"],
  "postCreateCommand": ["pip", "install", "-e", "."],
  "postStartCommand": {"a": "echo one", "b": "echo 'two, // not a comment'"},
  "remoteUser": "root",
  "features": {"ghcr.io/devcontainers/features/node:1": {}},
  "customizations": {"vscode": {"extensions": ["ms-python.python"]}},
}
"""


def test_jsonc_keeps_strings_with_comment_marks_and_commas_exactly():
    text = '{"url": "http://x//y", "s": "a,}", /* c */ "t": [1, 2,], // end\n}'
    assert jsonc.loads(text) == {"url": "http://x//y", "s": "a,}", "t": [1, 2]}
    assert jsonc.loads('"\\\\"') == "\\"


def test_jsonc_errors_give_the_files_own_line():
    with pytest.raises(ProfileError) as info:
        jsonc.loads('{\n  // fine\n  "a": 1\n  "b": 2\n}', "dc.json")
    assert info.value.message.startswith("dc.json:4:")


def test_a_real_devcontainer_is_read_and_what_devenv_cannot_honour_is_named():
    dc = devcontainer.parse(REAL, "proj/.devcontainer/devcontainer.json")
    assert dc.dockerfile == ".devcontainer/Dockerfile" and dc.context == "."
    assert dc.build_args == {"PY": "3.11"}
    assert dc.forward_ports == (6006,)
    assert dc.env == {"WANDB_MODE": "offline", "DEBUG": "0"}
    assert dc.volumes == {"cache": "/root/.cache"} and dc.mounts == ()
    assert dc.post_create == ("pip install -e .",)
    assert dc.post_start == ("echo one", "echo 'two, // not a comment'")
    assert dc.remote_user is None   # root: the default, nothing to do
    assert "features: not supported by devenv" in dc.not_honoured
    assert any(n.startswith("forwardPorts 'db:5432'") for n in dc.not_honoured)
    assert not any(n.startswith("customizations") for n in dc.not_honoured)


@pytest.mark.parametrize("build", [{"dockerfile": "../../Dockerfile"}, {"dockerfile": "D", "context": "../.."},
                                   {"dockerfile": "/etc/Dockerfile"}])
def test_the_build_never_leaves_the_project(build):
    with pytest.raises(ProfileError):
        devcontainer.parse(json.dumps({"build": build}), "dc.json")


def test_an_image_alone_is_enough_and_nothing_is_not_enough():
    assert devcontainer.parse('{"image": "mcr.microsoft.com/devcontainers/python:3"}', "x").image
    with pytest.raises(ProfileError):
        devcontainer.parse('{"name": "x"}', "x")


def test_post_attach_command_is_honoured_and_initialize_command_is_named_not_run():
    dc = devcontainer.parse('{"image": "x", "postAttachCommand": ["echo", "attached"], '
                            '"initializeCommand": "touch /tmp/never"}', "dc.json")
    assert dc.post_attach == ("echo attached",)
    assert not any(n.startswith("postAttachCommand") for n in dc.not_honoured)
    assert any(n.startswith("initializeCommand") for n in dc.not_honoured)  # it would run on this machine
