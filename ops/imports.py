"""The shape of the code: its import graph, and the path one write takes through it.

    python -m ops.imports                 # the import graph: packages, edges between them, cycles
    python -m ops.imports --write-path    # also trace one add_memory from an MCP session to another agent's cache
    python -m ops.imports --root DIR      # the graph of another checkout (for before/after figures)

The graph is read with `ast` from every `.py` file of the product (the
`mnemosync` namespace: proto/mnemosync, server, agent_client, mcp_shim), ops
and tests: every import statement counts, at module level or inside a
function, and so does a `"mnemosync.package.module:attribute"` string (how the
`mnemosync` command table names the commands it loads lazily). Each of the
namespace's packages counts on its own (`mnemosync.kernel`, `mnemosync.server`,
`mnemosync.agent`, `mnemosync.shim`, the stubs `mnemosync.v1`, the root's
command line `mnemosync.cli` and the root `mnemosync` itself), as do `ops` and
`tests`.

The write path is measured, not described: it starts, in this process, a
server, the stdio relay (`mnemosync-mcp`), the local agent holding the writing
session behind its socket (`mnemosync agent`) and a second agent with live
updates; sends the relay one `add_memory` call as Claude Code would, and
records, with a profiler hook on every thread, which first-party modules run
until the second agent's cache holds the new memory. Threads are booked to the
process they would run in (`side_of`): the server's by their names (it starts
them all from one thread), each agent's and the relay's by the thread that
started them, from the first thread of each, booked by hand. It needs the
default embedding model (`ops/bootstrap.sh` builds it).
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"mnemosync": "proto/mnemosync", "mnemosync.server": "server", "mnemosync.agent": "agent_client",
           "mnemosync.shim": "mcp_shim"}
"""Each root of the namespace and the folder it is installed from (pyproject.toml's package-dir)."""
KERNEL = "mnemosync.kernel"
SERVER, AGENT, SHIM, STUBS = "mnemosync.server", "mnemosync.agent", "mnemosync.shim", "mnemosync.v1"
COMMAND_LINE = "mnemosync.cli"
"""The root's command-line modules (`cli`, `serve_cli`, `__main__`), counted as one package: they name all three."""
PRODUCT = (KERNEL, SERVER, AGENT, SHIM, STUBS, COMMAND_LINE, "mnemosync")
"""The namespace's packages, as `package_of` names them (`mnemosync` alone is the root's `__init__`)."""
_LAZY_REFERENCE = re.compile(r"^(mnemosync(?:\.\w+)+):\w+$")


@dataclass(frozen=True)
class Edge:
    """One import of `target` by `source` (module names); `lazy` when it is not at module level."""

    source: str
    target: str
    lazy: bool


@dataclass
class Graph:
    """Modules (name to file) and the import edges between them."""

    modules: dict[str, Path] = field(default_factory=dict)
    edges: set[Edge] = field(default_factory=set)

    def targets(self) -> dict[str, set[str]]:
        """Module to the modules it imports."""
        out: dict[str, set[str]] = defaultdict(set)
        for e in self.edges:
            out[e.source].add(e.target)
        return out


def package_of(module: str) -> str:
    """The package a module counts under: one of `PRODUCT` for the namespace, else its top-level name."""
    if module.startswith("tests:"):
        return "tests"
    parts = module.split(".")
    if parts[0] == "mnemosync" and len(parts) > 1:
        return ".".join(parts[:2]) if ".".join(parts[:2]) in PRODUCT else COMMAND_LINE
    return parts[0]


def _module_files(root: Path) -> Iterator[tuple[str, Path]]:
    for name, folder in FOLDERS.items():
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                continue
            if name == "mnemosync" and rel.parts[0] in ("server", "agent", "shim"):
                continue
            if name == SHIM and rel.parts[0] == "claude_plugin":  # the plugin's files: its launcher's script is not
                continue                                          # a module, it starts the command
            parts = [p for p in rel.parts if p != "__init__"]
            yield ".".join([name, *parts]), path
    for top in ("ops", "tests"):
        base = root / top
        for path in sorted(base.rglob("*.py")):
            if any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(root).parts):
                continue
            rel = path.relative_to(root).with_suffix("")
            if top == "tests":  # not a package: its modules import each other by bare name
                yield f"tests:{rel.relative_to('tests').as_posix()}", path
                continue
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts), path


