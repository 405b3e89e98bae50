"""Remote embedders against real HTTP servers on 127.0.0.1 speaking each service's format."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from fake_services import (
    DIMS,
    KEY,
    MALFORMED,
    MISSING_FIELDS,
    QUOTA,
    SERVER_ERROR,
    TIMEOUT,
    WRONG_COUNT,
    WRONG_DIMS,
    FakeService,
    Fault,
    GeminiSpec,
    OllamaSpec,
    OpenAISpec,
    Spec,
    VoyageSpec,
    free_port_url,
    serving,
    vector_for,
)
from recalld.embedding.base import Embedder, normalise
from recalld.embedding.gemini import GeminiEmbedder
from recalld.embedding.http import (
    HttpOptions,
    RemoteEmbedder,
    batches,
    estimate_tokens,
    parse_retry_after,
)
from recalld.embedding.ollama import OllamaEmbedder
from recalld.embedding.openai import OpenAIEmbedder
from recalld.embedding.voyage import VoyageEmbedder
from recalld.errors import ProviderError

pytestmark = pytest.mark.timeout(20)

PROVIDERS: dict[str, tuple[type[RemoteEmbedder], type[Spec], str]] = {
    "openai": (OpenAIEmbedder, OpenAISpec, "OPENAI_API_KEY"),
    "gemini": (GeminiEmbedder, GeminiSpec, "GEMINI_API_KEY"),
    "voyage": (VoyageEmbedder, VoyageSpec, "VOYAGE_API_KEY"),
    "ollama": (OllamaEmbedder, OllamaSpec, ""),
}
KEYED = ["openai", "gemini", "voyage"]
TEXTS = ["alpha note", "beta: useState hook", "gamma E-1234", "delta", "epsilon 日本語"]


def options(url: str, **kw: Any) -> HttpOptions:
    base = HttpOptions(
        base_url=url,
        dims=DIMS,
        api_key=KEY,
        timeout_s=2.0,
        max_retries=2,
        batch_size=2,
        max_concurrency=1,
        backoff_base_s=0.01,
        backoff_cap_s=0.05,
    )
    return replace(base, **kw)


@pytest.fixture(params=list(PROVIDERS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def service(kind: str) -> Iterator[FakeService]:
    with serving(PROVIDERS[kind][1]()) as svc:
        yield svc


def make(kind: str, url: str, **kw: Any) -> RemoteEmbedder:
    cls, _, key_name = PROVIDERS[kind]
    kw.setdefault("key_name", key_name)
    if kind == "ollama":
        kw.setdefault("api_key", None)
    return cls(options(url, **kw))


def expected(texts: list[str], dims: int = DIMS) -> np.ndarray:
    return normalise(np.array([vector_for(t, dims) for t in texts]))


# -- happy path -------------------------------------------------------------------------------


def test_embeds_in_batches_in_order(kind: str, service: FakeService) -> None:
    emb = make(kind, service.url)
    assert isinstance(emb, Embedder)
    out = emb.embed(TEXTS)
    assert out.dtype == np.float32 and out.shape == (5, DIMS)
    np.testing.assert_allclose(out, expected(TEXTS), rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    assert len(service.requests) == 3  # batch_size 2 → 2 + 2 + 1
    assert service.violations == []
    assert emb.label == f"{kind}/{emb.model}" and emb.dims == DIMS


def test_query_and_document_inputs_differ_where_the_service_distinguishes(
    kind: str, service: FakeService
) -> None:
    emb = make(kind, service.url)
    emb.embed(["doc"])
    emb.embed(["question?"], query=True)
    doc, query = (r.body for r in service.requests)
    if kind == "gemini":
        assert doc["requests"][0]["taskType"] == "RETRIEVAL_DOCUMENT"
        assert query["requests"][0]["taskType"] == "RETRIEVAL_QUERY"
        assert doc["requests"][0]["outputDimensionality"] == DIMS
    elif kind == "voyage":
        assert (doc["input_type"], query["input_type"]) == ("document", "query")
        assert doc["output_dimension"] == DIMS
    elif kind == "openai":
        assert doc["dimensions"] == DIMS and doc["model"] == "text-embedding-3-small"


def test_empty_input_makes_no_request(kind: str, service: FakeService) -> None:
    assert make(kind, service.url).embed([]).shape == (0, DIMS)
    assert service.requests == []


def test_token_budget_splits_batches_and_concurrency_is_bounded(
    kind: str, service: FakeService
) -> None:
    service.fail(*[Fault(TIMEOUT, sleep_s=0.05)] * 12)  # slow answers make overlap observable
    texts = [f"text number {i} " + "word " * 40 for i in range(12)]  # ~50 tokens each
    emb = make(kind, service.url, batch_size=10, max_batch_tokens=120, max_concurrency=3)
    out = emb.embed(texts)
    np.testing.assert_allclose(out, expected(texts), rtol=1e-5)
    assert len(service.requests) == 6  # two texts fit in 120 tokens
    assert 1 < service.max_in_flight <= 3


# -- retries ----------------------------------------------------------------------------------


def test_429_honours_retry_after_then_succeeds(kind: str, service: FakeService) -> None:
    service.fail(Fault("rate_limit", retry_after="1"))  # Gemini: RetryInfo "1s" in the body
    out = make(kind, service.url).embed(["one"])
    assert out.shape == (1, DIMS)
    first, second = service.requests
    assert 0.9 <= second.at - first.at < 2.0


def test_500_then_success(kind: str, service: FakeService) -> None:
    service.fail(SERVER_ERROR)
    assert make(kind, service.url).embed(["one"]).shape == (1, DIMS)
    assert len(service.requests) == 2


def test_500_forever_gives_up_after_max_retries(kind: str, service: FakeService) -> None:
    service.fail_always(SERVER_ERROR)
    with pytest.raises(ProviderError) as err:
        make(kind, service.url, max_retries=3).embed(["one"])
    assert err.value.retryable
    assert "500" in str(err.value) and "4 attempts" in str(err.value)
    assert len(service.requests) == 4


def test_timeout_then_success(kind: str, service: FakeService) -> None:
    service.fail(Fault(TIMEOUT, sleep_s=0.6))
    out = make(kind, service.url, timeout_s=0.25).embed(["one"])
    assert out.shape == (1, DIMS)
    assert len(service.requests) == 2


def test_timeout_forever_is_retryable(kind: str, service: FakeService) -> None:
    service.fail_always(Fault(TIMEOUT, sleep_s=0.5))
    with pytest.raises(ProviderError) as err:
        make(kind, service.url, timeout_s=0.15, max_retries=1).embed(["one"])
    assert err.value.retryable and "did not answer within 0.15 s" in str(err.value)
    assert len(service.requests) == 2


def test_connection_refused_is_retryable(kind: str) -> None:
    url = free_port_url()
    with pytest.raises(ProviderError) as err:
        make(kind, url, max_retries=1).embed(["one"])
    assert err.value.retryable and "cannot reach" in str(err.value)


# -- answers that cannot be used ----------------------------------------------------------------


@pytest.mark.parametrize("fault", [MALFORMED, MISSING_FIELDS])
def test_unusable_answer_is_an_error_without_retry(
    kind: str, service: FakeService, fault: str
) -> None:
    service.fail(fault)
    with pytest.raises(ProviderError) as err:
        make(kind, service.url).embed(["one"])
    assert not err.value.retryable
    assert len(service.requests) == 1


def test_wrong_dimensions(kind: str, service: FakeService) -> None:
    service.fail(WRONG_DIMS)
    with pytest.raises(ProviderError, match=rf"returned {DIMS + 4}-d vectors .* {DIMS}-d"):
        make(kind, service.url).embed(["one"])


def test_wrong_count_of_vectors(kind: str, service: FakeService) -> None:
    service.fail(WRONG_COUNT)
    with pytest.raises(ProviderError, match=r"returned 1 vectors for 2 texts"):
        make(kind, service.url).embed(["one", "two"])


# -- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KEYED)
def test_refused_key_fails_at_once_and_never_leaks_it(
    kind: str, service: FakeService, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    service.spec.key = "the-right-key"  # the client sends KEY, which the service refuses
    emb = make(kind, service.url)
    with pytest.raises(ProviderError) as err:
        emb.embed(["one"])
    message = str(err.value)
    key_name = PROVIDERS[kind][2]
    assert "refused the API key" in message and key_name in message
    assert not err.value.retryable
    assert len(service.requests) == 1
    assert KEY not in message and KEY not in emb.key and KEY not in repr(emb.options)
    assert all(KEY not in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("kind", ["openai", "gemini"])
def test_quota_exhausted_is_not_retried(kind: str, service: FakeService) -> None:
    service.fail(QUOTA)
    with pytest.raises(ProviderError, match="quota is exhausted") as err:
        make(kind, service.url).embed(["one"])
    assert not err.value.retryable
    assert len(service.requests) == 1


def test_retry_after_longer_than_the_cap_gives_up_retryable() -> None:
    with serving(OpenAISpec()) as svc:
        svc.fail(Fault("rate_limit", retry_after="3600"))
        with pytest.raises(ProviderError, match="asks to wait 3600 s") as err:
            make("openai", svc.url).embed(["one"])
    assert err.value.retryable and len(svc.requests) == 1


# -- provider specifics -----------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/v1", "/v1/"])
def test_openai_base_url_with_or_without_v1(suffix: str) -> None:
    with serving(OpenAISpec(key=None)) as svc:
        emb = OpenAIEmbedder(options(svc.url + suffix, api_key=None, model="local-model", dims=0))
        assert emb.dims == DIMS  # unknown model: one probe request learns the size
        emb.embed(["x"])
    assert [r.path for r in svc.requests] == ["/v1/embeddings", "/v1/embeddings"]
    assert "authorization" not in svc.requests[0].headers  # keyless local server
    assert "dimensions" not in svc.requests[0].body
    assert svc.violations == []


def test_ollama_learns_dims_from_a_probe_and_then_checks_them() -> None:
    with serving(OllamaSpec(dims=12)) as svc:
        emb = OllamaEmbedder(options(svc.url, api_key=None, dims=0))
        assert emb.dims == 12 and len(svc.requests) == 1
        assert emb.key == f"ollama|{svc.url}|nomic-embed-text|12"
        svc.fail(WRONG_DIMS)
        with pytest.raises(
            ProviderError, match="returned 16-d vectors but this vector space is 12-d"
        ):
            emb.embed(["again"])


def test_ollama_missing_model_says_pull_it() -> None:
    with serving(OllamaSpec()) as svc:
        emb = OllamaEmbedder(options(svc.url, api_key=None, model="mxbai-embed-large"))
        with pytest.raises(ProviderError, match="ollama pull mxbai-embed-large"):
            emb.embed(["x"])
        assert len(svc.requests) == 1


def test_gemini_batches_at_most_100_requests() -> None:
    with serving(GeminiSpec()) as svc:
        emb = GeminiEmbedder(options(svc.url, batch_size=500, max_batch_tokens=10**6))
        emb.embed([f"t{i}" for i in range(150)])
    assert [len(r.body["requests"]) for r in svc.requests] == [100, 50]
    assert svc.violations == []


def test_keys_identify_the_vector_space_without_the_secret() -> None:
    a = OpenAIEmbedder(options("https://api.openai.com", dims=256))
    b = OpenAIEmbedder(options("https://api.openai.com", dims=512))
    c = OpenAIEmbedder(options("http://127.0.0.1:1234/v1", dims=256))
    d = OpenAIEmbedder(options("https://api.openai.com", dims=256, api_key="another-key"))
    assert len({a.key, b.key, c.key}) == 3
    assert a.key == d.key  # a new key for the same account reuses the cache
    assert all(KEY not in e.key for e in (a, b, c))


# -- helpers ----------------------------------------------------------------------------------


def test_parse_retry_after_forms() -> None:
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    value = parse_retry_after({"retry-after": later})
    assert value is not None and 28 <= value <= 30
    earlier = format_datetime(datetime.now(UTC) - timedelta(seconds=30), usegmt=True)
    assert parse_retry_after({"retry-after": earlier}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_estimate_tokens_counts_non_ascii_heavier() -> None:
    assert estimate_tokens("a" * 400) == 101
    assert estimate_tokens("日本語" * 100) == 301


def test_batches_respect_both_limits() -> None:
    texts = ["a" * 40] * 5 + ["b" * 4000] + ["c"]
    groups = batches(texts, max_items=2, max_tokens=100)
    assert groups == [[0, 1], [2, 3], [4], [5], [6]]
    assert sum(len(g) for g in groups) == len(texts)
