"""`where` fused into one elementwise kernel when its result is stacked again at once.

tf2onnx writes LeakyRelu followed by Max with a constant (openWakeWord's embedding model, 19
times): the builder's where (a Gather from the stacked pair) then feeds Max's stack directly, its
reshape and unsqueeze cancelling, so no view sits on the Gather. The Select rule must still find
it (`patterns.select_operands`), and the views left around the Select must compose rather than
be copied (`extract.instantiate`): the whole chain is one FusedElementwise, no Concat, Gather or
Contiguous, the bias add (read three times by the LeakyRelu) inside it too (`regions.SHARED_OK`),
with the NumPy runtime's values on NaN, +-inf and -0.0.
"""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import luminal.onnx as lo
from luminal.hlir.ops import Op, toposort

SHAPE = ["n", 3, 5, 37]  # rows of 37: vector lanes and a scalar tail


def _input(batch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 3, 5, 37)).astype(np.float32) * 4
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40], np.float32)
    flat = x.reshape(-1)
    flat[:8] = special
    flat[-8:] = special
    flat[rng.choice(flat.size, 64, replace=False)] = np.resize(special, 64)
    return x


def _model(nodes, inits=()):
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TP.FLOAT, SHAPE)],
                          [oh.make_tensor_value_info("y", TP.FLOAT, SHAPE)], list(inits))
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


CASES = {
    # tf2onnx: conv bias, LeakyRelu, Max with a 0-d-like constant (openWakeWord)
    "leaky_relu_max": ([oh.make_node("Add", ["x", "b"], ["t"]), oh.make_node("LeakyRelu", ["t"], ["l"], alpha=0.2),
                        oh.make_node("Max", ["l", "m"], ["y"])],
                       [_const("b", np.linspace(-1, 1, 37)), _const("m", np.full((1, 1, 1, 1), -0.5))],
                       lambda x: np.maximum(np.where(x + np.linspace(-1, 1, 37, dtype=np.float32) >= 0,
                                                     x + np.linspace(-1, 1, 37, dtype=np.float32),
                                                     (x + np.linspace(-1, 1, 37, dtype=np.float32)) * np.float32(0.2)),
                                            np.float32(-0.5))),
    "prelu_min": ([oh.make_node("PRelu", ["x", "s"], ["p"]), oh.make_node("Min", ["p", "m"], ["y"])],
                  [_const("s", np.array([0.1, 0.25, 3.0]).reshape(3, 1, 1)), _const("m", np.full((1,), 2.5))],
                  lambda x: np.minimum(np.where(x >= 0, x, x * np.array([0.1, 0.25, 3.0], np.float32).reshape(3, 1, 1)),
                                       np.float32(2.5))),
    "leaky_relu": ([oh.make_node("LeakyRelu", ["x"], ["y"], alpha=0.01)], [],
                   lambda x: np.where(x >= 0, x, x * np.float32(0.01))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_where_then_stack_is_one_kernel(name):
    nodes, inits, reference = CASES[name]
    model = _model(nodes, inits)
    compiled = lo.compile(model, device="cpu")
    spec = lo.compile(model, device="numpy")
    for batch in (1, 2):
        x = _input(batch)
        got, want = compiled(x)[0], spec(x)[0]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        # to rounding: the NumPy runtime computes a region in float64 and rounds once (the bias add
        # is inside the region), the C kernel in float32
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
        ref = reference(x)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)
        assert np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(ref[~np.isnan(ref)]))  # -0.0 kept
    ops = [n.op for n in toposort(compiled.compiled.outputs)]
    assert Op.GATHER not in ops and Op.CONCAT not in ops and Op.CONTIGUOUS not in ops, ops
    assert ops.count(Op.FUSED_ELEMENTWISE) == 1, ops
    assert Op.ADD not in ops, ops  # the bias add, read three times by the LeakyRelu, is inside the kernel


def test_a_shared_add_read_outside_the_region_stays_a_kernel():
    """The bias add is also an output: it is computed once, into its own buffer, and the region
    reads it (`regions.SHARED_OK` joins a shared op only when every use is inside one region)."""
    nodes = [oh.make_node("Add", ["x", "b"], ["t"]), oh.make_node("LeakyRelu", ["t"], ["y"], alpha=0.2)]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TP.FLOAT, SHAPE)],
                          [oh.make_tensor_value_info("y", TP.FLOAT, SHAPE), oh.make_tensor_value_info("t", TP.FLOAT, SHAPE)],
                          [_const("b", np.linspace(-1, 1, 37))])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    compiled, spec = lo.compile(model, device="cpu"), lo.compile(model, device="numpy")
    x = _input(2)
    for got, want in zip(compiled(x), spec(x)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    ops = [n.op for n in toposort(compiled.compiled.outputs)]
    assert ops.count(Op.ADD) == 1 and ops.count(Op.FUSED_ELEMENTWISE) == 1, ops
