"""Elementwise regions: chains of elementwise ops become one FusedElementwise kernel.

This runs on the extracted graph rather than as egglog rules: where a region ends is a
scheduling choice (which values to materialize), not an identity between terms, and rules
that grow regions would put every way of cutting a chain into the e-graph. The choice here is
the usual one (tinygrad, XLA): an elementwise op joins its consumer's region when the
consumer is elementwise too and is its only user; scalar constants are inlined into the
expression. A region is kept when it holds at least two ops (one kernel instead of several).

One exception: a cheap op (`SHARED_OK`: add, multiply, compare, maximum) that reads only the
region's inputs and whose users all sit in one region joins it too, recomputed per use (an
expression is a tree): a conv's bias add read three times by the LeakyRelu after it (compare,
scale, select) costs three adds per element inside the kernel, not a pass of its own over the
tensor (19 of them in openWakeWord's embedding model).
"""

from __future__ import annotations

import collections
import operator

from luminal.egraph.encode import is_bcast
from luminal.egraph.patterns import compose
from luminal.hlir.ops import POINTWISE, Expr, Node, Op, titled, toposort

MAX_REGION_OPS = 64  # bounds the expression (and the kernel) size
SHARED_OK = frozenset({Op.ADD, Op.MUL, Op.LESS_THAN, Op.MAXIMUM})  # recomputed per use when shared within a region


def _scalar_const(n: Node):
    """The (value, dtype) of a scalar constant, read directly or through a broadcast view."""
    if n.op is Op.VIEW and is_bcast(n.arg):
        n = n.src[0]
    if n.op is Op.CONSTANT and n.shape == () and isinstance(n.arg, (bool, int, float)):
        return n.arg, n.dtype
    return None


def _divisor(n: Node) -> tuple[Node, Node] | None:
    """For `recip(c)`, read directly or through an unmasked view (a masked one reads 0 where
    1/c is not): (the same elements of c itself, c). A product `x * recip(c)` then fuses into a
    region that divides by c (`x / c`, rounded once, as torch and onnxruntime divide), where the
    reciprocal computed apart (a constant's, a scalar's broadcast, a row sum's) would be one
    rounded value multiplied in: 1 ulp off in about a quarter of the quotients."""
    st = None
    if n.op is Op.VIEW and n.arg.mask is None:
        n, st = n.src[0], n.arg
    if n.op is not Op.RECIP:
        return None
    c = n.src[0]
    if st is None:
        return c, c
    if c.op is Op.VIEW:  # one view over the buffer, as every kernel input is
        st, c = compose(st, c.arg), c.src[0]
        if st is None:
            return None
    return Node(Op.VIEW, c.dtype, st.shape, (c,), st), c


