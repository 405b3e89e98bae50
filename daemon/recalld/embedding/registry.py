"""Pick the embedding provider from the config: ``local``, a remote service, ``auto`` or ``none``.

Resolution never raises for a missing key or an unloadable model: it returns a
:class:`ProviderChoice` whose ``embedder`` is None and whose ``reason`` says what to fix, so that
the daemon still answers keyword searches and can show the reason in ``status`` and ``degraded``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from recalld import paths
from recalld.config import Config
from recalld.embedding.base import Embedder
from recalld.embedding.http import HttpOptions
from recalld.errors import ProviderError

__all__ = ["KEY_ENV", "REMOTE_KINDS", "ProviderChoice", "resolve_api_key", "resolve_embedder"]

log = logging.getLogger(__name__)

#: Default environment variables holding each service's key, in lookup order.
KEY_ENV: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "voyage": ("VOYAGE_API_KEY",),
    "ollama": (),
}

#: Remote providers that ``auto`` falls back to, in order (Ollama needs no key, so ``auto`` cannot
#: tell whether the user wants it; it must be chosen explicitly).
AUTO_REMOTES = ("openai", "gemini", "voyage")
REMOTE_KINDS = ("ollama", "openai", "gemini", "voyage")
KINDS = ("auto", "local", "none", *REMOTE_KINDS)

EnvReader = Callable[[str], str | None]
LocalFactory = Callable[[Config], Embedder]


@dataclass(frozen=True)
class ProviderChoice:
    """The resolved provider and why it was chosen (or why there is none)."""

    embedder: Embedder | None  # None = keyword-only
    reason: str  # why this provider (or why none), shown in status / `degraded`


def resolve_embedder(
    config: Config,
    *,
    local_factory: LocalFactory | None = None,
    env: EnvReader = paths.env,
) -> ProviderChoice:
    """Build the configured embedder; ``local_factory`` and ``env`` are seams for tests."""
    kind = config.str("embedding.provider").strip().lower()
    load_local = local_factory or _load_local
    if kind == "none":
        return ProviderChoice(None, "embedding.provider is 'none'; search is keyword-only")
    if kind == "local":
        try:
            embedder = load_local(config)
        except ProviderError as exc:
            return ProviderChoice(
                None, f"the local embedding model failed to load ({exc}); search is keyword-only"
            )
        return ProviderChoice(
            embedder, f"local model {embedder.label} (embedding.provider = local)"
        )
    if kind in REMOTE_KINDS:
        return _explicit_remote(config, kind, env)
    if kind == "auto":
        return _auto(config, load_local, env)
    return ProviderChoice(
        None,
        f"unknown embedding.provider '{kind}' (expected one of {', '.join(KINDS)}); "
        "search is keyword-only",
    )


def resolve_api_key(
    config: Config, kind: str, env: EnvReader = paths.env
) -> tuple[str | None, str]:
    """The key for ``kind`` and where it was found (that name goes in messages; the key never)."""
    inline = config.str("embedding.api_key")
    if inline:
        return inline, "embedding.api_key"
    custom = config.str("embedding.api_key_env")
    names = (custom,) if custom else KEY_ENV.get(kind, ())
    for name in names:
        value = env(name)
        if value:
            return value, name
    return None, "/".join(names) if names else "(no key needed)"


def _auto(config: Config, load_local: LocalFactory, env: EnvReader) -> ProviderChoice:
    try:
        embedder = load_local(config)
    except ProviderError as exc:
        local_failure = str(exc)
        log.warning("auto: local embedding model unavailable: %s", local_failure)
    else:
        return ProviderChoice(embedder, f"auto: local model {embedder.label}")
    for kind in AUTO_REMOTES:
        key = next((env(name) for name in KEY_ENV[kind] if env(name)), None)
        if key:
            found = next(name for name in KEY_ENV[kind] if env(name))
            # Under auto the provider's own defaults apply: embedding.model/dims are meant for an
            # explicitly chosen provider and would likely be wrong for another service.
            remote = _build_remote(kind, _options(config, key, found, defaults=True))
            return ProviderChoice(
                remote,
                f"auto: the local model failed to load ({local_failure}); "
                f"using {remote.label} because {found} is set",
            )
    wanted = "/".join(name for kind in AUTO_REMOTES for name in KEY_ENV[kind][:1])
    return ProviderChoice(
        None,
        f"no embedding provider available: the local model failed to load ({local_failure}) "
        f"and no {wanted} is set; search is keyword-only",
    )


def _explicit_remote(config: Config, kind: str, env: EnvReader) -> ProviderChoice:
    key, where = resolve_api_key(config, kind, env)
    # OpenAI-compatible local servers (LM Studio, vLLM, llama.cpp) need no key once base_url is set.
    keyless = kind == "ollama" or (kind == "openai" and bool(config.str("embedding.base_url")))
    if key is None and not keyless:
        return ProviderChoice(
            None,
            f"embedding.provider is '{kind}' but {where} is not set: export it (or point "
            "embedding.api_key_env at the variable that holds the key) and restart; "
            "search is keyword-only",
        )
    try:
        embedder = _build_remote(kind, _options(config, key, where, defaults=False))
    except ProviderError as exc:
        return ProviderChoice(None, f"{exc}; search is keyword-only")
    return ProviderChoice(embedder, f"{embedder.label} (embedding.provider = {kind})")


def _options(config: Config, key: str | None, key_name: str, *, defaults: bool) -> HttpOptions:
    return HttpOptions(
        base_url="" if defaults else config.str("embedding.base_url"),
        model="" if defaults else config.str("embedding.model"),
        dims=0 if defaults else config.int("embedding.dims"),
        api_key=key,
        key_name=key_name,
        timeout_s=config.float("embedding.timeout_s"),
        max_retries=config.int("embedding.max_retries"),
        batch_size=config.int("embedding.batch_size"),
        max_batch_tokens=config.int("embedding.max_batch_tokens"),
        max_concurrency=config.int("embedding.max_concurrency"),
    )


def _build_remote(kind: str, options: HttpOptions) -> Embedder:
    # Imported lazily so that choosing one provider never imports the others.
    if kind == "openai":
        from recalld.embedding.openai import OpenAIEmbedder

        return OpenAIEmbedder(options)
    if kind == "gemini":
        from recalld.embedding.gemini import GeminiEmbedder

        return GeminiEmbedder(options)
    if kind == "voyage":
        from recalld.embedding.voyage import VoyageEmbedder

        return VoyageEmbedder(options)
    if kind == "ollama":
        from recalld.embedding.ollama import OllamaEmbedder

        return OllamaEmbedder(options)
    raise ValueError(kind)


def _load_local(config: Config) -> Embedder:
    try:
        from recalld.embedding.local import LocalEmbedder, take_preloaded
    except (
        ImportError
    ) as exc:  # a broken install (onnxruntime missing) must not stop keyword search
        raise ProviderError(f"cannot import the local embedder: {exc}") from exc
    threads, batch_size = config.int("embedding.threads"), config.int("embedding.batch_size")
    try:
        embedder = take_preloaded(threads=threads, batch_size=batch_size) or LocalEmbedder(
            threads=threads, batch_size=batch_size
        )
        # Construction only finds the file; warming verifies and loads it, so that `auto` can
        # still fall back to a remote provider when the model is corrupt or onnxruntime broken.
        warm = getattr(embedder, "warm", None)
        if callable(warm):
            warm()
        return embedder
    except ProviderError:
        raise
    except Exception as exc:  # a corrupt model file must not stop keyword search either
        log.exception("loading the local embedding model failed")
        raise ProviderError(f"{type(exc).__name__}: {exc}") from exc
