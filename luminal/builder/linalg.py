"""Matrix products: broadcast-multiply then SumReduce over K (K last, as upstream).

`a[..., M, K] @ b[..., K, N]` is `sum(a[..., M, 1, K] * bT[..., 1, N, K], axis=-1)` with torch's
batch broadcasting and 1-D promotion rules; the egraph layer recognizes the pattern as MatMul.
f16/bf16 operands are cast to f32 first, so products and sums accumulate in f32.
"""

from __future__ import annotations

from luminal.errors import DTypeError, ShapeError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Op


class LinalgMixin:
    def matmul(self, other):
        other = self._operand(other, Op.MAT_MUL.title)
        if self.ndim == 0 or other.ndim == 0:
            raise ShapeError("matmul needs tensors with at least one dim")
        if self.dtype is DType.BOOL:
            raise DTypeError("matmul of bool tensors")
        a = self.unsqueeze(0) if self.ndim == 1 else self
        b = other.unsqueeze(-1) if other.ndim == 1 else other
        if not sym.equal(a.shape[-1], b.shape[-2]):
            raise ShapeError(f"matmul: shapes {self.shape} and {other.shape} disagree on K ({a.shape[-1]} vs {b.shape[-2]})")
        from luminal.builder.tensor import broadcast_shapes

        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        acc = self.dtype.accumulator if self.dtype.is_float else self.dtype
        lhs = a.cast(acc).unsqueeze(-2).expand(batch + (m, n, k))
        rhs = b.cast(acc).transpose(-1, -2).unsqueeze(-3).expand(batch + (m, n, k))
        out = lhs.mul(rhs).sum(-1, dtype=acc).cast(self.dtype)
        if self.ndim == 1:
            out = out.squeeze(-2)
        if other.ndim == 1:
            out = out.squeeze(-1)
        return out

    def bmm(self, other):
        if self.ndim != 3 or other.ndim != 3:
            raise ShapeError(f"bmm needs two 3-D tensors, got {self.shape} and {other.shape}")
        return self.matmul(other)

    def grouped_matmul(self, weight, offs):
        """The grouped GEMM of MoE layers (`Op.GROUPED_MAT_MUL`): out[s] = self[s] @ weight[g(s)],
        g(s) = #{i : offs[i] <= s}, rows past the last offset 0. One fused node, the builder's one:
        its primitive form (`grouped_rows`) would read a K x N weight per row."""
        weight = self._operand(weight, Op.GROUPED_MAT_MUL.title)
        if self.ndim != 2 or weight.ndim != 3 or offs.ndim != 1:
            raise ShapeError(f"grouped_matmul takes x (S, K), weight (E, K, N) and offsets (E,); got {self.shape}, "
                             f"{weight.shape} and {offs.shape}")
        if not (sym.equal(weight.shape[0], offs.shape[0]) and sym.equal(self.shape[1], weight.shape[1])):
            raise ShapeError(f"grouped_matmul: x {self.shape}, weight {weight.shape} and offsets {offs.shape} do not "
                             "agree (x (S, K), weight (E, K, N), offsets (E,))")
        if self.dtype is DType.BOOL or not offs.dtype.is_int:
            raise DTypeError(f"grouped_matmul of {self.dtype} by {weight.dtype} with {offs.dtype} offsets: needs "
                             "numbers and integer offsets")
        return self._new(Op.GROUPED_MAT_MUL, self.dtype, (self.shape[0], weight.shape[2]), (self, weight, offs))

    def linear(self, weight, bias=None):
        """x @ weight.T + bias, as torch.nn.functional.linear."""
        out = self.matmul(weight.T if weight.ndim == 2 else weight)
        return out if bias is None else out.add(bias)


def groups_of(offs, rows):
    """g(s) = #{i : offs[i] <= s} for each of `rows` rows, int64 (E past the last offset)."""
    s = offs.graph.iota(rows, DType.I64).unsqueeze(-1)
    return offs.cast(DType.I64).unsqueeze(0).le(s).cast(DType.I64).sum(-1)


def grouped_rows(x, weight, offs):
    """`Op.GROUPED_MAT_MUL` in primitives: each row times its group's gathered weight (a batched
    matmul with M = 1), the rows past the last offset zeroed."""
    from luminal.builder.functional import where

    experts = weight.shape[0]
    g = groups_of(offs, x.shape[0])
    inside = g.lt(experts)
    pick = g.where_(inside, x.graph.scalar(experts - 1, DType.I64))  # a row past the end reads the last expert
    out = x.unsqueeze(1).matmul(weight.index_select(0, pick)).squeeze(1)
    return where(inside.unsqueeze(-1), out, out._scalar(0))
