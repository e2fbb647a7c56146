"""A markdown file's front matter as a person or a YAML tool writes it, read without a YAML parser (the vault).

The vault writes each value as JSON on its own `key: value` line, which YAML
reads too. People and tools (seed 004's own notes) also write the YAML forms
below, so these are read as well; anything else is refused with the file and
line, never guessed at:

    type: decision                      an unquoted scalar: a JSON value (number, true, null) or plain text
    title: 'It''s done'                 a single-quoted string ('' is a quote)
    tags: [redis, timeout, "two words"] a flow list of scalars
    tags:                               a block list of scalars, one `- item` a line
      - redis
    relations:                          a block list of mappings of scalars (seed 004's relations)
      - target: def789ab-…
        type: SOLVES

Comments (`# …` lines) and blank lines are skipped. A nested list, a mapping
outside a block list, an indented line that continues nothing, an unclosed
quote and a value starting with `"`, `[` or `{` that is not JSON are errors.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mnemosync.kernel.errors import InvalidArgument

FRONT = "---"
_KEY = re.compile(r"^([A-Za-z_][\w-]*)\s*:(?:\s+(.*))?$")


def parse(text: str, name: str) -> tuple[dict[str, Any], str]:
    """(front matter, content) of a markdown file named `name` (for errors).

    Raises:
        InvalidArgument: naming the file (and line), when it has no front matter or a line is none of the
            accepted forms.
    """
    lines = text.split("\n")
    if not lines or lines[0].strip() != FRONT:
        raise InvalidArgument(f"{name}: a vault file starts with a '---' line and its front matter")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == FRONT)
    except StopIteration:
        raise InvalidArgument(f"{name}: the front matter has no closing '---' line") from None
    body = [(number, line) for number, line in enumerate(lines[1:end], 2)
            if line.strip() and not line.lstrip().startswith("#")]
    fields: dict[str, Any] = {}
    at = 0
    while at < len(body):
        number, line = body[at]
        at += 1
        if line[0].isspace() or line.startswith("-"):
            raise InvalidArgument(f"{name}: line {number} is indented or a list item under no 'key:' line")
        key, colon, value = line.partition(":")
        if not colon or not key.strip():
            raise InvalidArgument(f"{name}: line {number} is not 'key: value'")
        value = value.strip()
        if value or at == len(body) or not body[at][1].lstrip().startswith("-"):
            fields[key.strip()] = scalar_or_list(value, name, number)
            continue
        items, at = _block_list(body, at, name)
        fields[key.strip()] = items
    return fields, "\n".join(lines[end + 1:]).strip("\n")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block_list(body: list[tuple[int, str]], at: int, name: str) -> tuple[list[Any], int]:
    """The block list starting at `body[at]` (its `- item` lines, each a scalar or a mapping whose further keys
    are indented past the dash), and where the front matter goes on."""
    items: list[Any] = []
    dash = _indent(body[at][1])
    while at < len(body) and _indent(body[at][1]) == dash and body[at][1].lstrip().startswith("-"):
        number, line = body[at]
        at += 1
        text = line.lstrip()[1:]
        if text and not text[0].isspace():
            raise InvalidArgument(f"{name}: line {number} is not '- item'")
        text = text.strip()
        pair = _KEY.match(text)
        if pair is None or text.startswith(("'", '"')):
            items.append(scalar(text, name, number))
            continue
        mapping = {pair.group(1): scalar((pair.group(2) or "").strip(), name, number)}
        while at < len(body) and _indent(body[at][1]) > dash:
            number, line = body[at]
            at += 1
            more = _KEY.match(line.strip())
            if more is None:
                raise InvalidArgument(f"{name}: line {number} is not 'key: value' inside a list item")
            mapping[more.group(1)] = scalar((more.group(2) or "").strip(), name, number)
        items.append(mapping)
    if at < len(body) and body[at][1][0].isspace():
        raise InvalidArgument(f"{name}: line {body[at][0]} is indented but continues no list item")
    return items, at


MAX_DEPTH = 8
"""Most levels of nested lists and objects a JSON value may have (the vault writes two: relations)."""


def _json(value: str, name: str, number: int) -> Any:
    """`json.loads(value)` once its nesting is known to be at most MAX_DEPTH (a deep one is refused before the
    parser recurses into it).

    Raises:
        json.JSONDecodeError: it is not JSON.
        InvalidArgument: it nests deeper.
    """
    depth = 0
    quoted = escaped = False
    for char in value:
        if quoted:
            escaped, quoted = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            quoted = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise InvalidArgument(f"{name}: line {number}: the value nests more than {MAX_DEPTH} levels deep")
        elif char in "]}":
            depth -= 1
    return json.loads(value)


def scalar_or_list(value: str, name: str, number: int) -> Any:
    """A `key: value` line's value: JSON, a flow list of scalars, or a scalar."""
    try:
        return _json(value, name, number)
    except json.JSONDecodeError:
        pass
    if value.startswith("[") and value.endswith("]"):
        return [scalar(item, name, number) for item in _flow_items(value[1:-1], name, number)]
    return scalar(value, name, number)


def scalar(value: str, name: str, number: int) -> Any:
    """One scalar: a JSON value, a single-quoted string, or plain text (an empty value is "")."""
    if not value:
        return ""
    try:
        return _json(value, name, number)
    except json.JSONDecodeError:
        pass
    if len(value) >= 2 and value[0] == value[-1] == "'" and "'" not in value[1:-1].replace("''", ""):
        return value[1:-1].replace("''", "'")
    if value[0] in "\"'[{":
        raise InvalidArgument(f"{name}: line {number}: {value[:60]!r} is not a value this vault reads (JSON, a "
                              "plain or quoted text, or a list of those)")
    return value


def _flow_items(inner: str, name: str, number: int) -> list[str]:
    """The items of a flow list's inside, split at the commas outside quotes."""
    if not inner.strip():
        return []
    items: list[str] = []
    current: list[str] = []
    quote = ""
    for char in inner:
        if quote:
            quote = "" if char == quote and not (quote == '"' and current and current[-1] == "\\") else quote
        elif char in "\"'":
            quote = char
        elif char in "[]{}":
            raise InvalidArgument(f"{name}: line {number}: a list inside a list is not read (one level of "
                                  "[a, b] only)")
        elif char == ",":
            items.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    if quote:
        raise InvalidArgument(f"{name}: line {number}: a quote in the list is not closed")
    items.append("".join(current).strip())
    if any(not item for item in items):
        raise InvalidArgument(f"{name}: line {number}: the list has an empty item")
    return items
