"""The real pool, built from the real sets in ``../shared/bench``, and what is read from it.

* The *pool*: every file of tldr, scifact-train and locomo, chunked with recalld's own chunker
  (the chunk texts and hashes are exactly those the indexer produces), with real embeddings.
* Real queries (the three sets mixed) and the ripgrep keyword reference's two terms.
* Real Claude Code transcripts of a given size, and one more user message for them.

The large index's varied copies are in ``bench/replicas.py``, the homes in ``bench/homes.py``.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import random
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import recalld.index.embedding_cache
import recalld.index.rows
import recalld.index.session_state
import recalld.index.store
import recalld.index.vector_scan
import recalld.ingest.chunking
import recalld.ingest.indexer
import recalld.tokens
from bench.cache import VectorCache
from bench.common import OUT, SHARED_BENCH, log
from recalld.config import Config
from recalld.embedding.local import LocalEmbedder
from recalld.index import migrations
from recalld.index.store import NewChunk
from recalld.ingest.chunking import chunk_markdown
from recalld.ingest.identity_check import chunking_identity
from recalld.ingest.indexer import text_hash
from recalld.tokens import default_tokenizer

F32 = npt.NDArray[np.float32]
SETS = ("tldr", "scifact-train", "locomo")
BUILD_VERSION = "4"  # bump when the way homes are built changes (4: chat windows)
_DEFAULTS = Config({})
# The indexer's own settings (config defaults; the embedder's 256-token window caps both).
MAX_TOKENS = min(_DEFAULTS.int("chunking.max_tokens"), LocalEmbedder.max_input_tokens)
TARGET_TOKENS = min(_DEFAULTS.int("chunking.target_tokens"), MAX_TOKENS)
CHAT_OVERLAP = (
    _DEFAULTS.float("chunking.chat_window_overlap")
    if _DEFAULTS.bool("chunking.chat_windows")
    else None
)


# the real pool ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    """One real file of a benchmark set, chunked as the indexer chunks it."""

    set: str
    rel: str
    data: bytes
    text: str
    chunks: tuple[NewChunk, ...]

    @property
    def lines(self) -> int:
        """Line count as the indexer records it."""
        t = self.text
        return t.count("\n") + (0 if t.endswith("\n") or not t else 1)


def decode(data: bytes) -> str:
    """Bytes to text exactly as the indexer decodes a memory file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
    return text[1:] if text.startswith("\ufeff") else text


def chunk_text(text: str) -> tuple[NewChunk, ...]:
    """recalld's Markdown chunker with the default settings, as NewChunk rows.

    The same arguments as the indexer's (``Indexer._chunks``), chat windows included: a chunk
    the bench does not predict has no vector in the home's cache and is embedded for real.
    """
    count = default_tokenizer().count
    pieces = chunk_markdown(
        text,
        count,
        max_tokens=MAX_TOKENS,
        target_tokens=TARGET_TOKENS,
        chat_overlap=CHAT_OVERLAP,
        chat_chars=_DEFAULTS.int("chunking.chat_window_chars"),
    )
    return tuple(NewChunk(c.start_line, c.end_line, c.text, text_hash(c.text)) for c in pieces)


def code_signature(*, index: bool = False) -> str:
    """Changes when recalld's chunker or tokenizer (``index``: also indexer and store) changes."""
    digest = hashlib.sha256(chunking_identity(_DEFAULTS).encode())
    modules = [recalld.ingest.chunking, recalld.tokens]
    if index:
        # The store's write path spans these modules since it was split (issue 37).
        modules += [recalld.ingest.indexer, recalld.index.store, migrations]
        modules += [recalld.index.rows, recalld.index.vector_scan, recalld.index.session_state]
        modules += [recalld.index.embedding_cache]
    for module in modules:
        if module.__file__:
            digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()[:12]


def _set_files(name: str, limit: int | None) -> list[Path]:
    root = SHARED_BENCH / name / "corpus"
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix == ".md")
    random.Random(f"pool-{name}").shuffle(files)
    return files if limit is None else files[:limit]


