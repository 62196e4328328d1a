"""Gather, scatter, index_select, advanced indexing, and top-k/sort in primitives."""

from __future__ import annotations

from luminal.errors import DTypeError, ShapeError, UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Op


def _check_index(index, what):
    if not index.dtype.is_int:
        raise DTypeError(f"{what}: indices must be int32 or int64, got {index.dtype}")


BITONIC_MIN = 1024  # rows longer than this sort by a bitonic network (n log^2 n), shorter by rank (n^2)
SELECT_MAX_K = 16  # a top-k of at most this many of a static row at least 4k long: k selection passes (k n)


def _after(av, ai, bv, bi, n: int, largest: bool, is_float: bool):
    """Whether element b comes before element a in topk's order (bool tensor): real elements
    before the padding (index >= n); by value, largest (smallest) first, NaN as the largest value
    as in torch; ties by index. A strict total order, so a sorting network gives the one stable
    answer."""
    if not largest:
        av, bv = av.order_flip(), bv.order_flip()
    if is_float:
        na, nb = av.isnan(), bv.isnan()
        gt = bv.gt(av).logical_or((nb.logical_and(na.logical_not())) if largest else na.logical_and(nb.logical_not()))
        tie = bv.eq(av).logical_or(na.logical_and(nb))
    elif av.dtype is DType.BOOL:
        gt, tie = bv.logical_and(av.logical_not()), bv.eq(av)
    else:
        gt, tie = bv.gt(av), bv.eq(av)
    earlier = bi.lt(ai)
    real_a, real_b = ai.lt(n), bi.lt(n)
    by_value = real_a.logical_and(real_b).logical_and(gt.logical_or(tie.logical_and(earlier)))
    return by_value.logical_or(real_a.logical_not().logical_and(real_b.logical_or(earlier)))


def _select(x, k: int, largest: bool):
    """topk's order (value, NaN as the largest, ties by index) by k passes over the row, each
    picking the first best element not yet picked: k·n per row where the rank form is n²
    (k-NN's 5 nearest of 120 training points: 24 times less work)."""
    n = int(x.shape[-1])
    g = x.graph
    pos = g.iota(n, DType.I64).reshape((1,) * (x.ndim - 1) + (n,)).expand(x.shape)
    y = x if largest else x.order_flip()  # the best is then the largest y (NaN stays NaN)
    lowest = {DType.BOOL: False}.get(x.dtype, float("-inf") if x.dtype.is_float else -(2 ** (8 * x.dtype.itemsize - 1)))
    nan = y.isnan() if x.dtype.is_float else None
    avail = pos.ge(0)  # all true
    picks = []
    for _ in range(k):
        real = avail if nan is None or largest else avail.logical_and(nan.logical_not())  # NaN last: not yet
        best = y.where_(real, lowest).max(-1, keepdim=True)  # NaN when largest and one is left (NaN first)
        hit = real.logical_and(y.eq(best))
        if nan is not None and largest:
            hit = hit.logical_or(avail.logical_and(nan).logical_and(best.isnan()))
        if nan is not None and not largest:  # no number left: the first NaN left
            none = hit.cast(DType.I32).max(-1, keepdim=True).eq(0)
            hit = hit.logical_or(none.logical_and(avail).logical_and(nan))
        pick = pos.where_(hit, n).min(-1, keepdim=True)
        picks.append(pick)
        avail = avail.logical_and(pos.ne(pick))
    from luminal.builder.functional import concat

    index = concat(picks, -1) if k > 1 else picks[0] if k else pos.slice(-1, 0, 0)
    return x.gather(-1, index), index


