"""What a memory is about: its sources (files, line ranges, symbols, commits, URLs) and how they are checked.

A source names a file by its path relative to a project root (optionally a
line range `start`-`end` or a `symbol` whose definition it cites), a git
commit, or a URL. When the writing agent has the file in its working tree it
records `sha256`, the SHA-256 of the cited text (the lines, the symbol's
definition block, else the whole file), so any later reader can tell whether
the code still says what the memory was written against (HaluMem, seed 002):

* verified: every cited part hashes as recorded;
* stale: a cited part changed (or the line range moved past the end);
* contradicted: a cited file, or the cited symbol, is gone;
* unverified: nothing to check (no hashed file source, or the tree is not there).

Sources travel in the add or update payload as a list of plain dicts holding
only the keys that are set, so they hash alike on every replica. Pure
functions; reading files is the caller's choice of root.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from mnemosync.kernel.errors import InvalidArgument
from mnemosync.kernel.one_line import CONTROLS, one_line, one_lines
from mnemosync.kernel.text_fields import check_one_line

STATUSES = ("verified", "stale", "contradicted", "unverified")
"""Verification statuses, from the best to the least known."""

MAX_SOURCES = 16
MAX_PATH_BYTES = 512
MAX_SYMBOL_CHARS = 128
MAX_URL_BYTES = 2_048
MAX_FILE_BYTES = 16 * 1024 * 1024
"""A cited file larger than this is neither hashed when a memory is written nor checked (never read whole)."""
HOOK_MAX_FILE_BYTES = 256 * 1024
"""The prompt hook hashes a cited file only up to this size (a stat and one small read; larger files are left to
`verify-memories`)."""

_SYMBOL = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$.]{0,127}$")
_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_KEYS = ("path", "line_start", "line_end", "symbol", "commit", "url", "sha256")


@dataclass(frozen=True)
class Verification:
    """The last verification of a memory's sources, as the changelog recorded it.

    Attributes:
        status: One of STATUSES ("" when never checked).
        paths: The cited paths that changed or are gone (empty when verified).
        checked_at_ms: When the verifying entry was written (0: never).
        checked_by: The agent that verified.
        sources_at_ms: When the sources were recorded (the write that set them).
    """

    status: str = ""
    paths: tuple[str, ...] = ()
    checked_at_ms: int = 0
    checked_by: str = ""
    sources_at_ms: int = 0


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"{name} must be a line number >= 1, got {value!r}")
    return int(value)


def validate_path(value: Any, name: str) -> str:
    """A relative POSIX path inside a project root: no leading '/', no '..', at most MAX_PATH_BYTES."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{name} must be a file path relative to the project root")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise InvalidArgument(f"{name} is longer than {MAX_PATH_BYTES} bytes")
    check_one_line(value, name)
    parts = PurePosixPath(value).parts
    if value.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", value) or ".." in parts:
        raise InvalidArgument(f"{name} must be relative to the project root without '..', got {value[:60]!r}")
    return str(PurePosixPath(value))


