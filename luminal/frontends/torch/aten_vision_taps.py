"""Tap tables of torch's CPU interpolation kernels, reproduced bit for bit.

Along each resized dim, output position o reads the input at a few taps idx[o, t] with weights
w[o, t] (aten_vision applies them). Exactness matters beyond the last digit: where torch's
weight is a rounding residue (6.5e-15) and a port's is exactly 0, an inf input gives inf in
torch and NaN (0 * inf) in the port; where torch repeats an index with weight 0, a NaN there
spreads. So each function here is torch's own (aten/src/ATen/native/UpSample.h,
native/cpu/UpSampleKernel.cpp) statement for statement, in its C types, vectorized over the
output positions: `ft` is scalar_t / opmath_t (float32 for float32 inputs), an int64 plus a
float is a float, a float plus the double literal 0.5 is a double, floorf rounds to float.

Fused multiply-add: UpSampleKernel.cpp is compiled once per CPU capability, and the AVX2 and
AVX512 builds (like every ARM build) let the compiler contract `a * b + c` into one FMA,
rounded once. Which build torch dispatches to decides the low bits of the cubic weights, so
`_Arith` asks torch (`torch.backends.cpu.get_cpu_capability()`; the DEFAULT x86 build has no
FMA) and then rounds each contracted expression once: float32 through float64 with
round-to-odd, float64 by Boldo and Melquiond's emulated FMA (an exact product, an exact sum,
round-to-odd, one rounding), both checked against exact rational arithmetic in the tests.
"""

from __future__ import annotations

import functools
import platform

import numpy as np

F64 = np.float64


@functools.cache
def torch_contracts_fma() -> bool:
    """Whether torch's CPU kernels were built with a*b+c contracted into an FMA."""
    import torch

    if platform.machine().lower() in ("aarch64", "arm64"):
        return True  # FMA is base AArch64; GCC and clang contract by default
    return torch.backends.cpu.get_cpu_capability() != "DEFAULT"


