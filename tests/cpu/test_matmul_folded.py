"""A batch of GEMMs sharing one B (an LSTM's input projection over its time steps: (T, 1, K) @
(K, 4H)) runs as one GEMM of batch * M rows (`render._folded_rows`) where A's rows run on at one
stride across the batch, reading B once; elsewhere one GEMM per batch element, as before. Both
against NumPy in float64, NaN and infinities included, at both precisions."""

import numpy as np
import pytest

import luminal as lm
from luminal.kernels.cpu import build

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


def _special(a: np.ndarray) -> np.ndarray:
    flat = a.reshape(-1)
    flat[:3] = np.nan, np.inf, -np.inf
    flat[3] = -0.0
    return a


def _matmul_steps(cg) -> list[str]:
    return [s.name for s in cg.runtime.program.steps if s.output.op.name == "MAT_MUL"]


CASES = {
    # name: (A's shape as given, how A is read, B's shape, folded)
    "time_steps_m1": ((7, 1, 12), None, (12, 10), True),  # (T, 1, K) @ (K, N)
    "rows_contiguous_across_batch": ((3, 4, 12), None, (12, 10), True),  # (B, M, K), M > 1
    "two_batch_dims": ((2, 3, 5, 12), None, (12, 10), True),
    "a_transposed_columns": ((12, 7), "t_then_unsqueeze", (12, 10), True),  # A from (K, T): a transposed matrix
    "batch_not_outermost": ((4, 3, 12), "swap_batch_and_m", (12, 10), False),  # rows do not run on: one GEMM each
}


def _graph(name: str, dtype):
    shape, how, b_shape, _ = CASES[name]
    g = lm.Graph(name)
    x, w = g.input("x", shape, dtype), g.input("w", b_shape, dtype)
    if how == "t_then_unsqueeze":
        a = x.permute(1, 0).reshape((shape[1], 1, shape[0]))  # (T, 1, K) read across x's columns
    elif how == "swap_batch_and_m":
        a = x.permute(1, 0, 2)  # (3, 4, 12): batch dim 3 strides 12, rows stride 36
    else:
        a = x
    g.output(a @ w, "y")
    return g


def _want(name: str, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    how = CASES[name][1]
    if how == "t_then_unsqueeze":
        a = x.T[:, None, :]
    elif how == "swap_batch_and_m":
        a = x.transpose(1, 0, 2)
    else:
        a = x
    with np.errstate(invalid="ignore", over="ignore"):
        return a.astype(np.float64) @ w.astype(np.float64)


@pytest.mark.parametrize("dtype", [lm.f32, lm.f64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_batch_sharing_b_is_one_gemm_and_exact(name, dtype):
    shape, _, b_shape, folded = CASES[name]
    np_dtype = np.float32 if dtype is lm.f32 else np.float64
    rng = np.random.default_rng(4)
    feeds = {"x": _special(rng.standard_normal(shape).astype(np_dtype)), "w": rng.standard_normal(b_shape).astype(np_dtype)}
    cg = _graph(name, dtype).compile(device="cpu")
    source = cg.runtime.source
    (step,) = _matmul_steps(cg)
    body = source[source.index(f"void {step}("):]
    body = body[:body.index("\n}\n")]
    assert ("n_batch" not in body) == folded, body[:400]  # one GEMM, no loop over the batch
    want = _want(name, feeds["x"], feeds["w"])
    for precision in ("float32", "float64"):
        previous = lm.set_precision(precision)
        try:
            got = cg(feeds)[0]
        finally:
            lm.set_precision(previous)
        assert got.shape == want.shape
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))  # NaN and inf rows where NumPy has them
        ok = np.isfinite(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5 if dtype is lm.f32 else 1e-12, atol=1e-5)
        np.testing.assert_array_equal(got[~ok], want[~ok])


def test_symbolic_batch_keeps_the_loop():
    """A symbolic batch is not folded (static shapes only): the per-element loop, still right."""
    g = lm.Graph("sym")
    x, w = g.input("x", ("t", 1, 8)), g.input("w", (8, 6))
    g.output(x @ w, "y")
    cg = g.compile(device="cpu")
    rng = np.random.default_rng(1)
    for t in (1, 5):
        feeds = {"x": rng.standard_normal((t, 1, 8)).astype(np.float32), "w": rng.standard_normal((8, 6)).astype(np.float32)}
        np.testing.assert_allclose(cg(feeds)[0], feeds["x"] @ feeds["w"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,b_shape", [((5, 0, 4), (4, 3)), ((5, 2, 0), (0, 3))], ids=["m0", "k0"])
def test_empty_rows_or_depth(shape, b_shape):
    """M = 0 (nothing to write) and K = 0 (zeros), as NumPy."""
    g = lm.Graph("empty")
    g.output(g.input("x", shape) @ g.input("w", b_shape), "y")
    feeds = {"x": np.ones(shape, np.float32), "w": np.ones(b_shape, np.float32)}
    got = g.compile(device="cpu")(feeds)[0]
    want = feeds["x"] @ feeds["w"]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
