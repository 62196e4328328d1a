"""NumPy implementations of the fused ops (group `FUSED` of `luminal.hlir.ops`).

Fused ops exist only after the egraph layer rewrote a graph. Each computes the same function
as its primitive decomposition (`luminal/egraph/reference.py`) in exact arithmetic, and is
allowed to round *less*: that is the point of the rewrites (DESIGN.md, soundness contract).

Precision choice: f32/f16/bf16 inputs are computed in float64 and rounded once at the end.
For KahanSum this replaces the compensated loop of the CUDA kernel: a float64 accumulator over
f32 values is at least as accurate as Kahan summation in f32 and is one vectorized NumPy call.
MatMul goes through `np.matmul` (BLAS) in float64 for the same reason; for the small models
the NumPy runtime serves this costs less than the per-op Python overhead it removes.
"""

from __future__ import annotations

import numpy as np

from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Op
from luminal.runtime.numpy_runtime import _shape, impl

_F64 = np.dtype(np.float64)


def _wide(x: np.ndarray) -> np.ndarray:
    """Float arrays as float64 (no copy if they already are); other dtypes unchanged."""
    return x.astype(_F64, copy=False) if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else x


@impl(Op.EXP)
def _exp(node, b, x):
    return np.exp(_wide(x)).astype(node.dtype.numpy, copy=False)


@impl(Op.SIGMOID)
def _sigmoid(node, b, x):
    return (1.0 / (1.0 + np.exp(-_wide(x)))).astype(node.dtype.numpy, copy=False)


@impl(Op.SOFTMAX)
def _softmax(node, b, x):
    # the same formula as the decomposition (so -inf rows give NaN as torch does), in float64
    x = _wide(x)
    e = np.exp(x - np.max(x, axis=node.arg, keepdims=True))
    return (e / np.sum(e, axis=node.arg, keepdims=True)).astype(node.dtype.numpy, copy=False)


@impl(Op.KAHAN_SUM)
def _kahan_sum(node, b, x):
    acc = _F64 if node.dtype.is_float else node.dtype.numpy
    return np.sum(x, axis=node.arg, dtype=acc).astype(node.dtype.numpy, copy=False)


def _drop_broadcast_batch(x: np.ndarray) -> np.ndarray:
    """A matmul operand whose batch dims are all broadcast (stride 0, e.g. a weight expanded
    over the batch) as the plain matrix: np.matmul then broadcasts it itself and calls BLAS,
    instead of its slow strided loop over a stride-0 batch."""
    if x.ndim > 2 and all(s == 0 or n == 1 for s, n in zip(x.strides[:-2], x.shape[:-2])):
        return x[(0,) * (x.ndim - 2)]
    return x


@impl(Op.MAT_MUL)
def _matmul(node, b, x, y):
    x, y = _drop_broadcast_batch(x), _drop_broadcast_batch(y)
    if node.dtype.is_float:
        x, y = _wide(x), _wide(y)
    out = np.matmul(x, y)
    shape = _shape(node, b)
    if out.shape != shape:  # both operands were broadcast over the batch
        out = np.broadcast_to(out, shape)
    return out.astype(node.dtype.numpy)


# --- FusedElementwise: an expression over input slots, evaluated in one pass ---------------
UNARY_FNS = {"EXP2": np.exp2, "LOG2": np.log2, "SIN": np.sin, "SQRT": np.sqrt, "RECIP": np.reciprocal,
             "EXP": np.exp, "SIGMOID": lambda v: 1.0 / (1.0 + np.exp(-v))}
BINARY_FNS = {"ADD": np.add, "MUL": np.multiply, "MOD": np.fmod, "LESS_THAN": np.less}
# decisions (comparisons, fmod, casts to integers) see values rounded to their declared dtype,
# so a wider intermediate never flips a comparison the unfused graph would make
_DECIDING = {"LESS_THAN", "MOD"}


def _rounded(value: np.ndarray, dtype: DType) -> np.ndarray:
    return value.astype(dtype.numpy, copy=False)


def evaluate(expr: tuple, inputs: list[np.ndarray]) -> np.ndarray:
    """The value of a FusedElementwise expression; floats kept in float64 between ops."""
    kind, dtype = expr[0], expr[1]
    if kind == "in":
        return _wide(inputs[expr[2]])
    if kind == "const":
        return np.asarray(expr[2], dtype=_F64 if dtype.is_float else dtype.numpy)
    if kind == "CAST":
        child = evaluate(expr[2], inputs)
        if not dtype.is_float:
            child = _rounded(child, expr[2][1])
        return _wide(child.astype(dtype.numpy))
    args = [evaluate(c, inputs) for c in expr[2:]]
    if kind in _DECIDING:
        args = [_rounded(a, c[1]) for a, c in zip(args, expr[2:])]
    if kind in UNARY_FNS:
        return UNARY_FNS[kind](args[0])
    if dtype is DType.BOOL and kind in ("ADD", "MUL"):
        return (np.logical_or if kind == "ADD" else np.logical_and)(args[0], args[1])
    out = BINARY_FNS[kind](args[0], args[1])
    return out if kind == "LESS_THAN" else _wide(out)


@impl(Op.FUSED_ELEMENTWISE)
def _fused_elementwise(node, b, *inputs):
    out = np.asarray(evaluate(node.arg, list(inputs))).astype(node.dtype.numpy, copy=False)
    shape = _shape(node, b)
    if out.shape != shape:  # a sub-expression of constants only: broadcast to the node's shape
        out = np.broadcast_to(out, shape).copy()
    return out
