"""Interpolation's tap tables are torch's bit for bit, so non-finite inputs propagate as in eager.

`aten_vision_taps` ports torch's CPU index/weight computations in their C types, with the fused
multiply-adds torch's AVX2/AVX512 builds contract (`torch_contracts_fma`). A weight that is a
rounding residue in torch (6.5e-15 at a cubic's zero crossing) and exactly 0 in a port turns an
inf input into NaN; a same-size dim that torch skips (antialiased) or reads twice with weight 0
(bilinear) decides where a NaN spreads. The tables are checked against eager with one-hot
probes, then whole resizes with +-inf and NaN inputs through both frontends.
"""

from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_helpers import assert_same, compile_by

import luminal
from luminal.errors import UnsupportedError
from luminal.frontends.torch import aten_vision_taps as taps


def _eager_matrix(n_in, n_out, dtype, **kw):
    """torch's resize of the last dim as an (n_out, n_in) matrix: one one-hot probe per input."""
    probes = torch.eye(n_in, dtype=dtype).reshape(n_in, 1, 1, n_in)
    return F.interpolate(probes, size=(1, n_out), **kw)[:, 0, 0].T.numpy()


def _tap_matrix(table, n_in, n_out, ft):
    if table is None:  # a same-size antialiased dim: skipped
        return np.eye(n_in, dtype=ft)
    idx, w, valid = (table + (None, None))[:3] if isinstance(table, tuple) else (table, None, None)
    m = np.zeros((n_out, n_in), ft)
    for o in range(n_out):
        for t in range(idx.shape[1]):
            if valid is None or valid[o, t]:
                m[o, idx[o, t]] += ft(1) if w is None else w[o, t]  # in tap order, as torch sums
    return m


MODES = {
    "bilinear": lambda ft, i, o, ac: taps.linear_taps(ft, i, o, ac, None),
    "bicubic": lambda ft, i, o, ac: taps.cubic_taps(ft, i, o, ac, None),
    "bilinear-aa": lambda ft, i, o, ac: taps.aa_taps(ft, i, o, ac, None, False),
    "bicubic-aa": lambda ft, i, o, ac: taps.aa_taps(ft, i, o, ac, None, True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_tap_tables_are_eagers_bit_for_bit(mode, dtype):
    ft = np.float32 if dtype == torch.float32 else np.float64
    for n_in in range(1, 12):
        for n_out in range(1, 15):
            for ac in (False, True):
                want = _eager_matrix(n_in, n_out, dtype, mode=mode.split("-")[0], align_corners=ac,
                                     antialias=mode.endswith("aa"))
                got = _tap_matrix(MODES[mode](ft, n_in, n_out, ac), n_in, n_out, ft)
                np.testing.assert_array_equal(got, want, err_msg=f"{mode} {n_in} -> {n_out} ac={ac}")


@pytest.mark.parametrize("nsp", [1, 2, 3])
def test_nearest_indices_are_eagers(nsp):
    for n_in in range(1, 10):
        for scale in (None, 0.3, 0.7, 1.3, 1.5, 2.1, 2.5):
            for exact in (False, True):
                if scale and int(n_in * scale) < 1:
                    continue
                x = torch.arange(n_in, dtype=torch.float32).expand((1, 2) + (2,) * (nsp - 1) + (n_in,))
                kw = {"scale_factor": (1,) * (nsp - 1) + (scale,)} if scale else {"size": (2,) * (nsp - 1) + (2 * n_in - 1,)}
                want = F.interpolate(x.contiguous(), mode="nearest-exact" if exact else "nearest", **kw)
                want = want[0, 0].reshape(-1, want.shape[-1])[0]
                got = taps.nearest_taps(np.float32, n_in, want.shape[0], scale, exact, nsp)[:, 0]
                np.testing.assert_array_equal(got, want.numpy().astype(np.int64), err_msg=f"{n_in} x{scale}")


def _fma_exact(ft, a, b, c):
    """Reference: a*b + c in rationals, rounded once (float32: nearest-even among float32s)."""
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    near = float(exact)  # correctly rounded double
    if ft is np.float64:
        return np.float64(near)
    f = np.float32(near)
    if Fraction(near) != exact:  # a double that is a float32 tie would round twice
        for g in (np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))):
            if (float(f) + float(g)) / 2 == near:
                return g if (g > f) == (exact > near) else f
    return f


