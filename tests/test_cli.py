"""The ``recalld`` command in real subprocesses (no daemon running: in-process answers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import env_for, write


def run(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", *args],
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.slow
def test_sync_search_get_status(home: Path) -> None:
    (home / "config.toml").write_text("[sessions]\npaths = []\n")
    note = write(
        home / "memory" / "meeting.md",
        "# Weekly sync\n\nWe agreed to ship the recalld beta on Friday.\nOwner: Dana.\n",
    )
    sync = json.loads(run(home, "sync", "--json").stdout)
    assert sync["files_changed"] == 1 and sync["chunks_embedded"] >= 1
    res = json.loads(run(home, "search", "when", "is", "the", "beta", "shipping", "--json").stdout)
    assert res["results"][0]["path"] == str(note)
    assert res["mode"] == "hybrid" and res["provider"] == "local/all-MiniLM-L6-v2"
    human = run(home, "search", "beta", "--mode", "keyword").stdout
    assert "meeting.md#L" in human
    got = json.loads(run(home, "get", f"{note}:3-4", "--json").stdout)
    assert got["text"] == "We agreed to ship the recalld beta on Friday.\nOwner: Dana."
    assert run(home, "get", f"{note}:4").stdout == "Owner: Dana.\n"
    status = json.loads(run(home, "status", "--json").stdout)
    assert status["counts"]["files"] == 1 and status["provider"] == "local/all-MiniLM-L6-v2"
    assert "provider:" in run(home, "status").stdout


@pytest.mark.slow
def test_search_prints_the_whole_snippet(home: Path) -> None:
    """The printed result holds every line of its snippet, each whole (a long paragraph, and a
    matching line after the fourth, were cut off without a mark)."""
    (home / "config.toml").write_text("[sessions]\npaths = []\n")
    paragraph = "Billing runs on PostgreSQL. " + "Row-level locks keep invoices consistent. " * 6
    write(
        home / "memory" / "ops.md",
        f"# Ops\n\n{paragraph.strip()}\nThe ConnReset came from idle timeouts.\n"
        "Deploys go out on Tuesdays via ArgoCD.\n",
    )
    run(home, "sync")
    res = json.loads(run(home, "search", "ArgoCD", "deploys", "--json").stdout)
    snippet = res["results"][0]["snippet"]
    assert "ArgoCD" in snippet.splitlines()[-1] and len(snippet.splitlines()) == 5
    human = run(home, "search", "ArgoCD", "deploys").stdout
    assert "   Deploys go out on Tuesdays via ArgoCD." in human.splitlines()
    assert f"   {paragraph.strip()}" in human.splitlines()


@pytest.mark.slow
def test_errors_have_exit_codes(home: Path) -> None:
    (home / "config.toml").write_text("[sessions]\npaths = []\n")
    run(home, "sync")
    forbidden = run(home, "get", "/etc/passwd", check=False)
    assert forbidden.returncode == 2 and "outside the memory" in forbidden.stderr
    empty = run(home, "search", " ", check=False)
    assert empty.returncode == 2 and "empty" in empty.stderr
    (home / "config.toml").write_text("[search]\nbogus = 1\n")
    bad = run(home, "status", check=False)
    assert bad.returncode == 5 and "unknown setting 'search.bogus'" in bad.stderr
    assert "Traceback" not in bad.stderr
