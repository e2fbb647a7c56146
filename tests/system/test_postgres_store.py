"""The PostgreSQL store (`mnemosync.server.postgres_record`): several servers over one database, its guards, its checks.

What both stores share is proven by the conformance modules (`CONFORMANCE = True`, see conftest); this file holds
what only several servers over one PostgreSQL can show.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace

import psycopg
import pytest

from mnemosync.kernel import db
from mnemosync.kernel.errors import FailedPrecondition, InvalidArgument, SettingsError
from mnemosync.server import postgres_record
from mnemosync.server.app import open_store, run_server
from mnemosync.server.ledger import Ledger
from mnemosync.server.operator_cli import _pin_model_for_new_store
from mnemosync.server.postgres_record import APPEND_LOCK, replica_path
from mnemosync.v1 import memory_pb2 as pb
from ops.hot_standby import HotStandby

from helpers import (
    KeepAdding,
    RawAgent,
    ServeProcess,
    add_op,
    dev_settings,
    mnemosync,
    postgres_database,
    served_agents,
    snapshot,
    update_op,
    wait_until,
)


@pytest.fixture
def two_settings(tmp_path, postgres_url):
    """Settings of two servers (own data directories) over one fresh PostgreSQL database."""
    return (replace(dev_settings(tmp_path, name="one"), store=postgres_url),
            replace(dev_settings(tmp_path, name="two"), store=postgres_url))


@pytest.fixture
def hot_standby(postgres_server) -> Iterator[HotStandby]:
    """A running hot standby of the session's PostgreSQL, replaying every database on it."""
    standby = HotStandby(postgres_server)
    try:
        yield standby.start()
    finally:
        standby.remove()


@pytest.fixture
def primary_and_standby_settings(two_settings, hot_standby):
    """Server one reads the primary; server two folds its replica from the hot standby (`read_store`)."""
    one, two = two_settings
    assert hot_standby.sql("SELECT pg_is_in_recovery()") == (True,)
    return one, replace(two, read_store=hot_standby.url(two.store))


def _each_sees_the_others_first_write(one, two, make_client):
    """Live agents a on server `one` and b on `two`, each having received the other's first write; returns them and
    the two writes."""
    a = make_client(one.address, "agent-a", live=True)
    b = make_client(two.address, "agent-b", live=True)
    wait_until(lambda: a.live.connected.is_set() and b.live.connected.is_set(), message="live never connected")
    from_a = a.add("The auth service signs JWTs with RS256", tags=["auth"])
    wait_until(lambda: b.cache.get(from_a.memory_id), message="server two never delivered server one's write")
    from_b = b.add("Staging runs in the eu-west-1 cluster")
    wait_until(lambda: a.cache.get(from_b.memory_id), message="server one never delivered server two's write")
    return a, b, from_a, from_b


def _read_store(agent: RawAgent) -> pb.ReadStoreStatus:
    return agent.call("Stats", pb.StatsRequest()).read_store


def test_an_agent_on_a_server_reading_a_hot_standby_converges_with_one_on_the_primary(
        primary_and_standby_settings, hot_standby, make_client):
    settings_one, settings_two = primary_and_standby_settings
    with run_server(settings_one) as one, run_server(settings_two) as two:
        a, b, from_a, from_b = _each_sees_the_others_first_write(one, two, make_client)
        hot_standby.sql("SELECT pg_wal_replay_pause()")
        b.update(from_a.memory_id, content="The auth service signs JWTs with ES256")
        reader = RawAgent(two.address, "reader")
        assert "ES256" in reader.get(from_a.memory_id).content  # its own write, though the standby is paused
        from_a_again = a.add("Deploys freeze on Fridays")
        wait_until(lambda: _read_store(reader).lag_entries == 2, message="the paused standby never lagged")
        assert reader.sync(0)[-1].seq == 3 and two.store.head_seq() == 3
        hot_standby.sql("SELECT pg_wal_replay_resume()")
        wait_until(lambda: b.cache.get(from_a_again.memory_id), message="the resumed standby never delivered")
        wait_until(lambda: "ES256" in a.cache.get(from_a.memory_id).content, message="the update never arrived")
        wait_until(lambda: one.store.head_seq() == two.store.head_seq() == 4, message="the replicas never met")
        assert snapshot(one.store) == snapshot(two.store)
        assert a.cache.snapshot() == b.cache.snapshot()
        assert a.search("which cluster does staging use?", limit=1).hits[0].memory.id == from_b.memory_id
        assert b.search("which cluster does staging use?", limit=1).hits[0].memory.id == from_b.memory_id
        reader.close()


