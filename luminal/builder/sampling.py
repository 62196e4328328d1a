"""GridSample (2-D and 3-D; nearest, linear, cubic; zeros, border, reflection padding), as torch's
grid_sampler and onnxruntime compute it: unnormalize the grid, pad the coordinates (clamp or
reflect; not for cubic), then sum the taps of each spatial dim (1, 2 or 4 per dim) with their
weights, each tap's index padded, reading X by one flat gather per tap combination."""

from __future__ import annotations

import itertools

from luminal.errors import UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType

CUBIC_ALPHA = -0.75


def _reflect(x, lo: float, hi: float):
    """x reflected by the near border until within [lo, hi] (onnx's _gs_reflect)."""
    rng = hi - lo
    below, above = x.lt(lo), x.gt(hi)
    dx = x.neg().add(lo).where_(below, x.sub(hi))
    n = dx.mul(1.0 / rng).trunc() if rng else dx.mul(0.0)
    r = dx.sub(n.mul(rng))
    even = n.fmod(2.0).eq(0.0)
    from_below = r.add(lo).where_(even, r.neg().add(hi))
    from_above = r.neg().add(hi).where_(even, r.add(lo))
    return from_below.where_(below, from_above.where_(above, x))


def _cubic(t):
    """Keys' cubic convolution weights of the 4 taps at offsets -1, 0, 1, 2 for fraction t."""
    a = CUBIC_ALPHA

    def far(u):  # 1 < |u| < 2
        return u.mul(a).sub(5 * a).mul(u).add(8 * a).mul(u).sub(4 * a)

    def near(u):  # |u| <= 1
        return u.mul(a + 2).sub(a + 3).mul(u).mul(u).add(1.0)

    return [far(t.add(1.0)), near(t), near(t.neg().add(1.0)), far(t.neg().add(2.0))]


def grid_sample(x, grid, *, align_corners=False, mode="linear", padding_mode="zeros"):
    """x (N, C, *spatial) sampled at grid (N, *out, k), its last axis listing x's spatial coordinates
    last dim first, each in [-1, 1]: (N, C, *out). ONNX's GridSample and torch's grid_sampler."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("nearest", "linear", "cubic"):
        raise UnsupportedError(f"grid sample mode {mode!r} is not nearest, linear or cubic")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise UnsupportedError(f"grid sample padding_mode {padding_mode!r} is not zeros, border or reflection")
    k = x.ndim - 2
    sizes = list(x.shape[2:])
    if not all(sym.is_static(s) for s in sizes):
        raise UnsupportedError("grid sample over symbolic spatial dims is not supported")
    n, ch = x.shape[0], x.shape[1]
    out_sp = tuple(grid.shape[1:-1])
    ft = x.dtype if x.dtype.is_float else DType.F32
    taps_per_dim = []
    for i, size in enumerate(sizes):
        g = grid.slice(-1, k - 1 - i, k - i).squeeze(-1).cast(ft)  # (N, *O): the grid lists x (last dim) first
        if align_corners:
            v = g.add(1.0).mul((size - 1) / 2.0)
            lo, hi = 0.0, size - 1.0
        else:
            v = g.add(1.0).mul(float(size)).sub(1.0).mul(0.5)
            lo, hi = -0.5, size - 0.5
        if mode == "nearest":
            v = v.round()
        # nearest and linear pad the coordinate, then each tap; cubic pads only its taps, as torch's
        # grid_sampler and onnxruntime (onnx's reference also pads a cubic coordinate outside
        # [lo, hi], and so disagrees with both near the border)
        if padding_mode == "border" and mode != "cubic":
            v = v.clamp(0.0, size - 1.0)
        elif padding_mode == "reflection" and mode != "cubic":
            v = _reflect(v, lo, hi)
        if mode == "nearest":
            taps = [(v.trunc(), None)]
        else:
            base = v.floor()
            t = v.sub(base)
            if mode == "linear":
                taps = [(base, t.neg().add(1.0)), (base.add(1.0), t)]
            else:
                taps = list(zip([base.add(float(o)) for o in (-1, 0, 1, 2)], _cubic(t)))
        fixed = []
        for j, w in taps:
            valid = None
            if padding_mode == "zeros":
                valid = j.ge(0.0).logical_and(j.lt(float(size)))
                j = j.clamp(0.0, size - 1.0)
            elif padding_mode == "border":
                j = j.clamp(0.0, size - 1.0)
            else:
                j = _reflect(j, lo, hi).trunc().clamp(0.0, size - 1.0)
            if valid is not None:
                w = (valid.cast(ft) if w is None else w.where_(valid, w.mul(0.0)))
            fixed.append((j.cast(DType.I64), w))
        taps_per_dim.append(fixed)
    strides = [1] * k
    for i in range(k - 2, -1, -1):
        strides[i] = strides[i + 1] * sizes[i + 1]
    total = 1
    for s in sizes:
        total *= s
    flat_x = x.reshape((n, ch, total))
    p = 1
    for d in out_sp:
        p = sym.norm(p * d)
    out = None
    for combo in itertools.product(*taps_per_dim):
        idx, weight = None, None
        for (j, w), stride in zip(combo, strides):
            term = j.mul(stride) if stride != 1 else j
            idx = term if idx is None else idx.add(term)
            if w is not None:
                weight = w if weight is None else weight.mul(w)
        idx = idx.reshape((n, 1, p)).expand((n, ch, p))
        val = flat_x.gather(2, idx).cast(ft)
        if weight is not None:
            val = val.mul(weight.reshape((n, 1, p)))
        out = val if out is None else out.add(val)
    return out.reshape((n, ch) + out_sp).cast(x.dtype)
