"""OpenAI embeddings, and any OpenAI-compatible server (LM Studio, vLLM, llama.cpp, LiteLLM).

``POST {base}/v1/embeddings`` (or ``{base}/embeddings`` when the base already ends in ``/v1``) with
``{"model", "input": [...], "dimensions"?}``; the answer is ``{"data": [{"index", "embedding"}]}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from recalld.embedding.http import Dialect, HttpOptions, RemoteEmbedder, field_list, float_list
from recalld.errors import ProviderError

__all__ = ["OpenAIDialect", "OpenAIEmbedder", "openai_path"]


class OpenAIDialect(Dialect):
    """OpenAI's error shape: ``{"error": {"message", "type", "code"}}``."""

    name = "OpenAI"
    key_name = "OPENAI_API_KEY"

    def quota_exhausted(self, status: int, payload: Any) -> bool:
        err = payload.get("error") if isinstance(payload, dict) else None
        if not isinstance(err, dict):
            return False
        # A 429 is either a rate limit (retry) or an empty wallet (retrying only burns time).
        return "insufficient_quota" in (err.get("code"), err.get("type"))


def openai_path(base_url: str, endpoint: str) -> str:
    """The request path under ``base_url``, whether or not the base already ends in ``/v1``."""
    return f"/{endpoint}" if base_url.rstrip("/").endswith("/v1") else f"/v1/{endpoint}"


class OpenAIEmbedder(RemoteEmbedder):
    """``openai``: text-embedding-3-small (1536-d) by default; ``dims`` shortens v3 models."""

    kind = "openai"
    default_base_url = "https://api.openai.com"
    default_model = "text-embedding-3-small"
    known_dims: ClassVar[Mapping[str, int]] = {
        "text-embedding-3-small": 1536,
        "text-embedding-3-large": 3072,
        "text-embedding-ada-002": 1536,
    }
    max_batch_items = 2048
    max_input_tokens = 8191

    def __init__(self, options: HttpOptions) -> None:
        super().__init__(options)
        self._path = openai_path(self.base_url, "embeddings")

    def dialect(self) -> Dialect:
        d = OpenAIDialect()
        if self.options.base_url and not self.options.base_url.startswith("https://api.openai.com"):
            d.name = f"the OpenAI-compatible server at {self.options.base_url}"
        return d

    def headers(self) -> dict[str, str]:
        key = self.options.api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    def request_batch(self, texts: list[str], query: bool) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.options.dims:
            body["dimensions"] = self.options.dims
        payload = self.http.post_json(self._path, body)
        rows = field_list(payload, "data", self.label)
        try:
            ordered = sorted(rows, key=lambda r: int(r["index"]))
            return [float_list(r["embedding"], self.label) for r in ordered]
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderError(
                f"{self.label} answered with data items lacking 'index'/'embedding' ({exc!r})"
            ) from None