def validate_sources(values: Any, name: str = "sources") -> list[dict[str, Any]]:
    """Checks a list of sources and returns them as payload dicts (only the keys that are set).

    Raises:
        InvalidArgument: naming the source (`sources[2].line_end`) and the rule it broke.
    """
    if not isinstance(values, list | tuple):
        raise InvalidArgument(f"{name} must be a list of sources")
    if len(values) > MAX_SOURCES:
        raise InvalidArgument(f"{name} has {len(values)} sources; the limit is {MAX_SOURCES}")
    cleaned = []
    for i, raw in enumerate(values):
        at = f"{name}[{i}]"
        if not isinstance(raw, dict) or set(raw) - set(_KEYS):
            raise InvalidArgument(f"{at} must be a source with keys among {', '.join(_KEYS)}")
        s = {k: v for k, v in raw.items() if v not in (None, "", 0)}
        out: dict[str, Any] = {}
        if "path" in s:
            out["path"] = validate_path(s["path"], f"{at}.path")
        if "line_start" in s or "line_end" in s:
            start = _int(s.get("line_start"), f"{at}.line_start")
            end = _int(s.get("line_end", start), f"{at}.line_end")
            if end < start:
                raise InvalidArgument(f"{at}.line_end ({end}) must not be before line_start ({start})")
            out["line_start"], out["line_end"] = start, end
        if "symbol" in s:
            if not isinstance(s["symbol"], str) or not _SYMBOL.fullmatch(s["symbol"]):
                raise InvalidArgument(f"{at}.symbol must be an identifier of 1 to {MAX_SYMBOL_CHARS} characters "
                                      f"(letters, digits, _ $ .), got {str(s['symbol'])[:40]!r}")
            out["symbol"] = s["symbol"]
        if ("line_start" in out or "symbol" in out) and "path" not in out:
            raise InvalidArgument(f"{at}: a line range or symbol needs a path")
        if "line_start" in out and "symbol" in out:
            raise InvalidArgument(f"{at}: give a line range or a symbol, not both")
        if "commit" in s:
            if not isinstance(s["commit"], str) or not _COMMIT.fullmatch(s["commit"]):
                raise InvalidArgument(f"{at}.commit must be 7 to 64 lower-case hex digits")
            out["commit"] = s["commit"]
        if "url" in s:
            url = s["url"]
            if not isinstance(url, str) or not re.fullmatch(r"https?://\S+", url) or CONTROLS.search(url) \
                    or len(url.encode("utf-8", "surrogatepass")) > MAX_URL_BYTES:
                raise InvalidArgument(f"{at}.url must be an http(s) URL of at most {MAX_URL_BYTES} bytes")
            out["url"] = url
        if "sha256" in s:
            if "path" not in out or not isinstance(s["sha256"], str) or not _SHA256.fullmatch(s["sha256"]):
                raise InvalidArgument(f"{at}.sha256 must be 64 lower-case hex digits, on a source with a path")
            out["sha256"] = s["sha256"]
        if not out.keys() & {"path", "commit", "url"}:
            raise InvalidArgument(f"{at} must name a path, a commit or a url")
        cleaned.append(out)
    return cleaned


def parse(spec: str) -> dict[str, Any]:
    """A source from its command-line form: `path`, `path:10-20`, `path:12`, `path#symbol`, `commit:<sha>` or a URL.

    Raises:
        InvalidArgument: the form is none of these.
    """
    spec = spec.strip()
    if re.match(r"^https?://", spec):
        return validate_sources([{"url": spec}], "--source")[0]
    if spec.startswith("commit:"):
        return validate_sources([{"commit": spec.removeprefix("commit:")}], "--source")[0]
    source: dict[str, Any] = {}
    if "#" in spec:
        spec, source["symbol"] = spec.split("#", 1)
    match = re.match(r"^(.*):(\d+)(?:-(\d+))?$", spec)
    if match:
        spec, source["line_start"] = match[1], int(match[2])
        source["line_end"] = int(match[3] or match[2])
    source["path"] = spec
    return validate_sources([source], "--source")[0]


def describe(source: dict[str, Any]) -> str:
    """The command-line form of a source (the inverse of `parse`), with its commit."""
    if "path" not in source:
        return source.get("url") or f"commit:{source['commit']}"
    text = source["path"]
    if "line_start" in source:
        text += f":{source['line_start']}" + (f"-{source['line_end']}" if source["line_end"] != source["line_start"]
                                              else "")
    if "symbol" in source:
        text += f"#{source['symbol']}"
    return str(text + (f" @{source['commit'][:12]}" if "commit" in source else ""))


_DEFINITION = r"(?:def|class|function|func|fn|interface|type|struct|enum|const|let|var|async\s+def|" \
              r"async\s+function|export\s+(?:default\s+)?(?:async\s+)?(?:function|class|const|let|interface|type))"


