"""Shared HTTP machinery of the remote providers (embedders and rerankers).

One sync ``httpx.Client`` per provider; retries with exponential backoff and full jitter on
429/5xx/timeouts/connection errors, honouring ``Retry-After``; no retry on a refused key, a bad
request, a missing model or an exhausted quota. Every failure leaves as a :class:`ProviderError`
whose message names the fix. The API key goes into a header only and is scrubbed from any text
the service sends back, so it never reaches a log line or an error message.

:class:`RemoteEmbedder` adds what every remote embedder shares: batching bounded by an item cap
and an input-token budget, bounded concurrency, dimension checks and L2 normalisation.
"""

from __future__ import annotations

import email.utils
import functools
import json
import logging
import math
import random
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

import httpx
import numpy as np

from recalld.embedding.base import Vectors, normalise, provider_key
from recalld.errors import ProviderError

__all__ = [
    "Dialect",
    "HttpOptions",
    "HttpService",
    "RemoteEmbedder",
    "batches",
    "estimate_tokens",
    "parse_retry_after",
]

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True)
class HttpOptions:
    """Connection and batching settings of one remote provider (from ``embedding.*``)."""

    base_url: str = ""  # empty = the provider's default
    model: str = ""  # empty = the provider's default
    dims: int = 0  # 0 = the model's default (probed when unknown)
    api_key: str | None = field(default=None, repr=False)
    key_name: str = ""  # where the key came from, for messages ("OPENAI_API_KEY")
    timeout_s: float = 30.0
    max_retries: int = 4
    batch_size: int = 16
    max_batch_tokens: int = 8000
    max_concurrency: int = 2
    backoff_base_s: float = 0.5  # first backoff step; tests make it tiny
    backoff_cap_s: float = 20.0  # longest jittered backoff step
    retry_after_cap_s: float = 60.0  # a longer Retry-After gives up (retryable) instead of waiting


class Dialect:
    """How one service reports errors; subclasses refine quota detection and hints."""

    name = "service"  # shown in messages: "OpenAI", "Ollama"
    key_name = "the API key"

    def quota_exhausted(self, status: int, payload: Any) -> bool:
        """True when a 429 means "no more quota" (retrying cannot help)."""
        return False

    def retry_hint(self, payload: Any) -> float | None:
        """A wait the service asked for inside its error body, in seconds."""
        return None

    def explain(self, status: int, detail: str) -> str | None:
        """A service-specific message for a non-retryable status, or None for the generic one."""
        return None


