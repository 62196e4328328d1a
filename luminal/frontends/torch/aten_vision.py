"""Vision ATen ops: interpolation (upsample_* in every mode), adaptive pooling, transposed
convolution.

Interpolation and adaptive pooling are separable gathers: along each resized dim, output
position o reads the input at a few taps idx[o, t] with weights w[o, t]. The tap tables are
torch's own, bit for bit (aten_vision_taps: its formulas in its C types, with the fused
multiply-adds of its AVX2/AVX512 builds), so indices, zero weights and therefore inf/NaN
propagation are torch's; the graph is `index_select` per tap, times its weight, summed. Shapes
must be static (the tables are constants): a symbolic spatial dim raises UnsupportedError.

Transposed convolution is the regular one on a zero-interleaved, re-padded input with the
kernel flipped and its channel axes swapped per group (the gradient-of-conv identity).
"""

from __future__ import annotations

import numpy as np

from luminal.builder import functional as F
from luminal.builder import nn
from luminal.errors import UnsupportedError
from luminal.frontends.torch.aten_movement import _spread
from luminal.frontends.torch.aten_ops import aten
from luminal.frontends.torch.aten_vision_taps import aa_taps, cubic_taps, linear_taps, nearest_taps
from luminal.frontends.torch.dims import shape_of
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType


def _static(dims, what):
    if not all(sym.is_static(d) for d in dims):
        raise UnsupportedError(f"{what} over symbolic spatial dims {tuple(dims)}")
    return [int(d) for d in dims]


def _opmath(x) -> type:
    return np.float64 if x.dtype is DType.F64 else np.float32


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


def _resize(cx, x, output_size, scale_factors, mode, align_corners=None, aa=False):
    nsp = len(output_size) if output_size is not None else len(scale_factors)
    spatial = _static(x.shape[x.ndim - nsp :], f"upsample ({mode})")
    out_sizes = _static(cx.shape[x.ndim - nsp :], f"upsample ({mode})")
    scales = list(scale_factors) if scale_factors is not None else [None] * nsp
    if mode != "nearest" and not x.dtype.is_float:
        raise UnsupportedError(f"upsample ({mode}) of a {x.dtype} tensor")
    if aa and nsp == 2 and out_sizes[1] == 1 and out_sizes[0] not in (1, spatial[0]):
        raise UnsupportedError(
            f"antialiased {mode} resize {tuple(spatial)} -> {tuple(out_sizes)}: torch's CPU kernel "
            "repeats the first output row when the output width is 1 (eager's answer is not the "
            "resize), and luminal does not reproduce it")
    if aa and x.dtype not in (DType.F32, DType.F64):
        raise UnsupportedError(f"antialiased {mode} resize of a {x.dtype} tensor: torch's CPU kernel does "
                               "not implement it")
    ft = _opmath(x)
    # f16/bf16: torch stores the weights in the input's type and sums in float, rounding once
    low = None if mode.startswith("nearest") or x.dtype in (DType.F32, DType.F64) else x.dtype
    st = None if low is None else low.numpy
    x = x if low is None else x.cast(DType.F32)
    # the last dim first, as torch's separable kernels do
    for i in reversed(range(nsp)):
        d = x.ndim - nsp + i
        n_in, n_out, sc = spatial[i], out_sizes[i], scales[i]
        if mode in ("nearest", "nearest-exact"):
            x = _taps_apply(x, d, nearest_taps(ft, n_in, n_out, sc, mode == "nearest-exact", nsp))
        elif aa:
            taps = aa_taps(ft, n_in, n_out, align_corners, sc, mode == "bicubic")
            x = x if taps is None else _taps_apply(x, d, *taps)  # torch skips a same-size dim
        elif mode == "linear":
            x = _taps_apply(x, d, *linear_taps(ft, n_in, n_out, align_corners, sc, st))
        else:
            x = _taps_apply(x, d, *cubic_taps(ft, n_in, n_out, align_corners, sc, st))
    return x if low is None else x.cast(low)


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
    if any(s > 1 for s in stride) and all(d == 1 for d in dilation) and all(sym.is_static(n) for n in x.shape[2:]):
        return _conv_transpose_phases(x, weight, bias, stride, padding, output_padding, groups)
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