def test_stats_report_the_standby_lag_which_grows_while_replay_is_paused_and_recovers_after(
        primary_and_standby_settings, hot_standby, tmp_path):
    settings_one, settings_two = primary_and_standby_settings
    (policy := tmp_path / "policy.toml").write_text(ADMIN)
    with served_agents(settings_one) as on_one, served_agents(replace(settings_two, policy_file=policy)) as on_two:
        writer, observer = on_one("writer"), on_two("observer")
        writer.add("before the pause")
        caught_up = wait_until(lambda: (s := _read_store(observer)).replayed_seq == 1 and s,
                               message="the standby never replayed the first write")
        assert (caught_up.reachable, caught_up.error, caught_up.primary_seq, caught_up.lag_entries,
                caught_up.lag_ms) == (True, "", 1, 0, 0)
        assert caught_up.source == ""  # where the standby is is the operator's business
        source = _read_store(on_two("root")).source
        assert source.endswith(f"port={HotStandby.PORT}") and "postgres:@" not in source
        wait_until(lambda: observer.call("Stats", pb.StatsRequest()).head_seq == 1, message="never folded")
        hot_standby.sql("SELECT pg_wal_replay_pause()")
        for i in range(5):
            writer.add(f"while paused {i}")
        paused = _read_store(observer)
        assert (paused.replayed_seq, paused.primary_seq, paused.lag_entries) == (1, 6, 5)
        later = wait_until(lambda: (s := _read_store(observer)).lag_ms > paused.lag_ms and s,
                           message="the lag in time never grew while replay was paused")
        assert later.lag_entries == 5 and later.lag_ms > 0
        assert observer.call("Stats", pb.StatsRequest()).head_seq == 1
        hot_standby.sql("SELECT pg_wal_replay_resume()")
        recovered = wait_until(lambda: (s := _read_store(observer)).lag_entries == 0 and s,
                               message="the standby never caught up after the resume")
        assert (recovered.replayed_seq, recovered.primary_seq, recovered.lag_ms) == (6, 6, 0)
        wait_until(lambda: observer.call("Stats", pb.StatsRequest()).head_seq == 6,
                   message="the server never folded what the standby replayed")
        assert writer.call("Stats", pb.StatsRequest()).HasField("read_store") is False


def test_a_server_whose_standby_stops_keeps_serving_from_its_replica_and_says_so(
        primary_and_standby_settings, hot_standby):
    settings_one, settings_two = primary_and_standby_settings
    with served_agents(settings_one) as on_one, served_agents(settings_two) as on_two:
        writer, reader = on_one("writer"), on_two("reader")
        kept = writer.add("Backups run nightly at 02:00 UTC")
        wait_until(lambda: reader.call("Stats", pb.StatsRequest()).head_seq == 1, message="never folded")
        hot_standby.stop()
        down = wait_until(lambda: (s := _read_store(reader)).reachable is False and s,
                          message="Stats never said the standby stopped answering")
        assert "does not answer" in down.error and down.replayed_seq == 1
        assert reader.get(kept.memory_id).content == "Backups run nightly at 02:00 UTC"
        assert [h.memory.id for h in reader.search("when do backups run?")] == [kept.memory_id]
        own = reader.add("written while the standby is down")
        assert [e.seq for e in reader.sync(0)] == [1, 2] and reader.get(own.memory_id).id == own.memory_id
        unseen = writer.add("written on the primary while the standby is down")
        assert writer.get(own.memory_id).id == own.memory_id
        assert reader.call("Stats", pb.StatsRequest()).head_seq == 2
        hot_standby.start()
        wait_until(lambda: _read_store(reader).reachable, message="the standby never answered again")
        wait_until(lambda: reader.call("Stats", pb.StatsRequest()).head_seq == 3,
                   message="the server never folded from the restarted standby")
        assert reader.get(unseen.memory_id).id == unseen.memory_id


