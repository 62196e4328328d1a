"""The ops of ops_bitcast, ops_linalg, ops_scatter, ops_spectral, ops_detection and ops_ml, on
edge cases the official node tests miss, against onnxruntime (BitCast against NumPy's `view`,
its definition). NumPy runtime (the spec) unless a test names the C backend."""

import warnings

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

import luminal
import luminal.onnx as lo

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=22, domains=()):
    graph = oh.make_graph(nodes, "t", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits])
    imports = [oh.make_opsetid("", opset)] + [oh.make_opsetid(d, 1) for d in domains]
    return oh.make_model(graph, opset_imports=imports, ir_version=10)


def _vi(name, elem, shape):
    return oh.make_tensor_value_info(name, elem, shape)


def _check(model, feeds, atol=1e-5, rtol=1e-5, device="numpy"):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    want = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = lo.compile(model, device=device, optimize=False)(feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), atol=atol, rtol=rtol)


# --- BitCast ---------------------------------------------------------------------------------
def _floats(dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = np.finfo(dtype)
        rand = RNG.standard_normal(40) * 2.0 ** RNG.integers(f.minexp - f.nmant, f.maxexp, 40)
        special = [0.0, -0.0, np.inf, -np.inf, f.smallest_subnormal, -f.smallest_subnormal, f.smallest_normal,
                   f.smallest_normal - f.smallest_subnormal, f.max, -f.max, 1.0, np.nextafter(dtype(2), dtype(0))]
        return np.concatenate([rand, special]).astype(dtype)


BITCASTS = [(np.float32, np.int32), (np.float32, np.uint32), (np.int32, np.float32), (np.uint32, np.float32),
            (np.float64, np.int64), (np.float64, np.uint64), (np.int64, np.float64), (np.uint64, np.float64),
            (np.float16, np.int16), (np.uint16, np.float16), (ml_dtypes.bfloat16, np.int16),
            (np.int16, ml_dtypes.bfloat16), (np.float16, ml_dtypes.bfloat16), (np.int8, np.uint8),
            (np.uint8, np.int8), (np.uint8, np.bool_), (np.uint64, np.int64), (np.int64, np.uint64)]


def _source(dtype):
    if np.dtype(dtype).kind == "f" or dtype is ml_dtypes.bfloat16:
        if dtype is ml_dtypes.bfloat16:
            return _floats(np.float32).astype(ml_dtypes.bfloat16)
        return _floats(dtype)
    if dtype is np.bool_:
        return np.array([True, False])
    info = np.iinfo(dtype)
    vals = RNG.integers(info.min, info.max, 40, dtype=dtype, endpoint=True)
    return np.concatenate([vals, np.array([info.min, info.max, 0], dtype)])


@pytest.mark.parametrize("src,dst", BITCASTS, ids=[f"{np.dtype(a).name}-{np.dtype(b).name}" for a, b in BITCASTS])
def test_bitcast_is_numpy_view(src, dst):
    """Every bit pattern round-trips exactly: subnormals, -0.0, inf, the extremes, NaN patterns
    (which read as NaN); a float NaN itself reads as the canonical quiet NaN."""
    x = _source(src)
    if dst is np.bool_:
        x = x % 2
    if np.dtype(src).kind in "iu" and np.dtype(dst).kind == "f" or dst is ml_dtypes.bfloat16 and src is np.int16:
        want = x.view(dst)
        nan = np.isnan(want.astype(np.float64))
    else:
        want, nan = x.view(dst), None
    elem = oh.np_dtype_to_tensor_dtype(np.dtype(dst))
    model = _model([oh.make_node("BitCast", ["x"], ["y"], to=elem)], [_vi("x", oh.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
                   [_vi("y", elem, x.shape)], opset=26)
    (got,) = lo.compile(model, device="numpy")(x)
    assert got.dtype == want.dtype
    if nan is not None:
        assert np.isnan(got[nan].astype(np.float64)).all()
        got, want = got[~nan], want[~nan]
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_bitcast_of_nan_is_the_canonical_quiet_nan_and_runs_on_the_cpu_backend():
    x = np.array([np.nan, -np.nan, 1.5, -0.0, 1e-45], np.float32)
    model = _model([oh.make_node("BitCast", ["x"], ["y"], to=TP.INT32)], [_vi("x", TP.FLOAT, [5])], [_vi("y", TP.INT32, [5])],
                   opset=26)
    (got,) = lo.compile(model, device="cpu")(x)
    np.testing.assert_array_equal(got, [0x7FC00000, 0x7FC00000, *x[2:].view(np.int32)])


def test_bitcast_between_widths_is_a_named_error():
    model = _model([oh.make_node("BitCast", ["x"], ["y"], to=TP.INT64)], [_vi("x", TP.FLOAT, [2])], [_vi("y", TP.INT64, [2])],
                   opset=26)
    with pytest.raises(lo.OnnxError, match="differ in width"):
        lo.compile(model, device="numpy", check=False)


# --- Det, Col2Im, MaxUnpool, TensorScatter --------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (2, 3, 5, 5)])
def test_det(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _model([oh.make_node("Det", ["x"], ["y"])], [_vi("x", TP.FLOAT, shape)], [_vi("y", TP.FLOAT, shape[:-2])])
    _check(model, {"x": x}, atol=1e-5, rtol=1e-4)


def test_det_of_singular_and_permutation_matrices():
    x = np.array([[[1, 2, 3], [2, 4, 6], [0, 0, 1]], [[0, 1, 0], [0, 0, 1], [1, 0, 0]], [[0, 0, 0], [1, 2, 3], [4, 5, 6]],
                  [[0, 1, 0], [1, 0, 0], [0, 0, 1]]], np.float64)
    model = _model([oh.make_node("Det", ["x"], ["y"])], [_vi("x", TP.DOUBLE, x.shape)], [_vi("y", TP.DOUBLE, [4])])
    (got,) = lo.compile(model, device="numpy")(x)
    np.testing.assert_array_equal(np.abs(got), [0.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(np.sign(got[[1, 3]]), [1.0, -1.0])


@pytest.mark.parametrize("image,block,attrs", [
    ([6, 7], [2, 3], {}),
    ([6, 7], [3, 2], {"strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    ([5, 4, 3], [2, 2, 2], {"strides": [1, 2, 1], "pads": [0, 1, 0, 0, 1, 1]}),
])
def test_col2im(image, block, attrs, device="numpy"):
    k = len(image)
    st, pd, dl = attrs.get("strides", [1] * k), attrs.get("pads", [0] * 2 * k), attrs.get("dilations", [1] * k)
    blocks = [(image[i] + pd[i] + pd[i + k] - dl[i] * (block[i] - 1) - 1) // st[i] + 1 for i in range(k)]
    x = RNG.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(blocks)))).astype(np.float32)
    model = _model([oh.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)], [_vi("x", TP.FLOAT, x.shape)],
                   [_vi("y", TP.FLOAT, [2, 3, *image])],
                   inits=[("image", np.array(image, np.int64)), ("block", np.array(block, np.int64))])
    _check(model, {"x": x})


def test_col2im_on_the_cpu_backend():
    test_col2im([6, 7], [3, 2], {"strides": [2, 1], "pads": [1, 0, 2, 1]}, device="cpu")


@pytest.mark.parametrize("out_shape", [None, [2, 3, 7, 9]])
def test_max_unpool_inverts_max_pool(out_shape):
    x = RNG.standard_normal((2, 3, 6, 8)).astype(np.float32)
    nodes = [oh.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             oh.make_node("MaxUnpool", ["p", "i"] + (["s"] if out_shape else []), ["y"], kernel_shape=[2, 2],
                          strides=[2, 2])]
    inits = [("s", np.array(out_shape, np.int64))] if out_shape else []
    model = _model(nodes, [_vi("x", TP.FLOAT, x.shape)], [_vi("y", TP.FLOAT, out_shape or [2, 3, 6, 8])], inits=inits)
    if out_shape is None:
        _check(model, {"x": x})
        return
    # a larger output_shape: the unpooled block sits in its leading corner, as the official node
    # test and onnx's reference have it (onnxruntime reads the indices in output_shape's layout)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(lo.compile(model, device="numpy")(x)[0], want)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 1, 2])
def test_tensor_scatter(mode, axis):
    """KV-cache writes at per-batch offsets; circular ones wrap past the end."""
    past = RNG.standard_normal((3, 4, 6, 5)).astype(np.float32)
    ushape = list(past.shape)
    ushape[axis] = 2
    update = RNG.standard_normal(ushape).astype(np.float32)
    cap = past.shape[axis]
    idx = np.array([0, cap - 2, cap - 1 if mode == "circular" else 1], np.int64)
    model = _model([oh.make_node("TensorScatter", ["past", "update", "idx"], ["y"], mode=mode, axis=axis)],
                   [_vi("past", TP.FLOAT, past.shape), _vi("update", TP.FLOAT, ushape), _vi("idx", TP.INT64, [3])],
                   [_vi("y", TP.FLOAT, past.shape)], opset=24)
    _check(model, {"past": past, "update": update, "idx": idx})


def test_tensor_scatter_without_write_indices_writes_at_the_front():
    past, update = np.zeros((2, 5, 3), np.float32), np.ones((2, 2, 3), np.float32)
    model = _model([oh.make_node("TensorScatter", ["past", "update"], ["y"])],
                   [_vi("past", TP.FLOAT, past.shape), _vi("update", TP.FLOAT, update.shape)],
                   [_vi("y", TP.FLOAT, past.shape)], opset=24)
    _check(model, {"past": past, "update": update})


# --- STFT, MelWeightMatrix ------------------------------------------------------------------
@pytest.mark.parametrize("complex_in,onesided,window", [(False, 1, True), (False, 0, False), (True, 0, True)])
def test_stft(complex_in, onesided, window):
    sig = RNG.standard_normal((2, 100, 2 if complex_in else 1)).astype(np.float32)
    names = ["sig", "step", "win" if window else "", "len"]
    inits = [("step", np.array(7, np.int64)), ("len", np.array(16, np.int64))]
    if window:
        inits.append(("win", np.hanning(16).astype(np.float32)))
    model = _model([oh.make_node("STFT", names, ["y"], onesided=onesided)], [_vi("sig", TP.FLOAT, sig.shape)],
                   [_vi("y", TP.FLOAT, [2, 13, 9 if onesided else 16, 2])], inits=inits, opset=17)
    _check(model, {"sig": sig}, atol=1e-4, rtol=1e-4)


def test_stft_over_a_symbolic_signal_length():
    model = _model([oh.make_node("STFT", ["sig", "step", "win"], ["y"])], [_vi("sig", TP.FLOAT, [1, "n", 1])],
                   [_vi("y", TP.FLOAT, [1, "f", 5, 2])], inits=[("step", np.array(4, np.int64)),
                                                      ("win", np.hamming(8).astype(np.float32))], opset=17)
    m = lo.compile(model, device="numpy")
    assert m.compiled is not None  # one graph serves every length
    for n in (8, 31, 64):
        sig = RNG.standard_normal((1, n, 1)).astype(np.float32)
        _check(model, {"sig": sig}, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mels,length,rate,lo_hz,hi_hz", [(8, 16, 8192, 0.0, 4096.0), (40, 400, 16000, 20.0, 7600.0),
                                                          (13, 64, 22050, 300.0, 8000.0)])
def test_mel_weight_matrix(mels, length, rate, lo_hz, hi_hz):
    inits = [("m", np.array(mels, np.int32)), ("l", np.array(length, np.int32)), ("r", np.array(rate, np.int32)),
             ("lo", np.array(lo_hz, np.float32)), ("hi", np.array(hi_hz, np.float32))]
    model = _model([oh.make_node("MelWeightMatrix", ["m", "l", "r", "lo", "hi"], ["y"])], [], [_vi("y", TP.FLOAT, [length // 2 + 1, mels])],
                   inits=inits, opset=17)
    _check(model, {}, atol=1e-6)


# --- RoiAlign, DeformConv -------------------------------------------------------------------
ROIS = np.array([[0, 0, 8, 6], [1.5, 2.2, 5.1, 6.3], [-3, -2, 12, 11], [4, 4, 4, 4], [2, 1, 7.5, 3]], np.float32)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 1, 3])
def test_roi_align(mode, ctm, ratio):
    """Rois off the image, empty and tiny ones, two images; sampling_ratio 0 (adaptive) takes
    the rois as a constant (its sample counts are then static)."""
    x = RNG.standard_normal((2, 3, 7, 9)).astype(np.float32)
    bi = np.array([0, 1, 1, 0, 1], np.int64)
    node = oh.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], mode=mode, coordinate_transformation_mode=ctm,
                        sampling_ratio=ratio, output_height=3, output_width=2, spatial_scale=0.8)
    inputs = [_vi("x", TP.FLOAT, x.shape), _vi("bi", TP.INT64, [5])]
    feeds = {"x": x, "bi": bi}
    inits = [("rois", ROIS)] if ratio == 0 else []
    if ratio:
        inputs.append(_vi("rois", TP.FLOAT, [5, 4]))
        feeds["rois"] = ROIS
    _check(_model([node], inputs, [_vi("y", TP.FLOAT, [5, 3, 3, 2])], inits=inits, opset=16), feeds, atol=1e-5)


def test_roi_align_adaptive_with_run_time_rois_is_a_named_error():
    node = oh.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], sampling_ratio=0)
    model = _model([node], [_vi("x", TP.FLOAT, [1, 1, 4, 4]), _vi("rois", TP.FLOAT, [2, 4]), _vi("bi", TP.INT64, [2])],
                   [_vi("y", TP.FLOAT, [2, 1, 1, 1])], opset=16)
    with pytest.raises(lo.OnnxImportError, match="adaptive"):
        lo.compile(model, device="numpy")


def test_roi_align_opset_10_is_output_half_pixel_on_the_cpu_backend():
    x = RNG.standard_normal((2, 3, 7, 9)).astype(np.float32)
    node = oh.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], sampling_ratio=2, output_height=2, output_width=3)
    model = _model([node], [_vi("x", TP.FLOAT, x.shape), _vi("rois", TP.FLOAT, [5, 4]), _vi("bi", TP.INT64, [5])],
                   [_vi("y", TP.FLOAT, [5, 3, 2, 3])], opset=10)
    _check(model, {"x": x, "rois": ROIS, "bi": np.array([0, 1, 1, 0, 1], np.int64)}, device="cpu")


