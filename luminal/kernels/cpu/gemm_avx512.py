"""An AVX-512 SGEMM of luminal's own, in front of the BLAS when the BLAS runs narrower kernels.

OpenBLAS picks its kernels per CPU at load time, unless `OPENBLAS_CORETYPE` pins them: an
environment that sets `OPENBLAS_CORETYPE=Haswell` (this project's VMs do) runs AVX2 GEMMs on an
AVX-512 CPU, and an OpenBLAS too old to know a CPU falls back likewise. onnxruntime's MLAS uses
AVX-512 there, so GEMM-bound models (ResNet50, VGG19, DenseNet121) ran 2.3-2.6x slower than
onnxruntime with the pinned kernels and 1.8-1.9x with OpenBLAS's own choice.

This is the classic BLIS/GotoBLAS structure: op(B) packed into panels of 32 columns (K blocks of
at most 384 rows, 4096 columns at a time), op(A) into panels of 12 rows (192 rows at a time), and
a 12 x 32 micro-kernel holding 24 zmm accumulators, one fused multiply-add per element and k.
With at most 320 columns (ResNet50's last stages: 512 x 49 x 4608, 256 x 196 x 2304) A is read
in place, 12 rows at a time, instead of packed (the copy cost more than it saved); with at most
48 rows (DenseNet's 32-channel growth convs), or 96 rows and 2048 columns (YOLOv8n's 64-channel
convs), B is read in place likewise. A last panel of at most
16 columns runs half the multiply-adds. Each element of C is one chain of fused multiply-adds in k order (a K block
continues from the previous block's value in C), so the result does not depend on how the call
is split into blocks or across threads.

Measured against OpenBLAS 0.3.31 pinned to Haswell, single thread, on a Zen 5 (a ctypes script
timing both on the same operands; `tests/cpu/test_gemm_avx512.py` checks results, not speed):
1.5-2.0x on conv-shaped GEMMs (64 x 3136 x 576: 92 -> 140 GFLOP/s; 384^3: 106 -> 191; 512 x 49 x
4608: 2.87 -> 1.53 ms), 1.1-1.25x on small ones (8 x 256 x 256, 500 x 12 x 500), about par with
OpenBLAS's own AVX-512 kernels. Any alpha != 1, beta != 0 or column-major call goes to the BLAS it stands in
front of (`lum_gemm512_set_fallback`). The prelude (`lum_pick_sgemm`) sends M or N of 1 to gemv,
2-8 columns to its skinny loop, and fewer than 32 rows times a transposed B (a linear layer over
a few tokens: B must be transposed into panels, 0.8-0.9x OpenBLAS) to the BLAS: decided on the
whole call, before any split, so every block of one call runs the same code.

`LUMINAL_GEMM`: "auto" (default: used when the CPU has AVX-512 and OpenBLAS's kernels are not
AVX-512 ones, or in front of torch's MKL on an AMD CPU with AVX-512, where MKL runs its AVX2
code), "blas" (never), "avx512" (whenever the CPU has AVX-512; for comparisons).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading

from luminal.kernels.cpu import build, isa
from luminal.kernels.cpu.prelude import c_source

LOG = logging.getLogger("luminal")

AVX512_CORES = isa.AVX512_BLAS_CORES  # OpenBLAS core names whose SGEMM kernels use AVX-512

A_IN_PLACE_COLS = 320  # at most this many columns of C: A read in place, not packed (conv.py's tiles too)

SOURCE = c_source("gemm_avx512.c").replace("@A_IN_PLACE_COLS@", str(A_IN_PLACE_COLS))  # c/gemm_avx512.c

# The same library without <immintrin.h> (built first; `SOURCE` when a compiler rejects it)
INTRINSICS = c_source("gemm_avx512_intrinsics.h")
SOURCE_LIGHT = SOURCE.replace("#include <immintrin.h>\n", INTRINSICS, 1)


def _build():
    """The library's path: the light source, else (a compiler it does not suit) the full one."""
    try:
        return build.build(SOURCE_LIGHT)
    except build.CpuBuildError as exc:
        LOG.debug("luminal's AVX-512 SGEMM without <immintrin.h> did not build (%s); building with it",
                  str(exc).splitlines()[0])
        return build.build(SOURCE)


