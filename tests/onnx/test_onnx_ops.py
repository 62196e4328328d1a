"""Ops users meet in real models, each on a small hand-built model against onnxruntime:
recurrences (directions, sequence_lens, initial states, layouts), quantized ops, narrow types,
the contrib ops onnxruntime's transformer optimizer emits. NumPy runtime (the spec), optimizer off.
"""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import luminal.onnx as lo

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=22, domains=()):
    graph = oh.make_graph(nodes, "t", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits])
    imports = [oh.make_opsetid("", opset)] + [oh.make_opsetid(d, 1) for d in domains]
    return oh.make_model(graph, opset_imports=imports, ir_version=10)


def _check(model, feeds, atol=1e-5, rtol=1e-4, exact=False):
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = lo.compile(model, device="numpy", optimize=False, check=False)(feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), atol=atol, rtol=rtol)
    return got


def _vi(name, elem, shape):
    return oh.make_tensor_value_info(name, elem, shape)


RECURRENT = {"RNN": 1, "GRU": 3, "LSTM": 4}


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_recurrent(op, direction, layout):
    """Bias, sequence_lens (rows of different lengths), initial states, both layouts (onnxruntime
    runs only layout 0: the layout-1 model is checked against it on transposed data)."""
    seq, batch, inp, hid = 5, 3, 4, 6
    dirs = 2 if direction == "bidirectional" else 1
    g = RECURRENT[op]
    inits = [("W", RNG.standard_normal((dirs, g * hid, inp)).astype(np.float32) * 0.5),
             ("R", RNG.standard_normal((dirs, g * hid, hid)).astype(np.float32) * 0.5),
             ("B", RNG.standard_normal((dirs, 2 * g * hid)).astype(np.float32) * 0.5),
             ("lens", np.array([5, 2, 4], np.int32))]
    if op == "LSTM":
        inits.append(("P", RNG.standard_normal((dirs, 3 * hid)).astype(np.float32) * 0.5))
    names = ["X", "W", "R", "B", "lens", "h0"] + (["c0", "P"] if op == "LSTM" else [])
    states = ["h0"] + (["c0"] if op == "LSTM" else [])
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    extra = {"linear_before_reset": 1} if op == "GRU" else {}

    def build(lay):
        xs = (batch, seq, inp) if lay else (seq, batch, inp)
        hs = (batch, dirs, hid) if lay else (dirs, batch, hid)
        node = oh.make_node(op, names, outs, hidden_size=hid, direction=direction, layout=lay, **extra)
        inputs = [_vi("X", TP.FLOAT, xs)] + [_vi(s, TP.FLOAT, hs) for s in states]
        return _model([node], inputs, [_vi(o, TP.FLOAT, None) for o in outs], inits)

    feeds = {"X": RNG.standard_normal((seq, batch, inp)).astype(np.float32)}
    feeds.update({s: RNG.standard_normal((dirs, batch, hid)).astype(np.float32) for s in states})
    sess = ort.InferenceSession(build(0).SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    if layout:
        feeds = {k: v.transpose(1, 0, 2) for k, v in feeds.items()}
        want = [want[0].transpose(2, 0, 1, 3)] + [w.transpose(1, 0, 2) for w in want[1:]]
    got = lo.compile(build(layout), device="numpy", optimize=False, check=False)(feeds)
    for gv, wv in zip(got, want):
        np.testing.assert_allclose(gv, wv, atol=1e-5, rtol=1e-4)


def test_recurrent_symbolic_length_compiles_per_length():
    """A symbolic sequence length under the default recurrence="auto": the first length compiles
    unrolled, the second runs the cell stepped on the host; both right."""
    hid, inp = 4, 3
    w = RNG.standard_normal((1, 4 * hid, inp)).astype(np.float32)
    r = RNG.standard_normal((1, 4 * hid, hid)).astype(np.float32)
    node = oh.make_node("LSTM", ["X", "W", "R"], ["Y", "Y_h"], hidden_size=hid)
    model = _model([node], [_vi("X", TP.FLOAT, ["seq", 2, inp])], [_vi("Y", TP.FLOAT, None), _vi("Y_h", TP.FLOAT, None)],
                   [("W", w), ("R", r)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    m = lo.compile(model, device="numpy", optimize=False, check=False)
    for n in (3, 7):
        x = RNG.standard_normal((n, 2, inp)).astype(np.float32)
        for g, want in zip(m(x), sess.run(None, {"X": x})):
            np.testing.assert_allclose(g, want, atol=1e-5, rtol=1e-4)
    assert "X" in m.shape_inputs


@pytest.mark.parametrize("elem,axis_scale", [(TP.UINT8, False), (TP.INT8, True)])
def test_quantize_dequantize(elem, axis_scale):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32) * 3
    scale = (np.array([0.02, 0.05, 0.1], np.float32) if axis_scale else np.array(0.03, np.float32))
    zp_np = {TP.UINT8: np.uint8, TP.INT8: np.int8}[elem]
    zp = (np.array([3, -2, 0], zp_np) if elem == TP.INT8 else np.array(128, zp_np)) if axis_scale else np.array(128, zp_np)
    nodes = [oh.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=1),
             oh.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=1)]
    model = _model(nodes, [_vi("x", TP.FLOAT, x.shape)], [_vi("q", elem, None), _vi("y", TP.FLOAT, None)],
                   [("s", scale), ("zp", zp)])
    _check(model, {"x": x}, exact=True)


