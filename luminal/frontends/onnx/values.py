"""The values of the ONNX importer: ONNX element types as HLIR dtypes, and what a value name
maps to while importing (`Value`: a luminal `Tensor`, a `Known` value, or a `Seq`).

Kept apart from the importer so that the op modules and `shape_eval` import them without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from luminal.frontends.onnx.errors import OnnxImportError, OnnxInputError
from luminal.frontends.onnx.narrow import WIDENED
from luminal.hlir.dtypes import DType

TP = onnx.TensorProto
# ONNX element types -> HLIR dtypes. Narrow integers widen (to i32 / i64) inside the graph and
# are cast back at the boundary; their wrap-around on overflow is not modeled.
DTYPES = {
    TP.FLOAT: DType.F32, TP.DOUBLE: DType.F64, TP.FLOAT16: DType.F16, TP.BFLOAT16: DType.BF16,
    TP.INT32: DType.I32, TP.INT64: DType.I64, TP.BOOL: DType.BOOL,
    TP.INT8: DType.I32, TP.INT16: DType.I32, TP.UINT8: DType.I32, TP.UINT16: DType.I32,
    TP.UINT32: DType.I64, TP.UINT64: DType.I64,
    **WIDENED,  # float8 / float4 as f32, int4 / int2 as i32: see narrow.py
}


def hlir_dtype(elem_type: int, what: str = "") -> DType:
    if elem_type not in DTYPES:
        name = TP.DataType.Name(elem_type) if elem_type in TP.DataType.values() else str(elem_type)
        raise OnnxImportError(f"{what}ONNX element type {name} is not supported (luminal has f32 f64 f16 bf16 i32 i64 bool, and carries narrower types widened)")
    return DTYPES[elem_type]


class Known:
    """A value known at compile time: a NumPy array (dtype `object` if it holds symbolic dims)."""

    __slots__ = ("array", "dtype")

    def __init__(self, array, dtype: DType | None = None):
        array = np.asarray(array)
        if dtype is None:
            dtype = DType.I64 if array.dtype == object else DType.of(array.dtype)
        if array.dtype != object:
            array = array.astype(dtype.numpy, copy=False)
        self.array, self.dtype = array, dtype

    @property
    def symbolic(self) -> bool:
        return self.array.dtype == object

    def __repr__(self) -> str:
        return f"Known({self.array!r}, {self.dtype})"


class Seq:
    """An ONNX sequence returned by an op: a list of values (kept apart from multiple outputs)."""

    __slots__ = ("items",)

    def __init__(self, items):
        self.items = list(items)


class Value:
    __slots__ = ("tensor", "known", "seq")

    def __init__(self, tensor=None, known=None, seq=None):
        self.tensor, self.known, self.seq = tensor, known, seq

    @property
    def empty(self) -> bool:
        """An empty optional (ONNX `Optional` without input, or a graph input given as None)."""
        return self.tensor is None and self.known is None and self.seq is None


@dataclass(frozen=True)
class IOInfo:
    """An input or output of a model: name, NumPy dtype, shape (str for a symbolic dim)."""

    name: str
    dtype: np.dtype
    shape: tuple

    def __str__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"{self.name}: {self.dtype}[{dims}]"


def gather_feeds(names: list[str], args: tuple, kwargs: dict, one_dict: bool = True) -> dict:
    """A model call's inputs by name: one dict of them (when `one_dict`), or positional values in
    the order of `names` plus keywords; OnnxInputError for too many or doubly given inputs. A dict
    given alone is returned itself: callers read it, never change it."""
    if one_dict and len(args) == 1 and isinstance(args[0], dict):
        return args[0] if not kwargs else dict(args[0], **kwargs)
    if len(args) > len(names):
        raise OnnxInputError(f"{len(args)} positional inputs given, the model takes {len(names)}: {names}")
    feeds = dict(zip(names, args))
    dup = [k for k in kwargs if k in feeds]
    if dup:
        raise OnnxInputError(f"input(s) {dup} given both positionally and by name")
    feeds.update(kwargs)
    return feeds
