"""TopK of a few elements of a longer row (k-NN's nearest neighbours) by k selection passes
(`builder/indexing._select`): the same order as the rank form (value, NaN as the largest, ties by
index), on floats with NaN, infinities and ties, and on integers at their lowest value."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import luminal.onnx as lo
from luminal.builder import indexing

RNG = np.random.default_rng(5)


def _model(elem, largest, k, n):
    node = oh.make_node("TopK", ["x", "k"], ["v", "i"], largest=largest, sorted=1, axis=-1)
    graph = oh.make_graph([node], "t", [oh.make_tensor_value_info("x", elem, [None, n])],
                          [oh.make_tensor_value_info("v", elem, [None, k]), oh.make_tensor_value_info("i", TP.INT64, [None, k])],
                          initializer=[oh.make_tensor("k", TP.INT64, [1], [k])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=9)


def _stable(x, k, largest):
    """topk's order in Python: NaN the largest, then by value, ties by index."""
    def key(row, j):
        v = float(row[j])
        nan = v != v
        return ((not nan, -v if not nan else 0.0, j) if largest else (nan, v if not nan else 0.0, j))
    return np.array([sorted(range(x.shape[1]), key=lambda j, r=r: key(r, j))[:k] for r in x], np.int64)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("k, n", [(1, 8), (5, 40)])
def test_topk_selection_equals_rank_order(dtype, largest, k, n, device, monkeypatch):
    assert k <= indexing.SELECT_MAX_K and 4 * k <= n  # the selection form
    x = RNG.integers(-3, 4, (12, n)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[RNG.random(x.shape) < 0.15] = np.nan
        x[0], x[1], x[3] = np.nan, np.inf, -np.inf
        x[2, :-2] = np.nan
    else:
        x[0, :3], x[1] = np.iinfo(dtype).min, np.iinfo(dtype).min
    elem = {np.float32: TP.FLOAT, np.float64: TP.DOUBLE, np.int64: TP.INT64, np.int32: TP.INT32}[dtype]
    model = _model(elem, largest, k, n)
    v, i = lo.compile(model, device=device)({"x": x})
    want = _stable(x, k, largest)
    assert np.array_equal(i, want)
    np.testing.assert_array_equal(v, np.take_along_axis(x, want, -1))
    monkeypatch.setattr(indexing, "SELECT_MAX_K", 0)  # the rank form gives the same
    v2, i2 = lo.compile(model, device="numpy")({"x": x})
    assert np.array_equal(i2, i)
