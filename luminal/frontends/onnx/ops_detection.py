"""Sampling ops of detection models: RoiAlign and DeformConv.

RoiAlign follows onnx's reference (and onnxruntime): per roi and output bin, a grid of sample
points, each a bilinear interpolation of its four taps (clamped at the border, zero beyond one
pixel outside), averaged ("avg") or, in "max" mode, the largest *weighted tap* of the grid (the
reference's definition, not the max of interpolated values). The sample grid is
`sampling_ratio` per bin side; sampling_ratio 0 (adaptive: ceil(roi size / output size)) is
lowered with a static upper bound and masks when the rois are known at compile time, and raises
an OnnxImportError (an UnsupportedError) when they are run-time data, whose sample counts no
static bound covers.

DeformConv (2-D): every kernel tap reads X bilinearly (zeros outside) at its offset position,
times the mask, and the columns are one grouped GEMM with the weights, plus the bias.
"""

from __future__ import annotations

import numpy as np

from luminal.builder import functional as F
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType

I64 = DType.I64


def _roi_align(c, x, rois, batch_indices, mode, out_h, out_w, ratio, scale, half_pixel):
    if mode not in ("avg", "max"):
        c.fail(f"mode {mode!r} is not avg or max")
    if x.ndim != 4 or rois.ndim != 2 or not sym.equal(rois.shape[1], 4):
        c.fail(f"X {x.shape} must be (N, C, H, W) and rois {rois.shape} (num_rois, 4)")
    if not (sym.is_static(x.shape[2]) and sym.is_static(x.shape[3])):
        c.fail("the spatial dims of X must be static")
    if out_h < 1 or out_w < 1 or ratio < 0:
        c.fail("output_height and output_width must be positive, sampling_ratio non-negative")
    h, w = int(x.shape[2]), int(x.shape[3])
    n_rois, ch = rois.shape[0], x.shape[1]
    off = 0.5 if half_pixel else 0.0
    ft = rois.dtype if rois.dtype in (DType.F32, DType.F64) else DType.F32  # onnxruntime's arithmetic type
    r = rois.cast(ft)
    start_w, start_h = r.slice(1, 0, 1).mul(scale).sub(off), r.slice(1, 1, 2).mul(scale).sub(off)  # (R, 1)
    roi_w = r.slice(1, 2, 3).mul(scale).sub(off).sub(start_w)
    roi_h = r.slice(1, 3, 4).mul(scale).sub(off).sub(start_h)
    if not half_pixel:  # malformed rois are forced to 1x1
        roi_w, roi_h = roi_w.maximum(1.0), roi_h.maximum(1.0)
    bin_h, bin_w = roi_h.div(float(out_h)), roi_w.div(float(out_w))
    if ratio > 0:
        gh = gw = ratio
        grid_h = grid_w = None
    else:
        known = c.known(1)
        if known is None:
            c.fail("sampling_ratio 0 (adaptive) with rois computed at run time is not supported: the number of "
                   "samples per bin depends on the data (give sampling_ratio > 0)")
        known = np.asarray(known)  # the counts in the rois' own type, as onnxruntime computes them
        nt = known.dtype.type if known.dtype.kind == "f" else np.float32
        k = known.astype(nt) * nt(scale) - nt(off)
        kw, kh = k[:, 2] - k[:, 0], k[:, 3] - k[:, 1]
        if not half_pixel:
            kw, kh = np.maximum(kw, nt(1.0)), np.maximum(kh, nt(1.0))
        per_h, per_w = np.ceil(kh / nt(out_h)).astype(np.int64), np.ceil(kw / nt(out_w)).astype(np.int64)
        gh, gw = max(int(per_h.max(initial=0)), 1), max(int(per_w.max(initial=0)), 1)
        grid_h = c.g.constant(per_h.astype(ft.numpy).reshape(-1, 1), ft)
        grid_w = c.g.constant(per_w.astype(ft.numpy).reshape(-1, 1), ft)

    def coords(start, size_bin, grid, n_out, g, limit):
        """(R, n_out * g) sample coordinates along one axis, their taps and validity."""
        p = np.repeat(np.arange(n_out, dtype=np.float64), g).reshape(1, -1)
        i = np.tile(np.arange(g, dtype=np.float64), n_out).reshape(1, -1)
        pc, ic = c.g.constant(p.astype(ft.numpy), ft), c.g.constant(i.astype(ft.numpy), ft)
        # start + p * bin + (i + 0.5) * bin / grid, in this order (onnxruntime's)
        if grid is None:
            v = start.add(pc.mul(size_bin)).add(ic.add(0.5).mul(size_bin).div(float(g)))
            used = None
        else:
            v = start.add(pc.mul(size_bin)).add(ic.add(0.5).mul(size_bin).div(F.where(grid.gt(0.0), grid, 1.0)))
            used = ic.lt(grid)
        outside = v.lt(-1.0).logical_or(v.gt(float(limit)))
        v = v.maximum(0.0)
        low = v.floor()
        top = low.ge(float(limit - 1))
        low = F.where(top, float(limit - 1), low)
        high = F.where(top, low, low.add(1.0))
        v = F.where(top, low, v)
        lw = v.sub(low)
        return low.cast(I64), high.cast(I64), lw.neg().add(1.0), lw, outside, used

    yl, yh, hy, ly, y_out, y_used = coords(start_h, bin_h, grid_h, out_h, gh, h)
    xl, xh, hx, lx, x_out, x_used = coords(start_w, bin_w, grid_w, out_w, gw, w)
    sy, sx = out_h * gh, out_w * gw

    def col(t):
        return t.reshape((n_rois, sy, 1))

    def row(t):
        return t.reshape((n_rois, 1, sx))

    outside = col(y_out).logical_or(row(x_out))  # (R, sy, sx)
    base = batch_indices.cast(I64).mul(c.g.scalar(h * w, I64)).reshape((n_rois, 1, 1))
    flat_x = x.reshape((x.shape[0], ch, h * w)).permute(0, 2, 1).reshape((sym.norm(x.shape[0] * h * w), ch))
    zero = c.g.scalar(0.0, ft)
    taps = []
    for yi, wy in ((yl, hy), (yh, ly)):
        for xi, wx in ((xl, hx), (xh, lx)):
            pos = base.add(col(yi).mul(c.g.scalar(w, I64)).add(row(xi)))
            pos = F.where(outside, base.expand(outside.shape), pos)
            wt = F.where(outside, zero, col(wy).mul(row(wx)))  # (R, sy, sx)
            vals = flat_x.index_select(0, pos.reshape(-1)).cast(ft).reshape((n_rois, sy, sx, ch))
            taps.append(vals.mul(wt.unsqueeze(-1)))
    grid = (n_rois, out_h, gh, out_w, gw, ch)
    if mode == "avg":
        val = taps[0].add(taps[1]).add(taps[2]).add(taps[3]).reshape(grid)
        if grid_h is None:
            out = val.sum((2, 4)).mul(1.0 / max(gh * gw, 1))
        else:
            used = col(y_used.expand((n_rois, sy))).logical_and(row(x_used.expand((n_rois, sx))))
            val = F.where(used.unsqueeze(-1).reshape(grid[:-1] + (1,)), val, 0.0)
            count = grid_h.mul(grid_w).maximum(1.0).reshape((n_rois, 1, 1, 1))
            out = val.sum((2, 4)).div(count)
    else:
        val = taps[0].maximum(taps[1]).maximum(taps[2]).maximum(taps[3]).reshape(grid)
        if grid_h is None:
            out = val.max((2, 4))
        else:
            used = col(y_used.expand((n_rois, sy))).logical_and(row(x_used.expand((n_rois, sx))))
            used = used.reshape(grid[:-1] + (1,))
            out = F.where(used, val, float("-inf")).max((2, 4))
            out = F.where(used.cast(DType.I32).max((2, 4)).gt(0), out, 0.0)  # an empty grid gives 0
    return out.permute(0, 3, 1, 2).cast(x.dtype)


