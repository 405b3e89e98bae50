"""Rerank with a local Ollama model that grades each document's relevance from 0 to 10.

One ``POST /api/generate`` per document (bounded concurrency), with a JSON schema in ``format`` so
that the model must answer ``{"score": <0-10>}``; the grade is divided by 10.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from recalld.embedding.http import HttpOptions, HttpService
from recalld.embedding.ollama import OllamaDialect
from recalld.errors import ProviderError

__all__ = ["PROMPT", "OllamaReranker", "parse_grade"]

PROMPT = """You grade search results. Rate how well the document answers the query.
0 = unrelated, 5 = on topic but does not answer, 10 = answers the query exactly.
Reply with JSON only: {{"score": <integer 0-10>}}.

Query: {query}

Document:
{document}
"""

SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 10}},
    "required": ["score"],
}

MAX_DOC_CHARS = 2000  # a snippet is <= 700 chars; this only guards against huge inputs


class OllamaReranker:
    """``ollama``: an instruction-following model used as a pointwise grader."""

    kind = "ollama"
    default_base_url = "http://127.0.0.1:11434"

    def __init__(self, options: HttpOptions) -> None:
        self.options = options
        self.base_url = (options.base_url or self.default_base_url).rstrip("/")
        self.model = options.model
        self.label = f"{self.kind}/{self.model}"
        self.http = HttpService(OllamaDialect(self.model, "rerank.model"), self.base_url, options)

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        """One grade in [0, 1] per document, in order."""
        docs = list(documents)
        if not docs:
            return []
        workers = max(1, min(self.options.max_concurrency, len(docs)))
        with ThreadPoolExecutor(workers, thread_name_prefix="rerank-ollama") as pool:
            return list(pool.map(lambda d: self._grade(query, d), docs))

    def _grade(self, query: str, document: str) -> float:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": PROMPT.format(query=query, document=document[:MAX_DOC_CHARS]),
            "format": SCHEMA,
            "stream": False,
            "options": {"temperature": 0, "num_predict": 16},
        }
        payload = self.http.post_json("/api/generate", body)
        text = payload.get("response") if isinstance(payload, dict) else None
        if not isinstance(text, str):
            raise ProviderError(f"{self.label} answered without a 'response' text")
        grade = parse_grade(text)
        if grade is None:
            raise ProviderError(f"{self.label} did not answer with a 0-10 grade: {text[:80]!r}")
        return grade / 10.0


def parse_grade(text: str) -> float | None:
    """The 0-10 grade in a model's answer: ``{"score": 7}`` or, failing that, the first number."""
    value: Any = None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        value = data.get("score")
    elif isinstance(data, int | float):
        value = data
    if not isinstance(value, int | float) or isinstance(value, bool):
        match = re.search(r"-?\d+(?:\.\d+)?", text)
        value = float(match.group()) if match else None
    if value is None or not math.isfinite(float(value)):
        return None
    return min(10.0, max(0.0, float(value)))
