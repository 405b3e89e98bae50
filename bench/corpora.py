"""Corpora and prepared homes, all built from the real sets in ``../shared/bench``.

* The *pool*: every file of tldr, scifact-train and locomo, chunked with recalld's own chunker
  (the chunk texts and hashes are exactly those the indexer produces), with real embeddings.
* *Replicas* (only to reach the large index): two real files joined, with names, months,
  weekdays, numbers and tldr placeholders varied. Their chunks come from recalld's chunker too.
  A replica chunk whose text equals a real chunk gets that real vector (as the embedding cache
  would give it); any other gets a *derived* vector: the line-overlap-weighted mean of the
  real vectors of the chunks it was made from, plus Gaussian noise scaled so that its cosine to
  that mean matches the one measured between real embeddings of original and varied text.
* Homes: a RECALLD_HOME folder with ``config.toml``, ``memory/`` and ``index.sqlite``.
"""

from __future__ import annotations

import hashlib
import json
import math
import pickle
import random
import re
import shutil
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
from recalld.config import Config, Value
from recalld.embedding.local import LocalEmbedder
from recalld.embedding.registry import ProviderChoice
from recalld.engine import Engine
from recalld.index import migrations
from recalld.index.store import NewChunk, Store
from recalld.ingest.chunking import chunk_markdown
from recalld.ingest.indexer import chunking_identity, identity_for, text_hash
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


def _code_signature(*, index: bool = False) -> str:
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
            {"limits": dict(limits), "code": _code_signature(), "build": BUILD_VERSION},
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


# varied replicas ----------------------------------------------------------------------------------

NAMES = (
    "Caroline",
    "Melanie",
    "Jon",
    "Gina",
    "John",
    "Maria",
    "Joanna",
    "Nate",
    "Tim",
    "Audrey",
    "Andrew",
    "James",
    "Deborah",
    "Jolene",
    "Evan",
    "Sam",
    "Calvin",
    "Dave",
    "Alice",
    "Priya",
    "Kenji",
    "Fatima",
    "Lars",
    "Olga",
    "Diego",
    "Amara",
    "Chen",
    "Noor",
    "Mateo",
    "Ingrid",
)
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_WORDS = re.compile(r"\b(" + "|".join(NAMES + MONTHS + DAYS) + r")\b")
_NUMBER = re.compile(r"(?<![\w.])\d+(?![\w])")
_PLACEHOLDER = re.compile(r"\{\{([^{}\n]+?)\}\}")


def vary(text: str, k: int) -> str:
    """Real text with other names, months, weekdays, numbers and placeholders (lines kept)."""

    def word(m: re.Match[str]) -> str:
        w = m.group(1)
        for table in (NAMES, MONTHS, DAYS):
            if w in table:
                return table[(table.index(w) + k) % len(table)]
        return w

    def number(m: re.Match[str]) -> str:
        raw = m.group(0)
        value = int(raw)
        if len(raw) == 4 and 1900 <= value <= 2099:
            return str(value + k % 9 - 4)
        if len(raw) <= 2:
            return str(value + k % 7 + 1)
        return "".join(str((int(d) + k) % 10) for d in raw)

    def placeholder(m: re.Match[str]) -> str:
        return "{{" + f"{m.group(1)}_{k % 89 + 2}" + "}}"

    text = _WORDS.sub(word, text)
    text = _NUMBER.sub(number, text)
    return _PLACEHOLDER.sub(placeholder, text)


@dataclass
class Replica:
    """A file of the large index: its text, chunks and where each chunk's vector comes from."""

    rel: str
    text: str
    chunks: tuple[NewChunk, ...]
    sources: list[list[tuple[str, int]]]  # per chunk: (real chunk hash, overlapping lines)
    varied: bool  # False: real files joined unchanged


