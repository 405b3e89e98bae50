"""The search-then-get loop through the real CLI, a real daemon and in-process, the same way.

One daemon (started as ``recalld mcp`` starts it) serves ``served``; ``local`` holds the same notes
with no daemon, so each command runs once per path and must answer alike.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import env_for, mcp_stdio_params, write
from daemon_process import wait_for
from recalld.retrieval.answer_budget import count_tokens
from recalld.surfaces import mcp_server
from recalld.tokens import default_tokenizer
from recalld_client import Client, RecalldClientError, is_running

pytestmark = pytest.mark.slow  # real daemons, one per test: minutes here (make test runs them)

NOTES = {
    "decisions.md": "# Decisions\n\n## Storage\n\n"
    "On 2024-03-12 we chose SQLite with sqlite-vec over Postgres because the daemon must run "
    "on a laptop without a server. Decided by Priya after the latency benchmark showed 16 ms "
    "at the median for a hundred thousand chunks, while Postgres needed a service, a role, a "
    "password in a file and a migration tool that nobody on the team wanted to own. The index "
    "is one file in the data folder, written in WAL mode, so readers never wait for the writer "
    "and a crash loses at most the last transaction. Backups are a copy of that one file. "
    "We revisit this if the index grows past ten million chunks or if two machines must share "
    "one memory, neither of which is planned for this year.\n\n## Transport\n\n"
    "Clients talk to the daemon over a Unix socket with length-prefixed msgpack frames, chosen "
    "over HTTP on localhost because a socket file has owner-only permissions and no port can "
    "collide with another program. Marek measured a round trip of 90 microseconds.\n",
    "people.md": "# People\n\nMarek prefers reviews in the morning and writes tests before code. "
    "He owns the transport and the client library, and he keeps the protocol document up to "
    "date. Priya owns storage and the benchmark harness; ask her before changing the schema. "
    "Dana runs the release train every second Friday and writes the changelog from the merged "
    "pull requests, so a pull request without a summary line delays the release.\n",
    "garden.md": "# Garden\n\nThe tomatoes need water every evening in July. The basil grows "
    "best beside them, in the sun, and the mint must stay in its pot or it takes the bed.\n",
}
CONFIG = "[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n"


def make_home(tmp: Path) -> Path:
    tmp.mkdir()
    (tmp / "config.toml").write_text(CONFIG)
    for name, text in NOTES.items():
        write(tmp / "memory" / name, text)
    return tmp


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", *args],
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def homes() -> Iterator[dict[str, Path]]:
    """``served`` (a daemon started by the MCP server's spawn) and ``local`` (no daemon)."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="rcd-", dir="/tmp"))  # AF_UNIX paths are short
    served, local = make_home(base / "s"), make_home(base / "l")
    # An older home: a log folder and a log that other users can read.
    (served / "logs").mkdir(mode=0o755)
    (served / "logs" / "daemon.log").write_text("old\n")
    os.chmod(served / "logs", 0o755)
    os.chmod(served / "logs" / "daemon.log", 0o644)
    assert run(local, "sync").returncode == 0
    socket = served / "run" / "recalld.sock"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RECALLD_HOME", str(served))
        mp.delenv("RECALLD_CONFIG", raising=False)
        proc = mcp_server.spawn_daemon(served / "logs" / "daemon.log")
    try:
        wait_for(lambda: is_running(socket, timeout=0.5), timeout=90)
        with Client(socket) as c:
            c.sync(wait=True)
        yield {"served": served, "local": local}
    finally:
        try:
            with Client(socket, timeout=10) as c:
                c.shutdown()
            proc.wait(60)
        except (RecalldClientError, subprocess.TimeoutExpired):
            proc.kill()  # it never started, or hangs: the test already failed
            proc.wait(10)
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def both(homes: dict[str, Path], *args: str) -> dict[str, subprocess.CompletedProcess[str]]:
    out = {name: run(home, *args) for name, home in homes.items()}
    assert is_running(homes["served"] / "run" / "recalld.sock")
    assert not is_running(homes["local"] / "run" / "recalld.sock")
    return out


def test_get_accepts_every_citation_form(homes: dict[str, Path]) -> None:
    lines = NOTES["decisions.md"].splitlines()
    for name, home in homes.items():
        note = home / "memory" / "decisions.md"
        forms = {
            f"{note}#L7-L9": lines[6:9],
            f"{note}#L7-9": lines[6:9],
            f"{note}#L9": lines[8:9],
            f"{note}:7-9": lines[6:9],
            f"{note}:9": lines[8:],
            "decisions.md#L3-L5": lines[2:5],  # relative to the memory folder
            f"{note}#L7-L9 (of 9 lines)": lines[6:9],  # the header memory_get prints
        }
        for target, want in forms.items():
            done = run(home, "get", target)
            assert done.returncode == 0, (name, target, done.stderr)
            assert done.stdout.splitlines() == want, (name, target)
    # The client passes a citation as it is; the daemon parses it.
    with Client(homes["served"] / "run" / "recalld.sock") as c:
        got = c.get(f"{homes['served'] / 'memory' / 'people.md'}#L3")
        assert got["text"] == NOTES["people.md"].splitlines()[2]


def test_search_citations_feed_get(homes: dict[str, Path]) -> None:
    """What search prints is what get takes (the loop an agent runs)."""
    for name, done in both(homes, "search", "why", "a", "unix", "socket").items():
        assert done.returncode == 0, done.stderr
        citation = done.stdout.splitlines()[0].split()[1]
        got = run(homes[name], "get", citation)
        assert got.returncode == 0, (name, got.stderr)
        assert "Unix socket" in got.stdout


def test_get_past_the_end_says_how_many_lines(homes: dict[str, Path]) -> None:
    for name, done in both(homes, "get", "garden.md:40").items():
        assert done.returncode == 3, (name, done.stdout, done.stderr)
        assert "garden.md has 3 lines: line 40 is past its end" in done.stderr, name
        assert done.stdout == ""
    for name, done in both(homes, "get", "garden.md#L2-L99").items():
        assert done.returncode == 0, (name, done.stderr)
        assert done.stdout.splitlines() == NOTES["garden.md"].splitlines()[1:]


def test_exit_codes_are_one_table_on_both_paths(homes: dict[str, Path]) -> None:
    cases = {
        ("get", "missing.md"): 3,
        ("get", "missing.md#L2"): 3,
        ("get", "garden.md:9-12"): 3,
        ("get", "garden.md:3-1"): 2,
        ("get", "/etc/passwd"): 2,
        ("search", "tomatoes", "--max-tokens", "50"): 2,
        ("search", " "): 2,
    }
    for args, code in cases.items():
        got = {name: done.returncode for name, done in both(homes, *args).items()}
        assert got == {"served": code, "local": code}, args
    helped = run(homes["local"], "--help").stdout
    assert "exit codes:" in helped
    for line in ("3    file not indexed or missing", "4    daemon unavailable", "5    invalid"):
        assert line in helped


def _snippet_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("   ")]


