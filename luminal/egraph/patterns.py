"""Facts about the builder's spellings of `where` and `concat`, read off the HLIR at encode time.

The builder spells `concat(pieces, axis)` as Scatters of each piece into a zero buffer at the
positions iota + offset (`builder/functional.py`), and `where(cond, a, b)` as a Gather, by
cast(cond) along a new last axis, from the pair stack([b, a], -1) (a concat), reshaped back.
Whether an index tensor is such a span, or a view unsqueezes, is a question about strides and
constants that Python answers exactly (symbolic dims included), as `encode.tracker_facts` does
for matmul; the fusion rules `SelectOf`/`ConcatOf` then put the fused op into the e-class.
"""

from __future__ import annotations

from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op
from luminal.hlir.shape import ShapeTracker, contiguous_strides


def _scalar(n: Node):
    """The value of a scalar constant, read directly or through a broadcast view, else None."""
    if n.op is Op.VIEW and n.arg.mask is None and all(sym.equal(s, 0) for s in n.arg.strides) and sym.equal(n.arg.offset, 0):
        n = n.src[0]
    if n.op is Op.CONSTANT and n.shape == () and not hasattr(n.arg, "array"):
        return n.arg
    return None


def _span_start(index: Node, axis: int, shape):
    """`lo` when `index` holds lo + j at position j along `axis`, the same at every other
    position (a broadcast iota plus a constant, as concat builds it), with the given shape."""
    st, src = (index.arg, index.src[0]) if index.op is Op.VIEW else (ShapeTracker.contiguous(index.shape), index)
    if st.mask is not None or not sym.equal(st.offset, 0) or len(st.shape) != len(shape) or not all(
            sym.equal(a, b) for a, b in zip(st.shape, shape)):
        return None
    for i, (d, s) in enumerate(zip(st.shape, st.strides)):
        if not (sym.equal(d, 1) or sym.equal(s, 1 if i == axis else 0)):
            return None
    lo = 0
    if src.op is Op.ADD:
        a, b = src.src
        lo, src = (_scalar(b), a) if _scalar(b) is not None else (_scalar(a), b)
        if lo is None or isinstance(lo, (bool, float)):
            return None
    if src.op is not Op.IOTA or not sym.equal(src.arg, shape[axis]):  # (1-D: the view reads src[j])
        return None
    return lo


def concat_pieces(n: Node) -> tuple[int, list[Node]] | None:
    """(axis, pieces) when `n` is the last of a chain of Scatters whose spans tile the axis from
    its end down to 0 (each piece covering the whole buffer off the axis): the builder's concat
    of `pieces`. What the chain started from is overwritten everywhere (zeros, as built)."""
    if n.op is not Op.SCATTER or n.arg[1] is not None:
        return None
    axis, shape = n.arg[0], n.shape
    hi, pieces = shape[axis], []
    while not sym.equal(hi, 0):
        if n.op is not Op.SCATTER or n.arg != (axis, None):
            return None
        data, index, piece = n.src
        if not all(sym.equal(a, b) for i, (a, b) in enumerate(zip(piece.shape, shape)) if i != axis):
            return None
        lo = _span_start(index, axis, piece.shape)
        if lo is None or not sym.equal(sym.norm(lo + piece.shape[axis]), hi):
            return None
        pieces.append(piece)
        hi, n = sym.norm(lo), data
    return (axis, pieces[::-1]) if len(pieces) > 1 else None


def _drops_last_unit(st: ShapeTracker) -> ShapeTracker | None:
    """The tracker reading element [..., 0] of `st` at [...] (for a view that unsqueezed)."""
    if st.mask is not None and not (sym.equal(st.mask[-1][0], 0) and sym.equal(st.mask[-1][1], 1)):
        return None
    return ShapeTracker(st.shape[:-1], st.strides[:-1], st.offset, None if st.mask is None else st.mask[:-1])


