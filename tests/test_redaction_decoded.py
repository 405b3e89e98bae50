"""Redaction, round 2 (issue 14, items 3 and 4): escaped secrets in raw lines, secrets in prose.

- ``get`` serves raw JSONL lines: a secret written with JSON escapes (``postgres:\\/\\/...``,
  ``sk-\\u0061nt-...``) decodes to the full secret, so each line is redacted on what its strings
  decode to, for every kind of secret, in Claude Code and Codex lines (Codex tool arguments are
  JSON inside a JSON string: escaped twice);
- an AWS secret access key next to its key id in plain text, or a random token next to the word
  secret / password / token, is redacted in what is indexed and in what ``get`` returns;
- a real Engine sync of such a transcript leaves none of them in the index, and ``status`` counts
  the redactions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import make_config, write
from recalld.embedding.registry import ProviderChoice
from recalld.engine import Engine
from recalld.ingest.sessions import redaction_tally
from recalld.ingest.sessions.redaction import counts, redact, redact_line
from test_redaction import AWS_ID, AWS_SECRET, POSITIVES

# One of every kind the redactor knows (the first example of each kind in test_redaction).
KINDS = {kind: (secret, text) for kind, secret, text in reversed(POSITIVES)}


def claude_text(text: str) -> dict[str, Any]:
    """A Claude Code user message."""
    return {
        "parentUuid": None,
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
        "uuid": "u1",
        "timestamp": "2026-11-01T10:00:00.000Z",
        "sessionId": "s1",
    }


def claude_tool_result(text: str) -> dict[str, Any]:
    """A Claude Code tool result."""
    content = [{"type": "tool_result", "tool_use_id": "toolu_01", "content": text}]
    return {"type": "user", "message": {"role": "user", "content": content}, "sessionId": "s1"}


def codex_message(text: str) -> dict[str, Any]:
    """A Codex rollout message."""
    payload = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return {"timestamp": "2026-11-01T10:00:00.000Z", "type": "response_item", "payload": payload}


def codex_call(text: str) -> dict[str, Any]:
    """A Codex shell call: the arguments are a JSON document inside a JSON string."""
    args = json.dumps({"command": ["bash", "-lc", text]})
    payload = {"type": "function_call", "name": "shell", "arguments": args, "call_id": "c1"}
    return {"timestamp": "2026-11-01T10:00:00.000Z", "type": "response_item", "payload": payload}


SHAPES = {f.__name__: f for f in (claude_text, claude_tool_result, codex_message, codex_call)}


def escaped(line: str, secret: str, twice: bool = False) -> str:
    """``line`` with the secret's second character written as ``\\uXXXX`` (``\\\\uXXXX`` in a
    JSON string inside a JSON string) and every ``/`` as ``\\/``: the same JSON value, but no
    raw-text pattern sees the secret."""
    pos = next(i for i, c in enumerate(secret) if i >= 1 and c.isalnum())
    enc = json.dumps(secret)[1:-1]
    if twice:
        enc = json.dumps(enc)[1:-1]
    assert enc in line and enc[:pos] == secret[:pos]
    code = ("\\\\u" if twice else "\\u") + f"{ord(secret[pos]):04x}"
    return line.replace(enc, enc[:pos] + code + enc[pos + 1 :]).replace("/", "\\/")


def line_for(shape: str, secret: str, text: str) -> str:
    """A transcript line of ``shape`` holding ``text``, its secret escaped."""
    return escaped(json.dumps(SHAPES[shape](text)), secret, twice=shape == "codex_call")


def strings(value: Any) -> str:
    """All strings of a parsed JSON value, decoded all the way (arguments parsed too)."""
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except ValueError:
            return value
        return value + "\n" + strings(inner) if isinstance(inner, dict | list) else value
    if isinstance(value, dict):
        return "\n".join(k + "\n" + strings(v) for k, v in value.items())
    if isinstance(value, list):
        return "\n".join(strings(v) for v in value)
    return ""


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_escaped_secret_is_redacted_in_get_lines(kind: str, shape: str) -> None:
    secret, text = KINDS[kind]
    line = line_for(shape, secret, text)
    assert secret in strings(json.loads(line))  # the line decodes to the full secret
    out = redact_line(line)
    decoded = strings(json.loads(out))  # still valid JSON
    assert secret[2:] not in decoded, (kind, shape, out)
    assert "[REDACTED:" in decoded
    assert json.loads(out).keys() == json.loads(line).keys()


def test_issue_examples_and_a_line_cut_short() -> None:
    url = (
        '{"type":"user","message":{"content":"db postgres:\\/\\/admin:pw12345@db.internal\\/app"}}'
    )
    key = "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"
    ant = json.dumps({"text": f"key {key}"}).replace("sk-ant", "sk-\\u0061nt")
    for line, gone in ((url, "pw12345"), (ant, "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa")):
        out = redact_line(line)
        assert gone not in json.loads(out)["message" if "message" in out else "text"].__str__()
    # A line still being written (no closing quote) is redacted as well, and stays as cut.
    cut = url[: url.index("app")]
    out = redact_line(cut)
    assert "pw12345" not in out and out.startswith('{"type":"user"') and "[REDACTED:" in out
    # Untouched lines come back byte for byte (escapes, spacing and key order kept).
    plain = '{"a": "x\\/y \\u00e9", "b":[1, 2]}'
    assert redact_line(plain) == plain


PROSE = [
    ("aws_secret_key", AWS_SECRET, f"the key id is {AWS_ID} with secret {AWS_SECRET} for prod"),
    ("aws_secret_key", AWS_SECRET, f"{AWS_ID} / {AWS_SECRET}"),
    (
        "secret",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Rt3Lm2X",
        "my secret: wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Rt3Lm2X",
    ),
    (
        "high_entropy",
        "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0",
        "the api token is Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0 ok",
    ),
    ("high_entropy", "q8Rt3Lm2XbPxRf7CYzJd9Kw2", "use password q8Rt3Lm2XbPxRf7CYzJd9Kw2 to log in"),
    ("high_entropy", "Fq3vT9xLm2Wz8Rk4Yp7Hs1Jd", "credential Fq3vT9xLm2Wz8Rk4Yp7Hs1Jd was rotated"),
    # Passwords said in a sentence: quoted, or a word prose does not write.
    ("password", "MarmotteBleue42", 'the wifi password is "MarmotteBleue42" for guests'),
    ("password", "hunter2xy", "my password is hunter2xy."),
    ("password", "Tr0ub4dor&3", "the password for the router is Tr0ub4dor&3 since May"),
    ("password", "S3cure!pass", "I changed the db password to S3cure!pass yesterday"),
]
PROSE_NEGATIVES = [
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed the token refresh",
    "the secret lives in src/components/AuthProvider/useSecretStore.ts now",
    "request id req_011CY15QS2LGwAeBxdfa6e1V had output_tokens 512",
    "password reset uses 123e4567-e89b-12d3-a456-426614174000 as the token id",
    "the token is passed to getAccessTokenFromCredentialsProvider() at startup",
    "the secret sauce: SCREAMING_SNAKE_CASE_CONSTANT_NAME_V2 and kebab-case-file-name-2024",
    "the password is required, and the password is Required. too",
    "password is hashed with bcrypt; reset the password to default",
    "the password is 8 characters long and the passwords were rotated",
    "the password is read from PASSWORD_ENV at start",
]


@pytest.mark.parametrize(("kind", "secret", "text"), PROSE)
def test_secret_in_prose_is_redacted(kind: str, secret: str, text: str) -> None:
    out = redact(text)
    assert secret not in out and f"[REDACTED:{kind}]" in out, out
    line = redact_line(json.dumps(claude_text(text)))
    assert secret not in line and json.loads(line)


@pytest.mark.parametrize("text", PROSE_NEGATIVES)
def test_prose_without_a_secret_stays(text: str) -> None:
    assert redact(text) == text
    line = json.dumps(claude_text(text))
    assert redact_line(line) == line


def test_engine_indexes_and_serves_none_of_them(home: Path, local_embedder: Any) -> None:
    lines = [line_for(s, secret, text) for s in SHAPES for secret, text in KINDS.values()]
    lines += [json.dumps(claude_text(text)) for _, _, text in PROSE]
    transcript = write(home / "sessions" / "chat.jsonl", "\n".join(lines) + "\n")
    config = make_config(home, sessions__paths=[str(home / "sessions" / "*.jsonl")])
    engine = Engine(config, choice=ProviderChoice(local_embedder, "test: local model"))
    redaction_tally.reset()  # secrets earlier tests redacted would not be counted again
    before = counts()
    try:
        engine.sync()
        status = engine.status()
        assert status["counts"]["session_files"] == 1
        got = engine.searcher.get({"path": str(transcript), "lines": 5000})
        served = strings([json.loads(line) for line in got["text"].splitlines()])
        secrets = [secret for secret, _ in KINDS.values()] + [s for _, s, _ in PROSE]
        for secret in secrets:
            word = re.sub(r"[^A-Za-z0-9]", " ", secret).split()[-1]
            res = engine.searcher.search({"query": word, "mode": "keyword", "min_score": 0.0})
            assert secret not in json.dumps(res), secret
            assert secret[2:] not in served, secret
        stored = b"".join(p.read_bytes() for p in home.glob("index.sqlite*") if p.is_file())
        for secret in secrets:
            assert secret[2:].encode() not in stored, secret
        after = status["redactions"]
        # Each secret once: the AWS pair of the prose samples is the one of KINDS, and every
        # secret is written in each of the four SHAPES.
        assert after["indexed"]["total"] - before["indexed"]["total"] == len(set(secrets))
        assert after["served"]["total"] == before["served"]["total"]  # get came later
        assert engine.status()["redactions"]["served"]["total"] > before["served"]["total"]
        first = counts()["served"]["total"]
        again = engine.searcher.get({"path": str(transcript), "lines": 5000})
        assert again["text"] == got["text"]  # served twice: nothing counted the second time
        assert counts()["served"]["total"] == first
        assert {"aws_secret_key", "high_entropy"} <= set(after["indexed"]["by_kind"])
    finally:
        engine.close()
