"""Which x86-64 instruction set luminal's C may use: this CPU's own ("native", the default), or
`LUMINAL_ISA=avx2`, to run the suite and benchmarks as on a CPU without AVX-512 (README: "The two
commands"). It masks the `avx512*`/`amx*` flags where luminal reads them (`build.cpu_info`), and
`apply_to_libraries` sets the variables that make torch, oneDNN, MKL and OpenBLAS do likewise. Each
library reads its variable once, when it loads: `import luminal` sets them before anything else."""

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
    """Set `library_environment()` in os.environ where not set already; returns what it set."""
    applied = {}
    for key, value in library_environment().items():
        if key not in os.environ:
            os.environ[key] = applied[key] = value
    return applied


def mismatched_blas(openblas_core: str | None) -> bool:
    """Whether an OpenBLAS running `openblas_core`'s kernels uses instructions the ISA lacks."""
    return name() == "avx2" and (openblas_core or "").strip().lower() in AVX512_BLAS_CORES
