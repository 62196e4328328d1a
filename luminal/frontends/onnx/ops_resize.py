"""Resize: separable, one axis at a time, each a compile-time interpolation matrix.

Along a symbolic axis, a nearest upsampling by an integer factor (the YOLO neck's) is a
broadcast view (repeat k times) at any size; any other resize of a symbolic axis compiles per
input shape (`NeedsShape`), since its weights depend on the size.

Resize is linear in its input along each axis, so the weights of axis `a` form a matrix
W (out, in): the 1-D interpolation (the ONNX reference's own, on an identity basis, in f64)
of every unit vector. Nearest mode becomes an exact `index_select` (one-hot rows), the others
a contraction with W; tf_crop_and_resize adds the extrapolation value on the rows that fall
outside the input.
"""

from __future__ import annotations

import numpy as np

from luminal.frontends.onnx.errors import NeedsShape
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir import symbolic as sym


def _coeff_fn(mode, antialias, nearest_mode, cubic_coeff_a):
    from onnx.reference.ops import op_resize as ref

    if mode == "nearest":
        return lambda x, scale: ref._nearest_coeffs(x, mode=nearest_mode)
    if mode == "cubic":
        fn = ref._cubic_coeffs_antialias if antialias else ref._cubic_coeffs
        return lambda x, scale: fn(x, scale, A=cubic_coeff_a)
    if mode == "linear":
        return ref._linear_coeffs_antialias if antialias else ref._linear_coeffs
    raise ValueError(f"unknown Resize mode {mode!r}")


def _plan(shape, axes, scales, sizes, policy):
    """(scale, output size) per axis, as the reference's `_interpolate_nd` computes them."""
    r = len(shape)
    if sizes is not None:
        out = list(shape)
        for i, a in enumerate(axes):
            out[a] = int(sizes[i])
        sc = [out[i] / shape[i] for i in range(r)]
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(sc[a] for a in axes)
            sc = [s if i in axes else 1.0 for i in range(r)]
            out = [int(s * shape[i] + 0.5) if i in axes else shape[i] for i in range(r)]
        return sc, out
    sc = [1.0] * r
    for i, a in enumerate(axes):
        sc[a] = float(scales[i])
    return sc, [int(s * n) if i in axes else n for i, (s, n) in enumerate(zip(sc, shape))]


@onnx_op("Resize", since=11, known=(1, 2, 3))
def resize(c, x, roi=None, scales=None, sizes=None, antialias=0, axes=None, coordinate_transformation_mode="half_pixel",
           cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy="stretch",
           mode="nearest", nearest_mode="round_prefer_floor"):
    from onnx.reference.ops import op_resize as ref

    r = x.ndim
    axes = list(range(r)) if axes is None else [a % r for a in axes]
    scales = None if scales is None or np.asarray(scales).size == 0 else np.asarray(scales, np.float64).reshape(-1)
    sizes = None if sizes is None or np.asarray(sizes).size == 0 else np.asarray(sizes).reshape(-1)
    if scales is None and sizes is None:
        c.fail("Resize needs scales or sizes")
    shape = list(x.shape)
    symbolic = [a for a in axes if not sym.is_static(shape[a])]
    if symbolic:
        kw = dict(coordinate_transformation_mode=coordinate_transformation_mode, nearest_mode=nearest_mode)
        reps = _integer_repeats(scales, axes, symbolic, mode, roi, **kw)
        if reps is None:  # weights that depend on the size: resolved per call
            raise NeedsShape(f"Resize node {c.name!r}: {mode} resize along symbolic axes {symbolic}; compiled per "
                             "input shape", c.node.input[0])
        for a, k in reps.items():
            x = _repeat(x, a, k)
        keep = [i for i, a in enumerate(axes) if a not in reps]
        axes, scales = [axes[i] for i in keep], scales[keep]
        shape = list(x.shape)
        if not axes:
            return x
    sc, out = _plan(shape, axes, scales, sizes, keep_aspect_ratio_policy)
    full_roi = None
    if roi is not None and np.asarray(roi).size:
        roi = np.asarray(roi, np.float64).reshape(-1)
        full_roi = [0.0] * r + [1.0] * r
        k = len(axes) if len(roi) == 2 * len(axes) else r
        for i, a in enumerate(axes if k == len(axes) else range(r)):
            full_roi[a], full_roi[r + a] = roi[i], roi[k + i]
    fct = _coeff_fn(mode, antialias, nearest_mode, cubic_coeff_a)
    y = x
    for a in axes:
        n, m = shape[a], out[a]
        axis_roi = None if full_roi is None else [full_roi[a], full_roi[a + r]]
        if m == n and np.isclose(sc[a], 1.0) and (axis_roi is None or (np.isclose(axis_roi[0], 0) and np.isclose(axis_roi[1], 1))):
            continue
        kw = dict(roi=axis_roi, exclude_outside=bool(exclude_outside), coordinate_transformation_mode=coordinate_transformation_mode)
        w = ref._interpolate_1d_along_axis(np.eye(n), 0, sc[a], m, fct, extrapolation_value=0.0, **kw)
        outside = ref._interpolate_1d_along_axis(np.zeros((n, 1)), 0, sc[a], m, fct, extrapolation_value=1.0, **kw)[:, 0]
        y = _apply_axis(c, y, a, w, outside, extrapolation_value)
    return y


