"""Which x86-64 instruction set luminal's C may use: this CPU's own ("native", the default), or
`LUMINAL_ISA=avx2`, which runs everything as on a CPU without AVX-512 (an AMD EPYC before Zen 4, a
laptop), so that the suite and the benchmarks can be run for such a CPU on one that has AVX-512.

The switch masks the CPU's `avx512*` (and `amx*`) feature flags where luminal reads them
(`build.cpu_info`): the compiler flags, luminal's AVX-512 SGEMM (never put in front of the BLAS)
and every choice that depends on them follow. The libraries beside luminal pick their kernels
themselves, each by its own variable; `apply_to_libraries` sets those (unless already set) so
that the answers a test compares with are the ones such a CPU gives too: ATen's vectorized ops
(`ATEN_CPU_CAPABILITY`), oneDNN's JIT kernels (`ONEDNN_MAX_CPU_ISA`: its AVX-512 gelu returns NaN
for +inf where its AVX2 one returns +inf), MKL (`MKL_ENABLE_INSTRUCTIONS`) and NumPy's OpenBLAS
(`OPENBLAS_CORETYPE`). Each library reads its variable once, when it loads or first runs, so
they must be set before torch and NumPy are imported: `import luminal` does so first thing (and
warns when NumPy or torch came first), and the runtime reports an OpenBLAS that loaded AVX-512
kernels anyway (`mismatched_blas`). onnxruntime has no such variable: under the switch its kernels
stay this CPU's (the benchmarks' onnxruntime column is then a native one)."""

from __future__ import annotations

import logging
import os

LOG = logging.getLogger("luminal.cpu")

ISAS = ("native", "avx2")
_MASKED = {"avx2": ("avx512", "amx")}  # feature-flag prefixes a CPU of that ISA lacks
_LIBRARIES = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                       "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OPENBLAS_CORETYPE": "Haswell"}}
# OpenBLAS core names (openblas_get_corename) whose SGEMM kernels use AVX-512
AVX512_BLAS_CORES = ("skylakex", "cooperlake", "sapphirerapids", "zen4", "zen5")
_warned: set[str] = set()


def name() -> str:
    """The ISA asked for by `LUMINAL_ISA` ("native" when unset; an unknown name warns once)."""
    value = os.environ.get("LUMINAL_ISA", "native").strip().lower() or "native"
    if value not in ISAS:
        if value not in _warned:
            _warned.add(value)
            LOG.warning("LUMINAL_ISA=%r is not one of %s; using 'native'", value, ", ".join(map(repr, ISAS)))
        return "native"
    return value


def mask(cpu_flags: frozenset[str]) -> frozenset[str]:
    """`cpu_flags` (as /proc/cpuinfo lists them) less what the chosen ISA lacks."""
    prefixes = _MASKED.get(name(), ())
    return frozenset(f for f in cpu_flags if not f.startswith(prefixes)) if prefixes else cpu_flags


def library_environment() -> dict[str, str]:
    """The variables that make torch, oneDNN, MKL and OpenBLAS use the chosen ISA's kernels."""
    return dict(_LIBRARIES.get(name(), {}))


def apply_to_libraries() -> dict[str, str]:
    """Set `library_environment()` in os.environ where not set already; returns what it set. Takes
    effect only for the libraries not loaded yet (call it before importing torch and NumPy)."""
    applied = {}
    for key, value in library_environment().items():
        if key not in os.environ:
            os.environ[key] = applied[key] = value
    return applied


def mismatched_blas(openblas_core: str | None) -> bool:
    """Whether an OpenBLAS running `openblas_core`'s kernels uses instructions the ISA lacks."""
    return name() == "avx2" and (openblas_core or "").strip().lower() in AVX512_BLAS_CORES
