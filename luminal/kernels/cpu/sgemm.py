"""luminal's own SGEMM (`c/sgemm.c`), in front of a BLAS: README's "The compiled CPU backend".

BLIS-style packing around a micro-kernel of 12 x 32 (AVX-512) or 6 x 16 (AVX2 and FMA: a CPU
without AVX-512, or `LUMINAL_ISA=avx2`): one C source, built for the wider of the two the CPU has
(`isa()`). Each element of C is one chain of fused multiply-adds in k order, so its bits depend
on neither the blocking, the threads nor the build. Calls with alpha != 1, beta != 0 or
column-major go to the BLAS it fronts (`lum_own_sgemm_set_fallback`); the prelude's
`lum_pick_sgemm` routes skinny calls, once per call before any split.
`LUMINAL_GEMM`: "auto" (default), "blas" (never), "luminal" (wherever the CPU has one of the two;
"avx512", its older name, is the same).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading

from luminal.kernels.cpu import build
from luminal.kernels.cpu.prelude import c_source
from luminal.threadflags import in_background

LOG = logging.getLogger("luminal")

A_IN_PLACE_COLS = 320  # at most this many columns of C: A read in place, not packed (conv_gemm.py's tiles too)

SOURCE = c_source("sgemm.c").replace("@A_IN_PLACE_COLS@", str(A_IN_PLACE_COLS))  # c/sgemm.c

# The AVX-512 build without <immintrin.h> (built first; `SOURCE` when a compiler rejects it)
SOURCE_LIGHT = SOURCE.replace("#include <immintrin.h>\n", c_source("sgemm_avx512_intrinsics.h"), 1)
# The AVX2 build: the same source, its vectors 256 bits wide
SOURCE_AVX2 = "#define LUM_SIMD_AVX2 1\n" + SOURCE


def isa() -> str | None:
    """The build this CPU runs ("avx512", "avx2"), None where it has neither (AVX2 wants FMA too);
    `LUMINAL_ISA=avx2` masks AVX-512 (`build.cpu_info`)."""
    flags = build.cpu_info()[0]
    return "avx512" if {"avx512f", "fma"} <= flags else "avx2" if {"avx2", "fma"} <= flags else None


def _build(which: str | None = None):
    """The library's path for the build `which` (default: `isa()`): AVX2's, or AVX-512's light
    source, else (a compiler it does not suit) its full one."""
    if (which or isa()) == "avx2":
        return build.build(SOURCE_AVX2)
    try:
        return build.build(SOURCE_LIGHT)
    except build.CpuBuildError as exc:
        LOG.debug("luminal's AVX-512 SGEMM without <immintrin.h> did not build (%s); building with it",
                  str(exc).splitlines()[0])
        return build.build(SOURCE)


_loaded: dict[int, int | None] = {}  # fallback address -> our sgemm's address (None: not usable)
_lock = threading.Lock()


def _mode() -> str:
    mode = os.environ.get("LUMINAL_GEMM", "auto").strip().lower() or "auto"
    if mode == "avx512":  # its name while there was only the AVX-512 build
        return "luminal"
    if mode not in ("auto", "blas", "luminal"):
        LOG.warning("LUMINAL_GEMM=%r is not 'auto', 'blas' or 'luminal'; using 'auto'", mode)
        mode = "auto"
    return mode


def wanted(blas_core: str | None) -> bool:
    """Whether to put our SGEMM in front of an OpenBLAS whose core name is `blas_core` (None: unknown):
    wherever the CPU has AVX-512 or AVX2, whichever kernels OpenBLAS runs (its AVX-512 ones lost to
    it in the models too: README, "The compiled CPU backend")."""
    return _mode() != "blas" and isa() is not None


def wanted_over_mkl() -> bool:
    """Whether to put our SGEMM in front of torch's MKL: on an AMD CPU, where MKL runs its AVX2
    code (slower than either build of ours: README), or with LUMINAL_GEMM=luminal; not over MKL's
    own kernels on an Intel CPU."""
    mode = _mode()
    if mode == "blas" or isa() is None:
        return False
    return mode == "luminal" or vendor() == "AuthenticAMD"


def vendor() -> str:
    """The CPU's vendor string ("GenuineIntel", "AuthenticAMD"; "" where /proc/cpuinfo lacks one)."""
    return build.cpu_info()[1]


_prepared = threading.Event()


def prepare(spare: bool | None = None) -> None:
    """Start building the library in the background as a compile begins (once per process), so it
    compiles while Python lowers the graph; only with a core to spare (`spare`: the caller's look)."""
    if _prepared.is_set() or isa() is None or _mode() == "blas" or build.compiler() is None:
        return
    _prepared.set()
    if not (build.spare_core() if spare is None else spare):
        return

    def run():
        for t in threading.enumerate():  # after the GEMM object's build (build.prepare_object), not beside it:
            if t.name == "luminal-cc" and t is not threading.current_thread():  # one core stays Python's
                t.join()
        try:
            with in_background():
                _build()
        except Exception:  # noqa: BLE001 - `sgemm` builds again and logs why, and the BLAS serves
            pass

    threading.Thread(target=run, name="luminal-cc-sgemm", daemon=True).start()


def sgemm(fallback: int) -> int | None:
    """The address of our SGEMM (cblas_sgemm's ILP64 signature), calling `fallback` (a cblas_sgemm
    address) for what it does not take; None when it cannot be built (the BLAS serves)."""
    with _lock:
        if fallback not in _loaded:
            if _loaded:  # one library, one fallback: a second BLAS (never so far) keeps its own sgemm
                return None
            _loaded[fallback] = _load(fallback)
        return _loaded[fallback]


_packing: dict[str, int] = {}  # the packed-weight entry points of the loaded library (`packing`)


def packing() -> tuple[int, int, int] | None:
    """(pack, packed GEMM, free) addresses of the loaded library's entry points for weights packed
    once per runtime (the prelude's `lum_gemm_fw`; `CpuRuntime.pack_weights`); None before
    `sgemm` loaded it or where it could not."""
    with _lock:
        return tuple(_packing[k] for k in ("pack", "gemm", "free")) if _packing else None


def _load(fallback: int) -> int | None:
    address = None
    try:
        lib = ctypes.CDLL(str(_build()))
        if lib.lum_own_sgemm_ok():
            lib.lum_own_sgemm_set_fallback(ctypes.c_void_p(fallback))
            address = ctypes.cast(lib.lum_own_sgemm, ctypes.c_void_p).value
            _packing.update({k: ctypes.cast(getattr(lib, f), ctypes.c_void_p).value for k, f in
                             (("pack", "lum_own_sgemm_pack"), ("gemm", "lum_own_sgemm_packed"),
                              ("free", "lum_own_sgemm_pack_free"))})
    except (build.CpuBuildError, OSError) as exc:  # a compiler without the ISA's support: the BLAS, correct as ever
        LOG.debug("luminal's %s SGEMM is not available: %s", isa(), exc)
    return address