def load_pool(limits: Mapping[str, int | None]) -> list[Doc]:
    """The real files of the three sets, chunked (pickled under bench/out/cache for reruns)."""
    sig = hashlib.sha256(
        json.dumps(
            {"limits": dict(limits), "code": code_signature(), "build": BUILD_VERSION},
            sort_keys=True,
        ).encode()
    ).hexdigest()[:12]
    cached = OUT / "cache" / f"pool-{sig}.pkl"
    if cached.exists():
        with cached.open("rb") as fh:
            docs: list[Doc] = pickle.load(fh)
        return docs
    started = time.perf_counter()
    docs = []
    for name in SETS:
        if name not in limits:
            continue
        root = SHARED_BENCH / name / "corpus"
        for path in _set_files(name, limits[name]):
            data = path.read_bytes()
            text = decode(data)
            docs.append(Doc(name, path.relative_to(root).as_posix(), data, text, chunk_text(text)))
    cached.parent.mkdir(parents=True, exist_ok=True)
    for old in cached.parent.glob("pool-*.pkl"):
        old.unlink()
    with cached.open("wb") as fh:
        pickle.dump(docs, fh, protocol=pickle.HIGHEST_PROTOCOL)
    chunks = sum(len(d.chunks) for d in docs)
    log(
        f"pool: chunked {len(docs)} files into {chunks} chunks in "
        f"{time.perf_counter() - started:.1f} s"
    )
    return docs


def interleave(docs: Sequence[Doc], seed: str) -> list[Doc]:
    """A deterministic shuffle of the pool (the sets mixed)."""
    out = list(docs)
    random.Random(seed).shuffle(out)
    return out


def take_chunks(docs: Iterable[Doc], chunks: int) -> list[Doc]:
    """Whole files, in order, until they hold at least ``chunks`` chunks."""
    out: list[Doc] = []
    total = 0
    for doc in docs:
        if total >= chunks:
            break
        if doc.chunks:
            out.append(doc)
            total += len(doc.chunks)
    return out


def pool_vectors(docs: Sequence[Doc], cache: VectorCache, what: str) -> dict[str, F32]:
    """Real vectors of every chunk of ``docs`` (embedded now where the cache lacks them)."""
    texts = {c.hash: c.text for d in docs for c in d.chunks}
    return cache.ensure(texts, what)


# queries ------------------------------------------------------------------------------------------


def real_queries(count: int, seed: str = "queries") -> list[str]:
    """Real query texts, the three sets mixed (locomo questions, scifact claims, tldr names)."""
    per_set: list[list[str]] = []
    for name in ("locomo", "scifact-train", "tldr"):
        texts = []
        for line in (SHARED_BENCH / name / "queries.jsonl").read_text().splitlines():
            if line.strip():
                texts.append(str(json.loads(line)["text"]))
        random.Random(f"{seed}-{name}").shuffle(texts)
        per_set.append(texts)
    out: list[str] = []
    i = 0
    while len(out) < count:
        for texts in per_set:
            if len(out) < count:
                out.append(texts[i % len(texts)])
        i += 1
    return out


_STOP_WORDS = (
    "a an and are as at be by did do does for from has have how i in is it of on or that the "
    "their this to was what when where which who why with would you your he she they his her"
)
_STOP = frozenset(_STOP_WORDS.split(" "))


def two_terms(query: str) -> list[str]:
    """The two longest non-stopword words of a query (the ripgrep keyword reference)."""
    words = [w for w in re.findall(r"[\w$.+-]+", query) if w.lower() not in _STOP]
    words.sort(key=len, reverse=True)
    return words[:2] or [query]


# transcripts --------------------------------------------------------------------------------------


def transcript_bytes(size: int) -> bytes:
    """Real Claude Code JSONL (spotter fixtures) of about ``size`` bytes, whole lines only."""
    spot = SHARED_BENCH / "transcripts" / "spotter"
    short = spot / "short.jsonl"
    if size <= short.stat().st_size + 1024:
        return short.read_bytes()
    out = bytearray()
    for path in sorted(spot.glob("*.jsonl")):
        if path.name in ("short.jsonl", "subagent.jsonl", "tool_heavy.jsonl"):
            continue
        for line in path.read_bytes().splitlines(keepends=True):
            if len(out) + len(line) > size:
                return bytes(out)
            out += line
    return bytes(out)


def user_message_line(template: bytes, token: str, n: int) -> bytes:
    """One more Claude Code user message, modelled on the transcript's own last user record."""
    last: dict[str, Any] | None = None
    for raw in reversed(template.splitlines()):
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if rec.get("type") == "user" and isinstance(rec.get("message", {}).get("content"), str):
            last = rec
            break
    rec = dict(last or {"type": "user", "sessionId": "bench"})
    rec["parentUuid"] = rec.get("uuid")
    rec["uuid"] = f"bench-{token}-{n}"
    rec["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    rec["message"] = {
        "role": "user",
        "content": f"Note {n}: the deploy key for staging is tagged {token}; rotate it after "
        "the migration and tell the team in the release notes.",
    }
    return (json.dumps(rec) + "\n").encode()


def iter_batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """Slices of ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
