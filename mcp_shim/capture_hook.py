"""`mnemosync hook precompact` and `mnemosync hook session-end`: keep the session before it is compacted or ends.

Both read the hook's JSON (its `transcript_path` and `cwd`) and start
`mnemosync ingest` on the transcript in the background, then exit 0 at once:
Claude Code gives SessionEnd hooks 1.5 s by default and waits for PreCompact
hooks before compacting, and an ingestion loads the model. The ingestion's
watermark makes the two safe to overlap and to repeat (`mnemosync.agent.ingest`).
PreCompact passes `--partial` (the session goes on), SessionEnd does not.
Standard library only: the `mnemosync` launcher sends these here directly.
Its output goes to the agent's own log, `ingest-<agent key>.log` in the private
runtime directory (`mnemosync.agent.local_socket.ingest_log`): agents of other
identities on the machine write theirs apart.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from mnemosync.agent import local_socket
from mnemosync.shim.prompt_hook import read_hook_input


def start_ingest(payload: dict, *, partial: bool, environ: Mapping[str, str] | None = None) -> int:
    """Starts the background ingestion of the payload's transcript; always 0 (a hook never fails the session)."""
    environ = os.environ if environ is None else environ
    path, cwd = payload.get("transcript_path"), payload.get("cwd")
    if not isinstance(path, str) or not path or not os.path.isfile(path):
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
