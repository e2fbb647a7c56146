"""The manual's pages: the README and the pages its "The manual" table links, each beside the code it describes.

The README is the front door; every other page of the manual lives in the folder that owns most of what it
describes (`server/SECURITY.md`, `mcp_shim/README.md`). `tests/unit/test_docs.py` keeps the table complete
(every committed Markdown page outside a data folder is in it) and every link between the pages true; the
secret scan's prose sample (`ops/bench/bench_secrets.py`, `tests/unit/test_secrets_scan.py`) reads these pages.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pages(root: Path = ROOT) -> list[Path]:
    """The README, then each page its manual table links, in the table's order."""
    readme = (root / "README.md").read_text(encoding="utf-8")
    table = readme.split("\n## The manual\n", 1)[1].split("\n## ", 1)[0]
    linked = re.findall(r"^\|[^|]*\| \[[^]]*\]\(([^)#]+)\)", table, flags=re.MULTILINE)
    return [root / "README.md", *(root / link for link in linked)]

