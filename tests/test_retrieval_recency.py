"""Retrieval beyond the anchor (issue 9): recency: a note's date (name, front matter,
transcript, mtime), the decay, and evergreen notes that do not age."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import make_engine, write
from recalld.retrieval.note_dates import decay, is_evergreen, note_date


def test_note_dates(tmp_path: Path) -> None:
    named = write(tmp_path / "2024-03-14-standup.md", "# Standup\n")
    front = write(tmp_path / "plan.md", "---\ntitle: Plan\ndate: 2023-01-02\n---\n# Plan\n")
    session = write(
        tmp_path / "s.jsonl",
        '{"timestamp": "2022-05-01T10:00:00Z"}\n{"timestamp": "2022-05-03T10:00:00Z"}\n',
    )
    plain = write(tmp_path / "plain.md", "# Plain\n")
    os.utime(plain, (1_600_000_000, 1_600_000_000))
    assert note_date(str(named)) == pytest.approx(1710374400)
    assert note_date(str(front)) == pytest.approx(1672617600)
    assert note_date(str(session)) == pytest.approx(1651572000)
    assert note_date(str(plain)) == pytest.approx(1_600_000_000)
    assert note_date(str(tmp_path / "gone.md")) is None
    assert decay(30 * 86400, 30) == pytest.approx(0.5)
    assert decay(-5, 30) == 1.0 and decay(10**9, 0) == 1.0
    assert is_evergreen("/m/MEMORY.md", ["MEMORY.md"])
    assert is_evergreen("/m/core/facts.md", ["/m/core/*"])
    assert not is_evergreen("/m/notes.md", ["MEMORY.md"])


def test_recency_prefers_the_newer_note_but_not_over_evergreen(
    home: Path, local_embedder: Any
) -> None:
    text = "# Coffee\n\nThe team switched the office coffee machine to the {} beans.\n"
    old = write(home / "memory" / "2020-01-01-coffee.md", text.format("Ethiopian"))
    new = write(home / "memory" / "coffee-now.md", text.format("Kenyan"))
    ever = write(home / "memory" / "MEMORY.md", text.format("Colombian"))
    ancient = time.time() - 5 * 365 * 86400
    os.utime(ever, (ancient, ancient))
    eng = make_engine(home, local_embedder, search__recency_half_life_days=30.0)
    try:
        eng.sync()
        res = eng.searcher.search({"query": "office coffee machine beans", "explain": True})
        names = [Path(r["path"]).name for r in res["results"]]
        assert names.index(new.name) < names.index(old.name)
        assert names.index(ever.name) < names.index(old.name)
        factors = {Path(r["path"]).name: r["explain"]["recency"] for r in res["results"]}
        assert factors[ever.name] == 1.0 and factors[old.name] < 0.01
    finally:
        eng.close()
