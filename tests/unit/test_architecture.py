"""The shape of the code, kept true: the shared core's boundary, no import cycles, the README's map of the
code, and help with an example on every command.

The import graph is read with `ast` by `ops.imports` (the script that prints the before/after figures),
lazy imports inside functions and the command table's `"module:attribute"` names included.
"""

from __future__ import annotations

import re
import subprocess
import sys

import click
import pytest

from ops.imports import CORE, ROOT, build, cycles, package_of

GRAPH = build(ROOT)
PRODUCT = ("server", "agent_client", "mcp_shim")


def _edges_from(package: str) -> list[tuple[str, str]]:
    return sorted({(e.source, e.target) for e in GRAPH.edges if package_of(e.source) == package})


@pytest.mark.parametrize("package", ["agent_client", "mcp_shim"])
def test_agents_and_the_shim_use_nothing_of_the_server_but_its_core(package):
    outside = [(s, t) for s, t in _edges_from(package) if package_of(t) == "server"]
    assert outside == [], f"{package} imports server modules outside server.core: {outside}"


def test_the_core_imports_nothing_else_of_the_project_and_nothing_of_grpc():
    outside = [(s, t) for s, t in _edges_from(CORE) if package_of(t) not in (CORE, "mnemosync")]
    assert outside == [], f"server.core imports outside itself: {outside}"
    grpc_users = []
    for module, path in GRAPH.modules.items():
        if package_of(module) == CORE and re.search(r"^\s*(import grpc|from grpc\b)|memory_pb2_grpc",
                                                     path.read_text(), re.M):
            grpc_users.append(module)
    assert grpc_users == [], f"server.core modules that use grpc: {grpc_users}"


def test_no_module_imports_itself_back_anywhere_in_the_tree():
    assert cycles(set(GRAPH.modules), GRAPH.targets()) == []


def test_the_packages_import_each_other_in_one_direction():
    targets: dict[str, set[str]] = {}
    for e in GRAPH.edges:
        a, b = package_of(e.source), package_of(e.target)
        if a != b:
            targets.setdefault(a, set()).add(b)
    assert cycles({*PRODUCT, CORE, "ops", "tests"}, targets) == []
    assert "tests" not in targets.get("ops", set()), "ops imports tests"


def test_the_readme_maps_every_module_of_the_core_the_server_the_agent_and_the_shim():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Map of the code", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`((?:server|agent_client|mcp_shim)/[\w/]+\.py)`", section))
    modules = {p.relative_to(ROOT).as_posix() for package in PRODUCT for p in (ROOT / package).rglob("*.py")
               if p.name != "__init__.py"}
    assert sorted(modules - listed) == [], "modules missing from the README's map of the code"
    assert sorted(listed - modules) == [], "the README's map names modules that do not exist"


def _commands(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, click.Context(command, info_name=name, parent=ctx), (*path, name))


def test_every_command_and_subcommand_has_help_with_an_example():
    from mcp_shim.__main__ import main as mcp_main
    from server.cli import cli

    root = click.Context(cli, info_name="mnemosync")
    found = [(("mnemosync",), cli), (("mnemosync-mcp",), mcp_main), *_commands(cli, root)]
    missing = []
    for path, command in found:
        text = command.get_help(click.Context(command, info_name=path[-1]))
        if "Example" not in text or "mnemosync" not in text.split("Example", 1)[1]:
            missing.append(" ".join(path))
    assert missing == [], f"commands whose --help has no example: {missing}"
    assert len(found) >= 24  # every command of the table, its subcommands, and the two entry points


def test_a_server_command_loads_nothing_of_the_agent_or_the_shim():
    probe = ("import sys, server.cli\n"
             "server.cli.cli.get_command(None, 'serve')\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'agent_client', 'mcp_shim', 'mcp'}))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert loaded.stdout.strip() == "[]"
