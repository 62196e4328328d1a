"""A matrix-vector product (one token's linear layer in decode: M = 1, or a single output column,
N = 1) is recovered as a MatMul, a BLAS call on the cpu backend, not a broadcast-multiply and a
compensated sum: a dim of size 1 is constant along itself whatever its stride."""

import numpy as np
import pytest

import luminal as lm
from luminal.kernels.cpu import build
from luminal.kernels.cpu.blas_libs import blas

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


def test_gemv_operand_layouts():
    """M or N of 1 at run time (BLAS gemv, or double dot loops) with each operand plain or
    transposed, f32 and f64, at both precisions."""
    g = lm.Graph("gemv")
    x, xt = g.input("x", ("b", "m", 6)), g.input("xt", ("b", 6, "m"))
    w, v, u = g.input("w", ("n", 6)), g.input("v", (6, "n")), g.input("u", (1, 6))
    for dt in (lm.f32, lm.f64):
        c = lambda t, dt=dt: t.cast(dt)  # noqa: E731
        g.output(c(x) @ c(w).T)  # A plain, B transposed
        g.output(c(x) @ c(v))  # A plain, B plain
        g.output(c(xt).permute(0, 2, 1) @ c(w).T)  # A transposed
        g.output(c(xt).permute(0, 2, 1) @ c(v))
        g.output(c(x) @ c(u).T)  # N = 1, B transposed
        g.output(c(xt).permute(0, 2, 1) @ c(u).T)  # N = 1, A transposed
        g.output(c(u) @ c(v))  # M = 1 static
    cpu = g.compile(device="cpu")
    assert blas().sgemv is not None and blas().dgemv is not None  # NumPy's OpenBLAS: the gemv branch runs
    rng = np.random.default_rng(2)
    for b, m, n in [(2, 1, 5), (1, 4, 1), (3, 1, 1), (2, 3, 4)]:  # and a GEMM (dgemm under float64)
        feeds = {"x": rng.standard_normal((b, m, 6)), "xt": rng.standard_normal((b, 6, m)),
                 "w": rng.standard_normal((n, 6)), "v": rng.standard_normal((6, n)), "u": rng.standard_normal((1, 6))}
        feeds = {k: a.astype(np.float32) for k, a in feeds.items()}
        f = {k: a.astype(np.float64) for k, a in feeds.items()}
        xt = f["xt"].transpose(0, 2, 1)
        want = [f["x"] @ f["w"].T, f["x"] @ f["v"], xt @ f["w"].T, xt @ f["v"], f["x"] @ f["u"].T, xt @ f["u"].T,
                f["u"] @ f["v"]] * 2
        for precision in ("float64", "float32"):
            lm.set_precision(precision)
            try:
                got = cpu(feeds)
            finally:
                lm.set_precision(None)
            for i, (out, ref) in enumerate(zip(got, want)):
                np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5, err_msg=f"output {i}, {b, m, n}, {precision}")


@pytest.mark.parametrize("m,n", [(1, 2), (2, 1), (3, 4)])  # gemv loops, dgemm
def test_set_precision_reaches_the_gemms(m, n):
    """set_precision("float64"): f32 GEMMs accumulate in double and round once, as on the NumPy
    runtime; 1e8 + 1 - 1e8 is 1 then, where an f32 accumulation loses the 1. The cpu default is
    PyTorch's f32 GEMM (what eager f32 gives: 0 here), and the setting is read per call."""
    g = lm.Graph()
    a, b = g.input("a", (m, 3)), g.input("b", (3, n))
    g.output(a @ b)
    g.output(a @ g.input("bt", (n, 3)).T)
    cpu = g.compile(device="cpu")
    a_ = np.tile(np.array([[1e8, 1.0, -1e8]], np.float32), (m, 1))
    feeds = {"a": a_, "b": np.ones((3, n), np.float32), "bt": np.ones((n, 3), np.float32)}
    assert lm.get_precision("cpu") == "float32" and lm.get_precision("numpy") == "float64"
    default = cpu(feeds)
    assert all(o.dtype == np.float32 and o.shape == (m, n) for o in default)
    previous = lm.set_precision("float64")
    try:
        assert previous is None and lm.get_precision("cpu") == "float64"
        for out in cpu(feeds):
            np.testing.assert_array_equal(out, np.ones((m, n), np.float32))
    finally:
        lm.set_precision(None)
    assert lm.get_precision("cpu") == "float32"


