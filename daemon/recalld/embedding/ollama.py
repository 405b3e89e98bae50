"""Ollama embeddings (a local server, no key).

``POST {base}/api/embed`` with ``{"model", "input": [...]}``; the answer is
``{"embeddings": [[...], ...]}``. Dimensions are learnt from the first answer unless configured.
"""

from __future__ import annotations

from typing import Any

from recalld.embedding.http import Dialect, RemoteEmbedder, field_list, float_list

__all__ = ["OllamaDialect", "OllamaEmbedder"]


class OllamaDialect(Dialect):
    """Ollama's errors: ``{"error": "..."}``."""

    name = "Ollama"
    key_name = "(no key)"

    def __init__(self, model: str, setting: str = "embedding.model") -> None:
        self.model = model
        self.setting = setting  # the config key that names the model, for the hint

    def explain(self, status: int, detail: str) -> str | None:
        if status == 404 or "not found" in detail.lower():
            return (
                f"Ollama does not have the model '{self.model}' ({detail}): "
                f"run `ollama pull {self.model}` or set {self.setting}"
            )
        return None


class OllamaEmbedder(RemoteEmbedder):
    """``ollama``: nomic-embed-text by default, at http://127.0.0.1:11434."""

    kind = "ollama"
    default_base_url = "http://127.0.0.1:11434"
    default_model = "nomic-embed-text"
    # Sizes are not listed here on purpose: an Ollama tag can point at any build, so the first
    # answer is the only reliable source (see RemoteEmbedder.dims).
    max_batch_items = 512
    max_input_tokens = 2048  # Ollama's default context, whatever the model could read

    def dialect(self) -> Dialect:
        return OllamaDialect(self.model)

    def request_batch(self, texts: list[str], query: bool) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self.options.dims:
            body["dimensions"] = self.options.dims
        payload = self.http.post_json("/api/embed", body)
        return [float_list(v, self.label) for v in field_list(payload, "embeddings", self.label)]
