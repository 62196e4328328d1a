"""Vision ATen ops: interpolation (upsample_* in every mode), adaptive pooling, transposed
convolution.

Interpolation and adaptive pooling are separable gathers: along each resized dim, output
position o reads the input at a few taps idx[o, t] with weights w[o, t]. The tap tables are
computed here with NumPy in the dtype torch computes them in (float32 for float32 inputs), with
torch's formulas (aten/src/ATen/native/UpSample.h), so the chosen source indices are torch's
bit for bit; the graph is `index_select` per tap, times its weight, summed. Shapes must be
static (the tables are constants): a symbolic spatial dim raises UnsupportedError.

Transposed convolution is the regular one on a zero-interleaved, re-padded input with the
kernel flipped and its channel axes swapped per group (the gradient-of-conv identity).
"""

from __future__ import annotations

import math

import numpy as np

from luminal.builder import nn
from luminal.errors import UnsupportedError
from luminal.frontends.torch.aten_movement import _spread
from luminal.frontends.torch.aten_ops import aten
from luminal.frontends.torch.dims import shape_of
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType


def _static(dims, what):
    if not all(sym.is_static(d) for d in dims):
        raise UnsupportedError(f"{what} over symbolic spatial dims {tuple(dims)}")
    return [int(d) for d in dims]


def _opmath(x) -> type:
    return np.float64 if x.dtype is DType.F64 else np.float32


def _scale(ft, n_in, n_out, align_corners, scale):
    """area_pixel_compute_scale: the step in input units per output position."""
    if align_corners:
        return ft((n_in - 1) / (n_out - 1)) if n_out > 1 else ft(0)
    return ft(1.0 / scale) if scale is not None and scale > 0 else ft(n_in) / ft(n_out)


def _taps_apply(x, dim, idx, wts=None, valid=None):
    """sum_t w[:, t] * x.index_select(dim, idx[:, t]) (masked where `valid` is False)."""
    g = x.graph
    out = None
    for t in range(idx.shape[1]):
        picked = x.index_select(dim, g.constant(idx[:, t].astype(np.int64)))
        if wts is not None:
            w = g.constant(wts[:, t].astype(x.dtype.numpy)).reshape((-1,) + (1,) * (x.ndim - 1 - dim))
            picked = picked.mul(w)
            if valid is not None:
                picked = picked.where_(g.constant(valid[:, t]).reshape((-1,) + (1,) * (x.ndim - 1 - dim)), 0.0)
        out = picked if out is None else out.add(picked)
    return out


def _nearest_taps(ft, n_in, n_out, scale, exact):
    o = np.arange(n_out)
    if n_out == n_in:
        return o[:, None]
    if n_out == 2 * n_in and not exact:
        return (o >> 1)[:, None]
    s = _scale(ft, n_in, n_out, False, scale)
    pos = (o.astype(ft) + ft(0.5)) * s if exact else o.astype(ft) * s
    return np.minimum(np.floor(pos).astype(np.int64), n_in - 1)[:, None]


def _linear_taps(ft, n_in, n_out, align_corners, scale):
    s = _scale(ft, n_in, n_out, align_corners, scale)
    o = np.arange(n_out).astype(ft)
    src = o * s if align_corners else np.maximum(s * (o + ft(0.5)) - ft(0.5), ft(0))
    i0 = np.minimum(src.astype(np.int64), n_in - 1)
    i1 = i0 + (i0 < n_in - 1)
    l1 = (src - i0.astype(ft)).astype(ft)
    return np.stack([i0, i1], 1), np.stack([ft(1) - l1, l1], 1)


def _cubic_taps(ft, n_in, n_out, align_corners, scale):
    s = _scale(ft, n_in, n_out, align_corners, scale)
    o = np.arange(n_out).astype(ft)
    src = o * s if align_corners else s * (o + ft(0.5)) - ft(0.5)
    i = np.floor(src).astype(np.int64)
    t = (src - np.floor(src)).astype(ft)
    a = ft(-0.75)

    def near(v):  # |v| <= 1
        return ((a + 2) * v - (a + 3)) * v * v + 1

    def far(v):  # 1 < |v| < 2
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    w = np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], 1).astype(ft)
    idx = np.clip(np.stack([i - 1, i, i + 1, i + 2], 1), 0, n_in - 1)
    return idx, w