def test_dynamic_quantize_and_integer_matmul():
    a = RNG.standard_normal((4, 5)).astype(np.float32)
    b = RNG.integers(0, 255, (5, 3)).astype(np.uint8)
    nodes = [oh.make_node("DynamicQuantizeLinear", ["a"], ["qa", "sa", "za"]),
             oh.make_node("MatMulInteger", ["qa", "b", "za", "zb"], ["y"])]
    model = _model(nodes, [_vi("a", TP.FLOAT, a.shape)],
                   [_vi("qa", TP.UINT8, None), _vi("sa", TP.FLOAT, None), _vi("y", TP.INT32, None)],
                   [("b", b), ("zb", np.array(7, np.uint8))])
    _check(model, {"a": a}, exact=True)


def test_qlinear_conv_and_matmul():
    x = RNG.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    w = RNG.integers(-20, 20, (3, 2, 3, 3)).astype(np.int8)
    m = RNG.integers(0, 255, (75, 4)).astype(np.uint8)
    inits = [("xs", np.array(0.02, np.float32)), ("xz", np.array(120, np.uint8)), ("w", w),
             ("ws", np.array([0.01, 0.02, 0.015], np.float32)), ("wz", np.array([0, 0, 0], np.int8)),
             ("ys", np.array(0.05, np.float32)), ("yz", np.array(100, np.uint8)),
             ("bias", np.array([5, -3, 10], np.int32)), ("m", m), ("ms", np.array(0.01, np.float32)),
             ("mz", np.array(128, np.uint8)), ("os", np.array(0.5, np.float32)), ("oz", np.array(10, np.uint8)),
             ("flat", np.array([1, 75], np.int64))]
    nodes = [oh.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"], ["c"], pads=[1, 1, 1, 1]),
             oh.make_node("Reshape", ["c", "flat"], ["cf"]),
             oh.make_node("QLinearMatMul", ["cf", "ys", "yz", "m", "ms", "mz", "os", "oz"], ["y"])]
    model = _model(nodes, [_vi("x", TP.UINT8, x.shape)], [_vi("c", TP.UINT8, None), _vi("y", TP.UINT8, None)], inits)
    _check(model, {"x": x}, exact=True)


