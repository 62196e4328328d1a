"""The element of a WindowReduce (direct convolutions and pooling), in every dialect.

A WindowReduce reduces the product of its operands (window views of an input and a weight; one,
for pooling) over their last r axes; one output element is one element of the dialect's loop. The
static kernel axes are unrolled up to `UNROLL` terms, else loops. Sums accumulate in the compute
type (float for f32/f16/bf16, as a GEMM does); max propagates NaN, as MaxReduce.
"""

from __future__ import annotations

import itertools
import re

from luminal.errors import UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node
from luminal.kernels.render.cexpr import compute_type, lowest
from luminal.kernels.render.cstyle import pointer_of, read, wrapping

UNROLL = 64  # kernel windows of at most this many terms are unrolled


def accumulator(node: Node) -> str:
    t = compute_type(node.dtype)
    if node.dtype is DType.BOOL or t not in ("float", "double", "int", "long long"):
        raise UnsupportedError(f"WindowReduce on {node.dtype}")
    return t


def element(node: Node, idx: list[str], inputs: list[Node]) -> tuple[str, str]:
    """(statements, value) computing one output element in the compute type, `idx` its index."""
    _, stmts, value = hoisted_element(node, idx, inputs, None)
    return stmts, value


def max_tree(t: str, terms: list[str]) -> tuple[str, str]:
    """(statements, value): the max of `terms` as neighbours paired in order, level by level,
    where a chain `acc = lum_max_nan(acc, term)` is one dependent compare and select per term (a
    max pool's row loop ran at the chain's latency). The same value, bits included: lum_max_nan(a, b) keeps a unless
    b is larger or NaN, so a chain gives the last NaN if there is one, else the first of the
    largest values (-0.0 before 0.0 when -0.0 comes first), and so does any in-order pairing of
    two runs of terms, each reduced the same way. Named statements, not nested calls
    (`hoisted_element`'s note)."""
    names = [f"mx{i}" for i in range(len(terms))]
    stmts = [f"const {t} {n} = {v};" for n, v in zip(names, terms)]
    level, count = names, len(names)
    while len(level) > 1:
        paired = []
        for a, b in zip(level[::2], level[1::2]):
            stmts.append(f"const {t} mx{count} = lum_max_nan({a}, {b});")
            paired.append(f"mx{count}")
            count += 1
        level = paired + level[len(paired) * 2:]
    return " ".join(stmts), level[0]


def hoisted_element(node: Node, idx: list[str], inputs: list[Node], inner: str | None,
                    term_read=None) -> tuple[str, str, str]:
    """(setup, statements, value): as `element`, with the reads that use neither `inner` (the
    index of the vectorized loop around the element) nor a window loop's index declared in `setup`,
    for the code before that loop: a conv's weights are the same along an output row, and a read
    the compiler does not hoist itself (the kernel's pointers lose `restrict` in an OpenMP region,
    so a store to `out` may change them) is a second load per term. `term_read(p, k)`, for an
    unrolled window: operand p's value at window position k (ints) as a C expression of the
    compute type, or None for the plain read (the C dialect's strided rows, `cpu.conv_phases.strided_phases`)."""
    kind, r = node.arg
    t = accumulator(node)
    kernel = [int(d) for d in node.src[0].shape[-r:]]
    names = [f"k{j}" for j in range(r)]
    unrolled = sym.product(kernel) <= UNROLL
    fixed = set() if unrolled else set(names)
    if inner is not None:
        fixed.add(inner)
    hoisted: dict[str, str] = {}

    def value_of(p: int, k: list[str], at: tuple[int, ...] | None) -> str:
        if term_read is not None and at is not None:
            v = term_read(p, at)
            if v is not None:
                return v
        s = node.src[p]
        v = f"(({t}){read(s, idx + k, pointer_of(s, inputs))})"
        if inner is None or fixed & set(re.findall(r"[A-Za-z_]\w*", v)):
            return v
        return hoisted.setdefault(v, f"w{len(hoisted)}")

    def term(k: list[str], at: tuple[int, ...] | None = None) -> str:  # at: an unrolled term's position
        return _product(t, [value_of(p, k, at) for p in range(len(node.src))])

    def combine(acc: str, v: str) -> str:
        return _combine(kind, t, acc, v)

    def setup() -> str:
        return " ".join(f"const {t} {w} = {v};" for v, w in hoisted.items())

    init = _identity(kind, t)
    if unrolled:  # the terms in axis order, from the first (an empty window: the identity)
        terms = [term([f"{j}LL" for j in k], k) for k in itertools.product(*(range(d) for d in kernel))]
        if len(terms) <= 1:
            return setup(), "", terms[0] if terms else init
        # one statement per term, not nested calls: the C prelude's lum_max_nan names its first
        # argument twice, so nesting doubles the text per level (cc1 ran out of memory)
        if kind != "sum":
            return (setup(), *max_tree(t, terms))
        return setup(), f"{t} acc = {terms[0]};" + "".join(f" acc = {combine('acc', v)};" for v in terms[1:]), "acc"
    body = f"{t} acc = {init};\n    {window_loops(node)}acc = {combine('acc', term(names))};"
    return setup(), body, "acc"


def window_loops(node: Node) -> str:
    """C opening the loops over a window that is not unrolled (index names k0.., in axis order)."""
    r = node.arg[1]
    kernel = [int(d) for d in node.src[0].shape[-r:]]
    return "".join(f"for (long long k{j} = 0; k{j} < {d}LL; ++k{j}) " for j, d in enumerate(kernel))


def window_step(node: Node, idx: list[str], inputs: list[Node], acc: str) -> tuple[str, str]:
    """(the identity, `acc` combined with the term at window position k0..) of a window that is
    not unrolled, in the compute type: the loop `hoisted_element` runs per output, for a form
    that runs the window's loops outside the loop over outputs (`cpu.conv._row_body`)."""
    kind, r = node.arg
    t = accumulator(node)
    term = _product(t, [f"(({t}){read(s, idx + [f'k{j}' for j in range(r)], pointer_of(s, inputs))})" for s in node.src])
    return _identity(kind, t), _combine(kind, t, acc, term)


def _product(t: str, vals: list[str]) -> str:
    """A term: the one operand's value, or the two operands' product."""
    return vals[0] if len(vals) == 1 else wrapping(t, vals[0], "*", vals[1])


def _combine(kind: str, t: str, acc: str, v: str) -> str:
    return wrapping(t, acc, "+", v) if kind == "sum" else f"lum_max_nan({acc}, {v})"


def _identity(kind: str, t: str) -> str:
    return f"(({t})0)" if kind == "sum" else lowest(t)
