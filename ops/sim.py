"""Where one SQLite server saturates, where one PostgreSQL primary does, and how many servers and standbys a team
needs.

A day of 10 to 10,000 agents is simulated minute by minute from costs measured
on the real servers (`python -m ops.bench.bench_stores` writes them; --costs
names the file). Each agent works an 8-hour session starting around 09:00
(spread by --spread hours), writing --writes and searching --searches times an
hour at random minutes; it boots by catching up on every entry written since
its previous session ended (the morning storm), stays subscribed while it works
(every entry is delivered to every agent online), and --offline of the agents
drop out for 2 to 4 hours and catch up when they return.

What one minute costs, from the measured figures:

* SQLite, one server. Appends are serialised by its one writer thread: each
  costs 1 / (single-op appends/s with 8 agents). Searches (p50 latency each),
  entries streamed to agents catching up (1 / catch-up entries/s each, an upper
  bound: it includes the agent's own fold) and entries delivered to live
  streams (DELIVERY_S each, --delivery-us) share the server's cores.
* PostgreSQL. Appends from every server are serialised by the advisory lock
  on the primary: each costs 1 / (appends/s from 8 agents split over two
  servers). Every server folds every entry into its replica
  (1 / batched-append memories/s each) and serves its share of the searches and
  streams, so reads scale with servers; the primary's write path does not.
  Each server reads every entry from the database it folds from (1 / the
  fold-read entries/s, `bench_stores`): with every server reading the primary
  that grows with servers x writes. Hot standbys (`serve --read-store`) take
  those reads; the primary then ships its WAL to each standby, costed here as
  one reader per standby (an upper bound). The standbys needed are the fewest
  that keep each standby and the primary under --headroom.

Snapshots (issue 30, --snapshot-costs names a `bench_snapshots` report). An agent that missed more than
--snapshot-every entries downloads the newest snapshot instead of those entries (the server's cost: streaming
one replica file, measured at the report's size and scaled to --memories), then the entries written after it
(half the snapshot interval on average). The table is written twice, without snapshots (as before) and with.

A resource is saturated at utilisation 1; the recommendation keeps every
resource's peak minute under --headroom (0.7). Writes a table (sim.md), the
figures (sim.json) and a plot (sim.png) to --out.

    .venv/bin/python -m ops.sim
    .venv/bin/python -m ops.sim --costs /tmp/stores/stores.json --writes 40 --out /tmp/sim
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

DEFAULT_COSTS = Path(__file__).resolve().parent / "bench" / "results" / "stores" / "stores.json"
DEFAULT_SNAPSHOT_COSTS = Path(__file__).resolve().parent / "bench" / "results" / "snapshots" / "snapshots.json"
DEFAULT_OUT = Path(__file__).resolve().parent / "bench" / "results" / "sim"
AGENTS = (10, 30, 100, 300, 1000, 3000, 10_000)
MINUTES = 24 * 60
MAX_SERVERS = 64
DELIVERY_S = 80e-6
"""Server CPU to deliver one committed entry to one open Subscribe stream: about 80 µs in
`ops/bench/bench_streams.py` on this machine (`ops/bench/README.md`); the same on both stores."""


@dataclass(frozen=True)
class Costs:
    """Seconds of one resource per operation, measured (see the module docstring)."""

    sqlite_append_s: float
    sqlite_search_s: float
    sqlite_entry_s: float
    pg_append_s: float
    pg_search_s: float
    pg_entry_s: float
    pg_fold_s: float
    pg_read_s: float
    delivery_s: float
    cores: int
    snapshot_s: float = 0.0
    """Server seconds to serve one snapshot of the team's store (0: no snapshots)."""

    @classmethod
    def from_report(cls, report: dict, delivery_s: float = DELIVERY_S) -> Costs:
        """The costs in a `bench_stores` report, and the cost of delivering one entry to one live stream."""
        stores = {s["store"]: s for s in report["stores"]}
        sqlite, pg = stores["sqlite"], stores["postgresql"]
        return cls(
            sqlite_append_s=1 / sqlite["append_single"]["8"]["rate"],
            sqlite_search_s=sqlite["search"]["p50_ms"] / 1000,
            sqlite_entry_s=1 / sqlite["catchup"]["entries_per_s"],
            pg_append_s=1 / pg["two_servers"]["append_single_8_split"]["rate"],
            pg_search_s=pg["search"]["p50_ms"] / 1000,
            pg_entry_s=1 / pg["catchup"]["entries_per_s"],
            pg_fold_s=1 / pg["append_batched"]["memories_per_s"],
            pg_read_s=1 / pg["fold_read"]["entries_per_s"],
            delivery_s=delivery_s,
            cores=int(report.get("host_cpus") or 2),
        )


