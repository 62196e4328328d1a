"""Convolution, pooling and normalization ops (Resize lives in ops_resize)."""

from __future__ import annotations

import numpy as np

from luminal.builder.nn import conv as nn_conv
from luminal.builder.nn import one_dtype, windows
from luminal.frontends.onnx.errors import NeedsShape
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType


def _same_pair(c, n, k, s, d, upper: bool):
    """auto_pad SAME's (begin, end) padding of an axis of size n: total max((ceil(n/s)-1)*s + d*(k-1)
    + 1 - n, 0), its odd element at the end (SAME_UPPER) or the beginning (SAME_LOWER).

    Static for stride 1 (d*(k-1)) and for a 1-wide kernel (0). Otherwise, on a symbolic n, the total
    is d*(k-1) + 1 - s + (-n mod s), an expression of n the kernels evaluate per call: (-n mod s) is
    written ((s-1)*n mod s), so the C it renders to has no negative operand of % or / (which C
    rounds toward zero), and the end pad is the padded length floor((n-1)/s)*s + d*(k-1) + 1 less
    n and the begin pad, so that the output size comes out as floor((n-1)/s) + 1 (= ceil(n/s)):
    the expression a 1-wide or a pads-1 3-wide strided window gives it, so branches meeting at an
    Add agree, and one that evaluates exactly (no float sum of fractions under a floor)."""
    span = d * (k - 1)
    if sym.is_static(n) or s == 1 or span == 0:
        total = max((-(-n // s) - 1) * s + span + 1 - n, 0) if sym.is_static(n) else span
        small = total // 2
        return (small, total - small) if upper else (total - small, small)
    if span + 1 < s:  # the total clips at 0 for some n (a crop of the end otherwise): compile per size
        raise NeedsShape(f"{c.node.op_type} node {c.name!r}: auto_pad SAME with stride {s} wider than its "
                         f"window {span + 1} on the symbolic axis {n}; compiled per input shape", c.node.input[0])
    total = sym.norm(span + 1 - s + sym.mod(sym.norm((s - 1) * n), s))
    small = sym.floordiv(total, 2)
    begin = small if upper else sym.norm(total - small)
    padded = sym.norm(sym.floordiv(sym.norm(n - 1), s) * s + span + 1)
    return begin, sym.norm(padded - n - begin)


def _pads(c, x, kernel, strides, dilations, pads, auto_pad, ceil_mode=0):
    """(begin, end) padding per spatial axis, extra end padding for ceil_mode, out sizes."""
    nsp = len(kernel)
    spatial = x.shape[2:]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pairs = [_same_pair(c, n, k, s, d, auto_pad == "SAME_UPPER") for n, k, s, d in zip(spatial, kernel, strides, dilations)]
    elif auto_pad == "VALID" or pads is None:
        pairs = [(0, 0)] * nsp
    else:
        pairs = list(zip(pads[:nsp], pads[nsp:]))
    extra = [0] * nsp
    if ceil_mode and auto_pad not in ("SAME_UPPER", "SAME_LOWER"):  # SAME's output size is ceil(n/s) either way
        for i, (n, k, s, d) in enumerate(zip(spatial, kernel, strides, dilations)):
            b, e = pairs[i]
            span = n + b + e - d * (k - 1) - 1
            out = -(-span // s) + 1
            if (out - 1) * s >= n + b:
                out -= 1
            extra[i] = max((out - 1) * s + d * (k - 1) + 1 - (n + b + e), 0)
    return pairs, extra


def _pad_spatial(x, pairs, value=0):
    full = [(0, 0)] * (x.ndim - len(pairs)) + [tuple(p) for p in pairs]
    if all(b == 0 and e == 0 for b, e in full):
        return x
    return x.pad(full, value)


def _attrs(x, kernel_shape, strides, dilations):
    nsp = x.ndim - 2
    strides = list(strides or [1] * nsp)
    dilations = list(dilations or [1] * nsp)
    return list(kernel_shape), strides, dilations


@onnx_op("Conv")
def conv(c, x, w, b=None, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    """The builder's conv (the form the torch frontend reaches too): GEMM over an im2col view,
    depthwise / narrow groups as a direct window reduction."""
    w = c.dense(1, w)
    kernel = list(kernel_shape or w.shape[2:])
    kernel, strides, dilations = _attrs(x, kernel, strides, dilations)
    pairs, _ = _pads(c, x, kernel, strides, dilations, pads, auto_pad)
    if any(sym.is_static(p) and p < 0 for pair in pairs for p in pair):  # negative pads crop
        x, pairs = _pad_spatial(x, pairs), [(0, 0)] * len(pairs)
    return nn_conv(x, w, b, stride=strides, padding=[tuple(p) for p in pairs], dilation=dilations, groups=group)


@onnx_op("ConvTranspose")
def conv_transpose(c, x, w, b=None, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    w = c.dense(1, w)
    nsp = x.ndim - 2
    kernel = list(kernel_shape or w.shape[2:])
    strides = list(strides or [1] * nsp)
    dilations = list(dilations or [1] * nsp)
    out_pad = list(output_padding or [0] * nsp)
    spatial = x.shape[2:]
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        targets = list(output_shape)[-nsp:] if output_shape is not None else [n * s for n, s in zip(spatial, strides)]
        pairs = []
        for i in range(nsp):
            total = strides[i] * (spatial[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1 - targets[i]
            total = max(total, 0) if output_shape is None else total
            if auto_pad == "SAME_UPPER":
                pairs.append((total // 2, total - total // 2))
            else:
                pairs.append((total - total // 2, total // 2))
    elif pads is not None:
        pairs = list(zip(pads[:nsp], pads[nsp:]))
    else:
        pairs = [(0, 0)] * nsp
    # zero-insertion: x (N, C, *S) -> (N, C, *((S-1)*s + 1))
    y = x
    for i in range(nsp):
        s = strides[i]
        if s == 1:
            continue
        a = 2 + i
        y = y.unsqueeze(a + 1)
        padspec = [(0, 0)] * y.ndim
        padspec[a + 1] = (0, s - 1)
        y = y.pad(padspec)
        shp = list(y.shape)
        y = y.reshape(tuple(shp[:a]) + (sym.norm(shp[a] * s),) + tuple(shp[a + 2:]))
        y = y.slice(a, 0, sym.norm((spatial[i] - 1) * s + 1))
    full_pads = []
    for i in range(nsp):
        span = dilations[i] * (kernel[i] - 1)
        full_pads.append((span - pairs[i][0], span - pairs[i][1] + out_pad[i]))
    y = _pad_spatial(y, full_pads)
    ch = w.shape[0]
    mg = w.shape[1]
    cg = sym.floordiv(ch, group)
    wf = w.reshape((group, cg, mg) + tuple(kernel)).transpose(1, 2).reshape((sym.norm(group * mg), cg) + tuple(kernel))
    for i in range(nsp):
        wf = wf.slice(2 + i, None, None, -1)
    return nn_conv(y, wf, b, stride=1, padding=0, dilation=dilations, groups=group)


def _pool(c, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, kind, count_include_pad=0):
    kernel, strides, dilations = _attrs(x, kernel_shape, strides, dilations)
    nsp = len(kernel)
    pairs, extra = _pads(c, x, kernel, strides, dilations, pads, auto_pad, ceil_mode)
    axes = list(range(x.ndim, x.ndim + nsp))
    if kind == "max":
        low = float("-inf") if x.dtype.is_float else int(-(2**31))
        xp = _pad_spatial(_pad_spatial(x, pairs, low), [(0, e) for e in extra], low)
        return windows(xp, kernel, strides, dilations).max(axes), xp
    xp = _pad_spatial(_pad_spatial(x, pairs), [(0, e) for e in extra])
    total = windows(xp, kernel, strides, dilations).sum(axes)
    ones = c.g.scalar(1.0, x.dtype).expand(x.shape[2:])
    ones = _pad_spatial(ones, pairs, 1.0 if count_include_pad else 0.0)
    ones = _pad_spatial(ones, [(0, e) for e in extra])
    count = windows(ones.contiguous(), kernel, strides, dilations).sum(list(range(nsp, 2 * nsp)))
    return total.div(count), None


@onnx_op("MaxPool")
def max_pool(c, x, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None, storage_order=0, strides=None):
    y, xp = _pool(c, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, "max")
    if c.n_outputs < 2 or not c.outputs_wanted[1]:
        return y
    kernel, st, dil = _attrs(x, kernel_shape, strides, dilations)
    pairs, extra = _pads(c, x, kernel, st, dil, pads, auto_pad, ceil_mode)
    if storage_order:  # column-major spatial dims: the last one varies slowest
        rev = tuple(x.shape[:2]) + tuple(reversed(x.shape[2:]))
        lin = c.g.iota(sym.product(x.shape), DType.I64).reshape(rev)
        lin = lin.permute([0, 1] + list(range(x.ndim - 1, 1, -1)))
    else:
        lin = c.g.iota(sym.product(x.shape), DType.I64).reshape(x.shape)
    lin = _pad_spatial(_pad_spatial(lin, pairs, -1), [(0, e) for e in extra], -1).contiguous()
    vals = windows(xp, kernel, st, dil)
    idxs = windows(lin, kernel, st, dil)
    flat_shape = tuple(vals.shape[: x.ndim]) + (sym.product(kernel),)
    vals, idxs = vals.reshape(flat_shape), idxs.reshape(flat_shape)
    am = vals.argmax(-1, keepdim=True)
    return y, idxs.gather(-1, am).squeeze(-1)


@onnx_op("AveragePool")
def average_pool(c, x, kernel_shape, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None, pads=None, strides=None):
    return _pool(c, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, "avg", count_include_pad)[0]


@onnx_op("LpPool")
def lp_pool(c, x, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, p=2, pads=None, strides=None):
    kernel, st, dil = _attrs(x, kernel_shape, strides, dilations)
    pairs, extra = _pads(c, x, kernel, st, dil, pads, auto_pad, ceil_mode)
    xp = _pad_spatial(_pad_spatial(x.abs().pow(p), pairs), [(0, e) for e in extra])
    return windows(xp, kernel, st, dil).sum(list(range(x.ndim, x.ndim + len(kernel)))).pow(1.0 / p)


@onnx_op("GlobalLpPool")
def global_lp_pool(c, x, p=2):
    return x.abs().pow(p).sum(list(range(2, x.ndim)), keepdim=True).pow(1.0 / p)  # as LpPool's one window


@onnx_op("GlobalAveragePool")
def global_average_pool(c, x):
    return x.mean(list(range(2, x.ndim)), keepdim=True)


@onnx_op("GlobalMaxPool")
def global_max_pool(c, x):
    return x.max(list(range(2, x.ndim)), keepdim=True)


# --- normalization -----------------------------------------------------------------------
def _per_channel(t, x):
    return t.reshape((t.shape[0],) + (1,) * (x.ndim - 2))


@onnx_op("BatchNormalization")
def batch_norm(c, x, scale, bias, mean, var, epsilon=1e-5, momentum=0.9, training_mode=0, spatial=1, is_test=0):
    # X, scale/B and the statistics have types of their own (T, T1, T2): computed in the widest,
    # Y in X's type and the running statistics in theirs
    y_type, stat_type = x.dtype, mean.dtype
    x, scale, bias, mean, var = one_dtype(x, scale, bias, mean, var)
    if training_mode:
        axes = [0] + list(range(2, x.ndim))
        bm = x.mean(axes)
        bv = x.sub(_per_channel(bm, x)).square().mean(axes)
        y = x.sub(_per_channel(bm, x)).mul(_per_channel(bv.add(epsilon).rsqrt(), x))
        y = y.mul(_per_channel(scale, x)).add(_per_channel(bias, x))
        run_mean = mean.mul(momentum).add(bm.mul(1 - momentum))
        run_var = var.mul(momentum).add(bv.mul(1 - momentum))
        return y.cast(y_type), run_mean.cast(stat_type), run_var.cast(stat_type)
    known = [c.known(i) for i in range(1, 5)]
    if all(k is not None for k in known):
        # constant statistics (inference): x * s + t, s and t computed here in float64 and rounded
        # once, as onnxruntime folds them; not four small kernels per call recomputing them
        sc, bi, mu, va = (np.asarray(k, np.float64) for k in known)
        with np.errstate(invalid="ignore", divide="ignore"):  # a negative or zero variance: NaN or inf, as computed
            s = sc / np.sqrt(va + epsilon)
            t = bi - mu * s
        y = x.mul(_per_channel(c.g.constant(s.astype(x.dtype.numpy)), x)).add(
            _per_channel(c.g.constant(t.astype(x.dtype.numpy)), x))
        return y.cast(y_type)
    inv = var.add(epsilon).rsqrt()
    y = x.sub(_per_channel(mean, x)).mul(_per_channel(inv.mul(scale), x)).add(_per_channel(bias, x))
    return y.cast(y_type)


@onnx_op("InstanceNormalization")
def instance_norm(c, x, scale, bias, epsilon=1e-5):
    axes = list(range(2, x.ndim))
    m = x.mean(axes, keepdim=True)
    centered = x.sub(m)
    v = centered.square().mean(axes, keepdim=True)
    return centered.mul(v.add(epsilon).rsqrt()).mul(_per_channel(scale, x)).add(_per_channel(bias, x))


def _stash(x, stash_type):
    return x.cast(DType.F32) if stash_type == 1 and x.dtype is not DType.F64 else x


@onnx_op("LayerNormalization")
def layer_norm(c, x, scale, bias=None, axis=-1, epsilon=1e-5, stash_type=1):
    a = axis % x.ndim
    axes = list(range(a, x.ndim))
    xs = _stash(x, stash_type)
    m = xs.mean(axes, keepdim=True)
    centered = xs.sub(m)
    inv = centered.square().mean(axes, keepdim=True).add(epsilon).rsqrt()
    y = centered.mul(inv).cast(x.dtype).mul(scale)
    if bias is not None:
        y = y.add(bias)
    return y, m, inv


@onnx_op("RMSNormalization")
def rms_norm(c, x, scale, axis=-1, epsilon=1e-5, stash_type=1):
    a = axis % x.ndim
    axes = list(range(a, x.ndim))
    xs = _stash(x, stash_type)
    inv = xs.square().mean(axes, keepdim=True).add(epsilon).rsqrt()
    return xs.mul(inv).cast(x.dtype).mul(scale)


@onnx_op("GroupNormalization", since=18)
def group_norm(c, x, scale, bias, epsilon=1e-5, num_groups=1, stash_type=1):
    n, ch = x.shape[0], x.shape[1]
    xs = _stash(x, stash_type)
    g = xs.reshape((n, num_groups, -1))
    m = g.mean(-1, keepdim=True)
    centered = g.sub(m)
    y = centered.mul(centered.square().mean(-1, keepdim=True).add(epsilon).rsqrt()).reshape(x.shape).cast(x.dtype)
    if c.opset >= 21:
        return y.mul(_per_channel(scale, x)).add(_per_channel(bias, x))
    per = sym.floordiv(ch, num_groups)
    sc = scale.reshape(num_groups, 1).expand(num_groups, per).reshape(ch)
    bi = bias.reshape(num_groups, 1).expand(num_groups, per).reshape(ch)
    return y.mul(_per_channel(sc, x)).add(_per_channel(bi, x))


@onnx_op("LpNormalization")
def lp_normalization(c, x, axis=-1, p=2):
    norm = x.abs().sum(axis, keepdim=True) if p == 1 else x.square().sum(axis, keepdim=True).sqrt()
    return x.div(norm).where_(norm.ne(0.0), 0.0)  # a zero norm gives 0, as the reference


@onnx_op("MeanVarianceNormalization")
def mvn(c, x, axes=(0, 2, 3)):
    m = x.mean(list(axes), keepdim=True)
    centered = x.sub(m)
    return centered.div(centered.square().mean(list(axes), keepdim=True).sqrt().add(1e-9))

