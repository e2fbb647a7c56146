"""Governance: who may write what, checked on the server before anything is stored.

Every check here is one named rule, and every refusal starts with that name
(`layer-1-human-only: ...`) and says what to do instead. Authority and scope
rules raise `PermissionDenied`; the trust-label rules raise `InvalidArgument`
(a missing quote) or `FailedPrecondition` (a causal link from an inference).

The rules (memory-v3's constitutional hierarchy and the trust labels of the
seeds):

* `scope-not-granted`: an agent reads, searches, syncs and writes only the
  scopes its policy grants.
* `layer-1-human-only`: only authority 1 (a human) adds to, moves into, or
  changes anything in the constitutional layer.
* `no-overwrite-higher-authority`: nobody updates, forgets, restores, moves, verifies or
  unlinks what a stronger authority wrote (lower number = stronger).
* `protected-not-forgotten`: agents (authority > 1) do not forget or unprotect
  protected memories.
* `layers-1-2-not-forgotten`: agents do not forget constitutional or
  legislative memories, nor move them down to a layer where they could.
* `principle-needs-quote`: a `principle` must carry the quote it comes from.
* `inference-no-causal-links`: an `inference` cannot be either end of a causal link.
* `resolve-needs-authority`: a conflict is resolved by an admin or by an
  agent at least as strong as every revision in it.
* `semantic-conflict-higher-authority`: a new memory that nearly duplicates a
  stronger authority's memory (but says something else) is blocked: by its vector,
  or, from an automated agent, by its words (`mnemosync.server.near_copies`).

Authority numbers written before they were recorded (0) count as
`mnemosync.kernel.entry.LEGACY_AUTHORITY`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mnemosync.kernel.certificates import HUMAN_AUTHORITY
from mnemosync.kernel.entry import LEGACY_AUTHORITY
from mnemosync.kernel.errors import FailedPrecondition, PermissionDenied
from mnemosync.kernel.lifecycle import DEFAULT_LAYERS, LayerRule
from mnemosync.kernel.operations import require_quote
from mnemosync.server.identity import Caller

CAUSAL_RELATIONS = frozenset({"causal"})
"""Edge types that claim cause and effect (an inference may not make them; `mnemosync.kernel.links`)."""


DEFAULT_SEMANTIC_THRESHOLD = 0.95
"""Cosine similarity at or above which a new memory is flagged (memory-v3's near-dedup default)."""


@dataclass(frozen=True)
class Rules:
    """The configurable part of governance (the policy file's `[conflicts]`, `[trust]`, `[layers.*]`).

    Attributes:
        semantic_threshold: Cosine similarity at or above which a new memory is a
            semantic conflict with another agent's memory; 0 turns the check off.
        causal_relations: Edge types an inference may not create (default: causal).
        layers: Per-layer decay and archive rules.
    """

    semantic_threshold: float = DEFAULT_SEMANTIC_THRESHOLD
    causal_relations: frozenset[str] = CAUSAL_RELATIONS
    layers: Mapping[int, LayerRule] = field(default_factory=lambda: dict(DEFAULT_LAYERS))


def effective(authority: int) -> int:
    """An authority number, counting unrecorded (0) as LEGACY_AUTHORITY."""
    return authority or LEGACY_AUTHORITY


def _denied(rule: str, message: str) -> PermissionDenied:
    return PermissionDenied(f"{rule}: {message}")


def _layer_name(layer: int) -> str:
    rule = DEFAULT_LAYERS.get(layer)
    return f"{rule.name} (layer {layer})" if rule else f"layer {layer}"


# -- scopes ------------------------------------------------------------------------


def scope_granted(caller: Caller, scope: str) -> bool:
    """True when one of the caller's scope patterns covers `scope`.

    A pattern is a scope (`user`), a prefix ending in `*` (`project:*`), or
    `*`; `caller.scopes` None means every scope.
    """
    if caller.scopes is None:
        return True
    return any(p == scope or (p.endswith("*") and scope.startswith(p[:-1])) for p in caller.scopes)


def describe_scopes(caller: Caller) -> str:
    """The caller's grant, for messages."""
    if caller.scopes is None:
        return "every scope"
    return ", ".join(repr(s) for s in caller.scopes) if caller.scopes else "no scopes"


def search_scopes(caller: Caller, wanted: tuple[str, ...], known: Callable[[], list[str]]) -> tuple[str, ...] | None:
    """The scopes a search by `caller` may cover, as concrete scope names (search filters match exactly).

    Args:
        caller: Who searches.
        wanted: The scopes the request names (empty: everything it may see).
        known: Returns every scope the store holds (only called when needed).

    Returns:
        None when nothing needs restricting (every scope granted and none
        named); otherwise the scopes to search, possibly none.

    Raises:
        PermissionDenied: a named scope is not granted (rule scope-not-granted).
    """
    for scope in wanted:
        require_scope(caller, scope, "search")
    if wanted or caller.scopes is None:
        return wanted or None
    return tuple(s for s in known() if scope_granted(caller, s))


def require_scope(caller: Caller, scope: str, action: str) -> None:
    """Refuses `action` on a memory of a scope the caller is not granted.

    Raises:
        PermissionDenied: rule scope-not-granted.
    """
    if not scope_granted(caller, scope):
        if caller.certificate_serial:  # under mTLS the grant is in the certificate, not the policy file
            where = (f"its certificate (serial {caller.certificate_serial}) grants {describe_scopes(caller)}. Use "
                     "one of those scopes, or ask the operator for a certificate that grants this one "
                     f"(mnemosync ca revoke {caller.agent_id}, then mnemosync ca issue-agent {caller.agent_id} "
                     f"--scope {scope} …)")
        else:
            where = (f"it is granted {describe_scopes(caller)}. Use one of those scopes, or ask the operator to "
                     "grant this one in the policy file")
        raise _denied("scope-not-granted", f"agent {caller.agent_id} may not {action} in scope {scope!r}; {where}")


def check_model_pin(caller: Caller) -> None:
    """Refuses to let a write pin the embedding model of a store that has none unless an admin makes it.

    Whichever model is pinned, every later write must use: a first agent claiming a fake model (8 dimensions)
    would make every honest write fail. The operator pins it at start (`serve --embed-model` with the file
    present); otherwise an admin's first write does. In development mode (no certificates) nobody is
    authenticated and the first write still pins.

    Raises:
        PermissionDenied: rule model-pin-needs-admin.
    """
    if caller.certificate_serial and not caller.admin:
        raise _denied("model-pin-needs-admin", f"this server has no embedding model pinned yet and agent "
                      f"{caller.agent_id} is not an admin: only the operator (serve --embed-model with the model "
                      "file on the server host) or an admin's first write pins it")


# -- writes ------------------------------------------------------------------------


def _require_human(caller: Caller, rule: str, message: str) -> None:
    if caller.authority != HUMAN_AUTHORITY:
        raise _denied(rule, f"{message}; agent {caller.agent_id} has authority {caller.authority}")


def check_add(caller: Caller, payload: Mapping[str, Any]) -> None:
    """Rules for a new memory.

    Raises:
        PermissionDenied: scope-not-granted or layer-1-human-only.
    """
    require_scope(caller, payload["scope"], "add memories")
    if payload["layer"] == 1:
        _require_human(caller, "layer-1-human-only",
                       "only human authority (1) may add constitutional (layer 1) memories; use "
                       "legislative (layer 2) for decisions an agent records")


def check_change(caller: Caller, op: str, payload: Mapping[str, Any], memory, base_state: Mapping[str, Any]) -> None:
    """Rules for update, forget, restore, set_layer and verify.

    Args:
        caller: Who writes.
        op: The operation name.
        payload: Its validated payload.
        memory: The memory as it is now (a `mnemosync.kernel.memory.MemoryRow`).
        base_state: The memory's state at the version the write was made from
            (`projections.memory_state`); for a stale write this is what the
            writer saw, so nobody is refused for a change they could not know about.

    Raises:
        PermissionDenied: the rule that refused it.
        InvalidArgument: principle-needs-quote.
    """
    require_scope(caller, memory.scope, f"{op} memories")
    if memory.layer == 1 or (op == "set_layer" and payload["layer"] == 1):
        _require_human(caller, "layer-1-human-only",
                       f"only human authority (1) may change constitutional (layer 1) memories ({op} of "
                       f"memory {memory.id})")
    writer = effective(base_state["authority"])
    if caller.authority > writer:
        raise _denied(
            "no-overwrite-higher-authority",
            f"memory {memory.id} was written by authority {writer} and agent {caller.agent_id} has "
            f"authority {caller.authority} (lower is stronger), so it may not {op} it; add a new memory "
            "that says what you found and link it to this one, or ask an agent of that authority",
        )
    protected = bool(base_state["protected"] or memory.protected)
    if op == "forget":
        if protected:
            _require_human(caller, "protected-not-forgotten",
                           f"memory {memory.id} is protected; only a human (authority 1) may forget it")
        if memory.layer in (1, 2):
            _require_human(caller, "layers-1-2-not-forgotten",
                           f"memory {memory.id} is {_layer_name(memory.layer)}; only a human (authority 1) "
                           "may forget constitutional and legislative memories")
    if op == "update":
        if protected and payload.get("protected") is False:
            _require_human(caller, "protected-not-forgotten",
                           f"memory {memory.id} is protected; only a human (authority 1) may unprotect it")
        require_quote(payload.get("trust", base_state["trust"]), payload.get("quote", base_state["quote"]))
    if op == "set_layer" and memory.layer in (1, 2) and payload["layer"] > 2:
        _require_human(caller, "layers-1-2-not-forgotten",
                       f"memory {memory.id} is {_layer_name(memory.layer)}; only a human (authority 1) may move "
                       f"it down to {_layer_name(payload['layer'])}, where it could be forgotten")


def check_link(caller: Caller, op: str, relation: str, source, target, link_authority: int | None,
               rules: Rules) -> None:
    """Rules for link and unlink.

    Args:
        source: The memory the link starts from.
        target: The memory it points to (None if it no longer exists, for unlink).
        link_authority: The authority that made the link (None: no such link yet).

    Raises:
        PermissionDenied: scope-not-granted, layer-1-human-only, no-overwrite-higher-authority.
        FailedPrecondition: inference-no-causal-links.
    """
    require_scope(caller, source.scope, f"{op} memories")
    if target is not None:
        require_scope(caller, target.scope, f"{op} memories")
    if source.layer == 1:
        _require_human(caller, "layer-1-human-only",
                       f"only human authority (1) may change the links of constitutional (layer 1) memory "
                       f"{source.id}")
    if op == "link" and relation in rules.causal_relations:
        for end, memory in (("source", source), ("target", target)):
            if memory is not None and memory.trust == "inference":
                raise FailedPrecondition(
                    f"inference-no-causal-links: the {end} memory {memory.id} is labelled trust='inference', "
                    f"and an inference cannot make a causal link ({relation!r}); use relation 'semantic', or "
                    "confirm it first (label it 'pattern', or 'principle' with its quote)"
                )
    if link_authority is not None and caller.authority > effective(link_authority):
        raise _denied(
            "no-overwrite-higher-authority",
            f"the {relation!r} link from {source.id} was made by authority {effective(link_authority)} and "
            f"agent {caller.agent_id} has authority {caller.authority}, so it may not "
            f"{'remove it' if op == 'unlink' else 'change its weight or reason'}",
        )


def check_semantic(caller: Caller, existing, similarity: float, *, words_alike: float = 0.0) -> None:
    """Blocks a near-duplicate of a stronger authority's memory: by its vector's `similarity` (cosine), or, with
    `words_alike`, by its text (`mnemosync.server.near_copies`).

    Raises:
        PermissionDenied: semantic-conflict-higher-authority.
    """
    owner = effective(existing.authority)
    if owner < caller.authority:
        how = (f"the new memory's text is a near copy (word sequence {words_alike:.2f} alike) of" if words_alike
               else f"the new memory is {similarity:.3f} similar (cosine) to")
        raise _denied(
            "semantic-conflict-higher-authority",
            f"{how} memory {existing.id}, written by "
            f"authority {owner}, but says something different; agent {caller.agent_id} (authority "
            f"{caller.authority}) may not contradict it. Nothing was stored; read that memory, and if it is "
            "wrong ask an agent of its authority to change it",
        )


def check_resolve(caller: Caller, conflict_id: int, scope: str, revision_authorities: list[int],
                  affected: list[tuple[Any, Mapping[str, Any]]]) -> None:
    """Rules for resolve_conflict.

    Args:
        conflict_id: The conflict.
        scope: Its memories' scope.
        revision_authorities: The authority of every revision in it.
        affected: (memory as it is now, its state after the resolution) for each
            memory the resolution changes.

    Raises:
        PermissionDenied: the rule that refused it.
    """
    require_scope(caller, scope, "resolve conflicts")
    strongest = min(effective(a) for a in revision_authorities)
    if not caller.admin and caller.authority > strongest:
        raise _denied(
            "resolve-needs-authority",
            f"conflict {conflict_id} has a revision by authority {strongest} and agent {caller.agent_id} "
            f"has authority {caller.authority}; it needs an agent of authority {strongest} or stronger, "
            "or an admin",
        )
    for memory, after in affected:
        if memory.layer == 1:
            _require_human(caller, "layer-1-human-only",
                           f"only human authority (1) may change constitutional (layer 1) memory {memory.id}")
        if after["archived"] and not memory.archived:
            if memory.protected:
                _require_human(caller, "protected-not-forgotten",
                               f"this resolution would forget protected memory {memory.id}")
            if memory.layer in (1, 2):
                _require_human(caller, "layers-1-2-not-forgotten",
                               f"this resolution would forget {_layer_name(memory.layer)} memory {memory.id}")
