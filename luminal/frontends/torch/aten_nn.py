"""Normalizations, convolution and pooling.

Convolution and pooling lower through the builder (`luminal/builder/nn.py`: `conv`, `max_pool`,
`avg_pool`), which the ONNX frontend shares.
"""

from __future__ import annotations

import numpy as np

from luminal.builder import functional as F
from luminal.builder import nn
from luminal.errors import UnsupportedError
from luminal.frontends.torch.aten_ops import aten
from luminal.frontends.torch.dims import shape_of
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType


def _channel(t, ndim):
    """A per-channel (C,) tensor shaped to broadcast against (N, C, *spatial)."""
    return t.reshape((t.shape[0],) + (1,) * (ndim - 2))


def _opmath(dtype: DType, *tensors) -> tuple:
    """`tensors` (None passes) in the type torch's norm kernels compute `dtype` in (its opmath:
    float for a half input); the importer rounds the op's result to its reported dtype once."""
    acc = dtype.accumulator
    return tuple(t if t is None or t.dtype is acc else t.cast(acc) for t in tensors)


@aten("native_layer_norm.default")
def native_layer_norm(cx, x, normalized_shape, weight, bias, eps):
    x, weight, bias = nn.one_dtype(x, weight, bias)
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    xf = x.cast(x.dtype.accumulator)
    mean = xf.mean(axes, keepdim=True)
    centered = xf.sub(mean)
    rstd = centered.mul(centered).mean(axes, keepdim=True).add(eps).rsqrt()
    # the weight and bias in float too (the builder's form is ONNX's, which rounds to half first)
    out = xf.layer_norm(normalized_shape, *_opmath(x.dtype, weight, bias), eps)
    return out, mean, rstd


@aten("_native_batch_norm_legit_no_training.default")
def batch_norm_inference(cx, x, weight, bias, running_mean, running_var, momentum, eps):
    # torch's CPU kernel (batch_norm_cpu_collect_linear_and_constant_terms): per channel
    # alpha = weight / sqrt(var + eps) and beta = bias - mean * alpha, then x * alpha + beta: two
    # operations an element (a convolution's epilogue), not (x - mean) * rstd * weight + bias's four
    x, weight, bias, running_mean, running_var = nn.one_dtype(x, weight, bias, running_mean, running_var)
    x, weight, bias, running_mean, running_var = _opmath(x.dtype, x, weight, bias, running_mean, running_var)
    alpha = running_var.add(eps).rsqrt()
    if weight is not None:
        alpha = alpha.mul(weight)
    # without a bias torch's is 0 - mean * alpha: +0 where the product is a zero of either sign
    beta = running_mean.mul(alpha).neg().add(0.0) if bias is None else bias.sub(running_mean.mul(alpha))
    out = x.mul(_channel(alpha, x.ndim)).add(_channel(beta, x.ndim))
    empty = [cx.full(shape_of(v), 0, cx.dtype) for v in cx.val[1:]]
    return (out, *empty)


