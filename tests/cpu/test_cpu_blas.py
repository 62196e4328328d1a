"""The two BLASes the cpu backend binds (`blas_libs._Blas`): the MKL inside PyTorch (Fortran
`sgemm_`, adapted to row-major by the prelude; its threads are the OpenMP team's, so a batch of
small GEMMs runs one per thread) and NumPy's OpenBLAS (ILP64 cblas). Every GEMM form gives the
NumPy runtime's answer on both, and the batch-parallel path keeps set_precision("float64")."""

import numpy as np
import pytest
import torch  # noqa: F401  (loaded: the MKL inside it is what `LUMINAL_BLAS=mkl` binds)

import luminal as lm
from luminal.kernels.cpu import build
from luminal.kernels.cpu.blas_libs import blas
from luminal.kernels.cpu.runtime import CpuRuntime

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


@pytest.fixture(params=["mkl", "openblas"])
def blas_kind(request, monkeypatch):
    monkeypatch.setenv("LUMINAL_BLAS", request.param)
    assert blas().kind == request.param, f"{request.param} not found"
    return request.param


def test_every_gemm_form_matches_numpy(blas_kind):
    """Batched (heads: one per thread on MKL), broadcast, transposed, copied (strided) operands,
    M or N of 1 (gemv), f32/f64/f16/bf16/int64, against the NumPy runtime."""
    g = lm.Graph("blas")
    q, k = g.input("q", ("b", 4, "m", 8)), g.input("k", ("b", 4, "m", 8))
    w, qt = g.input("w", (5, 8)), g.input("qt", ("b", 4, 8, "m"))
    g.output(q @ k.permute(0, 1, 3, 2), "heads")
    g.output(qt.permute(0, 1, 3, 2) @ w.T, "a_transposed")  # M <= 4 on OpenBLAS: a gemv per row  # B transposed, batch of b * 4
    g.output(q[:, :, :, ::2] @ k[:, :, :, 1::2].permute(0, 1, 3, 2), "strided")  # copies, per thread
    g.output(q @ w.T, "broadcast_weight")
    g.output(q[:, :, :1] @ w.T, "gemv")
    g.output(q.cast(lm.f64) @ k.cast(lm.f64).permute(0, 1, 3, 2), "f64")
    g.output(q.cast(lm.f16) @ k.cast(lm.f16).permute(0, 1, 3, 2), "f16")  # a widened result per thread
    g.output(q.cast(lm.bf16) @ w.cast(lm.bf16).T, "bf16")
    g.output(q.cast(lm.int64) @ k.cast(lm.int64).permute(0, 1, 3, 2), "i64")
    cpu, ref = g.compile(device="cpu"), g.compile(device="numpy")
    assert isinstance(cpu.runtime, CpuRuntime) and cpu.runtime.blas.kind == blas_kind
    rng = np.random.default_rng(7)
    for b, m in [(2, 5), (1, 1), (2, 3), (3, 16), (2, 0)]:
        feeds = {"q": rng.integers(-3, 4, (b, 4, m, 8)).astype(np.float32),
                 "k": rng.integers(-3, 4, (b, 4, m, 8)).astype(np.float32),
                 "w": rng.integers(-3, 4, (5, 8)).astype(np.float32),
                 "qt": rng.integers(-3, 4, (b, 4, 8, m)).astype(np.float32)}
        for (name, _), out, want in zip(g.outputs, cpu(feeds), ref(feeds)):
            assert out.dtype == want.dtype and out.shape == want.shape, name
            # small integers: every product and sum is exact in f16/bf16/f32, so exact equality
            np.testing.assert_array_equal(out, want, err_msg=f"{name} b={b} m={m} ({blas_kind})")