REPEAT_MODES = ("half_pixel", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn")


def _integer_repeats(scales, axes, symbolic, mode, roi, *, coordinate_transformation_mode, nearest_mode):
    """{axis: k} when every symbolic axis is a nearest upsampling by an integer k whose
    weights are `repeat each element k times` at any size (the coordinate transform does not
    depend on the size, checked against the reference at two sizes), else None."""
    if mode != "nearest" or scales is None or coordinate_transformation_mode not in REPEAT_MODES:
        return None
    if roi is not None and np.asarray(roi).size:
        return None
    from onnx.reference.ops import op_resize as ref

    fct = _coeff_fn("nearest", 0, nearest_mode, -0.75)
    reps = {}
    for a in symbolic:
        k = float(scales[axes.index(a)])
        if k != int(k) or k < 1:
            return None
        for n in (5, 8):
            w = ref._interpolate_1d_along_axis(np.eye(n), 0, k, int(k * n), fct, extrapolation_value=0.0, roi=None,
                                               exclude_outside=False,
                                               coordinate_transformation_mode=coordinate_transformation_mode)
            if not np.array_equal(w, np.repeat(np.eye(n), int(k), axis=0)):
                return None
        reps[a] = int(k)
    return reps


def _repeat(x, a: int, k: int):
    """Each element of axis `a` repeated k times: a broadcast view, any (symbolic) size."""
    if k == 1:
        return x
    y = x.unsqueeze(a + 1)
    shape = list(y.shape)
    shape[a + 1] = k
    y = y.expand(tuple(shape))
    out = list(x.shape)
    out[a] = sym.norm(out[a] * k)
    return y.reshape(tuple(out))


def _apply_axis(c, x, a, w, outside, extrapolation):
    one_hot = np.all((w == 0) | (w == 1), axis=1) & (w.sum(axis=1) == 1)
    moved = x.transpose(a, -1) if a != x.ndim - 1 else x
    if one_hot.all() and not outside.any():
        idx = c.g.constant(w.argmax(axis=1).astype(np.int64))
        y = moved.index_select(moved.ndim - 1, idx)
    else:
        if not x.dtype.is_float:
            c.fail(f"Resize of a {x.dtype} tensor with interpolating weights is not supported")
        wt = c.g.constant(np.ascontiguousarray(w.T).astype(x.dtype.numpy))
        y = moved.matmul(wt)
        if outside.any() and extrapolation != 0:
            y = y.add(c.g.constant((outside * extrapolation).astype(x.dtype.numpy)))
    return y.transpose(a, -1) if a != x.ndim - 1 else y



@onnx_op("Upsample", since=7, known=(1,))
def upsample(c, x, scales=None, mode="nearest"):
    """The deprecated Upsample (opset 7-9): Resize with asymmetric coordinates."""
    return resize(c, x, None, scales, None, coordinate_transformation_mode="asymmetric",
                  mode="linear" if mode in ("linear", "bilinear") else "nearest", nearest_mode="floor")
