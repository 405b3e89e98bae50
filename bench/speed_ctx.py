"""What every speed part shares: its context, the folder of its homes, a millisecond timer, a
cProfile summary and a search loop through the socket."""

from __future__ import annotations

import cProfile
import io
import pstats
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.cache import VectorCache
from bench.common import OUT, Sheet, Sizes
from bench.corpora import Doc
from recalld.embedding.local import LocalEmbedder

F32 = npt.NDArray[np.float32]
SPEED = OUT / "speed"


@dataclass
class Ctx:
    """What every measurement needs."""

    sizes: Sizes
    sheet: Sheet
    embedder: LocalEmbedder
    cache: VectorCache
    pool: list[Doc]
    real: dict[str, F32]
    rebuild: bool


def ms(t: float) -> float:
    """Milliseconds since ``t`` (a ``time.perf_counter()``)."""
    return (time.perf_counter() - t) * 1000


def profile_top(fn: Callable[[], object], lines: int = 18) -> str:
    """cProfile of one call: the top functions by cumulative time, as text."""
    prof = cProfile.Profile()
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.strip_dirs().sort_stats("cumulative").print_stats(lines)
    text = buf.getvalue()
    start = text.find("   ncalls")
    return text[start:] if start >= 0 else text


def search_loop(c: Any, queries: Sequence[str], **params: Any) -> tuple[list[float], list[float]]:
    """Client wall times and server took_ms of one search per query."""
    wall, took = [], []
    for q in queries:
        t = time.perf_counter()
        res = c.search(q, **params)
        wall.append(ms(t))
        took.append(float(res["took_ms"]))
    return wall, took
