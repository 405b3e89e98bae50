"""Conversation windows: chat-shaped notes chunked into overlapping turn windows, hits focused."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from conftest import BENCH, make_engine, needs_bench, write
from recalld.ingest.chunking import chunk_markdown
from recalld.ingest.conversation_windows import Unit, focus, speaker_turns, turn_windows
from recalld.ingest.sessions.chunking import SessionChunk, SessionChunker, chunk_messages
from recalld.ingest.sessions.formats import Message

_PIECE = re.compile(r"\w{1,4}|[^\w\s]")


def count(text: str) -> int:
    """Additive stand-in for WordPiece (as in test_chunking)."""
    return len(_PIECE.findall(text))


FILLER = (
    "we talked about the garden, the weather over the weekend, the new bakery in town, "
    "an old film we both like and the bus timetable that changed again"
)


def chat(turns: int, *, bold: bool = True) -> str:
    """A dated two-person chat, one turn a line, each turn a distinct sentence."""
    lines = ["# Session 3: Ann and Bob", "", "Date: 2 May 2023", ""]
    for i in range(turns):
        who = ("Ann", "Bob")[i % 2]
        label = f"**{who}**:" if bold else f"{who}:"
        lines.append(f"{label} turn {i} says {FILLER} number {i}.")
    return "\n".join(lines) + "\n"


def test_chat_shape_is_read_from_speaker_turns() -> None:
    assert speaker_turns(chat(10).split("\n")) is not None
    assert speaker_turns(chat(10, bold=False).split("\n")) is not None
    timed = [f"- [10:0{i}] {('Ann', 'Bob')[i % 2]}: step {i} of the plan is fine" for i in range(6)]
    assert speaker_turns(timed) is not None
    # Key-value notes, a structured abstract, a list of steps: not chats.
    kv = ["Status: done", "Owner: Bob Smith", "Due: Friday", "Status: open", "Owner: Ann"]
    assert speaker_turns(kv * 2) is None
    abstract = ["BACKGROUND: a b c.", "METHODS: d e f.", "RESULTS: g h.", "CONCLUSIONS: i j."]
    assert speaker_turns(abstract) is None
    prose = ["Some prose here.", "", f"Ann: {FILLER}", "", "More prose.", "", f"Bob: {FILLER}", ""]
    assert speaker_turns(prose * 3) is None  # turns are under 60 % of the paragraphs
    one = [f"{who}: something longer to say here" for who in ("Ann",) * 5 + ("Bob",)]
    assert speaker_turns(one) is None  # a single speaker with several turns


@needs_bench()
def test_no_chat_shaped_file_in_the_non_chat_sets() -> None:
    for name in ("tldr", "scifact-train", "cranfield", "cisi", "vault-known-item"):
        files = sorted((BENCH / name / "corpus").rglob("*.md"))[:400]
        assert files, name
        for path in files:
            lines = path.read_text(encoding="utf-8").split("\n")
            assert speaker_turns(lines) is None, path


def test_windows_are_whole_turns_and_every_adjacent_pair_shares_one() -> None:
    text = chat(40)
    lines = text.split("\n")
    chunks = chunk_markdown(text, count, max_tokens=256, target_tokens=160, chat_overlap=0.5)
    turn_lines = {i + 1 for i, line in enumerate(lines) if line.startswith("**")}
    for c in chunks:
        assert c.text == "\n".join(lines[c.start_line - 1 : c.end_line])
        assert count(c.text) + 2 <= 256
        assert c.heading == "Session 3: Ann and Bob"
    windows = [c for c in chunks if c.start_line in turn_lines]
    assert len(windows) >= len(chunks) - 1  # only the first window opens with the header
    ordered = sorted(turn_lines)
    for a, b in itertools.pairwise(ordered):
        assert any(c.start_line <= a and b <= c.end_line for c in chunks), (a, b)
    # Without overlap some adjacent pair is split; with it none is (the point of windows).
    plain = chunk_markdown(text, count, max_tokens=256, target_tokens=160, chat_overlap=0.0)
    split = [
        (a, b)
        for a, b in itertools.pairwise(ordered)
        if not any(c.start_line <= a and b <= c.end_line for c in plain)
    ]
    assert split


def test_non_chat_notes_chunk_as_before() -> None:
    note = "# Notes\n\n" + "\n\n".join(f"Paragraph {i}: {FILLER}." for i in range(30)) + "\n"
    assert chunk_markdown(note, count, chat_overlap=0.5) == chunk_markdown(note, count)
    front = "---\ntitle: x\nauthor: y\ntitle: z\nauthor: w\n---\n" + note
    assert chunk_markdown(front, count, chat_overlap=0.5) == chunk_markdown(front, count)


def test_appending_turns_keeps_earlier_windows() -> None:
    units = [Unit(i, i, 10 + (i * 7) % 23) for i in range(60)]
    before = turn_windows(units[:40], 100, 0.5)
    after = turn_windows(units, 100, 0.5)
    assert after[: len(before) - 1] == before[:-1]  # only the last, open window may grow
    huge = [Unit(0, 0, 10), Unit(1, 1, 500), Unit(2, 2, 10)]
    assert turn_windows(huge, 100, 0.5) == [(0, 0), (1, 1), (2, 2)]


def test_focus_keeps_whole_turns_and_the_reply() -> None:
    text = "\n".join(
        [
            "**Ann**: " + FILLER,
            "**Bob**: " + FILLER,
            "**Ann**: When did you go to the pottery workshop in Lisbon?",
            "**Bob**: Last Tuesday, with my sister.",
            "**Ann**: " + FILLER,
            "**Bob**: " + FILLER,
        ]
    )
    shown = focus(text, ["pottery", "workshop", "lisbon"], 300)
    assert shown is not None
    lines = text.split("\n")
    assert shown.text == "\n".join(lines[shown.first : shown.last + 1])
    assert shown.first <= 2 and shown.last >= 3  # the question turn and its reply
    assert len(shown.text) <= 300
    whole = focus(text, ["pottery"], 5000)  # fits: all of it
    assert whole is not None and (whole.first, whole.last, whole.text) == (0, 5, text)
    assert focus("plain text\n" * 50, ["plain"], 100) is None  # not turns
    page = "# sed\n\n> Edit text.\n> See also: `awk`, `ed`.\n> More information: <https://x>.\n"
    assert focus(page + "\n- Replace:\n\n`sed 's/a/b/'`\n" * 20, ["sed"], 100) is None


def _search(engine: Any, query: str) -> dict[str, Any]:
    res: dict[str, Any] = engine.searcher.search({"query": query, "max_results": 3, "min_score": 0})
    return res


def test_search_cites_exactly_the_turns_it_shows(home: Path, local_embedder: Any) -> None:
    lines = [
        "# Session 1: Ann and Bob",
        "",
        "Date: 2 May 2023",
        "",
    ]
    for i in range(30):
        lines.append(f"**{('Ann', 'Bob')[i % 2]}**: turn {i}, {FILLER}.")
    lines[20] = "**Ann**: Where did you hide the spare key for the allotment shed?"
    lines[21] = "**Bob**: Under the blue flowerpot by the gate."
    note = write(home / "memory" / "chat.md", "\n".join(lines) + "\n")
    engine = make_engine(home, local_embedder)
    try:
        engine.sync()
        results = _search(engine, "spare key allotment shed")["results"]
        top = results[0]
        spans = [(r["start_line"], r["end_line"]) for r in results]
        assert len(spans) == 3  # overlapping windows do not show the same turns twice
        assert all(b1 < a2 or b2 < a1 for (a1, b1), (a2, b2) in itertools.combinations(spans, 2))
        start, end = top["start_line"], top["end_line"]
        assert top["path"] == str(note)
        assert top["snippet"] == "\n".join(lines[start - 1 : end])
        assert top["citation"] == f"{note}#L{start}-L{end}"
        assert start <= 21 and end >= 22  # the question turn and the answer after it
        assert len(top["snippet"]) <= 700
    finally:
        engine.close()


def _messages(n: int) -> list[Message]:
    out = []
    for i in range(n):
        day = 10 + i // 15  # the date changes every 15 messages
        text = f"message {i} " + " ".join(FILLER.split()[: 5 + (i * 7) % 25])
        role = ("user", "assistant")[i % 2]
        out.append(Message(i + 1, role, text, "text", f"2026-02-{day}T10:00:00Z"))
    return out


def test_transcript_windows_share_adjacent_messages() -> None:
    messages = _messages(80)
    chunks = chunk_messages(messages, count, target_tokens=120, overlap=0.5)
    lines = [m.line for m in messages]
    for a, b in itertools.pairwise(lines):
        assert any(c.start_line <= a and b <= c.end_line for c in chunks), (a, b)
    for c in chunks:
        assert count(c.text) + 2 <= 256
        assert c.text.startswith("[2026-02-")  # a window opens with the date in effect
    # The last window is never just the previous one's carried tail.
    assert all(c != chunks[-1] for c in chunks[:-1])
    assert chunks[-1].end_line == 80
    plain = chunk_messages(messages, count, target_tokens=120)
    assert any(
        not any(c.start_line <= a and b <= c.end_line for c in plain)
        for a, b in itertools.pairwise(lines)
    )


def test_transcript_windows_feed_in_pieces_as_in_one_go() -> None:
    messages = _messages(90)
    whole = chunk_messages(messages, count, target_tokens=120, overlap=0.5)
    done: list[SessionChunk] = []
    state: dict[str, Any] = {}
    for lo in range(0, 90, 13):  # delta syncs: restore, feed, save
        chunker = SessionChunker(count, target_tokens=120, overlap=0.5)
        chunker.restore(state)
        done += chunker.feed(messages[lo : lo + 13])
        state = chunker.save()
    done += chunker.pending()
    assert done == whole


def test_character_cap_holds_exactly() -> None:
    text = chat(40)
    for cap in (300, 700):
        chunks = chunk_markdown(
            text, count, max_tokens=2000, target_tokens=1000, chat_overlap=0.5, chat_chars=cap
        )
        assert all(len(c.text) <= cap for c in chunks)
        assert max(len(c.text) for c in chunks) > cap * 0.6  # packed, not one turn each


def test_front_matter_of_a_chat_is_chunked_as_before() -> None:
    front = "---\ntitle: Weekly sync\naliases: [sync]\n---\n"
    text = front + chat(30)
    windows = chunk_markdown(text, count, chat_overlap=0.5)
    plain = chunk_markdown(text, count)
    assert windows[0] == plain[0] and windows[0].end_line == 4  # the front matter alone
    assert len({c.start_line for c in windows[1:]}) == len(windows) - 1
    assert any(a.end_line >= b.start_line for a, b in itertools.pairwise(windows[1:]))