def test_max_tokens_counts_what_is_printed(homes: dict[str, Path]) -> None:
    query = ("Priya", "storage", "benchmark")
    full = json.loads(run(homes["local"], "search", *query, "--json").stdout)
    assert len(full["results"]) >= 2  # the budget has something to cut
    for name, done in both(homes, "search", *query, "--max-tokens", "100").items():
        assert done.returncode == 0, done.stderr
        printed = done.stdout + done.stderr
        assert count_tokens(printed) <= 100, (name, count_tokens(printed), printed)
        # An independent count: the bundled WordPiece tokenizer (on text; on JSON it counts
        # each quote and colon, where the BPE tokenizers of agents merge `":"` into one).
        assert default_tokenizer().count(printed) <= 100, (name, printed)
        snippet = " ".join(line.strip() for line in _snippet_lines(done.stdout))
        assert len(snippet) >= 40, printed  # never an empty or "#…" snippet
        assert "#…" not in done.stdout
    # With room for it, the best result is printed whole and the others are trimmed.
    whole = count_tokens(run(homes["served"], "search", *query, "--json").stdout)
    budget = whole - 40  # the second snippet (683 characters) must lose some
    roomy = run(homes["served"], "search", *query, "--max-tokens", str(budget), "--json")
    res = json.loads(roomy.stdout)
    best, second = res["results"][:2]
    assert best["snippet"] == full["results"][0]["snippet"] and "truncated" not in best
    assert second["truncated"] and 120 <= len(second["snippet"]) < len(
        full["results"][1]["snippet"]
    )
    assert count_tokens(roomy.stdout + roomy.stderr) <= budget
    assert res["budget"]["used_tokens"] <= budget


def test_an_answer_over_its_budget_says_why(homes: dict[str, Path]) -> None:
    # --explain lines are part of what is printed, so they count; alone they exceed 100 tokens.
    query = ("Priya", "storage", "benchmark", "--max-tokens", "100")
    for name, done in both(homes, "search", *query, "--explain").items():
        footer = done.stderr.strip().splitlines()[-1]
        used = int(footer.split("~")[1].split(" ")[0])
        assert used > 100 and "the --explain lines alone do not fit" in footer, (name, footer)
    for name, done in both(homes, "search", *query).items():
        assert "over it" not in done.stderr, (name, done.stderr)


