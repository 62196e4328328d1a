"""luminal: a deep-learning graph compiler in Python (HLIR -> egglog -> NumPy / CUDA C)."""

import sys as _sys

from luminal.kernels.cpu import isa as _isa  # imports nothing heavy: runs before NumPy and torch load

# LUMINAL_ISA=avx2: torch's, oneDNN's, MKL's and OpenBLAS's kernels as on a CPU without AVX-512 too,
# set before they load (isa.py); one loaded already keeps this CPU's, which the log says.
if (_applied := _isa.apply_to_libraries()) and (_late := [m for m in ("numpy", "torch") if m in _sys.modules]):
    _isa.LOG.warning("LUMINAL_ISA=%s: %s was imported before luminal, so %s may not take effect there; set them "
                     "in the environment", _isa.name(), " and ".join(_late), ", ".join(_applied))

from luminal.builder import Graph, Tensor
from luminal.builder.functional import arange, chunk, concat, full, split, stack, where
from luminal.compiler import CompiledGraph, Report, compile_graph, stats
from luminal.devices import get_precision
from luminal.errors import (
    CacheWarning,
    DeviceError,
    DivisionByZero,
    DTypeError,
    IndexOutOfRange,
    InputError,
    LuminalError,
    OptionError,
    ShapeError,
    UnknownOpError,
    UnsupportedError,
)
from luminal.hlir import DType, Op
from luminal.hlir.dtypes import bf16, bool_, f16, f32, f64, int32, int64
from luminal.precision import set_precision

cat = concat


def __getattr__(name):
    """Entry points that pull in heavy frontends (torch, onnx) only when first used."""
    if name == "onnx":
        import importlib

        return importlib.import_module("luminal.onnx")
    if name in ("compile", "backend", "CompiledModel", "compile_forward"):
        from luminal.frontends import torch as torch_frontend

        return getattr(torch_frontend, name)
    if name == "load":
        from luminal.loading import load

        return load
    raise AttributeError(f"module 'luminal' has no attribute {name!r}")

from luminal.version import __version__  # noqa: E402,F401 - luminal.__version__

__all__ = [
    "CacheWarning", "CompiledGraph", "DType", "DeviceError", "DivisionByZero", "DTypeError", "Report", "compile_graph", "stats", "Graph", "IndexOutOfRange", "InputError", "LuminalError", "Op",
    "OptionError", "ShapeError", "Tensor", "UnknownOpError", "UnsupportedError", "arange", "bf16", "bool_",
    "cat", "chunk", "concat", "f16", "f32", "f64", "full", "int32", "int64", "split", "stack",
    "where", "get_precision", "set_precision",
]
