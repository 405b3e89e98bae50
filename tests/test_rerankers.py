"""Rerankers: rerank APIs and Ollama against fake servers, a real ONNX cross-encoder, the budget."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fake_services import (
    KEY,
    MALFORMED,
    MISSING_FIELDS,
    SERVER_ERROR,
    TIMEOUT,
    WRONG_COUNT,
    CohereRerankSpec,
    FakeService,
    Fault,
    JinaRerankSpec,
    OllamaGenerateSpec,
    RerankSpec,
    VoyageRerankSpec,
    overlap_score,
    serving,
)
from recalld.config import Config
from recalld.errors import ConfigError, ProviderError
from recalld.retrieval.rerank import (
    Reranker,
    rerank_options,
    resolve_reranker,
    resolve_reranker_choice,
)
from recalld.retrieval.rerank.apply import rerank_shortlist
from recalld.retrieval.rerank.ollama import OllamaReranker, parse_grade
from recalld.retrieval.rerank.onnx_cross_encoder import OnnxCrossEncoder, _to_scores
from recalld.retrieval.rerank.remote import (
    CohereReranker,
    JinaReranker,
    RemoteReranker,
    VoyageReranker,
)

pytestmark = pytest.mark.timeout(20)

QUERY = "capital of france"
DOCS = [
    "bananas are yellow",
    "paris is the capital of france",
    "the capital of spain is madrid",
    "france grows wine",
]

REMOTE: dict[str, tuple[type[RemoteReranker], type[RerankSpec], str]] = {
    "cohere": (CohereReranker, CohereRerankSpec, "COHERE_API_KEY"),
    "voyage": (VoyageReranker, VoyageRerankSpec, "VOYAGE_API_KEY"),
    "jina": (JinaReranker, JinaRerankSpec, "JINA_API_KEY"),
}


def config(url: str = "", **kw: Any) -> Config:
    return Config({"rerank.base_url": url, "rerank.timeout_s": 3.0, **kw})


@pytest.fixture(params=list(REMOTE))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def service(kind: str) -> Iterator[FakeService]:
    with serving(REMOTE[kind][1]()) as svc:
        yield svc


def remote(kind: str, url: str, key: str = KEY, **kw: Any) -> RemoteReranker:
    cls, _, var = REMOTE[kind]
    return cls(rerank_options(config(url, **kw), key, var))


# -- rerank APIs ------------------------------------------------------------------------------


def test_remote_scores_come_back_in_document_order(kind: str, service: FakeService) -> None:
    rr = remote(kind, service.url)
    assert isinstance(rr, Reranker)
    scores = rr.score(QUERY, DOCS)
    assert scores == pytest.approx([overlap_score(QUERY, d) for d in DOCS])
    assert service.violations == []
    (req,) = service.requests
    assert req.headers["authorization"] == f"Bearer {KEY}"
    count_field = "top_k" if kind == "voyage" else "top_n"
    assert req.body[count_field] == len(DOCS) and req.body["model"] == rr.model
    assert rr.label == f"{kind}/{rr.model}"


def test_remote_429_retry_after_then_success(kind: str, service: FakeService) -> None:
    service.fail(Fault("rate_limit", retry_after="1"))
    assert len(remote(kind, service.url).score(QUERY, DOCS)) == len(DOCS)
    first, second = service.requests
    assert 0.9 <= second.at - first.at < 2.0


def test_remote_500_forever_is_retryable_after_one_retry(kind: str, service: FakeService) -> None:
    service.fail_always(SERVER_ERROR)
    with pytest.raises(ProviderError) as err:
        remote(kind, service.url).score(QUERY, DOCS)
    assert err.value.retryable and len(service.requests) == 2


def test_remote_refused_key_one_request(kind: str, service: FakeService) -> None:
    service.spec.key = "the-right-key"
    with pytest.raises(ProviderError) as err:
        remote(kind, service.url).score(QUERY, DOCS)
    assert REMOTE[kind][2] in str(err.value) and KEY not in str(err.value)
    assert not err.value.retryable and len(service.requests) == 1


@pytest.mark.parametrize("fault", [MALFORMED, MISSING_FIELDS, WRONG_COUNT])
def test_remote_unusable_answers(kind: str, service: FakeService, fault: str) -> None:
    service.fail(fault)
    with pytest.raises(ProviderError):
        remote(kind, service.url).score(QUERY, DOCS)
    assert len(service.requests) == 1


def test_remote_timeout_returns_fused_order_degraded(kind: str, service: FakeService) -> None:
    service.fail_always(Fault(TIMEOUT, sleep_s=3.0))
    rr = remote(kind, service.url)
    started = time.monotonic()
    ranked, degraded = rerank_shortlist(rr, QUERY, DOCS, lambda d: d, top_n=10, timeout_s=0.3)
    assert time.monotonic() - started < 2.0  # the budget, not the slow server, decided
    assert [d for d, _ in ranked] == DOCS
    assert degraded == f"reranker {rr.label} timed out after 0.3 s; fused order returned"


def test_remote_rerank_reorders_the_shortlist(kind: str, service: FakeService) -> None:
    ranked, degraded = rerank_shortlist(
        remote(kind, service.url), QUERY, DOCS, lambda d: d, top_n=10, timeout_s=3.0
    )
    assert degraded is None
    assert ranked[0][0] == "paris is the capital of france"
    assert ranked[-1][0] == "bananas are yellow"


# -- Ollama as a grader -----------------------------------------------------------------------


def test_ollama_grades_each_document_with_bounded_concurrency() -> None:
    with serving(OllamaGenerateSpec()) as svc:
        svc.fail(*[Fault(TIMEOUT, sleep_s=0.05)] * 8)
        rr = OllamaReranker(
            rerank_options(config(svc.url, **{"rerank.model": "qwen2.5:3b"}), None, "")
        )
        docs = DOCS * 2
        scores = rr.score(QUERY, docs)
    assert scores == pytest.approx([round(10 * overlap_score(QUERY, d)) / 10 for d in docs])
    assert svc.violations == [] and len(svc.requests) == 8
    assert 1 < svc.max_in_flight <= 4
    assert svc.requests[0].body["model"] == "qwen2.5:3b"


def test_ollama_unparsable_grade_and_missing_model() -> None:
    with serving(OllamaGenerateSpec()) as svc:
        svc.fail(MISSING_FIELDS)
        rr = OllamaReranker(
            rerank_options(config(svc.url, **{"rerank.model": "qwen2.5:3b"}), None, "")
        )
        with pytest.raises(ProviderError, match="did not answer with a 0-10 grade"):
            rr.score(QUERY, DOCS[:1])
        other = OllamaReranker(
            rerank_options(config(svc.url, **{"rerank.model": "llama9"}), None, "")
        )
        with pytest.raises(ProviderError, match="ollama pull llama9"):
            other.score(QUERY, DOCS[:1])


def test_parse_grade() -> None:
    assert parse_grade('{"score": 7}') == 7.0
    assert parse_grade("8") == 8.0
    assert parse_grade("I'd say 6/10") == 6.0
    assert parse_grade('{"score": 42}') == 10.0
    assert parse_grade("no idea") is None


# -- local ONNX cross-encoder -----------------------------------------------------------------

WORDS = [
    "paris",
    "capital",
    "france",
    "spain",
    "madrid",
    "bananas",
    "are",
    "yellow",
    "is",
    "the",
    "of",
    "grows",
    "wine",
    "a",
    "an",
    "and",
    "in",
    "on",
    "to",
    "city",
    "river",
    "food",
    "travel",
    "history",
    "art",
]
TOPIC = {"paris", "capital", "france"}


def build_cross_encoder(folder: Path, *, tokenizer_json: bool = False) -> Path:
    """A tiny cross-encoder: embedding lookup, masked mean, linear → one logit per pair."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    hidden = 4
    rng = np.random.default_rng(0)
    table = rng.normal(0, 0.1, (len(vocab), hidden)).astype(np.float32)
    for i, word in enumerate(vocab):
        table[i, 0] = 1.0 if word in TOPIC else 0.0  # feature 0: "on topic"
    weight = np.array([[10.0], [0.0], [0.0], [0.0]], dtype=np.float32)
    ints = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
        for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["tokens"]),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axis2"], ["mask3"]),
        helper.make_node("Mul", ["tokens", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["summed"], keepdims=0),
        helper.make_node("ReduceSum", ["mask3", "axis1"], ["count"], keepdims=0),
        helper.make_node("Div", ["summed", "count"], ["mean"]),
        helper.make_node("MatMul", ["mean", "weight"], ["linear"]),
        helper.make_node("Add", ["linear", "bias"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny-cross-encoder",
        ints,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])],
        initializer=[
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(weight, "weight"),
            numpy_helper.from_array(np.array([-2.0], dtype=np.float32), "bias"),
            numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "model.onnx"))
    if tokenizer_json:
        from tokenizers import BertWordPieceTokenizer

        BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=True).save(
            str(folder / "tokenizer.json")
        )
        (folder / "vocab.txt").unlink()
    return folder


