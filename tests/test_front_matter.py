"""Notes have names beyond the file name (issue 17): front matter titles, aliases, descriptions
and tags, Obsidian wikilinks and body tags, through the real engine, store and model."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import BENCH, make_engine, needs_bench, write
from recalld.config import Config
from recalld.ingest.front_matter import (
    FrontMatter,
    card_context,
    context_names,
    front_matter_end,
    read_front_matter,
    simple_yaml,
)
from recalld.ingest.identity_check import chunking_identity

HUGO = """---
title: Sprint retrospective
linkTitle: Retro
description: >-
  How the team looks back
  at the last sprint.
aliases: [/process/retro/, "Weekly review"]
tags:
  - process
  - "#team/rituals"
keywords: agile, meetings
weight: 10
---

## Format

We meet for an hour and write down what went well.
"""


def paths_of(res: dict[str, Any], home: Path) -> list[str]:
    return [os.path.relpath(r["path"], home / "memory") for r in res["results"]]


# parsing ---------------------------------------------------------------------------------------


def test_front_matter_fields() -> None:
    fm = read_front_matter(HUGO)
    assert fm == FrontMatter(
        title="Sprint retrospective",
        aliases=("/process/retro/", "Weekly review"),
        description="How the team looks back at the last sprint.",
        tags=("process", "team/rituals", "agile", "meetings"),
    )
    assert front_matter_end(HUGO.split("\n")) == 12


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# No front matter\n\ntitle: x\n", None),
        ("---\nunclosed: yes\n\nbody\n", None),
        ("---\n---\nbody\n", FrontMatter()),
        ("---\r\ntitle: Crlf\r\n---\r\nbody\r\n", FrontMatter(title="Crlf")),
        (
            "---\naliases: Journal\ntags: daily, log x # a comment\n...\n",
            FrontMatter(aliases=("Journal",), tags=("daily", "log", "x")),
        ),
        ("---\ntitle: 2024-01-05\n---\n", FrontMatter(title="2024-01-05")),
        (
            '+++\ntitle = "Toml"\naliases = ["/old/"]\ntags = ["a"]\ndate = 2024-01-05\n+++\n',
            FrontMatter(title="Toml", aliases=("/old/",), tags=("a",)),
        ),
        ("+++\ntitle = 'no end'\n---\n", None),
        ("---\ntitle: [a, b]\naliases: [{x: 1}, ok]\n---\n", FrontMatter(aliases=("ok",))),
    ],
)
def test_front_matter_forms(text: str, expected: FrontMatter | None) -> None:
    assert read_front_matter(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("---\nok: 1\ntitle: x: y\n---\nbody\n", "not valid YAML (line 3: mapping values"),
        ("---\n- just\n- a list\n---\n", "not a key: value mapping"),
        ("+++\ntitle = x\n+++\n", "not valid TOML (Invalid value (at line 1, column 9))"),
        ("---\ntitle: x\nbig: " + "y" * 70_000 + "\n---\n", "is not read"),
    ],
)
def test_bad_front_matter_says_why(text: str, why: str) -> None:
    fm = read_front_matter(text)
    assert fm is not None and fm.empty and fm.error is not None and why in fm.error


def test_yaml_anchors_cannot_blow_up() -> None:
    # The billion laughs: shared references, never turned into text.
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    text = "---\n" + "\n".join(lines) + "\ntitle: *i\naliases: *i\n---\n"
    fm = read_front_matter(text)
    assert fm is not None and fm.title == "" and fm.aliases == ()


def test_fallback_reader_agrees_with_pyyaml() -> None:
    import yaml  # type: ignore[import-untyped]

    block = "\n".join(HUGO.split("\n")[1:12])
    ours = simple_yaml(block)
    theirs = yaml.safe_load(block)
    for key in ("title", "description", "aliases", "tags", "keywords"):
        assert ours[key] == theirs[key], key
    assert simple_yaml("title: 'It''s' # note\nx:\n  nested: 1\n") == {"title": "It's", "x": None}
    assert simple_yaml("aliases: [\n  '/a/',\n  \"b, c\",\n]\nweight: 3") == {
        "aliases": ["/a/", "b, c"],
        "weight": "3",
    }


def test_without_pyyaml_the_fallback_reads_front_matter(monkeypatch: pytest.MonkeyPatch) -> None:
    with_yaml = read_front_matter(HUGO)
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml now raises ImportError
    assert read_front_matter(HUGO) == with_yaml
    assert read_front_matter("---\ntitle: ok\n---\n") == FrontMatter(title="ok")


@needs_bench("vault-known-item", "corpus")
def test_fallback_reader_agrees_on_a_real_vault() -> None:
    """Every front matter block of the Hugo docs (992 notes) reads the same both ways."""
    import yaml

    notes = sorted((BENCH / "vault-known-item" / "corpus").rglob("*.md"))
    assert len(notes) > 900
    for note in notes:
        lines = note.read_text(encoding="utf-8").split("\n")
        end = front_matter_end(lines)
        assert end is not None, note
        block = "\n".join(lines[1:end])
        theirs, ours = yaml.safe_load(block) or {}, simple_yaml(block)
        for key in ("title", "description", "aliases", "tags", "keywords"):
            want = theirs.get(key)
            want = [str(v) for v in want] if isinstance(want, list) else want
            want = str(want) if want is not None and not isinstance(want, list) else want
            assert (ours.get(key) or None) == (want or None), (note, key)


def test_card_round_trip() -> None:
    fm = FrontMatter("T", ("a one", "b two"), "Some words.", ("x", "y"))
    card = card_context("T > Intro", fm)
    assert card == "T > Intro\na one\nb two\n\nSome words.\nx y"
    assert context_names(card) == ["T", "a one", "b two"]
    assert context_names("Plain > Heading") == ["Plain"]
    no_alias = card_context("T", FrontMatter(description="d"))
    assert context_names(no_alias) == ["T"] and "d" in no_alias


# through the engine -------------------------------------------------------------------------

RETRO_COMPETITORS = {
    "calendar.md": "# Calendar\n\nThe weekly review is on Friday. Bring the weekly review "
    "notes; a weekly review without notes is a short review.\n",
    "reviews/weekly.md": "# Reviews\n\nA weekly review of open pull requests, weekly.\n",
}


def _retro_home(home: Path) -> None:
    write(home / "memory" / "team" / "retro.md", HUGO)
    for rel, text in RETRO_COMPETITORS.items():
        write(home / "memory" / rel, text)


def test_a_query_equal_to_an_alias_finds_its_note_first(home: Path, local_embedder: Any) -> None:
    _retro_home(home)
    eng = make_engine(home, local_embedder)
    try:
        eng.sync()
        for query in ("Weekly review", "/process/retro/", "sprint retrospective"):
            res = eng.searcher.search({"query": query, "min_score": 0})
            assert paths_of(res, home)[0] == "team/retro.md", query
        top = eng.searcher.search({"query": "weekly review", "min_score": 0})["results"][0]
        # The card is the front matter's own lines: citations and get stay exact.
        assert (top["start_line"], top["end_line"]) == (1, 13)
        got = eng.searcher.get({"path": top["citation"]})
        assert got["text"].split("\n")[0] == "---" and got["text"].split("\n")[-1] == "---"
    finally:
        eng.close()


def test_without_front_matter_names_the_alias_is_not_first(home: Path, local_embedder: Any) -> None:
    _retro_home(home)
    off = make_engine(home, local_embedder, chunking__front_matter=False)
    try:
        off.sync()
        res = off.searcher.search({"query": "Weekly review", "min_score": 0})
        assert paths_of(res, home)[0] != "team/retro.md"
    finally:
        off.close()


def test_description_and_tags_are_context(home: Path, local_embedder: Any) -> None:
    write(home / "memory" / "a.md", HUGO)
    write(home / "memory" / "b.md", "# Team\n\nThe team rituals: stand-up and planning.\n")
    eng = make_engine(home, local_embedder)
    try:
        eng.sync()
        rows = eng.writer.conn.execute(  # type: ignore[union-attr]
            "SELECT start_line, context FROM chunks WHERE path LIKE '%a.md' ORDER BY start_line"
        ).fetchall()
        card, body = rows[0][1], rows[1][1]
        assert "How the team looks back at the last sprint." in card and "agile" in card
        # The front matter title is the note's title in every chunk (not its first H2).
        assert body == "Sprint retrospective > Format"
        res = eng.searcher.search({"query": "team rituals", "mode": "keyword", "min_score": 0})
        assert "a.md" in paths_of(res, home)
    finally:
        eng.close()


def test_bad_front_matter_is_indexed_and_reported(home: Path, local_embedder: Any) -> None:
    write(home / "memory" / "bad.md", "---\ntitle: [oops\n---\n\nThe pelican migrates.\n")
    eng = make_engine(home, local_embedder)
    try:
        eng.sync()
        res = eng.searcher.search({"query": "pelican", "mode": "keyword"})
        assert paths_of(res, home) == ["bad.md"]
        skipped = eng.status()["skipped_files"]
        assert any(
            s["path"].endswith("bad.md") and "not valid YAML" in s["reason"] for s in skipped
        )
    finally:
        eng.close()


def test_front_matter_setting_is_part_of_the_index_identity(
    home: Path, local_embedder: Any
) -> None:
    _retro_home(home)
    on = Config({"chunking.front_matter": True})
    off = Config({"chunking.front_matter": False})
    assert chunking_identity(on) != chunking_identity(off)
    old = make_engine(home, local_embedder, chunking__front_matter=False)
    old.sync()
    old.close()
    eng = make_engine(home, local_embedder)
    try:
        assert eng.needs_reindex is not None and "chunking" in eng.needs_reindex
        eng.sync()  # rebuilds
        assert eng.needs_reindex is None
        res = eng.searcher.search({"query": "Weekly review", "min_score": 0})
        assert paths_of(res, home)[0] == "team/retro.md"
    finally:
        eng.close()


# wikilinks and body tags ---------------------------------------------------------------------

LINKED = {
    "journal.md": "# Monday\n\nSee [[Daily notes]] and [[Project Falcon|the bird]] and "
    "[[Garden#Compost heap]].\n\nFiled under #proj/falcon and #ReadingList.\n",
    "other.md": "# Other\n\nNothing about any of that: cooking pasta with tomatoes.\n",
}


@pytest.mark.parametrize(
    "query",
    [
        "daily notes",
        "[[Daily notes]]",
        "the bird",
        "project falcon",
        "compost heap",
        "garden",
        "proj falcon",
        "#proj/falcon",
        "reading list",
    ],
)
def test_wikilinks_and_tags_are_words(home: Path, local_embedder: Any, query: str) -> None:
    for rel, text in LINKED.items():
        write(home / "memory" / rel, text)
    eng = make_engine(home, local_embedder)
    try:
        eng.sync()
        res = eng.searcher.search({"query": query, "mode": "keyword", "min_score": 0})
        assert paths_of(res, home)[:1] == ["journal.md"], query
    finally:
        eng.close()
