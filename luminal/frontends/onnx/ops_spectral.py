"""Spectral ops built on DFT (ops_signal): STFT (frames as a free unfold view, times the window,
then the DFT GEMMs over each frame) and MelWeightMatrix (a constant of its known inputs, computed
as onnx's reference computes it)."""

from __future__ import annotations

import numpy as np

from luminal.frontends.onnx.ops_signal import _dft
from luminal.frontends.onnx.registry import onnx_op
from luminal.frontends.onnx.values import Known
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType


def _scalar(v, what: str, c) -> int:
    a = np.asarray(v).reshape(-1)
    if a.size != 1:
        c.fail(f"{what} must hold one value, got shape {np.asarray(v).shape}")
    return int(a[0])


@onnx_op("STFT", since=17, known=(1, 3))
def stft(c, signal, frame_step, window=None, frame_length=None, *, onesided=1):
    """signal (B, L, 1 | 2) -> (B, 1 + (L - frame_length) // frame_step, bins, 2): the DFT of every
    frame of frame_length samples, frame_step apart, times the window (bins: frame_length // 2 + 1
    when onesided, else frame_length)."""
    if signal.ndim != 3 or not (sym.equal(signal.shape[2], 1) or sym.equal(signal.shape[2], 2)):
        c.fail(f"signal of shape {signal.shape} is not (batch, length, 1 or 2)")
    step = _scalar(frame_step, "frame_step", c)
    if step < 1:
        c.fail(f"frame_step {step} is not positive")
    if window is not None and (window.ndim != 1 or not sym.is_static(window.shape[0])):
        c.fail(f"window of shape {window.shape} is not a static 1-D tensor")
    if frame_length is not None:
        size = _scalar(frame_length, "frame_length", c)
        if window is not None and int(window.shape[0]) != size:
            c.fail(f"window length {window.shape[0]} differs from frame_length {size}")
    elif window is not None:
        size = int(window.shape[0])
    else:
        if not sym.is_static(signal.shape[1]):
            c.fail("without window or frame_length the frame is the whole signal, whose length must be static")
        size = int(signal.shape[1])
    if size < 1 or (sym.is_static(signal.shape[1]) and size > int(signal.shape[1])):
        c.fail(f"frame length {size} is not within the signal length {signal.shape[1]}")
    if onesided and sym.equal(signal.shape[2], 2):
        c.fail("onesided output needs a real signal (last dim 1)")
    frames = signal.unfold(1, size, step).permute(0, 1, 3, 2)  # (B, F, size, 1|2)
    if window is not None:
        frames = frames.mul(window.cast(signal.dtype).reshape((size, 1)))
    return _dft(c, frames, np.array([size]), 2, 0, int(bool(onesided)))


@onnx_op("MelWeightMatrix", since=17, known=(0, 1, 2, 3, 4))
def mel_weight_matrix(c, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *,
                      output_datatype=1):
    """(dft_length // 2 + 1, num_mel_bins) triangular filters on the mel scale; the arithmetic of
    onnx's reference (in the inputs' own dtypes), so the bin edges floor alike."""
    mels, length, rate = (_scalar(v, w, c) for v, w in ((num_mel_bins, "num_mel_bins"), (dft_length, "dft_length"),
                                                        (sample_rate, "sample_rate")))
    if mels < 1 or length < 1 or rate < 1:
        c.fail("num_mel_bins, dft_length and sample_rate must be positive")
    lower, upper = np.asarray(lower_edge_hertz).reshape(()), np.asarray(upper_edge_hertz).reshape(())
    length_arr = np.asarray(dft_length).reshape(())
    bins = np.arange(0, mels + 2)
    low_mel = 2595 * np.log1p(lower / 700) / np.log(10)
    high_mel = 2595 * np.log1p(upper / 700) / np.log(10)
    step = (high_mel - low_mel) / bins.shape[0]
    hz = 700 * np.expm1((bins * step + low_mel) / 2595 * np.log(10))
    edges = ((length_arr + 1) * hz // np.asarray(sample_rate).reshape(())).astype(int)
    spectrum = length // 2 + 1
    if edges.min() < 0:
        c.fail(f"a mel band edge ({edges.min()}) is negative")
    out = np.zeros((spectrum, mels))
    try:
        for i in range(mels):
            lo, mid, hi = edges[i], edges[i + 1], edges[i + 2]
            if mid == lo:
                out[mid, i] = 1
            else:
                for j in range(lo, mid + 1):
                    out[j, i] = float(j - lo) / float(mid - lo)
            if hi > mid:
                for j in range(mid, hi):
                    out[j, i] = float(hi - j) / float(hi - mid)
    except IndexError:
        c.fail(f"the mel band edges (up to {edges.max()}) fall outside the {spectrum} spectrogram bins")
    dtype = c.dtype(output_datatype)
    if dtype is DType.BOOL:
        c.fail("output_datatype must be numeric")
    return Known(out.astype(dtype.numpy), dtype)


# cosine-sum windows: w[n] = sum_k (-1)^k a_k cos(2 pi k n / N), N = size (periodic) or size - 1
_WINDOWS = {"HannWindow": (0.5, 0.5), "HammingWindow": (25 / 46, 21 / 46), "BlackmanWindow": (0.42, 0.5, 0.08)}


def _window(coefficients):
    def lower(c, size, *, output_datatype=1, periodic=1):
        n = _scalar(size, "size", c)
        if n < 1:
            c.fail(f"size must be positive, got {n}")  # as ONNX's shape inference
        dtype = c.dtype(output_datatype)
        if dtype is DType.BOOL:
            c.fail("output_datatype must be numeric")
        period = float(n if periodic else n - 1)
        k = np.arange(n, dtype=np.float64)
        out = np.zeros(n)
        with np.errstate(invalid="ignore", divide="ignore"):  # size 1, symmetric: 0 / 0, NaN as onnx's reference
            for i, a in enumerate(coefficients):  # in float64 as the reference, rounded once
                out += (-1) ** i * a * np.cos(2 * np.pi * i * k / period)
        return Known(out.astype(dtype.numpy), dtype)

    return lower


for _name, _coefficients in _WINDOWS.items():
    onnx_op(_name, since=17, known=(0,))(_window(_coefficients))
