"""Apply a reranker to the fused shortlist inside a time budget, degrading to the fused order.

Reranking is an optional refinement: a slow, failing or misbehaving reranker must never cost the
user their results, so every failure returns the fused order plus a ``degraded`` reason.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from recalld.errors import ProviderError
from recalld.retrieval.rerank import Reranker

__all__ = ["rerank_shortlist"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def rerank_shortlist(
    reranker: Reranker | None,
    query: str,
    items: list[T],
    text_of: Callable[[T], str],
    *,
    top_n: int,
    timeout_s: float,
    score_of: Callable[[T], float] | None = None,
) -> tuple[list[tuple[T, float]], str | None]:
    """Rescore the first ``top_n`` items; return ``([(item, score)], degraded_reason)``.

    The returned list is in final order: rescored items by the reranker's score (ties keep the
    fused order), then the items beyond ``top_n`` in their fused order. Items that were not
    rescored carry ``score_of(item)`` (their fused score) or 0.0. On timeout or failure the whole
    list keeps the fused order and the reason says why.
    """
    fallback = [(item, score_of(item) if score_of else 0.0) for item in items]
    if reranker is None or not items or top_n <= 0:
        return fallback, None
    head, tail = items[:top_n], fallback[top_n:]
    label = getattr(reranker, "label", type(reranker).__name__)
    try:
        texts = [text_of(item) for item in head]
        scores = _call_with_timeout(reranker, query, texts, timeout_s)
    except FutureTimeout:
        return fallback, f"reranker {label} timed out after {timeout_s:.1f} s; fused order returned"
    except ProviderError as exc:
        log.warning("reranker %s failed: %s", label, exc)
        return fallback, f"reranker {label} failed ({exc}); fused order returned"
    except Exception as exc:  # a reranker bug must not take the search down with it
        log.exception("reranker %s crashed", label)
        return fallback, f"reranker {label} crashed ({type(exc).__name__}); fused order returned"
    if len(scores) != len(head) or not all(math.isfinite(s) for s in scores):
        return fallback, (
            f"reranker {label} returned {len(scores)} usable scores for {len(head)} "
            "documents; fused order returned"
        )
    order = sorted(range(len(head)), key=lambda i: -scores[i])  # stable: ties keep fused order
    return [(head[i], float(scores[i])) for i in order] + tail, None


def _call_with_timeout(
    reranker: Reranker, query: str, texts: Sequence[str], timeout_s: float
) -> list[float]:
    future: Future[list[float]] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(list(reranker.score(query, texts)))
        except BaseException as exc:  # noqa: BLE001 - any reranker failure degrades to fused order
            future.set_exception(exc)

    # A daemon thread, not a pool: a hung call is abandoned (its HTTP timeout ends it later) and
    # can neither block shutdown nor starve the next search of workers.
    threading.Thread(target=run, name="rerank", daemon=True).start()
    return future.result(timeout=max(0.0, timeout_s))