def _conv_transpose_phases(x, weight, bias, stride, padding, output_padding, groups):
    """A strided transposed convolution (dilation 1) as one stride-1 convolution per output phase,
    interleaved: output position o takes, with t = o + padding, the kernel taps k = t mod stride
    (+ multiples of the stride) against inputs (t - k) / stride, so phase r is the correlation of
    the input with the kernel's taps r, r + stride, ... reversed. Each input element meets each
    kernel tap once, where convolving the zero-interleaved input multiplies by stride^d - 1 zeros
    out of stride^d. A phase with no taps (stride above the kernel) is zeros."""
    nsp = x.ndim - 2
    spatial = [int(n) for n in x.shape[2:]]
    kernel = [int(k) for k in weight.shape[2:]]
    cin, cog = weight.shape[0], weight.shape[1]
    cout = sym.norm(cog * groups)
    w = weight.reshape((groups, sym.exact_div(cin, groups), cog, *kernel)).transpose(1, 2)
    w = w.reshape((cout, sym.exact_div(cin, groups), *kernel))
    length = [(n - 1) * s - 2 * p + k + op for n, s, p, k, op in zip(spatial, stride, padding, kernel, output_padding)]
    q = [-(-(p + n) // s) for p, n, s in zip(padding, length, stride)]  # per phase: positions (t // stride)
    phases = {}
    for r in np.ndindex(*stride):
        taps = [len(range(ri, k, s)) for ri, k, s in zip(r, kernel, stride)]
        if 0 in taps:
            phases[r] = x.graph.full((x.shape[0], cout, *q), 0, x.dtype)
            continue
        wr = w
        for i in range(nsp):  # taps r, r + stride, ..., reversed
            wr = wr.slice(2 + i, r[i], None, stride[i]).slice(2 + i, None, None, -1)
        # z[j] = sum_m x[j - m] w[r + m s]: the input padded by taps - 1 before, cut or padded to q after
        xr = x.pad([(0, 0), (0, 0)] + [(t - 1, qi - n) for t, qi, n in zip(taps, q, spatial)])
        phases[r] = nn.conv(xr, wr, None, 1, 0, 1, groups)

    def interleave(i, r):
        if i == nsp:
            return phases[r]
        parts = [interleave(i + 1, r + (ri,)) for ri in range(stride[i])]
        if len(parts) == 1:
            return parts[0]
        axis = 2 + i
        out = F.stack(parts, axis + 1)
        return out.reshape(out.shape[:axis] + (sym.norm(out.shape[axis] * stride[i]),) + out.shape[axis + 2:])

    out = interleave(0, ())
    for i in range(nsp):
        out = out.slice(2 + i, padding[i], padding[i] + length[i])
    if bias is not None:
        out = out.add(bias.reshape((bias.shape[0],) + (1,) * nsp))
    return out


@aten("conv_transpose1d.default", "conv_transpose2d.input", "conv_transpose3d.input")
def conv_transpose_op(cx, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return conv_transpose(x, weight, bias, stride, padding, output_padding, dilation, groups)


_GRID_MODES = {0: "linear", 1: "nearest", 2: "cubic"}
_GRID_PADDINGS = {0: "zeros", 1: "border", 2: "reflection"}


@aten("grid_sampler_2d.default", "grid_sampler_3d.default")
def grid_sampler(cx, x, grid, interpolation_mode, padding_mode, align_corners):
    """F.grid_sample: the sampler ONNX's GridSample shares (`builder/sampling.py`)."""
    from luminal.builder.sampling import grid_sample

    if interpolation_mode not in _GRID_MODES or padding_mode not in _GRID_PADDINGS:
        raise UnsupportedError(f"grid_sampler mode {interpolation_mode}, padding {padding_mode}")
    return grid_sample(x, grid, mode=_GRID_MODES[interpolation_mode], padding_mode=_GRID_PADDINGS[padding_mode],
                       align_corners=bool(align_corners))
