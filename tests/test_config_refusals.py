"""An empty, unreadable or unparsable config file is a failed edit, never "the defaults"
(issue 41, item 3): a running daemon keeps its settings and says why; a start refuses.

The daemon runs with ``HOME`` in the test's home, where a default transcript glob would find a
transcript: were the defaults applied, its text would be indexed, the default memory folder
created and the configured notes dropped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess, wait_for
from recalld.config import Config
from recalld.errors import ConfigError
from recalld.surfaces.cli import EXIT_CONFIG


def settings(notes: Path) -> str:
    return (
        '[embedding]\nprovider = "none"\n[sync]\ndebounce_s = 0.2\n'
        f"[memory]\npaths = {json.dumps([str(notes)])}\n[sessions]\npaths = []\n"
    )


def user_transcript(user_home: Path) -> None:
    """A transcript where the default ``sessions.paths`` globs look (turned off here)."""
    msg = {"type": "user", "message": {"role": "user", "content": "the okapi vaccination plan"}}
    write(user_home / ".claude" / "projects" / "p" / "s1.jsonl", json.dumps(msg) + "\n")


@pytest.mark.parametrize(
    ("text", "words"),
    [("", "is empty"), (" \n\n", "is empty"), ("[search\n", "not valid TOML")],
)
def test_load_refuses_an_empty_or_broken_file(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=words):
        Config.load(path)
    assert Config.load(tmp_path / "absent.toml").source is None  # only a missing file: defaults


def test_load_refuses_an_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.mkdir()  # reading a folder fails for root too (permissions would not)
    with pytest.raises(ConfigError, match="cannot be read"):
        Config.load(path)


@pytest.mark.slow
def test_an_empty_config_for_two_seconds_changes_nothing(home: Path) -> None:
    notes, user_home = home / "notes", home / "user"
    (home / "memory").rmdir()  # the default memory folder: it must not come back
    for i in range(30):
        write(notes / f"kelp{i}.md", f"# Kelp {i}\n\nKelp forest survey number {i}.\n")
    user_transcript(user_home)
    config = home / "config.toml"
    config.write_text(settings(notes))
    daemon = DaemonProcess(home, env={"HOME": str(user_home)}).start()
    try:
        daemon.wait_idle()
        with daemon.client() as c:
            before = c.status()["counts"]
            config.write_text("")  # truncated in place, as a tool rewriting it does
            wait_for(lambda: "is empty" in (c.status()["config_error"] or ""), 10)
            st = c.status()
            assert any("not applied" in w and "is empty" in w for w in st["warnings"])
            time.sleep(1.5)  # the ~2 s of the report
            config.write_text(settings(notes))  # back, unchanged
            wait_for(lambda: c.status()["config_error"] is None, 10)
            daemon.wait_idle()
            st = c.status()
            assert st["counts"] == before
            assert st["provider"] == "none" and st["session_globs"] == []
            assert st["memory_roots"] == [str(notes)]
            assert c.search("kelp forest survey", mode="keyword")["results"]
            assert c.search("okapi vaccination", mode="keyword")["results"] == []
        assert not (home / "memory").exists()
        log = daemon.log.read_text()
        assert "config not applied" in log and "is empty" in log
    finally:
        daemon.stop()


def test_serve_refuses_to_start_on_an_empty_config(home: Path) -> None:
    (home / "config.toml").write_text("")
    env = env_for(home)
    for args in (["serve"], ["status"]):
        done = subprocess.run(
            [sys.executable, "-m", "recalld.surfaces.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == EXIT_CONFIG, done.stderr
        assert "config.toml is empty" in done.stderr and "Traceback" not in done.stderr
    assert not (home / "run" / "recalld.sock").exists()
    assert not (home / "index.sqlite").exists()
