"""One slot per short note (retrieval.doc_groups) on a real index: a short note's chunks come back
as one hit with its other ranges in ``also``; long notes, chats and transcripts keep several."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import make_engine, write
from recalld.index.store import Store
from recalld.retrieval.doc_groups import SHORT_BYTES, is_short_note
from recalld.retrieval.note_units import pool

QUERY = {"query": "glacier moraine sediment", "max_results": 10, "min_score": 0}
SMALL_CHUNKS = {"chunking__max_tokens": 48, "chunking__target_tokens": 40}


SHORT_SECTIONS = (
    "Glacier moraine sediment at the north cirque is coarse gravel with boulders.",
    "We sieved the moraine sediment: the glacier dropped silt below the gravel.",
    "Sediment cores from the lateral moraine date the glacier's retreat to 1850.",
    "The terminal moraine dams a lake; glacier meltwater carries sediment into it.",
)


def _section(n: int) -> str:
    return (
        f"## Day {n}\n\nSurvey day {n} walked the glacier front, where moraine ridge {n} "
        f"holds sediment layer {n * 7} metres deep.\n"
    )


def _chat(turns: int) -> str:
    lines = ["# Field chat", ""]
    for i in range(turns):
        who = "Ann" if i % 2 == 0 else "Bob"
        lines.append(f"**{who}**: the glacier moraine sediment at stop {i} looked coarse today.")
    return "\n".join(lines) + "\n"


def _transcript(path: Path, messages: int) -> None:
    rows = [
        {
            "type": "user" if i % 2 == 0 else "assistant",
            "message": {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": f"Glacier moraine sediment sample {i}: coarse grains near the snout.",
            },
            "timestamp": f"2026-11-01T10:{i:02d}:00Z",
            "sessionId": "s1",
        }
        for i in range(messages)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _corpus(home: Path) -> list[str]:
    mem = home / "memory"
    body = "\n".join(f"## Part {i}\n\n{text}\n" for i, text in enumerate(SHORT_SECTIONS))
    short = write(mem / "short.md", "# Field note\n\n" + body)
    long = write(mem / "long.md", "# Survey log\n\n" + "\n".join(_section(i) for i in range(40)))
    chat = write(mem / "chat.md", _chat(12))
    _transcript(home / "sessions" / "s1.jsonl", 12)
    assert short.stat().st_size <= SHORT_BYTES < long.stat().st_size
    assert chat.stat().st_size <= SHORT_BYTES
    return [str(home / "sessions" / "*.jsonl")]


def _per_file(results: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in results:
        out[Path(r["path"]).name] = out.get(Path(r["path"]).name, 0) + 1
    return out


def test_a_short_note_is_one_hit_with_its_other_ranges_in_also(
    home: Path, local_embedder: Any
) -> None:
    glob = _corpus(home)
    eng = make_engine(home, local_embedder, sessions__paths=glob, **SMALL_CHUNKS)
    raw = make_engine(
        home, local_embedder, sessions__paths=glob, search__group_short_docs=False, **SMALL_CHUNKS
    )
    try:
        eng.sync()
        # Without grouping the short note fills several slots (what the lever is for).
        ungrouped = raw.searcher.search({**QUERY, "max_results": 40})["results"]
        assert _per_file(ungrouped)["short.md"] >= 3
        res = eng.searcher.search({**QUERY, "max_results": 40})["results"]
        counts = _per_file(res)
        assert counts["short.md"] == 1
        hit = next(r for r in res if r["path"].endswith("short.md"))
        also = hit["also"]
        assert len(also) >= 2 and all(p["path"] == hit["path"] for p in also)
        ranges = [(hit["start_line"], hit["end_line"])] + [
            (p["start_line"], p["end_line"]) for p in also
        ]
        assert len(set(ranges)) == len(ranges)  # each matching range once, none lost
        # A long note, a chat and a transcript keep chunk-level results.
        assert counts["long.md"] >= 3
        assert counts["chat.md"] >= 2
        assert counts["s1.jsonl"] >= 2
    finally:
        eng.close()
        raw.close()


def test_what_is_a_short_note_is_read_from_the_document(home: Path, local_embedder: Any) -> None:
    glob = _corpus(home)
    eng = make_engine(home, local_embedder, sessions__paths=glob, **SMALL_CHUNKS)
    try:
        eng.sync()
    finally:
        eng.close()
    store = Store(home / "index.sqlite", readonly=True)
    try:
        files = {Path(p).name: p for p in store.files()}
        assert is_short_note(store, files["short.md"])
        assert not is_short_note(store, files["long.md"])  # over SHORT_BYTES
        assert not is_short_note(store, files["chat.md"])  # short, but a conversation
        assert not is_short_note(store, files["s1.jsonl"])  # short, but a transcript
        assert not is_short_note(store, str(home / "memory" / "never-indexed.md"))
    finally:
        store.close()


def test_pool_raises_a_notes_chunks_toward_its_best_in_one_channel() -> None:
    scores = {1: 0.8, 2: 0.2, 3: 0.5, 9: 0.1}
    assert pool(scores, [[1, 2, 4]], 1.0) == {1: 0.8, 2: 0.8, 3: 0.5, 4: 0.8, 9: 0.1}
    half = pool(scores, [[1, 2, 4]], 0.5)
    assert half[2] == pytest.approx(0.5) and half[4] == pytest.approx(0.4) and half[1] == 0.8
    assert pool(scores, [[7, 8]], 1.0) == scores  # the channel found none of that note


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_note_units_pool_a_short_notes_chunks_and_leave_long_files_alone(
    home: Path, local_embedder: Any, share: float
) -> None:
    glob = _corpus(home)
    eng = make_engine(
        home,
        local_embedder,
        sessions__paths=glob,
        search__group_short_docs=False,
        search__note_units=share,
        **SMALL_CHUNKS,
    )
    try:
        eng.sync()
        res = eng.searcher.search({**QUERY, "max_results": 40})["results"]
    finally:
        eng.close()
    scores: dict[str, set[float]] = {}
    for r in res:
        scores.setdefault(Path(r["path"]).name, set()).add(round(r["score"], 9))
    # Pooled in full, the short note's chunks are one unit and score alike; a long note's
    # chunks are different passages and keep their own scores.
    assert (len(scores["short.md"]) == 1) is (share == 1.0)
    assert len(scores["long.md"]) > 1


def test_also_names_each_place_once_and_never_the_hit_itself(
    home: Path, local_embedder: Any
) -> None:
    # One line of ~250 words: several chunks, every one cited as that line (#L3-L3).
    words = " ".join(f"glacier moraine sediment layer{i}" for i in range(60))
    write(home / "memory" / "line.md", f"# One line\n\n{words}\n")
    eng = make_engine(home, local_embedder, **SMALL_CHUNKS)
    try:
        eng.sync()
        store = Store(home / "index.sqlite", readonly=True)
        try:
            rows = store.conn.execute("SELECT start_line, end_line FROM chunks").fetchall()
        finally:
            store.close()
        assert rows.count((3, 3)) >= 3  # the line's chunks all cite the same range
        res = eng.searcher.search(QUERY)["results"]
        hit = next(r for r in res if r["path"].endswith("line.md"))
        cited = [p["citation"] for p in hit.get("also", [])]
        assert hit["citation"] not in cited and len(set(cited)) == len(cited)
        assert hit["citation"].endswith("#L3-L3")
    finally:
        eng.close()
