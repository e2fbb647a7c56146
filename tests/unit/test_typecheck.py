"""The type checker is really checking: it resolves the namespace's folders, is strict where the configuration
says so, and the list of modules whose old findings it ignores only shrinks."""

from __future__ import annotations

import tomllib
from typing import get_args

from mnemosync.kernel.links import EDGE_TYPES
from mnemosync.kernel.memory import LAYER_NUMBERS
from mnemosync.shim import params
from ops.faults.run import NAMESPACE_VIEW
from ops.typecheck import ROOT, real_paths, run

IGNORED_TODAY = {
    "mnemosync.__main__", "mnemosync.serve_cli",
    "mnemosync.agent.bulk", "mnemosync.agent.client", "mnemosync.agent.conflicts_cli",
    "mnemosync.agent.dashboard.plots", "mnemosync.agent.dashboard.viewer", "mnemosync.agent.dashboard.views_search",
    "mnemosync.agent.dashboard.views_sign_in", "mnemosync.agent.doctor", "mnemosync.agent.embeddings",
    "mnemosync.agent.model_cli", "mnemosync.agent.outbox", "mnemosync.agent.read_path", "mnemosync.agent.transparency",
    "mnemosync.kernel.codec", "mnemosync.kernel.command_line", "mnemosync.kernel.graph", "mnemosync.kernel.listings",
    "mnemosync.kernel.memory", "mnemosync.kernel.operations", "mnemosync.kernel.overview",
    "mnemosync.kernel.projections", "mnemosync.kernel.revisions", "mnemosync.kernel.search",
    "mnemosync.kernel.secrets_scan", "mnemosync.kernel.topics", "mnemosync.kernel.vectors",
    "mnemosync.server.admission", "mnemosync.server.app", "mnemosync.server.ca", "mnemosync.server.changelog",
    "mnemosync.server.ledger", "mnemosync.server.operator_cli", "mnemosync.server.postgres_record",
    "mnemosync.server.redaction", "mnemosync.server.revocation", "mnemosync.server.service",
    "mnemosync.server.usage_stats",
    "mnemosync.shim.channel", "mnemosync.shim.hook_cli", "mnemosync.shim.params", "mnemosync.shim.results",
    "mnemosync.shim.session", "mnemosync.shim.tools_graph", "mnemosync.shim.tools_lifecycle",
    "mnemosync.shim.tools_memory", "mnemosync.shim.tools_read",
}
"""The modules whose findings predated the checker (the day it was added)."""


def _overrides() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]


def test_the_modules_whose_old_findings_are_ignored_only_ever_leave_the_list():
    ignored = {m for o in _overrides() if o.get("ignore_errors") for m in o["module"]}
    assert ignored <= IGNORED_TODAY, f"modules added to the ignored list: {sorted(ignored - IGNORED_TODAY)}"


def test_the_shims_literal_parameters_name_exactly_the_kernels_layers_and_edge_types():
    """They are spelled out for the checker, not built from the kernel's tuples: they must not drift from them."""
    assert get_args(params.Layer) == tuple(LAYER_NUMBERS)
    assert get_args(get_args(params.EdgeType)[0]) == EDGE_TYPES


def test_a_wrong_call_into_a_server_module_is_reported_through_the_namespace(tmp_path):
    caller = tmp_path / "caller.py"
    caller.write_text("from mnemosync.server.ledger import Ledger\n\nledger: int = Ledger.sqlite('x.db')\n")
    done = run([str(caller)])
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'Incompatible types in assignment (expression has type "Ledger", variable has type "int")' in done.stdout


def test_the_changelog_seam_is_checked_strictly(tmp_path):
    strict = next(o for o in _overrides() if o.get("disallow_untyped_defs"))
    assert "mnemosync.server.record" in strict["module"] and "mnemosync.server.group_commit" in strict["module"]
    source = ROOT / NAMESPACE_VIEW / "mnemosync" / "server" / "group_commit.py"
    shadow = tmp_path / "group_commit.py"
    shadow.write_text((ROOT / "server" / "group_commit.py").read_text() + "\n\ndef untyped(x):\n    return x\n")
    done = run(["--shadow-file", str(source), str(shadow), "-p", "mnemosync.server.group_commit"])
    assert "Function is missing a type annotation  [no-untyped-def]" in done.stdout, done.stdout + done.stderr
    assert "server/group_commit.py" in real_paths(done.stdout)


def test_the_kernel_and_the_ledger_stay_strict_and_no_server_module_is_ignored():
    strict = next(o for o in _overrides() if o.get("disallow_untyped_defs"))["module"]
    assert "mnemosync.kernel.*" in strict and "mnemosync.server.ledger" in strict
    ignored = {m for o in _overrides() if o.get("ignore_errors") for m in o["module"]}
    assert not {m for m in ignored if m.startswith("mnemosync.server.")}


def test_a_keyword_the_ledger_does_not_declare_is_reported_in_the_services_calls(tmp_path):
    """The drift the checker was added for: the service passed `search` keywords its declaration lacked."""
    service = (ROOT / "server" / "service.py").read_text()
    assert "            rerank=not request.fusion_only,\n" in service
    shadow = tmp_path / "service.py"
    shadow.write_text(service.replace("            rerank=not request.fusion_only,\n",
                                      "            reranker=not request.fusion_only,\n"))
    source = ROOT / NAMESPACE_VIEW / "mnemosync" / "server" / "service.py"
    done = run(["--shadow-file", str(source), str(shadow), "-p", "mnemosync.server.service"])
    assert 'Unexpected keyword argument "reranker"' in done.stdout, done.stdout + done.stderr
