"""`mnemosync serve`, `rebuild` and `verify` as real processes: start, stop, crash, tamper, pin a model,
apply a policy.
"""

from __future__ import annotations

import signal
import socket
import sqlite3

import grpc
import pytest

from mnemosync.v1 import memory_pb2 as pb

from helpers import KeepAdding, RawAgent, ServeProcess, five_memories_served, mnemosync, wait_until


def test_serve_starts_answers_and_stops_cleanly_on_sigterm(tmp_path):
    server = ServeProcess(tmp_path / "data").start()
    agent = RawAgent(server.address, "agent-a")
    agent.add("hello")
    assert agent.call("Stats", pb.StatsRequest()).head_seq == 1
    agent.close()
    assert server.stop(signal.SIGTERM) == 0
    output = "".join(server.stderr_lines)
    assert "PLAIN TEXT" in output and "shutting down" in output


def test_serve_refuses_plain_text_on_a_public_address(tmp_path):
    result = mnemosync("serve", "--data-dir", str(tmp_path), "--listen", "0.0.0.0:0", "--insecure")
    assert result.returncode == 4  # a precondition (TLS) is missing
    assert "refusing plain text on 0.0.0.0" in result.stderr


CONFORMANCE = True  # the tests taking `store_kind` run on SQLite and on PostgreSQL (conftest.STORE_KINDS)


def test_a_kill_9_during_appends_loses_nothing_that_was_acknowledged(tmp_path, server_settings):
    data = tmp_path / "data"
    store = ("--store", server_settings.store) if server_settings.store else ()
    server = ServeProcess(data, *store).start()
    agent = RawAgent(server.address, "agent-a")
    writer = KeepAdding(agent)
    acknowledged = writer.acknowledged
    wait_until(lambda: len(acknowledged) >= 200, timeout=30, interval=0.01,
               message="200 writes were never acknowledged")
    server.kill()
    writer.stop()
    agent.close()
    assert len(acknowledged) >= 200
    with ServeProcess(data, *store) as restarted:
        reader = RawAgent(restarted.address, "reader")
        stored = {e.memory_id for e in reader.sync(0)}
        assert set(acknowledged) <= stored
        for memory_id in acknowledged[-5:]:
            assert reader.get(memory_id).id == memory_id
        reader.close()
    report = mnemosync("verify", "--data-dir", str(data), *store)
    assert report.returncode == 0, report.stdout + report.stderr


def test_rebuild_and_verify_commands_work_on_a_stopped_server(tmp_path):
    data = tmp_path / "data"
    five_memories_served(data)
    rebuilt = mnemosync("rebuild", "--data-dir", str(data))
    assert rebuilt.returncode == 0 and "from 5 changelog entries" in rebuilt.stdout
    ok = mnemosync("verify", "--data-dir", str(data))
    assert ok.returncode == 0 and ok.stdout.startswith("ok: 5 entries")


def test_verify_reports_the_first_entry_that_was_tampered_with(tmp_path):
    data = tmp_path / "data"
    five_memories_served(data)
    conn = sqlite3.connect(data / "mnemosync.db")
    conn.execute("DROP TRIGGER changelog_no_update")
    conn.execute("""UPDATE changelog SET payload = replace(payload, 'memory 2', 'memory 9') WHERE seq = 3""")
    conn.commit()
    conn.close()
    broken = mnemosync("verify", "--data-dir", str(data), "--json")
    assert broken.returncode == 1
    assert '"first_bad_seq": 3' in broken.stdout and "payload does not match its commitment" in broken.stdout


def test_a_new_data_directory_pins_the_configured_embedding_model(tmp_path, model_path):
    with ServeProcess(tmp_path / "data", embed_model=model_path) as server:
        agent = RawAgent(server.address, "agent-a")
        pinned = agent.call("Stats", pb.StatsRequest()).embedding_model
        assert (pinned.name, pinned.dimensions) == ("all-MiniLM-L6-v2", 384)
        refused = None
        try:
            agent.add("written with the wrong model")
        except grpc.RpcError as exc:
            refused = exc
        assert refused is not None and refused.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "all-MiniLM-L6-v2 (384 dims" in refused.details()
        agent.close()


def test_serve_applies_the_policy_file_given_with_the_policy_flag(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text("[agents.boss]\nauthority = 1\n")
    with ServeProcess(tmp_path / "data", "--policy", str(policy)) as server:
        boss, bot = RawAgent(server.address, "boss"), RawAgent(server.address, "bot")
        try:
            assert boss.add("Never deploy on Fridays", layer=1).seq == 1
            with pytest.raises(grpc.RpcError, match="layer-1-human-only"):
                bot.add("Deploy whenever you like", layer=1)
        finally:
            boss.close()
            bot.close()


def test_serve_on_a_busy_port_says_the_address_is_in_use_in_one_line(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = mnemosync("serve", "--data-dir", str(tmp_path), "--listen", f"127.0.0.1:{port}", "--insecure")
    assert result.returncode == 4
    assert result.stderr.strip() == (f"Error: cannot listen on 127.0.0.1:{port}: address already in use (another "
                                     "mnemosync serve or another program listens there); stop it, or choose another "
                                     "--listen")


def test_serve_with_insecure_exported_and_a_tls_dir_names_the_variable(tmp_path):
    result = mnemosync("serve", "--data-dir", str(tmp_path), "--tls-dir", str(tmp_path), "--listen", "127.0.0.1:0",
                       env={"MNEMOSYNC_INSECURE": "1"})
    assert result.returncode == 4
    assert ("MNEMOSYNC_INSECURE in the environment asks for plain text and --tls-dir for mTLS: choose one"
            in result.stderr) and "unset MNEMOSYNC_INSECURE to serve mTLS" in result.stderr
