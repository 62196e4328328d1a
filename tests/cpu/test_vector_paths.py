"""Loops the C backend renders so that GCC vectorizes them, each checked for the values it must
keep: a Select computing both of its values (`cstyle.select`) and bools read through their byte
(`CDialect.bool_load`), sums over an axis that is not the input's innermost run column-wise
(`CDialect.column_sums`), outputs that are reshapes of a kernel's result written in place
(`steps.written_in_place`), and a plain transpose feeding a GEMM kept out of the im2col path.
Against the NumPy runtime (the spec) with NaN, infinities, -0.0, empty axes and odd widths."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal import devices
from luminal.builder.functional import where
from luminal.errors import DivisionByZero

pytestmark = pytest.mark.skipif(not devices.get("cpu").available, reason="no C compiler")


@pytest.fixture(autouse=True)
def _built_now(monkeypatch):
    """The C library at once (not after the tiered NumPy runtime's first calls), not from the cache."""
    monkeypatch.setenv("LUMINAL_TIERED", "0")
    monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "0")


def _same(got, want, what):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=what)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0, err_msg=what)


def test_a_masked_exp_computes_both_values_and_keeps_the_masked_ones_out():
    """softmax's masked exp: where(mask, 0, exp(s + m)) with a per-row bool mask. Both values are
    computed (the exp of a masked row may be inf or NaN) and the mask's zeros are exact."""
    g = lm.Graph("masked-exp")
    mask, s, m = g.input("mask", (4, 64, 1), lm.bool_), g.input("s", (4, 64, 96)), g.input("m", (4, 64, 1))
    g.output(where(mask.expand((4, 64, 96)), 0.0, (s + m.expand((4, 64, 96))).exp()), "p")
    rng = np.random.default_rng(3)
    feeds = {"mask": rng.random((4, 64, 1)) < 0.3, "s": rng.standard_normal((4, 64, 96)).astype(np.float32),
             "m": rng.standard_normal((4, 64, 1)).astype(np.float32)}
    feeds["s"][feeds["mask"][:, :, 0]] = np.inf  # under the mask: exp(inf) = inf, never seen
    feeds["s"][0, 1, :3] = [np.nan, -np.inf, 1e4]
    feeds["mask"][0, 1] = False  # a row out of the mask with NaN, exp(-inf) = 0 and an overflow
    cpu = g.compile(device="cpu")
    assert "lum_s1" in cpu.runtime.source and "(const unsigned char*)" in cpu.runtime.source
    got, want = cpu(feeds)[0], g.run(feeds)[0]
    _same(got, want, "masked exp")
    assert (got[np.broadcast_to(feeds["mask"], got.shape)] == 0).all()
    assert not np.signbit(got[np.broadcast_to(feeds["mask"], got.shape)]).any()


@pytest.mark.parametrize("form", ["floor", "fmod"])
def test_an_integer_remainder_under_a_where_raises_as_the_spec_does(form):
    """where(b != 0, a % b, -1): torch computes a % b everywhere and raises on a divisor of 0,
    so do the NumPy runtime, the C and CUDA (on the emulator; and NVRTC compiles it): the
    remainder sits inside the Select's region (Python's floor mod reads it three times, fmod
    once), and a Select whose value holds one computes both values in every dialect; without
    zeros, the values."""
    g = lm.Graph("guarded-mod")
    a, b = g.input("a", (300,), lm.int32), g.input("b", (300,), lm.int32)
    g.output(where(b.ne(0), a % b if form == "floor" else a.fmod(b), -1), "r")
    compiled = {d: g.compile(device=d) for d in ("cpu", "cuda-emulator")}
    regions = [n for n in compiled["cpu"].outputs if n.op.name == "FUSED_ELEMENTWISE"]
    assert regions and "Mod" in repr(regions[0].arg), "the remainder is inside the Select's region"
    feeds = {"a": np.arange(-150, 150, dtype=np.int32), "b": np.tile(np.array([0, 3, -7], np.int32), 100)}
    for run in (g.run, *compiled.values()):
        with pytest.raises(DivisionByZero):
            run(feeds)
    feeds["b"][feeds["b"] == 0] = 5
    for run in compiled.values():
        np.testing.assert_array_equal(run(feeds)[0], g.run(feeds)[0])
    nvrtc = pytest.importorskip("luminal.kernels.nvrtc")
    if nvrtc.nvrtc_available():
        from luminal.kernels.plan import KernelPlan

        nvrtc.compile_cuda(KernelPlan.build(compiled["cpu"].outputs).source, "sm_90")


