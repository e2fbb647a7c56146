"""`ops.namespace_imports`: a branch started before the namespace is rewritten to its names, and only its names;
what is not a rename is left alone and named for a person to change."""

from __future__ import annotations

import ast
import importlib
import importlib.util

import pytest

from ops.namespace_imports import MANUAL, MODULES, NAMES, main, rewrite, rewrite_python

OLD = '''"""Uses `server.sqlite_store` and `server.core.entry`."""
from server import changelog, sweep, __version__
from server.core import conflicts
from server.core.settings import build
from agent_client import settings as client_settings
from agent_client import settings, outbox
from agent_client.dashboard import access, views_access as views
from mcp_shim import app, local_socket  # the relay's socket
import mcp_shim.app
from agent_client.dashboard.access import Access
from server.sqlite_store import SqliteStore
from server import sweep, sqlite_store
if True:
    from server.core import (
        consolidation,
        entry,
    )

COMMAND = "server.operator_cli:serve"


def run(server):
    # talks to server.service
    mock_target = "agent_client.client.AgentClient.add"
    return server.store.snapshot(), server.address, f"{server.settings}", "server.key"
'''

NEW = '''"""Uses `server.sqlite_store` and `mnemosync.kernel.entry`."""
from mnemosync.server import changelog, sweep
from mnemosync import __version__
from mnemosync.kernel import conflict_projection as conflicts
from mnemosync.kernel.settings_loading import build
from mnemosync.agent import client_settings
from mnemosync.agent import client_settings as settings, outbox
from mnemosync.agent.dashboard import sign_in as access, views_sign_in as views
from mnemosync.shim import app
from mnemosync.agent import local_socket  # the relay's socket
import mnemosync.shim.app
from mnemosync.agent.dashboard.sign_in import Access
from server.sqlite_store import SqliteStore
from mnemosync.server import sweep
from server import sqlite_store
if True:
    from mnemosync.kernel import consolidation_rules as consolidation, entry

COMMAND = "mnemosync.server.operator_cli:serve"


def run(server):
    # talks to mnemosync.server.service
    mock_target = "mnemosync.agent.client.AgentClient.add"
    return server.store.snapshot(), server.address, f"{server.settings}", "server.key"
'''


def test_imports_strings_and_comments_move_to_the_namespace_and_variables_keep_their_names():
    assert rewrite_python(OLD) == NEW


def test_a_renamed_module_imported_from_its_package_keeps_its_local_name():
    assert rewrite_python("from server.core import settings\n") == (
        "from mnemosync.kernel import settings_loading as settings\n")
    assert rewrite_python("from agent_client import settings as s\n") == (
        "from mnemosync.agent import client_settings as s\n")


def test_the_agents_errors_that_joined_the_kernel_are_imported_from_it():
    done = rewrite("from agent_client.errors import InvalidInput, NotFound, ServerUnavailable, Refused\n")
    assert done.text == ("from mnemosync.kernel.errors import InvalidArgument as InvalidInput, NotFound\n"
                         "from mnemosync.agent.errors import ServerUnavailable\n"
                         "from agent_client.errors import Refused\n")
    assert [(row, old) for row, old, _ in done.notes] == [(1, "agent_client.errors.Refused")]
    assert "mnemosync.kernel.errors.MnemosyncError" in done.notes[0][2]


def test_a_settings_table_and_a_longer_dotted_name_keep_their_names():
    text = '"""`[server.consolidation]` of server.toml; `mnemosync.server.sweep`; `my_server.sweep`"""\n'
    assert rewrite_python(text) == text


def test_a_second_run_changes_nothing():
    assert rewrite_python(NEW) == NEW
    assert [old for _, old, _ in rewrite(NEW).notes] == [old for _, old, _ in rewrite(OLD).notes]


def test_every_module_the_table_writes_exists_in_the_namespace():
    missing = sorted(f"{old} -> {new}" for old, new in MODULES.items() if importlib.util.find_spec(new) is None)
    missing += [f"{old} -> {new}" for old, new in NAMES.items()
                if not hasattr(importlib.import_module(new.rsplit(".", 1)[0]), new.rsplit(".", 1)[1])]
    assert missing == []
    assert not set(MANUAL) & set(MODULES)


def test_every_name_the_rewrite_imports_exists_in_the_namespace():
    wrong = []
    for node in ast.walk(ast.parse(NEW)):
        if isinstance(node, ast.Import):
            wrong += [a.name for a in node.names if a.name.startswith("mnemosync")
                      and importlib.util.find_spec(a.name) is None]
        elif isinstance(node, ast.ImportFrom) and node.module.startswith("mnemosync"):
            module = importlib.import_module(node.module)
            wrong += [f"{node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)
                      and importlib.util.find_spec(f"{node.module}.{a.name}") is None]
    assert wrong == []


def test_a_module_replaced_by_more_than_a_rename_is_left_as_it_was_and_named_with_its_change():
    notes = rewrite(OLD).notes
    assert [(row, old) for row, old, _ in notes] == [
        (1, "server.sqlite_store"), (11, "server.sqlite_store"), (12, "server.sqlite_store")]
    assert "Ledger.sqlite(path, …)" in notes[0][2]
    assert rewrite("x = 'server.postgres_store.PostgresStore'\n").notes[0][2].startswith(
        "PostgresStore(url, replica, read_url=…) became mnemosync.server.ledger.Ledger.postgresql")


def test_code_still_using_a_name_bound_by_a_plain_import_is_named():
    done = rewrite("import server.core.entry\n\nx = server.core.entry.Entry\n")
    assert done.text == "import mnemosync.kernel.entry\n\nx = server.core.entry.Entry\n"
    assert done.notes == [
        (1, "server.core.entry", "code that says server.core.entry.… must say mnemosync.kernel.entry.…")]


@pytest.mark.parametrize("check", [True, False])
def test_the_command_prints_each_change_left_to_a_person_with_its_line_and_fails(tmp_path, capsys, check):
    path = tmp_path / "old.py"
    path.write_text("from server.store import Store\nfrom server.core import entry\n")
    assert main([*(["--check"] if check else []), str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path}:1: note: server.store: the Store type became mnemosync.server.ledger.Ledger" in out
    assert path.read_text() == ("from server.store import Store\nfrom server.core import entry\n" if check else
                                "from server.store import Store\nfrom mnemosync.kernel import entry\n")