def _reads_as(st: ShapeTracker, shape) -> bool:
    """`st` reads a contiguous buffer of `shape` at the same positions, a unit dim added last."""
    if st.mask is not None or not sym.equal(st.offset, 0) or len(st.shape) != len(shape) + 1:
        return False
    want = contiguous_strides(tuple(shape))
    return sym.equal(st.shape[-1], 1) and all(
        sym.equal(d, e) and (sym.equal(d, 1) or sym.equal(s, w)) for d, e, s, w in zip(st.shape, shape, st.strides, want))


def select_operands(n: Node):
    """(cond, (a, tracker), (b, tracker), outer) when `n` is the builder's `where(cond, a, b)` or
    a view of it: a Gather by a bool cast to integers from the stacked pair (b, a), along a new
    last unit axis. A value is read through the tracker (its unsqueezed view without the unit
    dim). A buffer of shape (..., 1) has the layout of one of shape (...), so `outer` (`n`'s
    tracker, or the contiguous one of the Gather's shape) reads the Select too. The Gather bare:
    a where stacked again at once (max(where(..), c), a concat on the last axis) has its
    reshape and unsqueeze cancel, and no view is left between."""
    if n.op is Op.VIEW and n.src[0].op is Op.GATHER:
        gather, outer = n.src[0], n.arg
    elif n.op is Op.GATHER:
        gather, outer = n, ShapeTracker.contiguous(n.shape)
    else:
        return None
    pair, index = gather.src
    ax = gather.arg
    if ax != len(gather.shape) - 1 or not sym.equal(gather.shape[ax], 1):
        return None
    shape = gather.shape[:-1]
    found = concat_pieces(pair)
    if found is None or found[0] != ax or len(found[1]) != 2 or not all(sym.equal(p.shape[ax], 1) for p in found[1]):
        return None
    b, a = found[1]
    if index.op is not Op.VIEW or not _reads_as(index.arg, shape):
        return None
    cast = index.src[0]
    if cast.op is not Op.CAST or cast.src[0].dtype is not DType.BOOL or not cast.dtype.is_int or not (
            len(cast.shape) == len(shape) and all(sym.equal(x, y) for x, y in zip(cast.shape, shape))):
        return None
    operands = []
    for piece in (a, b):
        if piece.op is Op.VIEW:
            st = _drops_last_unit(piece.arg)
            if st is None:
                return None
            operands.append((piece.src[0], st))
        else:
            operands.append((piece, ShapeTracker.contiguous(shape)))
    return cast.src[0], operands[0], operands[1], outer


# --- direct convolutions and pooling: a product of window views reduced over its kernel axes --
WINDOW_KINDS = {Op.SUM_REDUCE: "sum", Op.MAX_REDUCE: "max"}


def _overlaps(st: ShapeTracker) -> bool:
    """The view reads some element twice along axes it does not broadcast: overlapping windows
    (a matmul operand, a transpose or a slice reads each element at most once per position).
    Symbolic dims and strides are checked at two probe values (a heuristic that only decides
    whether the fused form is offered: both forms are equal)."""
    dims = [(d, s) for d, s in zip(st.shape, st.strides) if not sym.equal(s, 0) and not sym.equal(d, 1)]
    free = {str(v) for d, s in dims for v in sym.free_symbols(d) | sym.free_symbols(s)}
    for probe in (17, 29) if free else (0,):
        bound = {name: probe for name in free}
        count, span = 1, 1
        for d, s in dims:
            d, s = int(sym.evaluate(d, bound)), int(sym.evaluate(s, bound))
            count *= d
            span += (d - 1) * abs(s)
        if count <= span:
            return False
    return True


