"""`ops.namespace_imports`: a branch started before the namespace is rewritten to its names, and only its names."""

from __future__ import annotations

import importlib.util

from ops.namespace_imports import rewrite_python

OLD = '''"""Uses `server.sqlite_store` and `server.core.entry`."""
from server import changelog, sweep
from server.core import conflicts
from server.core.settings import load
from agent_client import settings as client_settings
import mcp_shim.app
from agent_client.dashboard.access import Access

COMMAND = "server.operator_cli:serve"


def run(server):
    # talks to server.service
    mock_target = "agent_client.client.AgentClient.add"
    return server.store.snapshot(), server.address, f"{server.settings}", "server.key"
'''

NEW = '''"""Uses `mnemosync.server.sqlite_store` and `mnemosync.kernel.entry`."""
from mnemosync.server import changelog, sweep
from mnemosync.kernel import conflicts
from mnemosync.kernel.settings_loading import load
from mnemosync.agent import settings as client_settings
import mnemosync.shim.app
from mnemosync.agent.dashboard.sign_in import Access

COMMAND = "mnemosync.server.operator_cli:serve"


def run(server):
    # talks to mnemosync.server.service
    mock_target = "mnemosync.agent.client.AgentClient.add"
    return server.store.snapshot(), server.address, f"{server.settings}", "server.key"
'''


def test_imports_strings_and_comments_move_to_the_namespace_and_variables_keep_their_names():
    assert rewrite_python(OLD) == NEW


def test_a_second_run_changes_nothing():
    assert rewrite_python(NEW) == NEW


def test_every_module_the_rewrite_names_exists_in_the_namespace():
    named = {line.split()[1] for line in NEW.splitlines() if line.startswith(("from mnemosync", "import mnemosync"))}
    assert named and all(importlib.util.find_spec(name) is not None for name in named), named