def fuse_regions(outputs: list[Node]) -> tuple[list[Node], int]:
    """The graph with elementwise regions fused, and how many regions were formed."""
    order = toposort(outputs)
    users = collections.Counter(id(s) for n in order for s in n.src)
    users.update(id(n) for n in outputs)
    absorbed: set[int] = set()  # nodes that live inside their consumer's region
    # recip(c) as a float product's operand: inlined as a division by c (`_divisor`)
    found = {id(s): d for n in order if n.op is Op.MUL and n.dtype.is_float for s in n.src
             if (d := _divisor(s)) is not None}

    # a broadcast divisor stays a buffer of its own (not absorbed into its reciprocal's region) so that the
    # product can divide by it; but sqrt under a reciprocal is rsqrt, which torch rounds as 1/sqrt
    # then multiplies: x * rsqrt(v) keeps its two roundings (an explicit x / sqrt(v) gets them too)
    # (a reciprocal of the product's own shape joins the product's region, which divides already)
    kept = {id(c) for d, c in found.values() if d is not c and c.op is not Op.SQRT}

    def joins(child: Node) -> bool:
        return (child.op in POINTWISE and users[id(child)] == 1 and _scalar_const(child) is None
                and id(child) not in kept)

    def shared_joins(child: Node, reads: collections.Counter) -> bool:
        """A cheap op of region inputs only, every use of it inside this region (`reads`)."""
        return (child.op in SHARED_OK and users[id(child)] > 1 and reads[id(child)] == users[id(child)]
                and id(child) not in kept
                and _scalar_const(child) is None and not any(s.op in POINTWISE and users[id(s)] == 1 for s in child.src))

    for n in reversed(order):  # consumers first: a region grows from its root downwards
        if n.op in POINTWISE and id(n) not in absorbed:
            stack, count, members = [n], 1, [n]
            while stack:
                for s in stack.pop().src:
                    if joins(s) and count < MAX_REGION_OPS:
                        absorbed.add(id(s))
                        stack.append(s)
                        members.append(s)
                        count += 1
            reads = collections.Counter(id(s) for m in members for s in m.src)
            for m in list(members):
                for s in m.src:
                    if id(s) not in absorbed and count + reads[id(s)] <= MAX_REGION_OPS and shared_joins(s, reads):
                        absorbed.add(id(s))
                        count += reads[id(s)]
    # a divisor whose value lives only inside its reciprocal's region (rsqrt's sqrt, absorbed into
    # the recip) has no buffer to divide by: that product keeps the reciprocal, as torch's rsqrt
    divisors = {k: d for k, (d, c) in found.items() if id(c) not in absorbed}
    sources = {id(d): c for d, c in found.values()}
    new: dict[int, Node] = {}

    def rebuilt(s: Node) -> Node:  # a region input: a divisor's view is rebuilt over its source's new node
        if id(s) not in new:
            c = new[id(sources[id(s)])]
            new[id(s)] = c if s is sources[id(s)] else (
                s if c is s.src[0] else Node(Op.VIEW, s.dtype, s.shape, (c,), s.arg))
        return new[id(s)]

    regions = 0
    for n in order:
        if id(n) in absorbed:
            continue
        if n.op in POINTWISE and any(id(s) in absorbed or _divides(n, s, divisors) for s in n.src):
            inputs: list[Node] = []
            expr = _expression(n, absorbed, inputs, divisors)
            src = tuple(rebuilt(s) for s in inputs)
            new[id(n)] = Node(Op.FUSED_ELEMENTWISE, n.dtype, n.shape, src, expr)
            regions += 1
        elif n.src:  # rebuilt over its operands' new nodes (the same node while none changed)
            src = tuple([new[id(s)] for s in n.src])
            new[id(n)] = n if all(map(operator.is_, src, n.src)) else Node(n.op, n.dtype, n.shape, src, n.arg)
        else:
            new[id(n)] = n
    return [new[id(n)] for n in outputs], regions


def _divides(n: Node, s: Node, divisors: dict[int, Node]) -> bool:
    return n.op is Op.MUL and n.dtype.is_float and id(s) in divisors


def _expression(root: Node, absorbed: set[int], inputs: list[Node], divisors: dict[int, Node]) -> Expr:
    """The region rooted at `root` as an `Expr` over input slots (scalar constants inlined)."""
    slot: dict[int, int] = {}

    def operand(n: Node, s: Node) -> Expr:
        if _divides(n, s, divisors):
            return Expr(Op.RECIP, s.dtype, (walk(divisors[id(s)], False),))
        return walk(s, False)

    def walk(n: Node, is_root: bool) -> Expr:
        const = None if is_root else _scalar_const(n)
        if const is not None:
            return Expr(Op.CONSTANT, const[1], (), const[0])
        if not is_root and id(n) not in absorbed:
            if id(n) not in slot:
                slot[id(n)] = len(inputs)
                inputs.append(n)
            return Expr(Op.INPUT, n.dtype, (), slot[id(n)])
        return Expr(n.op, n.dtype, tuple(operand(n, s) for s in n.src))

    return walk(root, True)


def region_op_counts(outputs: list[Node]) -> dict[str, int]:
    """How many of each op the FusedElementwise regions hold (they hide from op counts): each
    distinct expression (by value: 32 layers repeat the same few) walked once."""
    regions = collections.Counter(n.arg for n in toposort(outputs) if n.op is Op.FUSED_ELEMENTWISE)
    counts: collections.Counter = collections.Counter()

    def walk(e: Expr, times: int) -> None:  # every use counts, as in the unfused graph
        if e.op in POINTWISE:
            counts[e.op] += times
            for s in e.src:
                walk(s, times)

    for expr, times in regions.items():
        walk(expr, times)
    return titled(counts)
