"""Writing and forgetting on the 100k-chunk home (issue 34): how soon a ``remember`` is found, and
what forgetting a 10k-chunk session costs and leaves behind.

- ``write_to_keyword_searchable_ms_p50``: from sending ``remember`` to another client's keyword
  search finding the entry (the write answers after the note is indexed, so this is the write's
  round trip plus one search); ``status`` round trip and one keyword search measured beside it.
- ``write_to_vector_searchable_ms_p50``: from sending ``remember`` to a vector-only search for
  the entry's text returning it (polled every 10 ms).
- ``forget_session_10k_s``: ``forget --session`` of a transcript of ~10k chunks indexed into the
  same home; then, with the daemon stopped, every file under the home is scanned for the
  session's unique tokens (``forget_session_tokens_left``: should be 0).

    .venv/bin/python -m bench.write_forget        # this part alone (builds or reuses idx-100000)
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import homes
from bench.common import Sheet, log, percentile
from bench.daemonproc import Daemon
from recalld.index import tombstones
from recalld.index.store import Store

HOME_NAME = "idx-100000"
WRITES = 40
SESSION_ID = "b3nch-forget-session"
TOKEN = re.compile(rb"zqs\d+x")
_WORD_LIST = (
    "harbor lantern granite orchard velvet compass meadow falcon ember quartz willow "
    "canyon saddle thimble beacon copper juniper glacier marble pepper violet summit "
    "ribbon anchor cedar dune fable gravel hollow ivory jasper kettle lagoon mosaic"
)
_WORDS = _WORD_LIST.split()


def run(ctx: Any) -> None:
    """The ``write_forget`` part of ``bench/run.py`` (on the scale part's 100k home)."""
    from bench import scale

    try:
        home = scale.SCALE / HOME_NAME
        scale.million_home(home, ctx.embedder, ctx.cache, 100_000)
        measure(ctx.sheet, home, ctx.embedder)
    except Exception as exc:  # noqa: BLE001 - a failed part must not lose the others
        log(f"write_forget FAILED: {type(exc).__name__}: {exc}")
        ctx.sheet.errors["write_forget"] = f"{type(exc).__name__}: {exc}"


def measure(sheet: Sheet, home: Path, embedder: Any) -> None:
    """Both measures on ``home``; its config gets a transcript glob for the run, then back."""
    sessions = home.parent / "write-forget-sessions"
    transcript = sessions / "projects" / "-bench-wf" / f"{SESSION_ID}.jsonl"
    chunks_wanted = 10_000
    _write_session(transcript, chunks_wanted)
    glob = str(sessions / "projects" / "**" / "*.jsonl")
    _derived_vectors(home, glob, embedder)
    (home / "memory" / "bench-writes.md").unlink(missing_ok=True)  # a rerun writes anew
    homes.home_config(home, sessions=[glob])
    d = Daemon(home).start(timeout=900)
    try:
        d.wait_idle()
        with d.client() as writer, d.client() as reader:
            _writes(sheet, writer, reader)
            started = time.perf_counter()
            res = writer.forget(session=SESSION_ID)
            sheet.put("forget_session_10k_s", time.perf_counter() - started, 2)
            sheet.put("forget_session_files_removed", res["files_removed"])
            sheet.put("forget_session_chunks_removed", res["chunks_removed"])
            sheet.put("forget_session_wal_truncated", int(bool(res["wal_truncated"])))
            left = reader.search("zqs17x", mode="keyword")["results"]
            sheet.put("forget_session_searchable_after", len(left))
    finally:
        d.stop()
        homes.home_config(home)  # as the scale part wrote it
    sheet.put("forget_session_tokens_left", _tokens_left(home))


def _writes(sheet: Sheet, writer: Any, reader: Any) -> None:
    rng = random.Random(34)
    keyword_ms: list[float] = []
    vector_ms: list[float] = []
    status_ms: list[float] = []
    search_ms: list[float] = []
    for i in range(-3, WRITES):  # three warm-up writes
        words = " ".join(rng.choice(_WORDS) for _ in range(14))
        text = f"{words} zqw{i + 10}q"
        t0 = time.perf_counter()
        res = writer.remember(text, note="bench-writes.md")
        while not _found(reader.search(f"zqw{i + 10}q", mode="keyword"), res):
            pass
        t_keyword = time.perf_counter() - t0
        while not _found(reader.search(text, mode="vector", min_score=0.0, max_results=10), res):
            time.sleep(0.01)
        t_vector = time.perf_counter() - t0
        t1 = time.perf_counter()
        reader.status()
        t2 = time.perf_counter()
        reader.search(f"zqw{max(i + 9, 7)}q", mode="keyword")
        t3 = time.perf_counter()
        if i >= 0:
            keyword_ms.append(t_keyword * 1000)
            vector_ms.append(t_vector * 1000)
            status_ms.append((t2 - t1) * 1000)
            search_ms.append((t3 - t2) * 1000)
    sheet.put("write_to_keyword_searchable_ms_p50", percentile(keyword_ms, 0.5), 1)
    sheet.put("write_to_keyword_searchable_ms_p90", percentile(keyword_ms, 0.9), 1)
    sheet.put("write_to_vector_searchable_ms_p50", percentile(vector_ms, 0.5), 1)
    sheet.put("write_to_vector_searchable_ms_p90", percentile(vector_ms, 0.9), 1)
    sheet.put("write_bench_status_ms_p50", percentile(status_ms, 0.5), 2)
    sheet.put("write_bench_keyword_search_ms_p50", percentile(search_ms, 0.5), 2)


class _Derived:
    """The local model's vector space and chunk limits, with derived (random unit) vectors:
    embedding the session's ~7k embeddable chunks for real takes 20 minutes on this host."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self._rng = np.random.default_rng(34)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def embed(self, texts: Any, *, query: bool = False) -> Any:
        vecs = self._rng.standard_normal((len(texts), self._real.dims)).astype(np.float32)
        return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def _derived_vectors(home: Path, glob: str, embedder: Any) -> None:
    """Index the session into a scratch home with derived vectors and copy that embedding cache
    into ``home``: the daemon then finds every vector of the session cached."""
    from recalld.config import Config
    from recalld.embedding.registry import ProviderChoice
    from recalld.engine import Engine

    scratch = home.parent / "write-forget-scratch"
    homes.wipe(scratch)
    (scratch / "memory").mkdir(parents=True)
    values: dict[str, Any] = {"memory.paths": [str(scratch / "memory")], "sessions.paths": [glob]}
    config = Config(values, base_dir=scratch)
    engine = Engine(config, choice=ProviderChoice(_Derived(embedder), "bench: derived"))
    try:
        engine.sync()
    finally:
        engine.close()
    with Store(home / "index.sqlite") as store:
        store.copy_cache_from(scratch / "index.sqlite")
        with store.conn:  # a rerun: the last run's forget would keep the session out
            tombstones.remove(store.conn, "session", SESSION_ID)
    homes.wipe(scratch)


def _found(answer: Any, res: dict[str, Any]) -> bool:
    return any(
        h["path"] == res["path"] and h["start_line"] <= res["start_line"] <= h["end_line"]
        for h in answer["results"]
    )


def _write_session(path: Path, chunks: int) -> None:
    """A Claude Code transcript of about ``chunks`` chunks: turns of a user message, a tool
    call and its output, each with unique tokens (``zqs<n>x``) to look for afterwards."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    lines = []
    n = 0
    for turn in range(chunks * 2 // 5):  # ~2.5 chunks a turn
        words = " ".join(rng.choice(_WORDS) for _ in range(40))
        n += 1
        lines.append(_record("user", f"question {turn} zqs{n}x {words}"))
        n += 1
        call = {"type": "tool_use", "id": f"t{turn}", "name": "Bash",
                "input": {"command": f"grep -r zqs{n}x src/ {words[:80]}"}}  # fmt: skip
        lines.append(_record("assistant", [call]))
        n += 1
        result = {"type": "tool_result", "tool_use_id": f"t{turn}",
                  "content": f"src/app.py: zqs{n}x {words}"}  # fmt: skip
        lines.append(_record("user", [result]))
    path.write_text("".join(lines), encoding="utf-8")


def _record(role: str, content: Any) -> str:
    msg = {"role": role, "content": content}
    rec = {"type": role, "message": msg, "sessionId": SESSION_ID, "cwd": "/bench/wf"}
    return json.dumps(rec) + "\n"


def _tokens_left(home: Path) -> int:
    """Occurrences of the session's tokens in the bytes of every file under the home."""
    found = 0
    for path in home.rglob("*"):
        if path.is_file():
            carry = b""  # a token cut by a block boundary is matched across it
            with path.open("rb") as fh:
                while block := fh.read(64 << 20):
                    data = carry + block
                    found += sum(1 for m in TOKEN.finditer(data) if m.end() > len(carry))
                    carry = data[-31:]
    return found


def main() -> int:
    """Run this part alone and print its rows."""
    from bench import scale
    from bench.cache import VectorCache
    from recalld.embedding.local import LocalEmbedder

    embedder = LocalEmbedder(batch_size=16, threads=0)
    embedder.warm()
    cache = VectorCache(embedder)
    sheet = Sheet()
    try:
        home = scale.SCALE / HOME_NAME
        scale.million_home(home, embedder, cache, 100_000)
        measure(sheet, home, embedder)
    finally:
        cache.close()
    for key, value in sheet.metrics.items():
        print(f"{key:45} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
