"""Unrolled recurrences as GEMMs (`ops_rnn.py`): the input projection of both directions is one
MatMul, a GRU with linear_before_reset one recurrent MatMul per step, and at batch 1 the
recurrent product H @ R^T is still a MatMul (spelled R @ H^T: the product's view of R would be R
itself, and the MatMul rule matches views) rather than a broadcast product and a KahanSum per
step. Values against onnxruntime (all directions, sequence_lens, batch 1 and 3)."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import luminal.onnx as lo
from luminal.errors import IndexOutOfRange
from luminal.hlir.ops import Op, toposort

ort = pytest.importorskip("onnxruntime")
SEQ, INP, HID = 5, 6, 4


def _model(op, direction, batch, lens, **attrs):
    rng = np.random.default_rng(1)
    dirs = 2 if direction == "bidirectional" else 1
    gates = {"GRU": 3, "LSTM": 4, "RNN": 1}[op]
    inits = [numpy_helper.from_array(rng.standard_normal((dirs, gates * HID, INP)).astype(np.float32) * 0.5, "W"),
             numpy_helper.from_array(rng.standard_normal((dirs, gates * HID, HID)).astype(np.float32) * 0.5, "R"),
             numpy_helper.from_array(rng.standard_normal((dirs, 2 * gates * HID)).astype(np.float32) * 0.5, "B")]
    inputs = [oh.make_tensor_value_info("x", TP.FLOAT, [SEQ, batch, INP])]
    names = ["x", "W", "R", "B"]
    if lens:
        inputs.append(oh.make_tensor_value_info("lens", TP.INT32, [batch]))
        names.append("lens")
    outs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    node = oh.make_node(op, names, outs, hidden_size=HID, direction=direction, **attrs)
    graph = oh.make_graph([node], "g", inputs, [oh.make_tensor_value_info(o, TP.FLOAT, ["d"] * (4 if o == "y" else 3)) for o in outs], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)], ir_version=8)


CASES = [("LSTM", "forward", 1, False, {}), ("LSTM", "bidirectional", 3, True, {}),
         ("GRU", "bidirectional", 1, False, {"linear_before_reset": 1}), ("GRU", "reverse", 3, True, {"linear_before_reset": 1}),
         ("GRU", "bidirectional", 1, True, {}), ("RNN", "bidirectional", 1, False, {})]


@pytest.mark.parametrize("op,direction,batch,lens,attrs", CASES, ids=[f"{c[0]}-{c[1]}-b{c[2]}{'-lens' if c[3] else ''}"
                                                                     f"{'-lbr' if c[4] else ''}" for c in CASES])
def test_recurrences_are_gemms_with_onnxruntime_values(op, direction, batch, lens, attrs):
    model = _model(op, direction, batch, lens, **attrs)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((SEQ, batch, INP)).astype(np.float32)}
    if lens:
        feeds["lens"] = np.array([SEQ, 2, 1][:batch], np.int32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    compiled = lo.compile(model, device="cpu")
    got = compiled(feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    ops = [n.op for n in toposort(compiled.compiled.outputs)]
    dirs = 2 if direction == "bidirectional" else 1
    recurrent = 2 if op == "GRU" and not attrs else 1  # without linear_before_reset, r * h comes first
    # one projection, then one or two per step; the first step's product with the zero state no
    # initial_h means is computed at import (`test_first_step_product_...` below); a GRU without
    # linear_before_reset keeps (r * 0) @ R^T there, r being the input's
    low, high = 1 + dirs * (SEQ - 1) * recurrent, 1 + dirs * SEQ * recurrent
    assert low <= ops.count(Op.MAT_MUL) <= high, ops
    assert ops.count(Op.KAHAN_SUM) + ops.count(Op.SUM_REDUCE) <= dirs * recurrent, ops


def _embedding_gru(transpose: bool, vocab: int = 11):
    rng = np.random.default_rng(4)
    emb = rng.standard_normal((vocab, INP)).astype(np.float32)
    emb[3, 2] = np.inf  # a row that gives inf/NaN gates: the table carries them as the GEMM would
    inits = [numpy_helper.from_array(emb, "E"),
             numpy_helper.from_array(rng.standard_normal((2, 3 * HID, INP)).astype(np.float32) * 0.5, "W"),
             numpy_helper.from_array(rng.standard_normal((2, 3 * HID, HID)).astype(np.float32) * 0.5, "R"),
             numpy_helper.from_array(rng.standard_normal((2, 6 * HID)).astype(np.float32) * 0.5, "B")]
    nodes = [oh.make_node("Gather", ["E", "ids"], ["e"], axis=0)]
    if transpose:
        nodes.append(oh.make_node("Transpose", ["e"], ["x"], perm=[1, 0, 2]))
    nodes.append(oh.make_node("GRU", ["x" if transpose else "e", "W", "R", "B"], ["y", "y_h"], hidden_size=HID,
                              direction="bidirectional", linear_before_reset=1))
    ids_shape = ["b", SEQ] if transpose else [SEQ, "b"]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("ids", TP.INT64, ids_shape)],
                          [oh.make_tensor_value_info("y", TP.FLOAT, ["d"] * 4), oh.make_tensor_value_info("y_h", TP.FLOAT, ["d"] * 3)],
                          inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)], ir_version=8)


@pytest.mark.parametrize("transpose", [True, False])
def test_embedding_projection_is_a_table_lookup(transpose):
    """Gather(E, ids) (transposed from batch-major) into a GRU: the input projection is a gather
    from E @ W^T, computed once (no projection GEMM), with onnxruntime's values, negative ids
    included; an id out of range is the named error, as the Gather of E would raise."""
    model = _embedding_gru(transpose)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = lo.compile(model, device="cpu")
    for batch in (1, 3):
        ids = np.array([[0, 5, -1, 10, 7], [1, 1, 2, 9, -11], [4, 6, 8, 0, 2]][:batch], np.int64)
        ids = ids if transpose else ids.T.copy()
        got, want = compiled(ids), sess.run(None, {"ids": ids})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    with_inf = np.full((1, SEQ), 3, np.int64) if transpose else np.full((SEQ, 1), 3, np.int64)
    for g, w in zip(compiled(with_inf), sess.run(None, {"ids": with_inf})):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    ops = [n.op for n in toposort(compiled.compiled.outputs)]
    assert ops.count(Op.MAT_MUL) == 2 * (SEQ - 1), ops  # the recurrent GEMMs only: no projection
    with pytest.raises(IndexOutOfRange):
        compiled(np.full(with_inf.shape, 11, np.int64))


def _with_initial(op, batch, initial: str, r_special: bool):
    """A bidirectional `op` whose initial state is `initial`: "absent" (zeros), "given" (an
    initializer, `_H0`) or "input"; R with an inf and a NaN where `r_special`."""
    rng = np.random.default_rng(6)
    gates = {"GRU": 3, "LSTM": 4, "RNN": 1}[op]
    r = rng.standard_normal((2, gates * HID, HID)).astype(np.float32) * 0.5
    if r_special:
        r[0, 1, 2], r[1, 0, 3] = np.inf, np.nan
    inits = [numpy_helper.from_array(rng.standard_normal((2, gates * HID, INP)).astype(np.float32) * 0.5, "W"),
             numpy_helper.from_array(r, "R"),
             numpy_helper.from_array(rng.standard_normal((2, 2 * gates * HID)).astype(np.float32) * 0.5, "B")]
    inputs = [oh.make_tensor_value_info("x", TP.FLOAT, [SEQ, batch, INP])]
    names = ["x", "W", "R", "B", ""]
    if initial == "given":
        inits.append(numpy_helper.from_array(_H0, "h0"))
        names.append("h0")
    elif initial == "input":
        inputs.append(oh.make_tensor_value_info("h0", TP.FLOAT, [2, batch, HID]))
        names.append("h0")
    outs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    attrs = {"linear_before_reset": 1} if op == "GRU" else {}
    node = oh.make_node(op, names, outs, hidden_size=HID, direction="bidirectional", **attrs)
    graph = oh.make_graph([node], "g", inputs, [oh.make_tensor_value_info(o, TP.FLOAT, ["d"] * (4 if o == "y" else 3)) for o in outs], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)], ir_version=8)


_H0 = np.random.default_rng(8).standard_normal((2, 2, HID)).astype(np.float32)


@pytest.mark.parametrize("op", ["GRU", "LSTM", "RNN"])
@pytest.mark.parametrize("initial,batch", [("absent", "b"), ("absent", 2), ("given", 2)])
@pytest.mark.parametrize("r_special", [False, True], ids=["finite", "inf_nan_in_R"])
def test_first_step_product_with_a_constant_state_is_computed_once(op, initial, batch, r_special):
    """H0 @ R^T of the first step is a constant when H0 is (zeros when absent, an initializer):
    computed at import (float64, rounded once), so the graph has one recurrent product fewer per
    direction and no broadcast product and sum of 0 * R. Values: onnxruntime's; with inf/NaN in R
    (where onnxruntime's own GRU and LSTM give other NaN patterns, even for a state fed at run
    time) those of the same model with the state fed at run time, whose product the graph
    computes (0 * inf is NaN in both)."""
    model = _with_initial(op, batch, initial, r_special)
    compiled = lo.compile(model, device="cpu")
    fed = lo.compile(_with_initial(op, batch, "input", r_special), device="cpu")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    for n in ((1, 3) if batch == "b" else (2,)):
        feeds = {"x": rng.standard_normal((SEQ, n, INP)).astype(np.float32)}
        got = compiled(feeds)
        want = fed({**feeds, "h0": _H0 if initial == "given" else np.zeros((2, n, HID), np.float32)})
        if not r_special:
            for w, o in zip(want, sess.run(None, feeds)):  # the fed graph is onnxruntime's too
                np.testing.assert_allclose(w, o, rtol=1e-5, atol=1e-6)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
            np.testing.assert_allclose(g[~np.isnan(g)], w[~np.isnan(w)], rtol=1e-5, atol=1e-6)
        if r_special:
            assert np.isnan(got[0]).any()
    for graph, first_folded in ((compiled, True), (fed, False)):
        ops = [nd.op for nd in toposort(graph.compiled.outputs)]
        assert ops.count(Op.MAT_MUL) == 1 + 2 * (SEQ - first_folded), ops  # the projection, then one a step
        assert ops.count(Op.KAHAN_SUM) + ops.count(Op.SUM_REDUCE) == 0, ops


def test_constant_product_refuses_a_padded_state():
    """A state padded from a broadcast scalar is not that scalar everywhere (the padding reads as
    zero): no import-time product is made from the scalar alone. An unpadded one at a symbolic
    batch is one row, h @ R^T, expanded."""
    import luminal as lm
    from luminal.frontends.onnx.ops_rnn import _constant_product, _constant_source

    g = lm.Graph()
    w = np.arange(24, dtype=np.float32).reshape(6, 4)
    r = g.constant(w)
    assert _constant_product(g.scalar(1.0, lm.f32).expand(("b", 3)).pad([(0, 0), (0, 1)]), r) is None
    product = _constant_product(g.scalar(0.5, lm.f32).expand(("b", 4)), r)
    assert product is not None and [str(d) for d in product.shape] == ["b", "6"]
    np.testing.assert_array_equal(_constant_source(product).arg.array.reshape(-1), 0.5 * w.sum(1))
