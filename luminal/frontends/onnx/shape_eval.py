"""Symbolic evaluation of shape arithmetic: NumPy `object` arrays whose entries are dims.

`Shape` of a tensor with a dim "seq" is the known value [1, seq, 64]; exporters then Gather,
Slice, Concat, do arithmetic on it and feed it to Reshape / Expand / ConstantOfShape / Range.
`evaluate` runs those ops on the object arrays (sympy does the algebra), so consumers get
symbolic shapes at compile time. Anything it cannot decide (a comparison of `seq` with 1, a
division with a negative operand) returns None, and the importer computes the node in the
graph instead, at run time.
"""

from __future__ import annotations

import operator

import numpy as np
import sympy

from luminal.frontends.onnx.values import Known
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType

MAX_ELEMENTS = 1 << 16  # entries of a symbolic value


class _Undecidable(Exception):
    pass


def _obj(k: Known | None):
    return None if k is None else k.array.astype(object)


def _ints(arr) -> list[int]:
    vals = np.asarray(arr).reshape(-1).tolist()
    if any(isinstance(v, sympy.Basic) and not v.is_Integer for v in vals):
        raise _Undecidable
    return [int(v) for v in vals]


def _norm(v):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    return sym.norm(v)


def _result(arr, dtype: DType) -> Known:
    arr = np.asarray(arr, dtype=object)
    flat = [_norm(v) for v in arr.reshape(-1)]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    out = out.reshape(arr.shape)
    if all(not isinstance(v, sympy.Basic) for v in flat):
        return Known(out.astype(dtype.numpy), dtype)
    return Known(out, dtype)


def _sign(v) -> int:
    """The sign of a dim expression (dims are nonnegative), or _Undecidable."""
    if isinstance(v, (int, float, np.integer, np.floating)):
        return (v > 0) - (v < 0)
    if v.is_zero:
        return 0
    if v.is_positive:
        return 1
    if v.is_negative:
        return -1
    if v.is_nonnegative:
        raise _Undecidable  # 0 or positive
    raise _Undecidable


def _compare(op):
    def fn(a, b):
        return op(_sign(sym.as_expr(a) - b), 0)

    return np.frompyfunc(fn, 2, 1)


def _int_div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b > 0) else -q
    if _sign(a) < 0 or _sign(b) <= 0:
        raise _Undecidable
    return sym.floordiv(a, b)


def _int_mod(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    if _sign(a) < 0 or _sign(b) <= 0:
        raise _Undecidable
    return sym.mod(a, b)


_BINARY = {
    "Add": np.frompyfunc(operator.add, 2, 1), "Sub": np.frompyfunc(operator.sub, 2, 1),
    "Mul": np.frompyfunc(operator.mul, 2, 1), "Div": np.frompyfunc(_int_div, 2, 1),
    "Mod": np.frompyfunc(_int_mod, 2, 1),
    "Max": np.frompyfunc(sym.dmax, 2, 1), "Min": np.frompyfunc(sym.dmin, 2, 1),
    "Equal": _compare(operator.eq), "Less": _compare(operator.lt), "Greater": _compare(operator.gt),
    "LessOrEqual": _compare(operator.le), "GreaterOrEqual": _compare(operator.ge),
}
_BOOL_OUT = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}


def _check_size(shape) -> None:
    """Shape arithmetic is small: a bigger result is computed in the graph instead (a hostile
    model must not make the compiler build huge object arrays)."""
    n = 1
    for d in shape:
        n *= max(int(d), 0)
    if n > MAX_ELEMENTS:
        raise _Undecidable


def evaluate(c, knowns: list[Known | None], attrs: dict) -> list[Known] | None:
    op = c.node.op_type
    try:
        return _evaluate(c, op, knowns, attrs)
    except _Undecidable:
        return None


def _evaluate(c, op, ks, attrs):
    xs = [_obj(k) for k in ks]
    dt = ks[0].dtype if ks and ks[0] is not None else DType.I64
    if op in _BINARY and len(xs) >= 2:
        if op == "Div" and dt.is_float:
            return None
        _check_size(np.broadcast_shapes(*(x.shape for x in xs)))
        out = xs[0]
        for y in xs[1:]:
            out = _BINARY[op](out, y)
        return [_result(out, DType.BOOL if op in _BOOL_OUT else dt)]
    if op in ("Max", "Min", "Sum") and len(xs) == 1 or op == "Identity":
        return [ks[0]]
    if op == "Neg":
        return [_result(-xs[0], dt)]
    if op in ("Cast", "CastLike"):
        to = c.dtype(attrs["to"]) if op == "Cast" else ks[1].dtype
        if not (to.is_int or to.is_float):
            return None
        return [_result(xs[0], to)]
    if op == "Gather":
        axis = attrs.get("axis", 0)
        data, idx = xs[0], np.asarray(ks[1].array).astype(np.int64)
        n = data.shape[axis]
        return [_result(np.take(data, np.where(idx < 0, idx + n, idx), axis=axis), dt)]
    if op == "Concat":
        parts = [x for x in xs if x is not None]
        return [_result(np.concatenate(parts, axis=attrs["axis"]), dt)]
    if op == "Slice" and len(xs) >= 3:
        data = xs[0]
        starts, ends = _ints(ks[1].array), _ints(ks[2].array)
        axes = list(range(len(starts))) if len(ks) < 4 or ks[3] is None else _ints(ks[3].array)
        steps = [1] * len(starts) if len(ks) < 5 or ks[4] is None else _ints(ks[4].array)
        index = [slice(None)] * data.ndim
        for a, s, e, st in zip(axes, starts, ends, steps):
            index[a] = slice(s, e, st)
        return [_result(data[tuple(index)], dt)]
    if op == "Unsqueeze":
        axes = _ints(ks[1].array) if len(ks) > 1 and ks[1] is not None else attrs["axes"]
        rank = xs[0].ndim + len(axes)
        return [_result(np.expand_dims(xs[0], tuple(sorted(a % rank for a in axes))), dt)]
    if op == "Squeeze":
        axes = _ints(ks[1].array) if len(ks) > 1 and ks[1] is not None else attrs.get("axes")
        return [_result(np.squeeze(xs[0], None if axes is None else tuple(axes)), dt)]
    if op == "Reshape":
        if ks[1].symbolic:
            return None
        shape = _ints(ks[1].array)
        shape = [xs[0].shape[i] if d == 0 and not attrs.get("allowzero") else d for i, d in enumerate(shape)]
        return [_result(xs[0].reshape(shape), dt)]
    if op == "Expand":
        if ks[1].symbolic:
            return None
        shape = _ints(ks[1].array)
        _check_size(shape)
        return [_result(xs[0] * np.ones(shape, dtype=object), dt)]
    if op == "Where":
        if ks[0].symbolic:
            return None
        return [_result(np.where(ks[0].array.astype(bool), xs[1], xs[2]), ks[1].dtype)]
    return None
