"""`mnemosync doctor`'s checks: everything a session needs, each with what to do when it fails.

Each check returns a `Finding` (ok, warn or fail, a summary, and the fix).
They run in order and later ones use what earlier ones learnt; a check that
cannot run because an earlier one failed says so (`skip`). Nothing here
writes to the server or the cache: the cache is opened to check it, the
server is asked for its counts (`Stats`), which also carry its clock and its
pinned model.

(The settings themselves are checked where they are built: `mnemosync doctor`
reports a bad setting as a failed `settings` check.)

1. model: the GGUF file exists and loads as a model (its fingerprint).
2. certificate: with mTLS, the files are there, from one CA, valid now; a
   warning within `EXPIRY_WARN_DAYS` of expiry.
3. server: reachable, in which mode (mTLS or plain text), and it accepts this
   agent (a revoked or unknown certificate fails here, with the server's words).
4. model match: the server's pinned model is this agent's model.
5. clock: the skew against the server's clock, a warning past `SKEW_WARN_S`,
   a failure past `SKEW_FAIL_S` (entry times and certificate validity depend on it).
6. cache: it opens and passes SQLite's quick check; how far behind the server.
7. outbox: queued writes (a warning when they wait while the server is
   reachable) and writes the server refused when they were sent (a failure).
8. captures: session transcripts the capture hooks handed over that are not
   stored yet (a warning when one failed: `mnemosync.agent.captures`).
9. agent: the local agent process (`mnemosync agent`), when one runs: its
   pid, uptime, sessions and cache lag; a warning when its boot failed or its
   cache is not live (`local_agent`).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mnemosync.agent.errors import ClientError, ServerUnavailable
from mnemosync.kernel.errors import CodedError, MnemosyncError
from mnemosync.kernel.wording import counted, plural

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
EXPIRY_WARN_DAYS = 14
SKEW_WARN_S = 2.0
SKEW_FAIL_S = 30.0
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Finding:
    """The outcome of one check."""

    check: str
    status: str
    summary: str
    fix: str = ""

    def as_dict(self) -> dict:
        """JSON-ready."""
        return asdict(self)


class ChecksFailed(ClientError):
    """Some of doctor's checks failed (each says what to do)."""


class _Context:
    """What the checks learn as they go."""

    def __init__(self, settings):
        self.settings = settings
        self.model = None
        self.stats = None
        self.skew_s: float | None = None


def run_checks(settings, *, now=time.time) -> list[Finding]:
    """Runs every check against `settings` (a `mnemosync.agent.client_settings.ClientSettings`); see the module
    docstring.

    Args:
        settings: The agent's settings.
        now: Seconds since the epoch (tests move it).
    """
    ctx = _Context(settings)
    return [
        _model(ctx),
        _certificate(ctx, now),
        _server(ctx, now),
        _model_match(ctx),
        _clock(ctx),
        _cache(ctx),
        _outbox(ctx),
        _captures(ctx),
    ]


def _model(ctx: _Context) -> Finding:
    from mnemosync.kernel.model_identity import fingerprint

    path = ctx.settings.resolved_model_path()
    if not Path(path).is_file():
        return Finding("model", FAIL, f"no embedding model at {path}",
                       "run `mnemosync model build` (the default model), or set MNEMOSYNC_EMBED_MODEL to a GGUF file")
    try:
        ctx.model = fingerprint(Path(path))
    except MnemosyncError as exc:
        return Finding("model", FAIL, f"{path} is not a usable model: {exc}",
                       "rebuild it with `mnemosync model build`, or point MNEMOSYNC_EMBED_MODEL at a GGUF model")
    return Finding("model", OK, f"{ctx.model.name}, {ctx.model.dimensions} dimensions, sha256 "
                                f"{ctx.model.sha256[:12]} ({path})")


