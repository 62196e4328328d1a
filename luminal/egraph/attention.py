"""Attention: `softmax(q @ kt (* scale) (+ mask)) @ v` on the extracted graph becomes one
Attention op, whose kernels never materialize the scores (`kernels/render/attention.py`).

Like `regions`, this runs on the extracted graph rather than as egglog rules: whether the scores
are a buffer is a scheduling choice, and the pattern spans views that reshape the batch (a
MatMul over (batch * heads, M, K) feeding a Softmax over (batch, heads, M, N)). What it matches,
from the output back:

    MatMul(View?(x), v)        x read in row-major order (a reshape of the batch)
    x = Softmax(s, last axis)  or  Select(all(s == -inf) per row, 0.0, Softmax(s, last axis))
    s = Add(t, mask)?          any operand of s's shape and dtype (causal, padding, ALiBi, ...);
                               computed by pointwise ops from narrow operands, it becomes an
                               expression the kernels evaluate per score (`_mask_expression`)
      or Select(cond, t, c)    where(cond, t, c) with a scalar c, either way round (a causal
                               `where(mask, s, -inf)`): cond is the mask, kept as a condition
    t = View?(Mul(u, scalar c))?  a scale applied to the scores (HF eager attention)
    u = View?(MatMul(q, kt))   again a reshape of the batch

In f16/bf16 the softmax runs in f32 between casts, x = Cast_h(Softmax(Cast_f32(s))) (the
safe-softmax Select inside or outside the cast), and torch's scale is Cast_h(Mul_f32(Cast_f32(u),
c)); the op then records the half dtype and each step of s rounds to it as the unfused ops do.
Grouped-query attention written without copies (`_folded_group`: the G query heads of a KV
head are the rows of one MatMul (..., G*M, N), the scores reshaped to (..., G, M, N) for the
mask and softmax) fuses with kᵀ and v broadcast over the group.

The Select is torch's safe softmax (scaled_dot_product_attention gives 0 for a row masked
out entirely); its condition is accepted only when it provably is "every element of the row is
-inf" (`_all_neg_inf_rows`). Every value in between (scores, probabilities) must have no other
user. The kernels keep p in f32 where a half graph rounds it before p @ v (README: "Attention,
fused after extraction").
Torch's lowering of scaled_dot_product_attention scales q and k by sqrt(scale) each before the
first MatMul: those Muls stay outside (they are O(L·D), the scores O(L²)), computed where q and k
are stored (`_scaled_at_source`: no transposed copy of k, and none per query head of a group).

`LUMINAL_FUSED_ATTENTION=0` switches the pass off (the compile cache keys on it).
"""

from __future__ import annotations

import collections
import os

import numpy as np

from luminal.egraph.encode import is_bcast
from luminal.egraph.patterns import compose
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import POINTWISE, Expr, Node, Op, toposort
from luminal.hlir.shape import ShapeTracker

# Fuse from this many keys and queries on (static sizes; symbolic ones are fused): below 128 keys
# the unfused BLAS GEMMs are as fast (figures: README, "Attention, fused after extraction"). Any
# number of queries: decode (one query a head, or a GQA group's) has kernels that spread the
# keys instead (`kernels/render/attention_decode.py`: C loops, CUDA split-K).
MIN_KEYS = 128
MIN_QUERIES = 1
_OUTSIDE = object()  # the graph's outputs as a user


def enabled() -> bool:
    return os.environ.get("LUMINAL_FUSED_ATTENTION", "1") != "0"


