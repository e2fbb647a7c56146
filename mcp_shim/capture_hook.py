"""`mnemosync hook precompact` and `mnemosync hook session-end`: keep the session before it is compacted or ends.

Both read the hook's JSON (its `transcript_path` and `cwd`) and hand the
transcript over, then exit 0 at once: Claude Code gives SessionEnd hooks 1.5 s by
default and waits for PreCompact hooks before compacting. The running local agent
takes it (`{"op": "capture"}` on its socket: it records the capture before it
answers and stores it with the model it already holds, `mnemosync.agent.captures`);
when none answers, the hook starts `mnemosync ingest` on the transcript in the
background, which records it the same way. A capture that fails is kept, shown by
`mnemosync status` and `doctor`, and tried again by the agent. The ingestion's
watermark makes the two hooks safe to overlap and to repeat (`mnemosync.agent.ingest`).
PreCompact's capture leaves the last turn (the session goes on), SessionEnd's does not.
Standard library only: the `mnemosync` launcher sends these here directly.
The background ingestion's output goes to the agent's own log, `ingest-<agent key>.log`
in the private runtime directory (`mnemosync.agent.local_socket.ingest_log`): agents of
other identities on the machine write theirs apart.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from mnemosync.agent import local_socket
from mnemosync.shim.prompt_hook import read_hook_input

ASK_TIMEOUT = 1.0
"""Seconds the hook waits for the running agent to take the capture before starting an ingestion itself."""


def hand_to_agent(path: str, cwd: object, *, partial: bool, environ: Mapping[str, str]) -> bool:
    """Asks the running local agent to store the transcript (`mnemosync.agent.captures`); True when it took it."""
    request = {"op": "capture", "transcript_path": os.path.abspath(path), "partial": partial,
               "cwd": cwd if isinstance(cwd, str) and cwd else None, "scope": environ.get("MNEMOSYNC_SCOPE") or None}
    try:
        answer = local_socket.ask(local_socket.socket_path(environ), request, timeout=ASK_TIMEOUT)
    except (OSError, ValueError):
        return False  # nobody serves the socket, or it did not answer in time
    return answer.get("ok") is True


def start_ingest(payload: dict, *, partial: bool, environ: Mapping[str, str] | None = None) -> int:
    """Hands the payload's transcript to the running agent, else starts its ingestion in the background; always
    0 (a hook never fails the session)."""
    environ = os.environ if environ is None else environ
    path, cwd = payload.get("transcript_path"), payload.get("cwd")
    if not isinstance(path, str) or not path or not os.path.isfile(path):
        return 0
    if hand_to_agent(path, cwd, partial=partial, environ=environ):
        return 0
    command = [sys.executable, "-P", "-m", "mnemosync.cli", "ingest", path]  # -P: see prompt_hook.start_agent
    if isinstance(cwd, str) and cwd:
        command += ["--project-dir", cwd]
    if partial:
        command.append("--partial")
    try:
        path = local_socket.ingest_log(environ)
        with open(path, "ab") as log:
            os.chmod(path, 0o600)
            subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                             close_fds=True, env=dict(environ))
    except OSError:
        pass
    return 0


def precompact(argv: list[str] | None = None) -> int:
    """The PreCompact hook: ingest all but the last turn in the background."""
    return start_ingest(read_hook_input(sys.stdin), partial=True)


def session_end(argv: list[str] | None = None) -> int:
    """The SessionEnd hook: ingest the whole transcript in the background."""
    return start_ingest(read_hook_input(sys.stdin), partial=False)