def _aa_taps(ft, n_in, n_out, align_corners, scale, cubic):
    """Antialiased (PIL-style) taps: a triangle (bilinear) or a=-0.5 cubic filter stretched by
    the downscale factor, normalized per output position: torch's `_compute_weights_aa`
    operation for operation, in its types (`ft` values, double where C++ promotes to double),
    so the taps are torch's own (a float64 center dropped a tap at 7 -> 3, and +-inf inputs
    then gave a finite value where torch has inf). Known gap: at a cubic filter's zero crossing
    torch's weight can be a rounding residue (6.5e-15 at 7 -> 3) where this one is exactly 0,
    so an inf input there gives NaN here and inf in torch; finite inputs agree."""
    s = _scale(ft, n_in, n_out, align_corners, scale)
    interp = 4 if cubic else 2
    support = ft(interp * 0.5 * float(s)) if s >= 1.0 else ft(interp * 0.5)
    invscale = ft(1.0 / float(s)) if s >= 1.0 else ft(1.0)
    a = ft(-0.5)

    def filt(x):  # scalar_t arithmetic (HelperInterpLinear / HelperInterpCubic ::aa_filter)
        x = ft(abs(x))
        if not cubic:
            return ft(1.0) - x if x < 1.0 else ft(0.0)
        if x < 1.0:
            return ((a + ft(2)) * x - (a + ft(3))) * x * x + ft(1)
        if x < 2.0:
            return ((a * x - ft(5) * a) * x + ft(8) * a) * x - ft(4) * a
        return ft(0.0)

    width = int(math.ceil(support)) * 2 + 1
    idx = np.zeros((n_out, width), np.int64)
    w = np.zeros((n_out, width), ft)
    valid = np.zeros((n_out, width), bool)
    for o in range(n_out):
        center = ft(float(s) * (o + 0.5))
        xmin = max(int(float(center - support) + 0.5), 0)
        xsize = min(int(float(center + support) + 0.5), n_in) - xmin
        ws = [filt(ft((float(ft(j + xmin) - center) + 0.5) * float(invscale))) for j in range(xsize)]
        total = ft(0.0)
        for v in ws:
            total = ft(total + v)
        for j in range(xsize):
            idx[o, j], w[o, j], valid[o, j] = xmin + j, (ws[j] / total if total != 0 else ft(0.0)), True
    return idx, w, valid


def _resize(cx, x, output_size, scale_factors, mode, align_corners=None, aa=False):
    nsp = len(output_size) if output_size is not None else len(scale_factors)
    spatial = _static(x.shape[x.ndim - nsp :], f"upsample ({mode})")
    out_sizes = _static(cx.shape[x.ndim - nsp :], f"upsample ({mode})")
    scales = list(scale_factors) if scale_factors is not None else [None] * nsp
    if mode != "nearest" and not x.dtype.is_float:
        raise UnsupportedError(f"upsample ({mode}) of a {x.dtype} tensor")
    ft = _opmath(x)
    # the last dim first, as torch's separable kernels do
    for i in reversed(range(nsp)):
        d = x.ndim - nsp + i
        n_in, n_out, sc = spatial[i], out_sizes[i], scales[i]
        if mode in ("nearest", "nearest-exact"):
            x = _taps_apply(x, d, _nearest_taps(ft, n_in, n_out, sc, mode == "nearest-exact"))
        elif aa:
            x = _taps_apply(x, d, *_aa_taps(ft, n_in, n_out, align_corners, sc, mode == "bicubic"))
        elif mode == "linear":
            x = _taps_apply(x, d, *_linear_taps(ft, n_in, n_out, align_corners, sc))
        else:
            x = _taps_apply(x, d, *_cubic_taps(ft, n_in, n_out, align_corners, sc))
    return x


def _scales_of(args, output_size):
    """The trailing scales_h / scales_w / ... of an upsample `.default` overload, when there is
    one per output dim (else None: the scales come from the sizes)."""
    vals = [a for a in args if a is not None]
    return vals if vals and len(vals) == len(output_size) else None


# --- nearest --------------------------------------------------------------------------------
@aten("upsample_nearest1d.vec", "upsample_nearest2d.vec", "upsample_nearest3d.vec")
def upsample_nearest_vec(cx, x, output_size, scale_factors):
    return _resize(cx, x, output_size or cx.shape[2:], scale_factors, "nearest")


