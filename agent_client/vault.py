"""The markdown vault (issue 31, seed 004's format): memories as markdown files a person edits and keeps in git.

`export` writes one file per live memory, `graph/<type>/<slug>-<id prefix>.md`:
front matter between `---` lines, then the content. Each front matter value is
written as JSON, which YAML reads as well (a flow list, a quoted string), so
any YAML tool reads the files and this module needs no YAML parser (`sync` also
reads the YAML forms people write, see `mnemosync.agent.front_matter`):

    ---
    id: "2f1c0b7e-…"
    type: "procedure"
    title: "Deploy Major Domo to production"
    layer: "factual"
    scope: "project:web"
    tags: ["deploy", "docker"]
    importance: 0.8
    confidence: 0.9
    sources: ["src/deploy.sh#main"]
    author: "alice"
    updated_by: "bob"
    version: 3
    created: "2026-02-13T12:00:00Z"
    updated: "2026-02-14T09:30:00Z"
    relations: [{"target": "[[run-the-tests-9a0b1c2d]]", "type": "causal", "direction": "outgoing", …, "id": "9a0b…"}]
    ---

    Standard deploy workflow for the Major Domo Discord bot.

    ## Steps
    1. Run tests
    2. Build the docker image

A procedure's lists end the body as numbered lists under `## Preconditions`,
`## Steps` and `## Postconditions` (read back from there; seed 004's front
matter lists are read too, never both). A relation's target is a `[[link]]`
to its note, which a markdown editor follows, with its `id` beside it.
`title` is the content's first line (derived, not read back), except that a
new note's own `title` is kept: it becomes the content's first line. Beside the files,
`_index.json` (seed 004's index: each memory's title, type, tags, importance,
confidence, times, path and relations) and `_state.json`: for each file, the
memory id, the version it was written at, the SHA-256 of its bytes, and (once
settled) its size and `mtime_ns`.

`sync` reads a vault back incrementally by those hashes: a file with the size
and time of change the state recorded costs a stat (it is not read); one whose
time changed (touch, git checkout) but whose hash is the recorded one costs a
read and a hash, and its new time is recorded. Size and time are recorded only
for a file that last changed at least `SETTLED_NS` before, so an edit within
the same clock tick is still seen; an edit that keeps the size and puts the old
time back (`touch -r`) is not. An edited file becomes
an update of content, type, tags, importance, confidence and procedure lists
made from the version `_state.json` recorded for the file (an older `version`
the file names wins, a newer one never: a stale note claiming the newest version
must not overwrite a change it never saw), so a change another agent made since
becomes a conflict, never a silent overwrite (a procedure whose lists were all deleted
from the file is no longer one); a new file becomes an add (under its `id`
when it names one; its scope from `scope`, else the default); a recorded file
that is gone becomes a forget from its recorded version. Every write is this
agent's.

A file is the memory its front matter `id` names (else the one recorded at
its path). A file whose id the state records under a path that is gone was
renamed or moved (`git mv`, into another type folder too; its `type` stays
the front matter's): its new path is recorded, with an update only when it
differs from the memory. A second file naming an id another file already is
(a copy) is refused. A file the state does not record that names a memory
this agent can read is adopted: compared with that memory (content, type,
tags, importance, confidence, procedure lists), recorded without a write when
it matches, written again as the memory now is when it is the memory as it
was at its older `version`, unedited (a stale copy, not an edit), else an
update from its `version` (required then). That is how a
vault without `_state.json` (a fresh clone: the state is kept out of git)
syncs; without the state a deleted file cannot be seen, so nothing is
forgotten, and the report says so. An id no memory readable here has is an
add under that id. Written and new files are written again from the memory as it now is,
so they carry its id and version (a file whose update became a conflict keeps
what its editor wrote, until the conflict is resolved); the index and state are
rewritten, and the report names every note it wrote. A note of a memory an admin
redacted is removed (its text, its file name and its line in the state), and
the report says so. Relations and sources are shown, not read back (`mnemosync
graph link` changes links).

Bounded: a note larger than `MAX_NOTE_BYTES` is never read, a front matter
value nested deeper than `front_matter.MAX_DEPTH` is refused before it is
parsed; each is named in the report and the rest of the vault syncs.

The vault holds regular files only, so it reads and writes nothing outside it
(issue 33; a vault is often a git clone someone else can push links into):
`sync` reads no note that is a symbolic link and enters no linked folder; it
names each such link in the report (as leading out of the vault when it does)
and leaves the memories recorded there as they are; every write (a note, `_index.json`, `_state.json`)
first replaces a link standing where the file or one of its folders goes by
the regular file or folder (the link's target is left untouched), and a stale
note behind a link or a recorded path that leaves the vault is never deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from mnemosync.agent.front_matter import FRONT, parse
from mnemosync.kernel import procedures, projections, source_refs
from mnemosync.kernel.entry import REDACTED_TEXT
from mnemosync.kernel.errors import CodedError, InvalidArgument
from mnemosync.kernel.memory import LAYERS, MemoryRow
from mnemosync.kernel.one_line import one_line

INDEX_FILE = "_index.json"
STATE_FILE = "_state.json"
MAX_STATE_BYTES = 64 * 1024 * 1024
"""Largest `_state.json` read (a line per note: a vault of a hundred thousand notes stays well under it)."""
_SLUG = re.compile(r"[^a-z0-9]+")
READ_BACK = ("type", "tags", "importance", "confidence", *procedures.FIELDS)
"""Front matter fields `sync` turns into the memory's fields (with the content)."""