@pytest.mark.parametrize("tokenizer_json", [False, True])
def test_onnx_cross_encoder_scores_pairs(tmp_path: Path, tokenizer_json: bool) -> None:
    folder = build_cross_encoder(tmp_path / "ce", tokenizer_json=tokenizer_json)
    rr = OnnxCrossEncoder(folder)
    assert isinstance(rr, Reranker) and rr.label == "onnx/ce"
    enc = rr.tokenizer.encode("capital of france", "paris")
    assert enc.tokens == ["[CLS]", "capital", "of", "france", "[SEP]", "paris", "[SEP]"]
    assert enc.type_ids == [0, 0, 0, 0, 0, 1, 1]
    scores = rr.score(QUERY, DOCS)
    assert len(scores) == len(DOCS) and all(0.0 < s < 1.0 for s in scores)
    assert max(range(len(DOCS)), key=lambda i: scores[i]) == 1  # the Paris document
    assert scores[1] > scores[2] > scores[0]


def test_onnx_cross_encoder_truncates_to_512(tmp_path: Path) -> None:
    rr = OnnxCrossEncoder(build_cross_encoder(tmp_path / "ce"))
    enc = rr.tokenizer.encode(QUERY, "paris " * 2000)
    assert len(enc.ids) == 512 and enc.tokens[-1] == "[SEP]" and enc.tokens[1:4] == QUERY.split()
    assert len(rr.score(QUERY, ["paris " * 2000, "wine"])) == 2