@aten("upsample_nearest1d.default", "upsample_nearest2d.default", "upsample_nearest3d.default")
def upsample_nearest(cx, x, output_size, *scales):
    return _resize(cx, x, output_size, _scales_of(scales, output_size), "nearest")


@aten("_upsample_nearest_exact1d.vec", "_upsample_nearest_exact2d.vec", "_upsample_nearest_exact3d.vec")
def upsample_nearest_exact_vec(cx, x, output_size, scale_factors):
    return _resize(cx, x, output_size or cx.shape[2:], scale_factors, "nearest-exact")


@aten("_upsample_nearest_exact1d.default", "_upsample_nearest_exact2d.default", "_upsample_nearest_exact3d.default")
def upsample_nearest_exact(cx, x, output_size, *scales):
    return _resize(cx, x, output_size, _scales_of(scales, output_size), "nearest-exact")


# --- linear, cubic, antialiased ---------------------------------------------------------------
@aten("upsample_linear1d.vec", "upsample_bilinear2d.vec", "upsample_trilinear3d.vec")
def upsample_linear_vec(cx, x, output_size, align_corners, scale_factors):
    return _resize(cx, x, output_size or cx.shape[2:], scale_factors, "linear", align_corners)


@aten("upsample_linear1d.default", "upsample_bilinear2d.default", "upsample_trilinear3d.default")
def upsample_linear(cx, x, output_size, align_corners, *scales):
    return _resize(cx, x, output_size, _scales_of(scales, output_size), "linear", align_corners)


@aten("upsample_bicubic2d.vec")
def upsample_bicubic_vec(cx, x, output_size, align_corners, scale_factors):
    return _resize(cx, x, output_size or cx.shape[2:], scale_factors, "bicubic", align_corners)


@aten("upsample_bicubic2d.default")
def upsample_bicubic(cx, x, output_size, align_corners, *scales):
    return _resize(cx, x, output_size, _scales_of(scales, output_size), "bicubic", align_corners)


@aten("_upsample_bilinear2d_aa.vec")
def upsample_bilinear_aa_vec(cx, x, output_size, align_corners, scale_factors):
    return _resize(cx, x, output_size or cx.shape[2:], scale_factors, "linear", align_corners, aa=True)


@aten("_upsample_bilinear2d_aa.default")
def upsample_bilinear_aa(cx, x, output_size, align_corners, *scales):
    return _resize(cx, x, output_size, _scales_of(scales, output_size), "linear", align_corners,
                   aa=True)


@aten("_upsample_bicubic2d_aa.vec")
def upsample_bicubic_aa_vec(cx, x, output_size, align_corners, scale_factors):
    return _resize(cx, x, output_size or cx.shape[2:], scale_factors, "bicubic", align_corners, aa=True)


@aten("_upsample_bicubic2d_aa.default")
def upsample_bicubic_aa(cx, x, output_size, align_corners, *scales):
    return _resize(cx, x, output_size, _scales_of(scales, output_size), "bicubic", align_corners,
                   aa=True)


