"""Chunking of transcript messages: the token cap, line ranges, stability under appending."""

from __future__ import annotations

import random
import re

import pytest

from conftest import BENCH, needs_bench
from recalld.ingest.sessions.chunking import SessionChunk, SessionChunker, chunk_messages
from recalld.ingest.sessions.formats import Message, parse_file

SPOTTER = BENCH / "transcripts" / "spotter"
SESSION = SPOTTER / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
needs_session = needs_bench("transcripts", "spotter", SESSION.name)

_PIECES = re.compile(r"\w{1,4}|[^\w\s]")


def count(text: str) -> int:
    """Stand-in for the model's tokenizer: words cut in 4-character pieces, each symbol one."""
    return len(_PIECES.findall(text))


def msg(line: int, role: str, text: str, ts: str = "2026-02-11T10:00:00Z", **kw: str) -> Message:
    return Message(line, role, text, kw.get("kind", "text"), ts, kw.get("name", ""))


_WORDS = "index search chunk token file line daemon query vector keyword embed cache"


def conversation(n: int, seed: int = 1) -> list[Message]:
    rng = random.Random(seed)
    words = _WORDS.split()
    out = []
    for i in range(n):
        size = rng.choice([3, 10, 40, 120, 400])
        text = " ".join(rng.choice(words) for _ in range(size))
        day = 10 + i // 40
        out.append(msg(i + 1, rng.choice(["user", "assistant", "tool"]), text, f"2026-02-{day}T1"))
    return out


def check_invariants(
    chunks: list[SessionChunk], messages: list[Message], max_tokens: int = 256
) -> None:
    assert chunks
    for c in chunks:
        if c.embed:  # keyword-only parts are cut by characters
            assert count(c.text) + 2 <= max_tokens, (count(c.text), c.text[:200])
        assert c.start_line <= c.end_line
    assert [c.start_line for c in chunks] == sorted(c.start_line for c in chunks)
    for m in messages:  # every message's line is covered by a chunk
        assert any(c.start_line <= m.line <= c.end_line for c in chunks), m.line


def test_rendering_and_dates() -> None:
    messages = [
        msg(1, "user", "Fix the build", "2026-02-11T09:00:00Z"),
        msg(2, "assistant", "Building.", "2026-02-11T09:00:01Z"),
        msg(3, "Caroline", "unused role", "2026-02-12T10:00:00Z", name="Caroline"),
    ]
    (chunk,) = chunk_messages(messages, count)
    assert chunk == SessionChunk(
        1,
        3,
        "[2026-02-11]\nuser: Fix the build\nassistant: Building.\n"
        "[2026-02-12]\nCaroline: unused role",
    )
    (plain,) = chunk_messages(messages, count, dates=False)
    assert "[" not in plain.text.split("\n")[0] and plain.text.startswith("user: Fix the build")
    no_time = [Message(1, "user", "hi", "text")]
    assert chunk_messages(no_time, count)[0].text == "user: hi"


def test_chunks_respect_the_cap_and_the_target() -> None:
    messages = conversation(300)
    chunks = chunk_messages(messages, count, max_tokens=256, target_tokens=160)
    check_invariants(chunks, messages)
    sizes = [count(c.text) for c in chunks[:-1]]
    # Packed: most chunks reach the target instead of holding a message each.
    assert sum(s >= 100 for s in sizes) > 0.7 * len(sizes)
    total = sum(count(f"{m.role}: {m.text}") for m in messages)
    assert len(chunks) < total / 120


def test_whole_messages_and_text_preserved() -> None:
    messages = conversation(120, seed=3)
    chunks = chunk_messages(messages, count)
    rendered = "\n".join(c.text for c in chunks)
    for m in messages:
        if count(f"{m.role}: {m.text}") < 200:
            assert f"{m.role}: {m.text}" in rendered


@pytest.mark.parametrize(
    "text",
    [
        "\n".join(f"line {i}: " + "word " * 30 for i in range(400)),  # many lines
        "word " * 20_000,  # one huge line of words
        "x" * 50_000,  # one huge "word"
        "short\n" + "y" * 3000 + "\n" + "z " * 3000,  # mixed
    ],
    ids=["lines", "words", "one-word", "mixed"],
)
def test_long_message_is_split_keeping_its_line(text: str) -> None:
    messages = [msg(7, "user", "before"), msg(8, "tool", text), msg(9, "user", "after")]
    chunks = chunk_messages(messages, count, max_tokens=128, target_tokens=80)
    check_invariants(chunks, messages, max_tokens=128)
    parts = [c for c in chunks if c.start_line == c.end_line == 8]
    assert len(parts) > 3
    # All of the message's text survives, in order.
    body = "".join(
        re.sub(r"^\[[\d-]+\]\n", "", c.text).replace("tool: ", "").replace("\n", "")
        for c in chunks
        if c.end_line == 8 or c.start_line == 8
    )
    assert re.sub(r"\s", "", text) in re.sub(r"\s", "", body)


