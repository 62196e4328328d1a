"""Signal ops: DFT (forward, inverse, one-sided, irfft) as GEMMs with cos/sin matrices of the
static transform length (computed in float64 at compile time), LRN, ReverseSequence."""

from __future__ import annotations

import numpy as np

from luminal.builder import functional as F
from luminal.frontends.onnx.errors import NeedsShape
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType


def _matrices(n_in: int, n_out: int, length: int, inverse: bool, onesided: bool):
    """(A, B, C, D) with Yr = R A + I B and Yi = R C + I D (R, I: real and imaginary rows)."""
    k_in, k_out = np.arange(n_in)[:, None], np.arange(n_out)[None, :]
    theta = 2 * np.pi * ((k_in * k_out) % length) / length
    cos, sin = np.cos(theta), np.sin(theta)
    if not inverse:
        return cos, sin, -sin, cos
    if not onesided:
        return cos / length, -sin / length, sin / length, cos / length
    w = np.full((n_in, 1), 2.0)  # irfft: the half spectrum counts twice, except DC and Nyquist
    w[0] = 1.0
    if length % 2 == 0 and n_in > length // 2:
        w[length // 2] = 1.0
    return w * cos / length, -w * sin / length, None, None


def _dft(c, x, length, axis: int, inverse: int, onesided: int):
    a = axis % x.ndim
    if a == x.ndim - 1:
        c.fail("the DFT axis cannot be the last (real / imaginary) dim")
    n = x.shape[a]
    if not sym.is_static(n):
        raise NeedsShape(f"DFT node {c.name!r}: the transformed axis {n} is symbolic; compiled per shape", c.node.input[0])
    irfft = bool(inverse and onesided)
    length = int(np.asarray(length).reshape(-1)[0]) if length is not None else (2 * (n - 1) if irfft else int(n))
    n_in = length // 2 + 1 if irfft else length
    n_out = length if irfft else (length // 2 + 1 if onesided else length)
    dtype = x.dtype
    x64 = x.cast(DType.F64)
    re = x64.slice(-1, 0, 1).squeeze(-1)
    im = x64.slice(-1, 1, 2).squeeze(-1) if sym.equal(x.shape[-1], 2) else None
    order = [i for i in range(re.ndim) if i != a] + [a]
    back = list(np.argsort(order))
    re, im = re.permute(order), None if im is None else im.permute(order)

    def fit(t):  # crop or zero-pad the signal to n_in
        if n >= n_in:
            return t.slice(-1, 0, n_in)
        return t.pad([(0, 0)] * (t.ndim - 1) + [(0, n_in - n)])

    re, im = fit(re), None if im is None else fit(im)
    A, B, C, D = _matrices(n_in, n_out, length, bool(inverse), bool(onesided))

    def gemm(t, m):
        return t.matmul(c.g.constant(m, DType.F64))

    yr = gemm(re, A) if im is None else gemm(re, A).add(gemm(im, B))
    if irfft:
        return yr.permute(back).unsqueeze(-1).cast(dtype)
    yi = gemm(re, C) if im is None else gemm(re, C).add(gemm(im, D))
    return F.stack([yr.permute(back), yi.permute(back)], -1).cast(dtype)


@onnx_op("DFT", since=17, known=(1,))
def dft_17(c, x, dft_length=None, *, axis=1, inverse=0, onesided=0):
    return _dft(c, x, dft_length, axis, inverse, onesided)


@onnx_op("DFT", since=20, known=(1, 2))
def dft_20(c, x, dft_length=None, axis=None, *, inverse=0, onesided=0):
    a = -2 if axis is None else int(np.asarray(axis).reshape(-1)[0])
    return _dft(c, x, dft_length, a, inverse, onesided)


@onnx_op("LRN")
def lrn(c, x, *, size, alpha=0.0001, beta=0.75, bias=1.0):
    """x / (bias + alpha / size * sum of x**2 over `size` neighbouring channels) ** beta."""
    sq = x.square()
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    pads = [(0, 0)] * x.ndim
    pads[1] = (lo, hi)
    padded = sq.pad(pads)
    ch = x.shape[1]
    total = None
    for k in range(size):
        part = padded.slice(1, k, sym.norm(ch + k))
        total = part if total is None else total.add(part)
    return x.div(total.mul(alpha / size).add(bias).pow(beta))


@onnx_op("ReverseSequence")
def reverse_sequence(c, x, lens, *, batch_axis=1, time_axis=0):
    """Each batch row's first lens[b] steps reversed (a gather along the time axis)."""
    n = x.shape[time_axis]
    t = F.arange(c.g, 0, n, dtype=lens.dtype)
    shape = [1] * x.ndim
    shape[time_axis] = n
    t = t.reshape(tuple(shape))
    bshape = [1] * x.ndim
    bshape[batch_axis] = x.shape[batch_axis]
    ln = lens.reshape(tuple(bshape))
    idx = ln.sub(1).sub(t).where_(t.lt(ln), t.expand(tuple(ln.shape[i] if i == batch_axis else t.shape[i]
                                                         for i in range(x.ndim))))
    return x.gather(time_axis, idx.expand(x.shape))