def window_reduce_of(n: Node) -> tuple[str, int, tuple[Node, ...]] | None:
    """(kind, r, operands) when `n` ends a chain of SumReduces (or MaxReduces) over exactly the
    last r axes, all static, of the product of two views (sum) or of one view, one of them
    overlapping windows: the builder's direct convolution or pooling (`builder/nn.py`), which
    a WindowReduce computes without materializing the product. A max over r >= 2 short axes of
    a view is one too (non-overlapping pooling; max is exact, whatever the order)."""
    kind = WINDOW_KINDS.get(n.op)
    if kind is None or n.dtype is DType.BOOL:
        return None
    chain, cur = [], n
    while cur.op is n.op and cur.dtype is n.dtype:
        chain.append(cur)
        cur = cur.src[0]
    base, r = cur, len(chain)
    remaining = list(range(base.ndim))
    removed = [remaining.pop(red.arg) for red in reversed(chain)]
    if sorted(removed) != list(range(base.ndim - r, base.ndim)) or not all(sym.is_static(d) for d in base.shape[-r:]):
        return None
    if base.op is Op.MUL and kind == "sum" and base.dtype is n.dtype:
        operands = base.src
    elif base.op is Op.VIEW and base.dtype is n.dtype:
        operands = (base,)
    else:
        return None
    if not all(v.op is Op.VIEW and len(v.shape) == len(base.shape) for v in operands):
        return None
    short_max = kind == "max" and r >= 2 and sym.product(base.shape[-r:]) <= 64
    if not (short_max or any(_overlaps(v.arg) for v in operands)):
        return None
    return kind, r, tuple(operands)


def maximum_operands(n: Node):
    """((a, tracker), (b, tracker)) when `n` is the builder's `maximum(a, b)`: a MaxReduce over
    the last axis, of length 2, of the stack (a concat of unit pieces) of a and b. A value is
    read through the tracker (its unsqueezed view without the unit dim)."""
    if n.op is not Op.MAX_REDUCE or not n.src[0].shape or n.arg != len(n.src[0].shape) - 1:
        return None
    found = concat_pieces(n.src[0])
    if found is None or found[0] != n.arg or len(found[1]) != 2 or not all(sym.equal(p.shape[-1], 1) for p in found[1]):
        return None
    operands = []
    for piece in found[1]:
        if piece.dtype is not n.dtype:
            return None
        if piece.op is Op.VIEW:
            st = _drops_last_unit(piece.arg)
            if st is None:
                return None
            operands.append((piece.src[0], st))
        else:  # a buffer of shape (..., 1) has the layout of one of shape (...)
            operands.append((piece, ShapeTracker.contiguous(n.shape)))
    return tuple(operands)


# --- matmul operand views, and matmuls in a narrow dtype -------------------------------------
NARROW = (DType.BF16, DType.F16)  # the builder's matmul widens these to f32 and rounds back


def mat_a(st: ShapeTracker) -> ShapeTracker | None:
    """The tracker of a[..., M, K] when `st` reads a[..., M, N, K] constant along N (stride 0,
    or N of 1: a GEMV), else None: the `MatA` fact. The offset is kept (an operand sliced out
    of a larger buffer, e.g. a 1x1 convolution on a channel split, is a GEMM on the slice)."""
    r = st.ndim
    if r < 3 or st.mask is not None or not (sym.equal(st.strides[r - 2], 0) or sym.equal(st.shape[r - 2], 1)):
        return None
    return ShapeTracker(st.shape[: r - 2] + st.shape[r - 1:], st.strides[: r - 2] + st.strides[r - 1:], st.offset)


def mat_b(st: ShapeTracker) -> ShapeTracker | None:
    """The tracker of b[..., K, N] when `st` reads bT[..., M, N, K] constant along M, else None:
    the `MatB` fact."""
    r = st.ndim
    if r < 3 or st.mask is not None or not (sym.equal(st.strides[r - 3], 0) or sym.equal(st.shape[r - 3], 1)):
        return None
    shape = st.shape[: r - 3] + (st.shape[r - 1], st.shape[r - 2])
    return ShapeTracker(shape, st.strides[: r - 3] + (st.strides[r - 1], st.strides[r - 2]), st.offset)