def fuse_attention(outputs: list[Node]) -> tuple[list[Node], int]:
    """The graph with each matched attention as one Attention node, and how many were fused."""
    if not enabled():
        return outputs, 0
    order = toposort(outputs)
    users: dict[int, list] = collections.defaultdict(list)
    for n in order:
        for s in n.src:
            users[id(s)].append(n)
    for n in outputs:
        users[id(n)].append(_OUTSIDE)
    new: dict[int, Node] = {}

    def rebuilt(n: Node) -> Node:  # `n` over the new graph's nodes
        if id(n) in new:
            return new[id(n)]
        src = tuple(rebuilt(s) for s in n.src)
        if all(a is b for a, b in zip(src, n.src)):
            return n
        if n.op is Op.VIEW and src[0].op is Op.VIEW and src[0].arg.is_contiguous():
            src = src[0].src  # a view of a reshape (the fused op's output): the same tracker on its buffer
        return Node(n.op, n.dtype, n.shape, src, n.arg)

    fused = 0
    for n in order:
        found = _match(n, users) if n.op is Op.MAT_MUL else None
        fused += found is not None
        new[id(n)] = rebuilt(found if found is not None else n)
    return [new[id(n)] for n in outputs], fused


def _reshaped(x: Node, shape) -> Node | None:
    """`x` read in row-major order under `shape` (a view), or None where no view can."""
    if len(x.shape) == len(shape) and all(sym.equal(a, b) for a, b in zip(x.shape, shape)):
        return x
    base, st = (x.src[0], x.arg) if x.op is Op.VIEW else (x, ShapeTracker.contiguous(x.shape))
    new = st.reshape(tuple(shape))
    return None if new is None else Node(Op.VIEW, x.dtype, new.shape, (base,), new)


def _through_reshape(x: Node) -> Node:
    """The node `x` reads in row-major order (x itself unless a contiguous view of it)."""
    if x.op is Op.VIEW and x.arg.is_contiguous() and sym.equal(sym.product(x.shape), sym.product(x.src[0].shape)):
        return x.src[0]
    return x


def _scalar(n: Node):
    if n.op is Op.VIEW and is_bcast(n.arg):
        n = n.src[0]
    if n.op is Op.CONSTANT and n.shape == () and isinstance(n.arg, (bool, int, float)):
        return n.arg
    return None


def _same(a, b) -> bool:
    return len(a) == len(b) and all(sym.equal(x, y) for x, y in zip(a, b))


def _folded_group(mm: Node, s: Node, p_in: Node):
    """G when the MatMul folds a group of G query heads into its rows (grouped-query attention
    without copies of k and v, as benchmarks/gpu_models builds it): mm (..., G*M, N), the scores
    reshaped to (..., G, M, N) for the mask and softmax, the probabilities back to (..., G*M, N)."""
    if len(s.shape) != len(mm.shape) + 1 or len(mm.shape) < 2:
        return None
    g, m, n = s.shape[-3:]
    if not (_same(s.shape[:-3], mm.shape[:-2]) and _same(mm.shape[-2:], (sym.norm(g * m), n))
            and _same(p_in.shape, mm.shape)):
        return None
    return g


def _broadcast_group(x: Node, group) -> Node | None:
    """`x` (..., R, C), shared by a group: a view (..., G, R, C) with stride 0 along G."""
    base, st = (x.src[0], x.arg) if x.op is Op.VIEW else (x, ShapeTracker.contiguous(x.shape))
    one = st.reshape((*x.shape[:-2], 1, *x.shape[-2:]))
    if one is None:
        return None
    wide = one.expand((*x.shape[:-2], group, *x.shape[-2:]))
    return Node(Op.VIEW, x.dtype, wide.shape, (base,), wide)