def test_a_new_server_folds_the_changelog_from_the_standby_without_holding_up_appends(
        primary_and_standby_settings, hot_standby, tmp_path, monkeypatch):
    settings_one, settings_two = primary_and_standby_settings
    monkeypatch.setattr(postgres_record, "CATCH_UP_PAGE", 4)  # the fold runs in groups of 4 entries
    monkeypatch.setattr(postgres_record, "FOLD_GROUP_ENTRIES", 4)
    with served_agents(settings_one) as on_one:
        writer = on_one("writer")
        for i in range(30):
            writer.add(f"note {i}")
        with psycopg.connect(settings_two.read_store, autocommit=True) as standby:
            wait_until(lambda: standby.execute("SELECT max(seq) FROM changelog").fetchone()[0] == 30,
                       message="the standby never replayed the 30 entries")
        hot_standby.sql("SELECT pg_wal_replay_pause()")
        for i in range(10):
            writer.add(f"written while replay is paused {i}")
    new = replace(settings_two, data_dir=tmp_path / "new")  # opened as `mnemosync serve` opens it
    new.data_dir.mkdir(mode=0o700)
    replica = replica_path(new.data_dir, settings_two.store)
    opened: list[Ledger] = []
    with psycopg.connect(settings_two.store) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))  # as another server's append would
        opening = threading.Thread(target=lambda: opened.append(open_store(new)))
        opening.start()
        wait_until(lambda: replica.exists() and _replica_head(replica) == 30,
                   message="the new server never folded the standby's 30 entries while the lock was held")
        assert opening.is_alive()  # the remaining 10 are folded from the primary, under the lock
        holder.rollback()
    opening.join(timeout=60)
    with opened[0] as store:
        assert store.head_seq() == 40 and store.log.verify().ok


def _replica_head(path) -> int:
    """The head of a replica being opened (0 until its schema exists), read with the store's own SQLite library
    (another copy of SQLite in the process would break its file locks)."""
    with contextlib.closing(db.connect(path).conn) as conn:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'changelog'").fetchone() is None:
            return 0
        return conn.execute("SELECT COALESCE(max(seq), 0) FROM changelog").fetchone()[0]


def test_a_read_store_is_refused_without_a_postgresql_store_or_when_it_is_no_postgresql_url(tmp_path, postgres_url):
    with pytest.raises(SettingsError, match="read_store .* needs store"):
        replace(dev_settings(tmp_path), read_store=postgres_url)
    with pytest.raises(InvalidArgument, match="read_store must be a postgresql:// URL"):
        open_store(replace(dev_settings(tmp_path), store=postgres_url, read_store="mysql://standby/db"))


def test_a_read_store_holding_another_log_is_never_folded_from_and_stats_say_why(two_settings, postgres_server):
    with postgres_database(postgres_server) as other_url:
        with served_agents(replace(two_settings[0], store=other_url, data_dir=two_settings[0].data_dir.parent / "o")
                           ) as on_other:
            for i in range(3):
                on_other("stranger").add(f"another team's note {i}")
        settings = replace(two_settings[1], read_store=other_url)
        with served_agents(two_settings[0]) as on_one, served_agents(settings) as on_two:
            writer, reader = on_one("writer"), on_two("reader")
            writer.add("written on the primary")
            status = wait_until(lambda: (s := _read_store(reader)).primary_seq == 1 and s,
                                message="the primary's head was never seen")
            assert not status.reachable and "no standby of this server's database: it holds log" in status.error
            assert status.replayed_seq == 0
            assert reader.call("Stats", pb.StatsRequest()).head_seq == 0
            assert reader.sync(0) == []