@aten("_native_batch_norm_legit_functional.default")
def batch_norm_training(cx, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """Batch norm in training mode: batch statistics; the running ones come back updated
    (torch's momentum, unbiased variance) and torch.export writes them to the buffers."""
    x, weight, bias, running_mean, running_var = nn.one_dtype(x, weight, bias, running_mean, running_var)
    if not training:
        out = batch_norm_inference(cx, x, weight, bias, running_mean, running_var, momentum, eps)
        return (*out[:3], running_mean, running_var)
    out, mean, rstd = batch_norm_no_stats(cx, x, weight, bias, True, momentum, eps)
    axes = [0, *range(2, x.ndim)]
    new_mean = running_mean.mul(1 - momentum).add(mean.mul(momentum))
    new_var = running_var.mul(1 - momentum).add(x.var(axes, correction=1).mul(momentum))
    return out, mean, rstd, new_mean, new_var


@aten("_native_batch_norm_legit.no_stats")
def batch_norm_no_stats(cx, x, weight, bias, training, momentum, eps):
    """Batch norm on the batch's statistics, whatever `training` says (no running statistics:
    track_running_stats=False, instance norm); (out, mean, rstd) as torch saves them."""
    x, weight, bias = nn.one_dtype(x, weight, bias)
    axes = [0, *range(2, x.ndim)]
    mean, var = x.mean(axes), x.var(axes, correction=0)
    rstd = var.add(eps).rsqrt()
    out = x.sub(_channel(mean, x.ndim)).mul(_channel(rstd, x.ndim))
    if weight is not None:
        out = out.mul(_channel(weight, x.ndim))
    if bias is not None:
        out = out.add(_channel(bias, x.ndim))
    return out, mean, rstd


@aten("native_group_norm.default")
def native_group_norm(cx, x, weight, bias, n, c, hw, group, eps):
    x, weight, bias = nn.one_dtype(x, weight, bias)
    xs = x.reshape((x.shape[0], group, -1))
    mean = xs.mean(-1, keepdim=True)
    centered = xs.sub(mean)
    rstd = centered.mul(centered).mean(-1, keepdim=True).add(eps).rsqrt()
    out = centered.mul(rstd).reshape(x.shape)
    if weight is not None:
        out = out.mul(_channel(weight, x.ndim))
    if bias is not None:
        out = out.add(_channel(bias, x.ndim))
    return out, mean.reshape(mean.shape[:2]), rstd.reshape(rstd.shape[:2])


@aten("convolution.default")
def convolution(cx, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:  # its own lowering (aten_vision): a regular conv of the zero-interleaved input
        from luminal.frontends.torch.aten_vision import conv_transpose

        return conv_transpose(x, weight, bias, stride, padding, output_padding, dilation, groups)
    return nn.conv(x, weight, bias, stride, padding, dilation, groups)


@aten("avg_pool2d.default", "avg_pool1d.default", "avg_pool3d.default")
def avg_pool(cx, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    nsp = len(kernel_size)
    padding = [padding] * nsp if isinstance(padding, int) else list(padding) or [0] * nsp
    return nn.avg_pool(x, kernel_size, stride or None, padding, ceil_mode, count_include_pad, divisor_override)


@aten("max_pool2d.default", "max_pool1d.default")
def max_pool(cx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(cx, x, kernel_size, stride, padding, dilation, ceil_mode, False)


@aten("max_pool2d_with_indices.default")
def max_pool_with_indices(cx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(cx, x, kernel_size, stride, padding, dilation, ceil_mode, True)


def _max_pool(cx, x, kernel_size, stride, padding, dilation, ceil_mode, with_indices):
    nsp = len(kernel_size)
    padding = [padding] * nsp if isinstance(padding, int) else list(padding) or [0] * nsp
    dilation = [dilation] * nsp if isinstance(dilation, int) else list(dilation) or [1] * nsp
    values = nn.max_pool(x, kernel_size, stride or None, padding, dilation, ceil_mode)
    if not with_indices:
        return values
    spatial = x.shape[x.ndim - nsp :]
    if not all(sym.is_static(d) for d in spatial):
        raise UnsupportedError("max_pool indices over symbolic spatial dims")
    kernel, stride, dilation, pads, _ = nn._pool_geometry(x, kernel_size, stride or None, padding, dilation, ceil_mode)
    win = nn._pool_windows(x, kernel, stride, dilation, pads, float("-inf"))
    spatial = [int(d) for d in spatial]
    out = [int(d) for d in values.shape[x.ndim - nsp :]]
    # torch's flat index of an input position: row-major over the spatial dims
    place = [int(np.prod(spatial[i + 1 :])) for i in range(nsp)]
    starts = [np.arange(o, dtype=np.int64) * s - lo for o, s, (lo, _) in zip(out, stride, pads)]
    index = _first_max_unrolled if sym.product(kernel) <= UNROLLED_TAPS else _first_max_reduced
    return values, index(cx, win, values, kernel, dilation, spatial, place, starts).reshape(cx.shape)


# a window of at most this many taps is scanned tap by tap in two elementwise passes (each tap a
# strided view of the padded input), whose expressions grow with the taps (elementwise regions
# are bounded); a larger one reduces a materialized (window, taps) key instead
UNROLLED_TAPS = 9


def _grid(cx, parts):
    """The (*out) int64 constant sum of per-dim vectors, each along its own dim."""
    nsp = len(parts)
    total = sum(p.reshape((1,) * i + (-1,) + (1,) * (nsp - 1 - i)) for i, p in enumerate(parts))
    return cx.g.constant(np.ascontiguousarray(total, dtype=np.int64))


def _first_max_unrolled(cx, win, values, kernel, dilation, spatial, place, starts):
    """torch's index (its CPU kernel scans each window's taps inside the input in row-major
    order, taking one greater than the maximum so far or NaN, from a maximum of -inf at the
    first): the first tap equal to a finite or +inf pooled value; the last NaN where it is NaN;
    the first tap inside the input where it is -inf (with dilation, not always the clamped
    window start). Padding taps read -inf: below a finite maximum, and not NaN.

    The tap's offset from the window's start, as maxima over the taps of selects among literals
    (every tap read unconditionally, so the kernels vectorize: nested selects of the taps load
    them conditionally), the three cases added under 0/1 masks of the pooled value."""
    shape = values.shape
    offsets = [int(sum(t * d * p for t, d, p in zip(tap, dilation, place))) for tap in np.ndindex(*kernel)]
    taps = [win[(Ellipsis, *tap)] for tap in np.ndindex(*kernel)]
    m = max(offsets) + 1
    zero = cx.g.scalar(0, DType.I64).expand(shape)
    low = cx.g.scalar(-m, DType.I64).expand(shape)
    first = last_nan = None
    for v, off in zip(taps, offsets):
        hit = F.where(v.lt(values), low, -off)  # the largest: the first tap not below the maximum
        nan = F.where(v.lt(float("inf")).logical_or(v.gt(float("-inf"))), low, off)  # the last NaN
        first = hit if first is None else first.maximum(hit)
        last_nan = nan if last_nan is None else last_nan.maximum(nan)
    # where the pooled value is finite or +inf; -inf (its first tap inside the input); NaN
    finite = F.where(values.gt(float("-inf")), cx.g.scalar(-1, DType.I64).expand(shape), 0)
    neg_inf = F.where(values.gt(float("-inf")), zero, F.where(values.lt(float("inf")), cx.g.scalar(1, DType.I64).expand(shape), 0))
    firsts = [s + -(-np.maximum(-s, 0) // d) * d for s, d in zip(starts, dilation)]
    inside = _grid(cx, [(f - s) * p for f, s, p in zip(firsts, starts, place)]).expand(shape)
    base = _grid(cx, [s * p for s, p in zip(starts, place)]).expand(shape)
    # read twice, the NaN scan is a kernel of its own: with the rest, one would exceed the
    # elementwise regions' size bound and be cut at an arbitrary node
    nan_part = F.where(last_nan.lt(0), zero, last_nan)
    offset = first.mul(finite).add(nan_part).add(inside.mul(neg_inf))
    return offset.add(base)


def _first_max_reduced(cx, win, values, kernel, dilation, spatial, place, starts):
    """The same index as `_first_max_unrolled`, by a min-reduction over the kernel dims of the
    flat positions of the taps inside the input equal to the pooled value (positions grow in
    row-major tap order, so the least is the first); negated in a NaN window, where the least is
    then the last NaN."""
    nsp = len(kernel)
    inside, position = np.ones((), bool), np.zeros((), np.int64)
    for i in range(nsp):  # per (output position, tap), shaped (*out, *kernel)
        coord = starts[i][:, None] + np.arange(kernel[i], dtype=np.int64)[None, :] * dilation[i]
        shape = [1] * (2 * nsp)
        shape[i], shape[nsp + i] = coord.shape
        inside = inside & ((coord >= 0) & (coord < spatial[i])).reshape(shape)
        position = position + (coord * place[i]).reshape(shape)
    ones = (1,) * nsp
    nan_window = values.isnan()
    pooled = values.reshape(values.shape + ones)
    hit = win.eq(pooled).logical_or(win.isnan()).logical_and(cx.g.constant(inside))
    key = F.where(nan_window.reshape(nan_window.shape + ones), cx.g.constant(-position), cx.g.constant(position))
    kdims = tuple(range(win.ndim - nsp, win.ndim))
    best = F.where(hit, key, cx.g.scalar(int(np.prod(spatial)), DType.I64)).min(kdims)
    return F.where(nan_window, best.neg(), best)