def _unrepeated(kt: Node, v: Node, batch, m, users):
    """(batch, rows, kᵀ, v) of an attention whose kᵀ and v are views of Contiguous copies of
    broadcast views, used nowhere else: torch's repeat_kv (expand + clone), a KV head's keys and
    values copied for each query head of its group. The kernels read k and v where the copies
    came from instead (a view with stride 0 along the group), under the copies' batch dims
    (..., KV heads, G) rather than the MatMul's flattened ones; where each query head has one
    query (decode), the group's G heads become the rows of one KV head (batch (..., KV heads),
    rows G), so each key is read once for the group. None otherwise."""
    fine, views = None, []
    for x in (kt, v):
        if x.op is not Op.VIEW or x.src[0].op is not Op.CONTIGUOUS or x.src[0].src[0].op is not Op.VIEW:
            return None
        copy, wide = x.src[0], x.src[0].src[0]
        if any(u is not x for u in users[id(copy)]):
            return None
        if not any(sym.equal(st, 0) and not sym.equal(dim, 1) for dim, st in zip(wide.arg.shape[:-2], wide.arg.strides[:-2])):
            return None  # (a plain copy, not a repeat)
        if fine is not None and not _same(fine, copy.shape[:-2]):
            return None
        fine = copy.shape[:-2]
        if not sym.equal(sym.product(fine), sym.product(batch)):
            return None
        outer = x.arg.reshape((*fine, *x.shape[-2:]))
        read = None if outer is None else compose(outer, wide.arg)
        if read is None:
            return None
        views.append((wide.src[0], read))
    (kb, kst), (vb, vst) = views
    if sym.equal(m, 1) and all(sym.equal(st.strides[len(fine) - 1], 0) for st in (kst, vst)):  # the group's axis is the last
        g = fine[-1]  # (decode: one query a head) the group's heads as rows, kᵀ and v once per KV head
        fine = fine[:-1]
        kst, vst = (ShapeTracker(st.shape[:len(fine)] + st.shape[-2:], st.strides[:len(fine)] + st.strides[-2:], st.offset)
                    for st in (kst, vst))
        m = g
    return fine, m, Node(Op.VIEW, kt.dtype, kst.shape, (kb,), kst), Node(Op.VIEW, v.dtype, vst.shape, (vb,), vst)


def _scaled_at_source(x: Node, mm: Node, users) -> Node:
    """An operand of the scores' MatMul that is a view of q or k times a scalar, read by nothing
    else (torch's lowering of scaled_dot_product_attention scales q and k by sqrt(scale) each),
    as the same Mul (one product of the same two values per element: the same bits) computed
    where its elements are stored, then viewed as before: through torch's repeat_kv (a view of a
    Contiguous copy of a broadcast view) once per KV head, the copy kept in the graph's form for
    `_unrepeated` to read around it; over a projection's whole output (a permutation or reshape of
    it) in the output's order, where the Mul joins the projection's GEMM epilogue; on kᵀ cut out
    of a larger output (a fused QKV projection) along k's rows. Each replaces a transposing copy
    of k per query head. `x` itself otherwise."""
    outer, mul = (x.arg, x.src[0]) if x.op is Op.VIEW else (None, x)
    if mul.op is not Op.MUL or any(u is not x and u is not mm for u in users[id(mul)]) or (
            outer is not None and any(u is not mm for u in users[id(x)])):
        return x
    a, c = next(((a, b) for a, b in (mul.src, mul.src[::-1]) if type(_scalar(b)) is float), (None, None))
    if a is None or a.op is not Op.VIEW or a.arg.mask is not None:
        return x
    const = c.src[0] if c.op is Op.VIEW else c

    def times_c(n: Node) -> Node:
        scalar = Node(Op.VIEW, c.dtype, n.shape, (const,), ShapeTracker(n.shape, (0,) * len(n.shape), 0))
        return Node(Op.MUL, mul.dtype, n.shape, (n, scalar) if mul.src[0] is a else (scalar, n), mul.arg)

    base = a.src[0]
    if base.op is Op.CONTIGUOUS and base.src[0].op is Op.VIEW and all(u is a for u in users[id(base)]):
        wide = base.src[0]  # repeat_kv's copy: the Mul on what it repeats, the copy kept for `_unrepeated`
        found = _scaled_once(wide.arg, wide.src[0], times_c)
        if found is None:
            return x
        again = Node(Op.VIEW, wide.dtype, wide.shape, (found[0],), found[1])
        copy, view = Node(Op.CONTIGUOUS, base.dtype, base.shape, (again,), base.arg), a.arg
    else:
        found = _scaled_once(a.arg, base, times_c)
        if found is None:
            return x
        copy, view = found
    composed = None if outer is None else compose(outer, view)
    # through the MatMul's own view where the two compose; else at the Mul's shape (the MatMul's
    # reshape of the batch merges dims the source's order keeps apart), which `_match` reshapes
    read = (Node(Op.VIEW, x.dtype, x.shape, (copy,), composed) if composed is not None
            else Node(Op.VIEW, mul.dtype, mul.shape, (copy,), view))
    users[id(copy)].append(read)
    users[id(read)].append(mm)
    return read