@pytest.mark.parametrize("k,n", [(1536, 203), (2048, 203), (4100, 77), (300, 4000)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_large_gemv_split_across_the_team_keeps_its_bits(monkeypatch, dtype, k, n):
    """A matrix-vector product of 2^17 elements or more in its dot-product form runs on the team,
    one block of outputs (multiples of 16) per thread (OpenBLAS called single-threaded): one
    thread and two give the same bits, for M = 1 and N = 1, each operand plain or transposed (the
    axpy forms, whose OpenBLAS kernel rounds differently per block size, 14 of 203 outputs at
    K = 2048, run whole), output counts that do not divide evenly."""
    from luminal.kernels.cpu import blas_libs, runtime

    monkeypatch.setenv("LUMINAL_BLAS", "openblas")
    monkeypatch.setattr(blas_libs, "_BLAS", {})
    dt = lm.f32 if dtype == np.float32 else lm.f64
    g = lm.Graph("gemv-team")
    x, xt = g.input("x", (1, k), dt), g.input("xt", (k, 1), dt)
    w, v = g.input("w", (n, k), dt), g.input("v", (k, n), dt)
    g.output(x @ w.T, "row_wt")  # M = 1, B transposed (a linear layer)
    g.output(x @ v, "row_v")  # M = 1, B plain
    g.output(w @ xt, "col_w")  # N = 1, A plain
    g.output(v.T @ xt, "col_vt")  # N = 1, A transposed
    cpu = g.compile(device="cpu")
    assert cpu.runtime.blas.kind == "openblas"
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((1, k)).astype(dtype), "xt": rng.standard_normal((k, 1)).astype(dtype),
             "w": rng.standard_normal((n, k)).astype(dtype), "v": rng.standard_normal((k, n)).astype(dtype)}
    monkeypatch.setattr(runtime, "threads", lambda: 1)
    one = cpu(feeds)
    monkeypatch.setattr(runtime, "threads", lambda: 2)
    for _ in range(3):
        for got, want in zip(cpu(feeds), one):
            np.testing.assert_array_equal(got, want)
    x64, xt64, w64, v64 = (feeds[s].astype(np.float64) for s in ("x", "xt", "w", "v"))
    for got, want in zip(one, [x64 @ w64.T, x64 @ v64, w64 @ xt64, v64.T @ xt64]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


class _Recorder:
    """A stand-in library: the calls `_Blas.bind` makes, by name."""

    def __init__(self):
        self.calls = {}

    def __getattr__(self, name):
        return lambda *args: self.calls.setdefault(name, []).append(args)


@pytest.mark.parametrize("kind,vendor,own", [("mkl", "AuthenticAMD", 1), ("mkl", "GenuineIntel", 0),
                                             ("openblas", "AuthenticAMD", 0), ("mkl", "", 1)])
def test_own_gemv_where_mkl_runs_off_intel(monkeypatch, kind, vendor, own):
    """A row times a transposed weight goes through the few-rows loops where the BLAS is MKL on a
    CPU that is not Intel's (its sgemv 2.4-2.7x slower there), else through the BLAS's sgemv."""
    from luminal.kernels.cpu import blas_libs, sgemm

    monkeypatch.setattr(sgemm, "vendor", lambda: vendor)
    b = blas_libs._Blas.__new__(blas_libs._Blas)  # its fields only: no library looked up
    b.kind, b.sgemm = kind, None
    b.dgemm = b.sgemv = b.dgemv = b.set_threads_ptr = b.get_threads_ptr = b.front = None
    lib = _Recorder()
    b.bind(lib, "blas")
    assert [int(a[0].value) for a in lib.calls["lum_set_own_gemv"]] == [own]


@pytest.mark.parametrize("vendor", ["AuthenticAMD", "GenuineIntel"])
def test_one_row_linear_either_way(monkeypatch, vendor):
    """The same layer through both paths (MKL's sgemv where torch is loaded, or the few-rows loops):
    float32's accuracy either way, at one row and at a batch of rows."""
    from luminal.kernels.cpu import sgemm
    from luminal.kernels.cpu.runtime import CpuRuntime

    monkeypatch.setattr(sgemm, "vendor", lambda: vendor)
    rng = np.random.default_rng(5)
    w = rng.standard_normal((1000, 512)).astype(np.float32)
    g = lm.Graph("fc")
    g.output(g.input("x", ("m", 512)) @ g.constant(w).T, "y")
    runtime = CpuRuntime(g.compile(device="numpy").outputs)
    for m in (1, 3):
        x = rng.standard_normal((m, 512)).astype(np.float32)
        want = x.astype(np.float64) @ w.T.astype(np.float64)
        np.testing.assert_allclose(runtime({"x": x})[0], want, rtol=1e-4, atol=1e-4)
