"""Scale: a one-million-chunk index (derived vectors), cold start, peak RSS and concurrency.

The 1M home follows the 100k one's recipe (``corpora.large_home``: every real file of a small
real pool, then varied copies whose vectors are the real vectors plus calibrated noise), but is
written through ``Store.replace_file`` with the pool's chunks varied in place: chunking a million
chunks afresh would take most of an hour on two shared cores. It is reused while the chunker,
tokenizer and pool are unchanged (the daemon migrates the schema on open).

    .venv/bin/python -m bench.scale build     # build (or reuse) bench/out/speed/idx-1m
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import recalld.store
from bench import corpora
from bench.cache import VectorCache
from bench.common import OUT, QUICK, log
from recalld.embedding.local import LocalEmbedder
from recalld.ident_tokens import ident_text
from recalld.indexer import content_hash, identity_for, text_hash
from recalld.store import FileRow, NewChunk, Store

F32 = npt.NDArray[np.float32]
SCALE = OUT / "speed"
MILLION = 1_000_000
POOL_LIMITS = QUICK.pool_limits  # a small real pool: embedded once, cheap to reuse
GROUP = 100  # files per transaction
NOISE_SIGMA = 0.4116  # large_noise_sigma of the 100k home (calibrated on real embeddings)


def million_home(
    home: Path, embedder: LocalEmbedder, cache: VectorCache, target: int = MILLION
) -> dict[str, Any]:
    """Build (or reuse) the ``target``-chunk home; returns its build facts."""
    pool = [d for d in corpora.load_pool(POOL_LIMITS) if d.chunks]
    real = corpora.pool_vectors(pool, cache, "scale pool")
    key = _chunk_key(target, real, pool)
    manifest = corpora.reusable(home, key)
    if manifest is not None:
        return {**manifest.info, "reused": True}
    started = time.perf_counter()
    corpora.wipe(home)
    config = corpora.home_config(home)
    memory = Path(config.memory_roots()[0])
    mixed = corpora.interleave(pool, "replicas")
    rng = np.random.default_rng(20240611)
    files = chunks = 0
    idents = _VariedIdents()
    with Store(home / "index.sqlite") as store, idents.installed():
        store.set_identity(identity_for(config, embedder))
        while chunks < target:
            with store.transaction():  # one commit per GROUP files: FTS5 flushes big segments
                for _ in range(GROUP):
                    first = files * corpora.PER_FILE
                    docs = [mixed[(first + j) % len(mixed)] for j in range(corpora.PER_FILE)]
                    # The first pass over the pool: the real files unchanged; then varied copies.
                    k = None if first < len(mixed) else files + 1
                    path = memory / f"r{files // 200:03d}" / f"bundle-{files:05d}.md"
                    chunks += _write_bundle(store, path, docs, k, real, rng, idents)
                    files += 1
                    if chunks >= target:
                        break
            if files % 2000 < GROUP:
                log(f"1m: {chunks} chunks in {files} files ({time.perf_counter() - started:.0f} s)")
    info: dict[str, Any] = {
        "files": files,
        "chunks": chunks,
        "noise_sigma": NOISE_SIGMA,
        "pool_chunks": sum(len(d.chunks) for d in pool),
        "build_s": round(time.perf_counter() - started, 1),
    }
    corpora.Manifest(key, info).write(home)
    log(f"1m: built in {info['build_s']} s ({chunks} chunks, {files} files)")
    return {**info, "reused": False}


def _write_bundle(
    store: Store,
    path: Path,
    docs: list[corpora.Doc],
    k: int | None,
    real: dict[str, F32],
    rng: np.random.Generator,
    idents: _VariedIdents,
) -> int:
    """One file of the home: its docs joined (varied by ``k``), written to disk and indexed.

    Chunks are the real docs' chunks, shifted and varied like their text (``vary`` keeps lines
    and maps each word the same way everywhere), so the chunker does not run a million times.
    A varied chunk's vector is its real chunk's vector plus calibrated noise (the 100k home's
    ``large_noise_sigma``), normalised; the file's size and mtime are recorded so that the
    daemon's start-up reconcile finds it unchanged.
    """
    texts: list[str] = []
    new: list[NewChunk] = []
    bases: list[F32] = []
    line = 1
    for j, doc in enumerate(docs):
        vary = (lambda t: t) if k is None else (lambda t, kk=k + j: corpora.vary(t, kk))
        text = vary(doc.text).rstrip("\n")
        for c in doc.chunks:
            body = vary(c.text)
            idents.known[body] = vary(idents.of(c.text))
            start, end = c.start_line + line - 1, c.end_line + line - 1
            new.append(NewChunk(start, end, body, text_hash(body), vary(c.context)))
            bases.append(real[c.hash])
        line += text.count("\n") + 2
        texts.append(text)
    vecs = np.stack(bases)
    if k is not None:
        vecs = vecs + rng.standard_normal(vecs.shape).astype(np.float32) * (
            NOISE_SIGMA / np.sqrt(vecs.shape[1])
        )
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    by_hash = {c.hash: vecs[i].astype(np.float32) for i, c in enumerate(new)}
    data = ("\n\n".join(texts) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    st = path.stat()
    lines = data.count(b"\n")
    row = FileRow(str(path), "memory", st.st_size, st.st_mtime_ns, content_hash(data), lines)
    store.replace_file(row, new, by_hash)
    idents.known.clear()
    return len(new)


class _VariedIdents:
    """The FTS ``ident`` column of varied chunks: the real chunk's, varied like its text.

    Deriving identifier tokens costs ~2.5 ms a chunk (60 % of a build that would take hours on
    this machine); varying the real chunk's tokens gives the same tokens up to the varied names
    and numbers. Installed in place of ``store.ident_text`` for the build only.
    """

    def __init__(self) -> None:
        self.known: dict[str, str] = {}
        self._real: dict[str, str] = {}

    def of(self, text: str) -> str:
        """The real derivation, once per real chunk text."""
        got = self._real.get(text)
        if got is None:
            got = self._real[text] = ident_text(text)
        return got

    def _lookup(self, text: str) -> str:
        got = self.known.get(text)
        return got if got is not None else self.of(text)

    @contextmanager
    def installed(self) -> Iterator[None]:
        """``recalld.store.ident_text`` answers from ``known`` while the block runs."""
        saved = recalld.store.ident_text  # type: ignore[attr-defined]
        recalld.store.ident_text = self._lookup  # type: ignore[attr-defined]
        try:
            yield
        finally:
            recalld.store.ident_text = saved  # type: ignore[attr-defined]


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
        target = int(argv[1]) if len(argv) > 1 else MILLION
        name = "idx-1m" if target == MILLION else f"idx-{target}"
        info = million_home(SCALE / name, embedder, cache, target)
    finally:
        cache.close()
    log(f"1m home: {info}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
