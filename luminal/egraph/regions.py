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


def _constant_divisor(n: Node) -> Node | None:
    """For `recip(c)` of a constant c, read directly or through an unmasked view (a masked one
    reads 0 where 1/c is not), the same elements of c itself: a product `x * recip(c)` then
    fuses into a region that divides by c (`x / c`, rounded once, as torch divides), where
    the broadcast reciprocal alone would be one rounded value multiplied in."""
    st = None
    if n.op is Op.VIEW and n.arg.mask is None:
        n, st = n.src[0], n.arg
    if n.op is not Op.RECIP or n.src[0].op is not Op.CONSTANT:
        return None
    c = n.src[0]
    return c if st is None else Node(Op.VIEW, c.dtype, st.shape, (c,), st)


def fuse_regions(outputs: list[Node]) -> tuple[list[Node], int]:
    """The graph with elementwise regions fused, and how many regions were formed."""
    order = toposort(outputs)
    users = collections.Counter(id(s) for n in order for s in n.src)
    users.update(id(n) for n in outputs)
    absorbed: set[int] = set()  # nodes that live inside their consumer's region
    # recip(c) as a float product's operand: inlined as a division by c (`_constant_divisor`)
    divisors = {id(s): d for n in order if n.op is Op.MUL and n.dtype.is_float for s in n.src
                if (d := _constant_divisor(s)) is not None}

    def joins(child: Node) -> bool:
        return child.op in POINTWISE and users[id(child)] == 1 and _scalar_const(child) is None

    def shared_joins(child: Node, reads: collections.Counter) -> bool:
        """A cheap op of region inputs only, every use of it inside this region (`reads`)."""
        return (child.op in SHARED_OK and users[id(child)] > 1 and reads[id(child)] == users[id(child)]
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
    new: dict[int, Node] = {id(d): d for d in divisors.values()}  # views of constants: unchanged
    regions = 0
    for n in order:
        if id(n) in absorbed:
            continue
        if n.op in POINTWISE and any(id(s) in absorbed or _divides(n, s, divisors) for s in n.src):
            inputs: list[Node] = []
            expr = _expression(n, absorbed, inputs, divisors)
            src = tuple(new[id(s)] for s in inputs)
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
