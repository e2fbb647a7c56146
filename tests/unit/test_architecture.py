"""The shape of the code, kept true: the shared core's boundary, no import cycles, the folder READMEs' maps of the
code, and help with an example on every command.

The import graph is read with `ast` by `ops.imports` (the script that prints the before/after figures),
lazy imports inside functions and the command table's `"module:attribute"` names included.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions

import click
import pytest

from ops.imports import AGENT, COMMAND_LINE, KERNEL, ROOT, SERVER, SHIM, STUBS, build, cycles, package_of

GRAPH = build(ROOT)


def _edges_from(package: str) -> list[tuple[str, str]]:
    return sorted({(e.source, e.target) for e in GRAPH.edges if package_of(e.source) == package})


@pytest.mark.parametrize("package", [AGENT, SHIM])
def test_the_agent_and_the_shim_import_nothing_of_the_server(package):
    outside = [(s, t) for s, t in _edges_from(package) if package_of(t) == SERVER]
    assert outside == [], f"{package} imports server modules: {outside}"


def test_the_server_imports_nothing_of_the_agent_side():
    outside = [(s, t) for s, t in _edges_from(SERVER) if package_of(t) in (AGENT, SHIM)]
    assert outside == [], f"the server imports the agent side: {outside}"


def test_the_kernel_imports_nothing_else_of_the_project_and_nothing_of_grpc():
    outside = [(s, t) for s, t in _edges_from(KERNEL) if package_of(t) not in (KERNEL, STUBS)]
    assert outside == [], f"mnemosync.kernel imports outside itself: {outside}"
    grpc_users = []
    for module, path in GRAPH.modules.items():
        if package_of(module) == KERNEL and re.search(r"^\s*(import grpc|from grpc\b)|memory_pb2_grpc",
                                                      path.read_text(), re.M):
            grpc_users.append(module)
    assert grpc_users == [], f"mnemosync.kernel modules that use grpc: {grpc_users}"


def test_no_module_imports_itself_back_anywhere_in_the_tree():
    assert cycles(set(GRAPH.modules), GRAPH.targets()) == []


def test_the_packages_import_each_other_in_one_direction():
    targets: dict[str, set[str]] = {}
    for e in GRAPH.edges:
        a, b = package_of(e.source), package_of(e.target)
        if a != b:
            targets.setdefault(a, set()).add(b)
    assert cycles({package_of(m) for m in GRAPH.modules}, targets) == []
    assert "tests" not in targets.get("ops", set()), "ops imports tests"


@pytest.mark.parametrize(("module", "folder_name", "name"), [
    ("server", "server", "mnemosync.server"),
    ("agent_client", "agent_client", "mnemosync.agent"),
    ("mcp_shim", "mcp_shim", "mnemosync.shim"),
    ("proto.mnemosync.kernel.entry", "proto.mnemosync", "mnemosync"),
    ("proto.mnemosync.v1.memory_pb2", "proto.mnemosync", "mnemosync"),
])
def test_a_folder_of_the_namespace_cannot_be_imported_under_its_folder_name(module, folder_name, name):
    """From the checkout's root the folders sit on sys.path (and `proto/` is an implicit namespace package);
    importing one by its folder name must fail loudly (a module importable under two names runs twice, with two
    copies of its state)."""
    done = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    assert "ImportError" in done.stderr and f"import {name}, not {folder_name}:" in done.stderr


def test_no_source_imports_a_folder_name_instead_of_the_namespace():
    stray = []
    for path in GRAPH.modules.values():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n.split(".")[0] in ("server", "agent_client", "mcp_shim") for n in names):
                stray.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert stray == []


NAMESAKES = {
    "__main__.py": {"proto/mnemosync/__main__.py", "mcp_shim/__main__.py"},
    "app.py": {"server/app.py", "agent_client/dashboard/app.py", "mcp_shim/app.py"},
    "cli.py": {"proto/mnemosync/cli.py", "agent_client/cli.py", "agent_client/dashboard/cli.py"},
    "errors.py": {"proto/mnemosync/kernel/errors.py", "agent_client/errors.py", "mcp_shim/errors.py"},
}
"""The module names the namespace repeats on purpose, each where it is allowed. `__main__` is Python's name for
`python -m` (the `mnemosync` and `mnemosync-mcp` scripts); `app` is each edge's application object (the gRPC
server's assembly, the dashboard's web app, the MCP server); `cli` is a command table (the root `mnemosync` table,
the agent's commands, `mnemosync dashboard`); `errors` is the kernel's one hierarchy and the two edges that add
their own errors to it and map it (the agent's, the shim's tool errors)."""


def test_no_two_modules_of_the_namespace_share_a_name_but_the_allowed_ones():
    """Two modules with one name (two `settings.py`, two `access.py`) make every import and traceback ambiguous to a
    reader; the names the namespace repeats on purpose are listed, with where."""
    folders = [ROOT / "server", ROOT / "agent_client", ROOT / "mcp_shim", ROOT / "proto/mnemosync"]
    where: dict[str, set[str]] = {}
    for folder in folders:
        for path in folder.rglob("*.py"):
            if path.name != "__init__.py" and "__pycache__" not in path.parts:
                where.setdefault(path.name, set()).add(path.relative_to(ROOT).as_posix())
    repeated = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert repeated == NAMESAKES, "a module name repeats: give it a name of its own, or list it in NAMESAKES with why"


MAPS = ["proto/mnemosync/README.md", "proto/mnemosync/kernel/README.md", "server/README.md", "agent_client/README.md",
        "agent_client/dashboard/README.md", "mcp_shim/README.md"]
"""The folder READMEs whose "Map of the code" sections together list every module."""


def test_the_folder_readmes_map_every_module_of_the_core_the_server_the_agent_and_the_shim():
    listed: set[str] = set()
    for page in MAPS:
        section = (ROOT / page).read_text().split("\n## Map of the code\n", 1)[1].split("\n## ", 1)[0]
        listed |= set(re.findall(r"`((?:server|agent_client|mcp_shim|proto/mnemosync)/[\w/]+\.py)`", section))
    folders = [ROOT / "server", ROOT / "agent_client", ROOT / "mcp_shim", ROOT / "proto/mnemosync"]
    modules = {p.relative_to(ROOT).as_posix() for folder in folders for p in folder.rglob("*.py")
               if p.name != "__init__.py" and "/v1/" not in p.as_posix()}
    assert sorted(modules - listed) == [], f"modules missing from the maps of the code in {MAPS}"
    assert sorted(listed - modules) == [], "a folder README's map names modules that do not exist"


def _commands(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, click.Context(command, info_name=name, parent=ctx), (*path, name))


def test_every_command_and_subcommand_has_help_with_an_example():
    from mnemosync.cli import cli
    from mnemosync.shim.__main__ import main as mcp_main

    root = click.Context(cli, info_name="mnemosync")
    found = [(("mnemosync",), cli), (("mnemosync-mcp",), mcp_main), *_commands(cli, root)]
    missing = []
    for path, command in found:
        text = command.get_help(click.Context(command, info_name=path[-1]))
        if "Example" not in text or "mnemosync" not in text.split("Example", 1)[1]:
            missing.append(" ".join(path))
    assert missing == [], f"commands whose --help has no example: {missing}"
    assert len(found) >= 24  # every command of the table, its subcommands, and the two entry points


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return set(ran.stdout.split())


def test_a_server_command_loads_nothing_of_the_agent_or_the_shim():
    loaded = _modules_after("import mnemosync.cli\nmnemosync.cli.cli.get_command(None, 'serve')")
    packages = {p for m in loaded for p in (m.split(".")[0], ".".join(m.split(".")[:2]))}
    assert packages & {"mnemosync.agent", "mnemosync.shim", "mcp"} == set()


def test_the_stdio_relay_loads_neither_openssl_nor_the_agent(tmp_path):
    """A relay per session: what it imports is paid once per session (`hashlib` alone loads OpenSSL, 3.7 MB)."""
    loaded = _modules_after("import mnemosync.shim.__main__, mnemosync.shim.relay\n"
                            "from mnemosync.agent import local_socket\n"
                            f"local_socket.socket_path({{'XDG_RUNTIME_DIR': {str(tmp_path)!r}}}, {{}}, create=True)")
    assert {m.split(".")[0] for m in loaded} & {"_hashlib", "grpc", "numpy", "mcp", "pydantic"} == set()


def test_an_agent_without_a_ca_loads_no_certificate_code():
    """The local agent imports what it serves sessions and hooks with; x509 (6 MB) only checks a CA's certificates."""
    loaded = _modules_after("import mnemosync.shim.agent_cli, mnemosync.agent.client, mnemosync.agent.captures\n"
                            "import mnemosync.shim.session, mnemosync.shim.app, mnemosync.shim.hook_answers")
    assert {m for m in loaded if m.startswith("cryptography.x509")} == set()


def test_the_agent_serves_mcp_without_loading_the_mcp_sdk():
    """The SDK's server and types cost the agent ~46 MB; the shim speaks MCP itself (`mnemosync.shim.protocol`).
    `tests/system/test_mcp_protocol.py` checks the running agent; this catches a stray import at once."""
    loaded = _modules_after("import mnemosync.shim.agent_cli, mnemosync.shim.agent_sessions, mnemosync.shim.app\n"
                            "import mnemosync.shim.channel, mnemosync.shim.hook_answers")
    assert {m.split(".")[0] for m in loaded} & {"mcp", "mcp_types"} == set()


def test_every_library_the_product_imports_is_a_dependency_it_declares():
    """A user's `pip install mnemosync` brings only `[project] dependencies` (and the `postgresql` extra for the
    PostgreSQL store): a product module importing a library that only a test extra or another library's
    requirements bring (as `mcp` once brought pydantic and anyio) breaks that install and no test of ours."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {re.sub(r"[-_.]+", "-", re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0]).lower() for r in requirements}

    declared = names(project["dependencies"]) | names(project["optional-dependencies"]["postgresql"])
    distributions = packages_distributions()
    undeclared = set()
    for name, path in GRAPH.modules.items():
        if not name.startswith("mnemosync"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            imported = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                        [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for top in {n.split(".")[0] for n in imported} - set(sys.stdlib_module_names) - {"mnemosync"}:
                if top.startswith("_"):
                    continue  # the interpreter's own (`_sha2`, `_sha256`)
                if not names(distributions.get(top, [top])) & declared:
                    undeclared.add(f"{top} ({path.relative_to(ROOT)})")
    assert sorted(undeclared) == []


SUBJECT_RULE_SINCE = "db0ceff1ad9ff9367eefe62a0f082bfdfa708e76"
"""The first commit made under the rule below (the namespace move); older subjects are left as they were."""


def test_commit_subjects_since_the_rule_stay_under_72_characters():
    """A subject says what changed in one line a log can show; the why goes in the body."""
    known = subprocess.run(["git", "cat-file", "-e", f"{SUBJECT_RULE_SINCE}^{{commit}}"], cwd=ROOT,
                           capture_output=True)
    if known.returncode != 0:
        pytest.skip("this clone does not hold the history the rule starts at (a shallow clone)")
    subjects = subprocess.run(["git", "log", "--format=%s", f"{SUBJECT_RULE_SINCE}^..HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.splitlines()
    assert subjects, "no commit since the rule's first"
    assert [s for s in subjects if len(s) > 72] == []


def _exception_classes() -> dict[str, list[str]]:
    """Every exception class the product defines (a class deriving, through the product's own classes or not, from
    something named `...Error`, `...Exception` or `Exception`), by name: the modules defining it."""
    bases: dict[tuple[str, str], list[str]] = {}
    for module, path in GRAPH.modules.items():
        if package_of(module) in (KERNEL, SERVER, AGENT, SHIM, COMMAND_LINE, "mnemosync"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    bases[(module, node.name)] = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
    errors: set[str] = set()
    while True:
        found = {name for (_, name), named in bases.items()
                 if any(b in errors or b == "Exception" or b.endswith(("Error", "Exception")) for b in named)}
        if found <= errors:
            break
        errors |= found
    defined: dict[str, list[str]] = {}
    for module, name in sorted(bases):
        if name in errors:
            defined.setdefault(name, []).append(module)
    return defined


def test_no_exception_class_name_is_defined_in_two_modules_of_the_product():
    defined = _exception_classes()
    assert {"NotFound", "StaleVersion", "ServerUnavailable", "CallFailed"} <= defined.keys()
    twice = {name: modules for name, modules in defined.items() if len(modules) > 1}
    assert twice == {}, f"exception classes defined more than once: {twice}"


RECORD_MEMBERS = {"begin", "append", "commit", "abort", "read", "head", "acknowledge", "offsets"}
"""The changelog record's interface: what event-sourcing libraries put between an application and its store."""


def test_the_changelog_record_interface_stays_narrow():
    from mnemosync.server.record import ChangelogRecord, SharedRecord

    members = {name for name in vars(ChangelogRecord) if not name.startswith("_")}
    assert members == RECORD_MEMBERS
    shared = {name for name in vars(SharedRecord) if not name.startswith("_")}
    assert shared == {"start", "stop", "close", "verify", "read_store_status"}


def test_no_ledger_or_record_class_inherits_from_another_concrete_one():
    """The ledger composes a record; records stand side by side (a Protocol is the only shared base)."""
    server_classes: dict[str, list[str]] = {}
    for module, path in GRAPH.modules.items():
        if package_of(module) == SERVER:
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    server_classes[node.name] = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
    storage = {name for name in server_classes if name.endswith(("Ledger", "Record", "Store"))}
    assert {"Ledger", "SqliteRecord", "PostgresRecord"} <= storage
    inherited = {name: bases for name, bases in server_classes.items()
                 if name in storage and any(b in storage and b not in ("ChangelogRecord", "SharedRecord")
                                            for b in bases)}
    assert inherited == {}


MAX_PUBLIC_METHODS = 25
"""A class of the server a reader can hold: past this, split it into services named by what a reader looks for
(as the ledger is: `mnemosync.server.ledger`)."""


def _proto_rpcs() -> set[str]:
    text = (ROOT / "proto/mnemosync/v1/memory.proto").read_text()
    return set(re.findall(r"^\s*rpc\s+(\w+)\s*\(", text, re.M))


def test_no_class_of_the_server_has_more_than_25_public_methods():
    """Public methods, properties and class methods count; the gRPC servicer's methods that `memory.proto` names
    do not (each RPC is one, and the proto decides how many there are)."""
    rpcs = _proto_rpcs()
    assert {"Append", "Search", "Subscribe"} <= rpcs
    too_wide = {}
    for module, path in GRAPH.modules.items():
        if package_of(module) != SERVER:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                public = [f.name for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                          and not f.name.startswith("_") and f.name not in rpcs]
                if len(public) > MAX_PUBLIC_METHODS:
                    too_wide[f"{module}.{node.name}"] = len(public)
    assert too_wide == {}, f"classes with more than {MAX_PUBLIC_METHODS} public methods: split them"


LEDGER_SERVICES = {"writes", "memory_reads", "graph_reads", "memory_lifecycle", "log_reads", "operator_reads"}
"""The ledger's services (`mnemosync.server.ledger`): each is reached as an attribute of the ledger."""


def test_the_ledgers_services_share_only_its_context_and_import_neither_it_nor_each_other():
    """A service is read on its own: what it shares is `mnemosync.server.ledger_context`, not another service."""
    named = {f"mnemosync.server.{name}" for name in LEDGER_SERVICES}
    crossing = [(s, t) for s, t in _edges_from(SERVER)
                if s in named and (t in named or t == "mnemosync.server.ledger")]
    assert crossing == []
    assert all((s, "mnemosync.server.ledger_context") in set(_edges_from(SERVER)) for s in named)

