"""Control characters in notes and file names are shown escaped to a terminal, not obeyed.

A transcript of hostile tool output (or a note, or a file name) holding ``ESC[31m`` or BEL
recoloured, retitled or rewrote the user's terminal through ``recalld search`` and ``get``.
Text for people shows them as ``\\x1b``; ``--json`` keeps the exact characters (escaped by JSON).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess
from recalld.surfaces.terminal_text import visible

pytestmark = pytest.mark.timeout(120)

FAST = "import sys\nfrom recalld.surfaces.cli_fast import main\nsys.exit(main(sys.argv[1:]))\n"
HOSTILE = (
    "The okapi \x1b[31mred\x1b[0m rings\x07 \x1b]0;pwned\x07 back\rover \x9b2J done.\tok"
    " report\u202egpj.exe"
)


def test_visible_escapes_control_characters_but_newline_and_tab() -> None:
    assert visible("a\x1b[31mb\x07c\x00\x7f\x9b") == "a\\x1b[31mb\\x07c\\x00\\x7f\\x9b"
    assert visible("line\tone\nline two\r\nthree\rfour") == "line\tone\nline two\r\nthree\\x0dfour"
    assert visible("naïve — ünïcode ✓") == "naïve — ünïcode ✓"
    assert visible("a\u202eb\u2067c\u2069") == "a\\u202eb\\u2067c\\u2069"  # bidi overrides
    assert visible("שלום\u200f!") == "שלום\u200f!"  # a right-to-left mark stays


def _recalld(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", FAST, *args],
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _check_text_and_json(home: Path, note: Path) -> None:
    for args in (("search", "okapi", "--mode", "keyword"), ("get", str(note))):
        text = _recalld(home, *args)
        assert text.returncode == 0, text.stderr
        shown = text.stdout + text.stderr
        assert not any(c in shown for c in "\x1b\x07\x9b\r\u202e"), repr(shown)
        assert "\\u202egpj.exe" in shown, shown
        assert "\\x1b[31mred" in shown and "\\x07" in shown and "\\x9b2J" in shown, shown
        assert "\tok" in text.stdout  # tabs (and newlines) are text
        raw = _recalld(home, *args, "--json")
        assert raw.returncode == 0, raw.stderr
        answer = json.loads(raw.stdout)
        exact = answer["results"][0]["snippet"] if args[0] == "search" else answer["text"]
        assert HOSTILE in exact  # the data stays exact
    # A file name's control character, in a citation and in an error that quotes it.
    search = _recalld(home, "search", "pangolin", "--mode", "keyword")
    assert "bad\\x1bname.md" in search.stdout and "\x1b" not in search.stdout, search.stdout
    missing = _recalld(home, "get", str(home / "memory" / "gone\x1b[2J.md"))
    assert missing.returncode != 0 and "gone\\x1b[2J.md" in missing.stderr, missing.stderr
    assert "\x1b" not in missing.stderr


def test_search_and_get_escape_them_in_process_and_through_the_daemon(home: Path) -> None:
    (home / "config.toml").write_text('[sessions]\npaths = []\n[embedding]\nprovider = "none"\n')
    note = write(home / "memory" / "hostile.md", f"# Tool output\n\n{HOSTILE}\n")
    write(home / "memory" / "bad\x1bname.md", "# Odd\n\nThe pangolin hides here.\n")
    synced = _recalld(home, "sync")  # no daemon: in-process, and so are search and get
    assert synced.returncode == 0, synced.stderr
    _check_text_and_json(home, note)
    daemon = DaemonProcess(home).start()
    try:
        daemon.wait_idle()
        _check_text_and_json(home, note)  # the fast path, through the daemon
    finally:
        daemon.stop()
