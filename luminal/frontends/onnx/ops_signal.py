"""Signal ops: DFT (forward, inverse, one-sided, irfft: `builder/spectral.py`, GEMMs with cos/sin matrices of the
static transform length (computed in float64 at compile time), LRN, ReverseSequence."""

from __future__ import annotations

import numpy as np

from luminal.builder import functional as F
from luminal.builder import spectral
from luminal.frontends.onnx.errors import NeedsShape
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir import symbolic as sym


def _dft(c, x, length, axis: int, inverse: int, onesided: int):
    a = axis % x.ndim
    if a == x.ndim - 1:
        c.fail("the DFT axis cannot be the last (real / imaginary) dim")
    n = x.shape[a]
    if not sym.is_static(n):
        raise NeedsShape(f"DFT node {c.name!r}: the transformed axis {n} is symbolic; compiled per shape", c.node.input[0])
    irfft = bool(inverse and onesided)
    length = int(np.asarray(length).reshape(-1)[0]) if length is not None else (2 * (n - 1) if irfft else int(n))
    re = x.slice(-1, 0, 1).squeeze(-1)
    im = x.slice(-1, 1, 2).squeeze(-1) if sym.equal(x.shape[-1], 2) else None
    yr, yi = spectral.dft(re, im, a, length=length, inverse=bool(inverse), onesided=bool(onesided),
                          scale=1 / length if inverse else 1.0)
    if yi is None:
        return yr.unsqueeze(-1).cast(x.dtype)
    return F.stack([yr, yi], -1).cast(x.dtype)


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