def test_appending_only_changes_the_last_chunk() -> None:
    messages = conversation(250, seed=5)
    full = chunk_messages(messages, count)
    for cut in (1, 2, 17, 55, 133, 249):
        prefix = chunk_messages(messages[:cut], count)
        assert prefix[:-1] == full[: len(prefix) - 1], cut
        assert prefix[-1].start_line == full[len(prefix) - 1].start_line


def test_incremental_chunker_matches_one_shot() -> None:
    messages = conversation(250, seed=9)
    expected = chunk_messages(messages, count)
    rng = random.Random(4)
    chunker = SessionChunker(count)
    final: list[SessionChunk] = []
    i = 0
    while i < len(messages):
        step = rng.randint(1, 30)
        final += chunker.feed(messages[i : i + step])
        i += step
    assert [*final, *chunker.pending()] == expected


def test_save_and_restore_the_open_chunk() -> None:
    messages = conversation(200, seed=11)
    expected = chunk_messages(messages, count)
    first = SessionChunker(count)
    done = first.feed(messages[:123])
    saved = first.save()
    second = SessionChunker(count)
    second.restore(saved)
    done += second.feed(messages[123:])
    assert [*done, *second.pending()] == expected


def test_empty_and_bad_settings() -> None:
    assert chunk_messages([], count) == []
    assert SessionChunker(count).pending() == []
    with pytest.raises(ValueError):
        SessionChunker(count, max_tokens=10)


def test_non_additive_counter_still_respects_the_cap() -> None:
    # A counter for which joined text costs more than its parts (every newline is a token).
    def counting_newlines(text: str) -> int:
        return count(text) + text.count("\n") * 3

    messages = conversation(150, seed=2)
    chunks = chunk_messages(messages, counting_newlines, max_tokens=128, target_tokens=100)
    for c in chunks:
        assert counting_newlines(c.text) + 2 <= 128


@needs_session
def test_real_session_with_stand_in_counter() -> None:
    messages, _, _ = parse_file(SESSION)
    chunks = chunk_messages(messages, count)
    check_invariants(chunks, messages)
    texts = [m for m in messages if m.kind == "text"]
    assert len([c for c in chunks if c.kind == "message"]) < len(texts) / 2  # packed
    for m in messages:  # a tool call / result is in a chunk of its own kind, on its line
        if m.kind in ("tool_call", "tool_result"):
            kind = "tool_call" if m.kind == "tool_call" else "tool_output"
            mine = [c for c in chunks if c.kind == kind and c.start_line == m.line]
            assert mine and all(c.end_line == m.line and c.tool == m.tool for c in mine)


@needs_session
def test_real_session_with_the_model_tokenizer() -> None:
    tokens = pytest.importorskip("recalld.tokens")
    counter = tokens.default_tokenizer().count
    messages, _, _ = parse_file(SESSION)
    chunks = chunk_messages(messages, counter)
    for c in chunks:
        assert counter(c.text) + 2 <= 256 or not c.embed
    half = chunk_messages(messages[: len(messages) // 2], counter)
    open_chunk = [c for c in half if c.kind == "message"][-1]  # only it may still grow
    final = [c for c in half if c != open_chunk]
    assert final and all(c in chunks for c in final)


def test_tool_output_parts_do_not_cut_identifiers() -> None:
    names = [f"module_{i}_handler_fn" for i in range(400)]
    blob = ",".join(names)  # minified: no line ends, no spaces
    result = Message(7, "tool", blob, "tool_result", tool="Read")
    chunks = chunk_messages([result], count, tool_head_chars=300)
    assert [c.embed for c in chunks][:1] == [True] and not any(c.embed for c in chunks[2:])
    assert {(c.kind, c.tool, c.start_line, c.end_line) for c in chunks} == {
        ("tool_output", "Read", 7, 7)
    }
    found = set()
    for c in chunks:
        body = c.text.removeprefix("tool: ")
        found.update(p for p in body.split(",") if p)
    assert set(names) <= found  # every name whole in some part
    assert sum(len(c.text) for c in chunks if not c.embed) < len(blob)  # no part repeated
