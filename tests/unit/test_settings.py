"""`mnemosync.kernel.settings_loading`, `mnemosync.agent.client_settings`, `mnemosync.server.settings`: settings from
flags, the environment and a file, each problem named, and settings objects that take paths as text and refuse
wrong kinds when made.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemosync.agent import client_settings
from mnemosync.agent.client_settings import ClientSettings
from mnemosync.kernel.errors import SettingsError
from mnemosync.server.settings import ServerSettings

from helpers import mnemosync


def test_client_settings_take_paths_as_text(tmp_path):
    settings = ClientSettings(agent_id="alice", cache_dir=str(tmp_path / "cache"), embed_model="~/model.gguf",
                              data_home=str(tmp_path))
    assert settings.cache_dir == tmp_path / "cache" and settings.resolved_cache_dir() == tmp_path / "cache"
    assert settings.embed_model == Path.home() / "model.gguf"
    assert ServerSettings(data_dir=str(tmp_path)).db_path == tmp_path / "mnemosync.db"


def test_a_setting_of_the_wrong_kind_is_refused_when_the_settings_are_made():
    with pytest.raises(TypeError, match=r"^ClientSettings.cache_dir must be a path \(str or pathlib.Path\), got 5$"):
        ClientSettings(cache_dir=5)
    with pytest.raises(TypeError, match="^ClientSettings.timeout must be a number, got '5'$"):
        ClientSettings(timeout="5")
    with pytest.raises(TypeError, match="^ServerSettings.insecure must be True or False, got 'yes'$"):
        ServerSettings(insecure="yes")


def test_a_bad_variable_or_settings_file_is_named(tmp_path):
    assert client_settings.load(environ={"MNEMOSYNC_TIMEOUT": "2.5"}).timeout == 2.5
    with pytest.raises(SettingsError, match="^MNEMOSYNC_TIMEOUT must be a number, got 'soon'$"):
        client_settings.load(environ={"MNEMOSYNC_TIMEOUT": "soon"})
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[client]\ncolour = 'blue'\n")
    with pytest.raises(SettingsError, match=f"^{unknown}: unknown \\[client\\] setting 'colour'$"):
        client_settings.load(settings_file=unknown, environ={})
    broken = tmp_path / "broken.toml"
    broken.write_text("[client\n")
    with pytest.raises(SettingsError, match=f"^cannot read the settings file {broken}: "):
        client_settings.load(settings_file=broken, environ={})


def test_the_sync_page_size_comes_from_the_environment_and_must_be_positive():
    from mnemosync.server import settings as server_settings

    assert server_settings.load(environ={"MNEMOSYNC_SYNC_PAGE_SIZE": "3"}).sync_page_size == 3
    assert ServerSettings().sync_page_size == 1000
    with pytest.raises(SettingsError, match="^sync_page_size must be at least 1, got 0$"):
        ServerSettings(sync_page_size=0)


def test_embedding_thread_counts_come_from_the_environment_and_are_refused_below_their_limits():
    loaded = client_settings.load(environ={"MNEMOSYNC_EMBED_THREADS": "2", "MNEMOSYNC_EMBED_BATCH_THREADS": "3"})
    assert (loaded.embed_threads, loaded.embed_batch_threads) == (2, 3)
    assert (ClientSettings().embed_threads, ClientSettings().embed_batch_threads) == (1, 0)
    with pytest.raises(SettingsError, match="^embed_threads must be at least 1, got 0$"):
        client_settings.load(environ={"MNEMOSYNC_EMBED_THREADS": "0"})
    with pytest.raises(SettingsError, match=r"^embed_batch_threads must be 0 \(half the CPUs\) or more, got -1$"):
        ClientSettings(embed_batch_threads=-1)


def test_the_client_refuses_plain_text_to_a_server_off_loopback_as_the_server_refuses_to_serve_it(tmp_path):
    """With --insecure the agent id travels in clear and the server is not authenticated: the client accepted it
    for any address."""
    for server in ("10.0.0.5:50051", "memory.internal:50051", "[2001:db8::1]:50051"):
        with pytest.raises(SettingsError, match=r"plain text\) is allowed only to a loopback server"):
            ClientSettings(server=server, insecure=True)
    for server in ("127.0.0.1:50051", "localhost:50051", "[::1]:50051"):
        assert ClientSettings(server=server, insecure=True).insecure
    assert ClientSettings(server="memory.internal:50051", cert_dir=tmp_path).server == "memory.internal:50051"
    refused = mnemosync("status", "--insecure", "--server", "192.0.2.7:50051", "--agent-id", "alice",
                        "--cache-dir", str(tmp_path / "cache"), clean_env=True)
    assert refused.returncode == 1 and "only to a loopback server" in refused.stderr
