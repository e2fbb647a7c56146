"""Typed links: the edge types of the memory graph, their rules, and how older relation names read.

A link goes from one memory to another and has one of six types (the seeds'
MAGMA graphs, 002, plus the hierarchy and supersession of 003):

* `semantic`: about the same thing (the zettelkasten "see also"); the default.
* `temporal`: next to the target in time (an ingested episode links to the one
  before it); which came first is for the memories' event times to say.
* `causal`: is a cause of, or the reason for, the target. An inference cannot
  be either end of one (seed 000, `inference-no-causal-links` in `mnemosync.server.governance`).
* `entity`: concerns the entity the target is about (built, decided, maintains).
* `hierarchical`: is part of the target (a detail of a topic, a step of a procedure).
* `supersedes`: replaces the target (a merge's survivor, a newer decision).

Each link may carry a `weight` in (0, 1] (unset: 1.0), how strong the
association is, and a `reason` (why the two are linked, seed 001), at most
MAX_REASON_BYTES and through the secret scan like every text. Associative
links (every type but `hierarchical` and `supersedes`) fade: consolidation
lowers their weights and prunes weak ones (`decays`).

Changelogs written before the types existed hold free relation names
(`follows`, `related`, `caused_by`, ...). They stay as written, so their hashes
still verify, and the fold reads each as its nearest type (`edge_type`):
the causal spellings as `causal`, order words as `temporal`, containment as
`hierarchical`, replacement as `supersedes`, who-did-what as `entity`, and
every other name as `semantic`. Two old names of one type between the same
memories fold into one link (the first one made). New operations must name
a type (`validate_relation`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, NamedTuple, cast

from mnemosync.kernel.errors import InvalidArgument

EDGE_TYPES = ("semantic", "temporal", "causal", "entity", "hierarchical", "supersedes")
"""The edge types a new link may have, in the order the documentation lists them."""

DEFAULT_TYPE = "semantic"
"""The type of a link that names none."""

NON_DECAYING = frozenset({"hierarchical", "supersedes"})
"""Structure, not association: consolidation never weakens or prunes these."""

DEFAULT_WEIGHT = 1.0
MAX_REASON_BYTES = 512

_LEGACY: dict[str, frozenset[str]] = {
    "causal": frozenset({
        "caused", "enabled", "prevented", "motivated", "triggered_by", "resolved", "must_precede", "reason_for",
        "causes", "caused_by", "enables", "prevents", "triggers", "resolves", "leads_to", "because_of",
        "results_in",
    }),
    "temporal": frozenset({
        "follows", "followed_by", "preceded_by", "precedes", "before", "after", "next", "previous",
        "concurrent_with", "overlaps_with", "same_session",
    }),
    "hierarchical": frozenset({"part_of", "member_of", "child_of", "parent_of", "contains", "belongs_to",
                               "subtopic_of", "instance_of", "is_a"}),
    "supersedes": frozenset({"superseded_by", "replaces", "replaced_by", "merged_into"}),
    "entity": frozenset({"built", "decided", "maintains", "responsible_for", "works_on", "owns", "authored",
                         "mentions", "about"}),
}
_READS_AS = {name: kind for kind, names in _LEGACY.items() for name in names} | {t: t for t in EDGE_TYPES}


class LinkRow(NamedTuple):
    """One outgoing link as the projections keep it."""

    target_id: str
    relation: str
    author_agent: str
    weight: float = DEFAULT_WEIGHT
    reason: str = ""


def edge_type(relation: str) -> str:
    """The type a relation name reads as: itself if it is one, else its nearest type (see the module)."""
    return _READS_AS.get(relation, DEFAULT_TYPE)


def decays(relation: str) -> bool:
    """Whether consolidation may weaken and prune links of this type (never hierarchy or supersession)."""
    return edge_type(relation) not in NON_DECAYING


def validate_relation(value: Any, name: str = "relation") -> str:
    """A new link's type; empty means DEFAULT_TYPE.

    Raises:
        InvalidArgument: naming the field and the allowed types.
    """
    if value in (None, ""):
        return DEFAULT_TYPE
    if value not in EDGE_TYPES:
        raise InvalidArgument(f"{name} must be one of {', '.join(EDGE_TYPES)} (empty: {DEFAULT_TYPE}), "
                              f"got {str(value)[:40]!r}")
    return cast(str, value)


def validate_types(values: Iterable[Any], name: str = "edge_types") -> tuple[str, ...]:
    """A filter of edge types (empty: every type), each checked like `validate_relation`."""
    return tuple(dict.fromkeys(validate_relation(v, name) for v in values if v))


def validate_weight(value: Any, name: str = "weight") -> float | None:
    """A link's weight: None when unset (0 on the wire), else a number in (0, 1].

    Raises:
        InvalidArgument: outside (0, 1] or not a number.
    """
    if value in (None, 0, 0.0):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) or not 0 < value <= 1:
        raise InvalidArgument(f"{name} must be a number above 0 and at most 1 (0: unset, read as 1), got {value!r}")
    return float(value)


def link_payload(fields: dict[str, Any], *, unlink: bool) -> dict[str, Any]:
    """The type, weight and reason of a link operation's payload (weight and reason only when set, so the
    payload survives the wire's round trip unchanged); an unlink carries the type only."""
    payload: dict[str, Any] = {"relation": validate_relation(fields.get("relation"))}
    if unlink:
        for key in ("weight", "reason"):
            if fields.get(key):
                raise InvalidArgument(f"{key} is not accepted by unlink (it names the link by target and relation)")
        return payload
    weight = validate_weight(fields.get("weight"))
    if weight is not None:
        payload["weight"] = weight
    reason = fields.get("reason") or ""
    if not isinstance(reason, str):
        raise InvalidArgument("reason must be text")
    if reason:
        payload["reason"] = reason  # its size and characters: `operations.validate`, as for every text
    return payload
