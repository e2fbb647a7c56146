"""Sending an import: many memories (`mnemosync.agent.bulk.Item`s from a source) embedded a batch at a time and
sent as one Append per batch, each in flight while the model embeds the next, then their links.

Resumable and exact about what happened: items the cache already holds are skipped before the model, op_ids come
from the items' sources (a resent item is a replay), and an item refused is listed in the summary with why while
the rest still go. It writes through the client's write path (`mnemosync.agent.write_path`), never the outbox.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from mnemosync.agent import bulk
from mnemosync.agent.write_path import FINAL_REFUSALS, WritePath, layer_number
from mnemosync.kernel import links as link_rules
from mnemosync.kernel.errors import CodedError, MnemosyncError
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.operations import ValidOp

if TYPE_CHECKING:
    from mnemosync.agent.cache import Cache
    from mnemosync.agent.client_settings import ClientSettings
    from mnemosync.agent.embeddings import Embedder


class ImportingClient(Protocol):
    """What an import takes from its `AgentClient`: its cache, settings and model, and the online flag it sets."""

    settings: ClientSettings
    agent_id: str
    cache: Cache
    online: bool

    @property
    def embedder(self) -> Embedder: ...

    @property
    def model(self) -> ModelInfo: ...


class BulkSender:
    """The imports of one `AgentClient` (its `add_many`).

    Args:
        client: The client whose cache, embedder and online flag the import uses.
        writes: Its write path, which checks, signs and sends the operations.
    """

    def __init__(self, client: ImportingClient, writes: WritePath):
        self._client = client
        self._writes = writes

    def add_many(self, items: Sequence[bulk.Item], *, batch: int = 250,
                 progress: bulk.Progress | None = None) -> bulk.Summary:
        """Stores many memories (an import): embedded `batch` at a time, sent as one Append per batch (each sent
        while the model embeds the next), then their links. Resumable: items the cache already holds are skipped
        before the model, and op_ids come from the items' sources, so any other item already stored is answered as a
        replay.

        An item refused (a secret in it, a size limit, a governance rule) is listed in the summary with why, and
        the rest still go. Needs the server (nothing is queued).

        Raises:
            ServerUnavailable: the server cannot be reached (run it again later: nothing is written twice).
        """
        summary = bulk.Summary()
        ids = {item.key: item.id() for item in items}
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemosync-add-many") as sender:
            sent = None  # the previous batch's Append, in flight while the model embeds the next batch
            for start in range(0, len(items), batch):
                chunk = items[start:start + batch]
                part = bulk.still_to_send(chunk, self._client.cache.get)
                vectors = self._client.embedder.embed_many([item.content for item in part])
                ops, refused = [], []
                for item, vector in zip(part, vectors, strict=True):
                    fields: dict[str, Any] = {
                        "scope": item.scope or self._client.settings.scope, "type": item.type, "tags": list(item.tags),
                        "layer": layer_number(item.layer), "content": item.content, "protected": item.protected}
                    for name in ("importance", "confidence", "event_time_ms"):
                        if getattr(item, name) is not None:
                            fields[name] = getattr(item, name)
                    fields.update({name: list(values) for name, values in item.procedure})
                    if item.sources:
                        fields["sources"] = [dict(s) for s in item.sources]
                    if item.origin:
                        fields["origin"] = dict(item.origin)
                    try:
                        ops.append((item.key, self._writes.validated("add", item.id(), 0, fields, vector,
                                                              op_id=item.op_id(self._client.agent_id))))
                    except CodedError as exc:
                        refused.append((item.key, str(exc)))
                if sent is not None:
                    sent.result()  # one Append at a time, in order
                # counted only while no Append is in flight: the sender counts into `summary` too
                summary.replayed += len(chunk) - len(part)
                summary.refused.extend(refused)
                if progress and start:
                    progress(start, len(items))
                sent = sender.submit(self._send_many, ops, self._client.model, summary)
            if sent is not None:
                sent.result()
                if progress:
                    progress(len(items), len(items))
        links = []
        for item in items:
            held = self._held_links(item.id())
            for target, relation, weight, reason in item.links:
                fields = {"target_id": ids.get(target, target), "relation": relation, "weight": weight,
                          "reason": reason}
                if held.get((fields["target_id"], relation)) == (weight or link_rules.DEFAULT_WEIGHT, reason):
                    summary.links_unchanged += 1  # written again it would only re-attribute it to this agent
                    continue
                agent_id = self._client.agent_id
                op_id = str(uuid.uuid5(bulk.NAMESPACE, f"link\n{agent_id}\n{item.key}\n{target}\n{relation}"))
                try:
                    links.append((item.key, self._writes.validated("link", item.id(), 0, fields, op_id=op_id)))
                except CodedError as exc:
                    summary.refused.append((item.key, f"link to {target}: {exc}"))
        for start in range(0, len(links), batch):
            self._send_many(links[start:start + batch], None, summary, links=True)
        return summary

    def _held_links(self, memory_id: str) -> dict[tuple[str, str], tuple[float, str]]:
        """The links the memory has in this agent's cache: (target, type) to (weight, reason)."""
        memory = self._client.cache.get(memory_id)
        return {(k.target_id, k.relation): (k.weight, k.reason) for k in memory.links} if memory else {}

    def _send_many(self, ops: list[tuple[str, ValidOp]], model: ModelInfo | None, summary: bulk.Summary, *,
                   links: bool = False) -> None:
        """Sends (key, op) pairs as one Append, or one by one when the server refuses the batch, counting into
        `summary` (new links into `links`, links made before not at all)."""
        if not ops:
            return
        try:
            results, entries = self._writes.append([op for _, op in ops], model)
        except MnemosyncError as exc:
            if exc.code not in FINAL_REFUSALS:
                raise
            if len(ops) == 1:
                summary.refused.append((ops[0][0], f"{exc.code}: {exc}"))
                return
            for pair in ops:
                self._send_many([pair], model, summary, links=links)
            return
        self._client.online = True
        for result in results:
            if links:
                summary.links += not result.replayed
            elif result.replayed:
                summary.replayed += 1
            elif result.deduplicated:
                summary.deduplicated += 1
            else:
                summary.written += 1
        self._writes.apply_own(entries)