def _certificate(ctx: _Context, now) -> Finding:
    from mnemosync.agent.tls import check_own_certificate

    tls = ctx.settings.tls()
    if tls is None:
        if ctx.settings.insecure:
            return Finding("certificate", OK, "none: plain text to a development server (insecure)")
        return Finding("certificate", FAIL, "no certificate directory and not insecure",
                       "set MNEMOSYNC_CERT_DIR to the directory `mnemosync ca issue-agent NAME` wrote, or "
                       "MNEMOSYNC_INSECURE=1 for a development server on loopback")
    moment = dt.datetime.fromtimestamp(now(), dt.UTC)
    try:
        problem = check_own_certificate(tls, moment)
        cert = tls.certificate()
        agent = tls.agent_id()
    except ClientError as exc:
        return Finding("certificate", FAIL, str(exc), "use the whole directory `mnemosync ca issue-agent` wrote")
    if problem:
        return Finding("certificate", FAIL, problem, "ask the operator for a new certificate "
                                                     "(mnemosync ca issue-agent NAME)")
    days = (cert.not_valid_after_utc - moment).total_seconds() / 86400
    summary = f"agent {agent}, valid for {days:.0f} more days (until {cert.not_valid_after_utc:%Y-%m-%d})"
    if days < EXPIRY_WARN_DAYS:
        return Finding("certificate", WARN, summary, "ask the operator for a new certificate before it expires "
                                                     "(mnemosync ca issue-agent NAME)")
    return Finding("certificate", OK, summary)


def _server(ctx: _Context, now) -> Finding:
    from dataclasses import replace

    from mnemosync.agent.remote import Remote

    settings = ctx.settings
    mode = "plain text (development)" if settings.insecure else "mTLS"
    try:
        remote = Remote.from_settings(replace(settings, timeout=min(settings.timeout, TIMEOUT_S)),
                                      settings.resolved_agent_id())
    except ClientError as exc:
        return Finding("server", SKIP, f"not tried: {exc}", "fix the certificate first")
    try:
        before = now()
        ctx.stats = remote.stats()
        after = now()
    except ServerUnavailable as exc:
        return Finding("server", FAIL, str(exc),
                       f"start the server (mnemosync serve) or check MNEMOSYNC_SERVER ({settings.server}); until "
                       "then sessions answer from the local cache and queue writes")
    except CodedError as exc:
        return Finding("server", FAIL, f"the server at {settings.server} refuses this agent ({exc.code}): {exc}",
                       "if the certificate was revoked or the agent is unknown, ask the operator for a new one "
                       "(mnemosync ca issue-agent NAME)")
    finally:
        remote.close()
    if ctx.stats.server_time_ms:
        ctx.skew_s = ctx.stats.server_time_ms / 1000 - (before + after) / 2
    return Finding("server", OK, f"{settings.server} over {mode}, server {ctx.stats.server_version or '?'}, "
                                 f"changelog head {ctx.stats.head_seq}, {ctx.stats.live_memories} live memories")


def _model_match(ctx: _Context) -> Finding:
    if ctx.stats is None or ctx.model is None:
        return Finding("model match", SKIP, "needs the server and the model")
    pinned = ctx.stats.embedding_model
    if pinned is None:
        return Finding("model match", OK, "the server has no model pinned yet: the first write pins this one")
    if (pinned.name, pinned.dimensions, pinned.sha256) != (ctx.model.name, ctx.model.dimensions, ctx.model.sha256):
        return Finding("model match", FAIL,
                       f"the server pinned {pinned.name} ({pinned.dimensions} dimensions, sha256 "
                       f"{pinned.sha256[:12]}) but this agent has {ctx.model.name} ({ctx.model.dimensions}, "
                       f"{ctx.model.sha256[:12]}): its writes and searches would be refused",
                       "use the server's model file (MNEMOSYNC_EMBED_MODEL), or `mnemosync model build` for the "
                       "default one")
    return Finding("model match", OK, f"the server's pinned model is this agent's ({pinned.name})")


