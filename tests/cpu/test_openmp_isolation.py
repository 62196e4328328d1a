"""The C backend shares its OpenMP runtime with torch (torch loads libgomp.so.1 first; the
library's libgomp.so.1 resolves to it), and OpenMP settings are per calling thread: `lum_run`
sets its own team size and dynamic teams and restores the caller's on return. Left changed,
torch's oneDNN bf16 GEMMs (which assume full teams) returned NaNs in almost every call after a
luminal call on the same thread."""

from __future__ import annotations

import ctypes

import numpy as np
import torch

import luminal as lm


def _omp():
    """The libgomp this process (torch first) uses, or None."""
    try:
        lib = ctypes.CDLL("libgomp.so.1")
        lib.omp_get_dynamic.restype = lib.omp_get_max_threads.restype = ctypes.c_int
        return lib
    except OSError:
        return None


def _mkl_threads():
    """MKL's (inside torch) thread count on this thread: its thread-local setting, else global."""
    from luminal.kernels.cpu.blas_libs import blas

    b = blas()
    if b.kind != "mkl":
        return None
    lib = ctypes.CDLL(b.path)
    local = lib.MKL_Set_Num_Threads_Local(0)  # returns the previous thread-local count (0: none)
    lib.MKL_Set_Num_Threads_Local(local)
    return local, lib.MKL_Get_Max_Threads()


def test_torch_results_and_openmp_settings_survive_a_cpu_call():
    torch.manual_seed(0)
    a, b = torch.randn(64, 512).bfloat16(), torch.randn(512, 1024).bfloat16()
    x, w = torch.randn(128, 256), torch.randn(512, 256)
    before = [a @ b, torch.nn.functional.linear(x.bfloat16(), w.bfloat16()), x @ w.T]
    omp = _omp()
    settings = (omp.omp_get_dynamic(), omp.omp_get_max_threads()) if omp else None
    mkl = _mkl_threads()

    g = lm.Graph()
    xi = g.input("x", (64, 4096))
    g.output((xi.exp() + 1).sum(-1))
    g.output(xi[:, :64] @ xi[:, 64:128].T)  # a GEMM on MKL: the call sets MKL's thread-local count
    compiled = g.compile(device="cpu")
    feed = np.random.default_rng(0).random((64, 4096)).astype(np.float32)
    np.testing.assert_allclose(compiled(x=feed)[0], (np.exp(feed.astype(np.float64)) + 1).sum(-1), rtol=1e-5)

    if omp:
        assert (omp.omp_get_dynamic(), omp.omp_get_max_threads()) == settings
    assert _mkl_threads() == mkl  # MKL's count on this thread restored too
    for _ in range(20):
        after = [a @ b, torch.nn.functional.linear(x.bfloat16(), w.bfloat16()), x @ w.T]
        for want, got in zip(before, after):
            assert not torch.isnan(got).any()
            torch.testing.assert_close(got, want, rtol=0, atol=0)
