"""The ATen op table: `@aten("add.Tensor")` registers one small function per op overload.

Each function takes a `Ctx` (the graph, the FX node, the dtype and shape torch reports for the
result) and the node's arguments with FX nodes replaced by luminal values (`Tensor`s, Python
scalars, symbolic dims). The importer casts every tensor result to the dtype on the node's
`meta['val']` and checks its shape, so an op only has to get its *computation* dtype right:
`cast_to(cx.dtype, a, b)` for arithmetic (torch computes in the result dtype), `promote(a, b)`
for comparisons (torch compares in the promoted dtype, then returns bool).

The families live in their own modules (`aten_elementwise`, `aten_movement`, `aten_reduce`,
`aten_index`, `aten_nn`) and import this one; `aten_table.table()` imports them all and returns
the registry.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from typing import Any

import torch

from luminal.builder import Graph, Tensor
from luminal.frontends.torch.dims import conform
from luminal.hlir.dtypes import DType

ATEN: dict[Any, Any] = {}  # "add.Tensor" or a Python callable (operator.getitem) -> fn


def aten(*names):
    """Register `fn` for ATen overloads named like "add.Tensor" (or Python callables)."""

    def register(fn):
        for name in names:
            if name in ATEN:
                raise RuntimeError(f"ATen op {name!r} registered twice")
            ATEN[name] = fn
        return fn

    return register


def op_key(target) -> Any:
    """The registry key of an FX call_function target: "add.Tensor" for aten ops."""
    if isinstance(target, torch._ops.OpOverload):
        ns = target.namespace
        base = f"{target._overloadpacket.__name__}.{target._overloadname}"
        return base if ns == "aten" else f"{ns}::{base}"
    return target


def op_name(target) -> str:
    key = op_key(target)
    return key if isinstance(key, str) else getattr(target, "__qualname__", None) or str(target)


@dataclass
class Ctx:
    """What an op function may need besides its arguments."""

    g: Graph
    node: Any  # the torch.fx.Node
    dtype: DType | None  # luminal dtype of the (first) tensor result
    shape: tuple | None  # luminal dims of the (first) tensor result
    val: Any = None  # meta['val'] (a FakeTensor, a tuple of them, a SymInt, ...)
    hints: dict | None = None  # the traced value of every symbol

    def conform(self, t: Tensor, shape) -> Tensor:
        """`t` under torch's spelling of its dims (`1` for luminal's `Min(1, s0)`), checked."""
        return conform(t, tuple(shape), self.hints or {})

    def full(self, shape, value, dtype) -> Tensor:
        return self.g.scalar(fit_scalar(value, dtype), dtype).expand(tuple(shape))


# --- dtypes ------------------------------------------------------------------------------
TORCH_DTYPES = {
    torch.float32: DType.F32, torch.float64: DType.F64, torch.float16: DType.F16, torch.bfloat16: DType.BF16,
    torch.int32: DType.I32, torch.int64: DType.I64, torch.bool: DType.BOOL,
}
TORCH_OF = {v: k for k, v in TORCH_DTYPES.items()}
NARROW_INTS = {torch.int8: DType.I32, torch.uint8: DType.I32, torch.int16: DType.I32}


def ldtype(td) -> DType:
    """The luminal dtype for a torch dtype (small ints are computed in int32)."""
    from luminal.errors import UnsupportedError

    if td in TORCH_DTYPES:
        return TORCH_DTYPES[td]
    if td in NARROW_INTS:
        return NARROW_INTS[td]
    raise UnsupportedError(f"dtype {td} is not supported by luminal")


def _key(v):
    """What torch's promotion looks at: a tensor's dtype and whether it is 0-dim, or a scalar's kind."""
    if isinstance(v, Tensor):
        return (v.dtype, v.ndim == 0)
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, numbers.Integral) or is_dim(v):
        return "int"
    return "float"


_SCALAR_PROBES = {"bool": True, "int": 1, "float": 1.0}
_SCALAR_DTYPES = {"bool": DType.BOOL, "int": DType.I64, "float": DType.F32}


@functools.cache
def _result_type(ka, kb) -> DType:
    probe = lambda k: _SCALAR_PROBES[k] if isinstance(k, str) else torch.empty(  # noqa: E731
        () if k[1] else (1,), dtype=TORCH_OF[k[0]], device="meta")
    a, b = probe(ka), probe(kb)
    if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
        a = torch.tensor(a, device="meta")  # two scalars: as torch.add(scalar_tensor(a), b)
    return TORCH_DTYPES[torch.result_type(a, b)]


def promote(a, b=None) -> DType:
    """torch's type promotion of two operands, tensors or Python scalars (0-dim tensors are weaker)."""
    if b is None:
        return a.dtype if isinstance(a, Tensor) else _SCALAR_DTYPES[_key(a)]
    return _result_type(_key(a), _key(b))


def is_dim(v) -> bool:
    return hasattr(v, "free_symbols") and not isinstance(v, (numbers.Number, Tensor))


def fit_scalar(value, dtype: DType):
    """A Python scalar converted as torch would when it meets a tensor of `dtype`."""
    if is_dim(value):
        return value
    if dtype is DType.BOOL:
        return bool(value)
    if dtype.is_int:
        return int(value)
    return float(value)


def cast_to(dtype: DType, *vals):
    """Tensors cast to `dtype`; Python scalars converted to match."""
    out = []
    for v in vals:
        if isinstance(v, Tensor):
            out.append(v.cast(dtype))
        elif v is None:
            out.append(None)
        else:
            out.append(fit_scalar(v, dtype))
    return out if len(out) != 1 else out[0]


def as_tensor(cx: Ctx, v, dtype: DType | None = None) -> Tensor:
    """A Tensor from a Tensor or a Python scalar (of `dtype`, default: promoted alone)."""
    if isinstance(v, Tensor):
        return v if dtype is None else v.cast(dtype)
    dtype = dtype or promote(v)
    return cx.g.scalar(fit_scalar(v, dtype), dtype)


def axis_list(dim, ndim: int) -> list[int] | None:
    """ATen's `int[1]? dim`: None or [] means every axis."""
    if dim is None:
        return None
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return None
    return [d % max(ndim, 1) for d in dims]
