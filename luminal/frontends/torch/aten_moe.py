"""Mixture-of-Experts as transformers runs it by default: `histc` counts the tokens routed to each
expert, `cumsum` turns the counts into group offsets, and a grouped GEMM
(`transformers::grouped_mm_fallback`, or `aten._grouped_mm` for bf16 weights) multiplies each
row by its own expert's matrix.

The offsets are data, but nothing's shape depends on them: row s belongs to group
g(s) = #{i : offs[i] <= s}. The product is one `Op.GROUPED_MAT_MUL` node (`Tensor.grouped_matmul`),
which the targets run as a grouped GEMM: one GEMM per group on its rows (`cpu`: a BLAS call per
group), reading each expert's weights once. Its primitive form, each row times its gathered
expert matrix (a batched matmul with M = 1), read S x K x N weights: S/E times the traffic.
"""

from __future__ import annotations

import math

from luminal.builder.functional import where as lwhere
from luminal.builder.linalg import groups_of
from luminal.errors import ShapeError, UnsupportedError
from luminal.frontends.torch.aten_ops import aten
from luminal.hlir.dtypes import DType


def _grouped_rows(cx, x, weight, offs, bias=None):
    """out[s] = x[s] @ weight[g(s)] (+ bias[g(s)]), zero for rows past the last offset."""
    if x.ndim != 2 or weight.ndim != 3 or offs is None or offs.ndim != 1:
        raise UnsupportedError(f"grouped_mm of a {x.ndim}-D input by a {weight.ndim}-D weight"
                               f"{'' if offs is not None else ' without offsets'}: luminal lowers the 2-D x 3-D form "
                               "with offsets (the MoE forward) and the 3-D x 3-D batched form")
    if not (weight.shape[0] == offs.shape[0] and x.shape[1] == weight.shape[1]):
        raise ShapeError(f"grouped_mm: input {x.shape}, weight {weight.shape} and offsets {offs.shape} do not agree "
                         "(input (S, K), weight (E, K, N), offsets (E,))")
    out = x.cast(weight.dtype).grouped_matmul(weight, offs)
    if bias is None:
        return out
    experts = weight.shape[0]
    g = groups_of(offs, x.shape[0])
    inside = g.lt(experts)
    pick = g.where_(inside, cx.g.scalar(experts - 1, DType.I64))  # rows past the last offset: zeroed below
    out = out.add(bias.cast(out.dtype).index_select(0, pick))
    return lwhere(inside.unsqueeze(-1), out, out._scalar(0))


@aten("transformers::grouped_mm_fallback.default")
def grouped_mm_fallback(cx, x, weight, offs):
    return _grouped_rows(cx, x, weight, offs)


@aten("transformers::grouped_mm_fallback_backward.default")
def grouped_mm_fallback_backward(cx, x, weight, offs, grad):
    """d input[s] = grad[s] @ weight[g(s)].T; d weight[e] = x_e.T @ grad_e over the rows of group e,
    as one batched GEMM over the experts with the other groups' rows masked to zero."""
    d_x = _grouped_rows(cx, grad, weight.transpose(-1, -2), offs)
    g = groups_of(offs, x.shape[0])
    mine = g.unsqueeze(0).eq(cx.g.iota(weight.shape[0], DType.I64).unsqueeze(-1)).unsqueeze(-1)  # (E, S, 1)
    rows = lwhere(mine, x.cast(weight.dtype).unsqueeze(0), x._scalar(0).cast(weight.dtype))
    return d_x, rows.transpose(-1, -2).matmul(grad.cast(weight.dtype))


@aten("_grouped_mm.default")
def grouped_mm(cx, x, weight, offs=None, bias=None, out_dtype=None):
    if x.ndim == 3 and weight.ndim == 3 and offs is None:  # one GEMM per batch entry
        out = x.cast(weight.dtype).matmul(weight)
        return out if bias is None else out.add(bias.cast(out.dtype).unsqueeze(1))
    return _grouped_rows(cx, x, weight, offs, bias)


# --- histc ---------------------------------------------------------------------------------
def _range(cx, x, lo: float, hi: float):
    """torch's outer bin edges, as 0-d tensors of x's dtype: [min, max], or the data's range
    when min == max, widened by one each way when that range is a single value."""
    if lo > hi or not (math.isfinite(lo) and math.isfinite(hi)):
        raise ShapeError(f"histc: the range [{lo}, {hi}] must be finite with min <= max")
    if lo != hi:
        return cx.g.scalar(lo, DType.F64).cast(x.dtype), cx.g.scalar(hi, DType.F64).cast(x.dtype)
    if lo == hi and x.numel == 0:
        return cx.g.scalar(lo - 1, DType.F64).cast(x.dtype), cx.g.scalar(hi + 1, DType.F64).cast(x.dtype)
    dlo, dhi = x.min().cast(DType.F64), x.max().cast(DType.F64)
    same = dlo.eq(dhi)
    return dlo.add(-1).where_(same, dlo).cast(x.dtype), dhi.add(1).where_(same, dhi).cast(x.dtype)


@aten("histc.default")
def histc(cx, x, bins=100, min=0, max=0):  # noqa: A002 - ATen's names
    """torch's histc: an element in [lo, hi] (NaN is not) falls in bin
    trunc((x - lo) * bins / (hi - lo)), the last bin closed. Each step rounds in x's dtype, as
    torch's kernel does; the quotient is taken in float64 and rounded once to x's dtype, which
    gives the correctly rounded quotient for f32, f16 and bf16 (a quotient of two p-bit floats is
    never within 2**-(2p+1) of a rounding boundary, well outside float64's error). Integer inputs
    (CUDA's histc) divide exactly."""
    if x.dtype.is_float and x.dtype is not DType.F32:
        # f64: no wider type for the quotient (x * recip(y) rounds twice); f16/bf16: the kernels'
        # fused regions round the steps otherwise than torch's per-op rounding
        raise UnsupportedError(f"histc on {x.dtype}: an element at a bin edge could land in the neighbouring bin "
                               "(luminal's histc is exact for float32, on which transformers' MoE routing calls it)")
    flat = x.reshape(-1)
    lo, hi = _range(cx, flat, float(min), float(max))
    inside = flat.ge(lo).logical_and(flat.le(hi))
    flat = flat.where_(inside, lo)  # an outside element (NaN, inf) is dropped: no cast of it to an int
    if flat.dtype.is_float:
        num, den = flat.sub(lo).mul(float(bins)), hi.sub(lo)
        q = num.cast(DType.F64).mul(den.cast(DType.F64).reciprocal()).cast(flat.dtype)
        pos = q.trunc().cast(DType.I64)
    else:
        num, den = flat.cast(DType.I64).sub(lo.cast(DType.I64)).mul(bins), hi.cast(DType.I64).sub(lo.cast(DType.I64))
        pos = num.div(den, rounding_mode="trunc")
    pos = pos.where_(pos.lt(bins), pos._scalar(bins - 1))  # x == hi lands in the last bin
    hits = pos.unsqueeze(-1).eq(cx.g.iota(bins, DType.I64)).logical_and(inside.unsqueeze(-1))
    return hits.cast(DType.I64).sum(0).cast(x.dtype)
