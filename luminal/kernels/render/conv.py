"""WindowReduce kernels (direct convolutions and pooling) in the CUDA dialect, and the element
body both dialects share.

A WindowReduce (`luminal/hlir/ops.py`) reduces the product of its operands (window views of
an input and a broadcast weight; one window view, for pooling) over their last r axes. One
output element is one thread here, and one element of a vectorized row loop in the C dialect
(`luminal/kernels/cpu/conv.py`). The kernel axes are static: unrolled when their product is
at most `UNROLL` (the common 3x3, 5x5, 7x7 windows), else loops. Sums accumulate in the
compute type (float for f32/f16/bf16, as a GEMM does); max propagates NaN, as MaxReduce.
"""

from __future__ import annotations

import itertools

from luminal.errors import UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node
from luminal.kernels.render.cexpr import c_dim, compute_type
from luminal.kernels.render.cstyle import (
    THREADS,
    KernelSpec,
    buffer_sources,
    dtypes_of,
    pointer_of,
    read,
    signature,
    store_value,
    symbols_of,
    unravel,
    wrapping,
)

UNROLL = 64  # kernel windows of at most this many terms are unrolled

LOWEST = {"float": "-__int_as_float(0x7f800000)", "double": "-__longlong_as_double(0x7ff0000000000000LL)",
          "int": "(-2147483647 - 1)", "long long": "(-9223372036854775807LL - 1)"}


def accumulator(node: Node) -> str:
    t = compute_type(node.dtype)
    if node.dtype is DType.BOOL or t not in LOWEST:
        raise UnsupportedError(f"WindowReduce on {node.dtype}")
    return t


def element(node: Node, idx: list[str], inputs: list[Node]) -> tuple[str, str]:
    """(statements, value) computing one output element in the compute type, `idx` its index."""
    kind, r = node.arg
    t = accumulator(node)
    kernel = [int(d) for d in node.src[0].shape[-r:]]

    def term(k: list[str]) -> str:
        vals = [f"(({t}){read(s, idx + k, pointer_of(s, inputs))})" for s in node.src]
        return vals[0] if len(vals) == 1 else wrapping(t, vals[0], "*", vals[1])

    def combine(acc: str, v: str) -> str:
        return wrapping(t, acc, "+", v) if kind == "sum" else f"lum_max_nan({acc}, {v})"

    init = f"(({t})0)" if kind == "sum" else LOWEST[t]
    total = sym.product(kernel)
    if total <= UNROLL:  # the terms in axis order, from the first (an empty window: the identity)
        terms = [term([f"{j}LL" for j in k]) for k in itertools.product(*(range(d) for d in kernel))]
        if len(terms) <= 1:
            return "", terms[0] if terms else init
        # one statement per term, not nested calls: the C prelude's type-generic lum_max_nan
        # names its first argument twice, so nesting doubles the text per level (a 5x5 max pool: cc1
        # out of memory)
        return f"{t} acc = {terms[0]};" + "".join(f" acc = {combine('acc', v)};" for v in terms[1:]), "acc"
    names = [f"k{j}" for j in range(r)]
    loops = "".join(f"for (long long {n} = 0; {n} < {d}LL; ++{n}) " for n, d in zip(names, kernel))
    return f"{t} acc = {init};\n    {loops}acc = {combine('acc', term(names))};", "acc"


def window_reduce(node: Node, name: str) -> list[KernelSpec]:
    """One thread per output element."""
    inputs = buffer_sources(node)
    symbols = symbols_of(node)
    numel = sym.product(node.shape)
    idx, lines = unravel("idx", node.shape)
    stmts, value = element(node, idx, inputs)
    body = "\n    ".join(lines + ([stmts] if stmts else []))
    src = f"""{signature(name, node, inputs, symbols, False)} {{
  long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= {c_dim(numel)}) return;
  {{
    {body}
    out[idx] = {store_value(node.dtype, value)};
  }}
}}
"""
    return [KernelSpec(name, src, node, inputs, symbols, sym.ceildiv(numel, THREADS), THREADS, False, dtypes_of(node))]