def _test_names(modules: dict[str, Path]) -> dict[str, str]:
    """Bare import name of each test-side module (tests/ and its folders are on sys.path under pytest)."""
    return {name.rsplit("/", 1)[-1]: name for name in modules if name.startswith("tests:")}


def _resolve(target: str, names: tuple[str, ...], modules: dict[str, Path], test_names: dict[str, str],
             importer: str) -> list[str]:
    """The modules an import statement reaches: `from pkg import mod` reaches the submodule when it is one."""
    if importer.startswith("tests:") and target.split(".")[0] in test_names and target not in modules:
        return [test_names[target.split(".")[0]]]
    found = []
    for name in names:
        if f"{target}.{name}" in modules:
            found.append(f"{target}.{name}")
    if len(found) == len(names) and names:
        return found
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return [*found, target] if target else found


def build(root: Path = ROOT) -> Graph:
    """The import graph of the checkout at `root`."""
    graph = Graph(dict(_module_files(root)))
    test_names = _test_names(graph.modules)
    for module, path in graph.modules.items():
        if package_of(module) == STUBS:
            continue  # generated stubs: they import only protobuf and grpc
        tree = ast.parse(path.read_text(), str(path))
        top_level = set(map(id, tree.body))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            lazy = id(node) not in top_level
            if isinstance(node, ast.Import):
                for alias in node.names:
                    for target in _resolve(alias.name, (), graph.modules, test_names, module):
                        graph.edges.add(Edge(module, target, lazy))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                names = tuple(a.name for a in node.names)
                for target in _resolve(base, names, graph.modules, test_names, module):
                    graph.edges.add(Edge(module, target, lazy))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                match = _LAZY_REFERENCE.match(node.value)
                if match and match.group(1) in graph.modules:
                    graph.edges.add(Edge(module, match.group(1), True))
        graph.edges = {e for e in graph.edges if e.target != e.source and e.target in graph.modules}
    return graph