def _scaled_once(st: ShapeTracker, src: Node, times_c) -> tuple[Node, ShapeTracker] | None:
    """(`times_c` of the elements view `st` reads from `src`, each once, in the order they are
    stored; the view reading it as `st` reads `src`) for `_scaled_at_source`: over src itself
    where `st` reads all of it (the Mul then joins src's GEMM epilogue); else over the elements
    `st` reads, its broadcast axes as one, along rows (a kᵀ view's last two axes swapped). None
    where neither saves a pass (no broadcast, no transpose), or under a mask."""
    if st.mask is not None:
        return None
    bcast = [sym.equal(s, 0) and not sym.equal(d, 1) for d, s in zip(st.shape, st.strides)]
    narrow = tuple(1 if b else d for d, b in zip(st.shape, bcast))
    if sym.equal(sym.product(narrow), sym.product(src.shape)):  # a permutation, reshape or broadcast of src
        return times_c(src), st
    swap = tuple(range(len(st.shape)))
    if len(st.shape) >= 2 and sym.equal(st.strides[-2], 1) and not sym.equal(st.strides[-1], 1):
        swap = (*swap[:-2], swap[-1], swap[-2])  # kᵀ: read as k's rows
    elif not any(bcast):
        return None
    rows = ShapeTracker(narrow, st.strides, st.offset).permute(swap)
    scaled = times_c(Node(Op.VIEW, src.dtype, rows.shape, (src,), rows))
    return scaled, ShapeTracker.contiguous(rows.shape).permute(swap).expand(st.shape)


def _safe_select(x: Node, s_candidates) -> list[Node] | None:
    """The condition's nodes when `x` is torch's safe-softmax Select(every score of the row (of
    one of `s_candidates`) is -inf, 0, p); None when it is not one."""
    cond, zero, _ = x.src
    value = _scalar(zero)
    if type(value) is not float or value != 0.0 or np.signbit(value):
        return None
    return next((found for s in s_candidates if (found := _all_neg_inf_rows(cond, s)) is not None), None)


