"""The element types of the HLIR and their NumPy / C / torch spellings.

bf16 comes from `ml_dtypes`, so the NumPy reference runtime handles it like any other dtype.
It is imported the first time something asks for bf16's NumPy dtype (`DType.numpy`, `DType.of`
on a dtype it does not know yet), not with luminal: importing its extension would be most of `import luminal`, for models that
never touch bf16.
"""

from __future__ import annotations

import enum
import functools
import sys

import numpy as np

from luminal.errors import DTypeError


class DType(enum.Enum):
    __hash__ = object.__hash__  # members are singletons: identity, in C (Enum's hashes the name in Python)
    # value: (short name, numpy dtype, C type)
    F32 = ("f32", np.dtype(np.float32), "float")
    F64 = ("f64", np.dtype(np.float64), "double")
    F16 = ("f16", np.dtype(np.float16), "__half")
    BF16 = ("bf16", None, "__nv_bfloat16")  # numpy: ml_dtypes' bfloat16, on first use (`_bfloat16`)
    I32 = ("i32", np.dtype(np.int32), "int")
    I64 = ("i64", np.dtype(np.int64), "long long")
    BOOL = ("bool", np.dtype(np.bool_), "bool")

    @property
    def short(self) -> str:
        return self.value[0]

    @property
    def numpy(self) -> np.dtype:
        dtype = self.value[1]
        return dtype if dtype is not None else _bfloat16()

    @property
    def ctype(self) -> str:
        return self.value[2]

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self in FLOATS

    @property
    def is_int(self) -> bool:
        return self in (DType.I32, DType.I64)

    @property
    def accumulator(self) -> DType:
        """The dtype reductions of this dtype accumulate in (DESIGN.md: f32 for f16/bf16)."""
        if self in (DType.F16, DType.BF16):
            return DType.F32
        if self is DType.BOOL or self is DType.I32:
            return DType.I64  # torch sums bools and int32 to int64
        return self

    def __repr__(self) -> str:
        return f"luminal.{self.short}"

    __str__ = __repr__

    @staticmethod
    def of(value) -> DType:
        """The DType of a NumPy dtype, a torch dtype, a DType, or a short name like 'f32'."""
        if isinstance(value, DType):
            return value
        if isinstance(value, str) and value in _BY_SHORT:
            return _BY_SHORT[value]
        torch_name = getattr(value, "is_floating_point", None) and str(value)
        if torch_name and torch_name in _BY_TORCH:
            return _BY_TORCH[torch_name]
        try:
            np_dtype = np.dtype(value)
        except TypeError:
            try:  # a name only ml_dtypes registers ("bfloat16"), before it was imported
                _bfloat16()
                np_dtype = np.dtype(value)
            except TypeError:
                raise DTypeError(f"unsupported dtype {value!r}") from None
        if np_dtype in _BY_NUMPY:
            return _BY_NUMPY[np_dtype]
        if is_bfloat16(np_dtype):
            return DType.BF16
        raise DTypeError(
            f"unsupported dtype {np_dtype}; luminal supports {', '.join(d.short for d in DType)}"
        )


FLOATS = frozenset({DType.F32, DType.F64, DType.F16, DType.BF16})
_BY_SHORT = {d.short: d for d in DType}
_BY_NUMPY = {d.value[1]: d for d in DType if d.value[1] is not None}  # and bf16 (`DType.of`)

_BY_TORCH = {
    "torch.float32": DType.F32,
    "torch.float64": DType.F64,
    "torch.float16": DType.F16,
    "torch.bfloat16": DType.BF16,
    "torch.int32": DType.I32,
    "torch.int64": DType.I64,
    "torch.bool": DType.BOOL,
}

f32, f64, f16, bf16 = DType.F32, DType.F64, DType.F16, DType.BF16
int32, int64, bool_ = DType.I32, DType.I64, DType.BOOL


@functools.lru_cache(maxsize=1)
def _bfloat16() -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def is_bfloat16(dtype) -> bool:
    """Whether a NumPy dtype is bf16, without importing ml_dtypes (no array is bf16 before it is)."""
    return "ml_dtypes" in sys.modules and dtype == _bfloat16()
