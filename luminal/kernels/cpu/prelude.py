"""The C prelude every library of the cpu backend starts with (half types, integer Mod, NaN-aware
max/min, the GEMM entry points), assembled from the C files in `c/` and the shared Philox."""

from pathlib import Path

from luminal.kernels.render.cstyle import PHILOX_C  # the one Philox of every dialect

C_DIR = Path(__file__).parent / "c"


def c_source(name: str) -> str:
    """The text of `c/<name>`, one of the backend's C files."""
    return (C_DIR / name).read_text()


PRELUDE = (c_source("prelude_head.h") + PHILOX_C.format(q="static inline") + c_source("prelude_tail.h")
           + c_source("few_rows.h"))
SHARED = c_source("shared.c")  # the BLAS entry points: in the library that owns them (program.py)
