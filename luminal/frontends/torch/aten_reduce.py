"""Reductions, softmax, cumulative sums and matrix products."""

from __future__ import annotations

from luminal.frontends.torch.aten_ops import aten, axis_list
from luminal.hlir.dtypes import DType


def _axes(x, dim):
    axes = axis_list(dim, x.ndim)
    return tuple(range(x.ndim)) if axes is None else tuple(axes)


@aten("sum.dim_IntList", "sum.default")
def sum_(cx, x, dim=None, keepdim=False, *, dtype=None):
    if x.ndim == 0:
        return x.cast(cx.dtype)
    if x.dtype.is_float and dtype is None:
        return x.sum(_axes(x, dim), keepdim)  # f16/bf16 accumulate in f32 inside
    x = x.cast(cx.dtype)
    return x.sum(_axes(x, dim), keepdim, dtype=cx.dtype)


@aten("mean.dim", "mean.default")
def mean(cx, x, dim=None, keepdim=False, *, dtype=None):
    x = x.cast(cx.dtype)
    return x if x.ndim == 0 else x.mean(_axes(x, dim), keepdim)


@aten("amax.default", "max.default")
def amax(cx, x, dim=(), keepdim=False):
    return x if x.ndim == 0 else x.max(_axes(x, dim), keepdim)


@aten("amin.default", "min.default")
def amin(cx, x, dim=(), keepdim=False):
    return x if x.ndim == 0 else x.min(_axes(x, dim), keepdim)


@aten("max.dim")
def max_dim(cx, x, dim, keepdim=False):
    if x.ndim == 0:
        return x, cx.full((), 0, DType.I64)
    return x.max(dim, keepdim), x.argmax(dim, keepdim)


@aten("min.dim")
def min_dim(cx, x, dim, keepdim=False):
    if x.ndim == 0:
        return x, cx.full((), 0, DType.I64)
    return x.min(dim, keepdim), x.argmin(dim, keepdim)


@aten("argmax.default")
def argmax(cx, x, dim=None, keepdim=False):
    if x.ndim == 0:
        return cx.full((), 0, DType.I64)
    out = x.argmax(dim, keepdim)
    return out.reshape(cx.shape)


@aten("argmin.default")
def argmin(cx, x, dim=None, keepdim=False):
    if x.ndim == 0:
        return cx.full((), 0, DType.I64)
    return x.argmin(dim, keepdim).reshape(cx.shape)


@aten("prod.default", "prod.dim_int")
def prod(cx, x, dim=None, keepdim=False, *, dtype=None):
    x = x.cast(cx.dtype)
    return x if x.ndim == 0 else x.prod(None if dim is None else [dim], keepdim)


@aten("var.correction", "var.dim")
def var(cx, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if correction is None:
        correction = 1 if unbiased in (None, True) else 0
    return x.var(_axes(x, dim), correction, keepdim)


@aten("std.correction", "std.dim")
def std(cx, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var(cx, x, dim, unbiased, keepdim, correction=correction).sqrt()


@aten("var_mean.correction")
def var_mean(cx, x, dim=None, *, correction=None, keepdim=False):
    correction = 1 if correction is None else correction
    axes = _axes(x, dim)
    return x.var(axes, correction, keepdim), x.mean(axes, keepdim)


def _as_bool(x):
    return x if x.dtype is DType.BOOL else x.ne(0)


@aten("any.dim", "any.dims", "any.default", "_is_any_true.default")
def any_(cx, x, dim=None, keepdim=False):
    x = _as_bool(x)
    return x if x.ndim == 0 else x.max(_axes(x, dim), keepdim)


@aten("all.dim", "all.dims", "all.default", "_is_all_true.default")
def all_(cx, x, dim=None, keepdim=False):
    x = _as_bool(x)
    return x if x.ndim == 0 else x.min(_axes(x, dim), keepdim)


@aten("cumsum.default")
def cumsum(cx, x, dim, *, dtype=None):
    return x.cast(cx.dtype).cumsum(dim)


@aten("_softmax.default", "softmax.int")
def softmax(cx, x, dim, half_to_float=False):
    return x.cast(cx.dtype).softmax(dim) if x.ndim else x.mul(0).add(1).cast(cx.dtype)


@aten("_log_softmax.default", "log_softmax.int")
def log_softmax(cx, x, dim, half_to_float=False):
    return x.cast(cx.dtype).log_softmax(dim) if x.ndim else x.mul(0).cast(cx.dtype)


@aten("logsumexp.default")
def logsumexp(cx, x, dim, keepdim=False):
    return x.cast(cx.dtype).logsumexp(_axes(x, dim), keepdim)


# --- matrix products ---------------------------------------------------------------------
@aten("mm.default", "bmm.default", "matmul.default")
def mm(cx, a, b):
    return a.cast(cx.dtype).matmul(b.cast(cx.dtype))


@aten("addmm.default", "baddbmm.default")
def addmm(cx, bias, a, b, *, beta=1, alpha=1):
    prod = mm(cx, a, b)
    if alpha != 1:
        prod = prod.mul(alpha)
    if beta == 0:
        return prod
    bias = bias.cast(cx.dtype)
    return prod.add(bias if beta == 1 else bias.mul(beta))


@aten("mv.default", "dot.default")
def mv(cx, a, b):
    return a.cast(cx.dtype).matmul(b.cast(cx.dtype))


@aten("linear.default")
def linear(cx, x, weight, bias=None):
    return x.linear(weight, bias)


@aten("linalg_vector_norm.default")
def vector_norm(cx, x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002 - ATen's names
    a = x.cast(cx.dtype).abs()
    axes = _axes(a, dim)
    if ord == float("inf"):
        return a.max(axes, keepdim)
    if ord == float("-inf"):
        return a.min(axes, keepdim)
    if ord == 0:
        return a.ne(0).cast(cx.dtype).sum(axes, keepdim)
    if ord == 1:
        return a.sum(axes, keepdim)
    if ord == 2:
        return a.mul(a).sum(axes, keepdim).sqrt()
    return a.pow(ord).sum(axes, keepdim).pow(1.0 / ord)
