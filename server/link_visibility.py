"""Links into scopes the caller may not read are cut from every memory an answer carries.

A memory of a scope the caller is not granted never appears in an answer, not
even as an id (SECURITY.md, Threat model). Reads and walks keep such memories out,
but a memory the caller may read can link to one: `Get`, a walk's start, a
timeline and search hits carried those links, with the target id and the
link's reason (issue 33, item 10). `hide_unreadable_links` walks a response,
finds every `Memory` in it, and drops each link whose target is in a scope the
caller may not read (or no longer exists), at the one place answers leave the
server. The operator's view (the changelog and a memory's history) shows
entries rather than memories: there `readable_target` empties a link or
unlink entry's target id and reason, and `readable_links` drops such links
from the memory a history shows.

Sync is left as it is: a link entry is its source memory's entry, sent whole
to every agent that may read that memory, because its content is bound to the
hash chain and to the source scope's snapshot section (one signed digest for
every agent granted that scope). An agent's cache therefore holds links into
memories it never received, and its reads show only links into memories it
holds (`mnemosync.kernel.projections.shown_links`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from google.protobuf.message import Message

from mnemosync.kernel.entry import Entry
from mnemosync.kernel.memory import MemoryRow
from mnemosync.server.governance import scope_granted
from mnemosync.server.identity import Caller
from mnemosync.v1 import memory_pb2 as pb


def _memories(message: Message) -> list[pb.Memory]:
    """Every Memory in `message`, at any depth."""
    if isinstance(message, pb.Memory):
        return [message]
    found: list[pb.Memory] = []
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if isinstance(value, Message):
            found += _memories(value)
        else:  # a repeated field (a map's keys are not messages: skipped)
            for item in value:
                if isinstance(item, Message):
                    found += _memories(item)
    return found


def hide_unreadable_links(message: Message, caller: Caller, scope_of: Callable[[str], str | None]) -> Message:
    """Removes, in place, the links of every Memory in `message` whose target `caller` may not read.

    Args:
        message: A response about to be sent.
        caller: Who it goes to (nothing is removed when its grant covers every scope).
        scope_of: A memory's scope by id (None: no such memory).
    """
    if caller.scopes is None or "*" in caller.scopes:
        return message
    scopes: dict[str, str | None] = {}
    for memory in _memories(message):
        if not memory.links:
            continue
        kept = []
        for link in memory.links:
            if link.target_id not in scopes:
                scopes[link.target_id] = scope_of(link.target_id)
            scope = scopes[link.target_id]
            if scope is not None and scope_granted(caller, scope):
                kept.append(link)
        if len(kept) != len(memory.links):
            del memory.links[:]
            memory.links.extend(kept)
    return message


LINK_OPS = ("link", "unlink")


def _may_read(caller: Caller, scope_of: Callable[[str], str | None], memory_id: str) -> bool:
    scope = scope_of(memory_id) if memory_id else None
    return scope is not None and scope_granted(caller, scope)


def readable_target(entry: Entry, caller: Caller | None, scope_of: Callable[[str], str | None]) -> Entry:
    """A link or unlink entry as `caller` may see it: its target id and reason emptied when the target is in a scope
    the caller may not read (or does not exist); the entry still shows that a link of its type was made or
    removed. Any other entry, or a caller granted every scope (None: the server itself), as it is."""
    if entry.op not in LINK_OPS or caller is None or caller.scopes is None or "*" in caller.scopes:
        return entry
    if _may_read(caller, scope_of, entry.payload.get("target_id", "")):
        return entry
    payload = {k: v for k, v in entry.payload.items() if k != "reason"}
    return replace(entry, payload={**payload, "target_id": ""})


def readable_links(memory: MemoryRow, caller: Caller | None, scope_of: Callable[[str], str | None]) -> MemoryRow:
    """`memory` without the links whose target `caller` may not read (None: the server itself, shown all)."""
    if caller is None or caller.scopes is None or "*" in caller.scopes:
        return memory
    kept = tuple(link for link in memory.links if _may_read(caller, scope_of, link.target_id))
    return memory if len(kept) == len(memory.links) else replace(memory, links=kept)
