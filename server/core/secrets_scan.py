"""Credential scan: the intake gate's check that no secret gets into shared memory.

Memories replicate to every agent's cache and the changelog keeps them for
ever, so a key that gets in is a key that has leaked. `find` looks for the
shapes of well-known credentials (cloud keys, private keys, API tokens,
JWTs) and for passwords written into URLs or assignments, and names the kind
it found. The refusal (`check`) names the kind and where it starts, never the
text itself, so the secret does not travel on into error messages and logs.

Patterns are anchored on each provider's fixed prefix and length; the
generic ones (URL passwords, `password=...`, bearer tokens) skip obvious
placeholders such as `${DB_PASSWORD}`, `<password>`, `****` or
`os.environ["KEY"]`, so notes *about* secrets can still be stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from server.core.errors import InvalidArgument

_T = TypeVar("_T")


@dataclass(frozen=True)
class Finding:
    """A credential found in a text: what kind, and the character offset where it starts."""

    kind: str
    start: int


_PLACEHOLDER = re.compile(
    r"""^(?:
        \*+ | [xX]{3,} | \.{3,} | … | -+
      | <[^>]*> | \[[^\]]*\] | \{\{[^}]*\}\} | \{[^}]*\} | \$\{[^}]*\} | \$\(?[A-Za-z_][A-Za-z0-9_]*\)?
      | %\(?\w*\)?s | %[A-Za-z_][A-Za-z0-9_]*%
      | (?:your|my|the|some|new|old)[-_]?[A-Za-z_-]*
      | changeme | password | passwd | pass | pwd | secret | token | redacted | hidden | masked
      | none | null | nil | undefined | empty | example | placeholder | dummy | fake | sample | todo | tbd
    )$""",
    re.VERBOSE | re.IGNORECASE,
)
_CODE_REFERENCE = re.compile(
    r"^(?:os\.|env\.|process\.env|settings\.|config\.|self\.|ENV\[|getenv|secrets\.|vault:|op://|ssm:|"
    r"arn:aws:secretsmanager)|[(\[]",
    re.IGNORECASE,
)


def _is_placeholder(value: str) -> bool:
    value = value.strip("\"'`")
    return not value or bool(_PLACEHOLDER.match(value)) or bool(_CODE_REFERENCE.search(value))


def _has_digit_and_letter(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _password_like(value: str) -> bool:
    """A value that could be a real password: not a placeholder, and not a plain short word."""
    value = value.strip("\"'`")
    if len(value) < 6 or _is_placeholder(value):
        return False
    return len(value) >= 12 or any(not c.isalpha() for c in value)


def _random_token(value: str) -> bool:
    return _has_digit_and_letter(value) and not _is_placeholder(value)


def _url_password(match: re.Match) -> bool:
    return _password_like(match.group("password"))


def _assignment(match: re.Match) -> bool:
    return _password_like(match.group("value"))


def _bearer(match: re.Match) -> bool:
    return _random_token(match.group("token"))


def _openai(match: re.Match) -> bool:
    body = match.group(0).split("-", 1)[1]
    return _random_token(body) and any(c.isupper() for c in body) and any(c.islower() for c in body)


_Check = Callable[[re.Match], bool] | None

_PATTERNS: list[tuple[str, re.Pattern, _Check]] = [
    ("a private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"), None),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AIDA|AROA)[0-9A-Z]{16}\b"), None),
    ("an AWS secret access key",
     re.compile(r"(?i)aws[\w.-]{0,20}?(?:secret|private)[\w.-]{0,20}?[\"']?\s*[:=]\s*[\"']?"
                r"(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"), None),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{50,255})\b"), None),
    ("a GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), None),
    ("a Slack token", re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{20,}"), None),
    ("a Slack webhook URL", re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]{20,}"),
     None),
    ("an Anthropic API key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{32,}"), None),
    ("an OpenAI API key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{32,}"), _openai),
    ("a Stripe secret key", re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b|\bwhsec_[A-Za-z0-9]{24,}\b"),
     None),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"), None),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{34,}\b"), None),
    ("an npm token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), None),
    ("a SendGrid API key", re.compile(r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"), None),
    ("a JSON Web Token", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,}"), None),
    ("a password in a URL",
     re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/?#@]+:(?P<password>[^\s/?#@]+)@[^\s/?#@]+"),
     _url_password),
    ("a bearer token", re.compile(r"(?i)\bbearer\s+(?P<token>[A-Za-z0-9._~+/-]{20,}=*)"), _bearer),
    ("a hard-coded password or secret",
     re.compile(r"(?i)\b[\w.-]*?(?:password|passwd|passphrase|pwd|client[_-]?secret|secret[_-]?key|api[_-]?key|"
                r"apikey|access[_-]?token|auth[_-]?token|private[_-]?key|secret)\b[\"']?\s*(?::=|=|:)\s*"
                r"(?P<value>\"[^\"\s]+\"|'[^'\s]+'|`[^`\s]+`|[^\s\"'`,;]+)"),
     _assignment),
]


def find(text: str) -> Finding | None:
    """The first credential in `text` (earliest position), or None."""
    best: Finding | None = None
    for kind, pattern, check in _PATTERNS:
        for match in pattern.finditer(text):
            if best is not None and match.start() >= best.start:
                break
            if check is None or check(match):
                best = Finding(kind, match.start())
                break
    return best


def check(text: str, name: str) -> None:
    """Refuses a text holding a credential, naming the kind and never the text.

    Args:
        text: The value to scan.
        name: Its field name, for the message (for example "content").

    Raises:
        InvalidArgument: rule intake-no-secrets.
    """
    found = find(text)
    if found is not None:
        raise InvalidArgument(
            f"intake-no-secrets: {name} contains what looks like {found.kind} (at character "
            f"{found.start}); secrets are never stored in shared memory. Remove it and say where the "
            "secret is kept instead (for example 'the deploy key is in the team vault under deploy/prod')"
        )


def mask(text: str) -> str:
    """`text` with every credential `find` would report replaced by `[secret: KIND]`.

    Used on the way out (search results, reads), so a secret stored before the
    intake gate knew its shape is not shown even though it is still stored
    (remove it for good with a redaction).
    """
    spans: list[tuple[int, int, str]] = []
    for kind, pattern, accept in _PATTERNS:
        for match in pattern.finditer(text):
            if accept is None or accept(match):
                named = [g for g in match.groupdict() if match.group(g)]
                start, end = match.span(named[0]) if named else match.span()
                spans.append((start, end, kind))
    if not spans:
        return text
    out, position = [], 0
    for start, end, kind in sorted(spans):
        if start < position:
            continue
        out.append(text[position:start])
        out.append(f"[secret: {kind}]")
        position = end
    out.append(text[position:])
    return "".join(out)


def masked(memory: _T) -> _T:
    """A memory (anything with `content` and `quote`) with both passed through `mask`."""
    content, quote = mask(memory.content), mask(memory.quote)
    if content == memory.content and quote == memory.quote:
        return memory
    return replace(memory, content=content, quote=quote)