def snapshot_cost(report: dict, memories: int) -> float:
    """Server seconds to serve one snapshot of `memories` memories, from a `bench_snapshots` report: the measured
    stream of the whole replica file (or, in a report without it, the whole snapshot catch-up of a new cache, an
    upper bound that includes the agent's side), scaled linearly from the report's size."""
    cache = report["new_cache"]
    measured = report.get("snapshot_serve", {}).get("seconds") or cache["snapshot_catch_up_s"]
    return measured * memories / report["size"]


@dataclass(frozen=True)
class Team:
    """How the agents work (see the module docstring)."""

    writes_per_hour: float = 20.0
    searches_per_hour: float = 60.0
    session_hours: float = 8.0
    spread_hours: float = 1.5
    offline_share: float = 0.1
    seed: int = 18
    memories: int = 100_000
    """The store's size, which a snapshot's cost follows."""
    snapshot_every: int = 0
    """Entries between the server's snapshots (0: none, every agent replays what it missed)."""


@dataclass
class Day:
    """Per-minute operation counts of one simulated day."""

    writes: np.ndarray
    searches: np.ndarray
    live: np.ndarray
    """Entries delivered to live Subscribe streams."""
    caught_up: np.ndarray
    """Entries streamed by Sync to agents catching up."""
    snapshots: np.ndarray
    """Snapshots streamed to agents that missed more than a snapshot interval."""


def simulate(agents: int, team: Team) -> Day:
    """One day (the second of two, so the morning catch-up covers yesterday's work) for `agents` agents."""
    rng = np.random.default_rng(team.seed + agents)
    span = 2 * MINUTES
    online = np.zeros(span, dtype=np.int64)
    writes = np.zeros(span, dtype=np.int64)
    searches = np.zeros(span, dtype=np.int64)
    returns: list[tuple[int, int]] = []  # (minute, minute the agent last saw the changelog)
    session = int(team.session_hours * 60)
    for day in range(2):
        starts = np.clip(rng.normal(9 * 60, team.spread_hours * 60, agents), 0, MINUTES - session).astype(int)
        starts += day * MINUTES
        away = rng.random(agents) < team.offline_share
        for agent, start in enumerate(starts):
            end = start + session
            gap = (0, 0)
            if away[agent]:
                left = int(start + rng.integers(60, session - 300))
                gap = (left, left + int(rng.integers(120, 241)))
            minutes = np.arange(start, end)
            present = minutes[(minutes < gap[0]) | (minutes >= gap[1])]
            online[present] += 1
            n_w = rng.poisson(team.writes_per_hour * len(present) / 60)
            n_s = rng.poisson(team.searches_per_hour * len(present) / 60)
            np.add.at(writes, rng.choice(present, n_w), 1)
            np.add.at(searches, rng.choice(present, n_s), 1)
            returns.append((start, start - (MINUTES - session) if day else 0))
            if gap[1]:
                returns.append((gap[1], gap[0]))
    total = np.concatenate([[0], np.cumsum(writes)])
    live = writes * np.maximum(online - 1, 0)  # every entry goes to every other agent online
    caught_up = np.zeros(span, dtype=np.int64)
    snapshots = np.zeros(span, dtype=np.int64)
    for at, since in returns:
        missed = total[at] - total[max(since, 0)]
        if team.snapshot_every and missed > team.snapshot_every:
            snapshots[at] += 1
            caught_up[at] += team.snapshot_every // 2  # the entries after the newest snapshot, on average
        else:
            caught_up[at] += missed
    day = slice(MINUTES, span)
    return Day(writes[day], searches[day], live[day], caught_up[day], snapshots[day])


