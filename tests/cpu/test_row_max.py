"""A float row max on `device="cpu"` runs in 16 lanes (`CDialect._lanes_max`) and must keep the
bits of the sequential chain (`_chain`: the first of -0.0 and 0.0 when the max is a zero, NaN when
the row holds one; torch's amax gives the same on x86); rows of at most `SMALL_AXIS` are an
unrolled chain, checked too. Rows shorter than the lanes, with a tail past them, NaN and
infinities at the start, in the lanes and in the tail, all -inf, f32 and f64, and the reduction
inside a softmax."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.kernels.render.kernels import SMALL_AXIS

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not lm.devices.get("cpu").available, reason="no C compiler")


def _chain(row: np.ndarray):
    """The sequential max the kernel promises: an element replaces the max when it is greater or NaN."""
    acc = row.dtype.type(-np.inf)
    for v in row:
        if v > acc or v != v:
            acc = v
    return acc


def _rows(n: int, dtype) -> np.ndarray:
    rng = np.random.default_rng(n)
    a = rng.standard_normal((10, n)).astype(dtype)
    a[1] = -np.inf
    a[2] = -1.0
    a[2, n // 2] = -0.0
    a[2, n - 1] = 0.0  # the first zero is -0.0
    a[3] = -1.0
    a[3, 0] = 0.0
    a[3, n - 1] = -0.0  # the first zero is 0.0
    a[4, 0] = np.nan
    a[5, n - 1] = np.nan  # in the tail, past the lanes
    a[6, n // 2] = np.inf
    a[7, :] = 0.0
    a[7, n // 3] = -0.0
    a[8, n // 2] = np.nan
    a[8, n - 1] = np.inf
    return a


@pytest.mark.parametrize("n", [1, 7, 16, 17, 40, 128, 131])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_the_lanes_keep_the_chain_s_bits(n, dtype):
    g = lm.Graph("row_max")
    x = g.input("x", (10, n), lm.f32 if dtype is np.float32 else lm.f64)
    g.output(x.max(-1), "max")
    compiled = g.compile(device="cpu")
    assert ("lane[" in compiled.runtime.source) == (n > SMALL_AXIS)  # shorter rows: an unrolled element loop
    a = _rows(n, dtype)
    got = compiled({"x": a})[0]
    want = np.array([_chain(row) for row in a], dtype)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(np.uint8), want[ok].view(np.uint8))


def test_a_softmax_of_special_rows_is_torch_s():
    g = lm.Graph("softmax_rows")
    x = g.input("x", (10, 131))
    g.output(x.softmax(-1), "p")
    compiled = g.compile(device="cpu")
    a = _rows(131, np.float32)
    want = torch.softmax(torch.from_numpy(a), -1).numpy()
    np.testing.assert_allclose(compiled({"x": a})[0], want, rtol=1e-6, atol=1e-7, equal_nan=True)
