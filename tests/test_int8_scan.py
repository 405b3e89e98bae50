"""The prefilter's int8 scan: the packaged graph, exact integer products, the float ranking kept."""

from __future__ import annotations

import numpy as np
import pytest

from recalld.index import int8_scan
from recalld.index.int8_scan import (
    PAIR_BOUND,
    QUERY_LEVELS,
    ROW_BIAS,
    SCAN_MODEL,
    Int8Scan,
    biased,
    quantize_query,
    quantize_rows,
    scales_for,
)


def test_packaged_graph_is_the_one_onnx_builds() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("a", TensorProto.UINT8, [None, None])
    b = helper.make_tensor_value_info("b", TensorProto.INT8, [None, 1])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [None, 1])
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    graph = helper.make_graph([node], "prefilter_scan", [a, b], [y])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="recalld"
    )
    model.ir_version = 8
    assert model.SerializeToString() == SCAN_MODEL
    onnx.checker.check_model(onnx.load_from_string(SCAN_MODEL))


def _quantized(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    low = rng.standard_normal((n, k)).astype(np.float32) * rng.random(k).astype(np.float32)
    scale = scales_for(np.abs(low).max(axis=0))
    rows = np.empty(low.shape, dtype=np.uint8)
    quantize_rows(low, scale, rows)
    return low, rows, scale


def _exact(query: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The int8 rows (stored + ``ROW_BIAS``) times the int8 query, in int64."""
    return (rows.astype(np.int64) - ROW_BIAS) @ query[:, 0].astype(np.int64)


def _scan(engine: str, monkeypatch: pytest.MonkeyPatch) -> Int8Scan:
    if engine == "numpy":
        monkeypatch.setattr(int8_scan, "_build_session", lambda: None)
    else:
        pytest.importorskip("onnxruntime")
    return Int8Scan()


@pytest.mark.parametrize("engine", ["onnxruntime", "numpy"])
def test_scores_are_the_exact_integer_products(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    scan = _scan(engine, monkeypatch)
    _, rows, scale = _quantized(70_001, 128, 1)  # more than one fallback block
    query = quantize_query(np.random.default_rng(2).standard_normal(128).astype(np.float32), scale)
    got = scan.scores(query, rows)
    assert scan.engine == engine
    assert got.dtype == np.int32 and got.shape == (70_001,)
    np.testing.assert_array_equal(got, _exact(query, rows))


def _pairs_in_int16(query: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """MLAS's AVX2 kernel without VNNI, in numpy: ``vpmaddubsw`` adds each pair of adjacent
    uint8 x int8 products into a saturating int16, then ``vpmaddwd`` sums those in int32."""
    products = rows.astype(np.int64) * query[:, 0].astype(np.int64)
    pairs = products[:, 0::2] + products[:, 1::2]
    return np.clip(pairs, -32_768, 32_767).sum(axis=1) - ROW_BIAS * int(query.sum())


def _adversarial(k: int, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Rows at the ends of int8 (+127: uint8 255, -128: uint8 0) and queries at +-63."""
    rng = np.random.default_rng(seed)
    ends = np.array([127, -127, -128], dtype=np.int8)
    rows = np.stack(
        [np.full(k, v, dtype=np.int8) for v in ends]
        + [np.tile(np.array([127, -128], dtype=np.int8), k // 2)]
        + [rng.choice(ends, k) for _ in range(20)]
        + [rng.integers(-128, 128, k, dtype=np.int8) for _ in range(40)]
    )
    top = QUERY_LEVELS
    queries = [
        np.full(k, top),
        np.full(k, -top),
        np.tile([top, -top], k // 2),
        rng.choice([top, -top], k),
        rng.integers(-top, top + 1, k),
    ]
    return biased(rows), [q.astype(np.int8)[:, None] for q in queries]


def test_no_pair_of_products_can_leave_int16() -> None:
    """The bound: the largest pair sum of any quantized query and any stored row fits an int16,
    checked by the quantizer's range and by the AVX2 kernel's arithmetic in numpy."""
    rng = np.random.default_rng(4)
    extremes = [rng.standard_normal(128).astype(np.float32) * 1e6 for _ in range(20)]
    extremes += [np.full(128, v, dtype=np.float32) for v in (1.0, -1.0, 1e30, -1e30)]
    scale = np.abs(rng.standard_normal(128)).astype(np.float32) + 1e-3
    for projected in extremes:
        q = quantize_query(projected, scale)
        assert q.shape == (128, 1) and q.dtype == np.int8
        assert q.min() >= -QUERY_LEVELS and q.max() <= QUERY_LEVELS
    assert 2 * 255 * QUERY_LEVELS == PAIR_BOUND <= 32_767  # stored rows in [0, 255]
    rows, queries = _adversarial(128, 6)
    for query in queries:
        np.testing.assert_array_equal(_pairs_in_int16(query, rows), _exact(query, rows))
    # The emulation can fail: a query twice as wide saturates the rows at +127.
    wide = np.full((128, 1), 2 * QUERY_LEVELS + 1, dtype=np.int8)
    assert _pairs_in_int16(wide, rows)[0] != _exact(wide, rows)[0]


@pytest.mark.parametrize("engine", ["onnxruntime", "numpy"])
def test_adversarial_rows_and_query_are_exact(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows at +-127 / -128 and queries at +-63, the worst pair sums (2 x 255 x 63 = 32,130):
    with the query up to 255 (before issue 38) every pair saturated on an AVX2 CPU without
    VNNI (2,097,088 for 4,145,280)."""
    scan = _scan(engine, monkeypatch)
    rows, queries = _adversarial(128, 5)
    for query in queries:
        np.testing.assert_array_equal(scan.scores(query, rows), _exact(query, rows))
    assert scan.engine == engine


def test_int8_ranking_keeps_the_float_ranking_s_best() -> None:
    low, rows, scale = _quantized(20_000, 64, 3)
    scan = Int8Scan()
    for seed in range(5):
        q = np.random.default_rng(10 + seed).standard_normal(64).astype(np.float32)
        exact = low @ q
        query = quantize_query(q, scale)
        approx = scan.scores(query, rows).astype(np.float64)
        best = set(np.argsort(-exact)[:10].tolist())
        # The prefilter keeps its best 2,000 for exact rescoring: the true 10 are all in it.
        assert best <= set(np.argsort(-approx)[:2000].tolist())
        assert np.corrcoef(exact, approx)[0, 1] > 0.999


def test_quantizing_clips_biases_and_handles_empty_dimensions() -> None:
    scale = scales_for(np.array([2.0, 0.0, np.nan], dtype=np.float32))
    assert scale[1] == 1.0 and scale[2] == 1.0  # no division by zero or NaN
    out = np.empty((2, 3), dtype=np.uint8)
    quantize_rows(np.array([[4.0, 0.0, 0.0], [-1.0, 0.0, 0.0]], dtype=np.float32), scale, out)
    # past the fitted range: clipped, not wrapped; stored + 128
    assert out[:, 0].tolist() == [127 + ROW_BIAS, -64 + ROW_BIAS]
    assert out[:, 1:].tolist() == [[ROW_BIAS] * 2] * 2
    values = np.array([-128, -1, 0, 1, 127], dtype=np.int8)
    assert biased(values).tolist() == [0, 127, 128, 129, 255]
    q = quantize_query(np.zeros(3, dtype=np.float32), scale)
    assert q.tolist() == [[0]] * 3