class HttpService:
    """A JSON-over-HTTP client with retries, backoff and error translation."""

    def __init__(
        self,
        dialect: Dialect,
        base_url: str,
        options: HttpOptions,
        *,
        headers: Mapping[str, str] | None = None,
        max_retries: int | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.dialect = dialect
        self.base_url = base_url.rstrip("/")
        self.options = options
        self.max_retries = options.max_retries if max_retries is None else max_retries
        self.timeout_s = options.timeout_s if timeout_s is None else timeout_s
        self._secret = options.api_key
        limit = max(1, options.max_concurrency)
        self._client = httpx.Client(
            base_url=self.base_url,
            headers={"Content-Type": "application/json", **(headers or {})},
            timeout=httpx.Timeout(self.timeout_s),
            limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
            verify=_ssl_context(),
            # Proxies from the environment are httpx's business; the key never goes in a URL.
            follow_redirects=False,
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` to ``path`` and return the decoded JSON answer (retrying as needed)."""
        name = self.dialect.name
        url = f"{self.base_url}{path}"
        attempts = 1 + max(0, self.max_retries)
        last = ""
        for attempt in range(attempts):
            hint: float | None = None
            try:
                response = self._client.post(path, json=body)
            except httpx.TimeoutException:
                last = f"{name} did not answer within {self.timeout_s:g} s ({url})"
            except httpx.TransportError as exc:
                last = f"cannot reach {name} at {self.base_url} ({self._scrub(str(exc))})"
            else:
                status = response.status_code
                if status < 300:
                    return self._decode(response, url)
                payload = _json_or_none(response)
                detail = self._scrub(_error_text(payload, response))
                if status == 429 and self.dialect.quota_exhausted(status, payload):
                    raise ProviderError(
                        f"{name} says the quota is exhausted (429: {detail}): "
                        f"check the plan and billing of the account behind {self._key_name()}"
                    )
                if status not in RETRY_STATUSES:
                    raise ProviderError(self._refusal(status, detail, url))
                last = f"{name} answered {status} ({detail})"
                hint = parse_retry_after(response.headers)
                if hint is None:
                    hint = self.dialect.retry_hint(payload)
            if attempt + 1 >= attempts:
                break
            delay = self._delay(attempt, hint)
            if delay is None:
                raise ProviderError(
                    f"{last}; it asks to wait {hint:.0f} s, longer than recalld waits: "
                    "try again later",
                    retryable=True,
                )
            log.info("%s; retry %d/%d in %.2f s", last, attempt + 1, attempts - 1, delay)
            time.sleep(delay)
        raise ProviderError(f"{last}; gave up after {attempts} attempts", retryable=True)

    def _delay(self, attempt: int, hint: float | None) -> float | None:
        opts = self.options
        if hint is not None:
            return None if hint > opts.retry_after_cap_s else max(0.0, hint)
        # Full jitter (AWS architecture blog): spreads retries of concurrent workers apart.
        ceiling = min(opts.backoff_cap_s, opts.backoff_base_s * (2**attempt))
        return random.uniform(0.0, ceiling)

    def _refusal(self, status: int, detail: str, url: str) -> str:
        name = self.dialect.name
        special = self.dialect.explain(status, detail)
        if special:
            return special
        if status in (401, 403):
            return f"{name} refused the API key ({status}): check {self._key_name()}"
        if status == 404:
            return (
                f"{name} answered 404 for {url} ({detail}): "
                "check embedding.base_url / rerank.base_url and the model name"
            )
        return f"{name} rejected the request ({status}: {detail})"

    def _decode(self, response: httpx.Response, url: str) -> Any:
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            head = self._scrub(response.text[:120])
            raise ProviderError(
                f"{self.dialect.name} sent a malformed answer from {url} ({exc}; starts with "
                f"{head!r}): check that the base URL points at the service's API"
            ) from None

    def _key_name(self) -> str:
        return self.options.key_name or self.dialect.key_name

    def _scrub(self, text: str) -> str:
        if self._secret:
            text = text.replace(self._secret, "***")
        return text[:300]


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~90 ms; one context serves every provider's client.
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def estimate_tokens(text: str) -> int:
    """Rough input-token count: ~4 ASCII characters per token, ~1 token per other character.

    BPE vocabularies pack English into ~4 characters a token but CJK or emoji into ~1, so counting
    non-ASCII characters separately keeps the estimate from undershooting on such text.
    """
    ascii_chars = len(text.encode("ascii", "ignore"))
    return 1 + ascii_chars // 4 + (len(text) - ascii_chars)


def batches(texts: Sequence[str], max_items: int, max_tokens: int) -> list[list[int]]:
    """Split indexes of ``texts`` into consecutive batches within both limits.

    A single text over the token budget still gets a batch of its own: cutting it is the chunker's
    job, and the service reports a text that is really too long.
    """
    out: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i, text in enumerate(texts):
        cost = estimate_tokens(text)
        if current and (len(current) >= max_items or used + cost > max_tokens):
            out.append(current)
            current, used = [], 0
        current.append(i)
        used += cost
    if current:
        out.append(current)
    return out


class RemoteEmbedder:
    """Base of the HTTP embedders: subclasses build one request and read its vectors."""

    kind = "remote"
    default_base_url = ""
    default_model = ""
    known_dims: ClassVar[Mapping[str, int]] = {}
    max_batch_items = 2048  # the service's own cap on inputs per request
    max_input_tokens = 8192

    def __init__(self, options: HttpOptions) -> None:
        self.options = options
        self.base_url = (options.base_url or self.default_base_url).rstrip("/")
        self.model = options.model or self.default_model
        self._dims = options.dims or self.known_dims.get(self.model, 0)
        self._lock = threading.Lock()
        self.http = HttpService(self.dialect(), self.base_url, options, headers=self.headers())

    # -- what subclasses provide ------------------------------------------------------------

    def dialect(self) -> Dialect:
        """How this service reports errors."""
        return Dialect()

    def headers(self) -> dict[str, str]:
        """Request headers (authentication)."""
        return {}

    def request_batch(self, texts: list[str], query: bool) -> list[list[float]]:
        """Embed one batch; return one raw vector per text, in order."""
        raise NotImplementedError

    # -- the Embedder protocol --------------------------------------------------------------

    @property
    def dims(self) -> int:
        """Output dimensions; when neither configured nor known, one probe request learns them."""
        if not self._dims:
            self.embed(["dimension probe"])
        return self._dims

    @dims.setter
    def dims(self, value: int) -> None:
        self._dims = value

    @property
    def key(self) -> str:
        """Cache/identity key (kind, base URL, model, dims); never the secret."""
        return provider_key(self.kind, self.base_url, self.model, self.dims)

    @property
    def label(self) -> str:
        """``kind/model``."""
        return f"{self.kind}/{self.model}"

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        """Embed ``texts`` (batched, concurrent) into L2-normalised float32 rows."""
        items = list(texts)
        if not items:
            return np.zeros((0, self._dims), dtype=np.float32)
        limit = max(1, min(self.options.batch_size, self.max_batch_items))
        groups = batches(items, limit, max(1, self.options.max_batch_tokens))
        if len(groups) == 1 or self.options.max_concurrency <= 1:
            parts = [self._embed_group(items, g, query) for g in groups]
        else:
            parts = self._embed_concurrently(items, groups, query)
        return normalise(np.vstack(parts))

    def close(self) -> None:
        """Release the HTTP connections."""
        self.http.close()

    # -- internals --------------------------------------------------------------------------

    def _embed_concurrently(
        self, items: list[str], groups: list[list[int]], query: bool
    ) -> list[Vectors]:
        workers = min(self.options.max_concurrency, len(groups))
        with ThreadPoolExecutor(workers, thread_name_prefix=f"embed-{self.kind}") as pool:
            futures: list[Future[Vectors]] = [
                pool.submit(self._embed_group, items, g, query) for g in groups
            ]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in done if f.exception() is not None), None)
            if failed is not None:
                # Do not spend quota on the rest of a call that already failed.
                for f in futures:
                    f.cancel()
                failed.result()
            return [f.result() for f in futures]

    def _embed_group(self, items: list[str], group: list[int], query: bool) -> Vectors:
        texts = [items[i] for i in group]
        raw = self.request_batch(texts, query)
        if len(raw) != len(texts):
            raise ProviderError(
                f"{self.label} returned {len(raw)} vectors for {len(texts)} texts: "
                "the service or a proxy in front of it is misbehaving"
            )
        return self._check_dims(raw)

    def _check_dims(self, raw: list[list[float]]) -> Vectors:
        try:
            arr = np.asarray(raw, dtype=np.float32)
        except (ValueError, TypeError):
            arr = None
        if arr is None or arr.ndim != 2 or not np.isfinite(arr).all():
            sizes = sorted({len(v) for v in raw if isinstance(v, list)})
            raise ProviderError(
                f"{self.label} returned vectors that are not one numeric matrix "
                f"(lengths {sizes[:5]}): the service answered something unexpected"
            )
        got = int(arr.shape[1])
        with self._lock:
            if not self._dims:
                self._dims = got  # learnt from the first answer
        if got != self._dims:
            source = "embedding.dims" if self.options.dims else "the model's known size"
            raise ProviderError(
                f"{self.label} returned {got}-d vectors but this vector space is {self._dims}-d "
                f"({source}): set embedding.dims to the model's output size or pick the model "
                "the index was built with; changing dims rebuilds the index"
            )
        return arr


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _error_text(payload: Any, response: httpx.Response) -> str:
    """The service's own words about an error, from the usual JSON shapes."""
    if isinstance(payload, dict):
        err = payload.get("error", payload)
        if isinstance(err, dict):
            for k in ("message", "detail", "error"):
                if isinstance(err.get(k), str):
                    return str(err[k])
        if isinstance(err, str):
            return err
        for k in ("message", "detail"):
            if isinstance(payload.get(k), str):
                return str(payload[k])
    text = response.text.strip()
    return text[:200] if text else response.reason_phrase or "no details"


def field_list(payload: Any, key: str, label: str) -> list[Any]:
    """``payload[key]`` as a list, or a ProviderError naming what is missing."""
    value = payload.get(key) if isinstance(payload, dict) else None
    if not isinstance(value, list):
        raise ProviderError(f"{label} answered without a '{key}' list: unexpected response shape")
    return value


def float_list(value: Any, label: str) -> list[float]:
    """A JSON vector, checked to be a list of numbers."""
    if not isinstance(value, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in value
    ):
        raise ProviderError(f"{label} answered with a vector that is not a list of numbers")
    return value
