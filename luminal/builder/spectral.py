"""Discrete Fourier transforms as GEMMs, on a complex value held as two real planes (re, im).

One lowering for ONNX DFT/STFT (`frontends/onnx/ops_signal.py`, `ops_spectral.py`) and torch's
`_fft_c2c`/`_fft_r2c`/`_fft_c2r` (`frontends/torch/aten_complex.py`): along one axis of static
length, Y = X W with W the cos/sin matrix of the transform (computed in float64 at compile time,
entries reduced mod the length so large k*j stay exact), multiplied in float64 and rounded once
by the caller. A dense DFT is O(n^2) per row where an FFT is O(n log n): the lengths models
transform (a 400-tap STFT frame, FNet's hidden and sequence axes) keep it a pair of GEMMs, and
the float64 product is at least as precise as pocketfft's float32 butterflies.
"""

from __future__ import annotations

import numpy as np

from luminal.errors import ShapeError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType


def dft_matrices(n_in: int, n_out: int, length: int, inverse: bool, onesided: bool, scale: float = 1.0):
    """(A, B, C, D) with Yr = R A + I B and Yi = R C + I D (R, I: the real and imaginary rows of
    n_in entries), all times `scale`. `onesided` and `inverse`: the real inverse of a half
    spectrum (irfft; C and D are None): bins 1 .. ceil(length/2)-1 count twice, the imaginary
    parts of DC and Nyquist drop out (their sines are 0), as pocketfft's c2r."""
    k_in, k_out = np.arange(n_in)[:, None], np.arange(n_out)[None, :]
    theta = 2 * np.pi * ((k_in * k_out) % length) / length
    cos, sin = np.cos(theta) * scale, np.sin(theta) * scale
    if not inverse:
        return cos, sin, -sin, cos
    if not onesided:
        return cos, -sin, sin, cos
    w = np.full((n_in, 1), 2.0)
    w[0] = 1.0
    if length % 2 == 0 and n_in > length // 2:
        w[length // 2] = 1.0
    return w * cos, -w * sin, None, None


def dft(re, im, axis: int, *, length: int | None = None, inverse: bool = False, onesided: bool = False,
        scale: float = 1.0):
    """The DFT of re + i*im (im None: a real signal) along `axis`, in float64: (Yr, Yi), Yi None
    for a real inverse of a half spectrum (inverse and onesided). The signal is cropped or
    zero-padded to the transform's input length: `length` (default: the axis' size; for the
    real inverse, 2 * (size - 1)) or length // 2 + 1 bins for the real inverse. Output: `length`
    bins, or length // 2 + 1 for a one-sided forward transform."""
    a = axis % re.ndim
    n = re.shape[a]
    if not sym.is_static(n):
        raise ShapeError(f"a DFT along a symbolic axis ({n}) is not supported: its matrix needs the length")
    n = int(n)
    real_inverse = inverse and onesided
    length = length if length is not None else (2 * (n - 1) if real_inverse else n)
    if length < 1:
        raise ShapeError(f"a DFT of length {length}: expected at least 1")
    n_in = length // 2 + 1 if real_inverse else length
    n_out = length if real_inverse else (length // 2 + 1 if onesided else length)
    order = [i for i in range(re.ndim) if i != a] + [a]
    back = [int(i) for i in np.argsort(order)]

    def rows(t):  # the axis last, cropped or zero-padded to n_in, in float64
        t = t.cast(DType.F64).permute(order)
        if n >= n_in:
            return t.slice(-1, 0, n_in)
        return t.pad([(0, 0)] * (t.ndim - 1) + [(0, n_in - n)])

    r, i = rows(re), None if im is None else rows(im)
    A, B, C, D = dft_matrices(n_in, n_out, length, inverse, onesided, scale)
    g = re.graph

    def gemm(t, m):
        return t.matmul(g.constant(m, DType.F64))

    yr = gemm(r, A) if i is None else gemm(r, A).add(gemm(i, B))
    if real_inverse:
        return yr.permute(back), None
    yi = gemm(r, C) if i is None else gemm(r, C).add(gemm(i, D))
    return yr.permute(back), yi.permute(back)
