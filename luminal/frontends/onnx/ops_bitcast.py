"""BitCast: reinterpret the bits of one type as another of the same width.

The HLIR has no bit-reinterpreting primitive, so this is exact integer and float arithmetic
through one canonical form, the bit pattern read as a two's-complement integer `s` (int64):
- an integer type gives its value (unsigned ones above the sign bit lose 2**w; uint64, carried
  in int64, already is its pattern), bool gives 0 / 1;
- a float gives sign, biased exponent and mantissa from floor(log2|x|) (corrected by one exact
  power-of-two comparison) and the exact scaled mantissa, in float64; zero keeps its sign
  (1 / -0.0 is -inf), inf is the all-ones exponent;
- and back the same way: integers take s (plus 2**w if unsigned and negative), floats are built
  as (2**m + mantissa) * 2**(e - bias - m), exact in float64, then cast to their type.
One limit: a NaN carries no sign or payload arithmetic can read, so every float NaN reads as
the canonical positive quiet NaN (0x7FC00000 for float32), and a NaN pattern becomes a NaN.
"""

from __future__ import annotations

import onnx

from luminal.builder import functional as F
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir.dtypes import DType

TP = onnx.TensorProto
I64, F64 = DType.I64, DType.F64
# elem type: (bits, kind, signed) for ints and bool; floats: (bits, "float", (exponent bits, mantissa bits))
TYPES = {
    TP.BOOL: (8, "bool", False), TP.INT8: (8, "int", True), TP.UINT8: (8, "int", False),
    TP.INT16: (16, "int", True), TP.UINT16: (16, "int", False), TP.INT32: (32, "int", True),
    TP.UINT32: (32, "int", False), TP.INT64: (64, "int", True), TP.UINT64: (64, "int", False),
    TP.FLOAT16: (16, "float", (5, 10)), TP.BFLOAT16: (16, "float", (8, 7)), TP.FLOAT: (32, "float", (8, 23)),
    TP.DOUBLE: (64, "float", (11, 52)),
}
_BY_DTYPE = {DType.F32: TP.FLOAT, DType.F64: TP.DOUBLE, DType.F16: TP.FLOAT16, DType.BF16: TP.BFLOAT16,
             DType.I32: TP.INT32, DType.I64: TP.INT64, DType.BOOL: TP.BOOL}


def _name(elem: int) -> str:
    return TP.DataType.Name(elem) if elem in TP.DataType.values() else str(elem)


def _i64(g, v: int):
    return g.scalar(v, I64)


def _to_pattern(g, x, bits: int, kind: str, spec):
    """The bit pattern of x as a two's-complement integer of `bits` bits (int64)."""
    if kind == "bool":
        return x.cast(I64)
    if kind == "int":
        v = x.cast(I64)
        if spec or bits == 64:  # signed, or uint64 (carried wrapped in int64): the value is the pattern
            return v
        return F.where(v.ge(_i64(g, 1 << (bits - 1))), v.sub(_i64(g, 1 << bits)), v)
    e_bits, m_bits = spec
    bias, e_max = (1 << (e_bits - 1)) - 1, (1 << e_bits) - 1
    xf = x.cast(F64)
    a = xf.abs()
    finite = a.lt(float("inf"))
    nonzero = a.gt(0.0)
    safe = F.where(finite.logical_and(nonzero), a, 1.0)
    e = safe.log2().floor()
    p = e.exp2()
    e = F.where(p.gt(safe), e.sub(1.0), F.where(p.mul(2.0).le(safe), e.add(1.0), e))  # 2**e <= a < 2**(e+1)
    normal = e.ge(float(1 - bias))
    e = F.where(normal, e, float(1 - bias))
    scaled = safe.mul(e.neg().exp2())  # in [1, 2) when normal, [0, 1) when subnormal: exact
    mant = F.where(normal, scaled.sub(1.0), scaled).mul(float(1 << m_bits))
    biased = F.where(normal, e.add(float(bias)), 0.0)
    biased = F.where(nonzero, biased, 0.0)
    mant = F.where(nonzero, mant, 0.0)
    biased = F.where(finite, biased, float(e_max))
    mant = F.where(finite, mant, 0.0)
    nan = xf.isnan()
    biased = F.where(nan, float(e_max), biased)
    mant = F.where(nan, float(1 << (m_bits - 1)), mant)  # the canonical quiet NaN
    body = biased.cast(I64).mul(_i64(g, 1 << m_bits)).add(mant.cast(I64))
    negative = xf.lt(0.0).logical_or(xf.eq(0.0).logical_and(xf.reciprocal().lt(0.0))).logical_and(nan.logical_not())
    if bits == 64:  # body - 2**63, kept inside int64
        return F.where(negative, body.sub(_i64(g, 1 << 62)).sub(_i64(g, 1 << 62)), body)
    return F.where(negative, body.sub(_i64(g, 1 << (bits - 1))), body)


def _from_pattern(g, s, bits: int, kind: str, spec, dtype: DType):
    """The value of type (bits, kind, spec) whose bit pattern is s, as `dtype`."""
    if kind == "bool":
        return s.ne(_i64(g, 0))
    if kind == "int":
        if spec or bits == 64:
            return s.cast(dtype)
        return F.where(s.lt(_i64(g, 0)), s.add(_i64(g, 1 << bits)), s).cast(dtype)
    e_bits, m_bits = spec
    bias, e_max = (1 << (e_bits - 1)) - 1, (1 << e_bits) - 1
    negative = s.lt(_i64(g, 0))
    if bits == 64:
        body = F.where(negative, s.add(_i64(g, 1 << 62)).add(_i64(g, 1 << 62)), s)
    else:
        body = F.where(negative, s.add(_i64(g, 1 << (bits - 1))), s)
    unit = _i64(g, 1 << m_bits)
    mant = body.fmod(unit)
    biased = body.sub(mant).floordiv_exact(unit)
    mf, bf = mant.cast(F64), biased.cast(F64)
    normal = F.where(bf.gt(0.0), mf.add(float(1 << m_bits)), mf)  # the integer significand
    power = F.where(bf.gt(0.0), bf, 1.0).sub(float(bias + m_bits)).exp2()
    value = normal.mul(power)
    special = F.where(mant.eq(_i64(g, 0)), g.scalar(float("inf"), F64), float("nan"))
    value = F.where(biased.eq(_i64(g, e_max)), special, value)
    value = F.where(negative, value.neg(), value)
    return value.cast(dtype)


@onnx_op("BitCast", since=26)
def bitcast(c, x, *, to):
    src = c.elem_type(0) or _BY_DTYPE.get(x.dtype)
    if src not in TYPES:
        c.fail(f"input type {_name(src)} is not supported (luminal bit-casts bool, 8- to 64-bit integers, "
               "float16, bfloat16, float and double)")
    if to not in TYPES:
        c.fail(f"target type {_name(to)} is not supported")
    (sb, sk, ss), (tb, tk, ts) = TYPES[src], TYPES[to]
    if sb != tb:
        c.fail(f"{_name(src)} ({sb} bits) and {_name(to)} ({tb} bits) differ in width")
    dtype = c.dtype(to)
    if src == to:
        return x
    return _from_pattern(c.g, _to_pattern(c.g, x, sb, sk, ss), tb, tk, ts, dtype)
