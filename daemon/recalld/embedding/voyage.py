"""Voyage AI embeddings.

``POST {base}/v1/embeddings`` with ``{"input": [...], "model", "input_type": "document"|"query",
"output_dimension"?}``; the answer is ``{"data": [{"embedding", "index"}]}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from recalld.embedding.http import Dialect, RemoteEmbedder, field_list, float_list
from recalld.errors import ProviderError

__all__ = ["VoyageDialect", "VoyageEmbedder"]


class VoyageDialect(Dialect):
    """Voyage's errors: ``{"detail": "..."}``."""

    name = "Voyage"
    key_name = "VOYAGE_API_KEY"


class VoyageEmbedder(RemoteEmbedder):
    """``voyage``: voyage-3.5-lite (1024-d) by default; queries and documents embed differently."""

    kind = "voyage"
    default_base_url = "https://api.voyageai.com"
    default_model = "voyage-3.5-lite"
    known_dims: ClassVar[Mapping[str, int]] = {
        "voyage-3.5-lite": 1024,
        "voyage-3.5": 1024,
        "voyage-3-large": 1024,
        "voyage-3": 1024,
        "voyage-3-lite": 512,
        "voyage-code-3": 1024,
        "voyage-context-3": 1024,
    }
    max_batch_items = 1000
    max_input_tokens = 32000

    def dialect(self) -> Dialect:
        return VoyageDialect()

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.options.api_key}"}

    def request_batch(self, texts: list[str], query: bool) -> list[list[float]]:
        body: dict[str, Any] = {
            "input": texts,
            "model": self.model,
            "input_type": "query" if query else "document",
        }
        if self.options.dims:
            body["output_dimension"] = self.options.dims
        payload = self.http.post_json("/v1/embeddings", body)
        rows = field_list(payload, "data", self.label)
        try:
            ordered = sorted(rows, key=lambda r: int(r["index"]))
            return [float_list(r["embedding"], self.label) for r in ordered]
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderError(
                f"{self.label} answered with data items lacking 'index'/'embedding' ({exc!r})"
            ) from None
