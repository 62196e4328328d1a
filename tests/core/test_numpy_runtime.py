"""The NumPy runtime's own behaviour: the values it keeps between calls (nothing stale, nothing
leaking out) and the matmul precision setting."""

import numpy as np
import pytest

import luminal as lm


@pytest.mark.parametrize("optimize", [False, True])
def test_values_from_weights_follow_in_place_updates(optimize):
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = lm.Graph()
    x = g.input("x", ("n", 4))
    wc = g.constant(w, name="w")
    mask = g.ones((4, 3), lm.bool_).tril()  # pure: may be kept
    scaled = lm.where(mask, wc.transpose(0, 1) * 2.0, 0.0)  # from a view of a weight: not kept
    g.output(x.matmul(scaled), "y")
    compiled = g.compile(optimize=optimize)
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
    table = g.arange(3, dtype=lm.f32) * 2.0  # depends on nothing: computed once
    g.output(table, "table")
    g.output(x + table, "y")
    compiled = g.compile(optimize=False)
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
    compiled = g.compile()
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert lm.get_precision() == "float64"
    try:
        wide = compiled(a=a, b=b)[0]
        lm.set_precision("float32")
        narrow = compiled(a=a, b=b)[0]
    finally:
        lm.set_precision("float64")
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
    compiled = g.compile()
    xd = x.astype(np.float64)
    want = [xd / (1 + np.exp(-xd)), np.exp(xd - xd.max(-1, keepdims=True)), np.exp(xd) * 0.5]
    want[1] /= want[1].sum(-1, keepdims=True)
    lm.set_precision(precision)
    try:
        got = compiled(x=x)
    finally:
        lm.set_precision("float64")
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
    compiled = g.compile()
    lm.set_precision("float32")
    try:
        silu, dot = compiled(x=x)
    finally:
        lm.set_precision("float64")
    assert silu.dtype == dot.dtype == np.float64
    np.testing.assert_allclose(silu, x / (1 + np.exp(-x)), rtol=1e-14)
    np.testing.assert_allclose(dot, [x @ x], rtol=1e-14)
