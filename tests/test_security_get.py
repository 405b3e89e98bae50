"""Security (issue 8): what ``get`` may read, against a real ``recalld serve``.

``get`` serves indexed / indexable files only: ``..``, file and folder symlinks out, absolute
paths, NUL bytes, 100k-character paths, over-long names, case tricks, ``%2e%2e``, backslashes,
``~``, dot files in a memory folder, transcripts outside sessions.paths, a FIFO, /proc: each
refused with a clear error, and no byte of an outside file ever comes back; what it should
serve, it still serves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from recalld_client import Client
from security_support import MARKER, SECRETS, Home, _call
from security_support import secure as secure  # a fixture

pytestmark = pytest.mark.timeout(300)


def _refusals(home: Path) -> list[tuple[str, set[str]]]:
    mem = home / "memory"
    outside = str(home / "outside" / "secret.md")
    refused = {"forbidden"}
    either = {"forbidden", "not_found"}
    bad = {"bad_request"}
    return [
        # ..
        ("../outside/secret.md", refused),
        ("../../../../../../etc/passwd", refused),
        ("sub/../../outside/secret.md", refused),
        (f"{mem}/../outside/secret.md", refused),
        (f"{mem}/sub/../../config.toml", refused),
        ("../config.toml", refused),
        ("../index.sqlite", refused),
        ("../notes.md", refused),
        # absolute paths
        ("/etc/passwd", refused),
        ("/etc/shadow", refused),
        (outside, refused),
        (str(home / "config.toml"), refused),
        (str(home / "index.sqlite"), refused),
        ("/proc/self/environ", refused),
        ("/", refused),
        # symlinks out: a file, a folder, /proc
        ("link.md", refused),
        (str(mem / "link.md"), refused),
        ("linkdir/secret.md", refused),
        (str(mem / "linkdir" / "secret.md"), refused),
        ("proc.md", refused),
        # files inside a root that recalld does not index
        (".env", refused),
        (".git/config", refused),
        ("creds.toml", refused),
        ("sub/.hidden.md", refused),
        # under no root: not found (a shell command then reads it in its own folder)
        (".claude/projects/p/s.jsonl", {"not_found"}),
        ("sub/.nothing/x.md", {"not_found"}),
        # NUL bytes, huge paths, over-long names
        ("notes.md\x00.txt", bad),
        ("\x00", bad),
        ("a" * 100_000, bad),
        ("a/" * 3000 + "x.md", bad),
        ("n" * 300 + ".md", bad),
        (f"{mem}/{'n' * 256}.md", bad),
        ("", bad),
        ("   ", bad),
        # case tricks: the root is Cased, the folder cased is another one
        (str(home / "cased" / "secret.md"), refused),
        ("../cased/secret.md", refused),
        (str(home / "MEMORY" / ".." / "outside" / "secret.md"), refused),
        ("MEMORY/../../outside/secret.md", refused),
        ("NOTES.MD", either),
        # encodings that a web server would decode, and Windows separators
        ("%2e%2e/outside/secret.md", either),
        ("%2e%2e%2foutside%2fsecret.md", either),
        ("..%2f..%2fetc%2fpasswd", either),
        ("..\\outside\\secret.md", either),
        ("..\\..\\..\\etc\\passwd", either),
        ("%00", either),
        # home folders
        ("~", refused),
        ("~/.bashrc", refused),
        ("~root/.ssh/id_rsa", refused),
        ("~nosuchuser/secret.md", refused),
        # transcripts outside sessions.paths, and non-transcripts beside them
        (str(home / "old-sessions" / "chat.jsonl"), refused),
        (str(home / "sessions" / "auth-profiles.json"), refused),
        (str(home / "sessions" / "nested" / "deep.jsonl"), refused),
        # a FIFO inside a root: refused at once, never a blocked worker
        ("pipe.md", bad),
        # folders
        ("sub", bad),
        (str(mem), bad),
    ]


def test_get_is_confined_to_what_recalld_indexes(secure: Home) -> None:
    cases = _refusals(secure.path)
    failures = []
    with Client(secure.daemon.socket, timeout=10) as c:
        for path, expected in cases:
            for params in ({"path": path}, {"path": path, "from_line": 1, "lines": 5}):
                code, text = _call(c, "get", params)
                if code not in expected or MARKER in text or "root:x:0:0" in text:
                    failures.append((path[:80], code, text[:200]))
        # the range suffix goes through the same checks
        code, text = _call(c, "get", {"path": "../outside/secret.md:1-3"})
        if code != "forbidden" or MARKER in text:
            failures.append(("range", code, text[:200]))
    assert failures == []
    log = secure.daemon.log.read_text()
    assert "Traceback" not in log and "unexpected error" not in log


def test_get_still_serves_indexed_files(secure: Home) -> None:
    mem = secure.memory
    with Client(secure.daemon.socket) as c:
        assert c.get("notes.md")["text"].startswith("# Notes")
        assert c.get(str(mem / "notes.md"), from_line=3)["text"].startswith("The lighthouse")
        assert c.get("sub/plan.md:3-3")["text"] == "Repaint the ferry in spring."
        assert c.get("inner.md")["path"] == str(mem / "notes.md")  # link inside the roots
        assert c.get(str(secure.path / "Cased" / "ok.md"))["text"].startswith("# Cased")
        assert c.get("ok.md")["path"] == str(secure.path / "Cased" / "ok.md")
        transcript = c.get(str(secure.path / "sessions" / "chat.jsonl"))
        assert transcript["total_lines"] == len(SECRETS)


def test_session_globs_match_like_glob() -> None:
    """get's transcript check follows glob semantics (``**`` spans folders, not dot folders)."""
    from recalld.retrieval.access import session_match

    home = Path("/home/u")
    globs = [
        "/home/u/.claude/projects/**/*.jsonl",
        "/home/u/.codex/sessions/**/rollout-*.jsonl",
        "/home/u/.openclaw/agents/*/sessions/*.jsonl",
    ]
    yes = [
        ".claude/projects/a.jsonl",
        ".claude/projects/-work-x/s1.jsonl",
        ".claude/projects/a/b/c/s.jsonl",
        ".codex/sessions/2026/11/30/rollout-1.jsonl",
        ".openclaw/agents/main/sessions/s.jsonl",
    ]
    no = [
        ".claude/projects/a.json",
        ".claude/projects/.hidden/s.jsonl",
        ".claude/projects/.s.jsonl",
        ".claude/settings.jsonl",
        ".codex/sessions/2026/history.jsonl",
        ".openclaw/agents/main/agent/auth-profiles.json",
        ".openclaw/agents/main/sessions/deeper/s.jsonl",
        ".openclaw/agents/sessions.jsonl",
    ]
    assert [p for p in yes if not session_match(home / p, globs)] == []
    assert [p for p in no if session_match(home / p, globs)] == []
