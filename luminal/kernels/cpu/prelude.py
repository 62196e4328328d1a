"""The C prelude every library of the cpu backend starts with: half types, integer Mod with its
error flag, NaN-propagating max/min, and the GEMM entry points (BLAS through function pointers set
by `lum_set_blas`, gemv for M or N of 1, double accumulation under `set_precision("float64")`,
loops for integers and without a BLAS). The C lives in `c/` as C files (package data); this
module only puts them together, with the one Philox every dialect shares between them."""

from pathlib import Path

from luminal.kernels.render.cstyle import PHILOX_C  # the one Philox of every dialect

C_DIR = Path(__file__).parent / "c"


def c_source(name: str) -> str:
    """The text of `c/<name>`, one of the backend's C files."""
    return (C_DIR / name).read_text()


PRELUDE = c_source("prelude_head.h") + PHILOX_C.format(q="static inline") + c_source("prelude_tail.h")
SHARED = c_source("shared.c")  # the BLAS entry points: in the library that owns them (program.py)
