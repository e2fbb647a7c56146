"""Captures: the transcripts the PreCompact and SessionEnd hooks ask to store, recorded first, stored, and tried
again until they are.

A hook gives Claude Code at most a second or two, so it only asks: the running local agent (`{"op": "capture"}`
on its socket, `CaptureWorker.request`) records the capture in the ingestion file (`Watermarks.want`) before it
answers, and stores it on a thread of its own with the model it already holds. With no agent running, the hook
starts `mnemosync ingest`, which records the capture the same way (`run`). A capture that fails (the server
refused an episode, the cache could not be written) stays waiting with its error and number of attempts:
`mnemosync status` and `doctor` show it, and the agent tries it again every `RETRY_SECONDS` and when it starts. (A
capture made while the server is unreachable does not fail: its episodes wait in the outbox like any write.) A
transcript that is gone cannot be stored: that is its error, shown the same way, and it is not tried again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from mnemosync.agent.ingest import Capture, IngestReport, Watermarks, ingest_transcript
from mnemosync.kernel.errors import CodedError

log = logging.getLogger(__name__)

FILE_NAME = "ingest.db"
RETRY_SECONDS = 60.0
"""How often the agent tries a failed capture again."""
GONE = "the transcript is gone"
MAX_PATH_CHARS = 4096


def run(client, watermarks: Watermarks, capture: Capture) -> IngestReport:
    """Stores one capture (`mnemosync.agent.ingest.ingest_transcript`) and marks it stored.

    Raises:
        FileNotFoundError: the transcript is gone (recorded as `GONE`: it is not tried again).
        CodedError, OSError: it failed; the failure is recorded first (it is tried again).
    """
    path = Path(capture.path)
    if not path.is_file():
        watermarks.failed(capture, GONE)
        raise FileNotFoundError(f"{path}: {GONE}")
    try:
        report = ingest_transcript(client, path, watermarks=watermarks, scope=capture.scope, final=capture.final)
    except (CodedError, OSError) as exc:
        watermarks.failed(capture, str(exc) if isinstance(exc, CodedError) else f"{type(exc).__name__}: {exc}")
        raise
    watermarks.stored(capture)
    return report


def waiting(cache_dir: Path) -> list[Capture]:
    """The captures of the agent whose cache directory is `cache_dir` not stored yet (none when it never had one)."""
    if not (cache_dir / FILE_NAME).exists():
        return []
    watermarks = Watermarks(cache_dir / FILE_NAME)
    try:
        return watermarks.waiting()
    finally:
        watermarks.close()


def summary(waiting: list[Capture]) -> str:
    """One line about the captures not stored yet, for `status` and `doctor` ("" when there are none)."""
    if not waiting:
        return ""
    failed = [c for c in waiting if c.error]
    line = f"{len(waiting)} capture{'s' * (len(waiting) != 1)} waiting to be stored"
    if failed:
        last = failed[-1]
        line += (f", {len(failed)} failed (last: {Path(last.path).name}, {last.attempts} "
                 f"attempt{'s' * (last.attempts != 1)}: {last.error})")
    return line


class CaptureWorker:
    """The local agent's captures: answers the hooks' requests and stores them on a thread of its own.

    Args:
        client: The agent's `AgentClient` (started, or starting: a capture waits for the server like any write).
        scope_for: The scope of a capture from the hook's `scope` and `cwd` (as the agent resolves a session's).
        retry_seconds: See `RETRY_SECONDS`.
    """

    def __init__(self, client, scope_for: Callable[[str | None, str | None], str], *,
                 retry_seconds: float = RETRY_SECONDS):
        self.client = client
        self.scope_for = scope_for
        self.retry_seconds = retry_seconds
        self._watermarks: Watermarks | None = None
        self._opening = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mnemosync-captures", daemon=True)

    @property
    def watermarks(self) -> Watermarks:
        with self._opening:  # the worker and the first request may both ask at once: one file object, not two
            if self._watermarks is None:
                self._watermarks = Watermarks(self.client.settings.resolved_cache_dir() / FILE_NAME)
            return self._watermarks

    def start(self) -> CaptureWorker:
        """Starts storing: what earlier runs left waiting first."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops after the capture being stored (it is left waiting if cut short) and closes the file."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(30)
        if self._watermarks is not None:
            self._watermarks.close()

    def wake(self) -> None:
        """Tries the waiting captures now (the server is back)."""
        self._wake.set()

    def request(self, request: dict) -> dict:
        """`{"op": "capture", "transcript_path", "cwd", "scope", "partial"}`: records the capture, then answers
        `{"ok": true}` at once (`{"error": ...}` naming a bad field)."""
        path, cwd, scope = request.get("transcript_path"), request.get("cwd"), request.get("scope")
        if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS:
            return {"error": f"transcript_path must be a path of at most {MAX_PATH_CHARS} characters"}
        for name, value in (("cwd", cwd), ("scope", scope)):
            if value is not None and (not isinstance(value, str) or len(value) > MAX_PATH_CHARS):
                return {"error": f"{name} must be text of at most {MAX_PATH_CHARS} characters"}
        try:
            self.watermarks.want(Path(path), self.scope_for(scope, cwd), final=not request.get("partial"))
        except CodedError as exc:
            return {"error": f"the capture could not be recorded: {exc}"}
        self._wake.set()
        return {"ok": True}

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for capture in self.watermarks.waiting():
                    if self._stop.is_set():
                        return
                    if capture.error == GONE:
                        continue
                    try:
                        log.info("capture: %s", run(self.client, self.watermarks, capture).summary())
                    except (CodedError, OSError) as exc:
                        log.warning("capture of %s not stored (attempt %d; tried again in %.0f s): %s",
                                    capture.path, capture.attempts + 1, self.retry_seconds, exc)
            except CodedError as exc:  # the file itself: said, and tried again at the next wake
                log.warning("captures not read: %s", exc)
            self._wake.wait(self.retry_seconds)
            self._wake.clear()