def _match(out: Node, users) -> Node | None:
    """The Attention op for the MatMul `out` (see the docstring), or None. In f16/bf16 the
    softmax runs in f32 between casts (the builder's and torch's decompositions):
    MatMul_h(Cast_h(Softmax_f32(Cast_f32(s_h))), v), the safe softmax's Select inside or
    outside the cast to h; the scores' steps round to h as the unfused ops do."""
    p_in, v = out.src
    dtype = out.dtype
    half = dtype if dtype in (DType.F16, DType.BF16) else None
    if dtype not in (DType.F32, DType.F64) and half is None:
        return None
    x = _through_reshape(p_in)
    inner = [p_in, x]
    safe = None  # torch's safe-softmax Select, when there is one
    if x.op is Op.SELECT:
        safe, x = x, x.src[2]
        inner.append(x)
    if half is not None:
        if x.op is not Op.CAST or x.src[0].dtype is not DType.F32:
            return None
        x = x.src[0]
        inner.append(x)
        if x.op is Op.SELECT and safe is None:
            safe, x = x, x.src[2]
            inner.append(x)
    sm = x
    if sm.op is not Op.SOFTMAX:
        return None
    s = sm.src[0]
    if sm.arg != len(s.shape) - 1 or len(s.shape) < 2 or s.dtype is not (DType.F32 if half else dtype):
        return None
    inner.append(s)
    if half is not None:  # the scores, cast to f32 for the softmax
        if s.op is not Op.CAST or s.src[0].dtype is not half:
            return None
        s = s.src[0]
        inner.append(s)
    zero_empty_rows = safe is not None
    if safe is not None:
        cond_nodes = _safe_select(safe, [sm.src[0], s])
        if cond_nodes is None:
            return None
        inner += cond_nodes
    n_keys, n_queries = s.shape[-1], s.shape[-2]
    if sym.is_static(n_keys) and n_keys < MIN_KEYS or sym.is_static(n_queries) and n_queries < MIN_QUERIES:
        return None
    # (scores, mask, select) candidates: s itself, or either side of the mask's Add, or the kept
    # side of where(cond, scores, fill) with a scalar fill (-inf for a causal mask), either way round
    if s.op is Op.ADD:
        sides = [(a, b, None) for a, b in (s.src, s.src[::-1])]
    elif s.op is Op.SELECT:
        cond, a, b = s.src
        sides = [(kept, cond, (float(np.asarray(fill, s.dtype.numpy)), keep))
                 for keep, kept, fill in ((True, a, _scalar(b)), (False, b, _scalar(a))) if type(fill) is float]
    else:
        sides = [(s, None, None)]
    found = next(((t, mask, select, f) for t, mask, select in sides if (f := _scaled(_through_reshape(t))) is not None), None)
    transform, chain = None, []
    if found is None and half is None:  # a pointwise function of the scaled scores first (a soft cap)
        for t, mask, select in sides:
            if (tr := _transformed(_through_reshape(t))) is not None:
                scaled, transform, chain = tr
                found = (t, mask, select, _scaled(_through_reshape(scaled)))
                chain += [scaled, _through_reshape(scaled)]
                break
    if found is None:
        return None
    t, mask, select, (mm, scale, between) = found
    t0 = _through_reshape(t)  # (a Mul reshaped after it)
    group = _folded_group(mm, s, p_in)
    if group is None and not (_same(mm.shape[-2:], s.shape[-2:]) and _same(p_in.shape[-2:], s.shape[-2:])):
        return None
    inner += [t, t0, mm, *between, *chain]
    keep = {id(n) for n in inner} | {id(out)}
    if any(u is _OUTSIDE or id(u) not in keep for n in inner for u in users[id(n)]):
        return None  # the scores or probabilities are needed elsewhere: nothing to save
    batch = s.shape[:-2]
    q, kt = mm.src if group is not None else (_scaled_at_source(x, mm, users) for x in mm.src)
    m, d, dv = mm.shape[-2], q.shape[-1], v.shape[-1]
    repeated = _unrepeated(kt, v, batch, m, users) if group is None else None
    if repeated is not None:  # torch's repeat_kv: k and v read where the copy came from (see `_unrepeated`)
        batch, m, kt_view, v_view = repeated
        operands = [_reshaped(q, (*batch, m, d)), kt_view, v_view]
    elif group is None:
        operands = [_reshaped(q, (*batch, m, d)), _reshaped(kt, (*batch, d, n_keys)), _reshaped(v, (*batch, n_keys, dv))]
    else:  # q's rows are the group's heads one after another; kᵀ and v are shared by the group
        m = s.shape[-2]
        operands = [_reshaped(q, (*batch, m, d)), _broadcast_group(kt, group), _broadcast_group(v, group)]
    expr = None
    if mask is not None:
        found = _mask_expression(mask)
        if found is not None:
            operands += found[0]
            expr = found[1]
        else:
            operands.append(_narrowed(mask))
        if repeated is not None:  # the mask's views under the finer batch (and folded rows)
            operands[3:] = [_reshaped(x, (*batch, m, n_keys)) for x in operands[3:]]
    if any(o is None for o in operands):
        return None
    arg = (scale, zero_empty_rows, expr, select, half, transform)
    arg = next(arg[:k] for k in (2, 3, 5, 6) if all(a is None for a in arg[k:]))  # the short forms where they do
    node = Node(Op.ATTENTION, dtype, (*batch, m, dv), tuple(operands), arg)
    return _reshaped(node, out.shape)


