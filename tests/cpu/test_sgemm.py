"""luminal's own SGEMM (`luminal/kernels/cpu/sgemm.py`), built for AVX-512 or AVX2, which stands
in front of the BLAS: each build the CPU runs called directly (every path of its blocking: packed
and in-place A, edge tiles, K blocks, transposes, more rows than a row block and more columns than
a column block), on special values, split into blocks (bit for bit the whole call's answer), the
two builds against each other (the same bits), and inside compiled graphs against the NumPy
runtime."""

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

import luminal as lm
from luminal.kernels.cpu import blas_libs, build, runtime, sgemm

needs_own_sgemm = pytest.mark.skipif(build.compiler() is None or sgemm.isa() is None,
                                     reason="no C compiler, or a CPU without AVX-512 or AVX2")
SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong,
                             ctypes.c_longlong, ctypes.c_float, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p,
                             ctypes.c_longlong, ctypes.c_float, ctypes.c_void_p, ctypes.c_longlong)


def _runs(which: str) -> bool:
    """Whether this CPU runs the build `which` (AVX-512's where `sgemm.isa()` is, AVX2's on either)."""
    return build.compiler() is not None and sgemm.isa() in ({"avx512"} if which == "avx512" else {"avx512", "avx2"})


def _library(which: str, fallback: int) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(sgemm._build(which)))
    assert lib.lum_own_sgemm_ok()
    lib.lum_own_sgemm_set_fallback(ctypes.c_void_p(fallback))
    return lib
LL, F, P = ctypes.c_longlong, ctypes.c_float, ctypes.c_void_p
ROW_MAJOR, PLAIN, TRANS = 101, 111, 112


@pytest.fixture(scope="module")
def openblas_sgemm():
    """OpenBLAS's own cblas_sgemm address (LUMINAL_GEMM=blas: nothing in front of it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LUMINAL_GEMM", "blas")
        b = blas_libs._Blas("openblas")
    if b.kind != "openblas":
        pytest.skip("NumPy's OpenBLAS was not found")
    return b.sgemm


@pytest.fixture(scope="module", params=["avx512", "avx2"])
def ours(request, openblas_sgemm):
    """Each build of our SGEMM this CPU runs, called directly."""
    if not _runs(request.param):
        pytest.skip(f"no C compiler, or a CPU without {request.param}")
    lib = _library(request.param, openblas_sgemm)
    fn = SIGNATURE(ctypes.cast(lib.lum_own_sgemm, ctypes.c_void_p).value)
    fn.lib = lib  # held while the function is
    return fn


def _gemm(fn, a, b, ta=False, tb=False, alpha=1.0, beta=0.0, c=None):
    """C = alpha op(A) op(B) + beta C through `fn` (cblas_sgemm's ILP64 signature); a, b as op(A), op(B)."""
    A = np.ascontiguousarray(a.T) if ta else np.ascontiguousarray(a)
    B = np.ascontiguousarray(b.T) if tb else np.ascontiguousarray(b)
    m, k = a.shape
    n = b.shape[1]
    C = np.full((m, n), np.nan, np.float32) if c is None else c.copy()  # beta 0: C is never read
    fn(ROW_MAJOR, TRANS if ta else PLAIN, TRANS if tb else PLAIN, LL(m), LL(n), LL(k), F(alpha), P(A.ctypes.data),
       LL(A.shape[1]), P(B.ctypes.data), LL(B.shape[1]), F(beta), P(C.ctypes.data), LL(n))
    return C


def _close(got, a, b):
    """Within f32 rounding of the exact product: |err| <= K * eps * sum |a||b| per element."""
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = a.shape[1] * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    assert np.all(np.abs(got - want) <= bound + 1e-30), np.max(np.abs(got - want) - bound)


SHAPES = [
    (1, 1, 1), (12, 32, 384), (13, 33, 7), (11, 31, 385),  # one tile, edges on every side, K past one block
    (25, 70, 800), (100, 64, 300), (100, 65, 300), (7, 9, 1000),  # A read in place (<= 64 columns) or packed
    (200, 40, 5), (193, 100, 17), (13, 4100, 5),  # more rows than a row block (192), more columns than 4096
    (90, 700, 400), (97, 700, 400), (90, 2100, 20),  # B in place up to 96 rows and 2048 columns, packed past them
    (192, 333, 777), (128, 1536, 384),  # one row block, B packed a panel at a time: K blocks, a ragged last panel
]


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_every_blocking_path_matches_float64(ours, m, n, k, ta, tb):
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    _close(_gemm(ours, a, b, ta, tb), a, b)


def test_small_integers_are_exact_and_k_zero_gives_zeros(ours):
    rng = np.random.default_rng(3)
    a, b = rng.integers(-3, 4, (50, 700)).astype(np.float32), rng.integers(-3, 4, (700, 90)).astype(np.float32)
    np.testing.assert_array_equal(_gemm(ours, a, b), (a.astype(np.float64) @ b).astype(np.float32))
    empty = _gemm(ours, np.zeros((5, 0), np.float32), np.zeros((0, 40), np.float32))
    np.testing.assert_array_equal(empty, np.zeros((5, 40), np.float32))


def test_special_values_as_openblas(ours, openblas_sgemm):
    """NaN and inf propagate to their rows and columns (inf * 0 is NaN), a -0.0 product sums to
    +0.0 as OpenBLAS's (and so the NumPy runtime's), and huge products overflow to inf alike."""
    theirs = SIGNATURE(openblas_sgemm)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((40, 50), dtype=np.float32), rng.standard_normal((50, 70), dtype=np.float32)
    a[3, 7], a[9, 0], b[2, 5], b[11, 60] = np.nan, np.inf, -np.inf, 0.0
    a[20, :] = -0.0
    a[30, :2], b[:2, 40] = 3e38, 3e38
    for ta in (False, True):
        got, want = _gemm(ours, a, b, ta), _gemm(theirs, a, b, ta)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got) & (got > 0), np.isinf(want) & (want > 0))
        np.testing.assert_array_equal(np.signbit(got[20]), np.signbit(want[20]))
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-4)


