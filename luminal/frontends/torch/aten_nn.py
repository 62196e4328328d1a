"""Normalizations, convolution and pooling.

Convolution is im2col on a *free* view: the sliding windows of an (unmasked) strided input are
themselves a strided view with shape (N, G, C/G, *out, *kernel) — window strides are the input
strides times the conv stride, kernel strides the input strides times the dilation — so the
only copy is the one materialization a matmul needs, then one matmul per group.
"""

from __future__ import annotations

import numpy as np

from luminal.builder import Tensor
from luminal.errors import UnsupportedError
from luminal.frontends.torch.aten_ops import aten
from luminal.frontends.torch.dims import shape_of
from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Node, Op
from luminal.hlir.shape import ShapeTracker


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
    axes = [0, *range(2, x.ndim)]
    mean, var = x.mean(axes), x.var(axes, correction=0)
    rstd = var.add(eps).rsqrt()
    out = x.sub(_channel(mean, x.ndim)).mul(_channel(rstd, x.ndim))
    if weight is not None:
        out = out.mul(_channel(weight, x.ndim))
    if bias is not None:
        out = out.add(_channel(bias, x.ndim))
    new_mean = running_mean.mul(1 - momentum).add(mean.mul(momentum))
    new_var = running_var.mul(1 - momentum).add(x.var(axes, correction=1).mul(momentum))
    return out, mean, rstd, new_mean, new_var


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


def windows(x: Tensor, kernel, stride, dilation, out_sizes, groups: int = 1) -> Tensor:
    """The view (N, G, C/G, *out, *kernel) of x (N, C, *spatial): no copy unless x is padded."""
    base, st = x._tracker()
    if st.mask is not None:
        x = x.contiguous()
        base, st = x._tracker()
    nsp = x.ndim - 2
    c = x.shape[1]
    cg = sym.exact_div(c, groups)
    sp = st.strides[2:]
    shape = (x.shape[0], groups, cg, *out_sizes, *kernel)
    strides = (st.strides[0], sym.norm(st.strides[1] * cg), st.strides[1],
               *(sym.norm(s * k) for s, k in zip(sp, stride)), *(sym.norm(s * d) for s, d in zip(sp, dilation)))
    assert len(shape) == len(strides) == 3 + 2 * nsp
    tracker = ShapeTracker(tuple(shape), tuple(strides), st.offset)
    return Tensor(x.graph, Node(Op.VIEW, x.dtype, tracker.shape, (base,), tracker))


@aten("convolution.default")
def convolution(cx, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise UnsupportedError("transposed convolution")
    nsp = x.ndim - 2
    if isinstance(padding, str):
        raise UnsupportedError(f"convolution padding={padding!r}")
    if any(p for p in padding):
        x = x.pad([(0, 0), (0, 0)] + [(p, p) for p in padding])
    kernel = weight.shape[2:]
    out_sizes = cx.shape[2:]
    win = windows(x, kernel, stride, dilation, out_sizes, groups)  # (N, G, Cg, *O, *K)
    order = (0, 1, *range(3, 3 + nsp), 2, *range(3 + nsp, 3 + 2 * nsp))
    n = x.shape[0]
    p = sym.product(out_sizes)
    ck = sym.product(win.shape[2:3] + tuple(kernel))
    cols = win.permute(order).reshape((n, groups, p, ck))  # im2col: the one copy
    cout = weight.shape[0]
    w = weight.reshape((groups, sym.exact_div(cout, groups), ck)).transpose(-1, -2)  # (G, CK, Cout/G)
    out = cols.matmul(w)  # (N, G, P, Cout/G)
    out = out.permute(0, 1, 3, 2).reshape((n, cout, *out_sizes))
    return out if bias is None else out.add(_channel(bias, out.ndim))


def _pool_windows(x, kernel, stride, padding, dilation, out_sizes, pad_value):
    nsp = len(kernel)
    lead = x.shape[: x.ndim - nsp]
    x4 = x.reshape((sym.product(lead) if lead else 1, 1) + x.shape[x.ndim - nsp :])
    if any(padding):
        x4 = x4.pad([(0, 0), (0, 0)] + [(p, p) for p in padding], pad_value)
    win = windows(x4, kernel, stride or kernel, dilation, out_sizes)  # (M, 1, 1, *O, *K)
    flat = win.reshape(win.shape[: 3 + nsp] + (sym.product(kernel),))
    return flat, lead


@aten("avg_pool2d.default", "avg_pool1d.default")
def avg_pool(cx, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    nsp = len(kernel_size)
    padding = [padding] * nsp if isinstance(padding, int) else list(padding) or [0] * nsp
    if ceil_mode or (any(padding) and not count_include_pad):
        raise UnsupportedError("avg_pool with ceil_mode or count_include_pad=False")
    out_sizes = cx.shape[x.ndim - nsp :]
    flat, lead = _pool_windows(x, kernel_size, stride, padding, (1,) * nsp, out_sizes, 0)
    div = divisor_override or sym.product(kernel_size)
    return flat.sum(-1).mul(1.0 / div).reshape(cx.shape)


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
    if ceil_mode:
        raise UnsupportedError("max_pool with ceil_mode")
    out_sizes = cx.shape[x.ndim - nsp :]
    flat, lead = _pool_windows(x, kernel_size, stride, padding, dilation, out_sizes, float("-inf"))
    values = flat.max(-1).reshape(cx.shape)
    if not with_indices:
        return values
    spatial = x.shape[x.ndim - nsp :]
    if not all(sym.is_static(d) for d in spatial):
        raise UnsupportedError("max_pool indices over symbolic spatial dims")
    pos = np.arange(int(np.prod(spatial)), dtype=np.int64).reshape((1, 1, *spatial))
    pos = np.pad(pos, [(0, 0), (0, 0)] + [(p, p) for p in padding], constant_values=-1)
    pos_win, _ = _pool_windows(cx.g.constant(pos), kernel_size, stride, [0] * nsp, dilation, out_sizes, 0)
    best = flat.argmax(-1, keepdim=True)
    index = pos_win.expand(flat.shape).gather(-1, best)
    return values, index.reshape(cx.shape)
