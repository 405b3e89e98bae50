"""Secrets in command lines and config formats that have no ``key=value`` shape.

``curl -u user:pw``, ``mysql -pS3cret``, ``sshpass -p pw``, a ``.netrc`` entry, an Azure
connection string's ``AccountKey=``: each pattern needs its command or format around the value,
so ``docker run -u 1000:1000`` or "the password reset page" are left alone. Only the password is
replaced; the command stays readable. Values never hold a quote or backslash, so a raw JSONL line
stays valid JSON (see :mod:`recalld.ingest.sessions.redaction`).

Telegram bot tokens (``123456789:AA...``) and Discord bot tokens (``MTA4...GkXyzA.abc...``) start
with no fixed text the regex engine could skip to (a scan from every position costs 20% of all
redaction time), so they are found from their middle (``:AA``, ``.xxxxxx.``) and checked
backwards.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["FOLDED", "token_spans"]

_Edit = Callable[[str, re.Match[bytes]], tuple[int, int, str] | None]

_PLACEHOLDERS = frozenset(
    {"password", "passwd", "pass", "pw", "secret", "token", "xxx", "changeme", "example",
     "redacted", "null", "none"}
)  # fmt: skip


def _value_edit(kind: str) -> _Edit:
    """Replace group 1 unless it is a placeholder, a reference or already redacted."""

    def edit(text: str, m: re.Match[bytes]) -> tuple[int, int, str] | None:
        start, end = m.span(1)
        value = text[start:end]
        if len(value) < 2 or value.lower() in _PLACEHOLDERS or value.startswith("[REDACTED"):
            return None
        if value[0] in "$<{%*" or set(value) <= {"*", "x", "X", "."}:
            return None  # $PASS, <password>, {{ pw }}, ****
        return start, end, kind

    return edit


def _mysql_edit(text: str, m: re.Match[bytes]) -> tuple[int, int, str] | None:
    if text[m.start(1) - 1] != "p":  # the folded copy is lower case: -P3306 is a port
        return None
    return _value_edit("password")(text, m)


# On the ASCII-folded (lower-case) copy. A line break in a raw JSONL line is a "\n" escape at any
# depth ("\\n" once nested), and a command's words may be \"quoted\" there.
_NL = rb"(?:\\++n|\n)"
_SPACE = rb"(?:[ \t]|\\++n|\n)"
_Q = rb"""(?:\\*+["'])?"""
_CMD = rb"""(?:[^\n|;&\\]|\\[^n]){0,300}?"""  # the rest of one command, up to a pipe or ;
_VALUE = rb"""([^\s'"\\]{1,200}+)"""

_CURL = re.compile(
    rb"curl[ \t]" + _CMD + rb"(?<![a-z0-9_\-])(?:-u|--user)(?:[ \t]{1,4}|=)" + _Q
    + rb"""[^\s:'"\\]{0,100}:""" + _VALUE
)  # fmt: skip
_MYSQL = re.compile(rb"mysql[a-z]{0,10}[ \t]" + _CMD + rb"[ \t]-p" + _Q + _VALUE)
_MARIADB = re.compile(rb"mariadb[ \t]" + _CMD + rb"[ \t]-p" + _Q + _VALUE)
_SSHPASS = re.compile(
    rb"sshpass(?:[ \t]{1,4}-[a-oq-z][^\s]{0,40}){0,4}[ \t]{1,4}-p[ \t]{0,4}" + _Q + _VALUE
)
_NETRC = re.compile(
    rb"machine[ \t]{1,8}[^\s\\]{1,253}(?:" + _SPACE + rb"{1,12}(?:login|account|port)[ \t]{1,8}"
    rb"[^\s\\]{1,200}){0,3}" + _SPACE + rb"{1,12}password[ \t]{1,8}" + _VALUE
)
# Azure connection strings: AccountKey=<base64>; Service Bus / Event Hubs: SharedAccessKey=.
_AZURE = re.compile(
    rb"key(?:(?<=accountkey)|(?<=sharedaccesskey))[ \t]{0,8}=[ \t]{0,8}([a-z0-9+/]{20,300}+={0,2})"
)

#: ``(regex, needles, edit)`` for the folded-copy rules of :mod:`redaction`.
FOLDED: tuple[tuple[re.Pattern[bytes], tuple[bytes, ...], _Edit], ...] = (
    (_CURL, (b"curl",), _value_edit("password")),
    (_MYSQL, (b"mysql",), _mysql_edit),
    (_MARIADB, (b"mariadb",), _mysql_edit),
    (_SSHPASS, (b"sshpass",), _value_edit("password")),
    (_NETRC, (b"machine",), _value_edit("password")),
    (_AZURE, (b"accesskey", b"accountkey"), _value_edit("azure_key")),
)

_TELEGRAM_SECRET = re.compile(r"AA[A-Za-z0-9_\-]{30,40}+(?![A-Za-z0-9_\-])")


def telegram_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, kind)`` of each Telegram bot token (``<6-12 digits>:AA<30-40 chars>``)."""
    spans: list[tuple[int, int, str]] = []
    i = text.find(":AA")
    while i >= 0:
        start = i
        while start > 0 and text[start - 1].isdigit() and i - start < 13:
            start -= 1
        digits = i - start
        head_ok = start == 0 or not (text[start - 1].isalnum() or text[start - 1] in "_-")
        secret = _TELEGRAM_SECRET.match(text, i + 1)
        if 6 <= digits <= 12 and head_ok and secret is not None and not _all_alpha(secret):
            spans.append((start, secret.end(), "telegram_token"))
            i = text.find(":AA", secret.end())
        else:
            i = text.find(":AA", i + 1)
    return spans


def _all_alpha(secret: re.Match[str]) -> bool:
    return secret.group(0).isalpha()  # "AAAAAAAA..." filler, not a token


_DISCORD_TAIL = re.compile(r"\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40}+(?![A-Za-z0-9_\-.])")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _discord_spans(text: str) -> list[tuple[int, int, str]]:
    """Discord bot tokens: base64 of the bot's numeric id (so M, N or O first, 23-27 characters),
    a 6-character timestamp and a 27-40 character HMAC, joined by dots."""
    spans: list[tuple[int, int, str]] = []
    for m in _DISCORD_TAIL.finditer(text):
        start = m.start()
        while start > 0 and text[start - 1] in _TOKEN_CHARS and m.start() - start < 28:
            start -= 1
        head = text[start : m.start()]
        if not 23 <= len(head) <= 27 or head[0] not in "MNO":
            continue
        if start > 0 and (text[start - 1] in _TOKEN_CHARS or text[start - 1] == "."):
            continue
        whole = text[start : m.end()]
        if any(c.isdigit() for c in whole) and not whole.islower() and not whole.isupper():
            spans.append((start, m.end(), "discord_token"))
    return spans


def token_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, kind)`` of Telegram and Discord bot tokens, in order, not overlapping."""
    spans = telegram_spans(text) if ":AA" in text else []
    if "." in text:
        spans += _discord_spans(text)
    return sorted(spans)