@onnx_op("RoiAlign", since=10)
def roi_align_10(c, x, rois, batch_indices, *, mode="avg", output_height=1, output_width=1, sampling_ratio=0,
                 spatial_scale=1.0):
    return _roi_align(c, x, rois, batch_indices, mode, output_height, output_width, sampling_ratio, spatial_scale,
                      False)


@onnx_op("RoiAlign", since=16)
def roi_align_16(c, x, rois, batch_indices, *, coordinate_transformation_mode="half_pixel", mode="avg",
                 output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0):
    if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
        c.fail(f"coordinate_transformation_mode {coordinate_transformation_mode!r} is not half_pixel or "
               "output_half_pixel")
    return _roi_align(c, x, rois, batch_indices, mode, output_height, output_width, sampling_ratio, spatial_scale,
                      coordinate_transformation_mode == "half_pixel")


def _bilinear_taps(v, limit: int):
    """The two taps of coordinate v along an axis of `limit`: (index clamped, weight zeroed outside)."""
    low = v.floor()
    frac = v.sub(low)
    out = []
    for j, wt in ((low, frac.neg().add(1.0)), (low.add(1.0), frac)):
        inside = j.ge(0.0).logical_and(j.le(float(limit - 1)))
        out.append((j.clamp(0.0, float(limit - 1)).cast(I64), F.where(inside, wt, 0.0)))
    return out


