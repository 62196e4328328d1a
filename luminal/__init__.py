"""luminal: a deep-learning graph compiler in Python (HLIR -> egglog -> NumPy / CUDA C)."""

from luminal.builder import Graph, Tensor
from luminal.builder.functional import arange, chunk, concat, full, split, stack, where
from luminal.errors import (
    DTypeError,
    IndexOutOfRange,
    InputError,
    LuminalError,
    ShapeError,
    UnknownOpError,
    UnsupportedError,
)
from luminal.hlir import DType, Op
from luminal.hlir.dtypes import bf16, bool_, f16, f32, f64, int32, int64

cat = concat

__version__ = "0.1.0"

__all__ = [
    "DType", "DTypeError", "Graph", "IndexOutOfRange", "InputError", "LuminalError", "Op",
    "ShapeError", "Tensor", "UnknownOpError", "UnsupportedError", "arange", "bf16", "bool_",
    "cat", "chunk", "concat", "f16", "f32", "f64", "full", "int32", "int64", "split", "stack",
    "where",
]
