#!/usr/bin/env python3
"""Measure the SessionStart hook (issue 41): from process start to exit, as Claude Code runs it.

A real server holds --memories memories of one project; a warm `mnemosync agent` serves this agent's local
socket, its cache live. Then, alternating in each of --rounds rounds (so a busy machine slows them alike):

* bare: `python -c pass` of the same interpreter, the least any hook can cost (the same-run baseline);
* hook: `mnemosync hook session-start` with the documented JSON on stdin (the warm agent writes the block);
* full way: the same with `--timeout 8` (an option sends it through the command table, which opens the cache,
  the settings and the server in the hook's own process, as every session start did before issue 41).

Then the server is stopped, and once the agent's live stream has noticed, the hook and the full way are timed
again: neither waits for a live cache the agent cannot get (before issue 41 both waited 3 s).

Example:
    python -m ops.bench.bench_session_start [--memories 200] [--rounds 15] [--json session_start.json]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from mnemosync.agent import local_socket  # noqa: E402
from ops import local_agents  # noqa: E402
from ops.bench.environment import script_model, script_parser  # noqa: E402
from ops.bench.serverproc import ServerProcess  # noqa: E402

HOOK_INPUT = json.dumps({"session_id": "bench", "transcript_path": "/dev/null", "cwd": "/home/bench/web",
                         "hook_event_name": "SessionStart", "source": "startup"})


def _seconds(command: list[str], env: dict[str, str], stdin: str = "") -> float:
    started = time.perf_counter()
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, env=env, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or (stdin and "# Shared memory (mnemosync)" not in done.stdout):
        raise RuntimeError(f"{command[-3:]} failed ({done.returncode}): {done.stdout[-300:]} {done.stderr[-300:]}")
    return elapsed


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 1)


def measure(env: dict[str, str], rounds: int) -> dict[str, float]:
    """Median milliseconds of the bare interpreter, the hook and the full way, taking turns each round."""
    hook = [str(Path(sys.executable).parent / "mnemosync"), "hook", "session-start"]
    runs = {"bare": ([sys.executable, "-c", "pass"], ""), "hook": (hook, HOOK_INPUT),
            "full_way": ([*hook, "--timeout", "8"], HOOK_INPUT)}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, (command, stdin) in runs.items():
            times[name].append(_seconds(command, env, stdin))
    return {f"{name}_ms": _median_ms(samples) for name, samples in times.items()}


def _agent_is(path: Path, live: bool, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while bool((local_socket.status_at(path) or {}).get("live")) != live:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the warm agent's cache never became {'live' if live else 'not live'}")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--memories", type=int, default=200, help="memories in the project's scope")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    model = script_model(args)
    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.client_settings import ClientSettings

    with tempfile.TemporaryDirectory(prefix="bench-session-start-") as tmp, local_agents.private_runtime() as runtime:
        work = Path(tmp)
        server = ServerProcess(work / "server", synchronous="normal", embed_model=model).start()
        try:
            settings = ClientSettings(server=server.address, agent_id="bench-writer", insecure=True,
                                      scope="project:web", cache_dir=work / "writer", embed_model=model, timeout=30.0)
            with AgentClient(settings, live=False) as writer:
                for i in range(args.memories):
                    writer.add(f"Decision {i}: service {i % 17} deploys from branch release-{i % 5} after review",
                               type="decision" if i % 3 == 0 else "fact", importance=0.3 + (i % 7) / 10)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMOSYNC_", "CLAUDE_"))}
            env.update({"MNEMOSYNC_SERVER": server.address, "MNEMOSYNC_AGENT_ID": "bench-reader",
                        "MNEMOSYNC_INSECURE": "1", "MNEMOSYNC_CACHE_DIR": str(work / "reader"),
                        "MNEMOSYNC_EMBED_MODEL": str(model), "MNEMOSYNC_TIMEOUT": "3", "XDG_RUNTIME_DIR": str(runtime),
                        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)})
            path = local_socket.socket_path(env, create=True)
            _seconds([str(Path(sys.executable).parent / "mnemosync"), "hook", "session-start"], env, HOOK_INPUT)
            _agent_is(path, live=True)
            results = {"memories": args.memories, "rounds": args.rounds, "warm": measure(env, args.rounds)}
        finally:
            server.stop()
        _agent_is(path, live=False)  # the live stream noticed: the agent knows the server is unreachable
        results["server_down"] = measure(env, args.rounds)
    load = os.getloadavg()
    results["load_average"] = [round(x, 2) for x in load]
    for case in ("warm", "server_down"):
        r = results[case]
        print(f"session start, {case.replace('_', ' ')} ({args.memories} memories, median of {args.rounds}): hook "
              f"{r['hook_ms']:.0f} ms, full way {r['full_way_ms']:.0f} ms, bare python {r['bare_ms']:.0f} ms")
    print(f"load average {load[0]:.2f} on {os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
