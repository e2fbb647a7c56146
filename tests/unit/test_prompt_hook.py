"""`mnemosync.shim.prompt_hook` in-process: it never fails a prompt and prints nothing when it has nothing."""

from __future__ import annotations

import io
import json
import shutil
import tempfile
import threading
import time

import pytest

from mnemosync.agent.local_socket import socket_path
from mnemosync.shim.local_service import LocalService
from mnemosync.shim.prompt_hook import PromptHookSettings, main

from helpers import wait_until


@pytest.fixture
def environ():
    base = tempfile.mkdtemp(prefix="ms-", dir="/tmp")
    yield {"XDG_RUNTIME_DIR": base, "MNEMOSYNC_AGENT_ID": "alice", "MNEMOSYNC_RECALL_START_AGENT": "0"}
    shutil.rmtree(base)


def run(environ: dict, stdin: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main([], stdin=io.StringIO(stdin), stdout=out, environ=environ)
    return code, out.getvalue()


@pytest.mark.parametrize("stdin", ["", "not json", "[1, 2]", '{"prompt": 7}', '{"prompt": "   "}'])
def test_malformed_hook_input_prints_nothing_and_exits_0(environ, stdin):
    assert run(environ, stdin) == (0, "")


def test_with_no_warm_process_the_prompt_goes_on_with_nothing_added(environ):
    assert run(environ, json.dumps({"prompt": "how do we deploy?", "cwd": "/home/me/web"})) == (0, "")


def test_the_warm_process_answer_is_printed_as_additional_context(environ):
    seen = []

    def answer(request):
        seen.append(request)
        return {"context": "Shared memory: deploys go through ops/deploy.sh"}

    service = LocalService(socket_path(environ, create=True)).start(answer)
    try:
        wait_until(service.serving.is_set, timeout=5)
        code, out = run({**environ, "MNEMOSYNC_SCOPE": "project:ops", "MNEMOSYNC_RECALL_BUDGET": "500"},
                        json.dumps({"session_id": "s1", "hook_event_name": "UserPromptSubmit",
                                    "prompt": "how do we deploy?", "cwd": "/home/me/web"}))
        assert code == 0
        assert json.loads(out) == {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                                          "additionalContext": "Shared memory: deploys go through "
                                                                               "ops/deploy.sh"}}
        assert seen == [{"op": "recall", "prompt": "how do we deploy?", "cwd": "/home/me/web", "scope": "project:ops",
                         "budget_tokens": 500, "session_id": "s1", "log": False}]
    finally:
        service.stop()


def test_a_prompt_sent_while_the_warm_process_starts_waits_for_its_answer(environ):
    path = socket_path(environ, create=True)
    service = LocalService(path)
    assert service.take_lock()  # booting: the lock is held, the socket not yet served
    threading.Timer(0.6, lambda: service.start(lambda r: {"context": "Shared memory: use pnpm"})).start()
    try:
        started = time.monotonic()
        code, out = run({**environ, "MNEMOSYNC_RECALL_START_WAIT": "4"}, json.dumps({"prompt": "install lodash"}))
        assert code == 0 and json.loads(out)["hookSpecificOutput"]["additionalContext"] == "Shared memory: use pnpm"
        assert 0.6 <= time.monotonic() - started < 4
    finally:
        service.stop()


def test_a_starting_warm_process_is_waited_for_only_within_the_start_wait(environ):
    service = LocalService(socket_path(environ, create=True))
    assert service.take_lock()
    try:
        started = time.monotonic()
        quick = {**environ, "MNEMOSYNC_RECALL_START_WAIT": "0.5"}
        assert run(quick, json.dumps({"prompt": "install lodash"})) == (0, "")
        assert 0.5 <= time.monotonic() - started < 2
    finally:
        service.stop()


def test_an_error_answer_or_recall_turned_off_prints_nothing(environ):
    service = LocalService(socket_path(environ, create=True)).start(lambda r: {"error": "broken"})
    try:
        wait_until(service.serving.is_set, timeout=5)
        assert run(environ, json.dumps({"prompt": "how do we deploy?"})) == (0, "")
        assert run({**environ, "MNEMOSYNC_RECALL": "off"}, json.dumps({"prompt": "how do we deploy?"})) == (0, "")
    finally:
        service.stop()


def test_settings_come_from_the_environment_and_a_malformed_number_keeps_its_default():
    settings = PromptHookSettings.from_environment({"MNEMOSYNC_RECALL_BUDGET": "lots",
                                                    "MNEMOSYNC_RECALL_TIMEOUT": "0.5", "MNEMOSYNC_RECALL": "on"})
    assert (settings.enabled, settings.budget_tokens, settings.timeout) == (True, 300, 0.5)
    assert (settings.start_wait, settings.log) == (4.0, False)
    assert PromptHookSettings.from_environment({"MNEMOSYNC_RECALL_LOG": "1",
                                                "MNEMOSYNC_RECALL_START_WAIT": "1.5"}).log is True
    assert PromptHookSettings.from_environment({"MNEMOSYNC_RECALL_BUDGET": "99999"}).budget_tokens == 2000
