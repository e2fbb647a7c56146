"""The type checker is really checking: it resolves the namespace's folders, is strict where the configuration
says so, and no module is exempt from it."""

from __future__ import annotations

import tomllib
from typing import get_args

from mnemosync.kernel.links import EDGE_TYPES
from mnemosync.kernel.memory import LAYER_NUMBERS
from mnemosync.shim import params
from ops.faults.run import NAMESPACE_VIEW
from ops.typecheck import ROOT, real_paths, run


def _overrides() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]


def test_no_module_is_exempt_from_the_checker():
    exempt = [o["module"] for o in _overrides() if "ignore_errors" in o]
    assert not exempt, f"modules whose findings are ignored: {exempt}"
    assert "ignore_errors" not in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


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


def test_the_kernel_and_the_ledger_stay_strict():
    strict = next(o for o in _overrides() if o.get("disallow_untyped_defs"))["module"]
    assert "mnemosync.kernel.*" in strict and "mnemosync.server.ledger" in strict


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
