"""Rewrites a branch started before the `mnemosync` namespace to its names: imports, lazy `"module:attr"` strings,
`mock`-style dotted strings and docstring references.

    python -m ops.namespace_imports                  # the .py files the branch changed since main
    python -m ops.namespace_imports FILE...          # these files
    python -m ops.namespace_imports --check FILE...  # print what would change, write nothing

Only import statements, string literals and comments are rewritten, never other code (a variable called `server`
keeps its name). Running it twice changes nothing the second time. Every module it writes exists in the namespace
today (`MODULES`, checked by `tests/unit/test_namespace_imports.py`); a module whose replacement is not a rename
(`MANUAL`: the old store classes became the ledger over a changelog record) is left as it was, and the tool prints
`FILE:LINE: note: …` naming the change to make by hand, then exits with 1.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PACKAGES = {
    "server": ("mnemosync.server", "access admission app audit ca ca_cli chain_walks changelog clock consolidation "
               "governance identity merkle_log notary operator_cli operator_view policy presence ratelimit "
               "redaction revocation schema service settings store_migration sweep tolerant_decoding"),
    "server.core": ("mnemosync.kernel", "addresses blanking certificates checkpoint codec command_line conflicts "
                    "consolidation db entry errors event_time graph lifecycle lifecycle_state limits links listings "
                    "memory merkle metadata migrations model_identity operations outcomes overview private_files "
                    "projections reflection revisions search secret_patterns secrets_scan settings signing topics "
                    "vector_mirror vectors"),
    "agent_client": ("mnemosync.agent", "bulk bulk_cli cache cli cli_options client conflicts conflicts_cli "
                     "doctor doctor_cli embeddings errors graph_cli ingest lifecycle_cli local_reads "
                     "model model_cli outbox own_writes remote settings sync tls transcript transparency"),
    "agent_client.dashboard": ("mnemosync.agent.dashboard", "access app cli feed plots serving settings viewer "
                               "views_access views_agents views_changelog views_conflicts views_health "
                               "views_search web word_diff"),
    "mcp_shim": ("mnemosync.shim", "__main__ agent_cli app capture_hook channel config core_memories errors "
                 "hook_answers hook_cli ingest_cli init_cli local_service local_socket params prompt_hook recall "
                 "results session tools_admin tools_graph tools_lifecycle tools_memory tools_read"),
}
"""Each old package (the tree before the namespace, `db0ceff^`): its name in the namespace, and its modules."""

RENAMED = {
    "server.core.conflicts": "mnemosync.kernel.conflict_projection",
    "server.core.consolidation": "mnemosync.kernel.consolidation_rules",
    "server.core.settings": "mnemosync.kernel.settings_loading",
    "server.cli": "mnemosync.cli",
    "server.launcher": "mnemosync.__main__",
    "server.access": "mnemosync.server.usage_stats",
    "agent_client.settings": "mnemosync.agent.client_settings",
    "agent_client.dashboard.settings": "mnemosync.agent.dashboard.dashboard_settings",
    "agent_client.dashboard.access": "mnemosync.agent.dashboard.sign_in",
    "agent_client.dashboard.views_access": "mnemosync.agent.dashboard.views_sign_in",
    "mcp_shim.local_socket": "mnemosync.agent.local_socket",
}
"""Old module to new, where more than the package's prefix changed (a rename or a move to another package)."""

MANUAL = {
    "server.sqlite_store": "SqliteStore(path, …) became mnemosync.server.ledger.Ledger.sqlite(path, …); the writer's "
                           "_Job is mnemosync.server.group_commit.Job; _mirror/_submit are mirror/submit",
    "server.postgres_store": "PostgresStore(url, replica, read_url=…) became "
                             "mnemosync.server.ledger.Ledger.postgresql(url, replica, read_url=…); its constants "
                             "are in mnemosync.server.postgres_record",
    "server.store": "the Store type became mnemosync.server.ledger.Ledger (the application) or "
                    "mnemosync.server.record.ChangelogRecord (the storage side)",
    "agent_client.errors.Refused": "Refused became mnemosync.kernel.errors.MnemosyncError, which is no ClientError; "
                                   "a catch-all of every typed error catches mnemosync.kernel.errors.CodedError",
    "agent_client.errors.refused": "refused(code_name, message) became "
                                   "mnemosync.agent.remote.refusal(grpc.StatusCode, message)",
}
"""Old modules and names with nothing to rename them to: what replaced them, for a person to apply."""

NAMES = {
    "server.__version__": "mnemosync.__version__",
    **{f"agent_client.errors.{name}": f"mnemosync.kernel.errors.{name}" for name in (
        "NotFound", "StaleVersion", "FailedPrecondition", "PermissionDenied", "Unauthenticated", "ResourceExhausted")},
    "agent_client.errors.InvalidInput": "mnemosync.kernel.errors.InvalidArgument",
    "agent_client.errors.ModelError": "mnemosync.kernel.errors.ModelUnusable",
}
"""Old names that now live in another module (the agent's errors joined the kernel's one hierarchy); a renamed one
keeps its local name through `as`."""

