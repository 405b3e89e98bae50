"""Scale: a one-million-chunk index (derived vectors), cold start, peak RSS and concurrency.

The 1M home is built like the 100k one (``corpora.large_home``: every real file of a small real
pool, then varied copies whose vectors are the overlap-weighted real vectors plus calibrated
noise), indexed by recalld's own ``Engine.sync()``. Building it takes tens of minutes on two
cores, so it is reused while the chunker and tokenizer are unchanged (the daemon migrates the
schema on open; vectors and chunk texts do not depend on the rest of the indexing code).

    .venv/bin/python -m bench.scale build     # build (or reuse) bench/out/speed/idx-1m
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench import corpora
from bench.cache import VectorCache
from bench.common import OUT, QUICK, log
from recalld.embedding.local import LocalEmbedder
from recalld.indexer import identity_for
from recalld.store import Store

F32 = npt.NDArray[np.float32]
SCALE = OUT / "speed"
MILLION = 1_000_000
POOL_LIMITS = QUICK.pool_limits  # a small real pool: embedded once, cheap to reuse
PUT_BATCH = 5000


def million_home(
    home: Path, embedder: LocalEmbedder, cache: VectorCache, target: int = MILLION
) -> dict[str, Any]:
    """Build (or reuse) the ``target``-chunk home; returns its build facts."""
    pool = corpora.load_pool(POOL_LIMITS)
    real = corpora.pool_vectors(pool, cache, "scale pool")
    key = _chunk_key(target, real, pool)
    manifest = corpora.Manifest.read(home)
    if manifest is not None and manifest.key == key:
        return {**manifest.info, "reused": True}
    started = time.perf_counter()
    corpora.wipe(home)
    config = corpora.home_config(home)
    memory = Path(config.memory_roots()[0])
    bundles = corpora.make_bundles(pool, target)
    log(f"1m: {len(bundles)} files chunked in {time.perf_counter() - started:.1f} s")
    noise = corpora.calibrate_noise([b for b in bundles if b.varied], real, cache)
    rng = np.random.default_rng(20240611)
    chunks = 0
    seen: set[str] = set()
    pending: dict[str, F32] = {}
    with Store(home / "index.sqlite") as store:
        store.set_identity(identity_for(config, embedder))
        for rep in bundles:
            vecs, _ = corpora.replica_vectors(rep, real, noise["sigma"], rng, embedder.dims)
            for h, v in vecs.items():
                if h not in seen:  # one vector per text, as the embedding cache keeps it
                    seen.add(h)
                    pending[h] = v
            if len(pending) >= PUT_BATCH:
                store.put_cache(embedder.key, embedder.model, embedder.dims, pending)
                pending = {}
            path = memory / rep.rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rep.text, encoding="utf-8")
            chunks += len(rep.chunks)
        store.put_cache(embedder.key, embedder.model, embedder.dims, pending)
    files = len(bundles)
    del bundles, pending, seen
    log(f"1m: {files} files, {chunks} chunks written; indexing ...")
    engine = corpora.engine_for(config, embedder)
    try:
        t = time.perf_counter()
        report = engine.sync()
        sync_s = time.perf_counter() - t
    finally:
        engine.close()
    info: dict[str, Any] = {
        "files": files,
        "chunks": report.chunks_written,
        "sync_s": round(sync_s, 1),
        "sync_embedded": report.chunks_embedded,
        "noise": noise,
        "pool_chunks": sum(len(d.chunks) for d in pool),
        "build_s": round(time.perf_counter() - started, 1),
    }
    corpora.Manifest(key, info).write(home)
    log(f"1m: built in {info['build_s']} s ({info['chunks']} chunks)")
    return {**info, "reused": False}


def _chunk_key(target: int, real: dict[str, F32], pool: list[corpora.Doc]) -> str:
    """What the home's chunks and vectors depend on: chunker, tokenizer, pool, size, recipe.

    Not the indexer or store sources (as the 100k home's key): a change there needs no
    30-minute rebuild, the daemon migrates the schema on open.
    """
    raw = json.dumps(
        [
            corpora.BUILD_VERSION,
            corpora._code_signature(),
            target,
            corpora.PER_FILE,
            sorted(real),
            [(d.set, d.rel) for d in pool],
        ]
    )
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def main(argv: list[str]) -> int:
    """``build``: build or reuse the 1M home."""
    if argv[:1] != ["build"]:
        print(__doc__)
        return 2
    embedder = LocalEmbedder(batch_size=16, threads=0)
    embedder.warm()
    cache = VectorCache(embedder)
    try:
        info = million_home(SCALE / "idx-1m", embedder, cache)
    finally:
        cache.close()
    log(f"1m home: {info}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