def test_alpha_and_beta_go_to_the_blas(ours):
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((40, 30), dtype=np.float32), rng.standard_normal((30, 50), dtype=np.float32)
    c = rng.standard_normal((40, 50), dtype=np.float32)
    got = _gemm(ours, a, b, alpha=2.0, beta=0.5, c=c)
    np.testing.assert_allclose(got, 2.0 * (a.astype(np.float64) @ b) + 0.5 * c, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("m,n,k", [(40, 50, 30), (90, 700, 400), (200, 49, 900), (300, 450, 700)])  # every path
def test_beta_one_continues_each_elements_chain_from_c(ours, m, n, k):
    """beta = 1 (attention's P V onto its accumulator) adds onto C, each element's chain of
    multiply-adds starting from C's value: K split across two calls, the second with beta 1,
    gives the whole call's bits; C's NaN and inf stay NaN and inf."""
    rng = np.random.default_rng(m + n + k)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    whole = _gemm(ours, a, b)
    for k1 in (1, k // 3, k - 1):
        first = _gemm(ours, a[:, :k1], b[:k1])
        np.testing.assert_array_equal(_gemm(ours, a[:, k1:], b[k1:], beta=1.0, c=first).view(np.uint32),
                                      whole.view(np.uint32), err_msg=f"k1={k1}")
    c = rng.standard_normal((m, n), dtype=np.float32)
    c[0, 0], c[m - 1, n - 1] = np.nan, -np.inf
    got = _gemm(ours, a, b, beta=1.0, c=c)
    assert np.isnan(got[0, 0]) and got[m - 1, n - 1] == -np.inf
    finite = np.isfinite(c)
    want = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(_gemm(ours, a[:, :0], b[:0], beta=1.0, c=c).view(np.uint32), c.view(np.uint32))  # K = 0: C as it was


@pytest.mark.parametrize("n", [49, 300])  # A in place, A packed
def test_blocks_of_rows_or_columns_are_the_whole_calls_answer(ours, n):
    """The prelude splits a large GEMM into blocks of rows or columns, one per thread of a team
    whose size depends on the machine's load: every block must round exactly as the whole call."""
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal((200, 900), dtype=np.float32), rng.standard_normal((900, n), dtype=np.float32)
    whole = _gemm(ours, a, b)
    np.testing.assert_array_equal(_gemm(ours, a[16:112], b), whole[16:112])
    np.testing.assert_array_equal(_gemm(ours, a[16:40], b), whole[16:40])  # few rows: B read in place
    np.testing.assert_array_equal(_gemm(ours, a, b[:, 32:48 + n // 2]), whole[:, 32:48 + n // 2])


@pytest.mark.parametrize("n,k", [(200, 70), (900, 64), (2500, 40)])  # A in place, B in place, B packed
def test_rows_left_over_by_row_blocks_are_the_same_bits(ours, n, k):
    """The rows a block of MR (12; AVX2: 6) leaves over run the kernels for a third or two thirds
    of MR's rows (the fewest that hold them): every row is the same chain of multiply-adds as
    inside a full block, special values too."""
    rng = np.random.default_rng(n + k)
    a, b = rng.standard_normal((60, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    a[3, 1], b[5, n - 1], a[50, 2] = np.nan, np.inf, -0.0
    whole = _gemm(ours, a, b)
    _close(whole[4:, :-1], a[4:], b[:, :-1])  # away from the NaN's row and the infinity's column
    for rows in range(1, 25):  # every count left over after 0, 1 or more blocks of 12 (or of 6)
        for r0 in (0, 36):
            np.testing.assert_array_equal(_gemm(ours, a[r0:r0 + rows], b), whole[r0:r0 + rows])


@pytest.mark.parametrize("m", [5, 48, 90])
def test_b_whose_rows_share_l1_sets_is_packed_to_the_same_bits(ours, m):
    """B read in place with a row stride of 2^s floats put all its rows in a few of L1's sets, so it
    is packed instead (`lum_rows_fit_l1`): a stride of 1024 floats (packed) and of 1032 (read in
    place) give the same bits, special values, a ragged last panel and K blocks included."""
    rng = np.random.default_rng(m)
    k, n = 500, 1000
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    a[m // 2, 7], b[300, 999], b[3, 17], a[0, :] = np.nan, np.inf, -0.0, -0.0
    got = []
    for ld in (1024, 1032):
        B = np.full((k, ld), np.nan, np.float32)  # columns past n are never read
        B[:, :n] = b
        C = np.full((m, n), np.nan, np.float32)
        A = np.ascontiguousarray(a)
        ours(ROW_MAJOR, PLAIN, PLAIN, LL(m), LL(n), LL(k), F(1.0), P(A.ctypes.data), LL(k), P(B.ctypes.data), LL(ld),
             F(0.0), P(C.ctypes.data), LL(n))
        got.append(C)
    np.testing.assert_array_equal(got[0].view(np.uint32), got[1].view(np.uint32))
    rows = [i for i in range(m) if i != m // 2]
    _close(got[0][rows][:, :999], a[rows], b[:, :999])


@pytest.mark.parametrize("tb", [False, True])
def test_one_row_block_rounds_as_several(ours, tb):
    """Up to 192 rows B is packed a panel at a time, past them all of a K block at once: the same
    chains of multiply-adds, so a call's rows are the same bits either way (special values too)."""
    rng = np.random.default_rng(17)
    a, b = rng.standard_normal((300, 700), dtype=np.float32), rng.standard_normal((700, 450), dtype=np.float32)
    a[5, 3], a[140, 0], b[2, 449], b[600, 7] = np.nan, np.inf, -np.inf, -0.0
    a[60, :] = -0.0
    whole = _gemm(ours, a, b, tb=tb)
    for rows in (slice(0, 192), slice(100, 228), slice(290, 300)):
        np.testing.assert_array_equal(_gemm(ours, a[rows], b, tb=tb), whole[rows])


def _packed(lib, a, b, tb):
    """op(A) op(B) through the packed-weight entry points (B packed once, as `lum_gemm_fw` packs a weight)."""
    m, k = a.shape
    n = b.shape[1]
    B = np.ascontiguousarray(b.T) if tb else np.ascontiguousarray(b)
    panels = np.zeros(-(-n // 32) * 32 * k + 16, np.float32)  # the prelude's size: 32 columns a panel at most
    at = panels.ctypes.data + (-panels.ctypes.data % 64)
    lib.lum_own_sgemm_pack(ctypes.c_int(TRANS if tb else PLAIN), LL(n), LL(k), P(B.ctypes.data), LL(B.shape[1]), P(at))
    A, C = np.ascontiguousarray(a), np.full((m, n), np.nan, np.float32)
    assert lib.lum_own_sgemm_packed(ctypes.c_int(PLAIN), LL(m), LL(n), LL(k), P(A.ctypes.data), LL(k), P(at),
                                    P(C.ctypes.data), LL(n)) == 0
    return C


@pytest.mark.skipif(not _runs("avx512"), reason="the two builds side by side need a CPU with AVX-512")
@pytest.mark.parametrize("tb", [False, True])
def test_the_avx2_build_gives_the_avx512_builds_bits(openblas_sgemm, tb):
    """6 x 16 tiles and 12 x 32, 8 x 8 transposes and 16 x 16: each element is the same chain of
    fused multiply-adds in k order in both builds, so every path of the blocking and the packed
    weights' entry points give the same bits, NaN, inf and -0.0 included."""
    libs = {w: _library(w, openblas_sgemm) for w in ("avx512", "avx2")}
    fns = {w: SIGNATURE(ctypes.cast(lib.lum_own_sgemm, ctypes.c_void_p).value) for w, lib in libs.items()}
    rng = np.random.default_rng(23)
    for m, n, k in [*SHAPES, (20, 6906, 80), (5, 17, 9), (6, 16, 8), (7, 15, 33)]:
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        if m * n > 100:
            a[m // 2, k // 3], b[k - 1, n // 2], a[m - 1, :] = np.nan, np.inf, -0.0
        for ta in (False, True):
            got = {w: _gemm(fn, a, b, ta, tb).view(np.uint32) for w, fn in fns.items()}
            np.testing.assert_array_equal(got["avx2"], got["avx512"], err_msg=f"{m} x {n} x {k} ta={ta}")
            if not ta:
                for w, lib in libs.items():
                    np.testing.assert_array_equal(_packed(lib, a, b, tb).view(np.uint32), got["avx512"],
                                                  err_msg=f"packed, {w}: {m} x {n} x {k}")


@needs_own_sgemm
def test_compiled_graphs_use_it_and_match_the_numpy_runtime(monkeypatch):
    """LUMINAL_GEMM=luminal puts it in front of OpenBLAS (auto does too): a conv-shaped product, a
    product with few columns split into row blocks across the team, and a transposed weight,
    against the NumPy runtime."""
    monkeypatch.setenv("LUMINAL_GEMM", "luminal")
    monkeypatch.setattr(blas_libs, "_BLAS", {})
    monkeypatch.setenv("LUMINAL_BLAS", "openblas")  # NumPy's OpenBLAS even when torch (its MKL) is loaded
    g = lm.Graph("own-sgemm")
    w, x, v = g.input("w", (96, 576)), g.input("x", (576, "n")), g.input("v", ("n", 576))
    g.output(w @ x, "conv")
    g.output(v @ w.T, "linear")
    cpu, ref = g.compile(device="cpu"), g.compile(device="numpy")
    assert cpu.runtime.blas.gemm == f"luminal-{sgemm.isa()}"
    rng = np.random.default_rng(1)
    for n in (49, 400, 3):
        feeds = {"w": rng.standard_normal((96, 576), dtype=np.float32), "x": rng.standard_normal((576, n), dtype=np.float32)}
        feeds["v"] = np.ascontiguousarray(feeds["x"].T)
        for (name, _), got, want in zip(g.outputs, cpu(feeds), ref(feeds)):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-4, err_msg=f"{name} n={n}")


@needs_own_sgemm
def test_a_linear_layer_over_a_prompt_matches_the_numpy_runtime(monkeypatch):
    """tokens x 512 by a 700 x 512 weight, transposed: B packed a panel at a time in each thread's
    block of columns; NaN, inf and -0.0 in both operands, no tokens at all, and a few."""
    monkeypatch.setenv("LUMINAL_GEMM", "avx512")  # its older name, the same choice
    monkeypatch.setattr(blas_libs, "_BLAS", {})
    monkeypatch.setenv("LUMINAL_BLAS", "openblas")
    g = lm.Graph("prompt")
    t, w = g.input("t", ("n", 512)), g.input("w", (700, 512))
    g.output(t @ w.T, "y")
    cpu, ref = g.compile(device="cpu"), g.compile(device="numpy")
    assert cpu.runtime.blas.gemm == f"luminal-{sgemm.isa()}"
    rng = np.random.default_rng(2)
    for n in (128, 150, 0, 7):
        feeds = {"t": rng.standard_normal((n, 512), dtype=np.float32), "w": rng.standard_normal((700, 512), dtype=np.float32)}
        if n:
            feeds["t"][n // 2, 3], feeds["t"][n - 1, :] = np.nan, -0.0
            feeds["w"][5, 100], feeds["w"][699, 0] = np.inf, -np.inf
        (got,), (want,) = cpu(feeds), ref(feeds)
        assert got.shape == want.shape == (n, 700)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        np.testing.assert_array_equal(np.signbit(got[np.isinf(got)]), np.signbit(want[np.isinf(want)]))
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=2e-5, atol=2e-4, err_msg=f"n={n}")


@pytest.mark.parametrize("which", ["avx512", "avx2"])
def test_in_front_of_mkl_only_where_mkl_runs_narrower(monkeypatch, which):
    monkeypatch.setattr(sgemm, "isa", lambda: which)
    monkeypatch.delenv("LUMINAL_GEMM", raising=False)
    monkeypatch.setattr(sgemm, "vendor", lambda: "AuthenticAMD")
    assert sgemm.wanted_over_mkl()  # MKL's AVX2 code on AMD
    monkeypatch.setattr(sgemm, "vendor", lambda: "GenuineIntel")
    assert not sgemm.wanted_over_mkl()  # MKL's own kernels
    monkeypatch.setenv("LUMINAL_GEMM", "luminal")
    assert sgemm.wanted_over_mkl()
    monkeypatch.setenv("LUMINAL_GEMM", "blas")
    monkeypatch.setattr(sgemm, "vendor", lambda: "AuthenticAMD")
    assert not sgemm.wanted_over_mkl()
    monkeypatch.setattr(sgemm, "isa", lambda: None)
    monkeypatch.setenv("LUMINAL_GEMM", "luminal")
    assert not sgemm.wanted_over_mkl()  # never on a CPU without either build


@pytest.mark.parametrize("which", ["avx512", "avx2"])
def test_the_choice_follows_luminal_gemm(monkeypatch, which):
    monkeypatch.setattr(sgemm, "isa", lambda: which)
    monkeypatch.delenv("LUMINAL_GEMM", raising=False)
    assert sgemm.wanted("Haswell") and sgemm.wanted(None)
    # OpenBLAS's own AVX-512 kernels too (they lost to it in the models, README)
    assert sgemm.wanted("SkylakeX") and sgemm.wanted("COOPERLAKE")
    monkeypatch.setenv("LUMINAL_GEMM", "blas")
    assert not sgemm.wanted("Haswell")
    monkeypatch.setenv("LUMINAL_GEMM", "luminal")
    assert sgemm.wanted("SkylakeX")
    monkeypatch.setattr(sgemm, "isa", lambda: None)
    assert not sgemm.wanted("Haswell")  # never on a CPU without either build, whatever is asked


@needs_own_sgemm
@pytest.mark.parametrize("kind", ["openblas", "mkl"])
@pytest.mark.parametrize("m", [20, 40, 300])
def test_a_calls_bits_do_not_depend_on_the_team(monkeypatch, m, kind):
    """The prelude picks the SGEMM on the whole call (a few rows times a transposed B: the BLAS)
    and then splits it into row or column blocks across the team (beside MKL too, whose own
    GEMMs thread themselves): one thread and two give the same bits, on both sides of the 32-row
    line and with more columns than rows."""
    if kind == "mkl":
        pytest.importorskip("torch")  # the MKL inside it
    monkeypatch.setenv("LUMINAL_GEMM", "luminal")
    monkeypatch.setenv("LUMINAL_BLAS", kind)
    monkeypatch.setattr(blas_libs, "_BLAS", {})
    g = lm.Graph("team")
    x, w, v = g.input("x", ("m", 4096)), g.input("w", (30, 4096)), g.input("v", (4096, 200))
    g.output(x @ w.T, "transposed")  # more rows than columns: row blocks
    g.output(x @ v, "plain")  # more columns than rows (m = 20, 40): column blocks
    cpu = g.compile(device="cpu")
    assert cpu.runtime.blas.kind == kind and cpu.runtime.blas.gemm == f"luminal-{sgemm.isa()}"
    rng = np.random.default_rng(m)
    feeds = {"x": rng.standard_normal((m, 4096), dtype=np.float32), "w": rng.standard_normal((30, 4096), dtype=np.float32),
             "v": rng.standard_normal((4096, 200), dtype=np.float32)}
    monkeypatch.setattr(runtime, "threads", lambda: 1)
    one = cpu(feeds)
    monkeypatch.setattr(runtime, "threads", lambda: 2)
    for got, want in zip(cpu(feeds), one):
        np.testing.assert_array_equal(got, want)
    ref = g.compile(device="numpy")(feeds)
    for got, want in zip(one, ref):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@needs_own_sgemm
def test_prepare_builds_it_in_the_background_once(monkeypatch, tmp_path):
    """As a compile begins (`program.prepare`), the library starts building on a background thread
    (a core to spare), so the runtime's first bind finds it in the cache; once per process."""
    import threading

    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("LUMINAL_GEMM", raising=False)
    monkeypatch.setattr(sgemm, "_prepared", threading.Event())
    monkeypatch.setattr(build, "spare_core", lambda: True)
    started = []
    real_build = build.build
    monkeypatch.setattr(build, "build", lambda *a, **k: started.append(threading.current_thread().name) or real_build(*a, **k))
    sgemm.prepare()
    sgemm.prepare()  # once per process
    for t in threading.enumerate():
        if t.name == "luminal-cc-sgemm":
            t.join(120)
    assert started == ["luminal-cc-sgemm"]
    assert build.cached(sgemm._build().stem) is not None  # in the cache: a bind builds nothing


@pytest.mark.skipif(not _runs("avx512") or shutil.which("objdump") is None, reason="no AVX-512, or no objdump")
def test_the_light_source_is_the_same_machine_code(tmp_path, monkeypatch):
    """The library built without <immintrin.h> (its intrinsics declared over the same GCC
    builtins) is instruction for instruction the one that includes it: the same numbers, in a
    build that parses 0.07 s of headers instead of 0.4."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))

    def code(path):
        text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True,
                              check=True).stdout
        return text.split("\n", 3)[3]  # past the line naming the file

    light, full = build.build(sgemm.SOURCE_LIGHT), build.build(sgemm.SOURCE)
    assert light != full and code(light) == code(full)


def test_a_compiler_that_rejects_the_light_source_builds_the_full_one(monkeypatch):
    built = []
    real = build.build

    def fake(source, *a, **k):
        built.append(source)
        if source == sgemm.SOURCE_LIGHT:
            raise build.CpuBuildError("cc: unknown builtin")
        return real(source, *a, **k) if build.compiler() else "full.so"

    monkeypatch.setattr(build, "build", fake)
    sgemm._build("avx512")
    assert built == [sgemm.SOURCE_LIGHT, sgemm.SOURCE]
