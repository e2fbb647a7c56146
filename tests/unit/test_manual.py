"""The manual stays true: the README is a front door of at most 400 lines, its table names every page of the
manual, the set-up commands are the ones CI runs, its command table and the configuration table name what exists,
and every relative link and #anchor between pages resolves.

The manual's pages live beside the code they describe (`ops/manual.py`); a link that names a moved or renamed
page or heading fails here with the page, the link and what it should point at.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

from mnemosync.agent.client_settings import ClientSettings
from mnemosync.agent.dashboard.dashboard_settings import DashboardSettings
from mnemosync.cli import COMMANDS
from mnemosync.server.settings import ServerSettings
from ops import manual

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 400

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", flags=re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", flags=re.MULTILINE)


def _markdown_files() -> list[str]:
    """Every Markdown file of the repository: committed, or new and not ignored."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return sorted(name for name in set(listed) if (ROOT / name).exists())


def _prose(text: str) -> str:
    """The text outside code: fenced blocks and code spans cannot hold links."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors GitHub makes for a page's headings (a repeated heading gets -1, -2, …)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        base = slug(heading)
        count = seen.get(base, 0)
        out.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return out


def broken_links(root: Path, name: str) -> list[str]:
    """Each relative link or #anchor of the page `name` (a path under `root`) that does not resolve, with why."""
    page = root / name
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in _LINK.findall(_prose(text)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # a URL: out of scope, the check stays offline
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{name}: ({target}): no file {resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text(encoding="utf-8")):
            broken.append(f"{name}: ({target}): no heading with anchor #{anchor} in {resolved.relative_to(root)}")
    return broken


def test_every_relative_link_and_anchor_of_every_markdown_page_resolves():
    files = _markdown_files()
    assert "README.md" in files and len(files) > 10
    broken = [problem for name in files for problem in broken_links(ROOT, name)]
    assert broken == [], "links that point nowhere (fix the target or the heading):\n" + "\n".join(broken)


def test_a_link_to_a_missing_page_or_heading_is_reported(tmp_path):
    names = {"README.md": "# Title\n\n## The plugin (one install)\n\n[ok](#the-plugin-one-install) [gone](#nothing)"
                          " [page](other.md) [`code`](missing.md) `[not a link](missing.md)`\n"
                          "```\n[in a fence](missing.md)\n```\n[web](https://example.com/x.md)\n",
             "other.md": "# Other\n"}
    for name, text in names.items():
        (tmp_path / name).write_text(text)
    assert broken_links(tmp_path, "README.md") == [
        "README.md: (#nothing): no heading with anchor #nothing in README.md",
        f"README.md: (missing.md): no file {(tmp_path / 'missing.md').resolve()}"]


def test_headings_get_githubs_anchors():
    assert slug("`mnemosync init`: a project without the plugin") == "mnemosync-init-a-project-without-the-plugin"
    assert slug("The session's MCP server") == "the-sessions-mcp-server"
    assert slug("Consolidation: the sleep cycle without an LLM") == "consolidation-the-sleep-cycle-without-an-llm"
    assert anchors("# A\n\n## Map\n\n## Map\n") == {"a", "map", "map-1"}


def test_the_readme_is_a_front_door_of_at_most_400_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, over {README_MAX_LINES}: move what is about one folder into that folder's "
        "README.md (or a page beside it) and link it from the manual's table")


def test_the_readmes_manual_table_names_every_page_of_the_manual():
    """Every Markdown page outside a data folder is in the table (a page no one can find from the front door is
    lost); every page the table names exists."""
    pages = {p.relative_to(ROOT).as_posix() for p in manual.pages(ROOT)}
    written = {name for name in _markdown_files() if "data" not in Path(name).parts}
    assert sorted(written - pages) == [], "pages missing from the README's table under '## The manual'"
    assert sorted(p for p in pages if not (ROOT / p).exists()) == []


def test_the_readmes_two_set_up_commands_are_the_server_and_the_suite_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    set_up = readme.split("\n## Set-up: two commands\n", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```sh\n(.*?)\n```", set_up, flags=re.DOTALL) == ["ops/serve.sh", "ops/test.sh"]
    assert "exec bash ops/test.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of each body row of the Markdown table whose header line starts with `header`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def test_the_readmes_command_table_names_every_command_and_only_commands_that_exist():
    """A command missing from the front door's table is one a user never finds; one the table names that the
    command table lacks is a stale line."""
    rows = _table_rows((ROOT / "README.md").read_text(encoding="utf-8"), "| command | what it does |")
    spans = [span for row in rows for span in re.findall(r"`([^`]+)`", row[0])]
    named = {name for span in spans if span.startswith("mnemosync ")
             for name in span.removeprefix("mnemosync ").split()[0].split("/")}
    first_words = {word for span in spans for word in span.removeprefix("mnemosync ").split()[0].split("/")}
    assert sorted(named - set(COMMANDS)) == [], "the README's command table names commands that do not exist"
    assert sorted(set(COMMANDS) - first_words) == [], "commands missing from the README's command table"


def test_every_setting_of_every_process_is_in_the_configuration_table_with_its_variable():
    """`server/CONFIGURATION.md` is where operators look a setting up: every field of the server's, the agent's
    and the dashboard's settings is a row of its table naming `MNEMOSYNC_<FIELD>` (a nested table, its
    `[server.<field>]`), and every variable the table names is one the code reads."""
    rows = _table_rows((ROOT / "server" / "CONFIGURATION.md").read_text(encoding="utf-8"), "| setting | env |")
    missing = []
    for kind, settings in (("server", ServerSettings), ("client", ClientSettings), ("dashboard", DashboardSettings)):
        for field in dataclasses.fields(settings):
            variable = f"MNEMOSYNC_{field.name.upper()}"
            if not any(row[0].startswith(kind) and (f"`{field.name}`" in row[0] and variable in row[1]
                                                    or f"`[{kind}.{field.name}]`" in row[0]) for row in rows):
                missing.append(f"{kind} {field.name} ({variable})")
    assert missing == [], "settings missing from server/CONFIGURATION.md, or listed without their variable"

    source = "\n".join(path.read_text(encoding="utf-8") for folder in ("server", "agent_client", "mcp_shim", "proto")
                       for path in (ROOT / folder).rglob("*.py"))
    fields = {f"MNEMOSYNC_{field.name.upper()}" for settings in (ServerSettings, ClientSettings, DashboardSettings)
              for field in dataclasses.fields(settings)}
    named = {variable for row in rows for variable in re.findall(r"MNEMOSYNC_[A-Z0-9_]+", row[1])}
    assert sorted(v for v in named if v not in fields and v not in source) == [], (
        "server/CONFIGURATION.md names variables no code reads")