_loaded: dict[int, int | None] = {}  # fallback address -> our sgemm's address (None: not usable)
_lock = threading.Lock()


def cpu_has_avx512() -> bool:
    return {"avx512f", "fma"} <= build.cpu_info()[0]


def _mode() -> str:
    mode = os.environ.get("LUMINAL_GEMM", "auto").strip().lower() or "auto"
    if mode not in ("auto", "blas", "avx512"):
        LOG.warning("LUMINAL_GEMM=%r is not 'auto', 'blas' or 'avx512'; using 'auto'", mode)
        mode = "auto"
    return mode


def wanted(blas_core: str | None) -> bool:
    """Whether to put our SGEMM in front of a BLAS whose kernels are `blas_core` (OpenBLAS's core
    name; None when unknown)."""
    mode = _mode()
    if mode == "blas" or not cpu_has_avx512():
        return False
    return mode == "avx512" or (blas_core or "").strip().lower() not in AVX512_CORES


def wanted_over_mkl() -> bool:
    """Whether to put our SGEMM in front of the MKL inside torch: on an AMD CPU with AVX-512 MKL
    runs its AVX2 code ("auto"), or whenever the CPU has AVX-512 ("avx512")."""
    mode = _mode()
    if mode == "blas" or not cpu_has_avx512():
        return False
    return mode == "avx512" or _vendor() == "AuthenticAMD"


def _vendor() -> str:
    return build.cpu_info()[1]


_prepared = threading.Event()


def prepare(spare: bool | None = None) -> None:
    """Start building the library in the background (once per process; a no-op when it is in the
    cache): called as a compile begins (`program.prepare`), so that the compiler runs while Python
    lowers and optimizes the graph, not when the runtime first binds its BLAS. Only with a core
    to spare, as the GEMM object's build (`spare`: what the caller found, else looked at here)."""
    if _prepared.is_set() or not cpu_has_avx512() or _mode() == "blas" or build.compiler() is None:
        return
    _prepared.set()
    if not (build.spare_core() if spare is None else spare):
        return

    def run():
        for t in threading.enumerate():  # after the GEMM object's build (build.prepare_object), not beside it:
            if t.name == "luminal-cc" and t is not threading.current_thread():  # one core stays Python's
                t.join()
        try:
            with build.in_background():
                _build()
        except Exception:  # noqa: BLE001 - `sgemm` builds again and logs why, and the BLAS serves
            pass

    threading.Thread(target=run, name="luminal-cc-gemm512", daemon=True).start()


def sgemm(fallback: int) -> int | None:
    """The address of our SGEMM (cblas_sgemm's ILP64 signature), calling `fallback` (a cblas_sgemm
    address) for what it does not take; None when it cannot be built or the CPU lacks AVX-512
    (then the BLAS serves every call, as before)."""
    with _lock:
        if fallback not in _loaded:
            if _loaded:  # one library, one fallback: a second BLAS (never so far) keeps its own sgemm
                return None
            _loaded[fallback] = _load(fallback)
        return _loaded[fallback]


def _load(fallback: int) -> int | None:
    address = None
    try:
        lib = ctypes.CDLL(str(_build()))
        if lib.lum_gemm512_ok():
            lib.lum_gemm512_set_fallback(ctypes.c_void_p(fallback))
            address = ctypes.cast(lib.lum_gemm512_sgemm, ctypes.c_void_p).value
    except (build.CpuBuildError, OSError) as exc:  # a compiler without AVX-512 support: the BLAS, correct as ever
        LOG.debug("luminal's AVX-512 SGEMM is not available: %s", exc)
    return address