@pytest.mark.parametrize("to", [TP.FLOAT8E4M3FN, TP.FLOAT8E5M2, TP.FLOAT8E4M3FNUZ, TP.FLOAT8E5M2FNUZ])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_float8(to, saturate):
    """Rounding (half to even, subnormals) and overflow, against onnx's reference (ml_dtypes)."""
    from onnx.reference import ReferenceEvaluator

    x = np.concatenate([RNG.standard_normal(200) * 10.0 ** RNG.integers(-4, 5, 200),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e9, -1e9, 448.0, 464.0, 2.0**-9, 2.0**-10 * 3]])
    x = x.astype(np.float32)
    node = oh.make_node("Cast", ["x"], ["y"], to=to, saturate=saturate)
    model = _model([node], [_vi("x", TP.FLOAT, x.shape)], [_vi("y", to, None)], opset=21)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = lo.compile(model, device="numpy", optimize=False, check=False)(x)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("op,fn,lo_hi", [("Atan", np.arctan, (-1e4, 1e4)), ("Asin", np.arcsin, (-1, 1)),
                                         ("Acos", np.arccos, (-1, 1))])
def test_inverse_trig(op, fn, lo_hi):
    """Within a few f32 ulps of NumPy's float64 result, endpoints and infinities included."""
    x = np.concatenate([np.linspace(*lo_hi, 20001), [lo_hi[0], lo_hi[1], 0.0, -0.0, 0.4142135, 2.4142137]])
    if op == "Atan":
        x = np.concatenate([x, [np.inf, -np.inf, 1e30, -1e-30]])
    x = x.astype(np.float32)
    model = _model([oh.make_node(op, ["x"], ["y"])], [_vi("x", TP.FLOAT, x.shape)], [_vi("y", TP.FLOAT, x.shape)])
    (got,) = lo.compile(model, device="numpy", optimize=False)(x)
    np.testing.assert_allclose(got, fn(x.astype(np.float64)), atol=5e-7, rtol=5e-7)


def test_shape_arithmetic_on_a_dynamic_dim_has_no_sentinel():
    """tf2onnx's pattern: Slice(.., end=1000000000) along a dynamic batch dim, a Reshape target
    from Shape -> Gather -> Unsqueeze -> Concat, and arithmetic on the dim. The slice's size is
    resolved per call (not the number 1000000000), at two batch sizes."""
    nodes = [
        oh.make_node("Slice", ["x", "zero", "huge", "zero"], ["xs"]),
        oh.make_node("Shape", ["xs"], ["s"]),
        oh.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        oh.make_node("Unsqueeze", ["b", "zero"], ["b1"]),
        oh.make_node("Concat", ["b1", "one"], ["target"], axis=0),
        oh.make_node("ReduceSum", ["xs", "one"], ["r"], keepdims=0),
        oh.make_node("Reshape", ["r", "target"], ["y"]),
        oh.make_node("Mul", ["b", "b"], ["bb"]),
        oh.make_node("Div", ["bb", "two"], ["half"]),
        oh.make_node("Cast", ["half"], ["halff"], to=TP.FLOAT),
        oh.make_node("Add", ["y", "halff"], ["z"]),
    ]
    inits = [("zero", np.array([0], np.int64)), ("huge", np.array([1000000000], np.int64)),
             ("i0", np.array(0, np.int64)), ("one", np.array([1], np.int64)), ("two", np.array(2, np.int64))]
    model = _model(nodes, [_vi("x", TP.FLOAT, ["unk__214", 4])], [_vi("z", TP.FLOAT, ["unk__214", 1])], inits, opset=17)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    m = lo.compile(model, device="numpy")
    for n in (3, 5):
        x = RNG.standard_normal((n, 4)).astype(np.float32)
        (got,) = m(x)
        np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], atol=1e-5)


CONV_CASES = [("Conv", "regular", (16, 8, 3, 3), 1, "MAT_MUL"), ("Conv", "depthwise", (8, 1, 3, 3), 8, "WINDOW_REDUCE"),
              ("Conv", "strided_dilated", (16, 8, 3, 3), 1, "MAT_MUL"),
              ("ConvTranspose", "transpose", (8, 16, 3, 3), 1, "MAT_MUL")]