@onnx_op("DeformConv", since=19)
def deform_conv(c, x, weight, offset, bias=None, mask=None, *, dilations=None, group=1, kernel_shape=None,
                offset_group=1, pads=None, strides=None):
    if x.ndim != 4:
        c.fail(f"only 2-D deformable convolution is supported (X has shape {x.shape})")
    dims = [x.shape[1], x.shape[2], x.shape[3], *weight.shape, *offset.shape[1:]]
    if not all(sym.is_static(d) for d in dims):
        c.fail("channel, spatial, weight and offset dims must be static")
    ic, ih, iw = (int(d) for d in x.shape[1:])
    oc, icg, kh, kw = (int(d) for d in weight.shape)
    if kernel_shape is not None and [int(k) for k in kernel_shape] != [kh, kw]:
        c.fail(f"kernel_shape {list(kernel_shape)} differs from the weight's {[kh, kw]}")
    dh, dw = [int(d) for d in dilations] if dilations else (1, 1)
    sh, sw = [int(s) for s in strides] if strides else (1, 1)
    pt, pl = ([int(p) for p in pads] if pads else [0, 0, 0, 0])[:2]
    oh, ow = int(offset.shape[2]), int(offset.shape[3])
    n = x.shape[0]
    if icg * group != ic or oc % group or ic % offset_group:
        c.fail(f"X {x.shape}, W {weight.shape}, group {group} and offset_group {offset_group} do not fit")
    k = kh * kw
    if int(offset.shape[1]) != offset_group * k * 2:
        c.fail(f"offset {offset.shape} is not (N, offset_group * {k} * 2, oH, oW)")
    ft = x.dtype if x.dtype.is_float else DType.F32
    off = offset.cast(ft).reshape((n, offset_group, kh, kw, 2, oh, ow))
    base_h = (np.arange(kh) * dh).reshape(1, 1, kh, 1, 1, 1) + (np.arange(oh) * sh - pt).reshape(1, 1, 1, 1, oh, 1)
    base_w = (np.arange(kw) * dw).reshape(1, 1, 1, kw, 1, 1) + (np.arange(ow) * sw - pl).reshape(1, 1, 1, 1, 1, ow)
    y = off.slice(4, 0, 1).squeeze(4).add(c.g.constant(base_h.astype(ft.numpy), ft))  # (N, G, kh, kw, oh, ow)
    xx = off.slice(4, 1, 2).squeeze(4).add(c.g.constant(base_w.astype(ft.numpy), ft))
    cg = ic // offset_group
    spots = k * oh * ow
    flat = x.cast(ft).reshape((n, offset_group, cg, ih * iw))
    cols = None
    for yi, wy in _bilinear_taps(y, ih):
        for xi, wx in _bilinear_taps(xx, iw):
            idx = yi.mul(c.g.scalar(iw, I64)).add(xi).reshape((n, offset_group, 1, spots))
            v = flat.gather(3, idx.expand((n, offset_group, cg, spots)))
            v = v.mul(wy.mul(wx).reshape((n, offset_group, 1, spots)))
            cols = v if cols is None else cols.add(v)
    if mask is not None:
        cols = cols.mul(mask.cast(ft).reshape((n, offset_group, 1, spots)))
    cols = cols.reshape((n, group, icg * k, oh * ow))  # channel-major, then kernel tap: W's layout
    wg = weight.cast(ft).reshape((1, group, oc // group, icg * k))
    out = wg.matmul(cols).reshape((n, oc, oh, ow))
    if bias is not None:
        out = out.add(bias.cast(ft).reshape((1, oc, 1, 1)))
    return out.cast(x.dtype)


