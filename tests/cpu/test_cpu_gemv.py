"""A matrix-vector product (one token's linear layer in decode: M = 1, or a single output column,
N = 1) is recovered as a MatMul, a BLAS call on the cpu backend, not a broadcast-multiply and a
compensated sum: a dim of size 1 is constant along itself whatever its stride."""

import numpy as np
import pytest

import luminal as lm
from luminal.kernels.cpu import build

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


@pytest.mark.parametrize("m,k,n", [(1, 64, 32), (5, 64, 1), (1, 64, 1)])
def test_gemv_is_a_matmul(m, k, n):
    rng = np.random.default_rng(0)
    g = lm.Graph()
    x = g.input("x", (2, m, k))
    w = rng.standard_normal((n, k)).astype(np.float32)
    g.output(x @ g.constant(w, name="w").permute(1, 0))  # a linear layer's weight, transposed
    v = g.input("v", (k, n))
    g.output(x @ v)
    feeds = {"x": rng.standard_normal((2, m, k)).astype(np.float32), "v": rng.standard_normal((k, n)).astype(np.float32)}
    cg = g.compile(device="cpu")
    assert cg.report().ops_after.get("MatMul") == 2 and "KahanSum" not in cg.report().ops_after
    for got, want in zip(cg(feeds), [feeds["x"] @ w.T, feeds["x"] @ feeds["v"]]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