@pytest.mark.parametrize("dtype", [lm.f32, lm.f16, lm.bf16, lm.f64])
def test_sums_over_rows_run_column_wise(dtype):
    """A bias's gradient ((1024, 1408) summed over its rows, here (70, 300): two blocks of
    columns, the last partial), a norm's over two leading axes, an odd width of 17, a symbolic
    count of rows (0 included), NaN, infinities and -0.0 in the input."""
    g = lm.Graph("column-sums")
    x, y = g.input("x", ("n", 300), dtype), g.input("y", (12, 20, 17), dtype)
    g.output(x.sum(0), "bias")
    g.output(y.sum((0, 1)), "norm")
    g.output(y.sum(1), "middle")
    cpu = g.compile(device="cpu")
    assert cpu.runtime.source.count("CB = 256") == 3  # (over 8 rows: fewer are unrolled elements)
    rng = np.random.default_rng(4)
    for n in (70, 1, 0):
        xs = rng.standard_normal((n, 300)).astype(np.float32)
        if n > 1:
            xs[3, 5], xs[4, 6], xs[5, 6], xs[6, 7] = np.nan, np.inf, -np.inf, -0.0
        feeds = {"x": xs.astype(dtype.numpy), "y": rng.standard_normal((12, 20, 17)).astype(dtype.numpy)}
        for got, want, name in zip(cpu(feeds), g.run(feeds), ("bias", "norm", "middle")):
            assert got.dtype == want.dtype and got.shape == want.shape, name
            tol = 2e-6 if dtype in (lm.f32, lm.f64) else 1e-2
            np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64)), err_msg=name)
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol, err_msg=f"{name} n={n}")


def test_a_reshaped_result_is_written_in_place_of_its_output(monkeypatch):
    """Outputs that are reshapes of a kernel's result, explicit copies (an FX graph's clone) or
    bare views (training's saved activations), are that kernel's buffer: a copy step fewer each
    than with every output copied. The same result returned twice, a reshape of an input and a
    transposed view keep their copies; every output holds its values, and each call returns
    arrays of its own."""
    from luminal.kernels.cpu import runtime

    g = lm.Graph("in-place-outputs")
    x, w = g.input("x", (8, 16, 32)), g.input("w", (32, 24))
    h = (x @ w).sigmoid() * x.sum(-1, keepdim=True)
    g.output(h.reshape((128, 24)).contiguous(), "flat")  # as an FX graph's clone of a saved activation
    g.output(h.reshape((8, 384)).contiguous(), "again")  # the same node: a copy of its own
    g.output(x.reshape((128, 32)).contiguous(), "input")  # an input: its copy stays
    g.output(h.permute(0, 2, 1).contiguous(), "transposed")  # not a reshape
    t = (x @ w).tanh()
    g.output(t.reshape((128, 24)), "view")  # a bare view (aot_autograd's saved `view` of an activation)
    g.output(t.reshape((8, 384)), "view again")  # the same node: a copy of its own
    names = ("flat", "again", "input", "transposed", "view", "view again")
    cpu = g.compile(device="cpu")
    monkeypatch.setattr(runtime, "written_in_place", list)
    copied = g.compile(device="cpu")

    def copies(c):
        return sum(s.name.startswith("contiguous") for s in c.runtime.program.steps)

    assert copies(cpu) == copies(copied) - 2, [s.name for s in cpu.runtime.program.steps]
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((8, 16, 32)).astype(np.float32), "w": rng.standard_normal((32, 24)).astype(np.float32)}
    got, want = cpu(feeds), copied(feeds)
    for a, b, name in zip(got, want, names):
        assert a.shape == b.shape, name
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert not np.shares_memory(got[0], got[1]) and not np.shares_memory(got[4], got[5])
    got[0][:] = -1  # a returned array is the caller's: the next call's results are new
    np.testing.assert_array_equal(cpu(feeds)[0], want[0])


def test_a_transposed_operand_is_a_copy_and_a_batched_gemm_not_an_im2col():
    """q @ k^T with k^T materialized (training's attention): the copy is a permutation of k,
    every element once, so the GEMM reads it whole (no direct-conv tiles per batch element)."""
    g = lm.Graph("qkt")
    q, k = g.input("q", (2, 4, 32, 16)), g.input("k", (2, 4, 32, 16))
    g.output(q @ k.permute(0, 1, 3, 2).contiguous(), "s")
    cpu = g.compile(device="cpu")
    assert "lum_dconv" not in cpu.runtime.source
    rng = np.random.default_rng(6)
    feeds = {"q": rng.standard_normal((2, 4, 32, 16)).astype(np.float32), "k": rng.standard_normal((2, 4, 32, 16)).astype(np.float32)}
    np.testing.assert_allclose(cpu(feeds)[0], g.run(feeds)[0], rtol=1e-5, atol=1e-5)
