"""Reference definitions of the fused ops in primitives: what each fused op means.

Each function builds, with the tensor builder, the primitive decomposition that the fusion
rules replace (the builder's own spelling, so the rules' left-hand sides are exactly these).
Tests check every fused op's NumPy (and CUDA) implementation against them; `decompose` turns
a graph with fused ops back into primitives (for a backend that lacks a fused op, say).
"""

from __future__ import annotations

from luminal.builder.graph import Graph
from luminal.builder.tensor import Tensor
from luminal.hlir import constants as C
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import FUSED, Node, Op, toposort


def exp(x: Tensor) -> Tensor:
    return x.mul(C.LOG2E).exp2()  # exp(x) = exp2(x * log2 e)


def sigmoid(x: Tensor) -> Tensor:
    return x.mul(-1.0).exp().add(1.0).reciprocal()  # 1 / (1 + exp(-x))


def softmax(x: Tensor, axis: int) -> Tensor:
    e = x.sub(x.max(axis, keepdim=True)).exp()  # exp(x - max) * recip(sum(exp(x - max)))
    return e.mul(e.sum(axis, keepdim=True).reciprocal())


def kahan_sum(x: Tensor, axis: int) -> Tensor:
    return x._reduce_prim(Op.SUM_REDUCE, axis, False)  # the plain sum: Kahan only rounds less


def mat_mul(a: Tensor, b: Tensor) -> Tensor:
    return a.matmul(b)  # broadcast-multiply a[..., M, 1, K] * bT[..., 1, N, K], sum over K


def fused_elementwise(expr: tuple, inputs: list[Tensor]) -> Tensor:
    """The expression of a FusedElementwise region, one primitive per level."""
    kind, dtype = expr[0], expr[1]
    if kind == "in":
        return inputs[expr[2]]
    if kind == "const":
        return inputs[0].graph.scalar(expr[2], dtype).expand(inputs[0].shape)
    kids = [fused_elementwise(c, inputs) for c in expr[2:]]
    if kind == "CAST":
        return kids[0].cast(dtype)
    op = Op[kind]
    if op is Op.EXP:
        return exp(kids[0])
    if op is Op.SIGMOID:
        return sigmoid(kids[0])
    if len(kids) == 1:
        return kids[0]._new(op, dtype, kids[0].shape, (kids[0],))
    return kids[0]._new(op, DType.BOOL if op is Op.LESS_THAN else dtype, kids[0].shape, (kids[0], kids[1]))


def reference(node: Node, src: list[Tensor]) -> Tensor:
    """The primitive decomposition of one fused node over operand tensors `src`."""
    if node.op is Op.EXP:
        return exp(src[0])
    if node.op is Op.SIGMOID:
        return sigmoid(src[0])
    if node.op is Op.SOFTMAX:
        return softmax(src[0], node.arg)
    if node.op is Op.KAHAN_SUM:
        return kahan_sum(src[0], node.arg)
    if node.op is Op.MAT_MUL:
        return mat_mul(src[0], src[1])
    if node.op is Op.FUSED_ELEMENTWISE:
        return fused_elementwise(node.arg, src)
    raise ValueError(f"{node.op.title} is not a fused op")


def decompose(outputs: list[Node]) -> list[Node]:
    """The same graph with every fused op replaced by its reference decomposition."""
    g = Graph("decomposed")
    new: dict[int, Node] = {}
    for n in toposort(outputs):
        src = [new[id(s)] for s in n.src]
        if n.op in FUSED:
            new[id(n)] = reference(n, [Tensor(g, s) for s in src]).node
        else:
            new[id(n)] = n if not src else n.replace(src=tuple(src))
    return [new[id(n)] for n in outputs]
