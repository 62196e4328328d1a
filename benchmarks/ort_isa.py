"""onnxruntime on the ISA luminal builds for: with `LUMINAL_ISA=avx2` on a CPU with AVX-512, the
benchmarks make onnxruntime run its AVX2 kernels too, so that its column is what it would be on a
CPU without AVX-512 (as torch's is, through `ATEN_CPU_CAPABILITY` and `MKL_ENABLE_INSTRUCTIONS`:
`luminal/kernels/cpu/isa.py`).

onnxruntime has no such variable: its MLAS reads CPUID once, when the library loads, and picks
its GEMM, convolution and pooling kernels from it. So `apply()`, called by a benchmark's `main`
before anything imports onnxruntime, turns on Linux's CPUID faulting for the process and answers
CPUID as a CPU without AVX-512 would (`benchmarks/c/cpuid_avx2.c`: the AVX-512 and AMX feature
bits cleared, nothing else). It needs the CPU flag `cpuid_fault` (Intel since Ivy Bridge, and
virtual machines that pass it through); without it onnxruntime keeps its native kernels and the
results' header says so (`state()`). Benchmarks only: nothing in `luminal/` installs it.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

SOURCE = Path(__file__).parent / "c" / "cpuid_avx2.c"
AVX512F = 1 << 16  # CPUID leaf 7, EBX
_state = {"isa": "native", "why": "LUMINAL_ISA is native"}
_lib = None


def _cpu_flags() -> frozenset[str]:
    """The CPU's own flags (/proc/cpuinfo, not masked by LUMINAL_ISA)."""
    try:
        with open("/proc/cpuinfo") as f:
            return frozenset(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), ()))
    except OSError:
        return frozenset()


def apply() -> dict:
    """Under `LUMINAL_ISA=avx2` on a CPU with AVX-512: CPUID answered without AVX-512 from now on
    (before onnxruntime loads). Returns `state()`. Idempotent."""
    global _lib
    from luminal.kernels.cpu import build, isa

    if _lib is not None or isa.name() != "avx2":
        return state()
    flags = _cpu_flags()
    if "avx512f" not in flags:
        _state.update(isa="avx2", why="the CPU has no AVX-512")
        return state()
    if "onnxruntime" in sys.modules:
        _state.update(isa="native", why="onnxruntime was loaded before the CPUID mask")
        return state()
    if "cpuid_fault" not in flags:
        _state.update(isa="native", why="no CPUID faulting on this CPU: onnxruntime keeps its AVX-512 kernels")
        return state()
    if build.compiler() is None:
        _state.update(isa="native", why="no C compiler to build the CPUID mask: onnxruntime keeps its AVX-512 kernels")
        return state()
    lib = ctypes.CDLL(str(build.build(SOURCE.read_text())))
    lib.lum_cpuid7_ebx.restype = ctypes.c_uint
    lib.lum_cpuid_answered.restype = ctypes.c_long
    failed = lib.lum_mask_avx512()
    if failed:
        _state.update(isa="native", why=f"CPUID faulting refused (errno {failed}): onnxruntime keeps its AVX-512 kernels")
        return state()
    if lib.lum_cpuid7_ebx() & AVX512F:
        raise RuntimeError("the CPUID mask is installed but CPUID still reports AVX-512F")
    _lib = lib
    _state.update(isa="avx2", why="CPUID masked (benchmarks/ort_isa.py)")
    return state()


def state() -> dict:
    """{"isa": the ISA onnxruntime's kernels use, "why": how, "cpuid_answered": CPUIDs masked so far}."""
    return {**_state, "cpuid_answered": int(_lib.lum_cpuid_answered()) if _lib is not None else 0}