def _bitonic(x, largest: bool):
    """(values, int64 indices) of the last axis of `x` (static length n) in topk's order: a
    bitonic sorting network over the row padded to a power of two, each stage a compare-exchange
    of the two halves of blocks (n log^2 n work where ranking every pair is n^2). Values move, never recomputed: exact."""
    import numpy as np

    from luminal.builder.functional import concat

    n = int(x.shape[-1])
    m = 1 << (n - 1).bit_length()
    lead = tuple(x.shape[:-1])
    v = x.pad([(0, 0)] * (x.ndim - 1) + [(0, m - n)]) if m > n else x
    i = x.graph.iota(m, DType.I64).expand(lead + (m,))
    size = 2
    while size <= m:
        half = size // 2
        while half >= 1:
            blocks = m // (2 * half)
            shape = lead + (blocks, 2, half)
            vv, ii = v.reshape(shape), i.reshape(shape)
            lo_v, hi_v, lo_i, hi_i = vv[..., 0:1, :], vv[..., 1:2, :], ii[..., 0:1, :], ii[..., 1:2, :]
            # block b of this stage sorts descending where bit `size` of its positions is set
            desc = ((np.arange(blocks) // (size // (2 * half))) % 2).astype(bool).reshape(blocks, 1, 1)
            swap = _after(lo_v, lo_i, hi_v, hi_i, n, largest, x.dtype.is_float).logical_xor(x.graph.constant(desc))
            v = concat([hi_v.where_(swap, lo_v), lo_v.where_(swap, hi_v)], -2).reshape(lead + (m,))
            i = concat([hi_i.where_(swap, lo_i), lo_i.where_(swap, hi_i)], -2).reshape(lead + (m,))
            half //= 2
        size *= 2
    return v, i


class IndexingMixin:
    def gather(self, axis: int, index):
        """torch.gather: out[i][j] = self[index[i][j]][j] for axis 0, and so on."""
        from luminal.builder.tensor import normalize_axis

        _check_index(index, "gather")
        a = normalize_axis(axis, self.ndim)
        if self.ndim == 0:  # torch: a 0-d gather reads the one element
            return self.reshape(1).gather(0, index.reshape(-1) if index.ndim else index.reshape(1)).reshape(index.shape)
        if index.ndim != self.ndim:
            raise ShapeError(f"gather: index has {index.ndim} dims, data has {self.ndim}")
        data = self
        for d in range(self.ndim):  # torch allows a smaller index off the axis
            if d != a and not sym.equal(index.shape[d], self.shape[d]):
                data = data.slice(d, 0, index.shape[d])
        return data._new(Op.GATHER, self.dtype, index.shape, (data, index), a)

    take_along_axis = gather

    def index_select(self, axis: int, index):
        from luminal.builder.tensor import normalize_axis

        _check_index(index, "index_select")
        if self.ndim == 0 or index.ndim == 0:  # torch: 0-d data or index keeps its 0-d-ness
            out = self.reshape(1) if self.ndim == 0 else self
            shape = () if self.ndim == 0 else None
            picked = out.index_select(axis if self.ndim else 0, index.reshape(1))
            return picked.reshape(shape if shape is not None else picked.shape)
        if index.ndim != 1:
            raise ShapeError(f"index_select: index must be 1-D, got shape {index.shape}")
        a = normalize_axis(axis, self.ndim)
        n = index.shape[0]
        shape = self.shape[:a] + (n,) + self.shape[a + 1 :]
        idx = index.reshape(tuple(n if i == a else 1 for i in range(self.ndim))).expand(shape)
        return self._new(Op.GATHER, self.dtype, shape, (self, idx), a)

    def scatter(self, axis: int, index, src, reduce: str | None = None):
        """torch.scatter / scatter_reduce: a copy of self with src written at index along axis."""
        from luminal.builder.tensor import Tensor, normalize_axis

        _check_index(index, "scatter")
        a = normalize_axis(axis, self.ndim)
        if self.ndim == 0:  # torch: a 0-d scatter writes (or combines into) the one element
            src = src.reshape(1) if isinstance(src, Tensor) else src
            return self.reshape(1).scatter(0, index.reshape(1), src, reduce).reshape(())
        if not isinstance(src, Tensor):
            src = self._scalar(src).expand(index.shape)
        if src.dtype is not self.dtype:
            raise DTypeError(f"scatter: src dtype {src.dtype} differs from {self.dtype}")
        if sym.is_static(index.numel) and int(index.numel) == 0:  # torch: nothing is written
            return self
        if src.ndim != index.ndim or index.ndim != self.ndim:
            raise ShapeError(f"scatter: data {self.shape}, index {index.shape} and src {src.shape} differ in rank")
        for d in range(self.ndim):
            if not sym.equal(src.shape[d], index.shape[d]):
                src = src.slice(d, 0, index.shape[d])
        if reduce not in (None, "add", "sum", "mul", "prod", "max", "amax", "min", "amin"):
            raise ShapeError(f"scatter: unknown reduce {reduce!r}")
        reduce = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}.get(reduce, reduce)
        return self._new(Op.SCATTER, self.dtype, self.shape, (self, index, src), (a, reduce))

    def masked_scatter(self, mask, source):
        """torch.masked_scatter: the elements of self where `mask` holds are replaced, in
        row-major order, by the leading elements of `source` (any shape, read flat).

        Primitives only: an inclusive cumsum of the mask numbers the selected elements
        (1, 2, ...); the source, padded with one element in front, is gathered at that number
        (0, the pad, where the mask is off), then `where`. A source shorter than the mask's count
        reads past its end: the Gather raises IndexOutOfRange at run time, as torch raises.
        Trailing dims along which the mask is broadcast (HF's `mask.unsqueeze(-1).expand_as(x)`)
        are numbered once per row: the cumsum runs over the leading dims only.
        """
        from luminal.builder.functional import where
        from luminal.builder.tensor import broadcast_shapes

        if mask.dtype is not DType.BOOL:
            raise DTypeError(f"masked_scatter: the mask must be bool, got {mask.dtype}")
        shape = broadcast_shapes(self.shape, mask.shape)
        if len(shape) != self.ndim or not all(sym.equal(a, b) for a, b in zip(shape, self.shape)):
            raise ShapeError(f"masked_scatter: mask of shape {mask.shape} does not broadcast to {self.shape}")
        mask = mask.expand(self.shape)
        _, st = mask._tracker()
        k = self.ndim  # dims k.. are broadcast: one mask value per row of `inner` elements
        while k > 0 and st.mask is None and (sym.equal(st.strides[k - 1], 0) or sym.equal(st.shape[k - 1], 1)):
            k -= 1
        inner = sym.product(self.shape[k:])
        lead = mask
        for d in range(k, self.ndim):
            lead = lead.slice(d, 0, 1)
        lead = lead.reshape(sym.product(self.shape[:k]))
        count = lead.cast(DType.I64).cumsum(0)  # 1-based number of each selected row
        dt = DType.I64
        j = self.graph.iota(inner, dt).reshape(1, inner)
        pos = count.sub(self.graph.scalar(1, dt)).reshape(-1, 1).mul(self.graph.scalar(inner, dt)).add(j)
        pos = pos.add(self.graph.scalar(1, dt))  # past the pad
        rows = lead.reshape(-1, 1).expand(pos.shape)
        pos = pos.where_(rows, self.graph.scalar(0, dt)).reshape(-1)
        src = source.cast(self.dtype).reshape(-1).pad([(1, 0)])
        picked = src.gather(0, pos).reshape(self.shape)
        return where(mask, picked, self)

    def normalize_index(self, index, axis: int):
        """Negative indices count from the end of `axis` (ONNX and torch indexing semantics)."""
        n = self.graph.scalar(self.shape[axis], index.dtype)
        return index.add(n).where_(index.lt(0), index)

    def index(self, key):
        """Advanced indexing with integer tensors on adjacent axes (x[ids], x[:, i, j])."""
        from luminal.builder.tensor import Tensor, broadcast_shapes

        key = list(key) + [slice(None)] * (self.ndim - len(key))
        if Ellipsis in key:
            raise UnsupportedError("advanced indexing with Ellipsis")
        tensor_pos = [i for i, k in enumerate(key) if isinstance(k, Tensor)]
        if tensor_pos != list(range(tensor_pos[0], tensor_pos[-1] + 1)):
            raise UnsupportedError("advanced indexing with non-adjacent index tensors")
        if any(k.dtype is DType.BOOL for k in (key[i] for i in tensor_pos)):
            raise UnsupportedError("boolean mask indexing (its result shape depends on the data)")
        if any(k is None for k in key):
            raise UnsupportedError("advanced indexing mixed with None")
        x = self
        for i, k in enumerate(key):  # plain slices first
            if isinstance(k, slice) and k != slice(None):
                x = x.slice(i, k.start, k.stop, k.step or 1)
            elif not isinstance(k, (slice, Tensor)):
                raise UnsupportedError(f"advanced indexing mixed with {k!r}")
        first, last = tensor_pos[0], tensor_pos[-1]
        idx = [x.normalize_index(key[i], i) for i in tensor_pos]
        dt = DType.I64
        idx = [t.cast(dt) for t in idx]
        shape = broadcast_shapes(*(t.shape for t in idx))
        linear = None
        for pos, t in zip(tensor_pos, idx):  # row-major linear index over the indexed axes
            t = t.expand(shape)
            linear = t if linear is None else linear.mul(self.graph.scalar(x.shape[pos], dt)).add(t)
        merged = x.flatten(first, last) if last > first else x
        flat = linear.flatten() if len(shape) else linear.reshape(1)
        picked = merged.index_select(first, flat)
        return picked.reshape(x.shape[:first] + shape + x.shape[last + 1 :])

    def topk(self, k: int, axis: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
        """(values, int64 indices) of the k largest (smallest) along axis; ties keep order.

        In primitives, exact. Rows up to BITONIC_MIN (or of symbolic length): rank-based,
        rank[i] = #{j: x[j] beats x[i]}, the index at output position r the i whose rank is r
        (n^2 per row, one fused kernel). Longer static rows: a bitonic sorting network (`_bitonic`:
        n log^2 n per row, about 5 kernels per stage, log2(n)^2 / 2 stages: much faster calls for a
        longer compile).
        """
        from luminal.builder.tensor import normalize_axis

        a = normalize_axis(axis, self.ndim)
        x = self.transpose(a, -1) if self.ndim else self.reshape(1)
        n = x.shape[-1]
        if sym.is_static(n) and isinstance(k, int) and not 0 <= k <= n:
            raise ShapeError(f"topk: k={k} is out of range for an axis of size {n}")
        if sym.is_static(n) and isinstance(k, int) and k <= SELECT_MAX_K and 4 * k <= int(n) <= BITONIC_MIN:
            values, index = _select(x, k, largest)
            if self.ndim == 0:
                return values.reshape(()), index.reshape(())
            return values.transpose(a, -1), index.transpose(a, -1)
        if sym.is_static(n) and int(n) > BITONIC_MIN and isinstance(k, int):
            values, index = _bitonic(x, largest)
            values, index = values[..., :k], index[..., :k]
            return values.transpose(a, -1), index.transpose(a, -1)
        xi, xj = x.unsqueeze(-1), x.unsqueeze(-2)  # [..., i, j]
        if not largest:
            xi, xj = xi.order_flip(), xj.order_flip()
        pos = self.graph.iota(n, DType.I64)
        earlier = pos.reshape(1, n).lt(pos.reshape(n, 1))  # j < i
        if self.dtype.is_float:  # NaN counts as the largest value (torch): first if largest, else last
            ni, nj = xi.isnan(), xj.isnan()
            first_nan, other = (nj, ni) if largest else (ni, nj)
            gt = xj.gt(xi).logical_or(first_nan.logical_and(other.logical_not()))
            tie = xj.eq(xi).logical_or(nj.logical_and(ni))
        elif self.dtype is DType.BOOL:
            gt = xj.logical_and(xi.logical_not())
            tie = xj.eq(xi)
        else:
            gt, tie = xj.gt(xi), xj.eq(xi)
        beats = gt.logical_or(tie.logical_and(earlier))
        rank = beats.cast(DType.I64).sum(-1)  # [..., i]
        r = self.graph.iota(k, DType.I64).reshape(k, 1)
        chosen = rank.unsqueeze(-2).eq(r)  # [..., r, i]
        index = pos.reshape(1, n).expand(chosen.shape).where_(chosen, 0).sum(-1)  # [..., r]
        values = x.gather(-1, index)
        if self.ndim == 0:
            return values.reshape(()), index.reshape(())
        return values.transpose(a, -1), index.transpose(a, -1)

    def sort(self, axis: int = -1, descending: bool = False):
        """(values, int64 indices), stable; NaN sorts as the largest value, as in torch."""
        from luminal.builder.tensor import normalize_axis

        n = self.shape[normalize_axis(axis, self.ndim)] if self.ndim else 1
        return self.topk(n, axis, largest=descending)

    def argsort(self, axis: int = -1, descending: bool = False):
        return self.sort(axis, descending)[1]

    def triu(self, diagonal: int = 0):
        from luminal.builder.functional import triangle

        return triangle(self, diagonal, upper=True)

    def tril(self, diagonal: int = 0):
        from luminal.builder.functional import triangle

        return triangle(self, diagonal, upper=False)

    def embedding(self, ids):
        """This tensor as an embedding table (V, D), rows picked by `ids`."""
        from luminal.builder.functional import embedding

        return embedding(ids, self)
