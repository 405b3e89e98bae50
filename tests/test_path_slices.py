"""Which dirty paths the writer syncs first (``serve/path_slices``): fresh before deferred, and
within a fresh batch bigger than a slice the newest file first, whatever its name."""

from __future__ import annotations

import os
from pathlib import Path

from recalld.serve.path_slices import newest_first, split_paths


def _touch(path: Path, mtime_s: int) -> Path:
    path.write_text("x")
    os.utime(path, (mtime_s, mtime_s))
    return path


def test_an_edit_due_with_a_storm_goes_in_the_first_slice(tmp_path: Path) -> None:
    storm = [_touch(tmp_path / f"a{i:03}.md", 1_000 + i) for i in range(50)]
    edit = _touch(tmp_path / "zz-edit.md", 5_000)  # sorts last by name, newest by time
    now, later = split_paths([(sorted([*storm, edit]), False)], limit=10)
    assert now[0] == edit
    assert now[1:] == storm[::-1][:9] and len(later) == 41


def test_vanished_paths_go_after_existing_ones(tmp_path: Path) -> None:
    gone = [tmp_path / f"gone{i}.md" for i in range(3)]
    here = [_touch(tmp_path / f"here{i}.md", 1_000 + i) for i in range(3)]
    assert newest_first([*gone, *here]) == [*here[::-1], *gone]


def test_fresh_jobs_go_before_deferred_ones_and_a_small_batch_is_not_reordered(
    tmp_path: Path,
) -> None:
    old = [tmp_path / f"old{i}.md" for i in range(5)]
    new = [_touch(tmp_path / "b.md", 2_000), _touch(tmp_path / "a.md", 1_000)]
    now, later = split_paths([(old, True), (new, False)], limit=4)
    assert now == [*new, *old[:2]] and later == old[2:]
