"""auto_pad SAME_UPPER / SAME_LOWER on symbolic spatial dims (H, W) for every op that has it.

With stride 1 the padding is static (dilation * (kernel - 1)); with a stride it depends on the
size (total max((ceil(n/s)-1)*s + d*(k-1) + 1 - n, 0)) and is a symbolic pad the kernels evaluate
per call: one compiled graph serves every size. A stride wider than the window, where the total
clips at 0, compiles per input shape. Compared with onnxruntime at odd and even sizes; dilated
cases against onnxruntime on the same op with the explicit pads the ONNX spec defines (onnxruntime
refuses a dilated SAME Conv, and its dilated SAME pools size their padding without the dilation).
"""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import luminal.onnx as lo

SIZES = [(7, 8), (8, 7), (9, 12), (6, 5)]
DEVICES = ["numpy", "cpu"]


def _spec_pads(n, k, s, d, upper):
    total = max((-(-n // s) - 1) * s + d * (k - 1) + 1 - n, 0)
    small = total // 2
    return (small, total - small) if upper else (total - small, small)


def _model(op, auto_pad, strides, dilations, hw=("H", "W"), pads=None):
    rng = np.random.default_rng(3)
    pad_attrs = {"auto_pad": auto_pad} if pads is None else {"pads": pads}
    attrs = dict(strides=list(strides), **pad_attrs)
    if dilations != (1, 1):
        attrs["dilations"] = list(dilations)
    x_type, inputs, inits = TensorProto.FLOAT, ["x"], []
    if op in ("Conv", "ConvTranspose"):
        shape = (4, 3, 3, 3) if op == "Conv" else (3, 4, 3, 3)
        inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), "w"),
                 numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")]
        inputs += ["w", "b"]
    elif op == "ConvInteger":
        x_type = TensorProto.UINT8
        inits = [numpy_helper.from_array(rng.integers(0, 255, (4, 3, 3, 3)).astype(np.uint8), "w"),
                 numpy_helper.from_array(np.array(128, np.uint8), "xz"), numpy_helper.from_array(np.array(3, np.uint8), "wz")]
        inputs += ["w", "xz", "wz"]
    elif op == "QLinearConv":
        x_type = TensorProto.UINT8
        inits = [numpy_helper.from_array(np.array(0.05, np.float32), "xs"), numpy_helper.from_array(np.array(120, np.uint8), "xz"),
                 numpy_helper.from_array(rng.integers(-64, 64, (4, 3, 3, 3)).astype(np.int8), "w"),  # 7 bits: see test_onnx_quant_contrib._ints
                 numpy_helper.from_array(np.array([0.01, 0.02, 0.03, 0.015], np.float32), "ws"),
                 numpy_helper.from_array(np.zeros(4, np.int8), "wz"),
                 numpy_helper.from_array(np.array(0.2, np.float32), "ys"), numpy_helper.from_array(np.array(128, np.uint8), "yz")]
        inputs = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    else:
        attrs["kernel_shape"] = [3, 3]
    node = helper.make_node(op, inputs, ["y"], **attrs)
    out_type = {"ConvInteger": TensorProto.INT32, "QLinearConv": TensorProto.UINT8}.get(op, TensorProto.FLOAT)
    graph = helper.make_graph([node], "same", [helper.make_tensor_value_info("x", x_type, [1, 3, *hw])],
                              [helper.make_tensor_value_info("y", out_type, [1, None, None, None])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _input(op, h, w, rng):
    if op in ("ConvInteger", "QLinearConv"):
        return rng.integers(0, 256, (1, 3, h, w)).astype(np.uint8)
    return rng.standard_normal((1, 3, h, w)).astype(np.float32)


def _ort(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


CASES = [  # op, auto_pad, strides, dilations
    ("Conv", "SAME_UPPER", (1, 1), (1, 1)),
    ("Conv", "SAME_LOWER", (2, 2), (1, 1)),
    ("Conv", "SAME_UPPER", (2, 3), (1, 1)),
    ("Conv", "SAME_LOWER", (2, 1), (2, 2)),
    ("Conv", "SAME_UPPER", (1, 2), (2, 1)),
    ("ConvInteger", "SAME_UPPER", (2, 2), (1, 1)),
    ("QLinearConv", "SAME_LOWER", (2, 2), (1, 1)),
    ("MaxPool", "SAME_UPPER", (2, 2), (1, 1)),
    ("MaxPool", "SAME_LOWER", (2, 1), (2, 2)),
    ("AveragePool", "SAME_LOWER", (2, 2), (1, 1)),
    ("AveragePool", "SAME_UPPER", (1, 3), (2, 1)),
    ("LpPool", "SAME_UPPER", (2, 2), (1, 1)),
    ("LpPool", "SAME_LOWER", (1, 1), (1, 1)),
    ("ConvTranspose", "SAME_UPPER", (2, 2), (1, 1)),
    ("ConvTranspose", "SAME_LOWER", (2, 1), (1, 1)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,auto_pad,strides,dilations", CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_same_pad_on_symbolic_dims_equals_onnxruntime(op, auto_pad, strides, dilations, device):
    model = lo.compile(_model(op, auto_pad, strides, dilations), device=device)
    rng = np.random.default_rng(0)
    for h, w in SIZES:
        x = _input(op, h, w, rng)
        if dilations == (1, 1):
            want = _ort(_model(op, auto_pad, strides, dilations), x)
        else:  # the spec's pads for this size, explicit
            pairs = [_spec_pads(n, 3, s, d, auto_pad == "SAME_UPPER") for n, s, d in zip((h, w), strides, dilations)]
            want = _ort(_model(op, auto_pad, strides, dilations, pads=[p[0] for p in pairs] + [p[1] for p in pairs]), x)
        (got,) = model(x)
        assert got.shape == want.shape, (h, w)
        if op == "QLinearConv":  # onnxruntime requantizes with a float32 multiplier, luminal in float64 as
            # onnx's reference: a result near a .5 tie may round the other way; static shapes give the same
            (static,) = lo.compile(_model(op, auto_pad, strides, dilations, hw=(h, w)), device=device)(x)
            np.testing.assert_array_equal(got, static)
            assert np.abs(got.astype(np.int32) - want).max() <= 1
        elif op in ("ConvInteger", "MaxPool"):
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert model.shape_inputs == (), "a SAME pad on a symbolic dim compiled per shape"


@pytest.mark.parametrize("device", DEVICES)
def test_same_pad_with_stride_wider_than_window_compiles_per_shape(device):
    """Stride 4 over a 3-wide window: the total pad is 0 for some sizes and would crop for
    none, but written as one expression it goes negative; such an axis compiles per shape."""
    proto = _model("Conv", "SAME_UPPER", (4, 1), (1, 1))
    model = lo.compile(proto, device=device)
    rng = np.random.default_rng(1)
    for h, w in [(9, 5), (10, 6), (12, 7), (13, 5)]:
        x = _input("Conv", h, w, rng)
        np.testing.assert_allclose(model(x)[0], _ort(proto, x), rtol=1e-5, atol=1e-5)
    assert model.shape_inputs == ("x",)


@pytest.mark.parametrize("device", DEVICES)
def test_same_pad_stride_two_stack_feeds_a_residual_add(device):
    """Two stride-2 SAME convs, one 3x3 and one 1x1, summed: both branches' sizes are
    ceiling(n/2), so the Add needs no per-shape compile."""
    rng = np.random.default_rng(2)
    w3 = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w3")
    w1 = numpy_helper.from_array((rng.standard_normal((4, 3, 1, 1)) * 0.3).astype(np.float32), "w1")
    w5 = numpy_helper.from_array((rng.standard_normal((4, 4, 5, 5)) * 0.2).astype(np.float32), "w5")
    nodes = [helper.make_node("Conv", ["x", "w3"], ["a"], auto_pad="SAME_UPPER", strides=[2, 2]),
             helper.make_node("Conv", ["x", "w1"], ["b"], auto_pad="SAME_LOWER", strides=[2, 2]),
             helper.make_node("Add", ["a", "b"], ["c"]),
             helper.make_node("Conv", ["c", "w5"], ["y"], auto_pad="SAME_LOWER", strides=[2, 2])]
    graph = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, None, None])], [w3, w1, w5])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model = lo.compile(proto, device=device)
    for h, w in [(15, 16), (16, 15), (21, 10)]:
        x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
        np.testing.assert_allclose(model(x)[0], _ort(proto, x), rtol=1e-5, atol=1e-5)
    assert model.shape_inputs == ()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_same_pad_max_pool_indices(auto_pad, device):
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], auto_pad=auto_pad, strides=[2, 2], kernel_shape=[3, 3])
    graph = helper.make_graph([node], "mp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, None, None]),
                               helper.make_tensor_value_info("i", TensorProto.INT64, [1, 3, None, None])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model = lo.compile(proto, device=device)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    for h, w in SIZES:
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        for got, want in zip(model(x), sess.run(None, {"x": x})):
            np.testing.assert_array_equal(got, want)
    assert model.shape_inputs == ()