@dataclass
class SyncReport:
    """What a sync did: memory ids by what happened to them, the files it could not read, and the conflicts."""

    updated: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    unchanged: int = 0
    conflicts: list[tuple[str, int]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    moved: list[tuple[str, str, str]] = field(default_factory=list)
    """(memory id, old path, new path) of each file renamed or moved since the last sync."""
    adopted: list[str] = field(default_factory=list)
    """Memories whose files the state did not record and that matched them: recorded, nothing written."""
    state_missing: bool = False
    """The vault had no _state.json: files were adopted by their ids, and deleted files could not be seen."""
    written: list[str] = field(default_factory=list)
    """The notes this sync wrote (again): each path once, in order."""
    removed: list[tuple[str, str]] = field(default_factory=list)
    """(memory id, path) of each note removed because an admin redacted its memory: the note, its file name (a
    slug of the text) and its lines in the state and index go with it."""


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def title(content: str) -> str:
    """The first line of the content, at most 80 characters."""
    first = content.strip().splitlines()[0] if content.strip() else ""
    return first if len(first) <= 80 else first[:79].rstrip() + "…"


def relative_path(m: MemoryRow) -> str:
    """Where a memory's file goes: graph/<type>/<slug of its title>-<first 8 of its id>.md."""
    slug = _SLUG.sub("-", title(m.content).lower()).strip("-")[:60].rstrip("-") or "memory"
    return f"graph/{m.type}/{slug}-{m.id[:8]}.md"


def relations(m: MemoryRow) -> list[dict[str, Any]]:
    """The memory's outgoing links as seed 004's relation fields (targets by id: `_index.json`'s form)."""
    return [{"target": k.target_id, "type": k.relation, "direction": "outgoing", "strength": k.weight,
             **({"context": k.reason} if k.reason else {})} for k in m.links]


def front_matter(m: MemoryRow, names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The front matter of a memory's file, in order. `names`: memory id -> its note's file name without `.md`,
    so a relation's target is a `[[link]]` a markdown editor follows (with the target's `id` beside it); a
    target without a note here keeps its id."""
    fields: dict[str, Any] = {
        "id": m.id, "type": m.type, "title": title(m.content), "layer": LAYERS.get(m.layer, str(m.layer)),
        "scope": m.scope, "tags": list(m.tags), "importance": m.importance, "confidence": m.confidence,
        "sources": [source_refs.describe(s) for s in m.sources], "author": m.author_agent,
        "updated_by": m.updated_by, "version": m.version, "created": _iso(m.created_at_ms),
        "updated": _iso(m.updated_at_ms)}
    names = names or {}
    fields["relations"] = [{**r, "target": f"[[{names[r['target']]}]]", "id": r["target"]} if r["target"] in names
                           else r for r in relations(m)]
    return fields


def render(m: MemoryRow, names: Mapping[str, str] | None = None) -> str:
    """A memory's markdown file: front matter (`front_matter`), the content, then its procedure's lists as
    numbered lists under `## Preconditions`, `## Steps` and `## Postconditions` (`procedure_lines`)."""
    lines = [FRONT, *(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in front_matter(m, names).items()),
             FRONT, ""]
    body = m.content.rstrip("\n")
    if m.procedure:
        body += "\n\n" + "\n".join(procedure_lines(m.procedure))
    return "\n".join(lines) + body + "\n"


PROCEDURE_HEADINGS = {"preconditions": "## Preconditions", "steps": "## Steps", "postconditions": "## Postconditions"}
"""The headings of a procedure's lists at the end of a note's body, in order."""
_ITEM = re.compile(r"^\d+[.)]\s+(.*\S)\s*$")


def procedure_lines(p: procedures.Procedure) -> list[str]:
    """A procedure's lists as a note's body ends with them: each non-empty list under its heading, numbered."""
    lines: list[str] = []
    for name, heading in PROCEDURE_HEADINGS.items():
        items = getattr(p, name)
        if items:
            lines += [*([""] if lines else []), heading,
                      *(f"{i}. {one_line(item, procedures.MAX_ITEM_BYTES)}" for i, item in enumerate(items, 1))]
    return lines


def split_procedure(body: str, name: str) -> tuple[str, dict[str, list[str]]]:
    """(content, procedure lists) of a note's body: the lists are the numbered lists under the headings of
    `PROCEDURE_HEADINGS` that end the body (nothing but those headings, their items and blank lines after the
    first of them); the content is what comes before.

    Raises:
        InvalidArgument: a heading comes twice, or a line under one is not a numbered item.
    """
    lines = body.split("\n")
    start = len(lines)
    for at in range(len(lines) - 1, -1, -1):
        line = lines[at].strip()
        if line in PROCEDURE_HEADINGS.values():
            start = at
        elif line and not _ITEM.match(line):
            break
    lists: dict[str, list[str]] = {}
    current: list[str] | None = None
    by_heading = {heading: key for key, heading in PROCEDURE_HEADINGS.items()}
    for line in (x.strip() for x in lines[start:]):
        if line in by_heading:
            if by_heading[line] in lists:
                raise InvalidArgument(f"{name}: the heading {line!r} comes twice")
            current = lists[by_heading[line]] = []
        elif line:
            item = _ITEM.match(line)
            assert current is not None and item is not None  # the walk above only kept such lines
            current.append(item.group(1))
    return "\n".join(lines[:start]).strip("\n"), lists


def live_memories(conn, *, scopes: tuple[str, ...] = ()) -> list[MemoryRow]:
    """Every live memory of the cache (of `scopes` when given), oldest first."""
    where = f" AND scope IN ({', '.join('?' for _ in scopes)})" if scopes else ""
    ids = [i for (i,) in conn.execute(f"SELECT id FROM memories WHERE archived = 0{where} ORDER BY num", scopes)]
    return [m for m in (projections.get_memory(conn, i) for i in ids) if m is not None]


def _parts(relative: str) -> tuple[str, ...]:
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise InvalidArgument(f"{relative}: not a path inside the vault")
    return path.parts


def _writable(root: Path, relative: str) -> Path:
    """Where `relative` is written: each link standing where one of its folders or the file itself goes is removed
    (its target is left alone), so the write lands in the vault, never through a link."""
    path = root
    for part in _parts(relative):
        path = path / part
        if path.is_symlink():
            path.unlink()
    return path


def _linked(root: Path, relative: str) -> bool:
    """Whether `relative` is reached through a symbolic link (it or one of its folders below `root`)."""
    path = root
    for part in _parts(relative):
        path = path / part
        if path.is_symlink():
            return True
    return False


def _notes(root: Path) -> tuple[list[Path], list[tuple[str, str]]]:
    """The vault's notes (`*.md` below `root`, sorted) that are regular files reached without a link, and
    (path, why) for each link found instead: a linked note or a linked folder, which is not entered."""
    notes, links = [], []
    base = root.resolve()
    for folder, folders, files in os.walk(root):
        here = Path(folder)
        for name in sorted(folders):
            if (here / name).is_symlink():
                links.append((here / name, "a symbolic link to a folder"))
        folders[:] = [name for name in folders if not (here / name).is_symlink()]
        for name in files:
            if name.endswith(".md"):
                (links.append((here / name, "a symbolic link")) if (here / name).is_symlink()
                 else notes.append(here / name))
    refused = []
    for path, what in links:
        relative = path.relative_to(root).as_posix()
        out = not path.resolve().is_relative_to(base)
        refused.append((relative, f"{relative}: {what}{' out of the vault' if out else ''}; the vault reads and "
                                  "writes regular files only, and nothing is read or written through a link"))
    return sorted(notes), sorted(refused)


def _names(state: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Memory id -> its note's file name without `.md`: what a `[[link]]` to it says."""
    return {recorded["id"]: PurePosixPath(relative).stem for relative, recorded in state.items()}


def _write_file(root: Path, relative: str, m: MemoryRow, names: Mapping[str, str] | None = None) -> str:
    path = _writable(root, relative)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = render(m, names).encode("utf-8")
    path.write_bytes(data)
    return _sha(data)


def _write_index(root: Path, state: dict[str, dict[str, Any]], memories: dict[str, MemoryRow]) -> None:
    now = _iso(int(time.time() * 1000))
    entries = {}
    for relative, recorded in sorted(state.items()):
        m = memories.get(recorded["id"])
        if m is not None:
            entries[m.id] = {"title": title(m.content), "type": m.type, "tags": list(m.tags),
                             "importance": m.importance, "confidence": m.confidence, "created": _iso(m.created_at_ms),
                             "updated": _iso(m.updated_at_ms), "path": relative, "relations": relations(m)}
    index = {"version": 2, "updated": now, "count": len(entries), "entries": entries}
    _writable(root, INDEX_FILE).write_text(json.dumps(index, indent=2, ensure_ascii=False) + "\n")
    files = {"version": 1, "updated": now, "files": dict(sorted(state.items()))}
    _writable(root, STATE_FILE).write_text(json.dumps(files, indent=2) + "\n")


def load_state(root: Path) -> dict[str, dict[str, Any]]:
    """The state file's files: relative path -> {id, version, sha256} (empty when there is none yet)."""
    path = root / STATE_FILE
    if path.is_symlink() or not path.exists():  # a linked state is not the vault's own: it is written anew
        return {}
    try:
        if path.stat().st_size > MAX_STATE_BYTES:
            raise ValueError(f"it is larger than {MAX_STATE_BYTES // (1024 * 1024)} MiB")
        return dict(json.loads(path.read_text())["files"])
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise InvalidArgument(f"{path} is not a vault state file ({exc}); remove it and export again") from None


def export(client, root: Path | str, *, scopes: tuple[str, ...] = ()) -> int:
    """Writes every live memory of this agent's cache (of `scopes`) into the vault at `root`, with its index and
    state (files of memories no longer live are removed). Returns how many files it wrote."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    client.sync()
    memories = client.cache.read(live_memories, scopes=tuple(scopes))
    old = load_state(root)
    names = {m.id: PurePosixPath(relative_path(m)).stem for m in memories}
    state = {}
    for m in memories:
        relative = relative_path(m)
        state[relative] = {"id": m.id, "version": m.version, "sha256": _write_file(root, relative, m, names)}
    for relative in set(old) - set(state):
        try:
            if not _linked(root, relative):
                (root / relative).unlink(missing_ok=True)
        except InvalidArgument:  # a recorded path that leaves the vault: nothing to delete there
            continue
    _write_index(root, state, {m.id: m for m in memories})
    return len(memories)


def _fields(front: dict[str, Any], body: str, name: str) -> dict[str, Any]:
    """The fields of a write made from the file `name`: its procedure's lists from the end of its body
    (`split_procedure`), or from its front matter as seed 004 writes them, never from both."""
    content, lists = split_procedure(body, name)
    given = [key for key in procedures.FIELDS if key in front]
    if lists and given:
        raise InvalidArgument(f"{name}: {given[0]} is given in the front matter and the procedure's lists in the "
                              "body; keep them in one place (the body's numbered lists)")
    fields: dict[str, Any] = {"content": content, **lists}
    for key in READ_BACK:
        if key in front:
            fields[key] = front[key]
    if "tags" in fields and not isinstance(fields["tags"], list):
        raise InvalidArgument(f"{name}: tags must be a list such as [deploy, ci]")
    for key in procedures.FIELDS:
        if key in fields and not isinstance(fields[key], list):
            raise InvalidArgument(f"{name}: {key} must be a list of texts")
    return fields


@dataclass
class _Note:
    """A vault file this sync read: its path, bytes, what the state recorded there, and what it says."""

    relative: str
    data: bytes
    recorded: dict[str, Any] | None
    seen: os.stat_result
    """Its size and time of change, taken before it was read."""
    front: dict[str, Any] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    claim: str | None = None
    """The memory the file is: the id it names, else the one recorded at its path, else none (a new memory)."""


_ID_LINE = re.compile(r'^id:\s*"?([0-9A-Za-z][0-9A-Za-z_.:-]*)"?\s*$', re.MULTILINE)


def _read_bounded(path: Path) -> bytes:
    """A note's bytes, at most MAX_NOTE_BYTES (read no further, in case it grew since its size was taken).

    Raises:
        InvalidArgument: it is larger.
    """
    with open(path, "rb") as handle:
        data = handle.read(MAX_NOTE_BYTES + 1)
    if len(data) > MAX_NOTE_BYTES:
        raise InvalidArgument(f"{path.name} is larger than {MAX_NOTE_BYTES // 1024} KiB, more than any memory "
                              "holds; it is not read")
    return data


def _read_note(root: Path, path: Path, seen: os.stat_result, state: dict[str, dict[str, Any]]) -> _Note:
    relative = path.relative_to(root).as_posix()
    note = _Note(relative, _read_bounded(path), state.get(relative), seen)
    try:
        note.front, content = parse(note.data.decode("utf-8"), relative)
        note.fields = _fields(note.front, content, relative)
    except (CodedError, UnicodeDecodeError, ValueError, TypeError, RecursionError) as exc:
        note.error = str(exc) if not isinstance(exc, RecursionError) else f"{relative}: its front matter nests too deep"
        named = _ID_LINE.search(note.data.decode("utf-8", "replace"))  # so a broken moved file forgets nothing
        note.claim = named.group(1) if named else (note.recorded or {}).get("id")
        return note
    named = note.front.get("id")
    note.claim = named if isinstance(named, str) and named else (note.recorded or {}).get("id")
    return note


MAX_NOTE_BYTES = 1024 * 1024
"""Largest note read: a memory's content, procedure and front matter stay far below it."""
SETTLED_NS = 2_000_000_000
"""How long before it is recorded a file must last have changed for its size and time to be trusted: an edit in
the same tick of a coarse file system clock (FAT's is 2 s) could otherwise keep both."""


def _entry(memory_id: str, version: int, sha: str, seen: os.stat_result) -> dict[str, Any]:
    """A file's state: its memory, version and SHA-256, and its size and time of change when they can be trusted
    to show a later edit (see `SETTLED_NS`)."""
    entry: dict[str, Any] = {"id": memory_id, "version": version, "sha256": sha}
    if seen.st_mtime_ns <= time.time_ns() - SETTLED_NS:
        entry.update(size=seen.st_size, mtime_ns=seen.st_mtime_ns)
    return entry


def _same_stat(recorded: dict[str, Any], seen: os.stat_result) -> bool:
    """Whether a file has the size and time of change its state recorded: then it is not read again."""
    return recorded.get("size") == seen.st_size and recorded.get("mtime_ns") == seen.st_mtime_ns


def _shown(m: MemoryRow) -> dict[str, Any]:
    """The fields of memory `m` a file can change, as `_differs` compares them."""
    return {"content": m.content.strip("\n"), "type": m.type, "tags": list(m.tags), "importance": m.importance,
            "confidence": m.confidence,
            **{name: list(getattr(m.procedure, name, None) or []) for name in procedures.FIELDS}}


def _differs(fields: dict[str, Any], shown: dict[str, Any]) -> bool:
    """Whether a file's fields would change a memory showing `shown` (only what the file names; procedure lists it
    leaves out are empty)."""
    given = {name: [] for name in procedures.FIELDS} | fields
    if isinstance(given.get("tags"), list):  # stored lower-cased, sorted and once each
        given["tags"] = sorted({str(tag).lower() for tag in given["tags"]})
    return any(given[key] != shown[key] for key in given)


def _unedited_older(client, fields: dict[str, Any], known: MemoryRow, version: Any) -> bool:
    """Whether a file is memory `known` as it showed at `version`, older than now, unedited: a stale copy (a clone
    of a vault exported before the memory changed), not an edit, so not a conflict. Its content, type, tags,
    importance and confidence are compared with that version (the server's history of the memory); its procedure
    lists, which the history does not hold, with the memory now. False when the history cannot be read."""
    if isinstance(version, bool) or not isinstance(version, int) or not 0 < version < known.version:
        return False
    try:
        history = client.remote.memory_history(known.id)
    except CodedError:
        return False
    then = [v.shown.state for v in history.versions if v.shown.version == version]
    if not then:
        return False
    shown = _shown(known) | {"content": str(then[-1]["content"]).strip("\n"), "type": then[-1]["type"],
                             "tags": list(then[-1]["tags"]), "importance": then[-1]["importance"],
                             "confidence": then[-1]["confidence"]}
    return not _differs(fields, shown)


def sync(client, root: Path | str) -> SyncReport:
    """Reads the vault at `root` back into memory (see the module docstring). Files it cannot read are listed in
    the report's `refused` (path, why) and left for the next sync."""
    root = Path(root)
    if not root.is_dir():
        raise InvalidArgument(f"{root} is not a directory")
    state_file = root / STATE_FILE
    report = SyncReport(state_missing=state_file.is_symlink() or not state_file.exists())
    state = load_state(root)
    recorded_at = {r["id"]: relative for relative, r in state.items()}
    kept: dict[str, dict[str, Any]] = {}
    touched: list[str] = []
    notes, links = _notes(root)
    for relative, why in links:
        report.refused.append((relative, why))
        kept.update({r: state[r] for r in state if r == relative or r.startswith(relative + "/")})
    changed: list[_Note] = []
    claims: dict[str, list[str]] = {}
    unchanged: set[str] = set()
    for path in notes:
        relative = path.relative_to(root).as_posix()
        recorded = state.get(relative)
        seen = path.stat()
        if seen.st_size > MAX_NOTE_BYTES:  # never read: one oversized note must not hold up everyone's sync
            report.refused.append((relative, f"{relative}: {seen.st_size:,} bytes, larger than "
                                             f"{MAX_NOTE_BYTES // 1024} KiB, more than any memory holds; not read"))
            if recorded is not None:
                kept[relative] = recorded
                claims.setdefault(recorded["id"], []).append(relative)
            continue
        if recorded is not None and (_same_stat(recorded, seen) or recorded["sha256"] == _sha(_read_bounded(path))):
            report.unchanged += 1
            unchanged.add(relative)
            kept[relative] = _entry(recorded["id"], recorded["version"], recorded["sha256"], seen)
            claims.setdefault(recorded["id"], []).append(relative)
            continue
        note = _read_note(root, path, seen, state)
        changed.append(note)
        if note.claim:
            claims.setdefault(note.claim, []).append(relative)
    owner = {mid: recorded_at[mid] if recorded_at.get(mid) in paths else paths[0] for mid, paths in claims.items()}
    synced = False
    for note in changed:
        relative = note.relative
        if note.error:
            report.refused.append((relative, note.error))
            continue
        if note.claim and owner[note.claim] != relative:
            report.refused.append((relative, f"{relative}: names memory {note.claim}, which is already the vault "
                                             f"file {owner[note.claim]}; a copy is not read (remove its id line "
                                             "to add it as a new memory)"))
            continue
        old = recorded_at.get(note.claim) if note.claim else None
        old = None if old == relative else old
        if old is not None and state[old]["sha256"] == _sha(note.data):
            kept[relative] = _entry(state[old]["id"], state[old]["version"], state[old]["sha256"], note.seen)
            report.moved.append((state[old]["id"], old, relative))
            continue
        if not synced and note.claim and (note.recorded or {}).get("id") != note.claim:
            client.sync()  # the memories this agent can read now, to compare a moved or unknown file with
            synced = True
        try:
            result = _write_note(client, note, None if old is None else state[old], report)
        except (CodedError, ValueError, TypeError) as exc:
            report.refused.append((relative, str(exc)))
            continue
        if old is not None:
            report.moved.append((result.memory_id, old, relative))
        if result.written is None:
            kept[relative] = _entry(result.memory_id, result.version, _sha(note.data), note.seen)
            if result.refresh:
                touched.append(relative)
            continue
        written = result.written
        kept[relative] = _entry(written.memory_id, written.version, _sha(note.data), note.seen)
        if written.conflict_id:  # the file keeps what its editor wrote; `mnemosync conflicts` settles it
            report.conflicts.append((written.memory_id, written.conflict_id))
        else:
            touched.append(relative)
    kept_ids = {r["id"] for r in kept.values()}
    for relative, recorded in sorted(state.items()):
        if recorded["id"] in kept_ids:  # its file is recorded where it is now
            continue
        if recorded["id"] in claims:  # a file names it but could not be read: kept, tried again next time
            kept.setdefault(relative, recorded)
            continue
        try:
            client.forget(recorded["id"], base_version=recorded["version"],
                          reason=f"deleted from the vault ({relative})")
        except CodedError as exc:  # e.g. forgotten already: kept in the state, named, tried again next time
            report.refused.append((relative, str(exc)))
            kept.setdefault(relative, recorded)
            continue
        report.forgotten.append(recorded["id"])
    client.sync()
    _remove_redacted(client, root, claims, kept, report)
    report.unchanged -= len(unchanged & {path for _, path in report.removed})
    memories = {m.id: m for m in client.cache.read(live_memories)}
    names = _names(kept)
    for relative in dict.fromkeys(touched):
        m = memories.get(kept[relative]["id"])
        if m is not None:
            sha = _write_file(root, relative, m, names)
            kept[relative] = _entry(m.id, m.version, sha, (root / relative).stat())
            report.written.append(relative)
    _write_index(root, kept, memories)
    return report


def _remove_redacted(client, root: Path, claims: Mapping[str, list[str]], kept: dict[str, dict[str, Any]],
                     report: SyncReport) -> None:
    """Removes each note of a memory an admin redacted (`claims`: memory id -> the notes that are it), so the
    secret leaves this vault's files (the note, its file name, a slug of the text, and its line in the state) as
    it left every cache; a note behind a link is left where it is, and named."""
    for memory_id, paths in sorted(claims.items()):
        m = client.cache.get(memory_id)
        if m is None or not (m.archived and m.content == REDACTED_TEXT):
            continue
        for relative in paths:
            kept.pop(relative, None)
            if _linked(root, relative):
                report.refused.append((relative, f"{relative}: its memory was redacted, but the note is reached "
                                                 "through a link; remove it by hand"))
                continue
            (root / relative).unlink(missing_ok=True)
            report.removed.append((memory_id, relative))
        report.refused[:] = [(path, why) for path, why in report.refused if path not in paths or "redacted" in why]


@dataclass
class _Outcome:
    """What a file became: its memory and version, and the write that made them (None: nothing was written)."""

    memory_id: str
    version: int
    written: Any = None
    refresh: bool = False
    """Nothing was written but the file is an older version of its memory: it is written again as it is now."""


def _write_note(client, note: _Note, moved_from: dict[str, Any] | None, report: SyncReport) -> _Outcome:
    """What a changed, moved (`moved_from`: the state of its old path), adopted or new file makes (recorded in
    `report`): an update from its version when it differs from its memory, nothing when a moved or adopted file
    matches it, an add when it names no memory this agent knows."""
    mid, fields = note.claim, dict(note.fields)
    if mid is None:
        return _add(client, note, fields, report)
    base: Any
    if note.recorded is not None and note.recorded["id"] == mid:  # edited in place: from what this vault wrote
        base = _edited_from(note.front.get("version"), note.recorded["version"])
    else:
        known = client.cache.get(mid)
        if known is None and moved_from is None:
            return _add(client, note, fields, report)
        if known is not None and known.archived:
            raise InvalidArgument(f"{note.relative}: memory {mid} was forgotten; delete the file, or remove its id "
                                  "line to add it as a new memory")
        if known is not None and not _differs(fields, _shown(known)):
            if moved_from is None:
                report.adopted.append(mid)
            return _Outcome(mid, known.version)
        if known is not None and _unedited_older(client, fields, known, note.front.get("version")):
            if moved_from is None:
                report.adopted.append(mid)
            return _Outcome(mid, known.version, refresh=True)
        base = (_edited_from(note.front.get("version"), moved_from["version"]) if moved_from is not None
                else note.front.get("version"))
        if not base:
            raise InvalidArgument(f"{note.relative}: names memory {mid} but no version; add the version the file "
                                  "was edited from (`version: N`), so a change made since becomes a conflict")
    known = client.cache.get(mid)
    if known is not None and known.procedure and not any(k in fields for k in procedures.FIELDS):
        fields.update({name: [] for name in procedures.FIELDS})  # its lists were deleted from the file
    written = client.update(mid, base_version=int(base), **fields)
    report.updated.append(mid)
    return _Outcome(mid, written.version, written)


def _edited_from(claimed: Any, recorded: int) -> int:
    """The version an edit in place was made from: what `_state.json` recorded this vault wrote, or an older
    version the file names (a file put back from history). Never a newer one the file claims: a stale note
    saying it is the newest version would overwrite a change it never saw."""
    if isinstance(claimed, int) and not isinstance(claimed, bool) and 0 < claimed < recorded:
        return claimed
    return recorded


def _add(client, note: _Note, fields: dict[str, Any], report: SyncReport) -> _Outcome:
    """A new memory from a file: under the id it names, in its `scope` and `layer` when it gives them."""
    front = note.front
    named = front.get("title")
    if isinstance(named, str) and named.strip() and title(fields["content"]) != named.strip():
        fields["content"] = f"{named.strip()}\n\n{fields['content']}".strip("\n")  # the title a person gave it
    extra: dict[str, Any] = {"memory_id": note.claim} if note.claim else {}
    if isinstance(front.get("scope"), str) and front["scope"]:
        extra["scope"] = front["scope"]
    if isinstance(front.get("layer"), str | int) and front["layer"]:
        extra["layer"] = front["layer"]
    steps = {k: fields.pop(k) for k in procedures.FIELDS if k in fields}
    written = client.add(fields.pop("content"), **fields, **steps, **extra)
    report.added.append(written.memory_id)
    return _Outcome(written.memory_id, written.version, written)