MAX_MASK_OPS = 32  # a mask expression's ops, evaluated per score inside the kernels
_NOT_IN_MASKS = {Op.MOD, Op.PHILOX}  # integer Mod flags errors, Philox is random: such masks stay buffers


def _mask_expression(mask: Node) -> tuple[list[Node], Expr] | None:
    """(leaves, expression) of a mask computed by pointwise ops (through views) from narrow
    operands, as the kernels then compute it per score instead of reading a buffer the size of
    the scores: a causal or sliding-window mask from iotas, ALiBi's slopes times distances, a
    padding mask's Select. Each leaf is a view of the scores' shape; None where the mask is a
    buffer already (an input), too large an expression, or a view that does not compose."""
    leaves: list[Node] = []
    ops = [0]

    def leaf(n: Node, st: ShapeTracker | None) -> Expr:
        x = n if st is None else Node(Op.VIEW, n.dtype, st.shape, (n,), st)
        for k, y in enumerate(leaves):
            if y is x:
                return Expr(Op.INPUT, n.dtype, (), k)
        leaves.append(x)
        return Expr(Op.INPUT, n.dtype, (), len(leaves) - 1)

    def walk(n: Node, st: ShapeTracker | None) -> Expr | None:
        """`n` read at the mask's positions: through `st` over n's row-major elements (None: n
        has the mask's shape)."""
        c = _scalar(n)
        if c is not None:
            return Expr(Op.CONSTANT, n.dtype, (), c)
        if n.op is Op.VIEW:
            inner = n.arg if st is None else compose(st, n.arg)
            return None if inner is None else walk_base(n.src[0], inner)
        return walk_base(n, st)

    def walk_base(n: Node, st: ShapeTracker | None) -> Expr | None:
        if n.op not in POINTWISE or n.op in _NOT_IN_MASKS or ops[0] >= MAX_MASK_OPS:
            return leaf(n, st)
        ops[0] += 1
        src = [walk(x, st) for x in n.src]
        return None if None in src else Expr(n.op, n.dtype, tuple(src))

    expr = walk(mask, None)
    if expr is None or expr.op is Op.INPUT or ops[0] >= MAX_MASK_OPS or any(
            e.dtype in (DType.F16, DType.BF16) for e in expr.toposort()):  # (half types need their headers)
        return None
    return leaves, expr


def _narrowed(mask: Node) -> Node:
    """A pointwise mask (or a view of one) whose operands all broadcast along some axes (HF's
    padding mask: a Select of a per-key or per-query condition) computed at its narrow shape and
    broadcast: the same values, without a buffer the size of a scores matrix. (Where another user
    still reads the wide mask, it stays too: a copy of the mask, not a wrong value.)"""
    p, outer = (mask.src[0], mask.arg) if mask.op is Op.VIEW else (mask, None)
    if p.op not in POINTWISE or not all(x.op is Op.VIEW and x.arg.mask is None for x in p.src):
        return mask
    axes = [a for a, d in enumerate(p.shape) if not sym.equal(d, 1) and all(sym.equal(x.arg.strides[a], 0) for x in p.src)]
    if not axes:
        return mask
    shape = tuple(1 if a in axes else d for a, d in enumerate(p.shape))
    src = tuple(Node(Op.VIEW, x.dtype, shape, x.src, ShapeTracker(shape, x.arg.strides, x.arg.offset)) for x in p.src)
    narrow = Node(p.op, p.dtype, shape, src, p.arg)
    wide = ShapeTracker.contiguous(shape).expand(p.shape)
    if outer is not None and (wide := compose(outer, wide)) is None:
        return mask
    return Node(Op.VIEW, mask.dtype, mask.shape, (narrow,), wide)


