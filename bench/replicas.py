"""The large index's files: real files bundled, varied copies of them, and their vectors.

*Replicas* (only to reach the large index): real files joined, with names, months, weekdays,
numbers and tldr placeholders varied. Their chunks come from recalld's chunker too. A replica
chunk whose text equals a real chunk gets that real vector (as the embedding cache would give
it); any other gets a *derived* vector: the line-overlap-weighted mean of the real vectors of the
chunks it was made from, plus Gaussian noise scaled so that its cosine to that mean matches the
one measured between real embeddings of original and varied text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bench.cache import VectorCache
from bench.corpora import F32, SETS, Doc, chunk_text, interleave
from recalld.index.store import NewChunk

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
