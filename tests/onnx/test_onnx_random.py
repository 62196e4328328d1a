"""ONNX's random ops on luminal's Philox generator (`luminal/frontends/onnx/ops_random.py`):
RandomUniform, RandomNormal, their Like forms, Bernoulli and training-mode Dropout, by dtype,
shape and distribution; a `seed` attribute repeats, no seed draws afresh per call. The official
node tests of these ops (listed in expected_failures.txt: their values are onnx's NumPy ones)
compile and give outputs of the right shapes and dtypes."""

import functools

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx.backend.test.case.node import collect_testcases

import luminal

N = 20_000


def _model():
    nodes = [
        helper.make_node("RandomUniform", [], ["u"], shape=[N], low=-1.0, high=3.0),
        helper.make_node("RandomNormal", [], ["n"], shape=[N], mean=2.0, scale=0.5, dtype=T.DOUBLE),
        helper.make_node("RandomUniformLike", ["x"], ["ul"], seed=3.0),
        helper.make_node("RandomNormalLike", ["x"], ["nl"], dtype=T.FLOAT16),
        helper.make_node("Bernoulli", ["p"], ["b"]),
        helper.make_node("Dropout", ["x", "r", "t"], ["d", "m"]),
    ]
    inits = [helper.make_tensor("r", T.FLOAT, [], [0.25]), helper.make_tensor("t", T.BOOL, [], [True])]
    outs = [("u", T.FLOAT, [N]), ("n", T.DOUBLE, [N]), ("ul", T.FLOAT, ["k"]), ("nl", T.FLOAT16, ["k"]),
            ("b", T.FLOAT, [N]), ("d", T.FLOAT, ["k"]), ("m", T.BOOL, ["k"])]
    graph = helper.make_graph(nodes, "random", [helper.make_tensor_value_info("x", T.FLOAT, ["k"]),
                                                helper.make_tensor_value_info("p", T.FLOAT, [N])],
                              [helper.make_tensor_value_info(*o) for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_random_ops(device):
    model = luminal.onnx.compile(_model(), device=device)
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    p = np.full(N, 0.3, np.float32)
    first, second = model(x, p), model(x, p)
    u, n, ul, nl, b, d, m = first
    assert [o.dtype for o in first] == [np.float32, np.float64, np.float32, np.float16, np.float32, np.float32, np.bool_]
    assert -1 <= u.min() and u.max() < 3 and abs(u.mean() - 1.0) < 0.03
    assert abs(n.mean() - 2.0) < 0.02 and abs(n.std() - 0.5) < 0.02
    assert 0 <= ul.min() and ul.max() < 1 and abs(nl.astype(np.float64).std() - 1.0) < 0.03
    assert set(np.unique(b)) <= {0.0, 1.0} and abs(b.mean() - 0.3) < 0.02
    assert abs(m.mean() - 0.75) < 0.02
    np.testing.assert_array_equal(d, np.where(m, x * np.float32(1 / 0.75), x * np.float32(0)))
    np.testing.assert_array_equal(ul, second[2])  # seed=3.0: the same numbers at every call
    assert all((a != c).any() for a, c in zip(first[:2], second[:2]))  # no seed: drawn per call
    assert model(x[:100], p)[2].shape == (100,)  # a symbolic length


@functools.cache
def _node_cases() -> dict:
    return {c.name: c for c in collect_testcases(None)}


@pytest.mark.parametrize("name, outputs", [
    ("test_bernoulli", [((10,), np.float64)]), ("test_bernoulli_seed", [((10,), np.float32)]),
    ("test_bernoulli_double_expanded", [((10,), np.float64)]),
    ("test_training_dropout_mask", [((3, 4, 5), np.float32), ((3, 4, 5), np.bool_)]),
    ("test_training_dropout_default", [((3, 4, 5), np.float32)])])
def test_official_node_tests_compile(name, outputs):
    case = _node_cases()[name]
    inputs, _ = case.data_sets[0]
    got = luminal.onnx.compile(case.model, device="numpy")(*inputs)
    assert [(o.shape, o.dtype) for o in got] == outputs
