"""The BLAS the compiled C calls and the thread count it runs with: PyTorch's MKL when torch is
loaded, else the OpenBLAS NumPy ships (`_Blas`), found at run time (no link-time dependency),
maybe with luminal's own SGEMM in front (`sgemm.py`)."""

from __future__ import annotations

import ctypes
import glob
import logging
import os
import sys

import numpy as np

from luminal.kernels.cpu import isa, sgemm

LOG = logging.getLogger("luminal")


class _Blas:
    """The GEMM/GEMV entry points the C code calls, found at run time (no link-time dependency): the
    MKL inside PyTorch when torch is imported (its threads are the loops' libgomp team: one pool, not
    two fighting over the cores), else NumPy's ILP64 OpenBLAS; maybe with `sgemm` in front."""

    def __init__(self, kind: str):
        self.kind = kind  # "mkl", "openblas" or "none" (loops)
        self.sgemm = self.dgemm = self.sgemv = self.dgemv = self.set_threads_ptr = self.get_threads_ptr = None  # what the C code calls
        self.path = None
        self.core = None  # OpenBLAS's kernels (its core name: "Haswell", "SkylakeX", ...)
        self.gemm = "blas"  # who serves sgemm: the BLAS, or "luminal-avx512" / "luminal-avx2" in front of it (sgemm.py)
        self.front = None  # luminal's sgemm, when it stands in front of `sgemm`
        if kind != "mkl" or not self._find_mkl():  # a forced MKL without torch loaded: OpenBLAS
            self.kind = "openblas" if self._find_openblas() else "none"

    def _find_mkl(self) -> bool:
        torch = sys.modules.get("torch")
        lib_dir = os.path.join(os.path.dirname(getattr(torch, "__file__", "") or ""), "lib")
        path = os.path.join(lib_dir, "libtorch_cpu.so")
        if not os.path.exists(path):
            return False
        try:
            lib = ctypes.CDLL(path)  # already loaded by `import torch`: the same handle
            found = [ctypes.cast(getattr(lib, f"{n}_"), ctypes.c_void_p).value for n in ("sgemm", "dgemm", "sgemv", "dgemv")]
        except (OSError, AttributeError):
            return False
        if not all(found):
            return False
        self.sgemm, self.dgemm, self.sgemv, self.dgemv = found
        setter = getattr(lib, "MKL_Set_Num_Threads_Local", None)  # C API (by value); torch sets MKL's global count: ours is per call
        self.set_threads_ptr = None if setter is None else ctypes.cast(setter, ctypes.c_void_p).value
        self.path = path
        if sgemm.wanted_over_mkl():  # MKL runs its AVX2 code on an AMD CPU
            fallback = blas_of("openblas").sgemm  # for what the prelude never asks (alpha, beta, column-major)
            self.front = sgemm.sgemm(fallback) if fallback else None
            if self.front is not None:
                self.gemm = f"luminal-{sgemm.isa()}"
        return True

    def _find_openblas(self) -> bool:
        libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
        for path in sorted(glob.glob(os.path.join(libs, "*openblas*.so*"))):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for prefix, suffix in (("scipy_", "64_"), ("", "64_")):  # the C code passes 64-bit ints: ILP64 only
                try:
                    self.sgemm = ctypes.cast(getattr(lib, f"{prefix}cblas_sgemm{suffix}"), ctypes.c_void_p).value
                    self.dgemm = ctypes.cast(getattr(lib, f"{prefix}cblas_dgemm{suffix}"), ctypes.c_void_p).value
                except AttributeError:
                    continue
                for name in ("sgemv", "dgemv"):  # optional: gemm serves matrix-vector products without them
                    fn = getattr(lib, f"{prefix}cblas_{name}{suffix}", None)
                    setattr(self, name, None if fn is None else ctypes.cast(fn, ctypes.c_void_p).value)
                # its thread count: 1 during a call, the caller's restored after it (`lum_run`)
                setter = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}", None)
                getter = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
                if setter is not None and getter is not None:
                    self.set_threads_ptr = ctypes.cast(setter, ctypes.c_void_p).value
                    self.get_threads_ptr = ctypes.cast(getter, ctypes.c_void_p).value
                self.path = path
                core = getattr(lib, f"{prefix}openblas_get_corename{suffix}", None)  # as chosen at load time
                if core is not None:
                    core.restype = ctypes.c_char_p
                    self.core = (core() or b"").decode(errors="replace") or None
                if isa.mismatched_blas(self.core):  # it chose its kernels when NumPy loaded it
                    LOG.warning("LUMINAL_ISA=%s, but NumPy's OpenBLAS runs its %s (AVX-512) kernels: set "
                                "OPENBLAS_CORETYPE=Haswell before importing numpy", isa.name(), self.core)
                if sgemm.wanted(self.core):  # on any CPU with AVX-512 or AVX2, whichever kernels OpenBLAS runs
                    self.front = sgemm.sgemm(self.sgemm)
                    if self.front is not None:
                        self.gemm = f"luminal-{sgemm.isa()}"
                return True
        self.sgemm = self.dgemm = None
        return False

    def front_for(self, gemm: str | None) -> int | None:
        """The SGEMM put in front of this BLAS for the choice `gemm` (`choices.GEMMS`; None: the
        default's): luminal's own, or None (the BLAS's own serves)."""
        if gemm is None or self.front is not None:
            return None if gemm == "blas" else self.front
        if gemm == "blas" or sgemm.isa() is None:
            return None
        fallback = blas_of("openblas").sgemm if self.kind == "mkl" else self.sgemm
        return sgemm.sgemm(fallback) if fallback else None

    def bind(self, lib, gemm: str | None = None) -> None:
        """Point the library `lib`'s GEMM entry points at this BLAS (`gemm`: `front_for`'s choice)."""
        if self.kind == "mkl":
            lib.lum_set_fortran_blas(*(ctypes.c_void_p(p) for p in (self.sgemm, self.dgemm, self.sgemv, self.dgemv,
                                                                    self.set_threads_ptr)))
        else:
            lib.lum_set_blas(*(ctypes.c_void_p(p) for p in (self.sgemm, self.dgemm, self.set_threads_ptr,
                                                            self.sgemv, self.dgemv, self.get_threads_ptr)))
        # MKL's sgemv off Intel CPUs is slower than the prelude's few-rows loops (`lum_own_gemv`, README)
        lib.lum_set_own_gemv(ctypes.c_int(int(self.kind == "mkl" and sgemm.vendor() != "GenuineIntel")))
        front = self.front_for(gemm)
        if front is not None:
            lib.lum_set_sgemm_front(ctypes.c_void_p(front))
            packing = sgemm.packing()
            if packing is not None:  # its weights packed once per runtime (the prelude's lum_gemm_fw)
                lib.lum_set_sgemm_packed(ctypes.c_void_p(packing[0]), ctypes.c_void_p(packing[1]))


_BLAS: dict[str, _Blas] = {}


def blas() -> _Blas:
    """The BLAS a runtime built now binds: MKL once torch is imported (see `_Blas`)."""
    want = os.environ.get("LUMINAL_BLAS", "").strip().lower()
    if want not in ("mkl", "openblas"):
        want = "mkl" if "torch" in sys.modules else "openblas"
    return blas_of(want)


def blas_of(kind: str) -> _Blas:
    """The `_Blas` of `kind` ("mkl" or "openblas"), found once per process."""
    if kind not in _BLAS:
        _BLAS[kind] = _Blas(kind)
    return _BLAS[kind]


_CPUS = max(1, os.cpu_count() or 1)  # read once: os.cpu_count() per call is a measurable part of a small model's call


def threads() -> int:
    """OpenMP/BLAS threads: torch's setting when torch is loaded (no oversubscription beside it)."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        return max(1, int(torch.get_num_threads()))
    return _CPUS