@dataclass
class Verdict:
    """Peak-minute utilisations of one team size on both stores, and the servers PostgreSQL needs."""

    agents: int
    peak_writes_per_s: float
    peak_searches_per_s: float
    sqlite_writer: float
    sqlite_readers: float
    pg_primary: float
    pg_servers: int | None
    pg_server_load: float | None
    pg_primary_reads: float | None
    """The primary's cores busy with the needed servers' folds when all of them read it."""
    pg_standbys: int | None
    """Hot standbys needed to keep the primary's and each standby's reads under the headroom (0: none needed)."""


def judge(agents: int, day: Day, costs: Costs, headroom: float) -> Verdict:
    """Utilisations of the busiest minute, and the fewest PostgreSQL servers that keep each under `headroom`."""
    reads_sqlite = (day.searches * costs.sqlite_search_s + day.caught_up * costs.sqlite_entry_s
                    + day.live * costs.delivery_s + day.snapshots * costs.snapshot_s) / 60 / costs.cores
    servers, load = None, None
    served = (day.searches * costs.pg_search_s + day.caught_up * costs.pg_entry_s + day.live * costs.delivery_s
              + day.snapshots * costs.snapshot_s)
    for k in range(1, MAX_SERVERS + 1):
        per_server = (served / k + day.writes * costs.pg_fold_s) / 60 / costs.cores
        if per_server.max() <= headroom:
            servers, load = k, float(per_server.max())
            break
    reads, standbys = None, None
    if servers is not None:
        def read_load(readers: int):
            return float((day.writes * readers * costs.pg_read_s).max() / 60 / costs.cores)

        reads = read_load(servers)
        standbys = 0 if reads <= headroom else next(
            (s for s in range(1, servers + 1) if read_load(math.ceil(servers / s)) <= headroom
             and read_load(s) <= headroom), None)
    return Verdict(
        agents=agents, peak_writes_per_s=float(day.writes.max() / 60),
        peak_searches_per_s=float(day.searches.max() / 60),
        sqlite_writer=float((day.writes * costs.sqlite_append_s / 60).max()), sqlite_readers=float(reads_sqlite.max()),
        pg_primary=float((day.writes * costs.pg_append_s / 60).max()), pg_servers=servers, pg_server_load=load,
        pg_primary_reads=reads, pg_standbys=standbys)


def crossing(verdicts: list[Verdict], value, limit: float) -> int | None:
    """The team size where `value(verdict)` reaches `limit`, interpolated on a log scale (None: not within)."""
    for a, b in zip(verdicts, verdicts[1:], strict=False):
        va, vb = value(a), value(b)
        if va < limit <= vb:
            t = (math.log(limit) - math.log(max(va, 1e-9))) / (math.log(vb) - math.log(max(va, 1e-9)))
            return round(math.exp(math.log(a.agents) + t * (math.log(b.agents) - math.log(a.agents))))
    return verdicts[0].agents if verdicts and value(verdicts[0]) >= limit else None