def _clock(ctx: _Context) -> Finding:
    if ctx.skew_s is None:
        return Finding("clock", SKIP, "needs a server that reports its clock")
    skew = ctx.skew_s
    summary = f"this machine is {abs(skew):.1f} s {'behind' if skew > 0 else 'ahead of'} the server"
    if abs(skew) > SKEW_FAIL_S:
        return Finding("clock", FAIL, summary, "synchronise this machine's clock (NTP): certificate validity and "
                                               "the time filters of search depend on it")
    if abs(skew) > SKEW_WARN_S:
        return Finding("clock", WARN, summary, "synchronise this machine's clock (NTP)")
    return Finding("clock", OK, summary)


def _cache(ctx: _Context) -> Finding:
    from mnemosync.agent.cache import Cache

    path = ctx.settings.resolved_cache_dir() / "cache.db"
    if not path.exists():
        return Finding("cache", OK, f"not created yet ({path}): the first session fills it from the server")
    try:
        cache = Cache(path)
    except ClientError as exc:
        return Finding("cache", FAIL, str(exc), "the next session moves it aside and rebuilds it from the server; "
                                                "or delete it now")
    try:
        offset = cache.offset
    finally:
        cache.close()
    behind = f", {counted(ctx.stats.head_seq - offset, 'entry')} behind the server" if ctx.stats is not None else ""
    return Finding("cache", OK, f"{path} passes its integrity check, synced to seq {offset}{behind}")


def _outbox(ctx: _Context) -> Finding:
    from mnemosync.agent.outbox import Outbox

    path = ctx.settings.resolved_cache_dir() / "outbox.db"
    if not path.exists():
        return Finding("outbox", OK, "empty")
    try:
        outbox = Outbox(path)
    except ClientError as exc:
        return Finding("outbox", FAIL, str(exc), "keep the file (it holds queued writes) and report it")
    try:
        pending, failed, oldest = outbox.counts()
        refused = outbox.failed()
    finally:
        outbox.close()
    if failed:
        first = refused[0]
        return Finding("outbox", FAIL, f"{counted(failed, 'queued write')} {plural(failed, 'was', 'were')} refused by "
                                       f"the server when sent (first: "
                                       f"{first[1]} of {first[2]}: {first[3]})",
                       "see `mnemosync status`; write them again as the refusal says (they are not retried)")
    if pending:
        age = (time.time() * 1000 - oldest) / 1000 if oldest else 0
        summary = f"{counted(pending, 'write')} queued, the oldest {age:.0f} s ago"
        if ctx.stats is not None:
            return Finding("outbox", WARN, summary, "the server is reachable: `mnemosync sync` sends them")
        return Finding("outbox", OK, summary + "; they are sent when the server is back")
    return Finding("outbox", OK, "empty")


def _captures(ctx: _Context) -> Finding:
    from mnemosync.agent import captures

    try:
        waiting = captures.waiting(ctx.settings.resolved_cache_dir())
    except ClientError as exc:
        return Finding("captures", FAIL, str(exc), "keep the file (it holds captures not stored yet) and report it")
    if any(c.error for c in waiting):
        return Finding("captures", WARN, captures.summary(waiting),
                       "the local agent tries again every minute; `mnemosync ingest PATH` stores one now and says "
                       "why it fails")
    return Finding("captures", OK, captures.summary(waiting) or "every capture is stored")


def local_agent(status: dict | None, line: str, *, server_reached: bool = False) -> Finding:
    """The local agent's finding from its status (`mnemosync.agent.local_socket.agent_status`) and the line that
    describes it; `server_reached`: the server check reached the server."""
    if status is None or status.get("live"):
        return Finding("agent", OK, line)
    if status.get("boot_error"):
        return Finding("agent", WARN, f"{line}; boot: {status['boot_error']}",
                       "fix what the boot error names; the agent's log is beside its socket")
    if status.get("booted") and not status.get("cache_lag"):
        return Finding("agent", WARN, line, "it retries every second: run doctor again in a few seconds"
                       if server_reached else "the agent cannot reach the server: see the server check above")
    return Finding("agent", OK, line)
