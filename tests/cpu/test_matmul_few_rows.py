"""A few rows times a weight: stored as its rows (C = A B^T, M <= 16, B at least 32 x 16: a GRU
step at a small batch, a few tokens through a linear layer; `lum_few_rows_gemm` in the prelude,
each block of four of B's rows read once for every row of A, blocks split across the team from
2^15 of B's elements), or plain (C = A B, M <= 4, an ONNX MatMul's weight: `lum_few_rows_nn`,
blocks of columns across the team, each element a chain over k in order). Against the NumPy
runtime: small integers exactly, NaN/inf propagated, sizes not a multiple of the vectors, A
transposed, f64, set_precision("float64"), and the same bits on one thread as on two."""

import numpy as np
import pytest
from graph_helpers import hammer

import luminal as lm
from luminal.kernels.cpu import build

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


def _graphs(n: int, k: int):
    g = lm.Graph("few_rows")
    a, w = g.input("a", ("m", k)), g.input("w", (n, k))
    g.output(a @ w.T, "f32")
    g.output(a.cast(lm.f64) @ w.cast(lm.f64).T, "f64")
    g.output(a[:, ::2] @ w[:, ::2].T, "strided")  # copies first, then the same loop
    return g.compile(device="cpu"), g.compile(device="numpy")


@pytest.mark.parametrize("n,k", [(32, 16), (35, 31), (770, 300)])  # 770 x 300: past the team split
def test_few_rows_match_numpy(n, k):
    cpu, ref = _graphs(n, k)
    rng = np.random.default_rng(n)
    for m in (2, 3, 5, 7, 8, 14, 17):  # tiles of 4, 2 and 1 rows; 17: past the loop's rows, the BLAS
        feeds = {"a": rng.integers(-3, 4, (m, k)).astype(np.float32), "w": rng.integers(-3, 4, (n, k)).astype(np.float32)}
        for name, out, want in zip(("f32", "f64", "strided"), cpu(feeds), ref(feeds)):
            assert out.dtype == want.dtype and out.shape == want.shape, name
            np.testing.assert_array_equal(out, want, err_msg=f"{name} m={m}")  # small integers: exact
        feeds["a"][1, 3], feeds["w"][5, 7], feeds["w"][n - 1, 2] = np.nan, np.inf, -np.inf
        for name, out, want in zip(("f32", "f64", "strided"), cpu(feeds), ref(feeds)):
            np.testing.assert_array_equal(np.isnan(out), np.isnan(want), err_msg=f"{name} NaN m={m}")
            np.testing.assert_array_equal(out[~np.isnan(out)], want[~np.isnan(want)], err_msg=f"{name} inf m={m}")