def test_float64_precision_holds_in_a_batch(blas_kind):
    """1e8 + 1 - 1e8 per head: 1 under set_precision("float64") (the flag is the calling thread's,
    so a batch must not run on worker threads then), 0 in f32 by default."""
    g = lm.Graph()
    a, v = g.input("a", (6, 2, 3)), g.input("v", (6, 3, 2))
    g.output(a @ v)
    cpu = g.compile(device="cpu")
    feeds = {"a": np.tile(np.array([1e8, 1.0, -1e8], np.float32), (6, 2, 1)), "v": np.ones((6, 3, 2), np.float32)}
    np.testing.assert_array_equal(cpu(feeds)[0], np.zeros((6, 2, 2), np.float32))
    lm.set_precision("float64")
    try:
        np.testing.assert_array_equal(cpu(feeds)[0], np.ones((6, 2, 2), np.float32))
    finally:
        lm.set_precision(None)


def test_without_torch_the_default_is_numpys_openblas():
    """A process that never imported torch does not import it for its BLAS."""
    import subprocess
    import sys

    code = ("import sys, luminal.kernels.cpu.runtime; from luminal.kernels.cpu.blas_libs import blas; b = blas(); "
            "print(b.kind, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["openblas", "False"]


def test_numpys_openblas_keeps_its_thread_count_after_a_call(monkeypatch):
    """OpenBLAS runs the C's GEMMs on their calling thread (1 thread), and its count is the
    process's, NumPy's matmuls' too: `lum_run` sets it for the call and gives the caller's back
    (left at 1, every NumPy matmul after a luminal call ran on one core)."""
    import ctypes

    monkeypatch.setenv("LUMINAL_BLAS", "openblas")
    b = blas()
    assert b.kind == "openblas" and b.get_threads_ptr and b.set_threads_ptr
    get = ctypes.CFUNCTYPE(ctypes.c_int)(b.get_threads_ptr)
    put = ctypes.CFUNCTYPE(None, ctypes.c_int)(b.set_threads_ptr)
    g = lm.Graph("gemms")
    a, w = g.input("a", (64, 256)), g.input("w", (256, 300))
    g.output((a @ w).relu() @ w.T)
    cpu = g.compile(device="cpu")
    rng = np.random.default_rng(2)
    feeds = {"a": rng.standard_normal((64, 256)).astype(np.float32), "w": rng.standard_normal((256, 300)).astype(np.float32)}
    before = get()
    try:
        for count in (2, 3, 1):
            put(count)
            cpu(feeds)
            assert get() == count
    finally:
        put(before)


def test_a_large_gemm_split_across_the_team(blas_kind):
    """M*N*K past 2**18 per thread: the columns of C are split across the OpenMP team in blocks
    of 16 (uneven here: 150 columns), B plain or transposed, one single-threaded BLAS call per
    block. Small integers: every sum is exact, so results equal NumPy's."""
    g = lm.Graph("big")
    a, b, bt = g.input("a", ("m", 256)), g.input("b", (256, 150)), g.input("bt", (150, 256))
    g.output(a @ b)
    g.output(a @ bt.T)
    cpu = g.compile(device="cpu")
    rng = np.random.default_rng(11)
    for m in (64, 3):
        feeds = {"a": rng.integers(-3, 4, (m, 256)).astype(np.float32), "b": rng.integers(-3, 4, (256, 150)).astype(np.float32)}
        feeds["bt"] = np.ascontiguousarray(feeds["b"].T)
        want = feeds["a"].astype(np.float64) @ feeds["b"]
        for out in cpu(feeds):
            np.testing.assert_array_equal(out, want.astype(np.float32))


@pytest.mark.parametrize("m,k,n", [(128, 64, 128), (128, 512, 1408), (64, 16, 5325), (3, 256, 4096)])
def test_mkl_split_across_the_team_keeps_the_bits_of_one_thread(m, k, n, monkeypatch):
    """On MKL a GEMM of 2^18 multiply-adds per thread or more runs as one single-threaded MKL
    call per block of columns (or rows), whose bits do not depend on the blocks: random values,
    B plain and transposed, two threads give one thread's bits."""
    from luminal.kernels.cpu import runtime

    monkeypatch.setenv("LUMINAL_BLAS", "mkl")
    if blas().kind != "mkl":
        pytest.skip("this torch has no MKL (an ARM build links OpenBLAS)")
    g = lm.Graph("split-bits")
    a, b = g.input("a", (m, k)), g.input("b", (k, n))
    g.output(a @ b)
    g.output(a @ b.T.contiguous().T)
    cpu = g.compile(device="cpu")
    assert cpu.runtime.blas.kind == "mkl"
    rng = np.random.default_rng(13)
    feeds = {"a": rng.standard_normal((m, k)).astype(np.float32), "b": rng.standard_normal((k, n)).astype(np.float32)}
    monkeypatch.setattr(runtime, "threads", lambda: 1)
    one = cpu(feeds)
    monkeypatch.setattr(runtime, "threads", lambda: 2)
    for got, want in zip(cpu(feeds), one):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(one[0], feeds["a"].astype(np.float64) @ feeds["b"], rtol=1e-4, atol=1e-3)


def test_two_threads_share_a_model_with_split_gemms(blas_kind):
    """Two Python threads calling one compiled model whose GEMM is split across the team: each
    call's team size is its own (thread-local), and every column block is computed whatever team
    OpenMP gives, so both get NumPy's answer on every call."""
    import threading

    g = lm.Graph("threads")
    a, b = g.input("a", ("m", 256)), g.input("b", (256, 150))
    g.output(a @ b)
    cpu = g.compile(device="cpu")
    rng = np.random.default_rng(12)
    cases = [{"a": rng.integers(-3, 4, (m, 256)).astype(np.float32), "b": rng.integers(-3, 4, (256, 150)).astype(np.float32)}
             for m in (64, 96)]
    wants = [(c["a"].astype(np.float64) @ c["b"]).astype(np.float32) for c in cases]
    errors = []

    def work(i):
        try:
            for _ in range(20):
                np.testing.assert_array_equal(cpu(cases[i])[0], wants[i])
        except AssertionError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


@pytest.mark.parametrize("cin,cout,side", [(16, 24, 64), (128, 32, 56)])
@pytest.mark.parametrize("gemm", ["blas", "luminal"])
def test_conv_tiles_in_parallel_keep_their_bits(blas_kind, gemm, monkeypatch, cin, cout, side):
    """A GEMM conv with enough im2col tiles for the team runs them in parallel, each thread filling
    and multiplying its own tiles of at most 320 columns, shrunk to a multiple of the team (K =
    144: 4096 columns in 14 tiles of 304; DenseNet's K = 1152: 3136 in 14 of 224) on either BLAS
    and on luminal's SGEMM. With luminal's SGEMM one thread (one tile after another, the whole of
    each GEMM) gives the same bits (each element one FMA chain in k order, whatever the tile);
    a BLAS's own SGEMM may round differently with the call's size (OpenBLAS's small-matrix
    kernels: 2% of elements, one ulp or so), as it did before under the prelude's column split,
    so there the two agree to rounding. Both give the NumPy runtime's answer."""
    from luminal.builder import nn
    from luminal.kernels.cpu import blas_libs, runtime, sgemm

    if gemm == "luminal" and sgemm.isa() is None:
        pytest.skip("no AVX-512 or AVX2")
    monkeypatch.setenv("LUMINAL_GEMM", gemm)
    monkeypatch.setattr(blas_libs, "_BLAS", {})
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, cin, side, side)).astype(np.float32)
    w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * 0.2
    g = lm.Graph("tiles-team")
    g.output(nn.conv(g.input("x", (1, cin, side, side)), g.constant(w), None, 1, 1, 1, 1).relu(), "y")
    cpu = g.compile(device="cpu")
    assert cpu.runtime.blas.kind == blas_kind
    monkeypatch.setattr(runtime, "threads", lambda: 1)
    one = cpu({"x": x})
    monkeypatch.setattr(runtime, "threads", lambda: 2)
    for _ in range(3):
        if gemm == "luminal":
            np.testing.assert_array_equal(cpu({"x": x})[0], one[0])
        else:
            np.testing.assert_allclose(cpu({"x": x})[0], one[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(one[0], g.compile(device="numpy")({"x": x})[0], rtol=1e-4, atol=1e-4)