def compose(outer: ShapeTracker, inner: ShapeTracker) -> ShapeTracker | None:
    """One tracker reading, from `inner`'s buffer, what `outer` reads from a contiguous buffer of
    inner.shape (a view of a view), or None when `outer` does not step along whole dims of
    inner.shape: each of its dims must broadcast, have size 1, or move one distinct dim of
    inner by that dim's contiguous stride, staying within it. No masks, `outer` at offset 0."""
    if outer.mask is not None or inner.mask is not None or not sym.equal(outer.offset, 0):
        return None
    want, unit = contiguous_strides(inner.shape), contiguous_strides(outer.shape)
    used, strides = set(), []
    for i, (d, s) in enumerate(zip(outer.shape, outer.strides)):
        if sym.equal(d, 1):  # any stride reads the same: the contiguous one (what GEMM layouts expect)
            strides.append(unit[i])
            continue
        if sym.equal(s, 0):
            strides.append(0)
            continue
        j = next((j for j, (n, w) in enumerate(zip(inner.shape, want))
                  if j not in used and not sym.equal(n, 1) and sym.equal(w, s)), None)
        if j is None or not (sym.equal(d, inner.shape[j]) or (
                sym.is_static(d) and sym.is_static(inner.shape[j]) and int(d) <= int(inner.shape[j]))):
            return None
        used.add(j)
        strides.append(inner.strides[j])
    return ShapeTracker(tuple(outer.shape), tuple(strides), inner.offset)


def over_plain(outer: ShapeTracker, inner: ShapeTracker) -> ShapeTracker | None:
    """`outer` (any view: overlapping windows, a mask) read from `inner`'s buffer directly, when
    `inner` reads that buffer in plain row-major order (a reshape or an added unit dim, at an
    offset, no mask): element i of inner's shape is then the buffer's element inner.offset + i,
    so outer's strides and mask hold as they are. A pool's window view of its input with a unit
    dim added (GoogLeNet: three 512 x 16 x 16 copies a call) reads the input, not a copy. None
    for any other inner view."""
    if inner.mask is not None:
        return None
    want = contiguous_strides(inner.shape)
    if not all(sym.equal(d, 1) or sym.equal(s, w) for d, s, w in zip(inner.shape, inner.strides, want)):
        return None
    return ShapeTracker(tuple(outer.shape), tuple(outer.strides), sym.norm(outer.offset + inner.offset), outer.mask)


def _narrow_operand(view: Node, tracker: ShapeTracker | None, dtype: DType):
    """(source, tracker) reading the narrow value that `view` (a view of its widening to f32)
    reads, through one view of a node that is not a view, or None."""
    if tracker is None or view.op is not Op.VIEW:
        return None
    cast = view.src[0]
    if cast.op is not Op.CAST or cast.dtype is not DType.F32 or cast.src[0].dtype is not dtype:
        return None
    x = cast.src[0]
    if x.op is not Op.VIEW:
        return x, tracker
    st = compose(tracker, x.arg)
    return None if st is None else (x.src[0], st)


def narrow_matmul_of(n: Node):
    """((a, tracker), (b, tracker)) when `n` is the builder's matmul of bf16 (f16) operands:
    cast(sum_k(widen(a)[.., m, 1, k] * widen(b)T[.., 1, n, k]), f32 -> bf16). A MatMul in the
    narrow dtype is that function (it accumulates in f32, rounding once at the end: `ops.py`),
    reading 2-byte operands instead of widened copies; operands are read through one view."""
    if n.op is not Op.CAST or n.dtype not in NARROW:
        return None
    s = n.src[0]
    if s.op is not Op.SUM_REDUCE or s.dtype is not DType.F32 or not s.src or s.arg != s.src[0].ndim - 1:
        return None
    prod = s.src[0]
    if prod.op is not Op.MUL:
        return None
    for va, vb in (prod.src, prod.src[::-1]):
        if va.op is not Op.VIEW or vb.op is not Op.VIEW:
            return None
        a = _narrow_operand(va, mat_a(va.arg), n.dtype)
        b = _narrow_operand(vb, mat_b(vb.arg), n.dtype)
        if a is not None and b is not None:
            return a, b
    return None