def test_explain_says_why_a_result_under_the_floor_is_kept(homes: dict[str, Path]) -> None:
    # garden.md fuses to ~0.25 (its cosine 0.34 alone, the keyword channel misses it).
    args = ("search", "vegetables", "and", "Marek", "--min-score", "0.3", "--explain")
    for name, done in both(homes, *args, "--json").items():
        res = json.loads(done.stdout)
        under = [r for r in res["results"] if r["score"] < 0.3]
        assert under, (name, res["results"])
        for r in under:
            floor = r["explain"]["floor"]
            assert floor["kept_by"] in ("cosine", "best_keyword"), floor
            assert r["scores"]["vector"] >= 0.3 or floor["kept_by"] == "best_keyword"
    text = run(homes["served"], *args).stdout
    assert "kept: cosine 0.3" in text and "reaches the floor 0.3 although the score" in text
    # The weights this query got, raised from its shape's (search.gap_confidence), and those.
    assert re.search(r"weights vector [\d.]+ / keyword [\d.]+ \(the shape's 0.2 / 0.8\)", text)


def test_sync_and_reindex_through_the_daemon_print_a_sentence(homes: dict[str, Path]) -> None:
    served = homes["served"]
    queued = run(served, "sync")
    assert queued.returncode == 0 and queued.stdout.startswith("sync queued:"), queued.stdout
    waited = run(served, "sync", "--wait")
    assert waited.returncode == 0 and waited.stdout.startswith("sync done in "), waited.stdout
    assert "unchanged" in waited.stdout and "{" not in waited.stdout
    rebuilt = run(served, "reindex")
    assert rebuilt.returncode == 0 and rebuilt.stdout.startswith("reindex done in "), rebuilt
    assert ", 3 changed, " in rebuilt.stdout and "{" not in rebuilt.stdout
    assert json.loads(run(served, "sync", "--json").stdout)["queued"] is True


def test_logs_are_private(homes: dict[str, Path]) -> None:
    logs = homes["served"] / "logs"
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    log = logs / "daemon.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert "old" in log.read_text()  # appended to, not replaced
    fresh = homes["served"].parent / "fresh" / "logs" / "daemon.log"
    from recalld.security import open_private_log  # what spawn_daemon opens the log with

    with open_private_log(fresh) as fh:
        fh.write(b"x\n")
    assert stat.S_IMODE(fresh.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600


def test_every_subcommand_help_describes_its_arguments(homes: dict[str, Path]) -> None:
    import argparse

    from recalld.surfaces.cli import _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        for action in parser._actions:
            assert action.help, (name, action.option_strings or action.dest)
    home = homes["local"]
    assert "PATH[:FROM[-TO]]" in run(home, "get", "--help").stdout
    search = " ".join(run(home, "search", "--help").stdout.split())
    for words in (
        "--source {memory,sessions} only notes",
        "--path-prefix FOLDER only",
        "keyword: BM25",
    ):
        assert words in search
    assert "queries.jsonl" in run(home, "eval", "--help").stdout
    assert "uninstall: stop and remove it" in " ".join(
        run(home, "service", "--help").stdout.split()
    )


@pytest.mark.timeout(180)
def test_mcp_get_forms_past_end_and_budget(homes: dict[str, Path]) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    served = homes["served"]
    note = served / "memory" / "decisions.md"
    server = mcp_stdio_params(served)

    def text(result: object) -> str:
        return "".join(getattr(b, "text", "") for b in getattr(result, "content", []))

    async def scenario() -> None:
        async with stdio_client(server) as (read, write_), ClientSession(read, write_) as session:
            await session.initialize()
            for form in (f"{note}#L7-L9", f"{note}:7-9", f"{note}#L7-L9 (of 9 lines)"):
                got = await session.call_tool("memory_get", {"path": form})
                assert not got.is_error, text(got)
                assert text(got).startswith(f"{note}#L7-L9 (of 9 lines)\n## Transport")
            past = await session.call_tool("memory_get", {"path": f"{note}#L40"})
            assert past.is_error and "has 9 lines: line 40 is past its end" in text(past)
            args = {"query": "Priya storage benchmark", "maxTokens": 100}
            res = await session.call_tool("memory_search", args)
            body = text(res)
            assert not res.is_error and count_tokens(body) <= 100, (count_tokens(body), body)
            results = json.loads(body)["results"]
            assert results and all(len(r["snippet"]) >= 20 for r in results), body

    anyio.run(scenario)