@pytest.mark.parametrize("op,kind,ws,groups,want", CONV_CASES, ids=[c[1] for c in CONV_CASES])
def test_conv_is_the_builders_gemm(op, kind, ws, groups, want):
    """ONNX Conv / ConvTranspose reach the torch frontend's form (luminal.builder.nn.conv): a GEMM
    over an im2col view, depthwise as a direct window reduction; no reduction over a materialized
    product larger than twice the output; matches onnxruntime."""
    import collections

    from luminal.hlir.ops import REDUCE, Op, toposort

    attrs = {"pads": [1, 1, 1, 1], "group": groups}
    if kind == "strided_dilated":
        attrs.update(strides=[2, 2], dilations=[2, 2])
    if op == "ConvTranspose":
        attrs.update(strides=[2, 2], output_padding=[1, 1])
    w = RNG.standard_normal(ws).astype(np.float32) * 0.2
    b = RNG.standard_normal(ws[1] * groups if op == "ConvTranspose" else ws[0]).astype(np.float32)
    model = _model([oh.make_node(op, ["x", "w", "b"], ["y"], **attrs)], [_vi("x", TP.FLOAT, (1, 8, 14, 14))],
                   [_vi("y", TP.FLOAT, None)], [("w", w), ("b", b)])
    x = RNG.standard_normal((1, 8, 14, 14)).astype(np.float32)
    want_y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    m = lo.compile(model, device="numpy", optimize=True, check=False)
    np.testing.assert_allclose(m(x)[0], want_y, atol=1e-4, rtol=1e-4)
    nodes = toposort(m.compiled.outputs)
    ops = collections.Counter(n.op for n in nodes)
    assert ops[getattr(Op, want)] == 1 and not ops[Op.KAHAN_SUM] and not ops[Op.SUM_REDUCE], ops
    out = int(np.prod(want_y.shape))
    for n in nodes:
        if n.op in REDUCE or n.op in (Op.KAHAN_SUM, Op.WINDOW_REDUCE):
            for s in n.src:
                base = s.src[0] if s.op is Op.VIEW else s
                if base.op not in (Op.INPUT, Op.CONSTANT):
                    assert int(np.prod(base.shape)) <= 2 * out, (n.op, base.op, base.shape)


def _ms(nodes, inputs, outputs, inits=()):
    return _model(nodes, inputs, outputs, inits, opset=17, domains=("com.microsoft",))


def test_contrib_fused_matmul_gelus_skip_layer_norm():
    a = RNG.standard_normal((2, 3, 8)).astype(np.float32)
    inits = [("b", RNG.standard_normal((6, 8)).astype(np.float32)), ("bias", RNG.standard_normal(6).astype(np.float32)),
             ("skip", RNG.standard_normal((2, 3, 6)).astype(np.float32)), ("gamma", RNG.random(6).astype(np.float32)),
             ("beta", RNG.standard_normal(6).astype(np.float32))]
    d = "com.microsoft"
    nodes = [oh.make_node("FusedMatMul", ["a", "b"], ["m"], domain=d, transB=1, alpha=0.5),
             oh.make_node("Gelu", ["m"], ["g1"], domain=d),
             oh.make_node("BiasGelu", ["m", "bias"], ["g2"], domain=d),
             oh.make_node("FastGelu", ["m", "bias"], ["g3"], domain=d),
             oh.make_node("SkipLayerNormalization", ["g3", "skip", "gamma", "beta", "bias"], ["ln", "", "", "sum"],
                          domain=d, epsilon=1e-5)]
    outs = [_vi(n, TP.FLOAT, None) for n in ("m", "g1", "g2", "g3", "ln", "sum")]
    _check(_ms(nodes, [_vi("a", TP.FLOAT, [2, 3, 8])], outs, inits), {"a": a})