def symbol_block(text: str, symbol: str) -> str | None:
    """The definition of `symbol` in `text`: from its defining line to the end of its block, or None if absent.

    Language-agnostic: the first line that defines the name (`def name`, `class name`, `function name`,
    `const name =`, `name(...) {` ...). A block with braces ends where they balance; otherwise it ends before the
    next non-blank line indented no deeper than the defining one (Python and YAML-like files)."""
    name = re.escape(symbol.rsplit(".", 1)[-1])
    pattern = re.compile(rf"^([ \t]*)(?:(?:public|private|protected|static|pub|export)\s+)*(?:{_DEFINITION}\s+{name}\b"
                         rf"|{name}\s*(?:=|:|\())", re.MULTILINE)
    match = pattern.search(text)
    if match is None:
        return None
    lines = text[match.start():].split("\n")
    indent = len(match[1].expandtabs())
    first = lines[0]
    if "{" in first or (len(lines) > 1 and lines[1].strip().startswith("{")):
        depth, taken = 0, []
        for line in lines:
            taken.append(line)
            depth += line.count("{") - line.count("}")
            if depth <= 0 and "{" in "".join(taken):
                break
        return "\n".join(taken)
    taken = [first]
    for line in lines[1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent and not line.lstrip().startswith((")", "]")):
            break
        taken.append(line)
    while taken and not taken[-1].strip():
        taken.pop()
    return "\n".join(taken)


def cited_text(data: bytes, source: dict[str, Any]) -> str | None:
    """The part of a file's bytes a source cites (lines, symbol block, or the whole file), or None when the symbol
    is gone or the line range starts past the end."""
    text = data.decode("utf-8", "replace")
    if "symbol" in source:
        return symbol_block(text, source["symbol"])
    if "line_start" in source:
        lines = text.split("\n")
        if source["line_start"] > len(lines):
            return None
        return "\n".join(lines[source["line_start"] - 1:source["line_end"]])
    return text


def digest(text: str) -> str:
    """SHA-256 of a cited text's UTF-8 bytes, lower-case hex."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def resolve(root: Path, relative: str) -> Path | None:
    """The regular file `relative` names under `root`, or None: it is missing, not a regular file (a FIFO, a
    device), or reached only by leaving `root` (a symbolic link that points out of the project). A source is read
    inside the project only, so nobody can ask this agent about files elsewhere on its machine."""
    base = Path(root).resolve()
    try:
        real = (base / relative).resolve(strict=True)
        info = real.stat()
    except (OSError, RuntimeError):
        return None
    return real if real.is_relative_to(base) and stat.S_ISREG(info.st_mode) else None


def read_bounded(file: Path, max_bytes: int = MAX_FILE_BYTES) -> bytes | None:
    """The bytes of `file` when it holds at most `max_bytes` (its size asked first, and read no further than that
    in case it grows), else None.

    Raises:
        OSError: it cannot be read.
    """
    with open(file, "rb") as handle:
        if os.fstat(handle.fileno()).st_size > max_bytes:
            return None
        data = handle.read(max_bytes + 1)
    return data if len(data) <= max_bytes else None


def part(source: dict[str, Any]) -> str:
    """The cited part as a reader names it: `path`, `path:10-20` or `path#symbol` (`describe` without the
    commit)."""
    return describe({k: v for k, v in source.items() if k != "commit"})


def _cite(root: Path, source: dict[str, Any]) -> tuple[str | None, str]:
    """(the cited text, "") for a file source found under `root`, else (None, why not) in words."""
    file = resolve(root, source["path"])
    if file is None:
        return None, "not found"
    try:
        data = read_bounded(file)
    except OSError as exc:
        return None, f"not readable ({exc.strerror or exc})"
    if data is None:
        return None, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB"
    cited = cited_text(data, source)
    if cited is None:
        if "symbol" in source:
            return None, f"no definition of {source['symbol']} in it"
        lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        return None, f"the file has {lines} line{'' if lines == 1 else 's'}"
    return cited, ""


def record(root: Path | None, sources: list[dict[str, Any]], commit: str = "", *,
           readable: Callable[[str], bool] | None = None) -> list[dict[str, Any]]:
    """The sources with `sha256` (and `commit`, when given and the source names none) filled in for every file
    found under `root` (`resolve`, at most MAX_FILE_BYTES); the rest as they were. What the writing agent does
    before sending a write. `readable(path)`: False for a path that must not be read (a file git ignores)."""
    out = []
    for source in sources:
        source = dict(source)
        if root is not None and "path" in source and (readable is None or readable(source["path"])):
            cited, _why = _cite(Path(root), source)
            if cited is not None:
                source["sha256"] = digest(cited)
                if commit and "commit" not in source:
                    source["commit"] = commit
        out.append(source)
    return out


def unrecorded(root: Path | None, sources: list[dict[str, Any]], *,
               readable: Callable[[str], bool] | None = None) -> list[str]:
    """For each file source `record` leaves without a hash, why, in a sentence a person reads at the command line:
    `src/auth.py:100-120 not found under /home/me/web (the file has 24 lines): recorded without a hash`. Empty
    when every file source is hashed."""
    notes = []
    for source in sources:
        if "path" not in source or "sha256" in source:
            continue
        if root is None:
            why = "no project folder to read it in"
        elif readable is not None and not readable(source["path"]):
            why = "a file git ignores is never read"
        else:
            why = _cite(Path(root), source)[1]
            why = "" if why == "not found" else why
        notes.append(f"{one_line(part(source), 200)} not found under {one_line(root, 200)}"
                     f"{f' ({why})' if why else ''}: recorded without a hash")
    return notes


@dataclass(frozen=True)
class Check:
    """The result of checking one memory's sources against a tree: a status, the paths that made it, and the cited
    parts that did (`path:10-20`, `path#symbol`: what a reader is told)."""

    status: str
    paths: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()


def check(root: Path | None, sources: list[dict[str, Any]], *, max_bytes: int | None = None,
          readable: Callable[[str], bool] | None = None) -> Check:
    """Checks hashed file sources against the files under `root` (see the module docstring for the statuses).

    A file is found as `resolve` finds it (inside `root`, never through a link out of it). With `max_bytes` a file
    larger than that is not read (the prompt hook's cheap check), and a file larger than MAX_FILE_BYTES never is:
    it counts as unchecked, as does a path `readable` refuses.
    """
    if root is None or not Path(root).is_dir():
        return Check("unverified")
    limit = min(max_bytes, MAX_FILE_BYTES) if max_bytes is not None else MAX_FILE_BYTES
    gone: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    checked = 0
    for source in sources:
        if "path" not in source or "sha256" not in source or (readable is not None and
                                                              not readable(source["path"])):
            continue
        file = resolve(Path(root), source["path"])
        if file is None:
            gone.append(source)
            continue
        try:
            data = read_bounded(file, limit)
        except OSError:
            gone.append(source)
            continue
        if data is None:
            continue
        cited = cited_text(data, source)
        checked += 1
        if cited is None:
            (gone if "symbol" in source else changed).append(source)
        elif digest(cited) != source["sha256"]:
            changed.append(source)
    if gone:
        return _found("contradicted", gone + changed)
    if changed:
        return _found("stale", changed)
    return Check("verified" if checked else "unverified")


def _found(status: str, sources: list[dict[str, Any]]) -> Check:
    return Check(status, tuple(dict.fromkeys(s["path"] for s in sources)),
                 tuple(dict.fromkeys(part(s) for s in sources)))


def staleness_note(sources: list[dict[str, Any]], verification: Verification | None, root: Path | None,
                   written_ms: int) -> str:
    """What a reader must be told before a memory is stated as fact: "" when nothing is known against it, else
    "may be stale: src/lib/api.ts:10-20 changed since this was written on 2026-10-02" (or "... is gone ...").

    The cited files are checked cheaply against `root` (HOOK_MAX_FILE_BYTES); without a tree, the last recorded
    verification speaks (its paths named by the parts the memory cites in them). One line: each part goes through
    `one_line`, at most three."""
    found = check(root, sources, max_bytes=HOOK_MAX_FILE_BYTES) if root is not None and sources else Check("unverified")
    if found.status in ("verified",):
        return ""
    if found.status == "unverified" and verification is not None and verification.status in ("stale", "contradicted"):
        cited = {p: [part(s) for s in sources if s.get("path") == p] for p in verification.paths}
        found = Check(verification.status, verification.paths,
                      tuple(dict.fromkeys(x for p in verification.paths for x in (cited[p] or [p]))))
    if found.status not in ("stale", "contradicted"):
        return ""
    day = time.strftime("%Y-%m-%d", time.gmtime((verification.sources_at_ms if verification and
                                                 verification.sources_at_ms else written_ms) / 1000))
    what = one_lines(found.parts, 120, most=3) or "its source"
    verb = "changed" if found.status == "stale" else "is gone or no longer has the cited code"
    return f"may be stale: {what} {verb} since this was written on {day}"