@pytest.mark.parametrize("attrs,group,ogroup,mask,bias", [
    ({}, 1, 1, False, False),
    ({"strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2]}, 1, 1, True, True),
    ({"pads": [1, 1, 1, 1]}, 2, 2, True, False),
    ({"strides": [1, 2]}, 1, 4, False, True),
])
def test_deform_conv(attrs, group, ogroup, mask, bias):
    n, ic, oc, h, w, kh, kw = 2, 4, 6, 7, 8, 3, 2
    st, pd, dl = attrs.get("strides", [1, 1]), attrs.get("pads", [0] * 4), attrs.get("dilations", [1, 1])
    oh_ = (h + pd[0] + pd[2] - dl[0] * (kh - 1) - 1) // st[0] + 1
    ow = (w + pd[1] + pd[3] - dl[1] * (kw - 1) - 1) // st[1] + 1
    feeds = {"x": RNG.standard_normal((n, ic, h, w)).astype(np.float32),
             "w": RNG.standard_normal((oc, ic // group, kh, kw)).astype(np.float32),
             "off": (RNG.standard_normal((n, ogroup * kh * kw * 2, oh_, ow)) * 1.5).astype(np.float32)}
    names = ["x", "w", "off", "b" if bias else "", "m" if mask else ""]
    if bias:
        feeds["b"] = RNG.standard_normal(oc).astype(np.float32)
    if mask:
        feeds["m"] = RNG.random((n, ogroup * kh * kw, oh_, ow)).astype(np.float32)
    inputs = [_vi(k, TP.FLOAT, v.shape) for k, v in feeds.items()]
    model = _model([oh.make_node("DeformConv", names, ["y"], group=group, offset_group=ogroup, kernel_shape=[kh, kw],
                                 **attrs)], inputs, [_vi("y", TP.FLOAT, [n, oc, oh_, ow])])
    _check(model, feeds, atol=1e-4, rtol=1e-4)


# --- ai.onnx.ml ------------------------------------------------------------------------------
def test_binarizer_and_array_feature_extractor():
    x = np.array([[0.5, 0.0, -1.0, 2.0], [0.4, 0.6, np.inf, -np.inf]], np.float32)  # onnxruntime rejects NaN
    idx = np.array([[3, 0, 3]], np.int64)
    nodes = [oh.make_node("Binarizer", ["x"], ["b"], threshold=0.5, domain="ai.onnx.ml"),
             oh.make_node("ArrayFeatureExtractor", ["x", "i"], ["f"], domain="ai.onnx.ml")]
    model = _model(nodes, [_vi("x", TP.FLOAT, x.shape), _vi("i", TP.INT64, idx.shape)],
                   [_vi("b", TP.FLOAT, x.shape), _vi("f", TP.FLOAT, [2, 3])], domains=["ai.onnx.ml"])
    _check(model, {"x": x, "i": idx})


def _int_pair(pair):
    return pair[0], int(pair[1])


def _random_forest(n_trees, n_features, n_targets, depth):
    """TreeEnsemble attributes of random complete trees (every mode, missing-value tracking)."""
    modes, splits, feats, tids, fids, tleaf, fleaf, miss, members = [], [], [], [], [], [], [], [], []
    leaf_t, leaf_w, roots = [], [], []

    def build(d):
        if d == depth:
            leaf_t.append(int(RNG.integers(0, n_targets)))
            leaf_w.append(float(np.round(RNG.standard_normal(), 2)))
            return len(leaf_t) - 1, True
        i = len(modes)
        mode = int(RNG.integers(0, 7))
        modes.append(mode)
        splits.append(float(np.round(RNG.standard_normal(), 1)))
        feats.append(int(RNG.integers(0, n_features)))
        miss.append(int(RNG.integers(0, 2)))
        tids.append(0)
        fids.append(0)
        tleaf.append(0)
        fleaf.append(0)
        if mode == 6:
            values = np.round(RNG.standard_normal(2), 1)
            members.extend([*np.where(values == 0, 0.5, values).tolist(), np.nan])  # the reference ends a set at 0.0
        tids[i], tleaf[i] = _int_pair(build(d + 1))
        fids[i], fleaf[i] = _int_pair(build(d + 1))
        return i, False

    for _ in range(n_trees):
        roots.append(build(0)[0])
    attrs = dict(nodes_modes=numpy_helper.from_array(np.array(modes, np.uint8)), nodes_featureids=feats,
                 nodes_splits=numpy_helper.from_array(np.array(splits, np.float32)), nodes_truenodeids=tids,
                 nodes_falsenodeids=fids, nodes_trueleafs=tleaf, nodes_falseleafs=fleaf, leaf_targetids=leaf_t,
                 leaf_weights=numpy_helper.from_array(np.array(leaf_w, np.float32)), tree_roots=roots,
                 n_targets=n_targets, nodes_missing_value_tracks_true=miss)
    if members:
        attrs["membership_values"] = numpy_helper.from_array(np.array(members, np.float32))
    return attrs


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_matches_the_reference(aggregate):
    """Five depth-3 trees over 4 features and 3 targets; inputs on the splits and NaN."""
    attrs = _random_forest(5, 4, 3, 3)
    x = np.round(RNG.standard_normal((40, 4)), 1).astype(np.float32)
    x[RNG.random(x.shape) < 0.1] = np.nan
    model = _model([oh.make_node("TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", aggregate_function=aggregate,
                                 **attrs)], [_vi("x", TP.FLOAT, x.shape)], [_vi("y", TP.FLOAT, [40, 3])],
                   domains=["ai.onnx.ml"])
    model.opset_import[1].version = 5
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = lo.compile(model, device="cpu" if aggregate == 1 else "numpy")(x)  # sum: on the C backend
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op,per,attrs", [
    ("Adagrad", 3, {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}),
    ("Adam", 4, {"alpha": 0.9, "beta": 0.99, "epsilon": 1e-6, "norm_coefficient": 0.01, "norm_coefficient_post": 0.02}),
    ("Momentum", 3, {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.01}),
    ("Momentum", 3, {"alpha": 0.9, "beta": 0.5, "mode": "nesterov", "norm_coefficient": 0.01}),
])
@pytest.mark.parametrize("step", [0, 3])
def test_optimizer_steps_match_the_reference(op, per, attrs, step):
    """Two tensor groups, the first step (T = 0) and a later one (Adam's bias correction,
    Momentum's beta)."""
    shapes = [(3,), (2, 2)]
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(step, np.int64)}
    for k in range(per):
        for i, s in enumerate(shapes):
            feeds[f"in{k}_{i}"] = (RNG.random(s) + (0.5 if k == per - 1 else -0.5)).astype(np.float32)
    outs = [f"out{k}_{i}" for k in range(per - 1) for i in range(2)]
    model = _model([oh.make_node(op, list(feeds), outs, domain="ai.onnx.preview.training", **attrs)],
                   [_vi(n, TP.FLOAT if a.dtype == np.float32 else TP.INT64, a.shape) for n, a in feeds.items()],
                   [_vi(n, TP.FLOAT, shapes[int(n[-1])]) for n in outs], domains=["ai.onnx.preview.training"])
    want = ReferenceEvaluator(model).run(None, feeds)
    got = lo.compile(model, device="numpy")(feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_tensor_scatter_past_the_end_raises():
    past, update = np.zeros((2, 5, 3), np.float32), np.ones((2, 2, 3), np.float32)
    model = _model([oh.make_node("TensorScatter", ["past", "update", "idx"], ["y"])],
                   [_vi("past", TP.FLOAT, past.shape), _vi("update", TP.FLOAT, update.shape), _vi("idx", TP.INT64, [2])],
                   [_vi("y", TP.FLOAT, past.shape)], opset=24)
    m = lo.compile(model, device="numpy")
    m(past, update, np.array([3, 0], np.int64))  # the last two rows: fine
    with pytest.raises(luminal.IndexOutOfRange):
        m(past, update, np.array([4, 0], np.int64))
