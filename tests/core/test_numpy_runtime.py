"""The NumPy runtime's own behaviour (device="numpy": "cpu" is the C backend): nothing stale
between calls, nothing of its own leaking out, and the precision setting."""

import numpy as np
import pytest

import luminal as lm


@pytest.mark.parametrize("optimize", [False, True])
def test_values_from_weights_follow_in_place_updates(optimize):
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = lm.Graph()
    x = g.input("x", ("n", 4))
    wc = g.constant(w, name="w")
    mask = g.ones((4, 3), lm.bool_).tril()
    scaled = lm.where(mask, wc.transpose(0, 1) * 2.0, 0.0)  # a Select once optimized
    g.output(x.matmul(scaled), "y")
    compiled = g.compile(device="numpy", optimize=optimize)
    xv = np.ones((2, 4), np.float32)

    def want():
        return xv @ (np.tril(np.ones((4, 3), bool)) * (w.T * 2))

    for _ in range(2):
        np.testing.assert_allclose(compiled(x=xv)[0], want(), rtol=1e-6)
    w *= 3  # in place, as a torch optimizer step or `weight.mul_()` does
    np.testing.assert_allclose(compiled(x=xv)[0], want(), rtol=1e-6)


def test_kept_outputs_are_handed_out_as_copies():
    g = lm.Graph()
    x = g.input("x", (3,))
    table = g.arange(3, dtype=lm.f32) * 2.0  # depends on nothing
    g.output(table, "table")
    g.output(x + table, "y")
    compiled = g.compile(device="numpy", optimize=False)
    first, _ = compiled(x=np.zeros(3, np.float32))
    first[:] = -1  # the caller owns its result
    again, y = compiled(x=np.ones(3, np.float32))
    np.testing.assert_array_equal(again, [0, 2, 4])
    np.testing.assert_array_equal(y, [1, 3, 5])


def test_precision_setting():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 300)).astype(np.float32), rng.standard_normal((300, 5)).astype(np.float32)
    g = lm.Graph()
    g.output(g.input("a", (8, 300)).matmul(g.input("b", (300, 5))), "c")
    compiled = g.compile(device="numpy")
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert lm.get_precision() == "float64"
    try:
        wide = compiled(a=a, b=b)[0]
        lm.set_precision("float32")
        narrow = compiled(a=a, b=b)[0]
    finally:
        lm.set_precision(None)
    assert wide.dtype == narrow.dtype == np.float32
    np.testing.assert_array_equal(wide, exact.astype(np.float32))  # rounded once
    np.testing.assert_allclose(narrow, exact, rtol=1e-4, atol=1e-4)
    with pytest.raises(lm.LuminalError, match="'tf32'"):
        lm.set_precision("tf32")


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_exponentials_at_each_precision(precision):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 70000)) * 3).astype(np.float32)  # several pieces, threaded
    g = lm.Graph()
    xi = g.input("x", (4, 70000))
    g.output(xi.silu(), "silu")
    g.output(xi.softmax(-1), "softmax")
    g.output(xi.exp() * 0.5, "exp")
    compiled = g.compile(device="numpy")
    xd = x.astype(np.float64)
    want = [xd / (1 + np.exp(-xd)), np.exp(xd - xd.max(-1, keepdims=True)), np.exp(xd) * 0.5]
    want[1] /= want[1].sum(-1, keepdims=True)
    lm.set_precision(precision)
    try:
        got = compiled(x=x)
    finally:
        lm.set_precision(None)
    for g_, w in zip(got, want):
        assert g_.dtype == np.float32
        if precision == "float64":  # exact but for the final rounding
            np.testing.assert_array_less(np.abs(g_ - w), 0.5 * np.spacing(np.abs(w).astype(np.float32)) + 1e-30)
        else:  # f32 exps of f32-rounded arguments, as PyTorch's
            np.testing.assert_allclose(g_, w, rtol=1e-5, atol=0)