def _on_one_and_two_threads(compiled, feeds) -> list:
    """`compiled(feeds)` on a team of one and of two (the team follows torch's thread count when
    torch is loaded), asserted the same bit for bit; the first."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = compiled(feeds)
        torch.set_num_threads(2)
        two = compiled(feeds)
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    return one


def test_few_rows_bits_do_not_depend_on_the_team():
    cpu, _ = _graphs(770, 300)
    rng = np.random.default_rng(2)
    feeds = {"a": rng.standard_normal((5, 300)).astype(np.float32), "w": rng.standard_normal((770, 300)).astype(np.float32)}
    one = _on_one_and_two_threads(cpu, feeds)
    want = feeds["a"].astype(np.float64) @ feeds["w"].astype(np.float64).T
    np.testing.assert_allclose(one[0], want, rtol=1e-5, atol=1e-4)


def test_float64_precision_in_few_rows():
    """1e8 + 1 - 1e8: 1 under set_precision("float64") (f64 accumulation), 0 in f32 in any order
    of summation (1 - 1e8 rounds to -1e8 in f32, as 1e8 + 1 to 1e8)."""
    g = lm.Graph()
    a, w = g.input("a", (3, 48)), g.input("w", (40, 48))
    g.output(a @ w.T)
    cpu = g.compile(device="cpu")
    row = np.zeros(48, np.float32)
    row[[0, 16, 32]] = [1e8, 1.0, -1e8]  # one vector lane at every width (8 or 16 floats)
    feeds = {"a": np.tile(row, (3, 1)), "w": np.ones((40, 48), np.float32)}
    np.testing.assert_array_equal(cpu(feeds)[0], np.zeros((3, 40), np.float32))
    previous = lm.set_precision("float64")
    try:
        np.testing.assert_array_equal(cpu(feeds)[0], np.ones((3, 40), np.float32))
    finally:
        lm.set_precision(previous)


def _plain_graphs(n: int, k: int):
    """B stored plain (K x N, an ONNX MatMul's weight): the axpy form (`lum_few_rows_nn`), A's rows
    read in place or A transposed (its elements m apart)."""
    g = lm.Graph("few_rows_nn")
    a, at, w = g.input("a", ("m", k)), g.input("at", (k, "m")), g.input("w", (k, n))
    g.output(a @ w, "plain")
    g.output(at.T @ w, "a_transposed")
    g.output(a.cast(lm.f64) @ w.cast(lm.f64), "f64")
    return g.compile(device="cpu"), g.compile(device="numpy")


@pytest.mark.parametrize("n,k", [(32, 16), (35, 31), (2100, 40)])  # 2100: the one-row form's tasks, a ragged last one
def test_few_rows_times_plain_b_match_numpy(n, k):
    cpu, ref = _plain_graphs(n, k)
    rng = np.random.default_rng(k)
    for m in (1, 2, 3, 4, 5):  # 5: past the loop's rows, the GEMM
        a = rng.integers(-3, 4, (m, k)).astype(np.float32)
        feeds = {"a": a, "at": np.ascontiguousarray(a.T), "w": rng.integers(-3, 4, (k, n)).astype(np.float32)}
        for name, out, want in zip(("plain", "a_transposed", "f64"), cpu(feeds), ref(feeds)):
            assert out.dtype == want.dtype and out.shape == want.shape, name
            np.testing.assert_array_equal(out, want, err_msg=f"{name} m={m}")
        feeds["a"][0, 3] = feeds["at"][3, 0] = np.nan
        feeds["w"][5, n - 1], feeds["w"][7, 0] = np.inf, -np.inf
        for name, out, want in zip(("plain", "a_transposed", "f64"), cpu(feeds), ref(feeds)):
            np.testing.assert_array_equal(np.isnan(out), np.isnan(want), err_msg=f"{name} NaN m={m}")
            np.testing.assert_array_equal(out[~np.isnan(out)], want[~np.isnan(want)], err_msg=f"{name} inf m={m}")


@pytest.mark.parametrize("m", [1, 3])
def test_few_rows_times_plain_b_bits_do_not_depend_on_the_team(m):
    cpu, _ = _plain_graphs(2100, 300)
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, 300)).astype(np.float32)
    feeds = {"a": a, "at": np.ascontiguousarray(a.T), "w": rng.standard_normal((300, 2100)).astype(np.float32)}
    one = _on_one_and_two_threads(cpu, feeds)
    np.testing.assert_array_equal(one[0], one[1])  # A read in place or transposed: the same sums
    np.testing.assert_allclose(one[0], a.astype(np.float64) @ feeds["w"].astype(np.float64), rtol=1e-5, atol=1e-4)


def test_two_threads_on_one_model_of_few_rows_get_their_own_answers():
    cpu, _ = _graphs(770, 300)
    plain, _ = _plain_graphs(2100, 40)
    rng = np.random.default_rng(9)
    cases = []
    for m in (3, 1):
        a = rng.standard_normal((m, 300)).astype(np.float32)
        feeds = {"a": a, "w": rng.standard_normal((770, 300)).astype(np.float32)}
        b = rng.standard_normal((m, 40)).astype(np.float32)
        pfeeds = {"a": b, "at": np.ascontiguousarray(b.T), "w": rng.standard_normal((40, 2100)).astype(np.float32)}
        cases.append((feeds, cpu(feeds), pfeeds, plain(pfeeds)))

    def check(k):
        feeds, want, pfeeds, pwant = cases[k]
        for got, w in zip(cpu(feeds) + plain(pfeeds), want + pwant):
            np.testing.assert_array_equal(got, w)

    hammer(check, [[k] * 30 for k in (0, 1, 0, 1)])