@pytest.mark.parametrize("ft", [np.float32, np.float64])
def test_fma_rounds_once(ft):
    rng = np.random.default_rng(0)
    n = 4000
    a, b = (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n)).astype(ft), rng.standard_normal(n).astype(ft)
    c = (-(a.astype(np.float64) * b) * (1 + rng.integers(-3, 4, n) * np.finfo(ft).eps)).astype(ft)  # cancellation
    c[::4] = rng.standard_normal(n // 4).astype(ft)
    a[:8], b[:8] = ft(1) + np.finfo(ft).eps, ft(1) - np.finfo(ft).eps  # exact products at ties
    c[:8] = [ft(-1), ft(1), ft(0), ft(0.5), ft(-0.5), np.finfo(ft).eps, -np.finfo(ft).eps, ft(2)]
    got = taps.fma(ft, a, b, c)
    want = np.array([_fma_exact(ft, *v) for v in zip(a, b, c)], ft)
    np.testing.assert_array_equal(got, want)


def test_zero_crossing_residue():
    """7 -> 3 bicubic-aa: torch's weight at the filter's zero crossing is an FMA residue."""
    _, w, valid = taps.aa_taps(np.float32, 7, 3, False, None, True)
    residue = w[2][valid[2]][2]  # output 2 reads input 3 at |x| = 1 of the filter
    assert (residue != 0) == taps.torch_contracts_fma()


NONFINITE = [
    lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", antialias=True),
    lambda x: F.interpolate(x, size=(2, 3), mode="bicubic", antialias=True),
    lambda x: F.interpolate(x, size=(3, 4), mode="bicubic", antialias=True, align_corners=True),
    lambda x: F.interpolate(x, size=(9, 3), mode="bicubic", antialias=True),  # up and down
    lambda x: F.interpolate(x, size=(5, 3), mode="bicubic", antialias=True),  # a same-size dim
    lambda x: F.interpolate(x, size=(3, 7), mode="bilinear", antialias=True),
    lambda x: F.interpolate(x, size=(9, 11), mode="bilinear"),
    lambda x: F.interpolate(x, size=(5, 4), mode="bilinear"),  # same-size H: weight-0 taps
    lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", align_corners=True),
    lambda x: F.interpolate(x, size=(9, 11), mode="bicubic"),
    lambda x: F.interpolate(x, size=(5, 7), mode="bicubic"),  # integer sources: zero weights
    lambda x: F.interpolate(x, size=(3, 4), mode="bicubic", align_corners=True),
    lambda x: F.interpolate(x, size=(8, 5), mode="nearest-exact"),
    lambda x: F.interpolate(x[:, :, 0], size=29, mode="linear"),  # torch's decomposition (a lerp) gives NaN
    lambda x: F.interpolate(x[:, :, 0], size=3, mode="linear", align_corners=True),
    lambda x: F.interpolate(x.unsqueeze(2).expand(-1, -1, 2, -1, -1), size=(3, 6, 9), mode="trilinear"),
]


class Resizes(torch.nn.Module):
    def forward(self, x):
        return tuple(f(x) for f in NONFINITE)


def _nonfinite_input():
    x = torch.randn(2, 3, 5, 7, generator=torch.Generator().manual_seed(3))
    x[0, 0, 2, 3] = float("inf")
    x[0, 1, 0, 0] = -float("inf")
    x[0, 2, 4, 6] = float("nan")
    x[1, 0, 1, 2], x[1, 0, 1, 4] = float("inf"), -float("inf")  # inf - inf in one window
    x[1, 1, 3, :] = float("inf")
    x[1, 2, :, 5] = float("nan")
    return x


@pytest.mark.parametrize("path", ["export-numpy", "export-cpu", "dynamo"])
def test_nonfinite_inputs_propagate_as_in_eager(path):
    x = _nonfinite_input()
    model = Resizes()
    want = model(x)
    assert any(w.isinf().any() for w in want) and any(w.isnan().any() for w in want)
    got = compile_by(path, model, x)
    for i, (g, w) in enumerate(zip(got, want)):
        assert torch.equal(g.isnan(), w.isnan()) and torch.equal(g.isinf(), w.isinf()), f"case {i}"
        assert_same(g, w)


def test_antialiased_width_one_is_refused():
    """torch's CPU aa kernel repeats the first output row when the output width is 1: not a
    resize, so luminal refuses it rather than answer differently from eager."""
    x = torch.randn(1, 2, 4, 3)
    model = torch.nn.Module()
    model.forward = lambda x: F.interpolate(x, size=(6, 1), mode="bilinear", antialias=True)
    with pytest.raises(UnsupportedError, match="output width is 1"):
        luminal.compile(model, (x,), device="numpy")


HALF_CASES = [
    lambda x: F.interpolate(x, size=(9, 11), mode="bicubic"),  # weights stored in the input type: exact
    lambda x: F.interpolate(x, size=(3, 4), mode="bicubic", align_corners=True),
    lambda x: F.interpolate(x[:, :, 0], size=29, mode="linear"),  # 1-d: exact
    lambda x: F.interpolate(x, size=(9, 11), mode="bilinear"),  # torch's non-separable kernel: 1 ulp
    lambda x: F.interpolate(x, size=(8, 5), mode="nearest-exact"),
]


class HalfResizes(torch.nn.Module):
    def forward(self, x):
        return tuple(f(x) for f in HALF_CASES)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduced_precision_resizes(dtype):
    """f16/bf16: the weights rounded to the input's type, sums in float, one rounding at the end
    (torch's opmath); the same non-finite pattern as eager, values within one ulp."""
    x = _nonfinite_input().to(dtype)
    model = HalfResizes()
    want = model(x)
    got = luminal.compile(model, (x,), device="numpy")(x)
    ulp = 2.0 ** (-10 if dtype == torch.float16 else -7)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and torch.equal(g.isnan(), w.isnan()) and torch.equal(g.isinf(), w.isinf())
        fin = w.isfinite()
        err = (g.float() - w.float()).abs()[fin] / w.float().abs()[fin].clamp(min=1.0)
        assert err.max() <= (0 if i in (0, 1, 2, 4) else ulp), f"case {i}: {err.max()}"
    with pytest.raises(UnsupportedError, match="does not implement"):
        luminal.compile(Resizes(), (x,), device="numpy")  # antialiased f16/bf16: torch raises too
