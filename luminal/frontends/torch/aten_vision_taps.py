"""Tap tables of torch's CPU interpolation kernels, reproduced bit for bit.

Along each resized dim, output position o reads the input at a few taps idx[o, t] with weights
w[o, t] (aten_vision applies them). Exactness matters beyond the last digit: where torch's
weight is a rounding residue (6.5e-15) and a port's is exactly 0, an inf input gives inf in
torch and NaN (0 * inf) in the port; where torch repeats an index with weight 0, a NaN there
spreads. So each function here is torch's own (aten/src/ATen/native/UpSample.h,
native/cpu/UpSampleKernel.cpp) statement for statement, in its C types: `ft` is scalar_t /
opmath_t (float32 for float32 inputs), an int64 plus a float is a float, a float plus the
double literal 0.5 is a double.

Fused multiply-add: UpSampleKernel.cpp is compiled once per CPU capability, and the AVX2 and
AVX512 builds (like every ARM build) let the compiler contract `a * b + c` into one FMA,
rounded once. Which build torch dispatches to decides the low bits of the cubic weights, so
`_Arith` asks torch (`torch.backends.cpu.get_cpu_capability()`; the DEFAULT x86 build has no
FMA) and evaluates each contracted expression exactly, rounding once (`fractions.Fraction`).
"""

from __future__ import annotations

import functools
import math
import platform
from fractions import Fraction

import numpy as np


@functools.cache
def torch_contracts_fma() -> bool:
    """Whether torch's CPU kernels were built with a*b+c contracted into an FMA."""
    import torch

    if platform.machine().lower() in ("aarch64", "arm64"):
        return True  # FMA is base AArch64; GCC and clang contract by default
    return torch.backends.cpu.get_cpu_capability() != "DEFAULT"


def _round_f32(exact: Fraction) -> np.float32:
    """`exact` rounded once to float32 (nearest, ties to even): via the correctly rounded
    double, unless that double is itself a float32 tie (then it would round twice)."""
    near = float(exact)
    f = np.float32(near)
    if Fraction(near) != exact:
        for g in (np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))):
            if (float(f) + float(g)) / 2 == near:
                return g if (g > f) == (exact > near) else f
    return f


class _Arith:
    """Scalar arithmetic in `ft`, with `fma` as torch's build evaluates `a * b + c`."""

    def __init__(self, ft):
        self.ft, self.fused = ft, torch_contracts_fma()

    def fma(self, a, b, c, fused=True):
        ft = self.ft
        if not (fused and self.fused):
            return ft(ft(ft(a) * ft(b)) + ft(c))
        exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
        return np.float64(float(exact)) if ft is np.float64 else _round_f32(exact)

    # The cubic convolution polynomials (UpSample.h). Which steps the compiler contracts depends
    # on where they are inlined: every step in the aa filter; all but the last in
    # get_cubic_upsample_coefficients (`fuse_last`), as torch's weights show bit for bit
    # (tests/torch/test_interpolate_taps.py checks the tables against eager).
    def cubic1(self, x, a, fuse_last):  # ((A + 2) * x - (A + 3)) * x * x + 1
        ft = self.ft
        return self.fma(ft(self.fma(a + ft(2), x, -(a + ft(3))) * x), x, ft(1), fuse_last)

    def cubic2(self, x, a, fuse_last):  # ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
        ft = self.ft
        return self.fma(self.fma(self.fma(a, x, -(ft(5) * a)), x, ft(8) * a), x, -(ft(4) * a), fuse_last)


def area_pixel_compute_scale(ft, n_in, n_out, align_corners, scale):
    if align_corners:
        return ft(n_in - 1) / ft(n_out - 1) if n_out > 1 else ft(0)
    return ft(1.0 / scale) if scale is not None and scale > 0 else ft(n_in) / ft(n_out)


def _source_index(ar, s, o, align_corners, cubic):
    """area_pixel_compute_source_index."""
    ft = ar.ft
    if align_corners:
        return ft(s * ft(o))
    src = ar.fma(s, ft(o) + ft(0.5), ft(-0.5))
    return ft(0) if not cubic and src < 0 else src


def _guard(ft, src, n_in):
    """guard_index_and_lambda: the floor index (at most n_in - 1; C's floorf, so a double
    index is rounded to float first) and the fraction in [0, 1]."""
    i = min(math.floor(np.float32(src)), n_in - 1)
    return i, min(max(ft(src - ft(i)), ft(0)), ft(1))