TOP_LEVEL = {"server": "mnemosync.server", "agent_client": "mnemosync.agent", "mcp_shim": "mnemosync.shim"}


def _modules() -> dict[str, str]:
    table = {old: new for old, (new, _) in PACKAGES.items()}
    for old, (new, modules) in PACKAGES.items():
        table.update({f"{old}.{m}": f"{new}.{m}" for m in modules.split()})
    table.update(RENAMED)
    return table


MODULES = _modules()
"""Every module and package of the old tree (but `MANUAL`'s) to its name in the namespace today."""

_NAMED = sorted([*(m for m in MODULES if m not in TOP_LEVEL), *NAMES, *MANUAL], key=len, reverse=True)
_DOTTED = re.compile(r"(?<![\w./\[])(?:" + "|".join(map(re.escape, _NAMED)) + r")(?![\w\]])")
"""An old dotted name, not inside a longer one, nor a TOML table (`[server.consolidation]` names settings)."""
_COMMANDS = [(re.compile(r"(?<![\w.])python -m server\.cli\b"), "python -m mnemosync"),
             (re.compile(r"(?<![\w.])python -m mcp_shim\b(?!\.)"), "python -m mnemosync.shim")]


@dataclass
class Rewrite:
    """A file's new text and the changes left to a person, as (line, old module, what to do)."""

    text: str
    notes: list[tuple[int, str, str]] = field(default_factory=list)


def _manual(old: str, row: int, notes: list[tuple[int, str, str]] | None) -> str:
    if notes is not None and (row, old, MANUAL[old]) not in notes:
        notes.append((row, old, MANUAL[old]))
    return old


def rewrite_text(text: str, notes: list[tuple[int, str, str]] | None = None, row: int = 1) -> str:
    """`text` with every old module name replaced (for strings, comments and import lines); a name in `MANUAL`
    stays and is added to `notes` with its line (`row` is the line `text` starts on)."""

    def replace(match: re.Match[str]) -> str:
        old = match.group(0)
        if old in MANUAL:
            return _manual(old, row + text.count("\n", 0, match.start()), notes)
        return NAMES.get(old) or MODULES[old]

    text = _DOTTED.sub(replace, text)
    for pattern, replacement in _COMMANDS:
        text = pattern.sub(replacement, text)
    return text


def _rewrite_literal(literal: str, notes: list[tuple[int, str, str]], row: int) -> str:
    """A string literal rewritten; in an f-string only the text outside `{...}`, which is code."""
    prefix = re.match(r"[a-zA-Z]*", literal).group(0).lower()  # type: ignore[union-attr]
    if "f" not in prefix:
        return rewrite_text(literal, notes, row)
    out, at = [], row
    for part in re.split(r"(\{\{|\{[^{}]*\})", literal):
        out.append(part if part.startswith("{") and not part.startswith("{{") else rewrite_text(part, notes, at))
        at += part.count("\n")
    return "".join(out)