def table(verdicts: list[Verdict], costs: Costs, team: Team, headroom: float, marks: dict) -> str:
    """The report as Markdown."""
    snapshots = (f"snapshots every {team.snapshot_every:,} entries of a {team.memories:,}-memory store "
                 f"({costs.snapshot_s:.2f} s of server time each)" if team.snapshot_every else "no snapshots")
    lines = [f"Simulated day, {team.writes_per_hour:g} writes and {team.searches_per_hour:g} searches per agent-hour, "
             f"{team.session_hours:g} h sessions around 09:00 (±{team.spread_hours:g} h), {team.offline_share:.0%} "
             f"offline 2-4 h, {snapshots}; costs measured on this machine ({costs.cores} cores):", "",
             "| agents | peak writes/s | peak searches/s | SQLite writer | SQLite readers | PostgreSQL primary "
             "| PostgreSQL servers (load each) | primary reads (every server on it) | standbys |",
             "|---|---|---|---|---|---|---|---|---|"]
    for v in verdicts:
        servers = f"{v.pg_servers} ({v.pg_server_load:.0%})" if v.pg_servers else f"more than {MAX_SERVERS}"
        reads = "-" if v.pg_primary_reads is None else f"{v.pg_primary_reads:.0%}"
        standbys = "-" if v.pg_servers is None else "too many" if v.pg_standbys is None else str(v.pg_standbys)
        lines.append(f"| {v.agents:,} | {v.peak_writes_per_s:.1f} | {v.peak_searches_per_s:.1f} | "
                     f"{v.sqlite_writer:.0%} | {v.sqlite_readers:.0%} | {v.pg_primary:.0%} | {servers} | {reads} | "
                     f"{standbys} |")
    lines += ["", "Utilisation of the busiest minute (100% = saturated). PostgreSQL primary: its append lock; primary "
              "reads: its cores busy serving the needed servers' folds if they all read it; standbys: hot standbys "
              "that keep those reads under the headroom. Where it crosses:"]
    for name, at in marks.items():
        lines.append(f"* {name}: {'beyond the sizes simulated' if at is None else f'about {at:,} agents'}")
    lines += ["", "Costs fed in (seconds per operation): "
              + ", ".join(f"{k} {v:.5f}" for k, v in asdict(costs).items() if k != "cores")]
    return "\n".join(lines) + "\n"


