"""Fit a search answer into a token budget (the ``max_tokens`` search parameter).

Tokens are estimated as characters / 4 of the answer's JSON, the usual ratio of English text under
the BPE tokenizers agents use; the estimate errs high for code. Snippets are trimmed first, evenly
(water-filling: short snippets keep all their text, long ones share what is left), at a word
boundary with an ellipsis; when even a short snippet each would not fit, the lowest-ranked results
are dropped. The answer says what was cut.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MIN_BUDGET_TOKENS", "estimate_tokens", "fit_to_budget"]

#: Smallest budget accepted: one result with a short snippet.
MIN_BUDGET_TOKENS = 100
#: A snippet is never trimmed below this many characters; results are dropped instead.
MIN_SNIPPET_CHARS = 120
CHARS_PER_TOKEN = 4
ELLIPSIS = "…"


def estimate_tokens(obj: Any) -> int:
    """Estimated tokens of ``obj`` as compact JSON."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)
    return -(-len(text) // CHARS_PER_TOKEN)


def _trim(text: str, chars: int) -> str:
    if len(text) <= chars:
        return text
    cut = text[: max(chars - 1, 1)]
    space = cut.rfind(" ")
    if space > chars * 0.6:
        cut = cut[:space]
    return cut.rstrip() + ELLIPSIS


def _shares(lengths: list[int], total: int) -> list[int]:
    """Water-filling: each gets min(its length, an equal share of what the shorter ones left)."""
    out = [0] * len(lengths)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    left, n = total, len(lengths)
    for pos, i in enumerate(order):
        share = left // (n - pos)
        out[i] = min(lengths[i], share)
        left -= out[i]
    return out


def fit_to_budget(answer: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """Trim ``answer['results']`` in place to fit ``max_tokens``; returns the ``budget`` report."""
    results: list[dict[str, Any]] = answer["results"]
    trimmed = 0
    dropped = 0
    budget_chars = max_tokens * CHARS_PER_TOKEN
    # Everything but the snippets: the envelope, the report itself, each result's fields.
    report = {"max_tokens": max_tokens, "used_tokens": 0, "snippets_trimmed": 0, "dropped": 0}
    while True:
        skeleton = {**answer, "results": [{**r, "snippet": ""} for r in results], "budget": report}
        fixed = estimate_tokens(skeleton) * CHARS_PER_TOKEN + 64  # + took_ms and rounding
        room = budget_chars - fixed
        if not results or room >= MIN_SNIPPET_CHARS * len(results) or len(results) == 1:
            break
        results.pop()
        dropped += 1
    originals = [r["snippet"] for r in results]
    lengths = [len(text) for text in originals]
    # JSON escapes make the estimate slightly off: shrink the room until the answer really fits.
    for _ in range(8):
        trimmed = 0
        if results and sum(lengths) > room:
            for r, text, share in zip(
                results, originals, _shares(lengths, max(room, 0)), strict=True
            ):
                r["snippet"] = _trim(text, max(share, 1)) if share < len(text) else text
                if share < len(text):
                    r["truncated"] = True
                    trimmed += 1
        report["snippets_trimmed"] = trimmed
        report["dropped"] = dropped
        report["used_tokens"] = estimate_tokens({**answer, "budget": report}) + 16
        excess = report["used_tokens"] - max_tokens
        if excess <= 0 or room <= len(results):
            break
        room -= excess * CHARS_PER_TOKEN
    return report
