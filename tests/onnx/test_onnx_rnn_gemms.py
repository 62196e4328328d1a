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
    # initial_h means may stay a broadcast product and sum (0 * R is not folded: R may hold inf)
    low, high = 1 + dirs * (SEQ - 1) * recurrent, 1 + dirs * SEQ * recurrent
    assert low <= ops.count(Op.MAT_MUL) <= high, ops
    assert ops.count(Op.KAHAN_SUM) + ops.count(Op.SUM_REDUCE) <= dirs * recurrent, ops
