"""Fit a search answer into a token budget (``max_tokens``), counted on what the caller receives.

The budget is measured on the rendered text the caller gets: the daemon's answer as JSON for a
client, the printed lines for the CLI, the tool text for MCP (each passes its own ``render``).
Tokens are counted by :func:`count_tokens`, an estimate that errs high for the BPE tokenizers
agents use. The best result keeps its whole snippet first; the others share what is left
(each capped at one common length, so short snippets stay whole); results that cannot get
:data:`MIN_SNIPPET_CHARS` each are dropped from the bottom. A snippet is never emptied: the best
result keeps at least :data:`MIN_BEST_CHARS` characters. The ``budget`` report says what was cut.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from recalld.errors import BadRequest

__all__ = [
    "MIN_BUDGET_TOKENS",
    "check_budget",
    "count_tokens",
    "estimate_tokens",
    "fit_rendered",
    "fit_to_budget",
    "refit",
]

#: Smallest budget accepted: one result with a short snippet.
MIN_BUDGET_TOKENS = 100


def check_budget(max_tokens: int) -> None:
    """Refuse a ``max_tokens`` (the CLI's ``--max-tokens``) the answer budget cannot fit."""
    if not MIN_BUDGET_TOKENS <= max_tokens <= 1_000_000:
        raise BadRequest(
            f"--max-tokens must be an integer from {MIN_BUDGET_TOKENS} to 1000000, got {max_tokens}"
        )


#: Results other than the best are dropped rather than trimmed below this many characters.
MIN_SNIPPET_CHARS = 120
#: The best result's snippet is never trimmed below this (never an empty or "#…" snippet).
MIN_BEST_CHARS = 40
ELLIPSIS = "…"

# A word piece of up to 4 ASCII letters, up to 3 digits, 1-3 ASCII punctuation marks (JSON's
# `":"`), or any other single character (CJK, emoji): what cl100k-style tokenizers make, or more.
_TOKEN = re.compile(r"[A-Za-z]{1,4}|[0-9]{1,3}|[!-/:-@\[-`{-~]{1,3}|\S")

Render = Callable[[list[dict[str, Any]], dict[str, Any]], str]


def count_tokens(text: str) -> int:
    """Estimated tokens of ``text`` (errs high)."""
    return len(_TOKEN.findall(text))


def estimate_tokens(obj: Any) -> int:
    """Estimated tokens of ``obj`` as compact JSON."""
    return count_tokens(json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str))


def _trim(text: str, chars: int) -> str:
    if len(text) <= chars:
        return text
    cut = text[: max(chars - 1, 1)]
    space = cut.rfind(" ")
    if space > chars * 0.6:
        cut = cut[:space]
    return cut.rstrip() + ELLIPSIS


def _largest(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """The largest n in [low, high] with ``fits(n)`` (``fits`` grows false as n grows)."""
    if not fits(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def fit_rendered(
    results: list[dict[str, Any]], max_tokens: int, render: Render, dropped_before: int = 0
) -> dict[str, Any]:
    """Trim ``results`` in place until ``render(results, report)`` fits; returns the report.

    ``render`` must produce exactly what the caller receives, the report included. Results
    already trimmed by an earlier fit keep ``truncated``; ``dropped_before`` counts the results
    that fit dropped, so a second fit (after fields were added) reports both.
    """
    originals = [r["snippet"] for r in results]
    trimmed_before = [bool(r.get("truncated")) for r in results]
    longest = max((len(t) for t in originals), default=0)
    # The report shows used_tokens; measuring with max_tokens there never under-counts it.
    report: dict[str, Any] = {
        "max_tokens": max_tokens,
        "used_tokens": max_tokens,
        "snippets_trimmed": 0,
        "dropped": 0,
    }

    def used(best: int, others: int) -> int:
        trimmed = 0
        for i, (r, text) in enumerate(zip(results, originals, strict=False)):
            cap = best if i == 0 else others
            r["snippet"] = _trim(text, cap)
            if r["snippet"] != text or trimmed_before[i]:
                r["truncated"] = True
                trimmed += 1
            else:
                r.pop("truncated", None)
        report["snippets_trimmed"] = trimmed
        report["dropped"] = dropped_before + len(originals) - len(results)
        return count_tokens(render(results, report))

    if used(longest, longest) > max_tokens:
        # Keep the best whole and as many others (at a short snippet each) as fit.
        while len(results) > 1 and used(longest, MIN_SNIPPET_CHARS) > max_tokens:
            results.pop()
        if len(results) > 1:
            others = _largest(lambda c: used(longest, c) <= max_tokens, MIN_SNIPPET_CHARS, longest)
            used(longest, others or MIN_SNIPPET_CHARS)
        elif used(longest, longest) > max_tokens:
            best = _largest(lambda c: used(c, 0) <= max_tokens, MIN_BEST_CHARS, longest)
            used(best or MIN_BEST_CHARS, 0)
    report["used_tokens"] = count_tokens(render(results, report))
    return report


def fit_to_budget(answer: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """Trim ``answer['results']`` in place so its compact JSON fits; returns the report.

    Run it again (:func:`refit`) whenever a field or a result is added after it."""
    before = answer.get("budget")
    dropped_before = int(before["dropped"]) if isinstance(before, dict) else 0

    def render(results: list[dict[str, Any]], report: dict[str, Any]) -> str:
        # took_ms is set after the budget: a placeholder of its usual width stands in for it.
        whole = {**answer, "results": results, "budget": report, "took_ms": 12345.678}
        return json.dumps(whole, ensure_ascii=False, separators=(",", ":"), default=str)

    return fit_rendered(answer["results"], max_tokens, render, dropped_before)


def refit(answer: dict[str, Any]) -> dict[str, Any]:
    """Fit ``answer`` to its budget again after something was added to it (``vectors_pending``
    after the search, the shared store's hits); an answer without a budget is left alone."""
    budget = answer.get("budget")
    if isinstance(budget, dict):
        answer["budget"] = fit_to_budget(answer, int(budget["max_tokens"]))
    return answer
