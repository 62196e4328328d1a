"""Reductions and the normalizations built on them.

Accumulation dtype is explicit (DESIGN.md): f16/bf16 are cast to f32 before a SumReduce and
the result cast back; bool and int32 sums accumulate (and return) int64 as in torch.
"""

from __future__ import annotations

from luminal.errors import DTypeError, ShapeError, UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Op


def _axes(t, axis) -> list[int]:
    from luminal.builder.tensor import normalize_axis

    if axis is None:
        return list(range(t.ndim))
    axes = axis if isinstance(axis, (tuple, list)) else [axis]
    out = sorted({normalize_axis(a, t.ndim) for a in axes})
    if len(out) != len(axes):
        raise ShapeError(f"repeated axis in {axis}")
    return out if t.ndim else []  # a 0-d tensor reduces over dim 0 or -1 to itself (torch)


PREFIX_BLOCK = 64  # elements per block of a blocked prefix sum
PREFIX_LEVELS = 1  # block levels over a symbolic length: n * block + (n / block)^2 work (static
# lengths recurse until one block; a symbolic one's block count, ceiling(n/64), is a dim sympy
# cannot bound from below, so the row it is sliced back to would not match n)


def _triangle_prefix(x, exclusive: bool = False):
    """Prefix sums along the last axis as a masked sum over a triangle: n^2 work, for short rows."""
    n = x.shape[-1]
    i = x.graph.iota(n, DType.I64)
    j, i = i.reshape(1, n), i.reshape(n, 1)
    keep = j.lt(i) if exclusive else j.le(i)  # keep[i, j]: element j is in prefix i
    rows = x.unsqueeze(-2).expand(x.shape[:-1] + (n, n))
    return rows.where_(keep, 0.0 if x.dtype.is_float else 0).sum(-1)


def _prefix_sum(x, level: int = 0, exclusive: bool = False):
    """Prefix sums along the last axis (inclusive, or of the elements before each) in linear
    work: the row cut into blocks of PREFIX_BLOCK (zero padded), each block's prefixes by a
    triangle, plus the sum of the blocks before it (the exclusive prefix of the block totals,
    recursively). A triangle over the whole row would be n^2 work. Every prefix is a masked sum of exactly its elements (nothing is subtracted),
    so inf and NaN propagate as in a sequential sum."""
    n = x.shape[-1]
    if (sym.is_static(n) and int(n) <= PREFIX_BLOCK) or (not sym.is_static(n) and level >= PREFIX_LEVELS):
        return _triangle_prefix(x, exclusive)
    m = sym.ceildiv(n, PREFIX_BLOCK)
    pad = sym.norm(m * PREFIX_BLOCK - n)
    padded = x.pad([(0, 0)] * (x.ndim - 1) + [(0, pad)]) if not (sym.is_static(pad) and int(pad) == 0) else x
    blocks = padded.reshape(x.shape[:-1] + (m, PREFIX_BLOCK))
    before = _prefix_sum(blocks.sum(-1), level + 1, exclusive=True)  # (..., m): the blocks before each
    out = _triangle_prefix(blocks, exclusive).add(before.unsqueeze(-1))
    out = out.reshape(x.shape[:-1] + (sym.norm(m * PREFIX_BLOCK),))
    base, st = out._tracker()  # the first n: a plain view (slice() would clamp n to m * block, which
    return out._view(base, st.slice(out.ndim - 1, 0, n, 1))  # sympy cannot simplify for a symbolic n)