def test_onnx_cross_encoder_latency_on_a_shortlist_of_20(
    tmp_path: Path, record_property: Any
) -> None:
    rr = OnnxCrossEncoder(build_cross_encoder(tmp_path / "ce"))
    docs = [" ".join(np.random.default_rng(i).choice(WORDS, 120)) for i in range(20)]
    rr.score(QUERY, docs)  # warm-up
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        rr.score(QUERY, docs)
        runs.append(time.perf_counter() - started)
    median_ms = statistics.median(runs) * 1000
    record_property("cross_encoder_ms_for_20", round(median_ms, 2))


def test_onnx_folder_problems_are_provider_errors(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match=r"no model\.onnx"):
        OnnxCrossEncoder(tmp_path)
    folder = build_cross_encoder(tmp_path / "ce")
    (folder / "vocab.txt").unlink()
    with pytest.raises(ProviderError, match=r"no tokenizer\.json or vocab\.txt"):
        OnnxCrossEncoder(folder)


def test_logit_shapes() -> None:
    assert _to_scores(np.array([0.0, 100.0], dtype=np.float32), 2, "x") == pytest.approx([0.5, 1.0])
    two = _to_scores(np.array([[0.0, 0.0], [0.0, 5.0]], dtype=np.float32), 2, "x")
    assert two[0] == pytest.approx(0.5) and two[1] > 0.99
    with pytest.raises(ProviderError, match="shape"):
        _to_scores(np.zeros((2, 3), dtype=np.float32), 2, "x")


