"""Rerankers: rescore the fused shortlist with a model that reads query and document together.

``rerank.provider`` picks one: ``none`` (default), ``cohere``, ``voyage``, ``jina`` (rerank APIs),
``ollama`` (a local LLM asked for a 0-10 relevance grade) or ``onnx`` (a local cross-encoder in a
folder the user points to). Resolution never raises: a misconfigured reranker is reported in the
choice's reason and search goes on with the fused order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from recalld import paths
from recalld.config import Config
from recalld.embedding.http import HttpOptions
from recalld.errors import ProviderError

__all__ = [
    "KEY_ENV",
    "Reranker",
    "RerankerChoice",
    "rerank_options",
    "resolve_reranker",
    "resolve_reranker_choice",
]

log = logging.getLogger(__name__)

KEY_ENV: dict[str, tuple[str, ...]] = {
    "cohere": ("COHERE_API_KEY", "CO_API_KEY"),
    "voyage": ("VOYAGE_API_KEY",),
    "jina": ("JINA_API_KEY",),
}
KINDS = ("none", "cohere", "voyage", "jina", "ollama", "onnx")

EnvReader = Callable[[str], str | None]


@runtime_checkable
class Reranker(Protocol):
    """Scores documents against a query: higher is more relevant, one score per document."""

    label: str

    def score(self, query: str, documents: Sequence[str]) -> list[float]: ...


@dataclass(frozen=True)
class RerankerChoice:
    """The resolved reranker (None = fused order only) and why."""

    reranker: Reranker | None
    reason: str


def resolve_reranker(config: Config, *, env: EnvReader = paths.env) -> Reranker | None:
    """The configured reranker, or None (when off or misconfigured; the latter is logged)."""
    choice = resolve_reranker_choice(config, env=env)
    if choice.reranker is None and config.str("rerank.provider").strip().lower() != "none":
        log.warning("reranking is off: %s", choice.reason)
    return choice.reranker


def resolve_reranker_choice(config: Config, *, env: EnvReader = paths.env) -> RerankerChoice:
    """Like :func:`resolve_reranker`, with the reason for ``status``."""
    kind = config.str("rerank.provider").strip().lower()
    if kind == "none":
        return RerankerChoice(None, "rerank.provider is 'none'")
    if kind not in KINDS:
        return RerankerChoice(
            None, f"unknown rerank.provider '{kind}' (expected one of {', '.join(KINDS)})"
        )
    try:
        reranker = _build(config, kind, env)
    except ProviderError as exc:
        return RerankerChoice(None, f"{exc}; results keep the fused order")
    return RerankerChoice(reranker, f"{reranker.label} (rerank.provider = {kind})")


def rerank_options(config: Config, key: str | None, key_name: str) -> HttpOptions:
    """HTTP settings of a remote reranker: one quick retry within ``rerank.timeout_s``."""
    timeout = config.float("rerank.timeout_s")
    return HttpOptions(
        base_url=config.str("rerank.base_url"),
        model=config.str("rerank.model"),
        api_key=key,
        key_name=key_name,
        timeout_s=timeout,
        max_retries=1,
        max_concurrency=4,
        backoff_base_s=min(0.2, timeout / 10),
        backoff_cap_s=timeout / 4,
        retry_after_cap_s=timeout / 2,
    )


def _build(config: Config, kind: str, env: EnvReader) -> Reranker:
    # Imported lazily: the ONNX reranker pulls in onnxruntime, the others httpx only.
    if kind == "onnx":
        from recalld.retrieval.rerank.onnx_cross_encoder import OnnxCrossEncoder

        folder = config.str("rerank.model")
        if not folder:
            raise ProviderError(
                "rerank.provider is 'onnx' but rerank.model is empty: set it to the folder that "
                "holds model.onnx and vocab.txt or tokenizer.json"
            )
        return OnnxCrossEncoder(folder, threads=config.int("embedding.threads"))
    if kind == "ollama":
        from recalld.retrieval.rerank.ollama import OllamaReranker

        if not config.str("rerank.model"):
            raise ProviderError(
                "rerank.provider is 'ollama' but rerank.model is empty: set it to a pulled "
                "instruction model, e.g. qwen2.5:3b"
            )
        return OllamaReranker(rerank_options(config, None, ""))
    from recalld.retrieval.rerank.remote import REMOTE_RERANKERS

    custom = config.str("rerank.api_key_env")
    names = (custom,) if custom else KEY_ENV[kind]
    found = next((n for n in names if env(n)), None)
    if found is None:
        raise ProviderError(
            f"rerank.provider is '{kind}' but {'/'.join(names)} is not set: export it (or point "
            "rerank.api_key_env at the variable that holds the key) and restart"
        )
    return REMOTE_RERANKERS[kind](rerank_options(config, env(found), found))
