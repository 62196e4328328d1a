"""ONNX's narrow element types: float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ), float4 (E2M1),
4-/2-bit integers (INT4, UINT4, INT2, UINT2) and FLOAT8E8M0, the exponent-only scale type
(`_round_e8m0`).

Inside the graph they are carried widened -- the floats as f32 (every value of them is exactly
an f32), the integers as i32 -- and converted at the boundary (ml_dtypes arrays in and out, as
onnx gives them). What makes them narrow is the cast *to* them: `cast_to_narrow` rounds an f32
to the nearest value of the format (round half to even, subnormals included) and applies the
format's overflow rule (saturate to its largest finite value, or NaN / inf), exactly as
ml_dtypes (onnx's reference) does; an integer cast truncates, then wraps into the type's range.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from luminal.frontends.onnx.errors import OnnxImportError
from luminal.hlir.dtypes import DType

TP = onnx.TensorProto


@dataclass(frozen=True)
class FloatFormat:
    mantissa: int  # stored mantissa bits
    emin: int  # exponent of the smallest normal value
    max: float  # largest finite value
    overflow: str  # what a non-saturating cast gives past `max`: "nan" or "inf"
    always_saturates: bool = False  # float4 has neither inf nor NaN


FLOATS = {
    TP.FLOAT8E4M3FN: FloatFormat(3, -6, 448.0, "nan"),
    TP.FLOAT8E4M3FNUZ: FloatFormat(3, -7, 240.0, "nan"),
    TP.FLOAT8E5M2: FloatFormat(2, -14, 57344.0, "inf"),
    TP.FLOAT8E5M2FNUZ: FloatFormat(2, -15, 57344.0, "nan"),
    TP.FLOAT4E2M1: FloatFormat(1, 0, 6.0, "nan", always_saturates=True),
}
INTS = {TP.INT4: (-8, 7), TP.UINT4: (0, 15), TP.INT2: (-2, 1), TP.UINT2: (0, 3)}
# the MX scale type: 2**e for e in -127..127, and NaN. Carried as f64: 2**-127 is an f32 subnormal,
# which devices that flush them (CUDA's -ftz) would turn into 0, and 0 is no E8M0 value
E8M0 = TP.FLOAT8E8M0
E8M0_ROUNDING = ("up", "down", "nearest")
WIDENED = {**{t: DType.F32 for t in FLOATS}, **{t: DType.I32 for t in INTS}, E8M0: DType.F64}


def is_narrow(elem_type: int) -> bool:
    return elem_type in FLOATS or elem_type in INTS or elem_type == E8M0


def cast_to_narrow(x, elem_type: int, saturate: bool = True, round_mode: str = "up"):
    """`x` cast to the narrow type `elem_type`, carried widened (f32 / i32, f64 for FLOAT8E8M0);
    `round_mode` is Cast's, for FLOAT8E8M0 only."""
    if elem_type == E8M0:
        return _round_e8m0(x, saturate, round_mode)
    if elem_type in INTS:
        low, high = INTS[elem_type]
        v = x.cast(DType.I32) if x.dtype is not DType.BOOL else x.cast(DType.I32)
        span = high - low + 1
        return v.sub(low).remainder(span).add(low)  # floor mod: wraps as two's complement does
    return _round_float(x.cast(DType.F32) if x.dtype is not DType.F32 else x, FLOATS[elem_type], saturate)


def _round_float(x, fmt: FloatFormat, saturate: bool):
    """The nearest value of `fmt` to x (round half to even), with its overflow rule."""
    nan = float("nan")
    saturate = saturate or fmt.always_saturates
    a = x.abs().minimum(fmt.max * 2)  # past 2*max everything overflows alike; keeps inf out of the math
    e = a.log2().floor()
    e = e.where_(e.exp2().le(a), e.sub(1.0))  # log2 may round up just below a power of two
    e = e.maximum(float(fmt.emin))  # subnormals share the smallest exponent's spacing
    quantum = e.sub(float(fmt.mantissa)).exp2()
    r = a.div(quantum).round().mul(quantum)
    if saturate:
        r = r.minimum(fmt.max)
    else:
        big = nan if fmt.overflow == "nan" else float("inf")
        r = r.where_(r.le(fmt.max), r.mul(0.0).add(big))
    r = r.where_(x.lt(0.0).logical_not(), r.neg())
    return r.where_(x.notnan(), x)


def _round_e8m0(x, saturate: bool, round_mode: str):
    """x as a power of two 2**E (FLOAT8E8M0), as onnxruntime computes it from the value: for
    x = m * 2**e (1 <= m < 2), E = e ("down"), e + (m > 1) ("up"), e + (m >= 1.5) ("nearest",
    ties up). saturate: E clamped to -127..127, x <= 0 (and -inf) gives 2**-127, +inf 2**127;
    otherwise x outside [2**-127, 2**127] (0, negatives, infinities) is NaN. NaN stays NaN.
    (onnx's reference reads the f32 exponent bits instead, so it disagrees with this, the spec's
    table and onnxruntime on negatives, infinities, subnormals and non-saturating underflow.)"""
    if round_mode not in E8M0_ROUNDING:
        raise OnnxImportError(f"Cast to FLOAT8E8M0: round_mode {round_mode!r} is not one of {', '.join(E8M0_ROUNDING)}")
    if x.dtype is not DType.F64:  # exactly (and NumPy's f32 exp2(127) is one ulp off)
        x = x.cast(DType.F64)
    top, bottom = 2.0**127, 2.0**-127
    inside = x.gt(0.0).logical_and(x.le(top))
    a = x.where_(inside, 1.0)  # keeps 0, negatives, infinities and NaN out of the logarithm
    e = a.log2().floor()
    e = e.where_(e.exp2().le(a), e.sub(1.0))  # log2 may round up just below a power of two
    p = e.exp2()
    if round_mode == "up":
        e = e.add(a.gt(p).cast(e.dtype))
    elif round_mode == "nearest":
        e = e.add(a.ge(p.mul(1.5)).cast(e.dtype))
    nan = float("nan")
    if saturate:
        e = e.maximum(-127.0).minimum(127.0)
        e = e.where_(x.gt(top).logical_not(), 127.0)
        e = e.where_(x.gt(0.0).logical_or(x.isnan()), -127.0)
        r = e.exp2()
    else:
        r = e.exp2().where_(x.ge(bottom).logical_and(x.le(top)), nan)
    return r.where_(x.notnan(), nan)