@pytest.mark.parametrize("mask,unidirectional", [(False, 0), (True, 0), (False, 1)])
def test_contrib_attention(mask, unidirectional):
    b, s, h, heads = 2, 5, 8, 2
    inits = [("w", RNG.standard_normal((h, 3 * h)).astype(np.float32) * 0.3),
             ("bias", RNG.standard_normal(3 * h).astype(np.float32) * 0.1)]
    ins = ["x", "w", "bias"] + (["mask"] if mask else [])
    node = oh.make_node("Attention", ins, ["y"], domain="com.microsoft", num_heads=heads, unidirectional=unidirectional)
    inputs = [_vi("x", TP.FLOAT, [b, s, h])] + ([_vi("mask", TP.INT32, [b, s])] if mask else [])
    feeds = {"x": RNG.standard_normal((b, s, h)).astype(np.float32)}
    if mask:
        feeds["mask"] = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32)
    _check(_ms([node], inputs, [_vi("y", TP.FLOAT, None)], inits), feeds)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_contrib_rotary_embedding(interleaved):
    b, s, heads, hd = 2, 4, 2, 8
    cos = RNG.standard_normal((16, hd // 2)).astype(np.float32)
    sin = RNG.standard_normal((16, hd // 2)).astype(np.float32)
    node = oh.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft",
                        interleaved=interleaved, num_heads=heads)
    feeds = {"x": RNG.standard_normal((b, s, heads * hd)).astype(np.float32),
             "pos": np.array([[0, 1, 2, 3], [5, 6, 7, 8]], np.int64)}
    model = _ms([node], [_vi("x", TP.FLOAT, [b, s, heads * hd]), _vi("pos", TP.INT64, [b, s])], [_vi("y", TP.FLOAT, None)],
                [("cos", cos), ("sin", sin)])
    _check(model, feeds)


@pytest.mark.parametrize("mode,ctm,nearest", [("nearest", "asymmetric", "floor"), ("nearest", "half_pixel", "round_prefer_floor"),
                                              ("linear", "half_pixel", "round_prefer_floor"),
                                              ("cubic", "align_corners", "round_prefer_floor")])
def test_resize_on_symbolic_axes(mode, ctm, nearest):
    """YOLO's dynamic height/width: nearest x2 is a broadcast view at any size (one graph);
    size-dependent weights (linear, cubic) compile per input shape. Both match onnxruntime."""
    node = oh.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode, coordinate_transformation_mode=ctm,
                        nearest_mode=nearest)
    model = _model([node], [_vi("x", TP.FLOAT, ["n", 3, "h", "w"])], [_vi("y", TP.FLOAT, None)],
                   [("scales", np.array([1, 1, 2, 2], np.float32))], opset=19)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    m = lo.compile(model, device="numpy", optimize=False, check=False)
    for shape in ((1, 3, 4, 6), (2, 3, 7, 5)):
        x = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(m(x)[0], sess.run(None, {"x": x})[0], atol=1e-5, rtol=1e-5)
    assert (m.shape_inputs == ()) == (mode == "nearest")


def test_dynamic_topk_pad_tile_expand():
    """k, pads, repeats and shapes given as graph inputs compile per value of those inputs (their
    output shapes depend on them); a k computed from a symbolic dim stays symbolic (one graph)."""
    def check(model, feeds_list, value_inputs):
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        m = lo.compile(model, device="numpy", optimize=False, check=False)
        for feeds in feeds_list:
            for g, w in zip(m(feeds), sess.run(None, feeds)):
                np.testing.assert_array_equal(g, w)
        assert m.value_inputs == value_inputs

    x9, x12 = RNG.standard_normal((2, 9)).astype(np.float32), RNG.standard_normal((2, 12)).astype(np.float32)
    outs = [_vi("v", TP.FLOAT, None), _vi("i", TP.INT64, None)]
    topk = _model([oh.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)],
                  [_vi("x", TP.FLOAT, [2, "n"]), _vi("k", TP.INT64, [1])], outs, opset=17)
    check(topk, [{"x": x9, "k": np.array([3])}, {"x": x12, "k": np.array([5])}], ("k",))
    half = _model([oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Gather", ["s", "one"], ["n"]),
                   oh.make_node("Div", ["n", "two"], ["h"]), oh.make_node("Unsqueeze", ["h", "zero"], ["k"]),
                   oh.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)], [_vi("x", TP.FLOAT, [2, "n"])], outs,
                  [("one", np.array(1, np.int64)), ("two", np.array(2, np.int64)), ("zero", np.array([0], np.int64))], opset=17)
    check(half, [{"x": x9}, {"x": x12}], ())
    pte = _model([oh.make_node("Pad", ["x", "p"], ["a"]), oh.make_node("Tile", ["a", "t"], ["b"]),
                  oh.make_node("Expand", ["b", "e"], ["c"])],
                 [_vi("x", TP.FLOAT, [1, "n"]), _vi("p", TP.INT64, [4]), _vi("t", TP.INT64, [2]), _vi("e", TP.INT64, [3])],
                 [_vi("c", TP.FLOAT, None)], opset=17)
    check(pte, [{"x": x9[:1], "p": np.array([0, 1, 0, 2]), "t": np.array([2, 1]), "e": np.array([3, 1, 1])},
                {"x": x12[:1], "p": np.array([1, 0, 0, 0]), "t": np.array([1, 3]), "e": np.array([2, 1, 1])}], ("e", "p", "t"))