def _old(module: str) -> str | None:
    """The longest old module or package `module` starts with (itself, or one it is an attribute of)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        if name in MODULES or name in MANUAL:
            return name
    return None


def _from_import(node: ast.ImportFrom, row: int, notes: list[tuple[int, str, str]]) -> list[tuple[str, list]] | None:
    """`from OLD import a, b as c` as (module, [(name, as)]) groups under today's names, the imported modules
    renamed or moved one by one (a renamed module keeps its local name through `as`); None when it is not old."""
    module = node.module or ""
    if node.level or module.split(".")[0] not in TOP_LEVEL:
        return None
    prefix = _old(module)
    if prefix is None:
        return None
    if prefix in MANUAL:
        _manual(prefix, row, notes)
        return [(module, [(a.name, a.asname) for a in node.names])]
    here = MODULES[prefix] + module[len(prefix):]
    groups: dict[str, list[tuple[str, str | None]]] = {}
    for alias in node.names:
        old = f"{module}.{alias.name}"
        if old in MANUAL:
            _manual(old, row, notes)
            groups.setdefault(module, []).append((alias.name, alias.asname))
        elif old in MODULES or old in NAMES:
            parent, leaf = (NAMES.get(old) or MODULES[old]).rsplit(".", 1)
            bound = alias.asname or alias.name
            groups.setdefault(parent, []).append((leaf, None if bound == leaf else bound))
        else:
            groups.setdefault(here, []).append((alias.name, alias.asname))
    return list(groups.items())


def _format_from(indent: str, module: str, names: list[tuple[str, str | None]]) -> str:
    listed = [f"{n} as {a}" if a else n for n, a in names]
    line = f"{indent}from {module} import {', '.join(listed)}"
    if len(line) <= 120:
        return line
    return f"{indent}from {module} import (\n" + "".join(f"{indent}    {n},\n" for n in listed) + f"{indent})"


def _rewrite_import(statement: str, indent: str | None, row: int, notes: list[tuple[int, str, str]]) -> str:
    """One import statement (its text from its first token on) under today's names; `indent` is the statement's
    indentation, None when it follows other code on its line (`if TYPE_CHECKING: from …`)."""
    try:
        nodes = ast.parse(statement).body
    except SyntaxError:
        return rewrite_text(statement, notes, row)
    if len(nodes) == 1 and isinstance(nodes[0], ast.ImportFrom):
        kept = [(rewrite_text(nodes[0].module or ""), [(a.name, a.asname) for a in nodes[0].names])]
        groups = _from_import(nodes[0], row, notes)
        if groups is not None and groups != kept:
            lines = [_format_from(indent or "", m, n) for m, n in groups]
            text = ("\n" if indent is not None else "; ").join(lines).removeprefix(indent or "")
            comments = "".join(f"  {c}" for c in re.findall(r"#.*", statement))
            return text + comments + statement[len(statement.rstrip("\r\n")):]
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                old = _old(alias.name)
                if old in MANUAL:
                    _manual(old, row, notes)
    return rewrite_text(statement, notes, row)


def _unbound_imports(source: str, text: str) -> list[tuple[int, str, str]]:
    """`import old.module` without `as` binds the old top-level name: code (`text`, rewritten but for its code)
    that still says `old.module.…` must say the new name."""
    notes = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                old = _old(alias.name)
                if alias.asname is None and old in MODULES and re.search(
                        r"(?<![\w.])" + re.escape(alias.name) + r"\.", text):
                    new = MODULES[old] + alias.name[len(old):]
                    notes.append((node.lineno, alias.name, f"code that says {alias.name}.… must say {new}.…"))
    return notes


def rewrite(source: str) -> Rewrite:
    """`source` with import statements, string literals and comments rewritten, other code untouched; and the
    changes left to a person."""
    notes: list[tuple[int, str, str]] = []
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def at(position: tuple[int, int]) -> int:
        return offsets[min(position[0], len(lines) + 1) - 1] + position[1] if lines else 0

    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    statements: list[tuple[int, int]] = []
    edits: list[tuple[int, int, str]] = []
    at_statement_start = True
    for i, token in enumerate(tokens):
        if at_statement_start and token.type == tokenize.NAME and token.string in ("import", "from"):
            end = next(t for t in tokens[i:] if t.type in (tokenize.NEWLINE, tokenize.ENDMARKER))
            statements.append((at(token.start), at(end.end)))
            before = lines[token.start[0] - 1][:token.start[1]]
            new = _rewrite_import(source[statements[-1][0]:statements[-1][1]], None if before.strip() else before,
                                  token.start[0], notes)
            edits.append((*statements[-1], new))
        inside = statements and statements[-1][0] <= at(token.start) < statements[-1][1]
        if token.type in (tokenize.STRING, tokenize.COMMENT) and not inside:
            row = token.start[0]
            new = (_rewrite_literal(token.string, notes, row) if token.type == tokenize.STRING
                   else rewrite_text(token.string, notes, row))
            edits.append((at(token.start), at(token.end), new))
        at_statement_start = token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT) or (
            token.type == tokenize.OP and token.string == ":" and at_statement_start)
    text = source
    for start, stop, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[stop:]
    notes.extend(_unbound_imports(source, text))
    return Rewrite(text, sorted(notes))


def rewrite_python(source: str) -> str:
    """`source` with import statements, string literals and comments rewritten; other code untouched."""
    return rewrite(source).text


def _changed_since_main() -> list[Path]:
    base = subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    names = subprocess.run(["git", "diff", "--name-only", "--diff-filter=AMR", base], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    return [ROOT / n for n in names if n.endswith(".py")]


def main(argv: list[str] | None = None) -> int:
    """Rewrites the files (see the module docstring); 1 when a change is left to a person, or with --check when
    any file would change."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--check", action="store_true", help="Only list the files that would change.")
    args = parser.parse_args(argv)
    changed = manual = 0
    for path in args.files or _changed_since_main():
        source = path.read_text()
        if path.suffix == ".py":
            done = rewrite(source)
        else:
            notes: list[tuple[int, str, str]] = []
            done = Rewrite(rewrite_text(source, notes), notes)
        for row, old, what in done.notes:
            manual += 1
            print(f"{path}:{row}: note: {old}: {what}")
        if done.text != source:
            changed += 1
            print(f"{'would rewrite' if args.check else 'rewrote'} {path}")
            if not args.check:
                path.write_text(done.text)
    print(f"{changed} file(s) {'to rewrite' if args.check else 'rewritten'}, {manual} change(s) to make by hand",
          file=sys.stderr)
    return 1 if manual or (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
