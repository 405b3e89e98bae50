"""Rerank APIs: Cohere, Voyage and Jina (same idea, slightly different JSON).

Each sends the query and all shortlisted documents in one request, asks for every score back and
returns them in the documents' order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recalld.embedding.http import Dialect, HttpOptions, HttpService, field_list
from recalld.errors import ProviderError

__all__ = ["REMOTE_RERANKERS", "CohereReranker", "JinaReranker", "RemoteReranker", "VoyageReranker"]


class RemoteReranker:
    """Base of the rerank APIs: subclasses name the endpoint and the JSON field names."""

    kind = "remote"
    service = "service"
    default_base_url = ""
    default_model = ""
    default_key_name = ""
    path = "/v1/rerank"
    results_field = "results"
    count_field = "top_n"

    def __init__(self, options: HttpOptions) -> None:
        self.options = options
        self.base_url = (options.base_url or self.default_base_url).rstrip("/")
        self.model = options.model or self.default_model
        self.label = f"{self.kind}/{self.model}"
        dialect = Dialect()
        dialect.name = self.service
        dialect.key_name = options.key_name or self.default_key_name
        headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else {}
        self.http = HttpService(dialect, self.base_url, options, headers=headers)

    def body(self, query: str, documents: list[str]) -> dict[str, Any]:
        """The request body."""
        return {
            "model": self.model,
            "query": query,
            "documents": documents,
            self.count_field: len(documents),
        }

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        """One relevance score per document, in the documents' order."""
        docs = list(documents)
        if not docs:
            return []
        payload = self.http.post_json(self.path, self.body(query, docs))
        scores: list[float | None] = [None] * len(docs)
        for row in field_list(payload, self.results_field, self.label):
            try:
                index, value = int(row["index"]), float(row["relevance_score"])
            except (KeyError, TypeError, ValueError):
                raise ProviderError(
                    f"{self.label} answered results without 'index'/'relevance_score'"
                ) from None
            if not 0 <= index < len(docs):
                raise ProviderError(f"{self.label} answered a result for unknown document {index}")
            scores[index] = value
        missing = sum(s is None for s in scores)
        if missing:
            raise ProviderError(
                f"{self.label} scored {len(docs) - missing} of {len(docs)} documents"
            )
        return [s for s in scores if s is not None]

    def close(self) -> None:
        """Release the HTTP connections."""
        self.http.close()


class CohereReranker(RemoteReranker):
    """Cohere ``POST /v2/rerank`` → ``{"results": [{"index", "relevance_score"}]}``."""

    kind = "cohere"
    service = "Cohere"
    default_base_url = "https://api.cohere.com"
    default_model = "rerank-v3.5"
    default_key_name = "COHERE_API_KEY"
    path = "/v2/rerank"


class VoyageReranker(RemoteReranker):
    """Voyage ``POST /v1/rerank`` with ``top_k`` → ``{"data": [{"index", "relevance_score"}]}``."""

    kind = "voyage"
    service = "Voyage"
    default_base_url = "https://api.voyageai.com"
    default_model = "rerank-2.5-lite"
    default_key_name = "VOYAGE_API_KEY"
    results_field = "data"
    count_field = "top_k"


class JinaReranker(RemoteReranker):
    """Jina ``POST /v1/rerank`` → ``{"results": [{"index", "relevance_score"}]}``."""

    kind = "jina"
    service = "Jina"
    default_base_url = "https://api.jina.ai"
    default_model = "jina-reranker-v2-base-multilingual"
    default_key_name = "JINA_API_KEY"

    def body(self, query: str, documents: list[str]) -> dict[str, Any]:
        # Jina echoes the documents back unless told not to; they are not needed here.
        return {**super().body(query, documents), "return_documents": False}


REMOTE_RERANKERS: dict[str, type[RemoteReranker]] = {
    "cohere": CohereReranker,
    "voyage": VoyageReranker,
    "jina": JinaReranker,
}