@pytest.mark.parametrize("elem,dtype", [(TP.INT32, np.int32), (TP.INT64, np.int64)])
@pytest.mark.parametrize("axes,keepdims", [([1], 0), ([0, 1], 1)])
def test_reduce_mean_of_integers_truncates(elem, dtype, axes, keepdims):
    """ReduceMean of an integer tensor (allowed by the spec): the sum in the type
    divided truncating toward zero, as onnxruntime (-4 / 3 = -1)."""
    x = np.array([[-7, 2, 1, 0], [5, 5, 6, -3]], dtype)
    model = _model([oh.make_node("ReduceMean", ["x"], ["y"], axes=axes, keepdims=keepdims)],
                   [_vi("x", elem, [2, 4])], [_vi("y", elem, None)], opset=13)
    _check(model, {"x": x}, exact=True)


def test_sign_of_nan_is_nan():
    """Sign(NaN) is NaN in ONNX (numpy's sign, its reference; onnxruntime for f32 and f64, where
    torch's sign, the builder's, gives 0); ±0 give 0."""
    for elem, dtype in ((TP.FLOAT, np.float32), (TP.DOUBLE, np.float64)):
        x = np.array([np.nan, -0.0, 0.0, 2.5, -np.inf], dtype)
        model = _model([oh.make_node("Sign", ["x"], ["y"])], [_vi("x", elem, [5])], [_vi("y", elem, [5])])
        got = _check(model, {"x": x}, exact=True)[0]
        assert np.isnan(got[0]) and not np.isnan(got[1:]).any()
    x16 = np.array([np.nan, -1.5], np.float16)  # onnxruntime's float16 Sign gives 0 here: numpy's NaN
    model = _model([oh.make_node("Sign", ["x"], ["y"])], [_vi("x", TP.FLOAT16, [2])], [_vi("y", TP.FLOAT16, [2])])
    np.testing.assert_array_equal(lo.compile(model, device="cpu")({"x": x16})[0], np.sign(x16))


@pytest.mark.parametrize("mode,opset", [("edge", 18), ("reflect", 18), ("wrap", 19), ("constant", 18)])
@pytest.mark.parametrize("pads", [[1, -1, 0, 2], [-1, 2, 1, -2], [-1, -2, -1, -1]])
def test_negative_pads_crop_before_the_others_pad(mode, opset, pads):
    """A negative pad crops; an edge, reflection or wrap then repeats the cropped tensor's values
    (onnxruntime)."""
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    model = _model([oh.make_node("Pad", ["x", "p"], ["y"], mode=mode)], [_vi("x", TP.FLOAT, [4, 5])],
                   [_vi("y", TP.FLOAT, None)], inits=[("p", np.array(pads, np.int64))], opset=opset)
    _check(model, {"x": x}, exact=True)


