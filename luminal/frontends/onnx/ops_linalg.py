"""Det: the determinant of (..., n, n) matrices by Gaussian elimination with partial pivoting,
unrolled over the static n (n steps of argmax, row swap by gather, rank-1 update), computed in
float64 and cast back: the product of the pivots times the sign of the row permutation, as
LAPACK's getrf gives (numpy.linalg.det)."""

from __future__ import annotations

from luminal.builder import functional as F
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType


@onnx_op("Det", since=11)
def det(c, x):
    if x.ndim < 2:
        c.fail(f"input of shape {x.shape} is not a (batch of) square matrix")
    n, m = x.shape[-2], x.shape[-1]
    if not (sym.is_static(n) and sym.is_static(m)):
        c.fail("the matrix dims must be static")
    n = int(n)
    if n != int(m):
        c.fail(f"input of shape {x.shape} is not square")
    if not x.dtype.is_float:
        c.fail(f"input dtype {x.dtype} is not a float type")
    batch = tuple(x.shape[:-2])
    a = x.cast(DType.F64)
    result = c.g.scalar(1.0, DType.F64).expand(batch) if batch else c.g.scalar(1.0, DType.F64)
    if n == 0:
        return result.cast(x.dtype)
    rows = c.g.iota(n, DType.I64)  # (n,)
    for k in range(n):
        col = a.slice(-1, k, k + 1).squeeze(-1)  # (..., n)
        cand = F.where(rows.ge(k), col.abs(), -1.0)  # rows above k never pivot
        p = cand.argmax(-1, keepdim=True).cast(DType.I64)  # (..., 1): first largest |a_ik|, i >= k
        # the swap of rows k and p as a gather of row indices
        perm = p.where_(rows.eq(k), rows.where_(rows.ne(p), c.g.scalar(k, DType.I64)))  # (..., n)
        a = a.gather(a.ndim - 2, perm.unsqueeze(-1).expand(a.shape))
        pivot = a.slice(-2, k, k + 1).slice(-1, k, k + 1)  # (..., 1, 1)
        swapped = p.squeeze(-1).ne(k)
        result = F.where(swapped, result.neg(), result).mul(pivot.squeeze(-1).squeeze(-1))
        if k == n - 1:
            break
        zero = pivot.eq(0.0)
        col = a.slice(-1, k, k + 1)  # (..., n, 1)
        safe = F.where(zero, 1.0, pivot)  # a zero pivot: the determinant is 0 already, eliminate nothing
        factor = F.where(rows.reshape((n, 1)).gt(k).logical_and(zero.logical_not()), col.div(safe), 0.0)
        a = a.sub(factor.mul(a.slice(-2, k, k + 1)))  # rows below k lose factor x row k
    return result.cast(x.dtype)
