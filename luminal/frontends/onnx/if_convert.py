"""If-conversion: an If whose condition is not known at compile time, with two small branches
of ops that can neither fail at run time nor give data-dependent shapes, is imported as both
branches computed and one selected per element (`where`), in the one compiled graph.

That is what compilers do with short branches: no host round trip (`staged.py` runs a larger or
riskier If between compiled stages) and no compile per value of the condition (what the
importer did before). Computing the branch not taken is harmless here: its ops cannot raise (no
Gather/Scatter, whose indices are checked; no integer division, which raises on zero) and a NaN
or inf it makes is not selected. openWakeWord's wake-word model (If score >= threshold: a
29-node verifier, else the score itself) compiles into one graph this way.
"""

from __future__ import annotations

import onnx

MAX_BRANCH_NODES = 64  # both branches together: past this, computing both costs more than a host step
# ops that never raise at run time and whose output shapes follow from their input shapes
# (a Reshape/Slice/Expand whose target is run-time data fails the import instead: then the model
# compiles per value, as before); Div and Pow only on floats (integer division by zero raises)
SAFE_OPS = {
    "Identity", "Constant", "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Abs", "Relu", "LeakyRelu", "Sigmoid",
    "HardSigmoid", "HardSwish", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Softmax", "LogSoftmax",
    "Softplus", "Elu", "Selu", "Gelu", "MatMul", "Gemm", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
    "Concat", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2", "Clip", "Max", "Min", "Sum", "Mean",
    "Cast", "Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Not", "Xor", "Where",
    "Floor", "Ceil", "Round", "Sign", "BatchNormalization", "LayerNormalization", "Shape", "Size", "Expand", "Slice",
}
FLOAT_ONLY = {"Div", "Pow"}
FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


def convertible(proto: onnx.ModelProto, node: onnx.NodeProto) -> bool:
    """`node` (an If) may be imported as both branches and a select."""
    branches = [a.g for a in node.attribute if a.name in ("then_branch", "else_branch")]
    if node.op_type != "If" or len(branches) != 2:
        return False
    nodes = [n for g in branches for n in g.node]
    if len(nodes) > MAX_BRANCH_NODES:
        return False
    for n in nodes:
        if n.op_type not in SAFE_OPS or n.domain not in ("", "ai.onnx") or any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
            return False
    risky = [n for n in nodes if n.op_type in FLOAT_ONLY]
    if risky:
        types = _elem_types(proto)
        if any(types.get(n.input[0]) not in FLOATS for n in risky):
            return False
    return True


def _elem_types(proto: onnx.ModelProto) -> dict[str, int]:
    """value name -> ONNX element type, as onnx's shape inference finds them (subgraphs included)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception:  # noqa: BLE001 - without inference, no Div/Pow branch is converted
        return {}
    out: dict[str, int] = {}

    def walk(g: onnx.GraphProto) -> None:
        for i in g.initializer:
            out[i.name] = i.data_type
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                out[vi.name] = vi.type.tensor_type.elem_type
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sub in a.graphs:
                    walk(sub)
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value":
                        out[n.output[0]] = a.t.data_type

    walk(inferred.graph)
    return out
