"""`mnemosync.shim.config`: the session's scope from the project directory, flags and the environment."""

from __future__ import annotations

import pytest

PROJECT_DIR = "/home/dev/src/demo"


SCOPE = "project:demo"


@pytest.mark.parametrize(("directory", "scope"), [
    ("/home/dev/src/demo", "project:demo"),
    ("/home/dev/src/demo/", "project:demo"),
    ("/home/dev/src/My App (v2)", "project:My-App-v2"),
    ("/", None),
])
def test_the_project_scope_is_the_directory_basename_made_a_valid_scope(directory, scope):
    from mnemosync.shim.config import project_scope

    assert project_scope(directory) == scope


def test_a_flag_or_mnemosync_scope_wins_over_the_claude_project_directory():
    from mnemosync.shim.config import load_settings

    env = {"CLAUDE_PROJECT_DIR": PROJECT_DIR}
    assert load_settings(environ=env).scope == SCOPE
    assert load_settings(environ={**env, "MNEMOSYNC_SCOPE": "user"}).scope == "user"
    assert load_settings(environ=env, scope="project:x").scope == "project:x"
    assert load_settings(environ={}).scope == "user"
    assert load_settings(environ={"MNEMOSYNC_TIMEOUT": "2.5"}).timeout == 2.5
