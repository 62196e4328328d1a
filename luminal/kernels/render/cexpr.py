"""Symbolic dims and constants as C expressions. A symbol is a `long long` argument `d_<name>`;
division appears only as floor/ceiling of a quotient of nonnegative terms, exact in C.
"""

from __future__ import annotations

import contextlib
import contextvars
import math

import numpy as np
import sympy

from luminal.errors import UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType

_INDEX_TYPE = contextvars.ContextVar("luminal_index_type", default="long long")
_DIALECT = contextvars.ContextVar("luminal_dialect")


@contextlib.contextmanager
def rendering(dialect):
    """Render in `dialect` (a `dialect.Dialect`) inside the block: its spellings of types,
    literals and conversions are what `c_literal` and the shared tools write."""
    token = _DIALECT.set(dialect)
    try:
        yield dialect
    finally:
        _DIALECT.reset(token)


def active():
    """The dialect being rendered (`rendering`)."""
    try:
        return _DIALECT.get()
    except LookupError:
        raise RuntimeError("a kernel rendered outside `rendering(dialect)`") from None


@contextlib.contextmanager
def index_math(ctype: str):
    """Render index math in `ctype` ("int" or "long long", the default) inside the block (CUDA's
    32-bit builds, `cstyle.index_variants`)."""
    token = _INDEX_TYPE.set(ctype)
    try:
        yield
    finally:
        _INDEX_TYPE.reset(token)


def index_type() -> str:
    """The C type of index variables in the kernel being rendered."""
    return _INDEX_TYPE.get()


def c_dim(d, ll: bool = True) -> str:
    """A dim (int or sympy) as C integer arithmetic (32-bit inside `index_math("int")`:
    no LL suffix, symbols narrowed from their `long long` arguments)."""
    narrow = _INDEX_TYPE.get() == "int"
    suffix = "LL" if ll and not narrow else ""
    if isinstance(d, int):
        return f"{d}{suffix}" if d >= 0 else f"({d}{suffix})"
    return _c(sympy.sympify(d), suffix, "(int)d_" if narrow else "d_")


def _c(e, suffix: str, sym_prefix: str = "d_") -> str:
    if e.is_Integer:
        v = int(e)
        return f"{v}{suffix}" if v >= 0 else f"({v}{suffix})"
    if e.is_Symbol:
        return f"({sym_prefix}{e.name})" if sym_prefix != "d_" else f"d_{e.name}"
    if e.is_Add:
        return "(" + " + ".join(_c(a, suffix, sym_prefix) for a in e.args) + ")"
    if e.is_Mul:
        num, den = sympy.fraction(e)
        if den != 1:
            raise UnsupportedError(f"dim expression {e} is not an integer")
        return "(" + " * ".join(_c(a, suffix, sym_prefix) for a in e.args) + ")"
    if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
        return "(" + " * ".join([_c(e.base, suffix, sym_prefix)] * int(e.exp)) + ")"
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        n, m = _c(num, suffix, sym_prefix), _c(den, suffix, sym_prefix)
        return f"({n} / {m})" if isinstance(e, sympy.floor) else f"(({n} + {m} - 1) / {m})"
    if isinstance(e, sympy.Mod):
        return f"({_c(e.args[0], suffix, sym_prefix)} % {_c(e.args[1], suffix, sym_prefix)})"
    if isinstance(e, (sympy.Min, sympy.Max)):
        fn = "lum_min" if isinstance(e, sympy.Min) else "lum_max"
        out = _c(e.args[0], suffix, sym_prefix)
        for a in e.args[1:]:
            out = f"{fn}({out}, {_c(a, suffix, sym_prefix)})"
        return out
    raise UnsupportedError(f"cannot render dim expression {e} as C")


def dims_symbols(*dim_lists) -> list[str]:
    """Names of the symbols the given dims use, sorted (the order of the kernel arguments)."""
    names: set[str] = set()
    for dims in dim_lists:
        for d in dims:
            names |= {s.name for s in sym.free_symbols(d)}
    return sorted(names)


def c_literal(value, dtype: DType) -> str:
    """A scalar constant in the compute type of `dtype` (float for f16/bf16), exact."""
    if dtype is DType.BOOL:
        return "true" if value else "false"
    if hasattr(value, "free_symbols") and not isinstance(value, (int, float)):
        return f"(({compute_type(dtype)}){c_dim(value)})"
    if dtype.is_int:
        v = int(value)
        suffix = "LL" if dtype is DType.I64 else ""
        if v == int(np.iinfo(dtype.numpy).min):  # `-9223372036854775808LL` negates a literal too wide for its type
            return f"({v + 1}{suffix} - 1)"
        return f"{v}{suffix}"
    double = dtype is DType.F64
    v = float(value) if double else float(np.asarray(value).astype(dtype.numpy).astype(np.float32))  # the value the dtype holds
    if math.isnan(v) or math.isinf(v):  # by bit pattern, as the dialect spells it
        bits = {True: 0x7FF8000000000000, False: 0x7FC00000}[double] if math.isnan(v) else (
            (0x7FF0000000000000 if double else 0x7F800000) | ((1 << 63 if double else 1 << 31) if v < 0 else 0))
        return active().float_bits(bits, double)
    return v.hex() if double else float(np.float32(v)).hex() + "f"


def lowest(t: str) -> str:
    """The identity of max in compute type `t` (-inf for floats)."""
    if t in ("float", "double"):
        return c_literal(float("-inf"), DType.F64 if t == "double" else DType.F32)
    return c_literal(-(2**63) if t == "long long" else -(2**31), DType.I64 if t == "long long" else DType.I32)


def compute_type(dtype: DType) -> str:
    """The C type values of `dtype` are computed in (f16/bf16 compute in float)."""
    if dtype in (DType.F16, DType.BF16):
        return "float"
    return dtype.ctype
