"""The com.microsoft quantized ops onnxruntime's quantization tool writes (DynamicQuantizeMatMul,
MatMulIntegerToFloat, QGemm, QAttention, DynamicQuantizeLSTM), each on small random models
against onnxruntime's CPU kernels on `numpy` and `cpu`: integer outputs exactly, float ones within
1e-5 relative (of the output's magnitude); per-column scales and zero points where the op has
them. Then models `onnxruntime.quantization.quantize_dynamic` writes, as written and as
onnxruntime's optimizer fuses them (its saved optimized model holds the fused contrib ops).
"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import luminal.onnx as lo

DEVICES = ["numpy", "cpu"]
MS = "com.microsoft"


def _vi(name, t, shape):
    return oh.make_tensor_value_info(name, t, shape)


def _model(nodes, inputs, outputs, inits=()):
    graph = oh.make_graph(nodes, "q", inputs, outputs, [numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(MS, 1)], ir_version=10)


def _ort(model, feeds, optimized=False, threads=0):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    if not optimized:  # the op as written, not a fusion onnxruntime might substitute
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def _assert_close(got, want, what=""):
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    if np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        scale = float(np.abs(want).max()) if want.size else 0.0
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale + 1e-7, err_msg=what)


def _check(model, feeds, device, ort_optimized=False, threads=0):
    want = _ort(model, feeds, ort_optimized, threads)
    got = lo.compile(model, device=device)(feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        _assert_close(g, w, f"output {i}")
    return got


def _ints(rng, shape, dtype):
    """Random integers of `dtype`; int8 ones in [-64, 63], as `quantize_dynamic(reduce_range=True)`
    writes weights: onnxruntime's u8 x s8 kernels on x86 without VNNI (AVX2, AVX-512 before VNNI)
    add pairs of products in int16 with saturation (vpmaddubsw), so full-range int8 operands make
    its answer depend on the CPU. luminal's exact products over the full range are checked
    against integer arithmetic (`test_full_range_int8_products_are_exact`)."""
    if dtype is np.int8:
        return rng.integers(-64, 64, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def _onnx_type(dtype):
    return {np.uint8: TP.UINT8, np.int8: TP.INT8}[dtype]


# --- DynamicQuantizeMatMul --------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("b_type,per_column,zp,bias", [
    (np.int8, False, False, False),
    (np.int8, True, False, True),
    (np.uint8, False, True, True),
    (np.uint8, True, True, False),
])
def test_dynamic_quantize_matmul(b_type, per_column, zp, bias, device):
    rng = np.random.default_rng(1)
    k, n = 16, 8
    inits = [("B", _ints(rng, (k, n), b_type)),
             ("b_scale", (rng.random(n if per_column else ()) * 0.02 + 0.001).astype(np.float32))]
    ins = ["A", "B", "b_scale"]
    if zp:
        inits.append(("b_zp", _ints(rng, (n,) if per_column else (), b_type)))
        ins.append("b_zp")
    if bias:
        inits.append(("bias", rng.standard_normal(n).astype(np.float32)))
        ins += [""] * (4 - len(ins)) + ["bias"]
    node = oh.make_node("DynamicQuantizeMatMul", ins, ["Y"], domain=MS)
    model = _model([node], [_vi("A", TP.FLOAT, ["batch", 3, k])], [_vi("Y", TP.FLOAT, [None, 3, n])], inits)
    for batch in (1, 2):
        a = (rng.standard_normal((batch, 3, k)) * 2 + 0.5).astype(np.float32)
        _check(model, {"A": a}, device)


@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_quantize_matmul_all_positive_and_all_zero_input(device):
    """The range always includes 0: an all-positive A has zero point 0, an all-zero A scale 1."""
    rng = np.random.default_rng(2)
    inits = [("B", _ints(rng, (5, 4), np.int8)), ("b_scale", np.float32(0.01))]
    node = oh.make_node("DynamicQuantizeMatMul", ["A", "B", "b_scale"], ["Y"], domain=MS)
    model = _model([node], [_vi("A", TP.FLOAT, [3, 5])], [_vi("Y", TP.FLOAT, [3, 4])], inits)
    _check(model, {"A": rng.random((3, 5)).astype(np.float32) + 1.0}, device)
    _check(model, {"A": np.zeros((3, 5), np.float32)}, device)


# --- MatMulIntegerToFloat ---------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("a_type,b_type,per_column", [(np.uint8, np.int8, True), (np.int8, np.int8, False),
                                                       (np.uint8, np.uint8, True)])
def test_matmul_integer_to_float(a_type, b_type, per_column, device):
    rng = np.random.default_rng(3)
    k, n = 12, 6
    inits = [("B", _ints(rng, (k, n), b_type)), ("a_scale", np.float32(0.037)),
             ("b_scale", (rng.random(n if per_column else ()) * 0.02 + 0.001).astype(np.float32)),
             ("a_zp", _ints(rng, (), a_type)), ("b_zp", _ints(rng, (n,) if per_column else (), b_type)),
             ("bias", rng.standard_normal(n).astype(np.float32))]
    node = oh.make_node("MatMulIntegerToFloat", ["A", "B", "a_scale", "b_scale", "a_zp", "b_zp", "bias"], ["Y"], domain=MS)
    model = _model([node], [_vi("A", _onnx_type(a_type), [2, 4, k])], [_vi("Y", TP.FLOAT, [2, 4, n])], inits)
    _check(model, {"A": _ints(rng, (2, 4, k), a_type)}, device)


@pytest.mark.parametrize("device", DEVICES)
def test_full_range_int8_products_are_exact(device):
    """u8 x s8 at the extremes (255 x -128, 255 x 127, every pair's sum past int16), against
    integer arithmetic in int64, not against onnxruntime (whose AVX2 kernels saturate here)."""
    rng = np.random.default_rng(5)
    k, n = 16, 5
    b = rng.choice(np.array([-128, -127, 127, 126, 0, -1], np.int8), (k, n))
    a = rng.choice(np.array([255, 254, 0, 1], np.uint8), (3, k))
    a_zp, b_zp, a_scale, b_scale = np.uint8(3), np.int8(-2), np.float32(0.037), np.float32(0.011)
    node = oh.make_node("MatMulIntegerToFloat", ["A", "B", "a_scale", "b_scale", "a_zp", "b_zp"], ["Y"], domain=MS)
    model = _model([node], [_vi("A", TP.UINT8, [3, k])], [_vi("Y", TP.FLOAT, [3, n])],
                   [("B", b), ("a_scale", a_scale), ("b_scale", b_scale), ("a_zp", a_zp), ("b_zp", b_zp)])
    exact = (a.astype(np.int64) - int(a_zp)) @ (b.astype(np.int64) - int(b_zp))
    assert np.abs(exact).max() > 2 * 32767  # past what an int16 pair sum holds
    want = (exact.astype(np.float64) * (float(a_scale) * float(b_scale))).astype(np.float32)
    got = lo.compile(model, device=device)({"A": a})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


# --- QGemm ------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out,trans_a,trans_b,per_column,with_c", [
    ("float", 0, 0, False, False),
    ("float", 1, 1, True, True),
    (np.uint8, 0, 1, True, True),
    (np.int8, 1, 0, False, False),
    (np.uint8, 0, 0, False, True),
])
def test_qgemm(out, trans_a, trans_b, per_column, with_c, device):
    rng = np.random.default_rng(4)
    m, k, n = 5, 12, 7
    a_type, b_type = (np.int8 if out is np.int8 else np.uint8), np.int8  # onnxruntime: A's type is Y's
    inits = [("a_scale", np.float32(0.05)), ("a_zp", np.array(121 if a_type is np.uint8 else -7, a_type)),
             ("B", _ints(rng, (n, k) if trans_b else (k, n), b_type)),
             ("b_scale", (rng.random(n if per_column else ()) * 0.02 + 0.005).astype(np.float32)),
             ("b_zp", _ints(rng, (n,) if per_column else (), b_type))]
    ins = ["A", "a_scale", "a_zp", "B", "b_scale", "b_zp"]
    ins.append("C" if with_c else "")
    if with_c:
        inits.append(("C", rng.integers(-5000, 5000, (n,)).astype(np.int32)))
    out_type = TP.FLOAT
    if out != "float":
        inits += [("y_scale", np.float32(0.3)), ("y_zp", np.array(3 if out is np.uint8 else -2, out))]
        ins += ["y_scale", "y_zp"]
        out_type = _onnx_type(out)
    node = oh.make_node("QGemm", ins, ["Y"], domain=MS, alpha=0.75, transA=trans_a, transB=trans_b)
    model = _model([node], [_vi("A", _onnx_type(a_type), [k, m] if trans_a else [m, k])], [_vi("Y", out_type, [m, n])], inits)
    _check(model, {"A": _ints(rng, (k, m) if trans_a else (m, k), a_type)}, device)


# --- QAttention -------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask,unidirectional,per_column", [(None, 0, False), ("lengths", 0, True),
                                                             ("raw", 1, False), (None, 1, True)])
def test_qattention(mask, unidirectional, per_column, device):
    rng = np.random.default_rng(5)
    b, s, h, heads = 2, 5, 8, 2
    inits = [("w", _ints(rng, (h, 3 * h), np.int8)), ("bias", (rng.standard_normal(3 * h) * 0.1).astype(np.float32)),
             ("x_scale", np.float32(0.02)),
             ("w_scale", (rng.random(3 * h if per_column else ()) * 0.004 + 0.001).astype(np.float32)),
             ("x_zp", np.uint8(128)), ("w_zp", _ints(rng, (3 * h,) if per_column else (), np.int8))]
    ins = ["x", "w", "bias", "x_scale", "w_scale", "mask" if mask else "", "x_zp", "w_zp"]
    inputs = [_vi("x", TP.UINT8, [b, s, h])]
    feeds = {"x": _ints(rng, (b, s, h), np.uint8)}
    if mask == "lengths":
        inputs.append(_vi("mask", TP.INT32, [b]))
        feeds["mask"] = np.array([5, 3], np.int32)
    elif mask == "raw":
        inputs.append(_vi("mask", TP.INT32, [b, s]))
        feeds["mask"] = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 1, 0]], np.int32)
    node = oh.make_node("QAttention", ins, ["y", "present"], domain=MS, num_heads=heads, unidirectional=unidirectional)
    model = _model([node], inputs, [_vi("y", TP.FLOAT, [b, s, h]), _vi("present", TP.FLOAT, [2, b, heads, s, h // heads])], inits)
    _check(model, feeds, device)


# --- DynamicQuantizeLSTM ----------------------------------------------------------------------
def _qlstm_model(rng, seq, batch, inp, hidden, direction, per_channel, w_type, extras):
    dirs = 2 if direction == "bidirectional" else 1
    g = 4 * hidden
    shape = (dirs, g) if per_channel else (dirs,)
    inits = [("W", _ints(rng, (dirs, inp, g), w_type)), ("R", _ints(rng, (dirs, hidden, g), w_type)),
             ("W_scale", (rng.random(shape) * 0.01 + 0.002).astype(np.float32)),
             ("W_zp", np.full(shape, 0 if w_type is np.int8 else 128, w_type)),
             ("R_scale", (rng.random(shape) * 0.01 + 0.002).astype(np.float32)),
             ("R_zp", np.full(shape, 0 if w_type is np.int8 else 128, w_type))]
    ins = ["X", "W", "R", "", "", "", "", "", "W_scale", "W_zp", "R_scale", "R_zp"]
    if "bias" in extras:
        inits.append(("B", (rng.standard_normal((dirs, 8 * hidden)) * 0.1).astype(np.float32)))
        ins[3] = "B"
    if "initial" in extras:
        inits += [("h0", (rng.standard_normal((dirs, batch, hidden)) * 0.5).astype(np.float32)),
                  ("c0", (rng.standard_normal((dirs, batch, hidden)) * 0.5).astype(np.float32))]
        ins[5], ins[6] = "h0", "c0"
    node = oh.make_node("DynamicQuantizeLSTM", ins, ["Y", "Y_h", "Y_c"], domain=MS, hidden_size=hidden,
                        direction=direction)
    outs = [_vi("Y", TP.FLOAT, [seq, dirs, batch, hidden])] + [_vi(n, TP.FLOAT, [dirs, batch, hidden]) for n in ("Y_h", "Y_c")]
    return _model([node], [_vi("X", TP.FLOAT, [seq, batch, inp])], outs, inits)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("direction,per_channel,w_type,extras,batch", [
    ("forward", False, np.int8, (), 2),
    ("forward", True, np.int8, ("bias", "initial"), 3),
    ("reverse", False, np.uint8, ("bias",), 1),
    ("bidirectional", True, np.int8, ("bias", "initial"), 2),
])
def test_dynamic_quantize_lstm(direction, per_channel, w_type, extras, batch, device):
    """Each step quantizes H per batch row: onnxruntime does so when it has a thread per row
    (with fewer threads, per chunk of rows: its result depends on its thread count)."""
    rng = np.random.default_rng(6)
    seq, inp, hidden = 4, 5, 6
    model = _qlstm_model(rng, seq, batch, inp, hidden, direction, per_channel, w_type, extras)
    _check(model, {"X": rng.standard_normal((seq, batch, inp)).astype(np.float32)}, device, threads=max(batch, 2))


# --- models quantize_dynamic writes -----------------------------------------------------------
def _quantized(tmp_path, model, **kwargs):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, dst = tmp_path / "float.onnx", tmp_path / "quant.onnx"
    onnx.save(model, src)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, reduce_range=True, **kwargs)  # see `_ints`
    return onnx.load(dst)


def _ort_fused(tmp_path, model):
    """The model as onnxruntime's optimizer rewrites it (its fused contrib ops), saved."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(tmp_path / "fused.onnx")
    ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return onnx.load(tmp_path / "fused.onnx")


def _float_mlp(rng):
    inits = [("w1", (rng.standard_normal((16, 24)) * 0.3).astype(np.float32)),
             ("w2", (rng.standard_normal((24, 10)) * 0.3).astype(np.float32)),
             ("b2", rng.standard_normal(10).astype(np.float32))]
    nodes = [oh.make_node("MatMul", ["x", "w1"], ["h"]), oh.make_node("Relu", ["h"], ["r"]),
             oh.make_node("Gemm", ["r", "w2", "b2"], ["y"], alpha=0.5)]
    graph = oh.make_graph(nodes, "mlp", [_vi("x", TP.FLOAT, ["n", 16])], [_vi("y", TP.FLOAT, ["n", 10])],
                          [numpy_helper.from_array(a, n) for n, a in inits])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_dynamic_matmul_gemm_model(tmp_path, per_channel, device):
    rng = np.random.default_rng(7)
    quant = _quantized(tmp_path, _float_mlp(rng), per_channel=per_channel)
    fused = _ort_fused(tmp_path, quant)
    assert "MatMulInteger" in {n.op_type for n in quant.graph.node}  # DynamicQuantizeLinear, MatMulInteger, Mul
    assert "DynamicQuantizeMatMul" in {n.op_type for n in fused.graph.node if n.domain == MS}
    for n in (1, 3):
        x = rng.standard_normal((n, 16)).astype(np.float32)
        _check(quant, {"x": x}, device, ort_optimized=True)
        _check(fused, {"x": x}, device)


def _float_lstm(rng, seq, batch, inp, hidden):
    inits = [("W", (rng.standard_normal((1, 4 * hidden, inp)) * 0.3).astype(np.float32)),
             ("R", (rng.standard_normal((1, 4 * hidden, hidden)) * 0.3).astype(np.float32)),
             ("B", (rng.standard_normal((1, 8 * hidden)) * 0.1).astype(np.float32))]
    node = oh.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden)
    graph = oh.make_graph([node], "lstm", [_vi("X", TP.FLOAT, [seq, batch, inp])],
                          [_vi("Y", TP.FLOAT, [seq, 1, batch, hidden]), _vi("Y_h", TP.FLOAT, [1, batch, hidden])],
                          [numpy_helper.from_array(a, n) for n, a in inits])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_dynamic_lstm_model(tmp_path, device):
    rng = np.random.default_rng(8)
    quant = _quantized(tmp_path, _float_lstm(rng, 5, 2, 6, 8), op_types_to_quantize=["LSTM"])
    assert {n.op_type for n in quant.graph.node} == {"DynamicQuantizeLSTM"}
    _check(quant, {"X": rng.standard_normal((5, 2, 6)).astype(np.float32)}, device, threads=2)


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_dynamic_attention_model(tmp_path, device):
    """quantize_dynamic rewrites com.microsoft Attention as DynamicQuantizeLinear + QAttention."""
    rng = np.random.default_rng(9)
    b, s, h = 2, 5, 8
    inits = [("w", (rng.standard_normal((h, 3 * h)) * 0.3).astype(np.float32)),
             ("bias", (rng.standard_normal(3 * h) * 0.1).astype(np.float32))]
    node = oh.make_node("Attention", ["x", "w", "bias", "mask"], ["y"], domain=MS, num_heads=2)
    inputs = [_vi("x", TP.FLOAT, [b, s, h]), _vi("mask", TP.INT32, [b])]
    quant = _quantized(tmp_path, _model([node], inputs, [_vi("y", TP.FLOAT, [b, s, h])], inits))
    assert "QAttention" in {n.op_type for n in quant.graph.node}
    feeds = {"x": rng.standard_normal((b, s, h)).astype(np.float32), "mask": np.array([5, 4], np.int32)}
    _check(quant, feeds, device)


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_static_qoperator_gemm_model(tmp_path, device):
    """quantize_static in the QOperator format writes Gemm as QGemm (per-channel B scales)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    rng = np.random.default_rng(10)
    calibration = iter([{"x": rng.standard_normal((4, 16)).astype(np.float32)} for _ in range(4)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(calibration, None)

    src, dst = tmp_path / "float.onnx", tmp_path / "static.onnx"
    onnx.save(_float_mlp(rng), src)
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QOperator,
                    op_types_to_quantize=["MatMul", "Gemm"], per_channel=True)
    quant = onnx.load(dst)
    assert "QGemm" in {n.op_type for n in quant.graph.node}
    for n in (1, 3):
        _check(quant, {"x": rng.standard_normal((n, 16)).astype(np.float32)}, device)


def test_qattention_with_past_state_is_a_named_error():
    rng = np.random.default_rng(11)
    inits = [("w", _ints(rng, (8, 24), np.int8)), ("bias", np.zeros(24, np.float32)), ("x_scale", np.float32(0.02)),
             ("w_scale", np.float32(0.01)), ("past", np.zeros((2, 1, 2, 3, 4), np.float32))]
    node = oh.make_node("QAttention", ["x", "w", "bias", "x_scale", "w_scale", "", "", "", "past"], ["y"], domain=MS,
                        num_heads=2, name="qa")
    model = _model([node], [_vi("x", TP.UINT8, [1, 5, 8])], [_vi("y", TP.FLOAT, [1, 5, 8])], inits)
    with pytest.raises(lo.OnnxImportError, match="QAttention.*past state"):
        lo.compile(model, device="numpy")({"x": _ints(rng, (1, 5, 8), np.uint8)})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [200, 600, 40000])
def test_integer_product_exact_through_every_gemm_form(k, device):
    """The integer product runs as a float32 GEMM (K * 255**2 < 2**24), a float64 one (< 2**31)
    or in int32: exact in each, against onnxruntime's MatMulInteger and MatMulIntegerToFloat."""
    rng = np.random.default_rng(12)
    inits = [("B", _ints(rng, (k, 3), np.uint8)), ("a_zp", np.uint8(255)), ("b_zp", np.array([0, 255, 17], np.uint8)),
             ("a_scale", np.float32(0.5)), ("b_scale", np.array([0.25, 0.125, 1.0], np.float32))]
    nodes = [oh.make_node("MatMulInteger", ["A", "B", "a_zp", "b_zp"], ["Y"]),
             oh.make_node("MatMulIntegerToFloat", ["A", "B", "a_scale", "b_scale", "a_zp", "b_zp"], ["F"], domain=MS)]
    model = _model(nodes, [_vi("A", TP.UINT8, [2, k])], [_vi("Y", TP.INT32, [2, 3]), _vi("F", TP.FLOAT, [2, 3])], inits)
    a = _ints(rng, (2, k), np.uint8)
    a[0] = 0  # the extreme products: (0 - 255) * (255 - 0)
    y, _ = _check(model, {"A": a}, device)
    assert np.abs(y).max() >= 2**24 or k < 300  # past float32's exact integers where the float64 GEMM serves


@pytest.mark.parametrize("device", DEVICES)
def test_conv_integer_output_is_int32_for_an_int32_bias(device):
    """ConvInteger's output is int32 (the spec's type): quantize_dynamic's conv models add an int32
    bias to it (ddddocr's common_old.onnx did not import while luminal's output was int64)."""
    rng = np.random.default_rng(13)
    inits = [("w", _ints(rng, (4, 2, 3, 3), np.uint8)), ("wz", np.uint8(128)),
             ("b", np.arange(-2, 2, dtype=np.int32).reshape(1, 4, 1, 1))]
    nodes = [oh.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             oh.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["y0"], pads=[1, 1, 1, 1], strides=[2, 2]),
             oh.make_node("Add", ["y0", "b"], ["y"])]
    model = _model(nodes, [_vi("x", TP.FLOAT, [1, 2, 9, 8])], [_vi("y", TP.INT32, [1, 4, 5, 4])], inits)
    (y,) = _check(model, {"x": rng.standard_normal((1, 2, 9, 8)).astype(np.float32)}, device)
    assert y.dtype == np.int32
