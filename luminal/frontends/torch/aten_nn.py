"""Normalizations, convolution and pooling.

Convolution and pooling lower through the builder (`luminal/builder/nn.py`: `conv`, `max_pool`,
`avg_pool`), which the ONNX frontend shares.
"""

from __future__ import annotations

import numpy as np

from luminal.builder import nn
from luminal.errors import UnsupportedError
from luminal.frontends.torch.aten_ops import aten
from luminal.frontends.torch.dims import shape_of
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType


def _channel(t, ndim):
    """A per-channel (C,) tensor shaped to broadcast against (N, C, *spatial)."""
    return t.reshape((t.shape[0],) + (1,) * (ndim - 2))


@aten("native_layer_norm.default")
def native_layer_norm(cx, x, normalized_shape, weight, bias, eps):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    xf = x.cast(x.dtype.accumulator)
    mean = xf.mean(axes, keepdim=True)
    centered = xf.sub(mean)
    rstd = centered.mul(centered).mean(axes, keepdim=True).add(eps).rsqrt()
    out = x.layer_norm(normalized_shape, weight, bias, eps)
    return out, mean, rstd


@aten("_native_batch_norm_legit_no_training.default")
def batch_norm_inference(cx, x, weight, bias, running_mean, running_var, momentum, eps):
    scale = _channel(running_var, x.ndim).add(eps).rsqrt()
    out = x.sub(_channel(running_mean, x.ndim)).mul(scale)
    if weight is not None:
        out = out.mul(_channel(weight, x.ndim))
    if bias is not None:
        out = out.add(_channel(bias, x.ndim))
    empty = [cx.full(shape_of(v), 0, cx.dtype) for v in cx.val[1:]]
    return (out, *empty)


@aten("_native_batch_norm_legit_functional.default")
def batch_norm_training(cx, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """Batch norm in training mode: batch statistics; the running ones come back updated
    (torch's momentum, unbiased variance) and torch.export writes them to the buffers."""
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


@aten("avg_pool2d.default", "avg_pool1d.default")
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
    flat = nn._pool_windows(x, kernel, stride, dilation, pads, float("-inf"))
    taps = sym.product(kernel)
    flat = flat.reshape(flat.shape[: flat.ndim - nsp] + (taps,))
    # (*lead, *out): the tap of each window's maximum, row-major over the kernel: the first tap
    # equal to the pooled value (or NaN, which is the max), as argmax, without computing the max again
    hit = flat.eq(values.reshape(values.shape + (1,))).logical_or(flat.isnan())
    big = cx.g.scalar(taps, DType.I64)
    best = cx.g.iota(taps, DType.I64).expand(flat.shape).where_(hit, big).min(-1)
    # its flat input position, by arithmetic on the tap and the output position (no window of
    # positions materialized): coordinate = out * stride - pad + tap * dilation along each dim,
    # clamped into the input (a window of -inf only, all padding where it starts: torch's index is
    # the first element inside the input)
    lead = x.ndim - nsp
    index = None
    tap_ids = np.arange(taps, dtype=np.int64)
    for i in range(nsp):
        # the tap's coordinate along dim i, looked up in a table of the window's taps (an integer
        # division per element would be a float64 division and two roundings in luminal's primitives)
        table = cx.g.constant(tap_ids // int(np.prod(kernel[i + 1:])) % kernel[i])
        tap = table.index_select(0, best.flatten()).reshape(best.shape)
        out = best.shape[lead + i]
        start = np.arange(int(out), dtype=np.int64) * stride[i] - pads[i][0]
        start = cx.g.constant(start.reshape((1,) * (lead + i) + (int(out),) + (1,) * (nsp - 1 - i)))
        coord = start.add(tap.mul(dilation[i])).clamp(0, int(spatial[i]) - 1)
        index = coord if index is None else index.mul(int(spatial[i])).add(coord)
    return values, index.reshape(cx.shape)