def test_gemm_with_beta_zero_does_not_read_c():
    """Y = alpha A B + beta C with beta 0 leaves C out, NaNs included (onnxruntime, the reference
    evaluator, BLAS)."""
    a, b = RNG.standard_normal((3, 2)).astype(np.float32), RNG.standard_normal((3, 4)).astype(np.float32)
    model = _model([oh.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, beta=0.0)],
                   [_vi("a", TP.FLOAT, [3, 2]), _vi("b", TP.FLOAT, [3, 4])], [_vi("y", TP.FLOAT, [2, 4])],
                   inits=[("c", np.full(4, np.nan, np.float32))])
    got = _check(model, {"a": a, "b": b})[0]
    assert not np.isnan(got).any()


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
                                "ReduceSum", "ReduceMax", "ReduceProd"])
def test_reduce_with_no_axes_and_noop_applies_the_elementwise_part(op):
    """noop_with_empty_axes with no axes reduces nothing, but ReduceL2 is still sqrt(x²), ReduceL1
    |x|, ReduceLogSum log x (onnxruntime and the reference evaluator)."""
    x = np.array([[3, 4], [-1, 0.5], [100, -100]], np.float32)
    model = _model([oh.make_node(op, ["x"], ["y"], noop_with_empty_axes=1)], [_vi("x", TP.FLOAT, [3, 2])],
                   [_vi("y", TP.FLOAT, [3, 2])], opset=18)
    _check(model, {"x": x}, rtol=1e-6)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    model = _model([oh.make_node("GlobalLpPool", ["x"], ["y"], p=p)], [_vi("x", TP.FLOAT, [2, 3, 4, 5])],
                   [_vi("y", TP.FLOAT, [2, 3, 1, 1])], opset=18)  # onnxruntime has GlobalLpPool up to 18
    _check(model, {"x": x})


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_cubic_near_the_border(padding, align_corners, device):
    """Cubic GridSample pads each tap's index, not the coordinate (torch's grid_sampler and
    onnxruntime; onnx's reference differs for border), with the optimizer on: a grid running past
    every border, against onnxruntime."""
    x = RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)
    grid = (RNG.random((1, 4, 3, 2)) * 2.6 - 1.3).astype(np.float32)
    model = _model([oh.make_node("GridSample", ["x", "g"], ["y"], mode="cubic", padding_mode=padding,
                                 align_corners=align_corners)],
                   [_vi("x", TP.FLOAT, [1, 2, 5, 6]), _vi("g", TP.FLOAT, [1, 4, 3, 2])], [_vi("y", TP.FLOAT, [1, 2, 4, 3])],
                   opset=20)
    feeds = {"x": x, "g": grid}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = lo.compile(model, device=device)(feeds)[0]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [0, 1, 2, 7, 16])
def test_window_functions(op, periodic, size):
    """The cosine-sum windows STFT front ends export; size 1 symmetric is 0 / 0,
    NaN, as onnxruntime and the reference; size 0 a named error, as ONNX's shape inference."""
    if size == 0:
        model = _model([oh.make_node(op, ["n"], ["y"], periodic=periodic)], [], [_vi("y", TP.FLOAT, [0])],
                       inits=[("n", np.array(0, np.int64))], opset=17)
        with pytest.raises(lo.OnnxError, match="size must be positive"):
            lo.compile(model, device="numpy")
        return
    for elem in (TP.FLOAT, TP.DOUBLE):
        model = _model([oh.make_node(op, ["n"], ["y"], periodic=periodic, output_datatype=elem)], [],
                       [_vi("y", elem, [size])], inits=[("n", np.array(size, np.int64))], opset=17)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]
        got = lo.compile(model, device="numpy")({})[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, equal_nan=True)