# --- adaptive pooling ---------------------------------------------------------------------
def _adaptive_windows(x, out_sizes, what):
    """(values (lead, P, K), valid (P, K)): each output's window, flattened and padded to the
    largest window by repeating its last element; windows [floor(o*n/O), ceil((o+1)*n/O))."""
    nsp = len(out_sizes)
    spatial = _static(x.shape[x.ndim - nsp :], what)
    out_sizes = [int(o) for o in out_sizes]
    per_dim = []
    for n, o in zip(spatial, out_sizes):
        starts = [(i * n) // o for i in range(o)]
        ends = [-((-(i + 1) * n) // o) for i in range(o)]
        k = max((e - s for s, e in zip(starts, ends)), default=1)
        idx = np.array([[min(s + j, e - 1) for j in range(k)] for s, e in zip(starts, ends)], np.int64).reshape(o, k)
        ok = np.array([[s + j < e for j in range(k)] for s, e in zip(starts, ends)], bool).reshape(o, k)
        per_dim.append((idx, ok))
    # the product over dims: flat index sum_d idx_d * stride_d, shape (*out, *k)
    strides = np.cumprod([1] + spatial[::-1])[::-1][1:]
    flat = np.zeros([1] * (2 * nsp), np.int64)
    valid = np.ones([1] * (2 * nsp), bool)
    for d, ((idx, ok), st) in enumerate(zip(per_dim, strides)):
        shape = [1] * (2 * nsp)
        shape[d], shape[nsp + d] = idx.shape
        flat = flat + idx.reshape(shape) * int(st)
        valid = valid & ok.reshape(shape)
    p, k = int(np.prod(out_sizes)), int(np.prod(flat.shape[nsp:]))
    flat, valid = np.broadcast_to(flat, flat.shape if flat.size else (0,)).reshape(p, k), valid.reshape(p, k)
    lead = x.shape[: x.ndim - nsp]
    xs = x.reshape(lead + (int(np.prod(spatial)),))
    vals = xs.index_select(x.ndim - nsp, x.graph.constant(flat.reshape(-1))).reshape(lead + (p, k))
    return vals, valid, flat, lead


@aten("_adaptive_avg_pool2d.default", "_adaptive_avg_pool3d.default", "adaptive_avg_pool1d.default",
      "adaptive_avg_pool2d.default", "adaptive_avg_pool3d.default")
def adaptive_avg_pool(cx, x, output_size):
    nsp = len(output_size)
    if not x.dtype.is_float:
        raise UnsupportedError(f"adaptive average pooling of a {x.dtype} tensor")
    vals, valid, _, lead = _adaptive_windows(x, cx.shape[x.ndim - nsp :], "adaptive_avg_pool")
    ok = x.graph.constant(valid)
    total = vals.where_(ok, 0.0).sum(-1)
    count = valid.sum(-1).astype(x.dtype.numpy)
    return total.div(x.graph.constant(count)).reshape(cx.shape)


@aten("adaptive_max_pool1d.default", "adaptive_max_pool2d.default", "adaptive_max_pool3d.default")
def adaptive_max_pool(cx, x, output_size):
    """(values, int64 flat spatial indices); the first maximum wins, NaN counts as the largest."""
    nsp = len(output_size)
    out_shape = shape_of(cx.val[0])
    vals, _, flat, lead = _adaptive_windows(x, out_shape[x.ndim - nsp :], "adaptive_max_pool")
    best = vals.argmax(-1, keepdim=True)
    values = vals.gather(-1, best).reshape(out_shape)
    pos = x.graph.constant(flat).reshape((1,) * len(lead) + flat.shape).expand(vals.shape)
    return values, pos.gather(-1, best).reshape(out_shape)


# --- transposed convolution ---------------------------------------------------------------
def conv_transpose(x, weight, bias, stride, padding, output_padding, dilation, groups):
    """x (N, Cin, *sp), weight (Cin, Cout/G, *k): the adjoint of the strided conv."""
    nsp = x.ndim - 2
    per = lambda v: [int(v)] * nsp if isinstance(v, int) else [int(a) for a in v] * (nsp if len(v) == 1 else 1)  # noqa: E731
    stride, padding, output_padding, dilation = per(stride), per(padding), per(output_padding), per(dilation)
    kernel = weight.shape[2:]
    if not all(sym.is_static(k) for k in kernel):
        raise UnsupportedError("transposed convolution with a symbolic kernel size")
    for i in range(nsp):  # interleave stride - 1 zeros: n -> (n - 1) * stride + 1
        d = 2 + i
        n = x.shape[d]
        if stride[i] > 1:
            x = _spread(x, d, sym.norm((n - 1) * stride[i] + 1), 0, stride[i])
    pads = [(dilation[i] * (int(kernel[i]) - 1) - padding[i],
             dilation[i] * (int(kernel[i]) - 1) - padding[i] + output_padding[i]) for i in range(nsp)]
    if any(a or b for a, b in pads):
        x = x.pad([(0, 0), (0, 0)] + pads)  # a negative pad crops
    cin, cog = weight.shape[0], weight.shape[1]
    w = weight.reshape((groups, sym.exact_div(cin, groups), cog, *kernel)).transpose(1, 2)
    w = w.reshape((sym.norm(cog * groups), sym.exact_div(cin, groups), *kernel))
    for i in range(nsp):
        w = w.slice(2 + i, None, None, -1)
    return nn.conv(x, w, bias, 1, 0, dilation, groups)


@aten("conv_transpose1d.default", "conv_transpose2d.input", "conv_transpose3d.input")
def conv_transpose_op(cx, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return conv_transpose(x, weight, bias, stride, padding, output_padding, dilation, groups)
