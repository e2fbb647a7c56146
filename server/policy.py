"""The agent policy file: each agent's authority, scopes and admin flag, and the governance rules.

A TOML file named by the server setting `policy_file` (`--policy`,
`MNEMOSYNC_POLICY_FILE`). Every key is optional:

    [defaults]                  # agents the file does not list
    authority = 3               # 1 human ... 6 automated extractor (lower is stronger)
    scopes = ["*"]              # "*" = every scope; "project:*" = every scope starting "project:"
    admin = false               # admins may resolve any conflict in their scopes

    [agents.alice]              # one table per agent id
    authority = 1
    admin = true

    [agents."ci-extractor"]
    authority = 6
    scopes = ["project:mnemosync"]

    [conflicts]
    semantic_threshold = 0.95   # cosine similarity that flags a near-duplicate; 0 turns it off

    [trust]
    causal_relations = ["causal"]  # edge types an inference may not make (proto/mnemosync/kernel/links.py)

    [layers.factual]            # constitutional, legislative, factual, ephemeral
    decay_rate = 0.10
    archive_after_days = 30

Without a file, and for agents a file does not list, the `[defaults]` apply:
authority 3, every scope, not admin. That keeps a development server usable
as is; a shared server should list its agents and narrow `[defaults]` (for
example `scopes = []`, which lets unknown agents read and write nothing).

With mTLS the agent's certificate carries its grant and the `[agents]` and
`[defaults]` tables are not used; the governance tables apply in both modes.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from mnemosync.kernel.certificates import AUTOMATED_AUTHORITY, HUMAN_AUTHORITY, validate_agent_id
from mnemosync.kernel.errors import FailedPrecondition, InvalidArgument, Unauthenticated
from mnemosync.kernel.links import validate_relation
from mnemosync.kernel.operations import validate_scope_pattern
from mnemosync.server.governance import DEFAULT_LAYERS, LayerRule, Rules
from mnemosync.server.identity import Caller

DEFAULT_AUTHORITY = 3


class PolicyError(FailedPrecondition):
    """The policy file cannot be read or holds a value it may not."""


@dataclass(frozen=True)
class Grant:
    """What one agent may do.

    Attributes:
        authority: 1 (human) to 6 (automated extractor).
        scopes: Scope patterns it may use, or None for every scope.
        admin: May resolve any conflict in its scopes.
    """

    authority: int = DEFAULT_AUTHORITY
    scopes: tuple[str, ...] | None = None
    admin: bool = False


@dataclass(frozen=True)
class Policy:
    """The parsed policy file (or the built-in defaults).

    Attributes:
        agents: Grants by agent id.
        defaults: The grant of every agent not in `agents`.
        rules: The governance rules.
        source: The file it came from, if any.
    """

    agents: Mapping[str, Grant] = field(default_factory=dict)
    defaults: Grant = field(default_factory=Grant)
    rules: Rules = field(default_factory=Rules)
    source: Path | None = None

    def caller_for(self, agent_id: str) -> Caller:
        """The Caller an authenticated agent id stands for."""
        grant = self.agents.get(agent_id, self.defaults)
        return Caller(agent_id, grant.authority, grant.scopes, grant.admin)


def load(path: Path | None) -> Policy:
    """Reads a policy file; None gives the built-in defaults.

    Raises:
        PolicyError: the file is missing, not TOML, or holds an unknown key or a bad value
            (the message names the file, the key and what is allowed).
    """
    if path is None:
        return Policy()
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as exc:
        raise PolicyError(f"cannot read the policy file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"the policy file {path} is not valid TOML: {exc}") from None
    return parse(doc, path)


def parse(doc: Mapping[str, Any], source: Path | None = None) -> Policy:
    """Builds a Policy from a parsed TOML document (see the module docstring).

    Raises:
        PolicyError: an unknown key or a bad value.
    """
    where = str(source) if source else "policy"
    _known(doc, {"defaults", "agents", "conflicts", "trust", "layers"}, where, "")
    defaults = _grant(doc.get("defaults", {}), Grant(), where, "[defaults]")
    agents = {}
    for agent_id, table in _table(doc, "agents", where).items():
        try:
            validate_agent_id(agent_id)
        except Unauthenticated as exc:  # a bad file, here
            raise PolicyError(f"{where}: [agents.{agent_id}]: {exc}") from None
        agents[agent_id] = _grant(table, defaults, where, f"[agents.{agent_id}]")
    return Policy(agents=agents, defaults=defaults, rules=_rules(doc, where), source=source)


def _table(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, Mapping):
        raise PolicyError(f"{where}: {key} must be a table ([{key}]), got {value!r}")
    return value


def _known(table: Mapping[str, Any], allowed: set[str], where: str, name: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise PolicyError(f"{where}: unknown key {unknown[0]!r} in {name or 'the top level'}; "
                          f"allowed: {', '.join(sorted(allowed))}")


def _grant(table: Mapping[str, Any], base: Grant, where: str, name: str) -> Grant:
    if not isinstance(table, Mapping):
        raise PolicyError(f"{where}: {name} must be a table, got {table!r}")
    _known(table, {"authority", "scopes", "admin"}, where, name)
    authority = table.get("authority", base.authority)
    if isinstance(authority, bool) or not isinstance(authority, int) or not (
            HUMAN_AUTHORITY <= authority <= AUTOMATED_AUTHORITY):
        raise PolicyError(f"{where}: {name} authority must be an integer from {HUMAN_AUTHORITY} (human) to "
                          f"{AUTOMATED_AUTHORITY} (automated), got {authority!r}")
    admin = table.get("admin", base.admin)
    if not isinstance(admin, bool):
        raise PolicyError(f"{where}: {name} admin must be true or false, got {admin!r}")
    scopes = base.scopes
    if "scopes" in table:
        scopes = _scopes(table["scopes"], where, name)
    return Grant(authority, scopes, admin)


def _scopes(value: Any, where: str, name: str) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise PolicyError(f"{where}: {name} scopes must be a list of strings, got {value!r}")
    if "*" in value:
        return None
    for pattern in value:
        try:
            validate_scope_pattern(pattern)
        except InvalidArgument as exc:
            raise PolicyError(f"{where}: {name} scopes: {exc}") from None
    return tuple(value)


def _rules(doc: Mapping[str, Any], where: str) -> Rules:
    rules = Rules()
    conflicts = _table(doc, "conflicts", where)
    _known(conflicts, {"semantic_threshold"}, where, "[conflicts]")
    if "semantic_threshold" in conflicts:
        threshold = conflicts["semantic_threshold"]
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise PolicyError(f"{where}: [conflicts] semantic_threshold must be a number from 0 (off) to 1, "
                              f"got {threshold!r}")
        rules = replace(rules, semantic_threshold=float(threshold))
    trust = _table(doc, "trust", where)
    _known(trust, {"causal_relations"}, where, "[trust]")
    if "causal_relations" in trust:
        relations = trust["causal_relations"]
        if not isinstance(relations, list) or not all(isinstance(r, str) for r in relations):
            raise PolicyError(f"{where}: [trust] causal_relations must be a list of edge types")
        try:
            rules = replace(rules, causal_relations=frozenset(validate_relation(r, "causal_relations")
                                                              for r in relations))
        except InvalidArgument as exc:
            raise PolicyError(f"{where}: [trust] {exc}") from None
    layers = dict(DEFAULT_LAYERS)
    by_name = {rule.name: rule for rule in DEFAULT_LAYERS.values()}
    settable = {f.name for f in fields(LayerRule)} - {"number", "name"}
    for layer_name, table in _table(doc, "layers", where).items():
        if layer_name not in by_name:
            raise PolicyError(f"{where}: unknown layer [layers.{layer_name}]; the layers are "
                              f"{', '.join(by_name)}")
        if not isinstance(table, Mapping):
            raise PolicyError(f"{where}: [layers.{layer_name}] must be a table")
        _known(table, settable, where, f"[layers.{layer_name}]")
        for key, value in table.items():
            _check_layer_value(key, value, where, f"[layers.{layer_name}]")
        rule = by_name[layer_name]
        layers[rule.number] = replace(rule, **table)
    return replace(rules, layers=layers)


def _check_layer_value(key: str, value: Any, where: str, name: str) -> None:
    if key == "archivable":
        ok = isinstance(value, bool)
        wanted = "true or false"
    elif key == "archive_after_days":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        wanted = "a whole number of days >= 0"
    else:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        wanted = "a number"
    if not ok:
        raise PolicyError(f"{where}: {name} {key} must be {wanted}, got {value!r}")
