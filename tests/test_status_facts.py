"""What ``status`` keeps between polls: index facts per reader, resolved memory roots.

Each is cached, and each must be read again as soon as it could have changed: a commit by the
writer (facts), a re-pointed symlink or a folder created later (roots).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import linked_vaults, make_config, write
from recalld import paths
from recalld.config import Config
from recalld.embedding.registry import ProviderChoice
from recalld.engine import Engine
from recalld.index.status_facts import status_facts
from recalld.index.store import Store


def test_facts_are_kept_until_another_connection_commits(tmp_path: Path) -> None:
    index = tmp_path / "index.sqlite"
    writer = Store(index)
    reader = Store(index, readonly=True)
    try:
        first = status_facts(reader)
        assert status_facts(reader) is first  # nothing committed: not read again
        assert first.transcripts["files"] == 0 and first.mount_roots == frozenset()

        writer.set_meta("mount_roots", json.dumps(["/mnt/usb/notes"]))
        second = status_facts(reader)
        assert second is not first and second.mount_roots == {"/mnt/usb/notes"}

        writer.set_meta("mount_roots", "not json")  # a damaged value reads as none
        assert status_facts(reader).mount_roots == frozenset()
    finally:
        reader.close()
        writer.close()


def msg(role: str, text: str) -> str:
    return json.dumps({"type": role, "message": {"role": role, "content": text}}) + "\n"


def test_status_sees_each_sync_of_a_transcript(home: Path, local_embedder: Any) -> None:
    """The engine's status after a poll, a transcript sync, a poll: the second poll is fresh."""
    folder = home / "claude" / "p1"
    folder.mkdir(parents=True)
    (folder / "s1.jsonl").write_text(msg("user", "how do I rotate the nginx logs?"))
    config = make_config(home, sessions__paths=[str(home / "claude" / "**" / "*.jsonl")])
    eng = Engine(config, choice=ProviderChoice(local_embedder, "test: local model"))
    try:
        eng.sync()
        before = eng.status()["transcripts"]
        assert before["files"] == 1 and before["skipped_lines"] == 0
        assert eng.status()["transcripts"] == before

        with (folder / "s1.jsonl").open("a") as fh:
            fh.write("{not json\n" + msg("assistant", "use logrotate, daily"))
        (folder / "s2.jsonl").write_text(msg("user", "and the staging box?"))
        eng.sync()
        after = eng.status()["transcripts"]
        assert after["files"] == 2 and after["skipped_lines"] == 1
        assert after["messages"] == before["messages"] + 2
    finally:
        eng.close()


def test_a_root_is_resolved_again_when_its_symlink_moves(tmp_path: Path) -> None:
    one, two, link = linked_vaults(tmp_path)
    config = Config({"memory.paths": [str(link)]}, base_dir=tmp_path)
    assert config.memory_roots() == [one.resolve()]
    assert config.memory_roots() == [one.resolve()]  # the remembered answer

    link.unlink()
    link.symlink_to(two)
    assert config.memory_roots() == [two.resolve()]

    # a parent re-pointed: the path leads to another folder, so it is resolved again
    deep = tmp_path / "deep"
    (one / "inner").mkdir()
    (two / "inner").mkdir()
    deep.symlink_to(one)
    assert paths.resolve_folder(deep / "inner") == (one / "inner").resolve()
    deep.unlink()
    deep.symlink_to(two)
    assert paths.resolve_folder(deep / "inner") == (two / "inner").resolve()


def test_a_missing_root_is_resolved_when_it_appears(tmp_path: Path) -> None:
    later = tmp_path / "later"
    config = Config({"memory.paths": [str(later)]}, base_dir=tmp_path)
    assert config.memory_roots() == [later.resolve()]
    target = tmp_path / "elsewhere"
    target.mkdir()
    later.symlink_to(target)  # created afterwards, as a symlink
    assert config.memory_roots() == [target.resolve()]
    write(target / "a.md", "# A\n")
    assert config.memory_roots() == [target.resolve()]
