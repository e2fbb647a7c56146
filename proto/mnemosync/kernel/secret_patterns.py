"""The credential shapes the secret scan knows (`mnemosync.kernel.secrets_scan` runs them).

Each `Rule` names a kind ("an AWS access key id") and a pattern. Rules for a
provider's token are anchored on its fixed prefix and length and need no
further check; the generic ones (a password in a URL, `password=…`,
`token: …`, `mysql -p…`) look at the value and skip placeholders such as
`${DB_PASSWORD}`, `<password>`, `****` or `os.environ["KEY"]` and values too
plain to be a credential, so notes *about* secrets can still be stored.

`anchored` rules are also looked for across line breaks and inside base64
(a prefix such as `ghp_` is specific enough that a match there is no
accident); the generic ones only in the text as written.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass

Check = Callable[[re.Match[str]], bool]


@dataclass(frozen=True)
class Rule:
    """One credential shape.

    Attributes:
        kind: What it is, for messages ("an AWS access key id").
        pattern: Where it is; a named group, if any, is the secret part (masked on the way out).
        check: Further test of a match (None: every match counts).
        anchored: The pattern starts with a provider's fixed prefix (see the module docstring).
    """

    kind: str
    pattern: re.Pattern[str]
    check: Check | None = None
    anchored: bool = True
    hints: tuple[str, ...] = ()
    """Lower-case strings one of which every match contains: the pattern only runs on a text that has one
    (a substring search is far cheaper than a regex); () runs it always."""

    def accepts(self, match: re.Match[str]) -> bool:
        """True when the match is a credential."""
        return self.check is None or self.check(match)

    def may_match(self, lowered: str) -> bool:
        """False when the lower-cased text cannot hold a match (none of the hints is in it)."""
        return not self.hints or any(hint in lowered for hint in self.hints)


# -- what a placeholder or a plain value looks like ---------------------------------------------------------------

_PLACEHOLDER = re.compile(
    r"""^(?:
        \*+ | [xX]{3,} | \.{3,} | … | -+ | _+ | \#+
      | <[^>]*> | \[[^\]]*\] | \{\{[^}]*\}\} | \{[^}]*\} | \$\{[^}]*\} | \$\(?[A-Za-z_][A-Za-z0-9_]*\)?
      | %\(?\w*\)?s | %[A-Za-z_][A-Za-z0-9_]*% | \$[0-9]+
      | (?:your|my|the|some|new|old|a|an)[-_]?[A-Za-z_-]*
      | changeme | password | passwd | pass | pwd | secret | token | redacted | hidden | masked
      | none | null | nil | undefined | empty | example | placeholder | dummy | fake | sample | todo | tbd
      | true | false | required | optional | string | str | bytes
    )$""",
    re.VERBOSE | re.IGNORECASE,
)
_CODE_REFERENCE = re.compile(
    r"^(?:os\.|env\.|process\.env|settings\.|config\.|self\.|cls\.|ENV\[|getenv|secrets\.|vault:|op://|ssm:|"
    r"arn:aws:secretsmanager|request\.|args\.|options\.|opts\.|params\.|kwargs|cfg\.|conf\.)|[()\[\]]",
    re.IGNORECASE,
)
_EXAMPLE = re.compile(r"EXAMPLE|example|xxxx|XXXX|0{8}|1234567890abcdef|abcdef1234567890", re.IGNORECASE)
_FORMAT = re.compile(r"%[-#0 +]*\d*[sdrifx]|%\(\w+\)[sdr]|\{[\w.]*\}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z_.]*")
_NAMES_A_SECRET = re.compile(r"key|token|secret|passw|credential|bearer", re.IGNORECASE)


def is_placeholder(value: str) -> bool:
    """A value that stands for a secret without being one (`<password>`, `${TOKEN}`, `os.environ[...]`, `'%s:%s'`)."""
    value = value.strip("\"'`")
    return (not value or bool(_PLACEHOLDER.match(value)) or bool(_CODE_REFERENCE.search(value))
            or bool(_FORMAT.search(value)))


def password_like(value: str) -> bool:
    """A value that could be a real password: not a placeholder, not a plain short word, and, unless quoted,
    not a name in code (`password = password_mgr`)."""
    quoted = value[:1] in "\"'`" and len(value) > 1
    value = value.strip("\"'`")
    if len(value) < 6 or is_placeholder(value) or (not quoted and _IDENTIFIER.fullmatch(value)):
        return False
    return len(value) >= 12 or any(not c.isalpha() for c in value)


def random_token(value: str, *, min_length: int = 16) -> bool:
    """A value that looks machine-made: long, one unbroken run, digits and letters, not a placeholder, an example
    or a name that says what it holds (`Ed25519PrivateKey`, `access_token_2`)."""
    value = value.strip("\"'`")
    if len(value) < min_length or is_placeholder(value) or _EXAMPLE.search(value) or _NAMES_A_SECRET.search(value):
        return False
    if not re.fullmatch(r"[A-Za-z0-9+/=_\-.~:]+", value) or re.fullmatch(r"[\w.-]*\.[a-z]{2,5}", value):
        return False  # not one token, or a file name
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _value(check: Callable[[str], bool], group: str = "value") -> Check:
    return lambda match: check(match.group(group))


def _prose_password(value: str) -> bool:
    value = value.strip("\"'`.,;")
    return len(value) >= 8 and password_like(value) and any(c.isdigit() for c in value) and any(
        c.isalpha() for c in value)


def _basic_auth(match: re.Match[str]) -> bool:
    """`Basic <base64 of user:password>` with a real-looking password."""
    raw = match.group("value")
    try:
        decoded = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return False
    user, sep, password = decoded.partition(":")
    return bool(sep and user and password_like(password))


def _mixed_token(match: re.Match[str]) -> bool:
    body = match.group("value")
    return random_token(body, min_length=20) and any(c.isupper() for c in body) and any(c.islower() for c in body)


def _no_example(match: re.Match[str]) -> bool:
    """Not a documentation example: AWS and others end their published example keys with EXAMPLE."""
    return not match.group(0).endswith("EXAMPLE")


_SEP = r"[\"']?\s*(?::=|=>|=|:)\s*"
_QUOTED = r"(?P<value>\"[^\"\s]+\"|'[^'\s]+'|`[^`\s]+`|[^\s\"'`,;]+)"

RULES: list[Rule] = [
    # Keys in PEM and other key files.
    Rule("a private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"), hints=("private key",)),
    Rule("a PuTTY private key", re.compile(r"\bPuTTY-User-Key-File-\d+:"), hints=("putty-user-key-file",)),
    Rule("an age secret key", re.compile(r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b"), hints=("age-secret-key-1",)),
    # Cloud providers.
    Rule("an AWS access key id",
         re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AIPA|ANPA|ANVA|APKA)[0-9A-Z]{16}\b"), _no_example,
         hints=("akia", "asia", "abia", "acca", "aipa", "anpa", "anva", "apka")),
    Rule("an AWS secret access key",
         re.compile(r"(?i)(?:secret[_-]?access[_-]?key|secretaccesskey|aws[\w.-]{0,20}?secret[\w.-]{0,20}?)"
                    + _SEP + r"[\"']?(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"),
         _value(lambda v: random_token(v, min_length=40)), anchored=False, hints=("secret",)),
    Rule("an AWS session token",
         re.compile(r"(?i)aws[_-]?session[_-]?token" + _SEP + r"[\"']?(?P<value>[A-Za-z0-9/+=]{100,})"),
         anchored=False, hints=("session",)),
    Rule("an Azure storage account key", re.compile(r"(?i)\bAccountKey=(?P<value>[A-Za-z0-9+/]{86}==)"),
         hints=("accountkey=",)),
    Rule("an Azure shared access key", re.compile(r"(?i)\bSharedAccessKey=(?P<value>[A-Za-z0-9+/]{42,44}=?)"),
         hints=("sharedaccesskey=",)),
    Rule("an Azure shared access signature",
         re.compile(r"[?&]sig=(?P<value>[A-Za-z0-9%/+]{40,}(?:%3D|=){0,2})(?![A-Za-z0-9%])"),
         _value(lambda v: random_token(v.replace("%2B", "+").replace("%2F", "/").replace("%3D", "="), min_length=40)),
         hints=("sig=",)),
    Rule("an Azure client secret", re.compile(r"(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.-]{3}\dQ~[A-Za-z0-9_~.-]{31,34}"
                                              r"(?![A-Za-z0-9_~.-])"), hints=("q~",)),
    Rule("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"), hints=("aiza",)),
    Rule("a Google OAuth client secret", re.compile(r"\bGOCSPX-[A-Za-z0-9_-]{28}(?![A-Za-z0-9_-])"),
         hints=("gocspx-",)),
    Rule("a Google OAuth access token", re.compile(r"\bya29\.[0-9A-Za-z_-]{30,}"), hints=("ya29.",)),
    Rule("a Firebase Cloud Messaging server key", re.compile(r"\bAAAA[A-Za-z0-9_-]{7}:APA91b[A-Za-z0-9_-]{120,}"),
         hints=("apa91b",)),
    Rule("an Alibaba Cloud access key id", re.compile(r"\bLTAI[A-Za-z0-9]{12,20}\b"), _no_example, hints=("ltai",)),
    Rule("a DigitalOcean token", re.compile(r"\bdo[opr]_v1_[a-f0-9]{64}\b"), hints=("_v1_",)),
    Rule("a Databricks token", re.compile(r"\bdapi[a-f0-9]{32}(?:-\d)?\b"), hints=("dapi",)),
    Rule("a Terraform Cloud token", re.compile(r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70}"),
         hints=(".atlasv1.",)),
    Rule("a HashiCorp Vault token", re.compile(r"\bhv[sbr]\.[A-Za-z0-9_-]{24,}"), hints=("hvs.", "hvb.", "hvr.")),
    Rule("a HashiCorp Vault token", re.compile(r"(?<![\w.])s\.(?P<value>[A-Za-z0-9]{24})(?![\w.])"), _mixed_token,
         hints=("s.",)),
    Rule("a Doppler token", re.compile(r"\bdp\.(?:st|pt|ct|sa|scim|audit)\.[A-Za-z0-9_.-]{40,}"), hints=("dp.",)),
    # Code hosting and package registries.
    Rule("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{50,255})\b"),
         hints=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    Rule("a GitLab token", re.compile(r"\bgl(?:pat|rt|dt|ptt|ft|oas|cbt)-[A-Za-z0-9_-]{20,}"), hints=("gl",)),
    Rule("a GitLab runner registration token", re.compile(r"\bGR1348941[A-Za-z0-9_-]{20,}"), hints=("gr1348941",)),
    Rule("an npm token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), hints=("npm_",)),
    Rule("a PyPI token", re.compile(r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}"), hints=("pypi-ageichlwas5vcmc",)),
    Rule("a RubyGems API key", re.compile(r"\brubygems_[a-f0-9]{48}\b"), hints=("rubygems_",)),
    Rule("a NuGet API key", re.compile(r"\boy2[a-z0-9]{43}\b"), hints=("oy2",)),
    Rule("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{34,}\b"), hints=("hf_",)),
    Rule("an Atlassian API token", re.compile(r"\bATATT3[A-Za-z0-9_=-]{60,}"), hints=("atatt3",)),
    Rule("a Linear API key", re.compile(r"\blin_(?:api|oauth)_[A-Za-z0-9]{40}\b"), hints=("lin_",)),
    Rule("a Notion token", re.compile(r"\b(?:secret_[A-Za-z0-9]{43}|ntn_[A-Za-z0-9]{40,})\b"),
         hints=("secret_", "ntn_")),
    Rule("a Postman API key", re.compile(r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b"), hints=("pmak-",)),
    Rule("a Grafana token", re.compile(r"\b(?:glsa_[A-Za-z0-9]{32}_[a-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2})"),
         hints=("glsa_", "glc_")),
    Rule("a New Relic key", re.compile(r"\bNR(?:AK|II|JS)-[A-Za-z0-9]{27}\b"), hints=("nrak-", "nrii-", "nrjs-")),
    # Messaging, payments, mail, AI.
    Rule("a Slack token", re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{20,}"), hints=("xox",)),
    Rule("a Slack app token", re.compile(r"\bxapp-\d-[A-Z0-9]+-\d+-[a-f0-9]{32,}"), hints=("xapp-",)),
    Rule("a Slack webhook URL",
         re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]{20,}"),
         hints=("hooks.slack.com",)),
    Rule("a Discord webhook URL",
         re.compile(r"https://(?:canary\.|ptb\.)?discord(?:app)?\.com/api/webhooks/\d+/[\w-]{60,}"),
         hints=("/api/webhooks/",)),
    Rule("a Discord bot token", re.compile(r"\b[MN][A-Za-z\d]{23,25}\.[\w-]{6}\.[\w-]{27,38}\b")),
    Rule("a Telegram bot token", re.compile(r"\b\d{8,10}:AA[A-Za-z0-9_-]{33}\b"), hints=(":aa",)),
    Rule("a Twilio API key", re.compile(r"\bSK[0-9a-f]{32}\b"), hints=("sk",)),
    Rule("a SendGrid API key", re.compile(r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"),
         hints=("sg.",)),
    Rule("a Mailgun API key", re.compile(r"\bkey-[0-9a-f]{32}\b"), hints=("key-",)),
    Rule("a Mailchimp API key", re.compile(r"\b[0-9a-f]{32}-us\d{1,2}\b"), hints=("-us",)),
    Rule("a Stripe secret key", re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b|\bwhsec_[A-Za-z0-9]{24,}\b"),
         hints=("_live_", "_test_", "whsec_")),
    Rule("a Square token", re.compile(r"\bsq0(?:atp-[0-9A-Za-z_-]{22}|csp-[0-9A-Za-z_-]{43})\b"), hints=("sq0",)),
    Rule("a Shopify token", re.compile(r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b"), hints=("shp",)),
    Rule("an Anthropic API key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{32,}"), hints=("sk-ant-",)),
    Rule("an OpenAI API key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?(?P<value>[A-Za-z0-9_-]{32,})"),
         _mixed_token, hints=("sk-",)),
    # Tokens in HTTP.
    Rule("a JSON Web Token", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,}"),
         hints=("eyj",)),
    Rule("a bearer token", re.compile(r"(?i)\bbearer\s+(?P<value>[A-Za-z0-9._~+/-]{20,}=*)"),
         _value(random_token), anchored=False, hints=("bearer",)),
    Rule("basic-auth credentials", re.compile(r"(?i)\bbasic\s+(?P<value>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])"),
         _basic_auth, anchored=False, hints=("basic",)),
    Rule("basic-auth credentials", re.compile(r"\"auth\"\s*:\s*\"(?P<value>[A-Za-z0-9+/]{8,}={0,2})\""),
         _basic_auth, anchored=False, hints=('"auth"',)),
    # Passwords and tokens written into URLs, commands and assignments.
    Rule("a password in a URL",
         re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/?#@]*:(?P<value>[^\s/?#@]+)@[^\s/?#@]+"),
         _value(password_like), anchored=False, hints=("://",)),
    Rule("a password on a command line",
         re.compile(r"\b(?:mysql|mysqldump|mysqladmin|mysqlsh|mariadb|mariadb-dump)\b[^\n]*?\s-p(?P<value>[^\s'\"]+|"
                    r"'[^'\n]+'|\"[^\"\n]+\")"), _value(password_like), anchored=False, hints=("mysql", "mariadb")),
    Rule("a password on a command line",
         re.compile(r"\b(?:sshpass\s+-p|redis-cli\b[^\n]*?\s-a)\s+(?P<value>'[^'\n]+'|\"[^\"\n]+\"|\S+)"),
         _value(password_like), anchored=False, hints=("sshpass", "redis-cli")),
    Rule("a password on a command line",
         re.compile(r"\bcurl\b[^\n]*?\s(?:-u|--user)\s+['\"]?[^\s:'\"]+:(?P<value>[^\s'\"]+)"),
         _value(password_like), anchored=False, hints=("curl",)),
    Rule("a password in a .netrc",
         re.compile(r"\bmachine\s+\S+\s+login\s+\S+\s+password\s+(?P<value>\S+)"),
         _value(password_like), anchored=False, hints=("machine",)),
    Rule("a hard-coded password",
         re.compile(r"(?i)\b[\w.-]*?(?:password|passwd|passphrase|pwd)[\w-]*" + _SEP + _QUOTED),
         _value(password_like), anchored=False, hints=("pass", "pwd")),
    Rule("a hard-coded password", re.compile(r"(?i)\b(?:password|passphrase)\s+(?:is|was)\s+(?P<value>\S+)"),
         _value(_prose_password), anchored=False, hints=("pass",)),
    Rule("a hard-coded secret or token",
         re.compile(r"(?i)\b[\w.-]*?(?:secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|"
                    r"credentials?|auth[_-]?key)[\w-]*" + _SEP + _QUOTED),
         _value(random_token), anchored=False, hints=("secret", "token", "key", "credential")),
]
"""Every credential shape, in no particular order (the scan reports the earliest in the text)."""
