"""The one check every free-text field of an operation passes: text, not blank, no NUL, valid UTF-8, within its
byte limit. Operations and procedure steps share it so a field's refusal reads the same wherever it is."""

from __future__ import annotations

from typing import Any

from mnemosync.kernel.errors import InvalidArgument
from mnemosync.kernel.one_line import CONTROLS, one_line


def check_text(value: Any, name: str, max_bytes: int, *, allow_empty: bool = False) -> str:
    """`value` unchanged if it is acceptable text for the field `name`; InvalidArgument naming the field and the
    limit otherwise."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be text")
    if not allow_empty and not value.strip():
        raise InvalidArgument(f"{name} must not be empty")
    if "\x00" in value:
        raise InvalidArgument(f"{name} must not contain NUL characters")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument(f"{name} is not valid UTF-8 (it contains lone surrogates)") from None
    if size > max_bytes:
        raise InvalidArgument(f"{name} is {size} bytes; the limit is {max_bytes} bytes")
    return value


def check_one_line(value: str, name: str) -> str:
    """`value` unchanged when it holds no line break or other control character (`one_line.CONTROLS`); a field
    printed into the blocks a model reads (a path, a procedure step) must not start lines of its own there.

    Raises:
        InvalidArgument: naming the field, the character and where it is.
    """
    found = CONTROLS.search(value)
    if found is not None:
        raise InvalidArgument(f"{name} holds a control character ({one_line(found.group())} at character "
                              f"{found.start() + 1}); it must be one line of printable text")
    return value
