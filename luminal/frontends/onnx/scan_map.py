"""A Scan that maps each row of a matrix against a fixed one (skl2onnx's pairwise distances for
k-NN: its state X passes through unchanged while each training point is scanned), rewritten as
the same arithmetic on one broadcast (points, rows, features) block.

Unrolled, such a Scan is one Sub / reduce / Concat per training point (hundreds of kernels and
seconds of compile for a model whose work is a few thousand multiply-adds); batched, it is one
fused kernel. The elementwise ops and reductions are the body's own, so every element is
computed as the body computes it.

Matched: one state (N, F) returned by an Identity, one scanned (M, F) input along axis 0, scan
output stacked along axis 0, and a body of elementwise ops (the state, the scanned row and
one-element constants) then reductions over the features with keepdims=0. Anything else is left
to the importer."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

UNARY = {"Abs", "Neg", "Sqrt", "Exp", "Log", "Identity"}
BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"}
REDUCE = {"ReduceSum", "ReduceSumSquare", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2", "ReduceMean"}
# what a body value depends on: "state" (broadcasts to (N, F)), "row" (the scanned row, (F,)),
# "pair" (both, (N, F)), "reduced" (a pair reduced over the features: (N,)), "const" (one element)


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _rank(proto: onnx.ModelProto, name: str) -> int | None:
    for i in proto.graph.initializer:
        if i.name == name:
            return len(i.dims)
    for vi in list(proto.graph.input) + list(proto.graph.value_info):
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            return len(vi.type.tensor_type.shape.dim)
    return None


def _plan(proto, node) -> list | None:
    """The batched nodes for `node` (a Scan), or None when it is not a map of this form."""
    a = _attrs(node)
    body = a.get("body")
    if body is None or a.get("num_scan_inputs") != 1 or len(node.input) != 2 or len(node.output) != 2:
        return None
    if any(list(a.get(k) or [0]) != [0] for k in ("scan_input_axes", "scan_output_axes", "scan_input_directions",
                                                   "scan_output_directions")):
        return None
    if _rank(proto, node.input[0]) != 2 or _rank(proto, node.input[1]) != 2:
        return None
    if len(body.input) != 2 or len(body.output) != 2:
        return None
    state, row = body.input[0].name, body.input[1].name
    consts = {i.name: numpy_helper.to_array(i) for i in body.initializer}
    kind = {state: "state", row: "row"}
    kind.update({n: "const" for n, v in consts.items() if v.size == 1})
    out_state, out_scan = body.output[0].name, body.output[1].name
    prefix = node.output[1] + "__luminal_scan_map/"
    new, inits = [], []

    def name(v):
        return v if v in (state, row) else prefix + v

    for n in body.node:
        ins = [i for i in n.input]
        if not n.output or len(n.output) != 1 or n.domain not in ("", "ai.onnx") or any(i not in kind for i in ins if i):
            return None
        ks = [kind[i] for i in ins if i]
        batched_ins = []
        for i in ins:
            if i in consts:
                t = numpy_helper.from_array(consts[i].reshape(()), prefix + i)
                inits.append(t)
                batched_ins.append(t.name)
            else:
                batched_ins.append(name(i))
        if n.op_type in UNARY and len(ins) == 1:
            out_kind = ks[0]
        elif n.op_type in BINARY and len(ins) == 2:
            if "reduced" in ks and any(k in ("state", "row", "pair") for k in ks):
                return None
            out_kind = "reduced" if "reduced" in ks else "pair" if "pair" in ks or {"state", "row"} <= set(ks) else (
                "state" if "state" in ks else "row" if "row" in ks else "const")
        elif n.op_type in REDUCE and ks and ks[0] in ("pair", "state"):
            na = _attrs(n)
            axes = list(na.get("axes", []))
            if len(ins) > 1 and ins[1]:
                if ins[1] not in consts:
                    return None
                axes = consts[ins[1]].reshape(-1).tolist()
            if axes not in ([1], [-1]) or na.get("keepdims", 1) != 0 or na.get("noop_with_empty_axes", 0):
                return None
            out_kind = "reduced" if ks[0] == "pair" else None
            if out_kind is None:
                return None
            shifted = numpy_helper.from_array(np.array([-1], np.int64), prefix + n.output[0] + "/axes")
            keep = {k: v for k, v in na.items() if k != "axes"}
            if len(ins) > 1 and ins[1]:
                inits.append(shifted)
                new.append(helper.make_node(n.op_type, [name(ins[0]), shifted.name], [name(n.output[0])], **keep))
            else:
                new.append(helper.make_node(n.op_type, [name(ins[0])], [name(n.output[0])], axes=[-1], **keep))
            kind[n.output[0]] = out_kind
            continue
        else:
            return None
        kind[n.output[0]] = out_kind
        new.append(helper.make_node(n.op_type, batched_ins, [name(n.output[0])], **_attrs(n)))
    if kind.get(out_state) != "state" or not any(n.op_type == "Identity" and n.output[0] == out_state and n.input[0] == state
                                                 for n in body.node):
        return None
    if kind.get(out_scan) not in ("pair", "reduced"):
        return None
    ax0 = numpy_helper.from_array(np.array([0], np.int64), prefix + "axis0")
    ax1 = numpy_helper.from_array(np.array([1], np.int64), prefix + "axis1")
    head = [helper.make_node("Unsqueeze", [node.input[0], ax0.name], [prefix + "state"]),
            helper.make_node("Unsqueeze", [node.input[1], ax1.name], [prefix + "row"]),
            helper.make_node("Identity", [node.input[0]], [node.output[0]])] if node.output[0] else [
            helper.make_node("Unsqueeze", [node.input[0], ax0.name], [prefix + "state"]),
            helper.make_node("Unsqueeze", [node.input[1], ax1.name], [prefix + "row"])]
    for n in new:  # the body's state and row are the broadcast blocks
        for k, i in enumerate(n.input):
            if i == state:
                n.input[k] = prefix + "state"
            elif i == row:
                n.input[k] = prefix + "row"
    tail = [helper.make_node("Identity", [name(out_scan)], [node.output[1]])]
    return [head + new + tail, [ax0, ax1] + inits]


def rewrite(proto: onnx.ModelProto) -> onnx.ModelProto:
    """`proto` with every main-graph Scan of the matched form batched; `proto` itself if none."""
    if not any(n.op_type == "Scan" for n in proto.graph.node):
        return proto
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13:  # Unsqueeze's axes and ReduceSum's as inputs
        return proto
    plans = {k: _plan(proto, n) for k, n in enumerate(proto.graph.node) if n.op_type == "Scan"}
    if not any(plans.values()):
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    del out.graph.node[:]
    for k, n in enumerate(proto.graph.node):
        plan = plans.get(k)
        if plan:
            out.graph.node.extend(plan[0])
            out.graph.initializer.extend(plan[1])
        else:
            out.graph.node.append(n)
    return out
