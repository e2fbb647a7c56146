"""`ops.sim`: a simulated day driven by measured per-operation costs."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from ops import sim

REPORT = {  # the shape `python -m ops.bench.bench_stores` writes, with round figures
    "host_cpus": 2,
    "stores": [
        {"store": "sqlite", "append_single": {"8": {"rate": 300.0}}, "search": {"p50_ms": 10.0},
         "catchup": {"entries_per_s": 2000.0}, "append_batched": {"memories_per_s": 400.0}},
        {"store": "postgresql", "append_single": {"8": {"rate": 150.0}}, "search": {"p50_ms": 12.0},
         "catchup": {"entries_per_s": 1500.0}, "append_batched": {"memories_per_s": 300.0},
         "two_servers": {"append_single_8_split": {"rate": 120.0}}, "fold_read": {"entries_per_s": 5000.0}},
    ],
}


def test_load_grows_with_the_team_and_postgresql_adds_servers_where_one_sqlite_server_saturates():
    verdicts, marks = sim.run(sim.Costs.from_report(REPORT), sim.Team(), agents=(10, 100, 1000))
    readers = [v.sqlite_readers for v in verdicts]
    assert readers == sorted(readers) and readers[0] < 0.7 < readers[-1]
    assert [v.pg_servers for v in verdicts] == sorted(v.pg_servers for v in verdicts)
    assert verdicts[0].pg_servers == 1 < verdicts[-1].pg_servers
    assert 100 < marks["SQLite server saturated"] < 1000


def test_standbys_are_needed_only_once_the_servers_folds_would_load_the_primary_past_the_headroom():
    slow_reads = json.loads(json.dumps(REPORT))
    slow_reads["stores"][1]["fold_read"]["entries_per_s"] = 100.0
    costs = sim.Costs.from_report(slow_reads)
    verdicts, _ = sim.run(costs, sim.Team(), agents=(10, 3000))
    small, large = verdicts
    assert small.pg_primary_reads < 0.7 and small.pg_standbys == 0
    assert large.pg_primary_reads > 0.7 and 1 <= large.pg_standbys < large.pg_servers
    day = sim.simulate(3000, sim.Team())
    per_standby = math.ceil(large.pg_servers / large.pg_standbys)
    assert (day.writes * per_standby * costs.pg_read_s).max() / 60 / costs.cores <= 0.7


def test_the_morning_boot_catches_up_on_yesterdays_work():
    day = sim.simulate(50, sim.Team(offline_share=0.0))
    busiest = int(day.caught_up.argmax())
    assert 6 * 60 <= busiest <= 12 * 60  # the catch-up storm comes with the sessions' starts
    assert day.caught_up.max() > 50 * day.writes.max()


def test_the_command_writes_a_table_the_figures_and_a_plot(tmp_path):
    costs = tmp_path / "stores.json"
    costs.write_text(json.dumps(REPORT))
    assert sim.main(["--costs", str(costs), "--snapshot-costs", str(tmp_path / "none.json"), "--out",
                     str(tmp_path / "out")]) == 0
    table = (tmp_path / "out" / "sim.md").read_text()
    assert all(f"| {n:,} |" in table for n in sim.AGENTS)
    assert (tmp_path / "out" / "sim.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "out" / "sim.json").read_text())["costs"]["cores"] == 2


def test_without_measured_costs_it_says_what_to_run(tmp_path, capsys):
    assert sim.main(["--costs", str(tmp_path / "missing.json"), "--out", str(tmp_path)]) == 2
    assert "python -m ops.bench.bench_stores" in capsys.readouterr().err


SNAPSHOTS = {"size": 50_000, "new_cache": {"snapshot_catch_up_s": 2.0}, "snapshot_serve": {"seconds": 0.5}}
"""The shape `python -m ops.bench.bench_snapshots` writes, with round figures."""


def test_with_snapshots_an_agent_far_behind_costs_one_snapshot_instead_of_every_entry_it_missed():
    team = sim.Team(snapshot_every=1000)
    plain, with_snapshots = sim.simulate(1000, sim.Team()), sim.simulate(1000, team)
    assert with_snapshots.snapshots.sum() > 0 and with_snapshots.caught_up.sum() < plain.caught_up.sum() / 10
    assert sim.snapshot_cost(SNAPSHOTS, 100_000) == 1.0  # the served file, scaled to the store's size
    costs = sim.Costs.from_report(REPORT)
    before, _ = sim.run(costs, sim.Team(), agents=(1000,))
    after, _ = sim.run(replace(costs, snapshot_s=1.0), team, agents=(1000,))
    assert after[0].sqlite_readers < before[0].sqlite_readers
    assert after[0].pg_servers is not None
    assert before[0].pg_servers is None or after[0].pg_servers < before[0].pg_servers


def test_the_command_writes_the_table_without_and_with_snapshots(tmp_path):
    costs, snapshot_costs = tmp_path / "stores.json", tmp_path / "snapshots.json"
    costs.write_text(json.dumps(REPORT))
    snapshot_costs.write_text(json.dumps(SNAPSHOTS))
    assert sim.main(["--costs", str(costs), "--snapshot-costs", str(snapshot_costs), "--out",
                     str(tmp_path / "out")]) == 0
    table = (tmp_path / "out" / "sim.md").read_text()
    assert "## Without snapshots" in table and "## With snapshots" in table
    assert "snapshots every 10,000 entries of a 100,000-memory store (1.00 s of server time each)" in table
    figures = json.loads((tmp_path / "out" / "sim.json").read_text())
    assert figures["with_snapshots"]["team"]["snapshot_every"] == 10_000