def cycles(nodes: set[str], targets: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (each one an import cycle), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(targets.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in nodes:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(targets.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return sorted(found)


def package_edges(graph: Graph) -> dict[tuple[str, str], int]:
    """(importing package, imported package) to the number of module-to-module edges between them."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for source, target in {(e.source, e.target) for e in graph.edges}:
        a, b = package_of(source), package_of(target)
        if a != b:
            counts[(a, b)] += 1
    return dict(counts)


def report(graph: Graph) -> str:
    """The import graph's figures as text."""
    lines = []
    by_package: dict[str, int] = defaultdict(int)
    for module in graph.modules:
        by_package[package_of(module)] += 1
    lines.append("modules: " + ", ".join(f"{p} {n}" for p, n in sorted(by_package.items())))
    pairs = {(e.source, e.target) for e in graph.edges}
    lines.append(f"import edges: {len(pairs)} ({sum(1 for e in graph.edges if e.lazy)} of them lazy or in functions)")
    lines.append("edges between packages (importer -> imported: module edges):")
    for (a, b), n in sorted(package_edges(graph).items()):
        lines.append(f"  {a} -> {b}: {n}")
    for source, target in ((AGENT, SERVER), (SHIM, SERVER), (SERVER, AGENT), (SERVER, SHIM)):
        reached = sorted({t for s, t in pairs if package_of(s) == source and package_of(t) == target})
        count = sum(1 for s, t in pairs if package_of(s) == source and package_of(t) == target)
        lines.append(f"{source} -> {target}: {len(reached)} modules through {count} edges"
                     + (f" ({', '.join(reached)})" if reached else ""))
    package_targets: dict[str, set[str]] = defaultdict(set)
    for a, b in package_edges(graph):
        package_targets[a].add(b)
    product = {package_of(m) for m in graph.modules if package_of(m) in PRODUCT}
    package_cycles = cycles(product, package_targets)
    lines.append(f"package cycles (the namespace's packages): {len(package_cycles)}"
                 + "".join(f"\n  {{{', '.join(c)}}}" for c in package_cycles))
    module_cycles = cycles(set(graph.modules), graph.targets())
    lines.append(f"module cycles (whole tree, lazy imports included): {len(module_cycles)}"
                 + "".join(f"\n  {{{', '.join(c)}}}" for c in module_cycles))
    return "\n".join(lines)


# -- the write path ---------------------------------------------------------------------------


SERVER_SIDE, WRITER, READER = "server", "writer agent (MCP session)", "reader agent"
RELAY, DRIVER = "stdio relay (mnemosync-mcp)", "Claude Code (the trace's driver)"
"""The processes one write crosses in production: the relay Claude Code starts (`mnemosync.shim.relay`, standard
library only), the local agent that holds the writing session (`mnemosync agent`, or `mnemosync-mcp --in-process`),
the server, and another agent whose cache receives the write; and Claude Code, which runs none of the project."""

THREAD_SIDES = {
    "mnemosync-rpc-loop": SERVER_SIDE,  # grpc.aio's event loop: every handler of the service (`mnemosync.server.app`)
    "mnemosync-writer": SERVER_SIDE,  # the ledger's group-commit writer (`mnemosync.server.group_commit`)
    "mnemosync-listen": SERVER_SIDE,  # other servers' appends, notified (`mnemosync.server.postgres_record`)
    "mnemosync-snapshots": SERVER_SIDE,  # snapshot building (`mnemosync.server.snapshots`)
    "mnemosync-relay": RELAY,  # the relay's agent-to-stdout copy (`mnemosync.shim.relay`)
}
"""Threads whose name says their process. Any other thread runs in the process of the thread that started it: an
agent's threads (`mnemosync-live`, `mnemosync-sync-read`, `mnemosync-local-socket`, `mnemosync-session-N`) have
the same names in every agent, and grpc's own run in whichever process holds the channel or server. A thread of
no known starter (the main thread) is the writing agent's, as in `mnemosync-mcp --in-process`."""
THREAD_PREFIX_SIDES = {"store_": SERVER_SIDE}
"""Thread name prefixes: the service's executor for blocking ledger calls (`mnemosync.server.app`)."""
_THREAD_START = threading.Thread.start.__code__


def side_of(thread_name: str, started_by: str | None = None) -> str:
    """The process a thread of `thread_name`, started by a thread of process `started_by`, runs in."""
    side = THREAD_SIDES.get(thread_name) or next(
        (side for prefix, side in THREAD_PREFIX_SIDES.items() if thread_name.startswith(prefix)), None)
    return side or started_by or WRITER


class Recorder:
    """A profiler hook that notes, per process side, the first-party modules whose functions run; a thread is
    booked by its name, else to the side of the thread that started it (`side_of`)."""

    def __init__(self):
        self.recording = False
        self.seen: dict[str, dict[str, None]] = defaultdict(dict)
        self.sequence: dict[str, list[str]] = defaultdict(list)
        self.sides: dict[threading.Thread, str] = {}

    def book(self, thread: threading.Thread, side: str) -> None:
        """Books `thread` (and the threads it starts) to `side`, whatever its name: a process's first thread."""
        self.sides[thread] = side

    def side(self, thread: threading.Thread) -> str:
        """The process `thread` runs in."""
        side = self.sides.get(thread)
        return side if side is not None else side_of(thread.name)

    def __call__(self, frame, event, arg):
        if event != "call":
            return
        if frame.f_code is _THREAD_START:
            started = frame.f_locals.get("self")
            if isinstance(started, threading.Thread) and started not in self.sides:  # not one booked by hand
                self.sides[started] = side_of(started.name, self.side(threading.current_thread()))
            return
        if not self.recording:
            return
        module = frame.f_globals.get("__name__", "")
        if package_of(module) not in PRODUCT:
            return
        side = self.side(threading.current_thread())
        self.seen[side].setdefault(module, None)
        run = self.sequence[side]
        package = package_of(module)
        if not run or run[-1] != package:
            run.append(package)


def _model_path() -> Path:
    if os.environ.get("MNEMOSYNC_EMBED_MODEL"):
        return Path(os.environ["MNEMOSYNC_EMBED_MODEL"])
    home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "mnemosync"
    return home / "models" / "all-MiniLM-L6-v2.gguf"


def trace_write(workdir: Path, model: Path | None = None) -> Recorder:
    """Runs one add_memory as Claude Code sends it and returns what ran until another agent's cache has it.

    The JSON-RPC lines go into the stdio relay (`mnemosync.shim.relay.Relay`, as `mnemosync-mcp` runs it), which
    carries them over the local socket to the writing agent's session (`SessionHost`, `LocalService`, as
    `mnemosync agent` runs them), whose client sends the write to the server; a second agent receives it live.
    Each process's first thread is booked to it by hand and the threads it starts follow; this thread plays Claude
    Code (`DRIVER`), which runs nothing of the project. `model` is the embedding model (default: the default
    model's place).
    """
    import json
    import queue

    recorder = Recorder()
    recorder.book(threading.current_thread(), DRIVER)
    sys.setprofile(recorder)
    threading.setprofile(recorder)
    try:
        from mnemosync.agent.client import AgentClient
        from mnemosync.server.app import run_server
        from mnemosync.server.settings import ServerSettings
        from mnemosync.shim.agent_sessions import SessionHost
        from mnemosync.shim.config import load_settings
        from mnemosync.shim.local_service import LocalService
        from mnemosync.shim.relay import Relay

        def in_process(side: str, target, *args):
            """Runs `target` on a thread booked to `side` and returns its result (or raises its error)."""
            done: list = []

            def run() -> None:
                try:
                    done.append((target(*args), None))
                except BaseException as exc:  # noqa: BLE001 - raised again on the calling thread
                    done.append((None, exc))

            thread = threading.Thread(target=run, name=f"trace-{side}")
            recorder.book(thread, side)
            thread.start()
            thread.join()
            result, error = done[0]
            if error is not None:
                raise error
            return result

        settings = ServerSettings(data_dir=workdir / "server", listen="127.0.0.1:0", insecure=True,
                                  synchronous="normal")
        # a socket's path is at most 107 bytes: not under `workdir`, which may be long
        with run_server(settings) as running, tempfile.TemporaryDirectory(prefix="mnemosync-") as sockets:
            def connection(agent_id: str) -> dict:
                return {"server": running.address, "agent_id": agent_id, "insecure": True,
                        "cache_dir": str(workdir / agent_id), "embed_model": str(model or _model_path()),
                        "cert_dir": None, "tls_server_name": None, "config_file": None}

            def start_agent(agent_id: str) -> AgentClient:
                client = AgentClient(load_settings(environ={}, scope="user", timeout=10.0, **connection(agent_id)),
                                     live=True)
                client.start()
                return client

            def start_local_agent(path: Path) -> tuple[LocalService, SessionHost]:
                client = AgentClient(load_settings(environ={}, scope="user", timeout=10.0, **connection("writer")),
                                     live=True)
                host = SessionHost(client, connection=connection("writer"))
                service = LocalService(path)
                service.take_lock()
                service.start(lambda request: host.describe(), on_session=host.attach, attached=host.attached)
                host.boot()
                return service, host

            path = Path(sockets) / "agent.sock"
            service, host = in_process(WRITER, start_local_agent, path)
            reader = in_process(READER, start_agent, "reader")
            relay = Relay(path, {}, {"scope": "user", "tools": "compact"}, start_agent=False)
            up_read, up_write = os.pipe()
            down_read, down_write = os.pipe()
            relay_stdin, relay_stdout = open(up_read, "rb"), open(down_write, "wb")
            relay_thread = threading.Thread(target=relay.run, name="trace-relay", daemon=True,
                                            args=(relay_stdin, relay_stdout))
            recorder.book(relay_thread, RELAY)
            relay_thread.start()
            stdin, stdout = open(up_write, "wb", buffering=0), open(down_read, "rb")
            answers: queue.Queue = queue.Queue()
            lines = threading.Thread(target=lambda: [answers.put(json.loads(line)) for line in stdout],
                                     name="trace-stdout", daemon=True)
            recorder.book(lines, DRIVER)
            lines.start()

            def send(message: dict) -> dict | None:
                stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
                while "id" in message:
                    answer = answers.get(timeout=60)
                    if answer.get("id") == message["id"]:
                        if "error" in answer or answer["result"].get("isError"):
                            raise RuntimeError(f"{message['method']}: {answer.get('error') or answer['result']}")
                        return answer["result"]
                return None

            try:
                deadline = time.monotonic() + 30
                while not reader.live.connected.is_set() and time.monotonic() < deadline:
                    time.sleep(0.01)
                send({"id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "ops.imports", "version": "0"}}})
                send({"method": "notifications/initialized"})
                call = {"method": "tools/call", "params": {"name": "add_memory", "arguments": {
                    "content": "warm-up: the first call loads what it needs"}}}
                send({"id": 2, **call})
                recorder.recording = True
                call["params"]["arguments"] = {"content": "Deploys go through ops/deploy.sh, which runs migrations"
                                                          " first"}
                memory_id = send({"id": 3, **call})["structuredContent"]["id"]  # type: ignore[index]

                def received() -> bool:
                    deadline = time.monotonic() + 30
                    while reader.cache.get(memory_id) is None and time.monotonic() < deadline:
                        time.sleep(0.005)
                    return reader.cache.get(memory_id) is not None

                arrived = in_process(READER, received)  # the reader's own cache, read where it lives
                recorder.recording = False
                if not arrived:
                    raise RuntimeError("the reader's cache never received the write")
            finally:
                recorder.recording = False
                stdin.close()
                relay_thread.join(10)
                relay_stdin.close()
                relay_stdout.close()
                lines.join(10)
                stdout.close()
                service.stop()
                with host.lock:
                    host.client.close()
                reader.close()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return recorder


def write_path_report(recorder: Recorder) -> str:
    """The traced write as text: modules per process side, and the package changes along the way."""
    lines = []
    total: set[str] = set()
    for side in (RELAY, WRITER, SERVER_SIDE, READER):
        modules = list(recorder.seen.get(side, {}))
        total.update(modules)
        grouped: dict[str, list[str]] = defaultdict(list)
        for m in modules:
            grouped[package_of(m)].append(m)
        switches = max(0, len(recorder.sequence.get(side, ())) - 1)
        lines.append(f"{side}: {len(modules)} modules, {switches} package changes along its calls")
        for package, members in sorted(grouped.items()):
            lines.append(f"  {package} ({len(members)}): {', '.join(sorted(members))}")
    agent_sides = [m for side in (RELAY, WRITER, READER) for m in recorder.seen.get(side, {})]
    outside = sorted({m for m in agent_sides if package_of(m) == SERVER})
    traced = sum(1 for side in (RELAY, WRITER, SERVER_SIDE, READER) if recorder.seen.get(side))
    lines.append(f"distinct modules crossed: {len(total)} in {traced} processes")
    lines.append(f"server modules run in the agent processes: {len(outside)}"
                 + (f" ({', '.join(outside)})" if outside else ""))
    driven = sorted(recorder.seen.get(DRIVER, {}))
    lines.append(f"modules run by the trace's driver (Claude Code's part, none expected): {len(driven)}"
                 + (f" ({', '.join(driven)})" if driven else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Prints the figures (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="Checkout to read (default: this one).")
    parser.add_argument("--write-path", action="store_true", help="Also trace one write (needs the model).")
    args = parser.parse_args(argv)
    print(report(build(args.root.resolve())))
    if args.write_path:
        with tempfile.TemporaryDirectory(prefix="mnemosync-write-path-") as tmp:
            print()
            print("one add_memory from Claude Code through the relay and the local agent to another agent's cache:")
            print(write_path_report(trace_write(Path(tmp))))


if __name__ == "__main__":
    main()