def _overlaps(start: int, end: int, parts: Sequence[tuple[int, Doc]]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for offset, doc in parts:
        for c in doc.chunks:
            lo = max(start, c.start_line + offset)
            hi = min(end, c.end_line + offset)
            if hi >= lo:
                out.append((c.hash, hi - lo + 1))
    return out


PER_FILE = 16  # real files per large-index file


def _bundle(rel: str, docs: Sequence[Doc], k: int | None, varied: bool) -> Replica:
    """Join real files (varied with ``k`` when given) into one Markdown file, chunked."""
    texts = [
        (vary(d.text, k + j) if k is not None else d.text).rstrip("\n") for j, d in enumerate(docs)
    ]
    parts: list[tuple[int, Doc]] = []
    line = 1
    for text, doc in zip(texts, docs, strict=True):
        parts.append((line - 1, doc))
        line += text.count("\n") + 2  # its lines plus the blank separator
    text = "\n\n".join(texts) + "\n"
    pieces = chunk_text(text)
    sources = [_overlaps(c.start_line, c.end_line, parts) for c in pieces]
    return Replica(rel, text, pieces, sources, varied)


def make_bundles(pool: Sequence[Doc], chunks: int) -> list[Replica]:
    """The large index's files: every real file once, then varied copies, PER_FILE per file.

    Bundling keeps the file count low (tens of chunks per file) so that the daemon's start-up
    reconcile, which is quadratic in the file count in this tree, does not dominate the run.
    """
    usable = [d for d in pool if d.chunks]
    out: list[Replica] = []
    total = 0
    for name in SETS:
        docs = [d for d in usable if d.set == name]
        for i in range(0, len(docs), PER_FILE):
            rep = _bundle(
                f"real/{name}/bundle-{i // PER_FILE:05d}.md", docs[i : i + PER_FILE], None, False
            )
            out.append(rep)
            total += len(rep.chunks)
    mixed = interleave(usable, "replicas")
    b = 0
    while total < chunks:
        start = (b * PER_FILE) % len(mixed)
        docs = [mixed[(start + j) % len(mixed)] for j in range(PER_FILE)]
        rep = _bundle(f"replicas/r{b // 200:03d}/bundle-{b:05d}.md", docs, b + 1, True)
        out.append(rep)
        total += len(rep.chunks)
        b += 1
    return out


def base_vector(sources: Sequence[tuple[str, int]], real: Mapping[str, F32], dims: int) -> F32:
    """The line-overlap-weighted mean of the real vectors a replica chunk was made from."""
    acc = np.zeros(dims, dtype=np.float64)
    for h, weight in sources:
        acc += weight * real[h]
    norm = float(np.linalg.norm(acc))
    return (acc / norm).astype(np.float32) if norm > 0 else acc.astype(np.float32)


def calibrate_noise(
    replicas: Sequence[Replica], real: Mapping[str, F32], cache: VectorCache, sample: int = 96
) -> dict[str, float]:
    """Embed a sample of varied chunks for real; noise scale that reproduces their cosine."""
    picked: dict[str, tuple[str, list[tuple[str, int]]]] = {}
    for rep in replicas:
        for c, src in zip(rep.chunks, rep.sources, strict=True):
            if c.hash not in real and src and c.hash not in picked:
                picked[c.hash] = (c.text, src)
        if len(picked) >= sample:
            break
    if not picked:
        return {"sigma": 0.1, "median_cos": math.nan, "sample": 0}
    vecs = cache.ensure({h: t for h, (t, _) in picked.items()}, "noise calibration")
    dims = cache.embedder.dims
    cosines = [
        float(np.dot(vecs[h], base_vector(src, real, dims))) for h, (_, src) in picked.items()
    ]
    cosines.sort()
    med = cosines[len(cosines) // 2]
    med = min(max(med, 0.5), 0.999)
    return {"sigma": math.sqrt(1 / med**2 - 1), "median_cos": med, "sample": len(cosines)}


def replica_vectors(
    rep: Replica, real: Mapping[str, F32], sigma: float, rng: np.random.Generator, dims: int
) -> tuple[dict[str, F32], int]:
    """Vectors for a file's chunks (real for a known text, else derived); derived count."""
    out: dict[str, F32] = {}
    derived = 0
    for c, src in zip(rep.chunks, rep.sources, strict=True):
        if c.hash in out:
            derived += c.hash not in real
            continue
        if c.hash in real:
            out[c.hash] = real[c.hash]
            continue
        base = base_vector(src, real, dims)
        noisy = base + rng.standard_normal(dims).astype(np.float32) * (sigma / math.sqrt(dims))
        out[c.hash] = (noisy / np.linalg.norm(noisy)).astype(np.float32)
        derived += 1
    return out, derived


# homes --------------------------------------------------------------------------------------------


def home_config(
    home: Path,
    *,
    memory: Sequence[Path] | None = None,
    sessions: Sequence[str] = (),
    watch: bool = True,
    provider: str = "local",
    extra: Mapping[str, Value] | None = None,
) -> Config:
    """Write ``home/config.toml`` (for a daemon) and return the same settings as a Config."""
    home.mkdir(parents=True, exist_ok=True)
    mem = list(memory) if memory is not None else [home / "memory"]
    for m in mem:
        m.mkdir(parents=True, exist_ok=True)
    values: dict[str, Value] = {
        "memory.paths": [str(m.resolve()) for m in mem],
        "sessions.paths": list(sessions),
        "sync.watch": watch,
        "embedding.provider": provider,
    }
    values.update(extra or {})
    sections: dict[str, dict[str, Value]] = {}
    for key, value in values.items():
        section, _, name = key.partition(".")
        sections.setdefault(section, {})[name] = value
    lines = []
    for section, table in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f"{name} = {json.dumps(value)}" for name, value in table.items())
        lines.append("")
    (home / "config.toml").write_text("\n".join(lines), encoding="utf-8")
    return Config(values, base_dir=home.resolve())


def wipe(home: Path) -> None:
    """Remove a home folder."""
    shutil.rmtree(home, ignore_errors=True)


def write_docs(memory: Path, docs: Iterable[Doc]) -> None:
    """Copy real files into ``memory/<set>/<rel>`` byte for byte."""
    for doc in docs:
        path = memory / doc.set / doc.rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(doc.data)


def engine_for(config: Config, embedder: LocalEmbedder | None) -> Engine:
    """An in-process writable engine with this (already warm) embedder, or keyword-only."""
    reason = "bench" if embedder is not None else "bench: keyword-only"
    return Engine(config, writable=True, choice=ProviderChoice(embedder, reason))


def build_pipeline_home(
    home: Path,
    docs: Sequence[Doc],
    embedder: LocalEmbedder,
    cache: VectorCache | None,
    *,
    watch: bool = True,
) -> dict[str, Any]:
    """Copy real files in and index them with recalld's own sync (cache seeded: no embedding)."""
    wipe(home)
    config = home_config(home, watch=watch)
    write_docs(home / "memory", docs)
    seeded = 0
    if cache is not None:
        with Store(home / "index.sqlite") as store:
            seeded = cache.seed(store, [c.hash for d in docs for c in d.chunks])
    engine = engine_for(config, embedder)
    try:
        started = time.perf_counter()
        report = engine.sync()
        seconds = time.perf_counter() - started
    finally:
        engine.close()
    return {
        "files": len(docs),
        "chunks": report.chunks_written,
        "seconds": seconds,
        "embedded": report.chunks_embedded,
        "seeded": seeded,
    }


@dataclass
class Manifest:
    """What a reusable home was built from; a mismatch means rebuild."""

    key: str
    info: dict[str, Any]

    @staticmethod
    def read(home: Path) -> Manifest | None:
        path = home / "bench-manifest.json"
        if not path.exists() or not (home / "index.sqlite").exists():
            return None
        data = json.loads(path.read_text())
        return Manifest(str(data["key"]), dict(data["info"]))

    def write(self, home: Path) -> None:
        (home / "bench-manifest.json").write_text(
            json.dumps({"key": self.key, "info": self.info}, indent=1), encoding="utf-8"
        )


def _key(*parts: object) -> str:
    raw = json.dumps(
        [BUILD_VERSION, _code_signature(index=True), *parts],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _files_intact(home: Path, sample: int = 200) -> bool:
    """Whether a sample of indexed files still has the size and mtime the index recorded."""
    with Store(home / "index.sqlite", readonly=True) as store:
        rows = list(store.files().values())
    for row in random.Random(0).sample(rows, min(sample, len(rows))):
        try:
            st = Path(row.path).stat()
        except OSError:
            return False
        if st.st_size != row.size or st.st_mtime_ns != row.mtime_ns:
            return False
    return True


def reusable(home: Path, key: str) -> Manifest | None:
    """The manifest of a home built with ``key`` whose files are untouched, else None."""
    manifest = Manifest.read(home)
    if manifest is None or manifest.key != key:
        return None
    try:
        return manifest if _files_intact(home) else None
    except Exception:  # noqa: BLE001 - any doubt means rebuild
        return None


def noop_home(
    home: Path, docs: Sequence[Doc], embedder: LocalEmbedder, cache: VectorCache, rebuild: bool
) -> dict[str, Any]:
    """The 10k-file home of the no-op resync (real files, built by recalld's sync; reused)."""
    key = _key("noop", [(d.set, d.rel, len(d.data)) for d in docs])
    manifest = None if rebuild else reusable(home, key)
    if manifest is not None:
        return {**manifest.info, "reused": True}
    info = build_pipeline_home(home, docs, embedder, cache, watch=False)
    Manifest(key, info).write(home)
    return {**info, "reused": False}


def large_home(
    home: Path,
    pool: Sequence[Doc],
    real: Mapping[str, F32],
    target: int,
    embedder: LocalEmbedder,
    cache: VectorCache,
    rebuild: bool,
) -> dict[str, Any]:
    """The large index (every real file, then varied copies), indexed by recalld's own sync.

    Every vector is put in the home's embedding cache first (``Store.put_cache``): real ones by
    their text hash, derived ones for the texts nobody embedded; ``Engine.sync()`` then writes
    files, chunks, FTS rows and vectors exactly as it does for a user, embedding nothing.
    """
    key = _key("large", target, PER_FILE, sorted(real), [(d.set, d.rel) for d in pool])
    manifest = None if rebuild else reusable(home, key)
    if manifest is not None:
        return {**manifest.info, "reused": True}
    started = time.perf_counter()
    wipe(home)
    config = home_config(home)
    memory = Path(config.memory_roots()[0])
    bundles = make_bundles(pool, target)
    log(f"large: {len(bundles)} files chunked in {time.perf_counter() - started:.1f} s")
    noise = calibrate_noise([b for b in bundles if b.varied], real, cache)
    rng = np.random.default_rng(20240611)
    counts: dict[str, float] = dict.fromkeys(
        (
            "files",
            "varied_files",
            "chunks",
            "real_text_chunks",
            "derived_vector_chunks",
            "derived_in_unvaried_files",
        ),
        0,
    )
    vectors: dict[str, F32] = {}
    for rep in bundles:
        vecs, derived = replica_vectors(rep, real, noise["sigma"], rng, embedder.dims)
        for h, v in vecs.items():
            vectors.setdefault(h, v)  # one vector per text, as the embedding cache keeps it
        path = memory / rep.rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rep.text, encoding="utf-8")
        counts["files"] += 1
        counts["varied_files"] += rep.varied
        counts["chunks"] += len(rep.chunks)
        counts["derived_vector_chunks"] += derived
        counts["derived_in_unvaried_files"] += 0 if rep.varied else derived
        counts["real_text_chunks"] += len(rep.chunks) - derived
    with Store(home / "index.sqlite") as store:
        store.set_identity(identity_for(config, embedder))
        items = list(vectors.items())
        for i in range(0, len(items), 5000):
            store.put_cache(embedder.key, embedder.model, embedder.dims, dict(items[i : i + 5000]))
    log(f"large: {len(vectors)} vectors put in the home's embedding cache; indexing ...")
    engine = engine_for(config, embedder)
    try:
        t = time.perf_counter()
        report = engine.sync()
        counts["sync_s"] = round(time.perf_counter() - t, 1)
        counts["sync_embedded"] = report.chunks_embedded
        counts["indexed_chunks"] = report.chunks_written
    finally:
        engine.close()
    info: dict[str, Any] = {
        **counts,
        "noise": noise,
        "build_s": time.perf_counter() - started,
        "per_file": PER_FILE,
    }
    Manifest(key, info).write(home)
    return {**info, "reused": False}


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
