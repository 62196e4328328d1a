"""GEMMs of 2 to 8 columns (the prelude's few-rows loop on C^T = B^T A^T: each row of A dotted
with the few rows of B^T, A's rows split across the team when large; B plain is packed first):
the NumPy runtime's values for B transposed, plain and strided, NaN/inf propagated, the row
split, f64, set_precision("float64"), and the strided-conv form that reaches it (an STFT as a
Conv1d of one input channel, a 512-tap kernel and hop 160, as openWakeWord's melspectrogram)."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import luminal as lm
import luminal.onnx as lo
from luminal.kernels.cpu import build

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9])
def test_few_columns_match_numpy(n):
    g = lm.Graph("skinny")
    a, b, bt = g.input("a", ("m", 40)), g.input("b", (40, n)), g.input("bt", (n, 40))
    g.output(a @ b, "plain")  # B's columns packed as rows
    g.output(a @ bt.T, "transposed")  # B^T's rows read in place
    g.output(a[:, ::2] @ bt[:, 1::2].T, "strided")  # copies of strided operands first
    g.output(a.cast(lm.f64) @ bt.cast(lm.f64).T, "f64")
    cpu, ref = g.compile(device="cpu"), g.compile(device="numpy")
    rng = np.random.default_rng(n)
    for m in (16, 33, 2048 * (n == 4)):  # 2048 x 4 x 40: rows split across the team
        if not m:
            continue
        feeds = {"a": rng.integers(-3, 4, (m, 40)).astype(np.float32), "b": rng.integers(-3, 4, (40, n)).astype(np.float32),
                 "bt": rng.integers(-3, 4, (n, 40)).astype(np.float32)}
        for (name, _), out, want in zip(g.outputs, cpu(feeds), ref(feeds)):
            assert out.dtype == want.dtype and out.shape == want.shape, name
            np.testing.assert_array_equal(out, want, err_msg=f"{name} m={m}")  # small integers: exact
        feeds["a"][3, 5], feeds["bt"][1, 7], feeds["b"][9, 0] = np.nan, np.inf, -np.inf
        for (name, _), out, want in zip(g.outputs, cpu(feeds), ref(feeds)):
            np.testing.assert_array_equal(np.isnan(out), np.isnan(want), err_msg=f"{name} NaN m={m}")
            np.testing.assert_array_equal(out[~np.isnan(out)], want[~np.isnan(want)], err_msg=f"{name} inf m={m}")


def test_float64_precision_in_few_columns():
    """1e8 + 1 - 1e8: 1 under set_precision("float64") (f64 accumulation), 0 in f32 in any order
    of summation (1 - 1e8 rounds to -1e8 in f32, as 1e8 + 1 to 1e8)."""
    g = lm.Graph()
    a, v = g.input("a", (32, 48)), g.input("v", (48, 3))
    g.output(a @ v)
    cpu = g.compile(device="cpu")
    row = np.zeros(48, np.float32)
    row[[0, 16, 32]] = [1e8, 1.0, -1e8]  # one vector lane at every width (8 or 16 floats)
    feeds = {"a": np.tile(row, (32, 1)), "v": np.ones((48, 3), np.float32)}
    np.testing.assert_array_equal(cpu(feeds)[0], np.zeros((32, 3), np.float32))
    previous = lm.set_precision("float64")
    try:
        np.testing.assert_array_equal(cpu(feeds)[0], np.ones((32, 3), np.float32))
    finally:
        lm.set_precision(previous)


def test_stft_conv_of_one_channel_is_a_gemm_with_onnxruntime_values():
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(3)
    w = rng.standard_normal((257, 1, 512)).astype(np.float32) * 0.05
    node = oh.make_node("Conv", ["x", "w"], ["y"], strides=[160], kernel_shape=[512])
    graph = oh.make_graph([node], "stft", [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 1, "s"])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, ["n", 257, "t"])], [numpy_helper.from_array(w, "w")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8)
    compiled = lo.compile(model, device="cpu")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n, s in [(1, 1280), (2, 1760), (1, 512)]:
        x = (rng.standard_normal((n, 1, s)) * 1000).astype(np.float32)
        np.testing.assert_allclose(compiled(x)[0], sess.run(None, {"x": x})[0], rtol=1e-4, atol=2e-3)
    from luminal.hlir.ops import Op, toposort

    ops = [nd.op for nd in toposort(compiled.compiled.outputs)]
    assert ops.count(Op.MAT_MUL) == 1 and Op.KAHAN_SUM not in ops and Op.WINDOW_REDUCE not in ops, ops
