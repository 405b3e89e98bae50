"""The prefilter's int8 scan: the packaged graph, exact integer products, the float ranking kept."""

from __future__ import annotations

import numpy as np
import pytest

from recalld.index import int8_scan
from recalld.index.int8_scan import (
    PAIR_BOUND,
    QUERY_LEVELS,
    SCAN_MODEL,
    ZERO_POINT,
    Int8Scan,
    quantize_query,
    quantize_rows,
    scales_for,
    zero_point_offsets,
)


def test_packaged_graph_is_the_one_onnx_builds() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("a", TensorProto.UINT8, [1, None])
    b = helper.make_tensor_value_info("b", TensorProto.INT8, [None, None])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [1, None])
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    graph = helper.make_graph([node], "prefilter_scan", [a, b], [y])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="recalld"
    )
    model.ir_version = 8
    assert model.SerializeToString() == SCAN_MODEL
    onnx.checker.check_model(onnx.load_from_string(SCAN_MODEL))


def _quantized(k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    low = rng.standard_normal((k, n)).astype(np.float32) * rng.random(k)[:, None].astype(np.float32)
    scale = scales_for(np.abs(low).max(axis=1))
    rows = np.empty(low.shape, dtype=np.int8)
    quantize_rows(low, scale, rows)
    return low, rows, scale


@pytest.mark.parametrize("engine", ["onnxruntime", "numpy"])
def test_scores_are_the_exact_integer_products(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine == "numpy":
        monkeypatch.setattr(int8_scan, "_build_session", lambda: None)
    scan = Int8Scan()
    _, rows, scale = _quantized(128, 70_001, 1)  # more than one fallback block
    query = quantize_query(np.random.default_rng(2).standard_normal(128).astype(np.float32), scale)
    got = scan.scores(query, rows, zero_point_offsets(rows))
    assert scan.engine == engine
    want = (query[0].astype(np.int64) - int8_scan.ZERO_POINT) @ rows.astype(np.int64)
    np.testing.assert_array_equal(got, want)


def test_no_pair_of_products_can_leave_int16() -> None:
    """The bound: MLAS's AVX2 kernel (no VNNI) adds each pair of u8 x s8 products in a saturating
    int16, so the largest pair sum of any quantized query and any int8 row must fit in one."""
    rng = np.random.default_rng(4)
    extremes = [rng.standard_normal(128).astype(np.float32) * 1e6 for _ in range(20)]
    extremes += [np.full(128, v, dtype=np.float32) for v in (1.0, -1.0, 1e30, -1e30)]
    scale = np.abs(rng.standard_normal(128)).astype(np.float32) + 1e-3
    for projected in extremes:
        q = quantize_query(projected, scale)
        assert q.min() >= 0 and q.max() <= ZERO_POINT + QUERY_LEVELS
    assert ZERO_POINT + QUERY_LEVELS <= 127  # the query's uint8 is in [0, 127]
    assert 2 * 127 * 128 == 32_512 <= PAIR_BOUND <= 32_767  # rows in [-128, 127]


@pytest.mark.parametrize("engine", ["onnxruntime", "numpy"])
def test_adversarial_rows_and_query_are_exact(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Queries at the ends of the range against rows at +-127: with the query up to 255 (before
    issue 38) every pair saturated on an AVX2 CPU without VNNI (2,097,088 for 4,145,280)."""
    if engine == "numpy":
        monkeypatch.setattr(int8_scan, "_build_session", lambda: None)
    rng = np.random.default_rng(5)
    k = 128
    rows = np.stack(
        [
            np.full(k, 127, dtype=np.int8),
            np.full(k, -127, dtype=np.int8),
            np.tile(np.array([127, -127], dtype=np.int8), k // 2),
            rng.choice(np.array([127, -127], dtype=np.int8), k),
        ]
        + [rng.integers(-127, 128, k, dtype=np.int8) for _ in range(60)],
        axis=1,
    )
    scale = np.ones(k, dtype=np.float32)
    scan = Int8Scan()
    for projected in (
        np.ones(k),
        -np.ones(k),
        np.tile([1.0, -1.0], k // 2),
        rng.standard_normal(k),
    ):
        query = quantize_query(projected.astype(np.float32), scale)
        got = scan.scores(query, rows, zero_point_offsets(rows))
        want = (query[0].astype(np.int64) - ZERO_POINT) @ rows.astype(np.int64)
        np.testing.assert_array_equal(got, want)
    assert scan.engine == engine


def test_int8_ranking_keeps_the_float_ranking_s_best() -> None:
    low, rows, scale = _quantized(64, 20_000, 3)
    scan = Int8Scan()
    for seed in range(5):
        q = np.random.default_rng(10 + seed).standard_normal(64).astype(np.float32)
        exact = q @ low
        query = quantize_query(q, scale)
        approx = scan.scores(query, rows, zero_point_offsets(rows)).astype(np.float64)
        best = set(np.argsort(-exact)[:10].tolist())
        # The prefilter keeps its best 2,000 for exact rescoring: the true 10 are all in it.
        assert best <= set(np.argsort(-approx)[:2000].tolist())
        assert np.corrcoef(exact, approx)[0, 1] > 0.999


def test_quantizing_clips_and_handles_empty_dimensions() -> None:
    scale = scales_for(np.array([2.0, 0.0, np.nan], dtype=np.float32))
    assert scale[1] == 1.0 and scale[2] == 1.0  # no division by zero or NaN
    out = np.empty((3, 2), dtype=np.int8)
    quantize_rows(np.array([[4.0, -1.0], [0.0, 0.0], [0.0, 0.0]], dtype=np.float32), scale, out)
    assert out[0].tolist() == [127, -64]  # past the fitted range: clipped, not wrapped
    q = quantize_query(np.zeros(3, dtype=np.float32), scale)
    assert q.tolist() == [[int8_scan.ZERO_POINT] * 3]
