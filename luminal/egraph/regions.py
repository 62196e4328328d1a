"""Elementwise regions: chains of elementwise ops become one FusedElementwise kernel.

This runs on the extracted graph rather than as egglog rules: where a region ends is a
scheduling choice (which values to materialize), not an identity between terms, and rules
that grow regions would put every way of cutting a chain into the e-graph. The choice here is
the usual one (tinygrad, XLA): an elementwise op joins its consumer's region when the
consumer is elementwise too and is its only user; scalar constants are inlined into the
expression. A region is kept when it holds at least two ops (one kernel instead of several).

One exception: an op read more than once, but only from inside one region, joins that region
too, with whatever only it reads: its value is one shared level of the region's expression (a
DAG, not a tree), computed once per element by the NumPy runtime (which evaluates each level
once) and by C and CUDA (the compilers eliminate the repeated pure subexpression). A conv's bias
add read three times by the LeakyRelu after it (compare, scale, select) is no pass of its own
over the tensor (19 of them in openWakeWord's embedding model), nor are the three steps of
erf's polynomial that GELU reads twice each (`x / sqrt 2`, its magnitude, `1 / (1 + p|x|)`:
three tensors of the FFN's width per layer, forward and backward). The rendered C repeats a
shared level's text at each use, so the region's size counted with repeats is bounded too.
"""

from __future__ import annotations

import collections
import operator

from luminal.egraph.encode import is_bcast
from luminal.egraph.patterns import compose
from luminal.hlir.ops import POINTWISE, Expr, Node, Op, titled, toposort

MAX_REGION_OPS = 64  # bounds the expression (and the kernel) size: distinct ops
MAX_EXPANDED_OPS = 4 * MAX_REGION_OPS  # the same, each shared level counted at every use (the C text's size)


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
        """An op read more than once, every read from inside this region (`reads`)."""
        return (child.op in POINTWISE and users[id(child)] > 1 and reads[id(child)] == users[id(child)]
                and id(child) not in kept and _scalar_const(child) is None)

    def expanded(root: Node, extra: set[int]) -> int:
        """The region's size with each shared level counted at every use."""
        size: dict[int, int] = {}

        def of(m: Node) -> int:
            if id(m) not in size:
                size[id(m)] = 1 + sum(of(s) for s in m.src if id(s) in absorbed or id(s) in extra)
            return size[id(m)]

        return of(root)

    for n in reversed(order):  # consumers first: a region grows from its root downwards
        if n.op in POINTWISE and id(n) not in absorbed:
            stack, members, shared = [n], [n], False
            while stack:  # its private chains; then the ops shared inside it, each with its own chains
                for s in stack.pop().src:
                    if joins(s) and len(members) < MAX_REGION_OPS and (
                            not shared or expanded(n, {id(s)}) <= MAX_EXPANDED_OPS):
                        absorbed.add(id(s))
                        stack.append(s)
                        members.append(s)
                if stack:
                    continue
                reads = collections.Counter(id(s) for m in members for s in m.src)
                for s in dict.fromkeys(s for m in members for s in m.src):
                    if (id(s) not in absorbed and len(members) < MAX_REGION_OPS and shared_joins(s, reads)
                            and expanded(n, {id(s)}) <= MAX_EXPANDED_OPS):
                        absorbed.add(id(s))
                        stack.append(s)
                        members.append(s)
                        shared = True
                        break  # its chains first, then the reads counted again
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
        if id(n) not in levels:  # a shared level is one object: the NumPy runtime evaluates it once
            levels[id(n)] = Expr(n.op, n.dtype, tuple(operand(n, s) for s in n.src))
        return levels[id(n)]

    levels: dict[int, Expr] = {}
    return walk(root, True)


def region_op_counts(outputs: list[Node]) -> dict[str, int]:
    """How many of each op the FusedElementwise regions hold (they hide from op counts), as in
    the unfused graph: a level shared inside a region once, each distinct expression (by value:
    32 layers repeat the same few) walked once and counted per region that has it."""
    regions = collections.Counter(n.arg for n in toposort(outputs) if n.op is Op.FUSED_ELEMENTWISE)
    counts: collections.Counter = collections.Counter()
    for expr, times in regions.items():
        for e in expr.toposort():
            if e.op in POINTWISE:
                counts[e.op] += times
    return titled(counts)
