"""The shared channel: the collections this member reads, searched beside the local index.

The query goes to PostgreSQL on a thread of its own while the local search runs, and waits at
most ``shared.timeout_ms`` for it after the local answer is ready: a slow or absent store never
delays an answer past that, never turns it into an error, and ``degraded`` says why. Shared hits
are scored as the local weighted fusion scores (vector cosine and normalised keyword rank, with
the ``search.vector_weight`` / ``text_weight`` weights), held to the same floor, and merged by
score with the local results. Their citations are ``shared:<collection>/<path>#Lx-Ly``, which
:func:`get_shared` serves with the contract of ``get``.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from recalld.config import Config
from recalld.errors import BadRequest, NotFound, Unavailable
from recalld.retrieval import served
from recalld.retrieval.search_results import snippet
from recalld.shared.connections import UNREACHABLE, first_line
from recalld.shared.remote import Remote, SharedHit
from recalld.shared.terms import query_terms

PREFIX = "shared:"


class SharedChannel:
    """Searches the shared store in parallel with the local engine."""

    def __init__(self, remote: Remote, config: Config) -> None:
        self.remote = remote
        self.config = config
        self._pool = cf.ThreadPoolExecutor(max_workers=4, thread_name_prefix="recalld-shared")
        self.last_error: str | None = None  # why the last search got no shared hits
        self._failed_at = 0.0  # monotonic time of that failure
        self._unreachable = False  # the failure was the store not answering (not the query)
        self.answered_at = 0.0  # monotonic time the store last answered a search or probe
        self._probe: cf.Future[None] | None = None  # one at a time (a store that hangs)
        self._probe_waited = False  # a status waited its timeout for that probe already

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.remote.close()

    def search(
        self,
        params: Mapping[str, Any],
        local: Callable[[], dict[str, Any]],
        embed: Callable[[str], np.ndarray | None],
    ) -> dict[str, Any]:
        """The local answer with the shared hits merged in (or with ``degraded`` saying why)."""
        query = str(params.get("query", ""))
        max_results = int(params.get("max_results") or self.config.int("search.max_results"))
        timeout_s = self.remote.settings.timeout_ms / 1000
        wants_vectors = params.get("mode", "hybrid") != "keyword"
        started = time.monotonic()
        future = self._pool.submit(self._hits, query, wants_vectors, embed, max_results)
        answer = local()
        left = max(timeout_s - (time.monotonic() - started), 0.0)
        try:
            hits = future.result(timeout=max(left, 0.001))
        except cf.TimeoutError:
            future.cancel()
            why = self._no_answer()
            self._failed(why, unreachable=True)
            return _degraded(answer, why)
        except Exception as exc:  # noqa: BLE001 - the local answer stands; say why
            why = first_line(exc)
            self._failed(why, unreachable=not_answering(exc))
            said = why if why.startswith(UNREACHABLE) else f"shared store unavailable: {why}"
            return _degraded(answer, said)
        self.last_error = None
        self.answered_at = time.monotonic()
        floor = params.get("min_score")
        floor = self.config.float("search.min_score") if floor is None else float(floor)
        shared = self._results(hits, query, floor, max_results)
        merged = sorted(answer.get("results", []) + shared, key=lambda r: -float(r["score"]))
        answer["results"] = merged[:max_results]
        answer["shared"] = {
            "hits": len(shared),
            "collections": sorted({h.collection for h in hits}),
        }
        return answer

    def _failed(self, why: str, unreachable: bool) -> None:
        self.last_error = why
        self._failed_at = time.monotonic()
        self._unreachable = unreachable

    def search_error(self, store_answered_at: float, down: bool) -> str | None:
        """Why the last search got no shared hits, but not that the store did not answer when
        it is ``down`` now (said already) or answered since (a push at ``store_answered_at``, a
        search, a probe): that failure is stale."""
        if self._unreachable and (
            down or max(store_answered_at, self.answered_at) > self._failed_at
        ):
            return None
        return self.last_error

    def probe(self) -> str | None:
        """Whether the store answers now (one round trip, waited for at most ``timeout_ms``):
        None, or why not. For ``status``, which would otherwise say what the last push or search
        found, maybe 30 s ago. A probe still running from an earlier call has already outlasted
        its wait: that is the answer at once, so a store that hangs costs a status (and the
        tray's polls) one wait per probe, not one each."""
        ms = self.remote.settings.timeout_ms
        hung = self._no_answer()
        if self._probe is not None and not self._probe.done():
            if self._probe_waited:
                return hung
        else:
            self._probe = self._pool.submit(self._ping)
            self._probe_waited = False
        try:
            self._probe.result(timeout=ms / 1000)
        except cf.TimeoutError:
            self._probe_waited = True
            return hung
        except Exception as exc:  # noqa: BLE001 - the answer is why
            return first_line(exc)
        return None

    def _no_answer(self) -> str:
        """What a search or a probe says of a store that did not answer in time."""
        return f"shared store did not answer within {self.remote.settings.timeout_ms} ms"

    def _ping(self) -> None:
        self.remote.ping(self.remote.settings.timeout_ms)
        self.answered_at = time.monotonic()

    def _hits(
        self, query: str, wants_vectors: bool, embed: Callable[[str], Any], k: int
    ) -> list[SharedHit]:
        # The keyword statement starts at once; the vector one once the query is embedded.
        vector = (lambda: embed(query)) if wants_vectors else None
        multiplier = self.config.int("search.candidate_multiplier")
        return self.remote.search(query, vector, k * multiplier, self.remote.settings.timeout_ms)

    def _results(
        self, hits: list[SharedHit], query: str, floor: float, max_results: int
    ) -> list[dict[str, Any]]:
        """The best ``max_results`` hits as results (only they can make the merged list: the
        snippets of the others would cost the search's thread time for nothing)."""
        vw, tw = self.config.float("search.vector_weight"), self.config.float("search.text_weight")
        top = max((h.keyword or 0.0 for h in hits), default=0.0) or 1.0
        keyword_only = all(h.vector is None for h in hits)
        scored = []
        for h in hits:
            keyword = (h.keyword or 0.0) / top
            score = keyword if keyword_only else vw * (h.vector or 0.0) + tw * keyword
            if score >= floor or keyword_only:
                scored.append((score, keyword, h))
        scored.sort(key=lambda triple: -triple[0])
        terms = query_terms(query)
        limit = self.config.int("search.snippet_chars")
        out = []
        for score, keyword, h in scored[:max_results]:
            citation = f"{PREFIX}{h.collection}/{h.path}#L{h.start_line}-L{h.end_line}"
            out.append(
                {
                    "path": f"{PREFIX}{h.collection}/{h.path}",
                    "source": "shared",
                    "start_line": h.start_line,
                    "end_line": h.end_line,
                    "score": round(score, 6),
                    "snippet": served.snippet(snippet(h.text, terms, limit)),
                    "citation": citation,
                    "kind": h.kind,
                    "collection": h.collection,
                    "member": h.member,
                    # the keyword score as the fused score used it (over the best), as locally
                    "scores": {
                        "vector": h.vector,
                        "keyword": None if h.keyword is None else round(keyword, 6),
                    },
                }
            )
        return out


def not_answering(exc: BaseException) -> bool:
    """Whether a failure was the store not answering (down, restarting, too slow), which a later
    answer makes stale, rather than something the query or the store's schema must change."""
    if isinstance(exc, Unavailable):
        return True
    import psycopg

    return isinstance(exc, psycopg.OperationalError)


def _degraded(answer: dict[str, Any], why: str) -> dict[str, Any]:
    previous = answer.get("degraded")
    answer["degraded"] = f"{previous}; {why}" if previous else why
    return answer


def is_shared(path: str) -> bool:
    """Whether a ``get`` path names a shared file."""
    return path.startswith(PREFIX)


def get_shared(remote: Remote, raw: str, from_line: int, lines: int | None) -> dict[str, Any]:
    """``get`` of a shared citation (``shared:<collection>/<path>[#Lx-Ly]``)."""
    from recalld_client.citation import parse_citation

    try:
        cited = parse_citation(raw)
    except ValueError as exc:
        raise BadRequest(str(exc)) from exc
    if cited is None:
        path, start, count = raw, from_line, lines
    else:
        path, start, count = cited.path, cited.first, cited.lines
    collection, _, rel = path.removeprefix(PREFIX).partition("/")
    if not collection or not rel:
        raise BadRequest(f"a shared citation is shared:<collection>/<path>, got {raw!r}")
    text = remote.file_text(collection, rel)
    if text is None:
        raise NotFound(f"{path} is not in the shared store (or not readable by you)")
    # Pushed redacted, served through the gate all the same (another member's older daemon).
    all_lines = served.snippet(text).splitlines()
    first = max(start, 1)
    last = len(all_lines) if count is None else min(len(all_lines), first + count - 1)
    return {
        "path": path,
        "start_line": first,
        "end_line": max(last, first - 1),
        "text": "\n".join(all_lines[first - 1 : last]),
        "total_lines": len(all_lines),
    }
