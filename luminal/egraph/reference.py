"""Reference definitions of the fused ops in primitives: what each fused op means.

Each entry of `DEFINITIONS` builds, with the tensor builder, the primitive decomposition that
the fusion rules replace (the builder's own spelling: the rules' left-hand sides are these).
Tests check every fused op's NumPy (and CUDA) implementation against them; `decompose` turns
a graph with fused ops back into primitives (for a backend that lacks a fused op, say).
"""

from __future__ import annotations

from luminal.builder import functional as F
from luminal.builder.graph import Graph
from luminal.builder.linalg import grouped_rows
from luminal.builder.tensor import Tensor
from luminal.hlir import constants as C
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import FUSED, Expr, Node, Op, attention_arg, toposort


def softmax(x: Tensor, axis: int) -> Tensor:
    e = x.sub(x.max(axis, keepdim=True)).exp()  # exp(x - max) * recip(sum(exp(x - max)))
    return e.mul(e.sum(axis, keepdim=True).reciprocal())


def fused_elementwise(expr: Expr, inputs: list[Tensor]) -> Tensor:
    """The expression of a FusedElementwise region, one primitive (or definition) per level."""
    if expr.op is Op.INPUT:
        return inputs[expr.arg]
    if expr.op is Op.CONSTANT:
        return inputs[0].graph.scalar(expr.arg, expr.dtype).expand(inputs[0].shape)
    kids = [fused_elementwise(c, inputs) for c in expr.src]
    if expr.op is Op.CAST:
        return kids[0].cast(expr.dtype)
    if expr.op in DEFINITIONS:  # Exp, Sigmoid
        return DEFINITIONS[expr.op](kids, None)
    return kids[0]._new(expr.op, expr.dtype, kids[0].shape, tuple(kids))


def window_reduce(src: list[Tensor], arg) -> Tensor:
    """The product of the operands reduced over the last r axes, one SumReduce (MaxReduce) each."""
    kind, r = arg
    x = src[0] if len(src) == 1 else src[0].mul(src[1])
    return x._reduce_prim(Op.SUM_REDUCE if kind == "sum" else Op.MAX_REDUCE, tuple(range(x.ndim - r, x.ndim)), False)


def attention(src: list[Tensor], arg) -> Tensor:
    """softmax(q @ kt (* scale) (+ mask, or where(mask, s, fill))) @ v, rows of scores all -inf
    giving 0 where asked; in f16/bf16 the softmax in f32 between casts."""
    (scale, zero_empty_rows, expr, select, half, transform), (q, kt, v, *mask) = attention_arg(arg), src
    s = q.matmul(kt)
    if scale is not None:  # in f16/bf16 the product in f32, rounded (the scale may be an f32 constant)
        s = s.mul(scale) if half is None else s.cast(DType.F32).mul(scale).cast(half)
    if transform is not None:  # a pointwise function of the scores (a soft cap)
        s = fused_elementwise(transform, [s])
    m = fused_elementwise(expr, mask) if expr is not None else mask[0] if mask else None
    if m is not None and select is None:
        s = s.add(m)
    elif m is not None:
        fill = s.graph.scalar(select[0], s.dtype).expand(s.shape)
        s = F.where(m, s, fill) if select[1] else F.where(m, fill, s)
    if half is not None:
        s = s.cast(DType.F32)
    p = softmax(s, s.ndim - 1)
    if zero_empty_rows:
        empty = s.ne(float("-inf")).max(-1, keepdim=True).logical_not().expand(s.shape)
        p = F.where(empty, s.graph.scalar(0.0, s.dtype).expand(s.shape), p)
    if half is not None:
        p = p.cast(half)
    return p.matmul(v)


# every fused op (group FUSED): its definition over operand tensors and the node's arg
DEFINITIONS = {
    Op.EXP: lambda src, arg: src[0].mul(C.LOG2E).exp2(),  # exp(x) = exp2(x * log2 e)
    Op.SIGMOID: lambda src, arg: src[0].mul(-1.0).exp().add(1.0).reciprocal(),  # 1 / (1 + exp(-x))
    Op.SOFTMAX: lambda src, arg: softmax(src[0], arg),
    Op.KAHAN_SUM: lambda src, arg: src[0]._reduce_prim(Op.SUM_REDUCE, arg, False),  # the plain sum: Kahan rounds less
    Op.MAT_MUL: lambda src, arg: src[0].matmul(src[1]),  # broadcast-multiply a[.., M, 1, K] * bT[.., 1, N, K], sum K
    Op.FUSED_ELEMENTWISE: lambda src, arg: fused_elementwise(arg, src),
    Op.SELECT: lambda src, arg: F.where(*src),  # gather(stack([b, a], -1), cast(cond)), reshaped
    Op.CONCAT: lambda src, arg: F.concat(src, arg),  # scatters of a, b into zeros at their spans
    Op.WINDOW_REDUCE: window_reduce,
    Op.ATTENTION: attention,
    Op.MAXIMUM: lambda src, arg: src[0].maximum(src[1]),  # max(stack([a, b], -1), -1)  # sum_k window(x)[o, k] * w[o, k], reduced an axis at a time
    Op.GROUPED_MAT_MUL: lambda src, arg: grouped_rows(*src),  # each row times its group's gathered matrix
}


def decompose(outputs: list[Node]) -> list[Node]:
    """The same graph with every fused op replaced by its reference decomposition."""
    g = Graph("decomposed")
    new: dict[int, Node] = {}
    for n in toposort(outputs):
        src = [new[id(s)] for s in n.src]
        if n.op in FUSED:
            new[id(n)] = DEFINITIONS[n.op]([Tensor(g, s) for s in src], n.arg).node
        else:
            new[id(n)] = n if not src else n.replace(src=tuple(src))
    return [new[id(n)] for n in outputs]
