"""Elementwise kernels whose last dim has a few elements (an interleave: a stack along a new last
axis, as a strided transposed convolution's phases are joined) on the compiled CPU backend: the
vector loop runs over the dim before it, the last dim unrolled with constant indices. Bitwise
against the NumPy runtime, edge values included, and with the rows split over threads."""

import numpy as np
import pytest

import luminal as lm
from luminal.builder import functional as F
from luminal.hlir.dtypes import DType
from luminal.kernels.cpu import build, program
from luminal.kernels.cpu import runtime as cpu_runtime

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


def _graph():
    g = lm.Graph("small_last")
    a, b, c = (g.input(n, (2, 3, 5, 7)) for n in "abc")
    i = g.input("i", (2, 3, 5, 7, 3), lm.int64)
    g.output(F.stack([a, b], -1))  # a pair per element: the concat's select on the last index
    g.output(F.stack([a - c, b * c, c.abs().sqrt()], -1).reshape((2, 3, 5, 21)))
    g.output(F.stack([a, b, c, a + b], -1)[:, :, 1:, ::2] * 2)  # a strided read, a mask-free slice
    g.output(F.stack([a, c], -1).gather(4, i[..., :2]))
    g.output(a.reshape((2, 3, 35, 1)).expand((2, 3, 35, 3)) + i.reshape((2, 3, 35, 3)).cast(DType.F32))
    e = g.input("e", (4, 0))
    g.output(F.stack([e, e * 2], -1))  # empty: no rows of the vector loop
    return g


def _feeds():
    rng = np.random.default_rng(3)
    feeds = {n: rng.standard_normal((2, 3, 5, 7)).astype(np.float32) for n in "abc"}
    feeds["a"].flat[:6] = [np.nan, -0.0, np.inf, -np.inf, 0.0, 1e-40]
    feeds["b"].flat[:6] = [-0.0, np.nan, -np.inf, 5.0, -0.0, np.inf]
    feeds["i"] = rng.integers(0, 2, (2, 3, 5, 7, 3))
    feeds["e"] = np.zeros((4, 0), np.float32)
    return feeds


def _check(cg, g, feeds):
    for (name, _), out, want in zip(g.outputs, cg(feeds), g.run(feeds)):
        assert out.dtype == want.dtype and out.shape == want.shape, name
        np.testing.assert_array_equal(out.view(np.uint32) if out.dtype == np.float32 else out,
                                      want.view(np.uint32) if want.dtype == np.float32 else want, err_msg=name)


def test_a_small_last_dim_is_unrolled_and_matches_numpy():
    g = _graph()
    cg = g.compile(device="cpu")
    assert "* 2LL + 1LL]" in cg.runtime.source  # the pair's second element, a constant index
    _check(cg, g, _feeds())


def test_a_small_last_dim_over_three_threads(monkeypatch):
    from luminal.kernels.render import dialect

    monkeypatch.setattr(dialect, "PAR_MIN", 1)
    monkeypatch.setattr(program, "DRIVER", program.DRIVER.replace("omp_set_dynamic(!lum_blas_in_team)", "omp_set_dynamic(0)"))
    monkeypatch.setattr(cpu_runtime, "threads", lambda: 3)
    g = _graph()
    _check(g.compile(device="cpu"), g, _feeds())