def test_agents_on_two_servers_over_one_postgresql_converge(two_settings, make_client):
    with run_server(two_settings[0]) as one, run_server(two_settings[1]) as two:
        a, b, from_a, from_b = _each_sees_the_others_first_write(one, two, make_client)
        b.update(from_a.memory_id, content="The auth service signs JWTs with ES256")
        wait_until(lambda: "ES256" in a.cache.get(from_a.memory_id).content, message="the update never arrived")
        wait_until(lambda: one.store.head_seq() == two.store.head_seq() == 3, message="the replicas never met")
        assert snapshot(one.store) == snapshot(two.store)
        assert a.cache.snapshot() == b.cache.snapshot()
        hits = a.search("which cluster does staging use?", limit=1).hits
        assert hits[0].memory.id == from_b.memory_id


def test_appends_through_two_servers_at_once_make_one_gap_free_chain(two_settings):
    with served_agents(two_settings[0]) as on_one, served_agents(two_settings[1]) as on_two:
        writers = [on_one(f"one-{i}") for i in range(3)] + [on_two(f"two-{i}") for i in range(3)]
        acknowledged: list[tuple[str, int]] = []
        lock = threading.Lock()

        def write(agent: RawAgent) -> None:
            for i in range(15):
                result = agent.add(f"{agent.agent_id} writes note {i}")
                with lock:
                    acknowledged.append((result.memory_id, result.seq))

        threads = [threading.Thread(target=write, args=(w,)) for w in writers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        reader = on_two("reader")
        wait_until(lambda: reader.call("Stats", pb.StatsRequest()).head_seq == 90,
                   message="server two never folded server one's appends")
        entries = reader.sync(0)
        assert [e.seq for e in entries] == list(range(1, 91))
        assert sorted(seq for _, seq in acknowledged) == list(range(1, 91))
        assert {e.memory_id for e in entries} == {memory_id for memory_id, _ in acknowledged}
        assert all(e.prev_hash == p.hash for p, e in zip(entries, entries[1:], strict=False))
    for settings in two_settings:
        with open_store(settings) as store:
            assert store.log.verify().ok


def test_a_server_joining_a_loaded_database_loads_its_vector_mirror_before_it_serves_and_never_again(two_settings):
    """Loaded at its first append instead, under the append lock, the mirror stalled every server's appends for
    seconds at 100k memories; and appends interleaved across servers must keep both mirrors current row by row
    (server one reads its mirror whole at its first near-duplicate check, whenever that comes)."""
    with run_server(two_settings[0]) as one:
        with contextlib.closing(RawAgent(one.address, "loader")) as loader:
            loader.append(*[add_op(f"loaded note {i}") for i in range(200)])
        with run_server(two_settings[1]) as two:
            assert two.store.mirror.base.n == 200 and two.store.mirror.full_loads == 1
            a, b = RawAgent(one.address, "a"), RawAgent(two.address, "b")
            with contextlib.closing(a), contextlib.closing(b):
                for i in range(10):
                    a.add(f"note {i} from server one")
                    b.add(f"note {i} from server two")
            wait_until(lambda: one.store.head_seq() == two.store.head_seq() == 220, message="the replicas never met")
            assert [one.store.mirror.full_loads, two.store.mirror.full_loads] == [1, 1]  # each read whole once


def test_a_server_killed_mid_write_loses_nothing_and_the_other_keeps_serving(two_settings, tmp_path):
    one = ServeProcess(two_settings[0].data_dir, "--store", two_settings[0].store).start()
    agent = RawAgent(one.address, "agent-a")
    with served_agents(two_settings[1]) as on_two:
        writer = KeepAdding(agent)
        acknowledged = writer.acknowledged
        wait_until(lambda: len(acknowledged) >= 50, timeout=30, interval=0.01, message="50 writes never acknowledged")
        one.kill()
        writer.stop()
        agent.close()
        survivor = on_two("agent-b")
        survivor.add("written after server one died")
        stored = {e.memory_id for e in survivor.sync(0)}
        assert set(acknowledged) <= stored
        assert survivor.get(acknowledged[-1]).id == acknowledged[-1]


def test_a_server_with_a_new_data_directory_folds_the_whole_changelog(two_settings, tmp_path):
    with served_agents(two_settings[0]) as agent:
        writer = agent("agent-a")
        first = writer.add("Backups run nightly at 02:00 UTC")
        writer.append(update_op(first.memory_id, 1, "Backups run nightly at 03:00 UTC"))
    with served_agents(replace(two_settings[1], data_dir=tmp_path / "fresh")) as agent:
        reader = agent("reader")
        assert reader.get(first.memory_id).content == "Backups run nightly at 03:00 UTC"
        assert len(reader.sync(0)) == 2


def test_the_changelog_in_postgresql_refuses_gaps_rewrites_and_deletes(two_settings):
    with served_agents(two_settings[0]) as agent:
        agent("agent-a").add("a memory")
    with psycopg.connect(two_settings[0].store, autocommit=True) as conn:
        row = conn.execute("SELECT * FROM changelog WHERE seq = 1").fetchone()
        columns = [d.name for d in conn.execute("SELECT * FROM changelog LIMIT 0").description]
        gap = dict(zip(columns, row, strict=True)) | {"seq": 3, "op_id": "another"}
        with pytest.raises(psycopg.errors.RaiseException, match="gap-free: seq 3"):
            conn.execute(f"INSERT INTO changelog ({', '.join(gap)}) VALUES ({', '.join(['%s'] * len(gap))})",
                         list(gap.values()))
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            conn.execute("UPDATE changelog SET hash = 'x' WHERE seq = 1")
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            conn.execute("DELETE FROM changelog WHERE seq = 1")


def test_verify_names_an_entry_changed_inside_postgresql(two_settings):
    with served_agents(two_settings[0]) as agent:
        agent("agent-a").add("the original text")
    with psycopg.connect(two_settings[0].store, autocommit=True) as conn:
        conn.execute("ALTER TABLE changelog DISABLE TRIGGER changelog_guard")
        conn.execute("UPDATE changelog SET payload = replace(payload, 'original', 'forged') WHERE seq = 1")
    store = ("--store", two_settings[0].store)
    report = mnemosync("verify", "--data-dir", str(two_settings[0].data_dir), *store)
    assert report.returncode == 1
    assert "in PostgreSQL" in report.stdout and "seq 1" in report.stdout


def test_a_replica_of_another_database_is_refused_with_what_to_do(two_settings, postgres_server, tmp_path):
    with served_agents(two_settings[0]) as agent:
        agent("agent-a").add("a memory")
    replica = replica_path(two_settings[0].data_dir, two_settings[0].store)
    with postgres_database(postgres_server) as other_url:
        Ledger.postgresql(other_url, tmp_path / "other-replica.db").close()  # gives the other database its log id
        with pytest.raises(FailedPrecondition, match="belongs to another database .* delete it"):
            Ledger.postgresql(other_url, replica)


def test_stats_show_offsets_acknowledged_on_any_server(two_settings):
    with served_agents(two_settings[0]) as on_one, served_agents(two_settings[1]) as on_two:
        on_one("agent-a").add("a memory")
        wait_until(lambda: on_two("observer").call("Stats", pb.StatsRequest()).head_seq == 1)
        on_one("agent-a").call("Ack", pb.AckRequest(seq=1))
        seen_on_two = on_two("agent-a").call("Stats", pb.StatsRequest()).agents
        assert [(a.agent_id, a.acked_seq) for a in seen_on_two] == [("agent-a", 1)]


def _unsigned(message) -> bytes:
    """The message with every checkpoint's time, key and signature cleared (each server signs its own)."""
    copy = type(message)()
    copy.CopyFrom(message)
    pending = [copy]
    while pending:
        current = pending.pop()
        if isinstance(current, pb.Checkpoint):
            for name in ("time_ms", "key", "signature"):
                current.ClearField(name)
        for field, value in current.ListFields():
            if field.message_type is not None:
                pending.extend(value if field.is_repeated else [value])
    return copy.SerializeToString(deterministic=True)


ADMIN = """
[agents.root]
authority = 1
admin = true
"""


def test_migrate_store_copies_sqlite_into_postgresql_and_back_and_both_sides_verify(tmp_path, postgres_url):
    settings = dev_settings(tmp_path, policy=ADMIN, name="sqlite")
    with served_agents(settings) as agent:
        alice, root = agent("alice"), agent("root")
        kept = alice.add("Backups run nightly at 02:00 UTC")
        secret = alice.add("The vault code is 31-41-59-26-53")
        root.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=secret.memory_id, base_version=1,
                                 redact=pb.RedactOp(reason="leaked")))
        alice.append(update_op(kept.memory_id, 1, "Backups run nightly at 03:00 UTC"))
        alice.call("Ack", pb.AckRequest(seq=4))
        served = [_unsigned(e) for e in alice.sync(0)]
    moved = mnemosync("migrate-store", "--data-dir", str(settings.data_dir), "--to", postgres_url)
    assert moved.returncode == 0, moved.stderr
    assert "copied 4 entries and 1 agent offset; both sides verify" in moved.stdout
    with served_agents(replace(settings, data_dir=tmp_path / "on-postgresql", store=postgres_url)) as agent:
        alice = agent("alice")
        assert [_unsigned(e) for e in alice.sync(0)] == served
        assert alice.get(kept.memory_id).content == "Backups run nightly at 03:00 UTC"
        assert "31-41" not in alice.get(secret.memory_id).content
        assert [(a.agent_id, a.acked_seq) for a in alice.call("Stats", pb.StatsRequest()).agents] == [("alice", 4)]
        alice.add("written on PostgreSQL")
    back = tmp_path / "back"
    returned = mnemosync("migrate-store", "--from", postgres_url, "--data-dir", str(back))
    assert returned.returncode == 0, returned.stderr
    assert "copied 5 entries" in returned.stdout
    checked = mnemosync("verify", "--data-dir", str(back))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    again = mnemosync("migrate-store", "--data-dir", str(settings.data_dir), "--to", postgres_url)
    assert again.returncode == 4 and "already holds a mnemosync changelog" in again.stderr


