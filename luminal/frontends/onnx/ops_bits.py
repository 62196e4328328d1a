"""Bit ops on integers: BitShift, BitwiseAnd / Or / Xor / Not.

The HLIR has no bit primitives, so these are integer arithmetic, exact for every value of the
ONNX type (carried widened in i32 / i64, values.DTYPES): a shift is a multiplication or a floor
division by 2**b (then wrapped into the type's width), and and/or/xor split both operands into
their two's-complement bits along a new axis ((x // 2**i) mod 2: exact for negatives too; the
top bit of a type that fills its carrier is x < 0) and sum them back with their weights, the
top one -2**(bits-1) for signed types (and 2**63 == -2**63 in a 64-bit carrier).
"""

from __future__ import annotations

import numpy as np
import onnx

from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir.dtypes import DType

TP = onnx.TensorProto
WIDTHS = {TP.INT8: (8, True), TP.INT16: (16, True), TP.INT32: (32, True), TP.INT64: (64, True),
          TP.UINT8: (8, False), TP.UINT16: (16, False), TP.UINT32: (32, False), TP.UINT64: (64, False)}


def _width(c, x) -> tuple[int, bool, int]:
    """(bits, signed, carrier bits) of input 0's ONNX type."""
    elem = c.elem_type(0) or c.elem_type(1)
    if elem not in WIDTHS:
        elem = TP.INT64 if x.dtype is DType.I64 else TP.INT32
    bits, signed = WIDTHS[elem]
    return bits, signed, 64 if x.dtype is DType.I64 else 32


def _wrap(r, bits: int, signed: bool, carrier: int):
    """r reduced into the type's range (a no-op when the type fills its carrier: that wraps itself)."""
    if bits >= carrier:
        return r
    span = 1 << bits
    if signed:
        half = 1 << (bits - 1)
        return r.add(half).remainder(span).sub(half)
    return r.remainder(span)


def _pow2(b, cap: int):
    """2**min(b, cap) as the carrier's integer dtype (exact: cap <= 62)."""
    return b.clamp(0, cap).cast(DType.F64).exp2().cast(b.dtype)


@onnx_op("BitShift", since=11)
def bit_shift(c, x, y, *, direction):
    bits, signed, carrier = _width(c, x)
    y = y.cast(x.dtype)
    valid = y.ge(0).logical_and(y.lt(bits))
    lo, hi = _pow2(y, 62), _pow2(y.sub(62), 1)  # 2**b = lo * hi, each representable
    if direction == "LEFT":
        r = _wrap(x.mul(lo).mul(hi), bits, signed, carrier)
        return r.where_(valid, x.mul(0))
    if direction != "RIGHT":
        c.fail(f"direction {direction!r} is not LEFT or RIGHT")
    r = x.div(lo, rounding_mode="floor").div(hi, rounding_mode="floor")
    fill = x.mul(0).sub(1).where_(x.lt(0), x.mul(0)) if signed else x.mul(0)
    return r.where_(valid, fill)


def _bits(x, bits: int, carrier: int):
    """x's two's-complement bits below the top one, along a new last axis (weights 2**i), and
    the top bit: (low bits, top bit), all 0/1 in x's dtype."""
    g = x.graph
    weights = g.constant(np.array([1 << i for i in range(bits - 1)], x.dtype.numpy), x.dtype)
    low = x.unsqueeze(-1).div(weights, rounding_mode="floor").remainder(2)
    if bits >= carrier:
        top = x.lt(0).cast(x.dtype)
    else:
        top = x.div(1 << (bits - 1), rounding_mode="floor").remainder(2)
    return low, top, weights


def _bitwise(c, x, y, combine):
    bits, signed, carrier = _width(c, x)
    y = y.cast(x.dtype)
    x_low, x_top, weights = _bits(x, bits, carrier)
    y_low, y_top, _ = _bits(y, bits, carrier)
    r = combine(x_low, y_low).mul(weights).sum(-1).cast(x.dtype)
    top_weight = -(1 << (bits - 1)) if signed or bits >= carrier else 1 << (bits - 1)  # -2**63 is 2**63 mod 2**64
    return r.add(combine(x_top, y_top).mul(top_weight))


@onnx_op("BitwiseAnd", since=18)
def bitwise_and(c, x, y):
    return _bitwise(c, x, y, lambda a, b: a.mul(b))


@onnx_op("BitwiseOr", since=18)
def bitwise_or(c, x, y):
    return _bitwise(c, x, y, lambda a, b: a.add(b).sub(a.mul(b)))


@onnx_op("BitwiseXor", since=18)
def bitwise_xor(c, x, y):
    return _bitwise(c, x, y, lambda a, b: a.add(b).remainder(2))


@onnx_op("BitwiseNot", since=18)
def bitwise_not(c, x):
    bits, signed, carrier = _width(c, x)
    if signed or bits >= carrier:
        return x.neg().sub(1)  # two's complement: ~x == -x - 1
    return x.neg().add((1 << bits) - 1)
