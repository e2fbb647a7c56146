"""`mnemosync.shim.agent_sessions`: what a relay may ask for when it opens a session on the local agent."""

from __future__ import annotations

import pytest

from mnemosync.shim.agent_sessions import SessionRequest


def test_a_bare_request_gets_the_defaults_of_mnemosync_mcp():
    assert SessionRequest.parse({"op": "mcp"}) == SessionRequest(scope=None, project_dir=None, tools="compact",
                                                                 core_budget=1500, channel=False,
                                                                 channel_interval=30.0)


def test_every_field_is_taken_as_given():
    got = SessionRequest.parse({"op": "mcp", "scope": "project:web", "project_dir": "/src/web", "tools": "all",
                                "core_budget": 800, "channel": True, "channel_interval": 5})
    assert got == SessionRequest("project:web", "/src/web", "all", 800, True, 5.0)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("tools", "most", "tools must be one of compact, all, got 'most'"),
    ("core_budget", 50, "core_budget must be an integer from 200 to 8000, got 50"),
    ("core_budget", "big", "core_budget must be an integer from 200 to 8000, got 'big'"),
    ("channel_interval", 0.5, "channel_interval must be from 1 to 3600 seconds, got 0.5"),
    ("scope", "x" * 129, "scope must be a string of at most 128 characters"),
    ("project_dir", 7, "project_dir must be a string of at most 4096 characters"),
])
def test_a_bad_field_is_refused_with_its_name_and_limit(field, value, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        SessionRequest.parse({"op": "mcp", field: value})
