"""Secret redaction for transcript text and raw JSONL lines.

Every match becomes ``[REDACTED:<kind>]``; for ``key=value`` forms only the value is replaced so
the text stays readable (``DB_PASSWORD=[REDACTED:password]``).

Design rules, all load-bearing:

- Linear time. Token patterns start with a literal (so the regex engine skips ahead with a fast
  substring search) and use possessive quantifiers, so a failed attempt never rescans; the one
  multi-line pattern (PEM blocks, :mod:`pem_blocks`) is a bounded two-step scan in code; shapes
  with no literal to skip to (Telegram, Discord tokens) are found from their middle
  (:mod:`command_secrets`).
- Case-insensitive patterns run on an ASCII-folded *bytes* copy of the text (non-ASCII characters
  become ``?``, so offsets are unchanged): ``re.IGNORECASE`` and ``str.lower()`` are each several
  times slower on real transcripts.
- JSON-safe. No match starts or ends inside a JSON escape sequence or swallows a quote, and the
  replacement has no quote or backslash, so :func:`redact_line` can work on the raw text of a JSONL
  line and a valid JSON line stays valid JSON.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from recalld.ingest.sessions import command_secrets, pem_blocks, prose_secrets
from recalld.ingest.sessions.cues import Cues
from recalld.ingest.sessions.json_escapes import ESCAPE_HINT, map_strings, unescape
from recalld.ingest.sessions.redaction_tally import count as _count
from recalld.ingest.sessions.redaction_tally import counts as counts  # status reads it here

__all__ = ["KINDS", "counts", "redact", "redact_line", "redact_lines"]


def _token(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def _has_digit(value: str) -> bool:
    return any(c.isdigit() for c in value)


def _looks_random(value: str) -> bool:
    """Credential-like: has a digit, or mixes upper and lower case."""
    if _has_digit(value):
        return True
    return any(c.isupper() for c in value) and any(c.islower() for c in value)


def _lit(literal: str, width: int) -> str:
    """``literal`` (``width`` characters) starting a token.

    The character before must not be a token character, except after a JSON escape such as
    the ``\\n`` in a raw line (``...\\nghp_...``). The lookbehind comes *after* the literal so
    that the engine still scans for the literal's prefix.
    """
    return rf"{literal}(?:(?<![A-Za-z0-9_\-].{{{width}}})|(?<=\\[nrtbf].{{{width}}}))"


@dataclass(frozen=True, slots=True)
class _Rule:
    """A case-sensitive token pattern; ``group`` is the part replaced."""

    kind: str
    regex: re.Pattern[str]
    needles: tuple[str, ...]
    group: int = 0
    max_len: int = 10_000
    valid: Callable[[str], bool] | None = None


_TOK = r"[A-Za-z0-9_\-]"
# user:password@host in documentation: the word, not a password.
_URL_WORDS = frozenset({"password", "pass", "passwd", "pwd", "pw", "secret", "token"})
_RULES: tuple[_Rule, ...] = (
    _Rule("anthropic_key", re.compile(_lit("sk-ant-", 7) + rf"{_TOK}{{20,}}+"), ("sk-ant-",)),
    _Rule(
        "openai_key",
        re.compile(_lit("sk-", 3) + rf"{_TOK}{{20,}}+"),
        ("sk-",),
        max_len=400,
        valid=_has_digit,
    ),
    _Rule(
        "github_token",
        re.compile(_lit("gh[pousr]_", 4) + r"[A-Za-z0-9]{30,}+(?![A-Za-z0-9_\-])"),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        max_len=300,
    ),
    _Rule(
        "github_token",
        re.compile(_lit("github_pat_", 11) + r"[A-Za-z0-9_]{30,}+"),
        ("github_pat_",),
        max_len=300,
    ),
    _Rule("gitlab_token", re.compile(_lit("glpat-", 6) + rf"{_TOK}{{20,}}+"), ("glpat-",)),
    _Rule(
        "huggingface_token",
        re.compile(_lit("hf_", 3) + r"[A-Za-z0-9]{30,}+(?![A-Za-z0-9_\-])"),
        ("hf_",),
        max_len=120,
    ),
    _Rule(
        "npm_token",
        re.compile(_lit("npm_", 4) + r"[A-Za-z0-9]{36,}+(?![A-Za-z0-9_\-])"),
        ("npm_",),
        max_len=120,
    ),
    _Rule(
        "aws_access_key_id",
        re.compile(_lit("(?:AKIA|ASIA|ABIA|ACCA|AROA|AIDA)", 4) + r"[A-Z0-9]{16}(?![A-Za-z0-9_])"),
        ("AKIA", "ASIA", "ABIA", "ACCA", "AROA", "AIDA"),
    ),
    _Rule("slack_token", re.compile(_lit("xox[abposr]-", 5) + r"[A-Za-z0-9\-]{10,}+"), ("xox",)),
    _Rule("slack_token", re.compile(_lit("xapp-", 5) + r"[0-9]-[A-Za-z0-9\-]{10,}+"), ("xapp-",)),
    _Rule(
        "slack_webhook",
        re.compile(
            r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{8,}+"
        ),
        ("hooks.slack.com",),
    ),
    _Rule(
        "google_api_key",
        re.compile(_lit("AIza", 4) + r"[0-9A-Za-z_\-]{35}(?![A-Za-z0-9_\-])"),
        ("AIza",),
    ),
    _Rule("stripe_key", re.compile(_lit("sk_(?:live|test)_", 8) + r"[0-9A-Za-z]{16,}+"), ("sk_",)),
    _Rule("stripe_key", re.compile(_lit("rk_(?:live|test)_", 8) + r"[0-9A-Za-z]{16,}+"), ("rk_",)),
    _Rule(
        "jwt",
        re.compile(_lit("eyJ", 3) + rf"{_TOK}{{8,}}+\.eyJ{_TOK}{{8,}}+\.{_TOK}{{8,}}+"),
        ("eyJ",),
        max_len=16_000,
    ),
    _Rule(
        "sendgrid_key",
        re.compile(_lit(r"SG\.", 3) + r"[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{30,60}+"),
        ("SG.",),
        valid=_has_digit,
    ),
    _Rule(
        "discord_webhook",
        re.compile(r"discord(?:app)?\.com/api/webhooks/[0-9]{5,30}/[A-Za-z0-9_\-]{20,}+"),
        ("discord",),
    ),
    # scheme://user:password@host: keep the user, drop the password (redis://:pw@host has none).
    _Rule(
        "url_password",
        re.compile(r"://[^\s:/@\"'\\\[\]]{0,100}+:([^\s/@\"'\\]{1,200}+)@(?=[A-Za-z0-9\[])"),
        ("://",),
        group=1,
        valid=lambda v: not v.startswith(("[REDACTED", "$", "<")) and v.lower() not in _URL_WORDS,
    ),
)


def _rule_sub(rule: _Rule) -> Callable[[re.Match[str]], str]:
    def sub(match: re.Match[str]) -> str:
        value = match.group(rule.group)
        if len(value) > rule.max_len or (rule.valid is not None and not rule.valid(value)):
            return match.group(0)
        if rule.group == 0:
            return _token(rule.kind)
        base, whole = match.start(0), match.group(0)
        start, end = match.start(rule.group) - base, match.end(rule.group) - base
        return whole[:start] + _token(rule.kind) + whole[end:]

    return sub


_SUBS = tuple((rule, _rule_sub(rule)) for rule in _RULES)

# --- key = value assignments (case-insensitive, on folded bytes) --------------------------------

# Values: "double quoted" (escape pairs kept whole), \"escaped quoted\" (inside a JSON string),
# 'single quoted', or a bare run that ends where a shell word or a code expression would.
_DQ = rb'"(?P<dq>(?:[^"\\\n]|\\[^\n]){1,300}+)"'
_ESC = rb'\\"(?P<esc>[^"\\\n]{1,300}+)\\"'
_SQ = rb"'(?P<sq>[^'\"\\\n]{1,300}+)'"
_BARE = rb"""(?P<bare>[^\s"'\\`,;<>(){}\[\]]{1,300}+)"""
_EQ = rb"[ \t]{0,8}[:=][ \t]{0,8}"
# Plain text: the key may end with a quote ("password": ..., 'password': ...).
_TEXT_VALUE = (
    rb"""(?:\\?["'])?""" + _EQ + rb"(?:" + _DQ + rb"|" + _ESC + rb"|" + _SQ + rb"|" + _BARE + rb")"
)
# A raw JSON line: an unescaped quote is JSON syntax, never text. After `key": "` the value is the
# JSON string that follows; in any other position a quote ends the string the key is in, so only
# values that stay inside that string are taken (a bare value after `": ` would be a number).
_JSON_VALUE = (
    rb'(?:"[ \t]{0,8}:[ \t]{0,8}' + _DQ
    + rb"""|(?:\\["']|')?""" + _EQ + rb"(?:" + _ESC + rb"|" + _SQ + rb"|" + _BARE + rb"))"
)  # fmt: skip
# Password-like keys take any literal value; token/key-like ones need a credential-looking value
# (code is full of "max_tokens=256" and "token = next(it)").
_STRONG = rb"passw(?:or)?d|passphrase|secret"
_WEAK = rb"token|api[_\-]?key|access[_\-]?key|auth[_\-]?key|private[_\-]?key"
_KEY_TAIL = rb"[a-z0-9_\-]{0,30}+"
# The "...key" names are found at "key" and checked backwards, so that every regex starts with a
# literal, which the engine finds by fast substring search (an alternation is scanned char by char).
_KEY_PREFIXES = b"|".join(
    rb"(?<=%s%skey)" % (word, sep)
    for word in (b"api", b"access", b"auth", b"private")
    for sep in (b"_", b"-", b"")
)
_KEYS = (
    (rb"pass(?:w(?:or)?d|phrase)", b"pass"),
    (rb"secret", b"secret"),
    (rb"token", b"token"),
    (rb"key(?:" + _KEY_PREFIXES + rb")", b"key"),
)
_FLAG_KEY = rb"--(?:" + _STRONG + rb"|" + _WEAK + rb")" + _KEY_TAIL + rb"(?:=|[ \t]{1,4})"
_TEXT_ASSIGN = tuple(re.compile(k + _KEY_TAIL + _TEXT_VALUE) for k, _ in _KEYS)
_JSON_ASSIGN = tuple(re.compile(k + _KEY_TAIL + _JSON_VALUE) for k, _ in _KEYS)
_TEXT_FLAG = re.compile(
    _FLAG_KEY + rb"(?:" + _DQ + rb"|" + _ESC + rb"|" + _SQ + rb"|" + _BARE + rb")"
)
_JSON_FLAG = re.compile(_FLAG_KEY + rb"(?:" + _ESC + rb"|" + _SQ + rb"|" + _BARE + rb")")
# aws_secret_access_key, AWS_SECRET_KEY, SecretAccessKey: a 40-character base64 value.
_SEP = rb"""(?:\\?["'])?""" + _EQ
_AWS_SECRET = re.compile(
    rb"secret_?(?:access_?)?key" + _SEP + rb"""(?:\\?["'])?([a-z0-9/+=]{40})(?![a-z0-9/+=])"""
)
_BASIC = re.compile(
    rb"""authorization(?:\\?["'])?[ \t]{0,8}[:=][ \t]{0,8}(?:\\?["'])?[ \t]{0,8}basic[ \t]{1,8}"""
    rb"([a-z0-9+/]{8,2000}+={0,2})"
)
_BEARER = re.compile(rb"bearer[ \t]{1,8}+([a-z0-9\-._~+/]{16,8000}+=*+)(?![a-z0-9\-._~+/=])")
_STRONG_KEY = re.compile(rb"-*(?:" + _STRONG + rb")")

_PLACEHOLDERS = frozenset(
    {"null", "none", "nil", "true", "false", "undefined", "required", "optional", "string",
     "str", "empty", "redacted", "changeme", "example", "xxx", "your_password", "password"}
)  # fmt: skip
# camelCase / PascalCase words without a digit: a variable ("_csrf_token: csrfToken"), not a value.
_WORDS = re.compile(r"[A-Za-z][a-z]+(?:[A-Z][a-z]{2,})+")
_CODE_REF = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def _plausible(value: str) -> bool:
    """False for placeholders, references and code, which are not secrets."""
    if len(value) < 3 or value.lower() in _PLACEHOLDERS or value.startswith("[REDACTED"):
        return False
    if value[0] in "$<{%*#-" or set(value) <= {"*", "x", "X", ".", "-", ":"}:
        return False  # ${VAR}, <your-key>, {{ template }}, --next-flag, ****, an elided ":..."
    return not _CODE_REF.fullmatch(value)  # self.password, os.environ.get


def _assignment(text: str, m: re.Match[bytes]) -> tuple[int, int, str] | None:
    group = next(name for name, value in m.groupdict().items() if value is not None)
    start, end = m.span(group)
    value = text[start:end]
    strong = _STRONG_KEY.match(m.group(0))
    if strong is not None:
        if not _plausible(value):
            return None
        kind = "password" if strong.group(0).lstrip(b"-").startswith(b"pass") else "secret"
    elif (
        _plausible(value)
        and len(value) >= 8
        and not value.isdigit()
        and _looks_random(value)
        and not _WORDS.fullmatch(value)
    ):
        kind = "token"
    else:
        return None
    if group == "bare" and end < len(text) and text[end] in "([":
        return None  # password = get_password(...): code, not a literal
    return start, end, kind


def _group1(
    kind: str, valid: Callable[[str], bool] | None = None
) -> Callable[[str, re.Match[bytes]], tuple[int, int, str] | None]:
    def edit(text: str, m: re.Match[bytes]) -> tuple[int, int, str] | None:
        start, end = m.span(1)
        value = text[start:end]
        if value.startswith("[REDACTED") or (valid is not None and not valid(value)):
            return None
        return start, end, kind

    return edit


_Edit = Callable[[str, re.Match[bytes]], tuple[int, int, str] | None]
_Folded = tuple[tuple[re.Pattern[bytes], tuple[bytes, ...], _Edit], ...]
_COMMON: _Folded = (
    (_AWS_SECRET, (b"secret",), _group1("aws_secret_key", lambda v: not v.isdigit())),
    (_BASIC, (b"authorization",), _group1("basic_auth")),
    (_BEARER, (b"bearer",), _group1("bearer", _looks_random)),
)
# Assignments come last: by then "API_KEY=sk-..." reads "API_KEY=[REDACTED:openai_key]" and is
# left alone, so the more specific kind wins.
_TEXT_RULES: _Folded = (
    *_COMMON,
    *command_secrets.FOLDED,
    (_TEXT_FLAG, (b"--",), _assignment),
    *(
        (regex, (needle,), _assignment)
        for regex, (_, needle) in zip(_TEXT_ASSIGN, _KEYS, strict=True)
    ),
)
_JSON_RULES: _Folded = (
    *_COMMON,
    *command_secrets.FOLDED,
    (_JSON_FLAG, (b"--",), _assignment),
    *(
        (regex, (needle,), _assignment)
        for regex, (_, needle) in zip(_JSON_ASSIGN, _KEYS, strict=True)
    ),
)
# Each rule list with the automaton of its needles (recalld.ingest.sessions.cues).
_Folding = tuple[_Folded, Cues[bytes]]
_TEXT: _Folding = (_TEXT_RULES, Cues([needles for _, needles, _ in _TEXT_RULES]))
_JSON: _Folding = (_JSON_RULES, Cues([needles for _, needles, _ in _JSON_RULES]))
_SUB_CUES: Cues[str] = Cues([rule.needles for rule, _ in _SUBS])
# Up to this size a text is screened for the rules' cues; above it every rule runs: a
# literal-led regex scan costs about what the screen does there.
_SMALL = 4096


def _fold(text: str) -> bytes:
    # One byte per character, so match offsets in the folded copy are offsets in ``text``.
    return text.encode("ascii", "replace").lower()


def _apply_folded(text: str, regex: re.Pattern[bytes], folded: bytes, edit: _Edit) -> str:
    out: list[str] = []
    pos = 0
    for m in regex.finditer(folded):
        change = edit(text, m)
        if change is not None:
            start, end, kind = change
            out += [text[pos:start], _token(kind)]
            pos = end
    return "".join(out) + text[pos:] if out else text


#: Every kind that can appear in a ``[REDACTED:<kind>]`` token.
KINDS: frozenset[str] = frozenset(
    {r.kind for r in _RULES}
    | {"private_key", "aws_secret_key", "basic_auth", "bearer", "password", "secret", "token"}
    | {"high_entropy", "telegram_token", "discord_token", "azure_key"}
)


def _run_subs(text: str, small: bool) -> str:
    """The token rules (``_SUBS``) in order, each where its cue is in the text as it is by
    then (a token such as ``[REDACTED:discord_webhook]`` can hold a later rule's cue)."""
    due = _SUB_CUES.due(text) if small else _SUB_CUES.every()
    while due:
        i = due.pop(0)
        rule, sub = _SUBS[i]
        new = rule.regex.sub(sub, text)
        if new != text:  # not `is not`: a rule that declines a match returns it as it was
            text = new
            due = _SUB_CUES.due(text, i) if small else _SUB_CUES.every(i)
    return text


def _redact(text: str, folding: _Folding, json_line: bool = False, keep_lines: bool = False) -> str:
    if not text:
        return text
    small = len(text) <= _SMALL
    if "PRIVATE KEY" in text:
        text = pem_blocks.redact_pem(text, keep_lines)
    text = pem_blocks.redact_encoded_keys(text)
    text = _run_subs(text, small)
    text = _apply_spans(text, command_secrets.token_spans(text))
    rules, cues = folding
    folded = _fold(text)
    due = cues.due(folded) if small else cues.every()
    while due:
        i = due.pop(0)
        regex, _, edit = rules[i]
        new = _apply_folded(text, regex, folded, edit)
        if new is not text:  # the next rules are screened on the text as it is now
            text, folded = new, _fold(new)
            due = cues.due(folded, i) if small else cues.every(i)
    # Prose rules last: "password=..." and key ids are tokens by now, and an AWS key id's
    # token is itself a cue for the secret next to it.
    return _apply_spans(text, prose_secrets.find(text, folded, escaped=json_line))


def _apply_spans(text: str, spans: list[tuple[int, int, str]]) -> str:
    out: list[str] = []
    pos = 0
    for start, end, kind in spans:
        if start >= pos:
            out += [text[pos:start], _token(kind)]
            pos = end
    return "".join(out) + text[pos:] if out else text


def _redact_text(text: str) -> str:
    """The text rules, then again on a decoded copy when escapes could hide a secret
    (``postgres:\\/\\/admin:pw@h`` in a tool result that holds JSON); the decoded copy is what
    comes back when it held one."""
    out = _redact(text, _TEXT)
    if "\\" in out and ESCAPE_HINT.search(out):
        decoded = unescape(out)
        again = _redact(decoded, _TEXT)
        if again != decoded:
            return again
    return out


def _value_in_context(key: str | None, value: str) -> str:
    """A JSON string redacted as text, its key in front (``"aws_secret_access_key": "..."``)."""
    if key is None:
        return _redact_text(value)
    head = f"{key}: "
    joined = _redact_text(head + value)
    if joined.startswith(head):
        return joined[len(head) :]
    return _redact_text(value)


def _hides_characters(literal: str) -> bool:
    """A literal with an escape that can stand for a character of a secret (not ``\\n``)."""
    return ESCAPE_HINT.search(literal) is not None


def redact(text: str) -> str:
    """Replace the secrets in ``text`` by ``[REDACTED:<kind>]`` tokens; idempotent."""
    out = _redact_text(text)
    _count("indexed", text, out)
    return out


def redact_lines(text: str, where: str = "served") -> tuple[str, int]:
    """:func:`redact` for text whose line numbers matter (a memory note, a range of one): a
    multi-line secret becomes one token and as many line breaks, and escapes are decoded one
    line at a time, so every line keeps its number. Returns the text and the tokens added."""
    out = _redact(text, _TEXT, keep_lines=True)
    if "\\" in out and ESCAPE_HINT.search(out):
        lines = out.split("\n")
        for i, line in enumerate(lines):
            if "\\" in line and ESCAPE_HINT.search(line):
                decoded = unescape(line)
                again = _redact(decoded, _TEXT)
                if again != decoded:
                    lines[i] = again.replace("\r", "\\r").replace("\n", "\\n")
        out = "\n".join(lines)
    return out, _count(where, text, out)


def redact_line(raw: str) -> str:
    """:func:`redact` for the raw text of a JSONL line (as ``get`` returns it).

    First the raw text, where a quote is JSON syntax: values are only taken where they stay
    inside one JSON string, no pattern cuts an escape in half and the replacement has no quote or
    backslash. Then every string literal with an escape that can stand for a character of a
    secret (``\\uXXXX``, ``\\/``, ``\\xHH``) is decoded and redacted as text, its key in front,
    and written back re-encoded where that found more. A valid JSON line therefore stays valid
    JSON with the same keys and nesting.
    """
    out = _redact(raw, _JSON, json_line=True)
    if "\\" in out and ESCAPE_HINT.search(out):
        out = map_strings(out, _hides_characters, _value_in_context)
    _count("served", raw, out)
    return out
