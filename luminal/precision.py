"""The working precision of f32/f16/bf16 math, and how each device rounds it.

    luminal.set_precision("float32")             # the process default, read at each call
    luminal.compile(model, precision="float64")  # this compile's, fixed: set_precision leaves it alone
    compiled.device.precision                    # what the model's calls compute at now

"float64": f32/f16/bf16 math in float64, rounded once (more precise than PyTorch's f32; every
device accumulates f32 GEMMs in double, about 2x slower on GEMM-bound models). "float32": f32
GEMMs as PyTorch's at "highest" (never TF32) and, on the NumPy runtime, f32 elementwise math.
float64 graphs compute in float64 either way. A compile without `precision=` follows
`set_precision` call by call, else its device's default (`Arithmetic.default`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from luminal.errors import OptionError

PRECISIONS = ("float64", "float32")
_process: list[str | None] = [None]  # set_precision's setting; None: each device's default


def check(precision: str | None) -> str | None:
    """`precision` if it names one (or is None), else OptionError listing the valid ones."""
    if precision is not None and precision not in PRECISIONS:
        raise OptionError(f"precision {precision!r}: expected one of {PRECISIONS} or None (each device's default)")
    return precision


def set_precision(precision: str | None) -> str | None:
    """The process default precision (as `torch.set_float32_matmul_precision`), from the next call
    on, for every model compiled without `precision=`: "float64" or "float32" (see the module
    docstring); None goes back to each device's default (float64 on "numpy", float32 elsewhere).
    Returns the previous setting, so `set_precision(previous)` restores it."""
    previous, _process[0] = _process[0], check(precision)
    return previous


@dataclass(frozen=True)
class Arithmetic:
    """How a device computes f32/f16/bf16 values: its default precision, the compile's fixed one,
    and how it rounds beside its GEMMs (the NumPy runtime copies that when it serves the device,
    so every call of a `cpu` model overflows, underflows and turns NaN alike)."""

    default: str  # without a compile's precision or set_precision's
    elementwise_f32: bool = False  # elementwise math in f32 at either precision (else in the precision's dtype)
    sums_rows_in_double: bool = False  # f32/f16/bf16 row sums accumulate in double, rounded once
    sums_windows_in_f32: bool = False  # window (conv) sums of f32/f16/bf16 accumulate in f32
    fixed: str | None = None  # the compile's `precision=`: fixed, whatever set_precision says later

    @property
    def precision(self) -> str:
        """The precision a call that starts now computes at."""
        return self.fixed or _process[0] or self.default

    def fixing(self, precision: str | None) -> Arithmetic:
        """This arithmetic at `precision` for good (None: following set_precision, as it is)."""
        return self if check(precision) is None else replace(self, fixed=precision)


REFERENCE = Arithmetic("float64")  # the NumPy runtime's own: the specification
C = Arithmetic("float32", elementwise_f32=True, sums_rows_in_double=True, sums_windows_in_f32=True)
KERNELS = Arithmetic("float32", elementwise_f32=True)  # the generated CUDA kernels (GEMMs as `luminal.kernels.cublas`)
