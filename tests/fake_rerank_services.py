"""Fake rerank services' wire formats: Cohere, Voyage and Jina rerank, and an Ollama model grading
documents through ``/api/generate`` (served by ``fake_services.FakeService``)."""

from __future__ import annotations

import json
import re
from typing import Any

from fake_service_base import (
    MISSING_FIELDS,
    WRONG_COUNT,
    Recorded,
    Reply,
    Spec,
    _json,
    _strs,
    overlap_score,
)


class RerankSpec(Spec):
    """Shared rerank shape: ``{"model", "query", "documents", count_field}`` → scored indexes."""

    count_field = "top_n"
    results_field = "results"

    def check_body(self, body: dict[str, Any]) -> list[str]:
        problems = []
        if not isinstance(body.get("model"), str):
            problems.append("model missing")
        if not isinstance(body.get("query"), str):
            problems.append("query missing")
        if not _strs(body.get("documents")):
            problems.append("documents must be a non-empty list of strings")
        count = body.get(self.count_field)
        if count is not None and not isinstance(count, int):
            problems.append(f"{self.count_field} must be an integer")
        return problems

    def answer(self, req: Recorded, mutate: str | None) -> Reply:
        body = req.body
        scored = [
            {"index": i, "relevance_score": overlap_score(body["query"], d)}
            for i, d in enumerate(body["documents"])
        ]
        scored.sort(key=lambda r: -float(r["relevance_score"]))  # APIs answer best first
        scored = scored[: body.get(self.count_field) or len(scored)]
        if mutate == WRONG_COUNT:
            scored = scored[:-1]
        if mutate == MISSING_FIELDS:
            scored = [{"idx": r["index"]} for r in scored]
        return _json(200, {"id": "r-1", self.results_field: scored})


class CohereRerankSpec(RerankSpec):
    path = "/v2/rerank"

    def refused(self, req: Recorded) -> Reply:
        return _json(401, {"id": "x", "message": "invalid api token"})


class VoyageRerankSpec(RerankSpec):
    path = "/v1/rerank"
    count_field = "top_k"
    results_field = "data"

    def refused(self, req: Recorded) -> Reply:
        return _json(401, {"detail": "Provided API key is invalid."})


class JinaRerankSpec(RerankSpec):
    path = "/v1/rerank"

    def refused(self, req: Recorded) -> Reply:
        return _json(401, {"detail": "Unauthorized"})


class OllamaGenerateSpec(Spec):
    """``POST /api/generate`` with a JSON-schema ``format``; answers a JSON grade as text."""

    path = "/api/generate"

    def __init__(self, model: str = "qwen2.5:3b") -> None:
        super().__init__(key=None)
        self.model = model

    def check_body(self, body: dict[str, Any]) -> list[str]:
        problems = []
        if body.get("stream") is not False:
            problems.append("stream must be false")
        fmt = body.get("format")
        if not (isinstance(fmt, dict) and "score" in fmt.get("properties", {})):
            problems.append("format must be a JSON schema with a score property")
        if not isinstance(body.get("prompt"), str):
            problems.append("prompt missing")
        return problems

    def answer(self, req: Recorded, mutate: str | None) -> Reply:
        if req.body.get("model") != self.model:
            return _json(404, {"error": f"model '{req.body.get('model')}' not found"})
        prompt = req.body["prompt"]
        query = re.search(r"Query: (.*)", prompt)
        doc = prompt.split("Document:\n", 1)[-1]
        grade = round(10 * overlap_score(query.group(1) if query else "", doc))
        text = json.dumps({"score": grade}) if mutate != MISSING_FIELDS else "I cannot say."
        return _json(200, {"model": self.model, "response": text, "done": True})