def _scaled(t: Node) -> tuple[Node, float | None, list[Node]] | None:
    """(MatMul, scale, the nodes between) when `t` is the MatMul's result read in row-major
    order, maybe times a scalar constant; else None. The scale is the value the Mul multiplies
    by in its own dtype; in f16/bf16 also torch's form Cast_h(Mul_f32(Cast_f32(MatMul_h), c))."""
    if t.op is Op.CAST and t.dtype in (DType.F16, DType.BF16) and t.src[0].op is Op.MUL and t.src[0].dtype is DType.F32:
        mul = t.src[0]
        for a, b in (mul.src, mul.src[::-1]):
            c = _scalar(b)
            if type(c) is float and a.op is Op.CAST and a.src[0].dtype is t.dtype and (mm := _scores(a.src[0])) is not None:
                return mm, float(np.float32(c)), [mul, a, a.src[0]]
        return None
    if t.op is Op.MUL:
        for a, b in (t.src, t.src[::-1]):
            c = _scalar(b)
            if type(c) is float and (mm := _scores(a)) is not None:
                return mm, float(np.asarray(c, t.dtype.numpy)), [a]
        return None
    mm = _scores(t)
    return None if mm is None else (mm, None, [])


MAX_TRANSFORM_OPS = 16  # a pointwise function of the scores, evaluated per score inside the kernels


def _transformed(t: Node) -> tuple[Node, Expr, list[Node]] | None:
    """(the scaled scores, the function as an expression over input 0, the nodes it applies)
    when `t` is a pointwise function of a MatMul's scaled scores whose other operands are all
    scalars: Gemma 2's soft cap, cap * tanh(s / cap), which the extracted graph spells
    cap * (2 sigmoid(2 (s * recip(cap))) - 1). f32/f64 only; None otherwise."""
    chain: list[Node] = []

    def walk(n: Node):
        if n is not t and _scaled(_through_reshape(n)) is not None:
            return Expr(Op.INPUT, n.dtype, (), 0), n
        if (n.op not in POINTWISE or n.op in _NOT_IN_MASKS or n.dtype not in (DType.F32, DType.F64)
                or not _same(n.shape, t.shape) or len(chain) >= MAX_TRANSFORM_OPS):
            return None
        chain.append(n)
        kids, found = [], None
        for x in n.src:
            c = _scalar_expression(x)
            if c is None:
                if found is not None:
                    return None  # two operands that vary: not a function of the scores alone
                r = walk(x)
                if r is None:
                    return None
                c, found = r
            kids.append(c)
        return None if found is None else (Expr(n.op, n.dtype, tuple(kids)), found)

    r = walk(t)
    return None if r is None else (r[1], r[0], chain)


def _scalar_expression(n: Node) -> Expr | None:
    """A scalar operand (a broadcast 0-d constant, or pointwise ops on such: recip(cap)) as an
    expression, else None."""
    if n.op is Op.VIEW and is_bcast(n.arg):
        n = n.src[0]
    if n.shape != ():
        return None
    if n.op is Op.CONSTANT and type(n.arg) in (bool, int, float):
        return Expr(Op.CONSTANT, n.dtype, (), n.arg)
    if n.op in POINTWISE and n.op not in _NOT_IN_MASKS and n.src:
        kids = [_scalar_expression(x) for x in n.src]
        return None if None in kids else Expr(n.op, n.dtype, tuple(kids))
    return None


def _scores(t: Node) -> Node | None:
    """The MatMul `t` reads in row-major order, or None."""
    mm = _through_reshape(t)
    return mm if mm.op is Op.MAT_MUL and mm.dtype is t.dtype else None


# --- the safe-softmax condition ---------------------------------------------------------------
_BOOL_OPS = {Op.ADD, Op.MUL, Op.LESS_THAN, Op.MAXIMUM}  # or, and, a < b, or