class ReductionMixin:
    def _reduce_prim(self, op: Op, axis, keepdim: bool):
        axes = _axes(self, axis)
        out = self
        for a in reversed(axes):  # highest axis first keeps the lower axes' numbers valid
            shape = out.shape[:a] + out.shape[a + 1 :]
            out = out._new(op, out.dtype, shape, (out,), a)
        if not axes and op is Op.SUM_REDUCE and out.dtype.is_float:
            out = out.add(0.0)  # a 0-d sum: torch's starts from +0, so -0.0 sums to 0.0
        if keepdim:
            out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(self.shape)))
        return out

    def sum(self, axis=None, keepdim: bool = False, dtype=None):
        acc = DType.of(dtype) if dtype is not None else self.dtype.accumulator
        out = self.cast(acc)._reduce_prim(Op.SUM_REDUCE, axis, keepdim)
        if dtype is None and self.dtype in (DType.F16, DType.BF16):
            out = out.cast(self.dtype)  # accumulate in f32, return the input dtype (torch)
        return out

    def _count(self, axis):
        return sym.product(self.shape[a] for a in _axes(self, axis))

    def mean(self, axis=None, keepdim: bool = False):
        if not self.dtype.is_float:
            raise DTypeError(f"mean of a {self.dtype} tensor; cast to a float dtype first")
        acc = self.dtype.accumulator
        total = self.cast(acc)._reduce_prim(Op.SUM_REDUCE, axis, keepdim)
        count = self.graph.scalar(self._count(axis), acc)
        return total.mul(count.reciprocal()).cast(self.dtype)

    def max(self, axis=None, keepdim: bool = False):
        return self._reduce_prim(Op.MAX_REDUCE, axis, keepdim)

    def min(self, axis=None, keepdim: bool = False):
        return self.order_flip().max(axis, keepdim).order_flip()

    amax, amin = max, min

    def prod(self, axis=None, keepdim: bool = False):
        out = self
        for a in reversed(_axes(self, axis)):
            out = out._prod_axis(a)
        if keepdim:
            out = out.reshape(tuple(1 if i in _axes(self, axis) else d for i, d in enumerate(self.shape)))
        return out

    def _prod_axis(self, a: int):
        n = self.shape[a]
        if not sym.is_static(n):
            raise UnsupportedError(f"prod over symbolic axis {n}")
        out = self.cast(self.dtype.accumulator) if self.dtype is not DType.BOOL else self
        if n == 0:
            return self.graph.scalar(1, out.dtype).expand(self.shape[:a] + self.shape[a + 1 :])
        while out.shape[a] > 1:  # pairwise products: log2(n) multiplies
            m = out.shape[a]
            half = m // 2
            paired = out.slice(a, 0, half).mul(out.slice(a, half, 2 * half))
            if m % 2:
                from luminal.builder.functional import concat

                paired = concat([paired, out.slice(a, m - 1, m)], a)
            out = paired
        return out.squeeze(a)

    def var(self, axis=None, correction: int = 1, keepdim: bool = False):
        mean = self.mean(axis, keepdim=True)
        dev = self.sub(mean)
        n = self._count(axis)
        total = dev.mul(dev).sum(axis, keepdim)
        denom = self.graph.scalar(sym.dmax(sym.norm(n - correction), 0), self.dtype)
        return total.mul(denom.reciprocal())

    def std(self, axis=None, correction: int = 1, keepdim: bool = False):
        return self.var(axis, correction, keepdim).sqrt()

    def argmax(self, axis=None, keepdim: bool = False):
        """Index of the first maximum (NaN counts as the maximum, as in torch)."""
        if axis is None:
            return self.flatten().argmax(0, keepdim=False)
        from luminal.builder.tensor import normalize_axis

        a = normalize_axis(axis, self.ndim)
        n = self.shape[a] if self.ndim else 1
        if sym.is_static(n) and n == 0:
            raise ShapeError(f"argmax/argmin over axis {a}: the axis is empty (shape {self.shape})")
        if not self.ndim:
            return self.graph.scalar(0, DType.I64)
        best = self.max(a, keepdim=True)
        hit = self.eq(best)
        if self.dtype.is_float:
            hit = hit.logical_or(self.isnan())
        pos = self.graph.iota(n, DType.I64).reshape(tuple(n if i == a else 1 for i in range(self.ndim)))
        big = self.graph.scalar(n, DType.I64)
        first = pos.expand(self.shape).where_(hit, big).min(a, keepdim)
        if sym.is_static(n):
            return first
        # a symbolic axis may be empty at run time, where torch raises: looking the result up
        # in iota(n) is the identity on [0, n) and raises IndexOutOfRange for an empty axis
        return self.graph.iota(n, DType.I64).index_select(0, first.flatten()).reshape(first.shape)

    def argmin(self, axis=None, keepdim: bool = False):
        return self.order_flip().argmax(axis, keepdim)

    def cumsum(self, axis: int):
        """Inclusive prefix sum (see `_prefix_sum`); floats accumulate in float64 and round once,
        as torch's CPU cumsum accumulates in double; integers are exact."""
        from luminal.builder.tensor import normalize_axis

        a = normalize_axis(axis, self.ndim)
        x = self.transpose(a, -1) if self.ndim else self.reshape(1)
        result = self.dtype if self.dtype in (DType.F16, DType.BF16) else self.dtype.accumulator
        x = x.cast(DType.F64 if self.dtype.is_float else result)
        out = _prefix_sum(x).cast(result)
        return out.transpose(a, -1) if self.ndim else out.reshape(())

    def logsumexp(self, axis, keepdim: bool = False):
        m = self.max(axis, keepdim=True)
        m_safe = m.where_(m.isinf().logical_not(), 0.0)
        out = self.sub(m_safe).exp().sum(axis, keepdim=True).log().add(m_safe)
        return out if keepdim else out.squeeze(axis)

    def softmax(self, axis: int = -1):
        x = self.cast(self.dtype.accumulator)
        e = x.sub(x.max(axis, keepdim=True)).exp()  # exp(x - max) / sum(exp(x - max))
        return e.mul(e.sum(axis, keepdim=True).reciprocal()).cast(self.dtype)

    def log_softmax(self, axis: int = -1):
        x = self.cast(self.dtype.accumulator)
        shifted = x.sub(x.max(axis, keepdim=True))
        return shifted.sub(shifted.exp().sum(axis, keepdim=True).log()).cast(self.dtype)

    def layer_norm(self, normalized_shape=None, weight=None, bias=None, eps: float = 1e-5):
        k = 1 if normalized_shape is None else len(tuple(normalized_shape))
        axes = tuple(range(self.ndim - k, self.ndim))
        x = self.cast(self.dtype.accumulator)
        centered = x.sub(x.mean(axes, keepdim=True))
        var = centered.mul(centered).mean(axes, keepdim=True)
        out = centered.mul(var.add(eps).rsqrt()).cast(self.dtype)
        if weight is not None:
            out = out.mul(weight)
        if bias is not None:
            out = out.add(bias)
        return out

    def rms_norm(self, weight=None, eps: float = 1e-6, normalized_shape=None):
        k = 1 if normalized_shape is None else len(tuple(normalized_shape))
        axes = tuple(range(self.ndim - k, self.ndim))
        x = self.cast(self.dtype.accumulator)
        out = x.mul(x.mul(x).mean(axes, keepdim=True).add(eps).rsqrt()).cast(self.dtype)
        return out if weight is None else out.mul(weight)