# -- resolution -------------------------------------------------------------------------------


def test_resolve_reranker(tmp_path: Path) -> None:
    def env(name: str) -> str | None:
        return {"COHERE_API_KEY": KEY, "MY_JINA": KEY}.get(name)

    assert resolve_reranker(Config({})) is None
    cohere = resolve_reranker(Config({"rerank.provider": "cohere"}), env=env)
    assert isinstance(cohere, CohereReranker) and cohere.base_url == "https://api.cohere.com"
    jina = resolve_reranker(
        Config({"rerank.provider": "jina", "rerank.api_key_env": "MY_JINA"}), env=env
    )
    assert isinstance(jina, JinaReranker)
    missing = resolve_reranker_choice(Config({"rerank.provider": "voyage"}), env=env)
    assert missing.reranker is None and "VOYAGE_API_KEY" in missing.reason
    folder = build_cross_encoder(tmp_path / "ce")
    onnx_rr = resolve_reranker(Config({"rerank.provider": "onnx", "rerank.model": str(folder)}))
    assert isinstance(onnx_rr, OnnxCrossEncoder)
    assert resolve_reranker(Config({"rerank.provider": "onnx"})) is None
    bad = resolve_reranker_choice(
        Config({"rerank.provider": "onnx", "rerank.model": str(tmp_path)})
    )
    assert bad.reranker is None and "no model.onnx" in bad.reason
    no_model = resolve_reranker_choice(Config({"rerank.provider": "ollama"}))
    assert no_model.reranker is None and "rerank.model" in no_model.reason
    ollama = resolve_reranker(Config({"rerank.provider": "ollama", "rerank.model": "qwen2.5:3b"}))
    assert isinstance(ollama, OllamaReranker)
    with pytest.raises(ConfigError, match=r"rerank\.provider must be one of"):
        Config({"rerank.provider": "magic"})
    assert isinstance(
        resolve_reranker(Config({"rerank.provider": "voyage"}), env=lambda n: KEY), VoyageReranker
    )


# -- the shortlist budget ---------------------------------------------------------------------


class ListReranker:
    label = "test/list"

    def __init__(self, scores: list[float] | Exception) -> None:
        self.scores = scores
        self.seen: list[str] = []

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        self.seen = list(documents)
        if isinstance(self.scores, Exception):
            raise self.scores
        return self.scores


def test_only_the_top_n_are_rescored_and_the_tail_keeps_its_order() -> None:
    items = [("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.6), ("e", 0.5)]
    rr = ListReranker([0.1, 0.5, 0.5])
    ranked, degraded = rerank_shortlist(
        rr, "q", items, lambda it: it[0], top_n=3, timeout_s=1.0, score_of=lambda it: it[1]
    )
    assert degraded is None and rr.seen == ["a", "b", "c"]
    assert [(it[0], s) for it, s in ranked] == [
        ("b", 0.5),
        ("c", 0.5),
        ("a", 0.1),
        ("d", 0.6),
        ("e", 0.5),
    ]


@pytest.mark.parametrize(
    ("scores", "needle"),
    [
        (ProviderError("Cohere answered 500"), "failed (Cohere answered 500)"),
        (RuntimeError("bug"), "crashed (RuntimeError)"),
        ([1.0], "returned 1 usable scores for 3 documents"),
        ([1.0, float("nan"), 0.0], "usable scores"),
    ],
)
def test_failures_keep_the_fused_order(scores: Any, needle: str) -> None:
    items = ["x", "y", "z"]
    ranked, degraded = rerank_shortlist(
        ListReranker(scores), "q", items, str, top_n=5, timeout_s=1.0
    )
    assert [it for it, _ in ranked] == items
    assert degraded is not None and needle in degraded and "fused order returned" in degraded


def test_nothing_to_do() -> None:
    assert rerank_shortlist(None, "q", ["a"], str, top_n=5, timeout_s=1.0) == ([("a", 0.0)], None)
    assert rerank_shortlist(ListReranker([]), "q", [], str, top_n=5, timeout_s=1.0) == ([], None)