def _all_neg_inf_rows(cond: Node, s: Node) -> list[Node] | None:
    """The nodes computing `cond` when it is, exactly, "every element of the row of `s` is -inf"
    broadcast along the row; else None. `cond` must be h(any(g(s))) along the last axis, g and h
    pointwise: g compares s with scalar constants and combines the comparisons (so it is
    constant between consecutive constants, and probing each constant, its neighbours and NaN
    decides it everywhere), h a function of one bool."""
    if cond.op is not Op.VIEW or cond.dtype is not DType.BOOL:
        return None
    r = cond.src[0]
    row = (*s.shape[:-1], 1)
    if not _same(cond.shape, s.shape) or not _same((sym.product(r.shape),), (sym.product(row),)) or \
            cond.arg != ShapeTracker.contiguous(row).expand(s.shape):
        return None
    nodes: list[Node] = [cond]
    reduce = []

    def leaf_h(n: Node):
        m = _through_reshape(n)
        if m.op is Op.MAX_REDUCE and m.dtype is DType.BOOL and _same(m.src[0].shape, s.shape) and m.arg == len(s.shape) - 1:
            reduce.append(m)
            nodes.append(m)
            return True
        return False

    h = _pointwise_fn(r, leaf_h, nodes)
    if h is None or len({id(n) for n in reduce}) != 1:
        return None
    constants: list[float] = []
    g = _pointwise_fn(reduce[0].src[0], lambda n: n is s, nodes, constants)
    if g is None or h(np.array([False, True])).tolist() != [True, False]:
        return None
    dt = s.dtype.numpy
    probes = [np.nan, -np.inf, np.inf, 0.0, -0.0]
    for c in constants:
        probes += [c, np.nextafter(dt.type(c), dt.type(-np.inf)), np.nextafter(dt.type(c), dt.type(np.inf))]
    x = np.array(probes, dt)
    if not np.array_equal(np.broadcast_to(g(x), x.shape), x != -np.inf):
        return None
    return nodes


def _pointwise_fn(root: Node, leaf, nodes: list[Node], constants: list | None = None):
    """`root` as a NumPy function of one variable (the node `leaf(node)` accepts), or None where
    it is not built from bool ops, comparisons of the variable with scalar constants and scalar
    constants; the nodes depending on the variable are added to `nodes`, the float constants to
    `constants`."""
    memo: dict[int, tuple] = {}

    def walk(n: Node) -> tuple:  # (fn or None, depends on the variable)
        if id(n) in memo:
            return memo[id(n)]
        found: tuple = (None, False)
        c = _scalar(n)
        if c is not None:
            found = ((lambda x, c=c, dt=n.dtype.numpy: dt.type(c)), False)
            if constants is not None and n.dtype.is_float:
                constants.append(float(c))
        elif leaf(n):
            found = ((lambda x: x), True)
            if n.op is Op.VIEW:
                nodes.append(n)
        elif n.op is Op.VIEW and len(n.src[0].shape) == 0 and is_bcast(n.arg):
            found = walk(n.src[0])
        elif n.op in _BOOL_OPS and n.dtype is DType.BOOL and (n.op is Op.LESS_THAN or n.src[0].dtype is DType.BOOL):
            (a, da), (b, db) = (walk(s) for s in n.src)
            if a is not None and b is not None:
                f = {Op.ADD: np.logical_or, Op.MUL: np.logical_and, Op.MAXIMUM: np.logical_or, Op.LESS_THAN: np.less}[n.op]
                found = ((lambda x, f=f, a=a, b=b: f(a(x), b(x))), da or db)
        if found[1] and found[0] is not None and not leaf_seen(n, nodes):
            nodes.append(n)
        memo[id(n)] = found
        return found

    return walk(root)[0]


def leaf_seen(n: Node, nodes: list[Node]) -> bool:
    return any(m is n for m in nodes)
