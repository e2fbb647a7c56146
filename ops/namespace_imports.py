"""Rewrites a branch started before the `mnemosync` namespace to its names: imports, lazy `"module:attr"` strings,
`mock`-style dotted strings and docstring references.

    python -m ops.namespace_imports                  # the .py files the branch changed since main
    python -m ops.namespace_imports FILE...          # these files
    python -m ops.namespace_imports --check FILE...  # print what would change, write nothing

Only import statements, string literals and comments are rewritten, never other code (a variable called `server`
keeps its name). Running it twice changes nothing the second time. Modules moved or split after the namespace
(the ledger and its records, the agent's write and read paths) are named in the README's map of the code; an
import of one of those fails at once and says which module it looked for.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RENAMED = {
    "server.core.conflicts": "mnemosync.kernel.conflict_projection",
    "server.core.consolidation": "mnemosync.kernel.consolidation_rules",
    "server.core.settings": "mnemosync.kernel.settings_loading",
    "server.core": "mnemosync.kernel",
    "server.cli": "mnemosync.cli",
    "server.launcher": "mnemosync.__main__",
    "server.access": "mnemosync.server.usage_stats",
    "agent_client.settings": "mnemosync.agent.client_settings",
    "agent_client.dashboard.settings": "mnemosync.agent.dashboard.dashboard_settings",
    "agent_client.dashboard.access": "mnemosync.agent.dashboard.sign_in",
    "agent_client.dashboard.views_access": "mnemosync.agent.dashboard.views_sign_in",
}
"""Old dotted name to new, where more than the prefix changed (longest first wins)."""

PACKAGES = {
    "server": ("mnemosync.server", "admission app audit ca ca_cli chain_walks changelog clock consolidation "
               "governance identity merkle_log notary operator_cli operator_view policy postgres_store presence "
               "ratelimit redaction revocation schema service settings sqlite_store store store_migration sweep "
               "tolerant_decoding"),
    "agent_client": ("mnemosync.agent", "bulk bulk_cli cache cli cli_options client conflicts conflicts_cli "
                     "dashboard doctor doctor_cli embeddings errors graph_cli ingest lifecycle_cli local_reads "
                     "model model_cli outbox own_writes remote sync tls transcript transparency"),
    "mcp_shim": ("mnemosync.shim", "__main__ agent_cli app capture_hook channel config core_memories errors "
                 "hook_answers hook_cli ingest_cli init_cli local_service local_socket params prompt_hook recall "
                 "results session tools_admin tools_graph tools_lifecycle tools_memory tools_read"),
}
"""Each old top-level package: its name in the namespace, and the modules it had (only these are rewritten)."""


def _rules() -> list[tuple[re.Pattern[str], str]]:
    rules = [(re.compile(r"(?<![\w./])" + re.escape(old) + r"(?![\w])"), new)
             for old, new in sorted(RENAMED.items(), key=lambda kv: -len(kv[0]))]
    for old, (new, modules) in PACKAGES.items():
        names = "|".join(sorted(modules.split(), key=len, reverse=True))
        rules.append((re.compile(r"(?<![\w./])" + old + r"\.(" + names + r")(?![\w])"), new + r".\1"))
        rules.append((re.compile(r"^(\s*)from " + old + r" import ", re.M), r"\1from " + new + " import "))
    rules.append((re.compile(r"^(\s*)from server\.core import ", re.M), r"\1from mnemosync.kernel import "))
    rules.append((re.compile(r"(?<![\w.])python -m server\.cli\b"), "python -m mnemosync"))
    return rules


RULES = _rules()


def rewrite_text(text: str) -> str:
    """`text` with every old module name replaced (for strings, comments and import lines)."""
    for pattern, replacement in RULES:
        text = pattern.sub(replacement, text)
    return text


def _rewrite_literal(literal: str) -> str:
    """A string literal rewritten; in an f-string only the text outside `{...}`, which is code."""
    prefix = re.match(r"[a-zA-Z]*", literal).group(0).lower()  # type: ignore[union-attr]
    if "f" not in prefix:
        return rewrite_text(literal)
    return "".join(part if part.startswith("{") and not part.startswith("{{") else rewrite_text(part)
                   for part in re.split(r"(\{\{|\{[^{}]*\})", literal))


def rewrite_python(source: str) -> str:
    """`source` with import statements, string literals and comments rewritten; other code untouched."""
    lines = source.splitlines(keepends=True)
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    import_rows: set[int] = set()
    edits = []
    at_statement_start = True
    for i, token in enumerate(tokens):
        if token.type in (tokenize.STRING, tokenize.COMMENT):
            new = _rewrite_literal(token.string) if token.type == tokenize.STRING else rewrite_text(token.string)
            if new != token.string:
                edits.append((token.start, token.end, new))
        if at_statement_start and token.type == tokenize.NAME and token.string in ("import", "from"):
            end = next(t for t in tokens[i:] if t.type in (tokenize.NEWLINE, tokenize.ENDMARKER))
            import_rows.update(range(token.start[0], end.start[0] + 1))
        at_statement_start = token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT) or (
            token.type == tokenize.OP and token.string == ":" and at_statement_start)
    text = "".join(lines)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    for (start_row, start_col), (end_row, end_col), new in sorted(edits, reverse=True):
        start, end = offsets[start_row - 1] + start_col, offsets[end_row - 1] + end_col
        text = text[:start] + new + text[end:]
    lines = text.splitlines(keepends=True)
    for row in import_rows:
        lines[row - 1] = rewrite_text(lines[row - 1])
    return "".join(lines)


def _changed_since_main() -> list[Path]:
    base = subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    names = subprocess.run(["git", "diff", "--name-only", "--diff-filter=AMR", base], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    return [ROOT / n for n in names if n.endswith(".py")]


def main(argv: list[str] | None = None) -> int:
    """Rewrites the files (see the module docstring); returns 1 with --check when any would change."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--check", action="store_true", help="Only list the files that would change.")
    args = parser.parse_args(argv)
    changed = 0
    for path in args.files or _changed_since_main():
        source = path.read_text()
        new = rewrite_python(source) if path.suffix == ".py" else rewrite_text(source)
        if new != source:
            changed += 1
            print(f"{'would rewrite' if args.check else 'rewrote'} {path}")
            if not args.check:
                path.write_text(new)
    print(f"{changed} file(s) {'to rewrite' if args.check else 'rewritten'}", file=sys.stderr)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