def test_a_server_configured_with_another_model_takes_the_one_the_database_pinned(two_settings):
    from mnemosync.kernel.model_identity import ModelInfo

    first, other = ModelInfo("first-model", 16, "a" * 64), ModelInfo("other-model", 16, "b" * 64)
    with open_store(two_settings[0], pin_model=first) as one:
        assert one.reads.model() == first
    with open_store(two_settings[1], pin_model=other) as two:
        assert two.reads.model() == first


def test_a_server_restarting_over_postgresql_reads_the_model_file_only_for_a_new_replica(two_settings, model_path):
    """`mnemosync serve` fingerprints the model (half a second) only for a store it has not opened before; over
    PostgreSQL that is the replica, not the SQLite file it never makes."""
    settings = replace(two_settings[0], embed_model=model_path)
    assert _pin_model_for_new_store(settings) is not None
    with open_store(settings):
        pass
    assert _pin_model_for_new_store(settings) is None


def test_a_new_replica_over_a_database_that_pins_a_model_does_not_read_the_model_file(two_settings, model_path):
    """The database's pin wins over a new replica's, so fingerprinting the model for it (a second) is not needed."""
    first, second = (replace(s, embed_model=model_path) for s in two_settings)
    assert _pin_model_for_new_store(second) is not None  # nothing pinned yet
    with open_store(first, pin_model=_pin_model_for_new_store(first)):
        pass
    assert _pin_model_for_new_store(second) is None
