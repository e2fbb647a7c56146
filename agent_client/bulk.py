"""Bulk import and export: memories arriving from elsewhere, and this agent's memories as a file.

Sources (`read_source` picks one from the path):

* JSONL in mnemosync's own format (what `export` writes): one memory per line with
  its id, scope, type, layer, tags, content, importance, confidence, protected,
  event time, links, and who wrote it and when. Imported, the memories keep
  their ids, so an export imports back identically, and their writers and times
  as their origin (`mnemosync.kernel.origin`): the importer is the writer of
  record, the origin says who wrote it first (an origin the line already
  carries, from an earlier import, is kept).
* The official MCP memory server's `memory.jsonl` (`@modelcontextprotocol/server-memory`):
  every observation of an entity becomes a memory ("NAME: observation", tagged
  with the entity's name and type; an entity without observations becomes one
  memory naming it), and every relation a link between the entities' first memories.
* A folder of markdown notes (basic-memory, Obsidian): one memory per note, its front
  matter's `type`, `tags` and `scope` kept. Claude Code's `CLAUDE.md` and `MEMORY.md`
  hold many facts each: every bullet becomes a memory, tagged with its heading.

Resumable: an item's op_id and memory id are derived from its source (file,
entity and position, and the content), so running an interrupted import again
writes nothing twice: items the agent's cache already holds are skipped before
the model (`still_to_send`), and the server answers any other op_id it has seen
as a replay.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemosync.kernel import links, procedures, secrets_scan
from mnemosync.kernel.memory import MemoryRow

NAMESPACE = uuid.UUID("6d1c3c8e-5a7e-4f0b-9a51-3b8f0d3b2a10")
"""The uuid5 namespace of ids derived from a source."""


@dataclass(frozen=True)
class Item:
    """One memory to import.

    `key` names it in its source (stable across runs); `memory_id` is kept when
    the source has one (mnemosync's own export), else derived from `key`.
    `links` are (target key, edge type, weight or 0 for unset, reason) to other items of the same import;
    relation names from other tools and older exports read as their nearest type (`mnemosync.kernel.links`).
    """

    key: str
    content: str
    scope: str | None = None
    type: str = "fact"
    tags: tuple[str, ...] = ()
    layer: int | str | None = None
    importance: float | None = None
    confidence: float | None = None
    protected: bool = False
    event_time_ms: int | None = None
    memory_id: str | None = None
    links: tuple[tuple[str, str, float, str], ...] = ()
    procedure: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """A procedure's lists by name (steps, preconditions, postconditions; issue 31), those that are set."""
    sources: tuple[dict, ...] = ()
    """What it is about, with the hashes recorded when it was first written (issue 31)."""
    origin: dict | None = None
    """Who wrote it and when where it was exported from (`mnemosync.kernel.origin`; None: not known)."""

    def id(self) -> str:
        """The memory id it is written under."""
        return self.memory_id or str(uuid.uuid5(NAMESPACE, f"memory\n{self.key}"))

    def op_id(self, agent_id: str) -> str:
        """The op_id of its add: the same on every run with the same content."""
        return str(uuid.uuid5(NAMESPACE, f"add\n{agent_id}\n{self.key}\n{self.content}"))


def still_to_send(items: Sequence[Item], stored: Callable[[str], MemoryRow | None]) -> list[Item]:
    """The items whose memory `stored` (the caught-up cache's get) does not already hold with the same content.

    Such an item was imported by an earlier run: the server would answer its op_id as a replay. Skipping it
    before the model saves the embedding (a rerun of a whole import costs only these lookups), and avoids a
    false refusal: embedded in another batch (a folder that gained notes shifts every batch) its vector may
    differ in the last bits, which the server, comparing the request with the first one, would take for a
    different operation under the same op_id.
    """
    todo = []
    for item in items:
        memory = stored(item.id())
        if memory is None or memory.content != item.content:
            todo.append(item)
    return todo


@dataclass
class Summary:
    """What an import did: counts, and every refusal with its reason."""

    written: int = 0
    replayed: int = 0
    """Already imported by an earlier run (same op_id): nothing written."""
    deduplicated: int = 0
    """A memory in the same scope already said exactly this: not written."""
    links: int = 0
    links_unchanged: int = 0
    """Links the memory already had with the same weight and reason: not written again."""
    refused: list[tuple[str, str]] = field(default_factory=list)
    """(item key, why) of every item the client or the server refused (secrets, sizes, governance)."""

    def to_json(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {"written": self.written, "replayed": self.replayed, "deduplicated": self.deduplicated,
                "links": self.links, "links_unchanged": self.links_unchanged,
                "refused": [{"key": k, "reason": r} for k, r in self.refused]}


Progress = Callable[[int, int], None]
"""progress(done, total) while importing."""


def read_source(path: Path) -> list[Item]:
    """The items of a file or folder: a folder of markdown notes, MCP memory JSONL or mnemosync JSONL (told apart by
    their lines), or one markdown file.

    Raises:
        ValueError: the file is neither, naming the line that is not understood.
    """
    path = Path(path)
    if path.is_dir():
        return list(_markdown_folder(path))
    if path.suffix.lower() in (".md", ".markdown"):
        return list(_markdown_file(path, path.parent))
    numbered = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                numbered.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
            except RecursionError:
                raise ValueError(f"{path}:{number}: JSON nested too deeply to be a memory") from None
    records = [r for _, r in numbered]
    if records and all(_mcp_shaped(r) for r in records):
        return _mcp_memory(records)
    return [_own(r, f"{path}:{n}") for n, r in numbered]


def _mcp_shaped(record: Any) -> bool:
    """An MCP memory server line: an entity (a name) or a relation (from and to). A mnemosync export of memories
    whose type is "entity" carries an id and content instead, and is not one."""
    if not isinstance(record, dict) or "content" in record:
        return False
    return (record.get("type") == "entity" and "name" in record) or (
        record.get("type") == "relation" and "from" in record and "to" in record)


def _own(record: dict, where: str) -> Item:
    if not isinstance(record, dict) or not isinstance(record.get("content"), str) or not record.get("id"):
        raise ValueError(f"{where}: expected a memory with at least id and content (mnemosync export format) or an "
                         "MCP memory server entity or relation")
    _check_types(record, where)
    return Item(
        key=record["id"], memory_id=record["id"], content=record["content"], scope=record.get("scope"),
        type=record.get("type") or "fact", tags=tuple(record.get("tags", ())), layer=record.get("layer") or None,
        importance=record.get("importance"), confidence=record.get("confidence"),
        protected=bool(record.get("protected", False)), event_time_ms=record.get("event_time_ms"),
        links=tuple((link["target_id"], links.edge_type(link.get("relation", links.DEFAULT_TYPE)),
                     link.get("weight") or 0.0, link.get("reason", "")) for link in record.get("links", ())),
        procedure=tuple((name, tuple(record[name])) for name in procedures.FIELDS if record.get(name)),
        sources=tuple(record.get("sources") or ()),
        origin=_origin(record),
    )


def _origin(record: dict) -> dict | None:
    """The origin an export line states: the one it carries (an imported memory's), else its own writer and times."""
    if isinstance(record.get("origin"), dict):
        return record["origin"]
    if not record.get("author_agent") or not record.get("created_at_ms"):
        return None
    return {k: record[k] for k in ("author_agent", "created_at_ms", "updated_by", "updated_at_ms") if record.get(k)}


def _check_types(record: dict, where: str) -> None:
    """Refuses a mnemosync JSONL record whose fields have the wrong kinds, naming the line and the field."""
    def number(v) -> bool:
        return v is None or (isinstance(v, int | float) and not isinstance(v, bool))

    problems = []
    if not isinstance(record["id"], str):
        problems.append("id must be a string")
    for name in ("scope", "type"):
        if record.get(name) is not None and not isinstance(record[name], str):
            problems.append(f"{name} must be a string")
    tags = record.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        problems.append("tags must be a list of strings")
    for name in ("importance", "confidence"):
        if not number(record.get(name)):
            problems.append(f"{name} must be a number")
    for name in ("layer", "event_time_ms", "created_at_ms", "updated_at_ms"):
        if record.get(name) is not None and (not isinstance(record[name], int) or isinstance(record[name], bool)):
            problems.append(f"{name} must be a whole number")
    for name in ("author_agent", "updated_by"):
        if record.get(name) is not None and not isinstance(record[name], str):
            problems.append(f"{name} must be a string")
    if record.get("origin") is not None and not isinstance(record["origin"], dict):
        problems.append("origin must be an object (author_agent, created_at_ms, updated_by, updated_at_ms)")
    found = record.get("links", [])
    if not isinstance(found, list) or not all(
            isinstance(k, dict) and isinstance(k.get("target_id"), str) and number(k.get("weight"))
            and isinstance(k.get("reason", ""), str) and isinstance(k.get("relation", ""), str) for k in found):
        problems.append("links must be objects with a target_id (and a numeric weight, text relation and reason)")
    if problems:
        raise ValueError(f"{where}: {'; '.join(problems)}")


def _mcp_memory(records: list[dict]) -> list[Item]:
    items: list[Item] = []
    first: dict[str, str] = {}
    for r in records:
        if r["type"] != "entity":
            continue
        name, kind = str(r.get("name", "")), str(r.get("entityType", ""))
        tags = tuple(t for t in (_tag(kind), _tag(name)) if t)
        observations = [o for o in r.get("observations", ()) if isinstance(o, str) and o.strip()] or [None]
        for i, observation in enumerate(observations):
            content = f"{name}: {observation}" if observation else f"{name} ({kind})" if kind else name
            item = Item(key=f"mcp-entity\n{name}\n{i}", content=content, type="entity", tags=tags)
            items.append(item)
            first.setdefault(name, item.key)
    found: dict[str, list[tuple[str, str, float, str]]] = {}
    for r in records:
        if r["type"] == "relation" and r.get("from") in first and r.get("to") in first:
            name = _tag(r.get("relationType", ""))
            found.setdefault(first[r["from"]], []).append((first[r["to"]], links.edge_type(name), 0.0,
                                                           name.replace("_", " ")))
    return [Item(**{**i.__dict__, "links": tuple(found.get(i.key, ()))}) for i in items]


def _tag(text: str) -> str:
    return re.sub(r"[^a-z0-9:_.-]+", "-", text.strip().lower()).strip("-")[:64]


_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n?", re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.*\S)\s*$")
_HEADING = re.compile(r"^#{1,6}\s+(.*\S)\s*$")


def _markdown_folder(root: Path) -> Iterator[Item]:
    """The notes of a folder: every `*.md` below it but hidden ones, each file once; a symbolic link that leads out
    of the folder (to a file or through a linked folder) is skipped, so an import reads only what it was given."""
    base, seen = root.resolve(), set()
    for path in sorted(root.rglob("*.md")):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        real = path.resolve()
        if not real.is_relative_to(base) or not real.is_file() or real in seen:
            continue
        seen.add(real)
        yield from _markdown_file(path, root)


def _markdown_file(path: Path, root: Path) -> Iterator[Item]:
    text = path.read_text(encoding="utf-8", errors="replace")
    meta, body = _front_matter(text)
    name = path.relative_to(root).as_posix()
    tags = tuple(t for t in (_tag(str(x)) for x in _as_list(meta.get("tags"))) if t)
    common = {"scope": meta.get("scope") or None, "type": _tag(str(meta.get("type", ""))) or "note"}
    if path.name in ("CLAUDE.md", "MEMORY.md"):
        heading = ""
        for number, line in enumerate(body.splitlines(), 1):
            if m := _HEADING.match(line):
                heading = _tag(m.group(1))
            elif m := _BULLET.match(line):
                yield Item(key=f"md\n{name}\n{number}", content=m.group(1),
                           tags=tuple(t for t in (*tags, heading) if t), **common)
        return
    content = body.strip()
    if content:
        title = meta.get("title") or path.stem
        if not content.lstrip().startswith("#"):
            content = f"{title}\n\n{content}"
        yield Item(key=f"md\n{name}", content=content, tags=tags, **common)


def _front_matter(text: str) -> tuple[dict[str, Any], str]:
    """The simple `key: value` front matter (lists as `[a, b]` or `- a` lines) and the body after it."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return {}, text
    meta: dict[str, Any] = {}
    key = None
    for line in match.group(1).splitlines():
        if (item := re.match(r"^\s+-\s+(.*)$", line)) and key:
            meta[key] = [*_as_list(meta.get(key)), item.group(1).strip().strip("'\"")]
        elif ":" in line:
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if value.startswith("[") and value.endswith("]"):
                meta[key] = [v.strip().strip("'\"") for v in value[1:-1].split(",") if v.strip()]
            else:
                meta[key] = value.strip("'\"") if value else []
    return meta, text[match.end():]


def _as_list(value: Any) -> list:
    if value is None or value == "":
        return []
    return value if isinstance(value, list) else [v.strip() for v in str(value).split(",") if v.strip()]


def export_lines(memories: Iterable[MemoryRow]) -> Iterator[str]:
    """mnemosync's JSONL: one line per memory (what `read_source` imports back under the same ids), with every
    credential the detector knows masked as every read masks it (`secrets_scan.masked`)."""
    for m in map(secrets_scan.masked, memories):
        yield json.dumps({
            "id": m.id, "scope": m.scope, "type": m.type, "layer": m.layer, "tags": list(m.tags),
            "content": m.content, "importance": m.importance, "confidence": m.confidence,
            "protected": m.protected, "event_time_ms": m.event_time_ms,
            "links": [{"target_id": k.target_id, "relation": k.relation, "weight": k.weight,
                       "reason": secrets_scan.mask(k.reason)}
                      for k in m.links],
            **({"sources": list(m.sources)} if m.sources else {}),
            **(m.procedure.as_dict() if m.procedure else {}),
            "author_agent": m.author_agent, "created_at_ms": m.created_at_ms, "updated_by": m.updated_by,
            "updated_at_ms": m.updated_at_ms, **({"origin": m.origin.as_dict()} if m.origin else {}),
        }, ensure_ascii=False)
