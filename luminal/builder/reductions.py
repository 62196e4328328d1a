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
        """Inclusive prefix sum: a masked sum over a triangle (exact for integers)."""
        from luminal.builder.tensor import normalize_axis

        a = normalize_axis(axis, self.ndim)
        x = self.cast(self.dtype.accumulator).transpose(a, -1) if self.ndim else self.reshape(1)
        n = x.shape[-1]
        i = self.graph.iota(n, DType.I64)
        keep = i.reshape(1, n).le(i.reshape(n, 1))  # keep[i, j] = j <= i
        rows = x.unsqueeze(-2).expand(x.shape[:-1] + (n, n))
        zero = 0.0 if x.dtype.is_float else 0
        out = rows.where_(keep, zero).sum(-1)
        out = out.transpose(a, -1) if self.ndim else out.reshape(())
        return out.cast(self.dtype) if self.dtype in (DType.F16, DType.BF16) else out

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
