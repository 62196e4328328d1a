"""ONNX Div by an initializer (a scalar, a per-row array) divides on every device: torch's
quotient bit for bit (x / c rounded once), f32 and f16, the default (optimized) compile."""

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import luminal.onnx as lonnx
from luminal import devices

DEVICES = ["numpy", "cpu"] + (["cuda-emulator"] if devices.get("cuda-emulator").available else [])
ELEM = {np.float32: TP.FLOAT, np.float16: TP.FLOAT16}


def _div_model(c: np.ndarray, shape) -> onnx.ModelProto:
    elem = ELEM[c.dtype.type]
    graph = oh.make_graph([oh.make_node("Div", ["x", "c"], ["y"])], "div",
                          [oh.make_tensor_value_info("x", elem, shape)], [oh.make_tensor_value_info("y", elem, shape)],
                          [numpy_helper.from_array(c, "c")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)], ir_version=8)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("divisor", ["scalar", "rows"])
def test_div_by_an_initializer_is_torchs_bit_for_bit(device, dtype, divisor):
    c = np.array(3.0, dtype) if divisor == "scalar" else np.array([[3.0], [0.1], [-7.0], [6.0]], dtype)
    x = np.random.default_rng(2).standard_normal((4, 250)).astype(dtype)
    x[0, :3] = [np.finfo(dtype).max, np.nan, -0.0]
    x[1, 0] = 65504 if dtype is np.float16 else 3e38
    (got,) = lonnx.compile(_div_model(c, [4, 250]), device=device)({"x": x})
    want = (torch.from_numpy(x) / torch.from_numpy(c)).numpy()
    np.testing.assert_array_equal(got, want)
    number = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[number]), np.signbit(want[number]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("divisor", ["runtime_scalar", "row_sum", "column"])
def test_div_by_a_broadcast_runtime_tensor_is_ieee_division(device, dtype, divisor):
    """A divisor computed at run time and broadcast (a scalar input, a row's sum, a column): the
    quotient rounded once, as onnxruntime and torch divide; the reciprocal computed apart and
    multiplied in was 1 ulp off in about a quarter of the elements (a quantized model's bias
    scale: ddddocr's common_old.onnx)."""
    elem = {np.float32: TP.FLOAT, np.float64: TP.DOUBLE}[dtype]
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((16, 64)) * 1000).astype(dtype)
    shapes = {"runtime_scalar": [], "row_sum": None, "column": [16, 1]}
    if divisor == "row_sum":
        nodes = [oh.make_node("ReduceSum", ["x", "axes"], ["d"], keepdims=1), oh.make_node("Div", ["x", "d"], ["y"])]
        inputs, inits = [oh.make_tensor_value_info("x", elem, [16, 64])], [numpy_helper.from_array(np.array([1]), "axes")]
        feeds = {"x": x}
    else:
        nodes = [oh.make_node("Div", ["x", "d"], ["y"])]
        inputs = [oh.make_tensor_value_info("x", elem, [16, 64]), oh.make_tensor_value_info("d", elem, shapes[divisor])]
        inits = []
        feeds = {"x": x, "d": rng.uniform(1e-3, 1e-1, shapes[divisor]).astype(dtype)}
    graph = oh.make_graph(nodes, "div", inputs, [oh.make_tensor_value_info("y", elem, [16, 64])], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)], ir_version=8)
    compiled = lonnx.compile(model, device=device)
    got = compiled(feeds)[0]
    d = feeds.get("d")
    if d is None:  # the row sums as luminal computed them (summation order is not the question here)
        graph_d = oh.make_graph(nodes[:1], "sum", inputs, [oh.make_tensor_value_info("d", elem, [16, 1])], inits)
        d = lonnx.compile(oh.make_model(graph_d, opset_imports=[oh.make_opsetid("", 14)], ir_version=8),
                          device=device)(feeds)[0]
    assert got.tobytes() == (x / d).tobytes()