def test_float64_graphs_stay_float64_at_float32_precision():
    x = np.linspace(-5, 5, 1001)
    g = lm.Graph()
    xi = g.input("x", (1001,), lm.f64)
    g.output(xi.silu(), "silu")
    g.output(xi.matmul(xi.reshape(1001, 1)), "dot")
    compiled = g.compile(device="numpy")
    lm.set_precision("float32")
    try:
        silu, dot = compiled(x=x)
    finally:
        lm.set_precision(None)
    assert silu.dtype == dot.dtype == np.float64
    np.testing.assert_allclose(silu, x / (1 + np.exp(-x)), rtol=1e-14)
    np.testing.assert_allclose(dot, [x @ x], rtol=1e-14)


def test_select_and_concat_keep_edge_values():
    """where and concat, optimized into Select (inside a region here) and Concat, move NaN, ±inf
    and -0.0 unchanged, on empty and 0-d shapes too, as the unoptimized graph does."""
    g = lm.Graph()
    x, y, s = g.input("x", ("n", 3)), g.input("y", (2, 3)), g.input("s", ())
    picked = lm.where(x.lt(0.5), x, -np.inf).mul(2.0)
    g.output(lm.concat([y, picked, y], 0), "cat")
    g.output(lm.where(s.lt(0.0), s, -0.0), "scalar")
    compiled = g.compile(device="numpy")
    ops = compiled.report().ops_after
    assert "Gather" not in ops and "Scatter" not in ops and ops.get("Concat") == 2, ops
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -2.0], np.float32)
    rng = np.random.default_rng(0)
    for n in (0, 1, 4):
        feeds = {"x": rng.choice(special, (n, 3)), "y": rng.choice(special, (2, 3)), "s": np.float32(rng.choice(special))}
        for got, want in zip(compiled(feeds), g.run(feeds)):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_window_sums_do_not_materialize_the_window_product():
    """A float WindowReduce (a depthwise conv) sums its float64 products as einsum goes, in a
    fraction of the product's memory (it took 2.4 GB of fresh pages on a 16x32x128x128 conv):
    rounded to the f32 output, the bits of materializing the float64 product and summing it,
    NaN, ±inf and -0.0 included; in float64 the sum's order differs (the last bit of ~1% of the
    sums)."""
    import tracemalloc

    from numpy.lib.stride_tricks import sliding_window_view

    from luminal.runtime.fused_ops import _window_sum

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8, 66, 66)).astype(np.float32)
    x[0, 0, :3, :3] = [[np.nan, np.inf, -np.inf], [-0.0, 0.0, 1e38], [1e38, 3e38, -0.0]]
    x[1, 1, :3, :3] = -0.0
    w = rng.standard_normal((8, 3, 3)).astype(np.float32)
    windows = sliding_window_view(x, (3, 3), axis=(2, 3))  # 4x8x64x64 windows of 3x3
    taps = np.broadcast_to(w[None, :, None, None], windows.shape)
    want = np.sum(windows.astype(np.float64) * taps.astype(np.float64), axis=(4, 5), dtype=np.float64)
    tracemalloc.start()
    got = _window_sum([windows, taps], 2)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-13)  # cancellation: the terms are O(1)
    assert got.dtype == np.float64 and np.signbit(got[1, 1, 0, 0]) == np.signbit(want[1, 1, 0, 0])
    assert peak < windows.size * 8 / 4  # the product in float64 would be windows.size * 8 bytes
    np.testing.assert_array_equal(_window_sum([windows], 2), np.sum(windows.astype(np.float64), axis=(4, 5)))


def test_matmul_of_a_broadcast_weight_over_an_empty_batch():
    # the weight expanded over a batch dim of size 0: stride 0 like any broadcast, but no matrix in it
    g = lm.Graph()
    x = g.input("x", (0, 2, 3))
    w = g.constant(np.ones((3, 4), np.float32)).reshape((1, 3, 4)).expand((0, 3, 4))
    g.output(x.matmul(w), "y")
    for optimize in (False, True):
        (y,) = g.compile(device="numpy", optimize=optimize)(x=np.zeros((0, 2, 3), np.float32))
        assert y.shape == (0, 2, 4)
