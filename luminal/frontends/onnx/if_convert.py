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

from luminal.frontends.onnx.inferred import Inferred

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


def convertible(node: onnx.NodeProto, inferred: Inferred) -> bool:
    """`node` (an If) may be imported as both branches and a select; `inferred` is the model's
    shape inference (its element types are read only for a branch that divides)."""
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
    return all(inferred.elem_types.get(n.input[0]) in FLOATS for n in nodes if n.op_type in FLOAT_ONLY)
