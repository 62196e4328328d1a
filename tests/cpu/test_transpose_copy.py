"""The C dialect's tiled transposing copy (`luminal/kernels/cpu/render.py`, `transpose_copy`): a
contiguous copy of a view whose last dim is read with a stride and another dim with stride 1, in
square tiles. Checked against NumPy over permutations, sizes that fill no tile, a sliced source
(an offset and a stride past the shape), symbolic dims, integer and half dtypes, and that the
copies it does not describe (a masked view, a last dim of stride 1) keep their own kernels."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm

pytestmark = pytest.mark.skipif(not lm.devices.get("cpu").available, reason="no C compiler")


DTYPES = {np.float32: lm.f32, np.float64: lm.f64, np.int32: lm.int32, np.float16: lm.f16}


def _tiled(compiled) -> bool:
    return "tr * tc" in "\n".join(compiled.runtime.program.sources)


@pytest.mark.parametrize("shape,perm", [
    ((1024, 512), (1, 0)),  # a plain matrix transpose: 2 KiB source stride
    ((8, 128, 8, 64), (0, 2, 3, 1)),  # a head-split K for Q·Kᵀ
    ((3, 37, 5, 19), (0, 3, 2, 1)),  # sizes that fill no tile; the stride-1 dim is not next to last
    ((2, 3, 4, 5, 6), (4, 1, 3, 0, 2)),
    ((17, 1, 33), (2, 1, 0)),  # a dim of 1 between
])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: np.dtype(d).name)
def test_a_transposing_copy_is_numpy_s(shape, perm, dtype):
    g = lm.Graph("transpose")
    x = g.input("x", shape, DTYPES[dtype])
    g.output(x.permute(*perm), "y")
    compiled = g.compile(device="cpu")
    assert _tiled(compiled)
    a = (np.random.default_rng(0).standard_normal(shape) * 100).astype(dtype)
    a.reshape(-1)[:3] = [0, -1, 7] if np.issubdtype(dtype, np.integer) else [np.nan, -np.inf, -0.0]
    got = compiled({"x": a})[0]
    want = a.transpose(perm)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))  # bits: NaN, -0.0


def test_a_sliced_source_and_symbolic_dims():
    g = lm.Graph("transpose_sliced")
    x = g.input("x", ("n", 40))
    g.output(x[1:, 3:35].T, "y")  # an offset, a row stride of 40 for 32 columns
    compiled = g.compile(device="cpu")
    assert _tiled(compiled)
    for n in (1, 2, 50, 129):
        a = np.random.default_rng(n).standard_normal((n, 40)).astype(np.float32)
        np.testing.assert_array_equal(compiled({"x": a})[0], a[1:, 3:35].T)


@pytest.mark.parametrize("name", ["rows_kept", "padded"])
def test_copies_it_does_not_describe_keep_their_kernels(name):
    g = lm.Graph(name)
    x = g.input("x", (6, 7, 8))
    if name == "rows_kept":  # the last dim still has stride 1: runs, not a transpose
        y, want = x.permute(1, 0, 2), lambda a: a.transpose(1, 0, 2)
    else:  # a masked view: the padded copy's kernel
        y, want = x.pad(((0, 0), (1, 1), (2, 2))).permute(0, 2, 1), lambda a: np.pad(a, ((0, 0), (1, 1), (2, 2))).transpose(0, 2, 1)
    g.output(y, "y")
    compiled = g.compile(device="cpu")
    assert not _tiled(compiled)
    a = np.random.default_rng(0).standard_normal((6, 7, 8)).astype(np.float32)
    np.testing.assert_array_equal(compiled({"x": a})[0], want(a))