def nearest_taps(ft, n_in, n_out, scale, exact):
    """One tap of weight 1: nearest_idx (a same-size or 2x dim ignores a given scale) and
    HelperInterpNearestExact (floorf of the double sum src + 0.5)."""
    ar = _Arith(ft)
    s = area_pixel_compute_scale(ft, n_in, n_out, False, scale)
    idx = np.zeros((n_out, 1), np.int64)
    for o in range(n_out):
        if exact:
            i = math.floor(np.float32(float(_source_index(ar, s, o, False, False)) + 0.5))
        else:
            i = o if n_out == n_in else o >> 1 if n_out == 2 * n_in else math.floor(np.float32(ft(o) * s))
        idx[o, 0] = min(i, n_in - 1)
    return idx


def linear_taps(ft, n_in, n_out, align_corners, scale):
    """compute_source_index_and_lambda: two taps; a same-size dim repeats the index, weight 0."""
    ar = _Arith(ft)
    s = area_pixel_compute_scale(ft, n_in, n_out, align_corners, scale)
    idx = np.zeros((n_out, 2), np.int64)
    w = np.zeros((n_out, 2), ft)
    for o in range(n_out):
        if n_out == n_in:
            idx[o], w[o] = (o, o), (ft(1), ft(0))
            continue
        i0, l1 = _guard(ft, _source_index(ar, s, o, align_corners, False), n_in)
        idx[o], w[o] = (i0, i0 + (1 if i0 < n_in - 1 else 0)), (ft(1) - l1, l1)
    return idx, w


def cubic_taps(ft, n_in, n_out, align_corners, scale):
    """HelperInterpCubic::compute_indices_weights (a = -0.75), indices clamped into the input."""
    ar = _Arith(ft)
    s = area_pixel_compute_scale(ft, n_in, n_out, align_corners, scale)
    a = ft(-0.75)
    idx = np.zeros((n_out, 4), np.int64)
    w = np.zeros((n_out, 4), ft)
    for o in range(n_out):
        i, t = _guard(ft, _source_index(ar, s, o, align_corners, True), n_in)
        x2 = ft(1.0 - float(t))
        w[o] = (ar.cubic2(ft(float(t) + 1.0), a, False), ar.cubic1(t, a, False),
                ar.cubic1(x2, a, False), ar.cubic2(ft(float(x2) + 1.0), a, False))
        idx[o] = [max(min(i + j - 1, n_in - 1), 0) for j in range(4)]
    return idx, w


def aa_taps(ft, n_in, n_out, align_corners, scale, cubic):
    """HelperInterpBase::_compute_indices_min_size_weights_aa: the triangle (bilinear) or the
    a = -0.5 cubic filter, stretched by the downscale factor, normalized per output position.
    Returns (idx, w, valid); None for a same-size dim, which torch's separable kernel skips."""
    if n_in == n_out:
        return None
    ar = _Arith(ft)
    s = area_pixel_compute_scale(ft, n_in, n_out, align_corners, scale)
    interp = 4 if cubic else 2
    support = ft(interp * 0.5 * float(s)) if s >= 1.0 else ft(interp * 0.5)
    invscale = ft(1.0 / float(s)) if s >= 1.0 else ft(1.0)
    a = ft(-0.5)

    def filt(x):  # HelperInterpLinear / HelperInterpCubic ::aa_filter, in scalar_t
        x = ft(abs(x))
        if not cubic:
            return ft(1.0) - x if x < 1.0 else ft(0.0)
        if x < 1.0:
            return ar.cubic1(x, a, True)
        return ar.cubic2(x, a, True) if x < 2.0 else ft(0.0)

    width = int(math.ceil(support)) * 2 + 1
    idx = np.zeros((n_out, width), np.int64)
    w = np.zeros((n_out, width), ft)
    valid = np.zeros((n_out, width), bool)
    for o in range(n_out):
        center = ft(float(s) * (o + 0.5))
        xmin = max(int(float(center - support) + 0.5), 0)
        xsize = min(max(min(int(float(center + support) + 0.5), n_in) - xmin, 0), width)
        ws = [filt(ft((float(ft(j + xmin) - center) + 0.5) * float(invscale))) for j in range(xsize)]
        total = ft(0.0)
        for v in ws:
            total = ft(total + v)
        for j in range(xsize):
            idx[o, j], w[o, j], valid[o, j] = xmin + j, (ws[j] / total if total != 0 else ft(0.0)), True
    return idx, w, valid
