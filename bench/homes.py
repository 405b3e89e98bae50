"""Homes: a RECALLD_HOME folder with ``config.toml``, ``memory/`` and ``index.sqlite``.

Written config, real files copied in, indexed by recalld's own ``Engine.sync()`` (vectors from
the cache, not embedded again); the no-op and large homes are reused while a manifest of what
they were built from still matches.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.cache import VectorCache
from bench.common import log
from bench.corpora import BUILD_VERSION, F32, Doc, code_signature
from bench.replicas import PER_FILE, Replica, calibrate_noise, make_bundles, replica_vectors
from recalld.config import Config, Value
from recalld.embedding.local import LocalEmbedder
from recalld.embedding.registry import ProviderChoice
from recalld.engine import Engine
from recalld.index.store import Store
from recalld.ingest.identity_check import identity_for


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
        [BUILD_VERSION, code_signature(index=True), *parts],
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
    counts, vectors = _write_bundles(memory, bundles, real, noise["sigma"], embedder.dims)
    _put_vectors(home, config, embedder, vectors)
    log(f"large: {len(vectors)} vectors put in the home's embedding cache; indexing ...")
    counts.update(_sync_large(config, embedder))
    info: dict[str, Any] = {
        **counts,
        "noise": noise,
        "build_s": time.perf_counter() - started,
        "per_file": PER_FILE,
    }
    Manifest(key, info).write(home)
    return {**info, "reused": False}


def _write_bundles(
    memory: Path, bundles: Sequence[Replica], real: Mapping[str, F32], sigma: float, dims: int
) -> tuple[dict[str, float], dict[str, F32]]:
    """Write each bundle's file; (its counts, one vector per chunk text) for the large home."""
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
        vecs, derived = replica_vectors(rep, real, sigma, rng, dims)
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
    return counts, vectors


def _put_vectors(
    home: Path, config: Config, embedder: LocalEmbedder, vectors: Mapping[str, F32]
) -> None:
    """Put every vector in the home's embedding cache, so that the sync embeds nothing."""
    with Store(home / "index.sqlite") as store:
        store.set_identity(identity_for(config, embedder))
        items = list(vectors.items())
        for i in range(0, len(items), 5000):
            store.put_cache(embedder.key, embedder.model, embedder.dims, dict(items[i : i + 5000]))


def _sync_large(config: Config, embedder: LocalEmbedder) -> dict[str, float]:
    """Index the large home with recalld's own ``Engine.sync()``: its time and chunk counts."""
    engine = engine_for(config, embedder)
    try:
        t = time.perf_counter()
        report = engine.sync()
        return {
            "sync_s": round(time.perf_counter() - t, 1),
            "sync_embedded": report.chunks_embedded,
            "indexed_chunks": report.chunks_written,
        }
    finally:
        engine.close()