def plot(verdicts: list[Verdict], headroom: float, path: Path) -> None:
    """Peak utilisations and PostgreSQL servers needed against team size (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [v.agents for v in verdicts]
    fig, left = plt.subplots(figsize=(8, 4.5))
    left.plot(x, [v.sqlite_writer for v in verdicts], "o-", label="SQLite writer")
    left.plot(x, [v.sqlite_readers for v in verdicts], "s-", label="SQLite readers (all cores)")
    left.plot(x, [v.pg_primary for v in verdicts], "^-", label="PostgreSQL primary (append lock)")
    left.axhline(1.0, color="red", lw=0.8)
    left.axhline(headroom, color="grey", lw=0.8, ls="--")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("agents")
    left.set_ylabel("peak-minute utilisation")
    right = left.twinx()
    right.plot(x, [v.pg_servers or MAX_SERVERS for v in verdicts], "k.--", lw=1,
               label=f"PostgreSQL servers needed (at {headroom:.0%})")
    right.set_ylabel("servers")
    lines = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    labels = left.get_legend_handles_labels()[1] + right.get_legend_handles_labels()[1]
    left.legend(lines, labels, loc="upper left", fontsize=8)
    left.set_title("Where each set-up saturates (simulated day, measured costs)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(costs: Costs, team: Team, *, agents=AGENTS, headroom: float = 0.7) -> tuple[list[Verdict], dict]:
    """Simulates each team size; returns the verdicts and where each resource crosses saturation and headroom."""
    verdicts = [judge(n, simulate(n, team), costs, headroom) for n in agents]
    marks = {
        f"SQLite server at {headroom:.0%} (time to move)": crossing(
            verdicts, lambda v: max(v.sqlite_writer, v.sqlite_readers), headroom),
        "SQLite server saturated": crossing(verdicts, lambda v: max(v.sqlite_writer, v.sqlite_readers), 1.0),
        f"PostgreSQL primary at {headroom:.0%}": crossing(verdicts, lambda v: v.pg_primary, headroom),
        "PostgreSQL primary saturated": crossing(verdicts, lambda v: v.pg_primary, 1.0),
    }
    return verdicts, marks


def main(argv: list[str] | None = None) -> int:
    doc = (__doc__ or "").splitlines()
    parser = argparse.ArgumentParser(prog="python -m ops.sim", description=doc[0], epilog="\n".join(doc[1:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--costs", type=Path, default=DEFAULT_COSTS, help="a bench_stores report [%(default)s]")
    parser.add_argument("--writes", type=float, default=Team.writes_per_hour, help="writes per agent-hour [20]")
    parser.add_argument("--searches", type=float, default=Team.searches_per_hour, help="searches per agent-hour [60]")
    parser.add_argument("--spread", type=float, default=Team.spread_hours, help="spread of session starts, h [1.5]")
    parser.add_argument("--offline", type=float, default=Team.offline_share, help="share offline 2-4 h [0.1]")
    parser.add_argument("--delivery-us", type=float, default=DELIVERY_S * 1e6,
                        help="server CPU per entry delivered to one live stream, µs [80, bench_streams]")
    parser.add_argument("--headroom", type=float, default=0.7, help="peak utilisation to plan for [0.7]")
    parser.add_argument("--snapshot-costs", type=Path, default=DEFAULT_SNAPSHOT_COSTS,
                        help="a bench_snapshots report [%(default)s]")
    parser.add_argument("--snapshot-every", type=int, default=10_000, help="entries between snapshots [10000]")
    parser.add_argument("--memories", type=int, default=100_000, help="memories in the store [100000]")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where sim.md/.json/.png go [%(default)s]")
    args = parser.parse_args(argv)
    if not args.costs.exists():
        print(f"no measured costs at {args.costs}: run `.venv/bin/python -m ops.bench.bench_stores --out "
              f"{args.costs.parent}` first (or give --costs)", file=sys.stderr)
        return 2
    costs = Costs.from_report(json.loads(args.costs.read_text()), args.delivery_us / 1e6)
    team = Team(writes_per_hour=args.writes, searches_per_hour=args.searches, spread_hours=args.spread,
                offline_share=args.offline, memories=args.memories)
    verdicts, marks = run(costs, team, headroom=args.headroom)
    args.out.mkdir(parents=True, exist_ok=True)
    report = table(verdicts, costs, team, args.headroom, marks)
    doc = {"costs": asdict(costs), "team": asdict(team), "marks": marks, "verdicts": [asdict(v) for v in verdicts]}
    if args.snapshot_costs.exists():
        snapshot_costs = replace(costs, snapshot_s=snapshot_cost(json.loads(args.snapshot_costs.read_text()),
                                                                 args.memories))
        snapshot_team = replace(team, snapshot_every=args.snapshot_every)
        with_snapshots, snapshot_marks = run(snapshot_costs, snapshot_team, headroom=args.headroom)
        report = ("## Without snapshots (every agent replays what it missed)\n\n" + report
                  + "\n## With snapshots\n\n"
                  + table(with_snapshots, snapshot_costs, snapshot_team, args.headroom, snapshot_marks))
        doc["with_snapshots"] = {"costs": asdict(snapshot_costs), "team": asdict(snapshot_team),
                                 "marks": snapshot_marks, "verdicts": [asdict(v) for v in with_snapshots]}
    else:
        print(f"no snapshot costs at {args.snapshot_costs}: the table is without snapshots only", file=sys.stderr)
    (args.out / "sim.md").write_text(report)
    (args.out / "sim.json").write_text(json.dumps(doc, indent=2))
    plot(verdicts, args.headroom, args.out / "sim.png")
    print(report)
    print(f"wrote {args.out / 'sim.md'}, sim.json and sim.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