# --- a*b + c rounded once ------------------------------------------------------------------
def _two_sum(a, b):
    """s + e == a + b exactly (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a):
    c = a * 134217729.0  # 2**27 + 1: Veltkamp's split into two 26-bit halves
    hi = c - (c - a)
    return hi, a - hi


def _two_prod(a, b):
    """p + e == a * b exactly (Dekker's product; no FMA needed)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _add_odd(a, b):
    """a + b rounded to odd: the exact sum if representable, else the neighbour with an odd
    last bit (a second rounding from there is then correct)."""
    s, e = _two_sum(a, b)
    even = (s.view(np.int64) & 1) == 0
    return np.where((e != 0) & even, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)


def fma(ft, a, b, c):
    """a * b + c with one rounding to `ft` (float32 or float64 arrays)."""
    with np.errstate(all="ignore"):
        a, b, c = (np.asarray(v, ft).astype(F64) for v in (a, b, c))
        if ft is np.float32:  # the float32 product is exact in float64; 53 >= 24 + 2 bits
            return _add_odd(a * b, c).astype(np.float32)
        ph, pl = _two_prod(a, b)
        th, tl = _two_sum(c, ph)
        return th + _add_odd(tl, pl)


class _Arith:
    """Array arithmetic in `ft`, with `fma` as torch's build evaluates `a * b + c`."""

    def __init__(self, ft):
        self.ft, self.fused = ft, torch_contracts_fma()

    def fma(self, a, b, c, fused=True):
        ft = self.ft
        if fused and self.fused:
            return fma(ft, a, b, c)
        return (np.asarray(a, ft) * np.asarray(b, ft)).astype(ft) + np.asarray(c, ft)

    # The cubic convolution polynomials (UpSample.h). Which steps the compiler contracts depends
    # on where they are inlined: every step in the aa filter; all but the last in
    # get_cubic_upsample_coefficients (`fuse_last`), as torch's weights show bit for bit
    # (tests/torch/test_interpolate_taps.py checks the tables against eager).
    def cubic1(self, x, a, fuse_last):  # ((A + 2) * x - (A + 3)) * x * x + 1
        ft = self.ft
        return self.fma(self.fma(a + ft(2), x, -(a + ft(3))) * x, x, ft(1), fuse_last)

    def cubic2(self, x, a, fuse_last):  # ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
        ft = self.ft
        return self.fma(self.fma(self.fma(a, x, -(ft(5) * a)), x, ft(8) * a), x, -(ft(4) * a), fuse_last)


# --- torch's index and weight computations -------------------------------------------------
def area_pixel_compute_scale(ft, n_in, n_out, align_corners, scale):
    if align_corners:
        return ft(n_in - 1) / ft(n_out - 1) if n_out > 1 else ft(0)
    return ft(1.0 / scale) if scale is not None and scale > 0 else ft(n_in) / ft(n_out)


def _source_index(ar, s, o, align_corners, cubic):
    """area_pixel_compute_source_index for the positions `o`."""
    ft = ar.ft
    if align_corners:
        return s * o.astype(ft)
    src = ar.fma(s, o.astype(ft) + ft(0.5), ft(-0.5))
    return src if cubic else np.where(src < 0, ft(0), src)


def _floorf(v):
    return np.floor(np.asarray(v).astype(np.float32)).astype(np.int64)


def _guard(ft, src, n_in):
    """guard_index_and_lambda: the floor index (at most n_in - 1) and the fraction in [0, 1]."""
    i = np.minimum(_floorf(src), n_in - 1)
    return i, np.clip((src - i.astype(ft)).astype(ft), ft(0), ft(1))


def nearest_taps(ft, n_in, n_out, scale, exact, nsp):
    """One tap of weight 1: HelperInterpNearest (floorf(scale * o)), where a 2-d resize (torch's
    nearest_idx) ignores a given scale on a same-size or 2x dim and 1-d and 3-d ones do not, as
    eager shows; HelperInterpNearestExact (floorf of the double sum src + 0.5)."""
    ar, o = _Arith(ft), np.arange(n_out)
    s = area_pixel_compute_scale(ft, n_in, n_out, False, scale)
    if exact:
        i = _floorf(_source_index(ar, s, o, False, False).astype(F64) + 0.5)
    elif nsp == 2 and n_out == n_in:
        i = o
    elif nsp == 2 and n_out == 2 * n_in:
        i = o >> 1
    else:
        i = _floorf(o.astype(ft) * s)
    return np.minimum(i, n_in - 1)[:, None]


def _stored(w, ft, st):
    """Weights as torch stores them: in the input's type `st` (f16/bf16), if given."""
    return w if st is None else w.astype(st).astype(ft)


def linear_taps(ft, n_in, n_out, align_corners, scale, st=None):
    """compute_source_index_and_lambda: two taps; a same-size dim repeats the index, weight 0.
    The lambdas are scalar_t (`st`): lambda0 = scalar_t(1) - lambda1, rounded to scalar_t."""
    ar, o = _Arith(ft), np.arange(n_out)
    if n_out == n_in:
        return np.stack([o, o], 1), np.stack([np.ones(n_out, ft), np.zeros(n_out, ft)], 1)
    s = area_pixel_compute_scale(ft, n_in, n_out, align_corners, scale)
    i0, l1 = _guard(ft, _source_index(ar, s, o, align_corners, False), n_in)
    l1 = _stored(l1, ft, st)
    return np.stack([i0, i0 + (i0 < n_in - 1)], 1), np.stack([_stored(ft(1) - l1, ft, st), l1], 1)


def cubic_taps(ft, n_in, n_out, align_corners, scale, st=None):
    """HelperInterpCubic::compute_indices_weights (a = -0.75), indices clamped into the input;
    the coefficients in opmath, stored as scalar_t (`st`)."""
    ar, o = _Arith(ft), np.arange(n_out)
    s = area_pixel_compute_scale(ft, n_in, n_out, align_corners, scale)
    i, t = _guard(ft, _source_index(ar, s, o, align_corners, True), n_in)
    a = ft(-0.75)
    x2 = (1.0 - t.astype(F64)).astype(ft)  # scalar_t x2 = 1.0 - t; then x + 1.0 in double
    w = np.stack([ar.cubic2((t.astype(F64) + 1.0).astype(ft), a, False), ar.cubic1(t, a, False),
                  ar.cubic1(x2, a, False), ar.cubic2((x2.astype(F64) + 1.0).astype(ft), a, False)], 1)
    return np.clip(i[:, None] + np.arange(-1, 3), 0, n_in - 1), _stored(w.astype(ft), ft, st)


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
        x = np.abs(x)
        if not cubic:
            return np.where(x < 1.0, ft(1.0) - x, ft(0.0)).astype(ft)
        near, far = ar.cubic1(x, a, True), ar.cubic2(x, a, True)
        return np.where(x < 1.0, near, np.where(x < 2.0, far, ft(0.0))).astype(ft)

    width = int(np.ceil(support)) * 2 + 1
    center = (float(s) * (np.arange(n_out) + 0.5)).astype(ft)
    xmin = np.maximum(np.trunc((center - support).astype(F64) + 0.5).astype(np.int64), 0)
    xmax = np.minimum(np.trunc((center + support).astype(F64) + 0.5).astype(np.int64), n_in)
    xsize = np.clip(xmax - xmin, 0, width)  # "rare cases when due to precision xsize can be larger"
    j = np.arange(width)
    valid = j[None, :] < xsize[:, None]
    arg = ((((j[None, :] + xmin[:, None]).astype(ft) - center[:, None]).astype(F64) + 0.5)
           * float(invscale)).astype(ft)
    w = np.where(valid, filt(arg), ft(0))
    total = np.zeros(n_out, ft)
    for t in range(width):  # in order, in scalar_t
        total = (total + w[:, t]).astype(ft)
    with np.errstate(all="ignore"):
        w = np.where(total[:, None] != 0, w / total[:, None], ft(0)).astype(ft)
    idx = np.where(valid, xmin[:, None] + j[None, :], 0)
    return idx, w, valid
