"""Google Gemini API embeddings.

``POST {base}/v1beta/models/{model}:batchEmbedContents`` with header ``x-goog-api-key`` and
``{"requests": [{"model": "models/{model}", "content": {"parts": [{"text"}]}, "taskType",
"outputDimensionality"?}]}``; the answer is ``{"embeddings": [{"values": [...]}]}`` in order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from recalld.embedding.http import Dialect, RemoteEmbedder, field_list, float_list
from recalld.errors import ProviderError

__all__ = ["GeminiDialect", "GeminiEmbedder"]


class GeminiDialect(Dialect):
    """Google's error shape: ``{"error": {"code", "message", "status", "details": [...]}}``."""

    name = "Gemini"
    key_name = "GEMINI_API_KEY"

    def quota_exhausted(self, status: int, payload: Any) -> bool:
        err = _error(payload)
        if err.get("status") != "RESOURCE_EXHAUSTED":
            return False
        # RESOURCE_EXHAUSTED covers both the per-minute rate limit (comes with a RetryInfo delay)
        # and a spent daily/billing quota, which no retry within minutes can fix.
        quota_ids = [
            str(v.get("quotaId", ""))
            for d in _details(err)
            for v in d.get("violations", [])
            if isinstance(v, dict)
        ]
        if any("PerDay" in q for q in quota_ids):
            return True
        message = str(err.get("message", "")).lower()
        return (
            "quota" in message
            and self.retry_hint(payload) is None
            and not any("PerMinute" in q for q in quota_ids)
        )

    def retry_hint(self, payload: Any) -> float | None:
        for d in _details(_error(payload)):
            delay = d.get("retryDelay")
            if isinstance(delay, str):
                match = re.fullmatch(r"(\d+(?:\.\d+)?)s", delay.strip())
                if match:
                    return float(match.group(1))
        return None

    def explain(self, status: int, detail: str) -> str | None:
        # Google answers a bad key with 400 INVALID_ARGUMENT, not 401.
        if status in (400, 401, 403) and "api key" in detail.lower():
            return f"Gemini refused the API key ({status}): check {self.key_name}"
        return None


class GeminiEmbedder(RemoteEmbedder):
    """``gemini``: gemini-embedding-001 (3072-d; ``dims`` 768/1536 recommended) by default."""

    kind = "gemini"
    default_base_url = "https://generativelanguage.googleapis.com"
    default_model = "gemini-embedding-001"
    known_dims: ClassVar[Mapping[str, int]] = {
        "gemini-embedding-001": 3072,
        "text-embedding-004": 768,
        "embedding-001": 768,
    }
    max_batch_items = 100  # the API's cap on requests per batchEmbedContents call
    max_input_tokens = 2048

    def dialect(self) -> Dialect:
        d = GeminiDialect()
        if self.options.key_name:
            d.key_name = self.options.key_name
        return d

    def headers(self) -> dict[str, str]:
        # A header rather than ?key=: URLs end up in logs and exception texts.
        return {"x-goog-api-key": self.options.api_key or ""}

    def request_batch(self, texts: list[str], query: bool) -> list[list[float]]:
        name = self.model if self.model.startswith("models/") else f"models/{self.model}"
        task = "RETRIEVAL_QUERY" if query else "RETRIEVAL_DOCUMENT"
        requests: list[dict[str, Any]] = []
        for text in texts:
            req: dict[str, Any] = {
                "model": name,
                "content": {"parts": [{"text": text}]},
                "taskType": task,
            }
            if self.options.dims:
                req["outputDimensionality"] = self.options.dims
            requests.append(req)
        payload = self.http.post_json(f"/v1beta/{name}:batchEmbedContents", {"requests": requests})
        rows = field_list(payload, "embeddings", self.label)
        try:
            return [float_list(r["values"], self.label) for r in rows]
        except (KeyError, TypeError) as exc:
            raise ProviderError(
                f"{self.label} answered embeddings without 'values' ({exc!r})"
            ) from None


def _error(payload: Any) -> dict[str, Any]:
    err = payload.get("error") if isinstance(payload, dict) else None
    return err if isinstance(err, dict) else {}


def _details(err: dict[str, Any]) -> list[dict[str, Any]]:
    details = err.get("details")
    return [d for d in details if isinstance(d, dict)] if isinstance(details, list) else []
