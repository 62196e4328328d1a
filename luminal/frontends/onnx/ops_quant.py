"""Quantized ops: QuantizeLinear / DequantizeLinear (per tensor, per axis, blocked),
DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Quantized integers are carried widened (i32, see values.DTYPES) and float8 / 4-bit values as
f32 (narrow.py); the formulas follow onnx's reference: q = clip(rint(x / scale) + zero_point),
x = (q - zero_point) * scale, integer products accumulate exactly in i32.
"""

from __future__ import annotations

import onnx

from luminal.frontends.onnx import narrow
from luminal.frontends.onnx.ops_nn import conv
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType

TP = onnx.TensorProto
RANGES = {
    TP.UINT8: (0, 255), TP.INT8: (-128, 127), TP.UINT16: (0, 65535), TP.INT16: (-32768, 32767),
    TP.INT32: (-(2**31), 2**31 - 1), **narrow.INTS,
}


def _broadcast(c, v, x, axis: int, block_size: int):
    """Scale / zero point reshaped (per axis) or repeated (blocked) to broadcast against x."""
    if v is None or v.ndim == 0:
        return v
    if v.ndim == 1 and sym.equal(v.shape[0], 1) and not block_size:
        return v.reshape(())
    axis = axis % x.ndim
    if not block_size:
        if v.ndim != 1:
            c.fail(f"a per-axis scale / zero point must be 1-D, got shape {v.shape}")
        return v.reshape(tuple(v.shape[0] if i == axis else 1 for i in range(x.ndim)))
    if v.ndim != x.ndim:
        c.fail(f"a blocked scale / zero point has the input's rank {x.ndim}, got shape {v.shape}")
    shape = list(v.shape)
    rep = v.unsqueeze(axis + 1).expand(tuple(shape[:axis + 1]) + (block_size,) + tuple(shape[axis + 1:]))
    rep = rep.reshape(tuple(shape[:axis]) + (shape[axis] * block_size,) + tuple(shape[axis + 1:]))
    return rep.slice(axis, 0, x.shape[axis])


def _quantize(c, x, scale, zp, to: int, saturate: bool, axis: int = 1, block_size: int = 0):
    ft = x.dtype if x.dtype.is_float else DType.F32
    if scale.dtype != ft:
        ft = DType.F32
    q = _div(x.cast(ft), _broadcast(c, scale, x, axis, block_size).cast(ft))
    zp = _broadcast(c, zp, x, axis, block_size)
    if to in RANGES:
        low, high = RANGES[to]
        qi = q.round().cast(DType.F64)
        if zp is not None:
            qi = qi.add(zp.cast(DType.F64))
        return qi.clamp(float(low), float(high)).cast(DType.I64 if to == TP.INT32 else DType.I32)
    if to in narrow.FLOATS:
        if zp is not None and to == TP.FLOAT4E2M1:
            q = q.add(zp.cast(ft))
        return narrow.cast_to_narrow(q, to, saturate)
    c.fail(f"output type {TP.DataType.Name(to)} is not a quantized type")


def _div(x, y):
    """x / y rounded as IEEE division in x's dtype: the HLIR divides as x * recip(y), so divide
    in f64 and round once to x's dtype (a quotient near a .5 tie then rounds as onnx's does)."""
    if x.dtype is DType.F64:
        return x.div(y)
    return x.cast(DType.F64).div(y.cast(DType.F64)).cast(x.dtype)


def _out_type(c, zp_index: int, output_dtype: int) -> int:
    zt = c.elem_type(zp_index)
    if zt and output_dtype and zt != output_dtype:
        c.fail("output_dtype differs from the zero point's type")
    return zt or output_dtype or TP.UINT8


@onnx_op("QuantizeLinear", since=10)
def quantize_linear(c, x, scale, zp=None, *, axis=1, saturate=1, block_size=0, output_dtype=0, precision=0):
    if precision:
        x, scale = x.cast(c.dtype(precision)), scale.cast(c.dtype(precision))
    return _quantize(c, x, scale, zp, _out_type(c, 2, output_dtype), bool(saturate), axis, block_size)


@onnx_op("DequantizeLinear", since=10)
def dequantize_linear(c, x, scale, zp=None, *, axis=1, block_size=0, output_dtype=0):
    dx = x.cast(DType.F32)
    zp = _broadcast(c, zp, x, axis, block_size)
    xt = c.elem_type(0)
    if zp is not None and xt not in narrow.FLOATS:
        dx = dx.sub(zp.cast(DType.F32))
    y = dx.mul(_broadcast(c, scale, x, axis, block_size).cast(DType.F32))
    return y.cast(c.dtype(output_dtype) if output_dtype else scale.dtype)


@onnx_op("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(c, x):
    x = x.cast(DType.F32)
    maxx = x.max().maximum(0.0)
    minx = x.min().minimum(0.0)
    span = maxx.sub(minx)
    scale = _div(span.where_(maxx.ne(minx), span.mul(0.0).add(1.0)), span.mul(0.0).add(255.0))
    zp = _div(minx.neg(), scale).clamp(0.0, 255.0).round()
    y = _div(x, scale).round().add(zp).clamp(0.0, 255.0).cast(DType.I32)
    return [y, scale, zp.cast(DType.I32)]


def _minus_zp(x, zp, axis_of_vector: int | None = None):
    x = x.cast(DType.I32)
    if zp is None:
        return x
    zp = zp.cast(DType.I32)
    if zp.ndim == 1 and axis_of_vector is not None and not sym.equal(zp.shape[0], 1):
        zp = zp.reshape(tuple(zp.shape[0] if i == axis_of_vector % x.ndim else 1 for i in range(x.ndim)))
    elif zp.ndim == 1:
        zp = zp.reshape(())
    return x.sub(zp)


def int_matmul(a, b, bound: int | None):
    """a @ b of int32 operands whose entries are at most `bound` in magnitude (255: 8-bit values
    less an 8-bit zero point; None: unknown), exact: as a float32 GEMM when no partial sum can
    reach 2**24 (every one an exact integer, in any order), float64 when none can reach 2**31
    (the int32 result then exact too), else in int32 (wrapping). The float GEMMs are the fast
    kernels; the integer one is a scalar loop."""
    k = a.shape[-1]
    if bound is not None and sym.is_static(k):
        worst = int(k) * bound * bound
        for ft, limit in ((DType.F32, 2**24), (DType.F64, 2**31)):
            if worst < limit:
                return a.cast(ft).matmul(b.cast(ft)).cast(DType.I32)
    return a.matmul(b)


def eight_bit(c, *inputs: int) -> int | None:
    """`int_matmul`'s bound when the node's `inputs` are 8-bit integers (as the op's schema
    requires; an undeclared type is taken as such), else None."""
    return 255 if all(c.elem_type(i) in (None, TP.UINT8, TP.INT8) for i in inputs) else None


@onnx_op("MatMulInteger", since=10)
def matmul_integer(c, a, b, a_zp=None, b_zp=None):
    return int_matmul(_minus_zp(a, a_zp, -2), _minus_zp(b, b_zp, -1), eight_bit(c, 0, 1))


@onnx_op("ConvInteger", since=10)
def conv_integer(c, x, w, x_zp=None, w_zp=None, **attrs):
    # int32 out, as the spec says (the builder's integer sums widen to int64, as torch's do; the
    # int32 accumulation onnxruntime does wraps the same way the cast does)
    return conv(c, _minus_zp(x, x_zp), _minus_zp(w, w_zp, 0), None, **attrs).cast(DType.I32)


def _requantize(c, acc, scale, y_scale, y_zp, to: int, rint_then_clip: bool):
    """acc * scale / y_scale + y_zp, rounded and clipped to `to` (onnx's reference order)."""
    low, high = RANGES[to]
    r = acc.cast(DType.F64).mul(scale.cast(DType.F64))
    if y_zp is not None:
        r = r.add(y_zp.cast(DType.F64))
    r = r.round().clamp(float(low), float(high)) if rint_then_clip else r.clamp(float(low), float(high)).round()
    return r.cast(DType.I32)


@onnx_op("QLinearMatMul", since=10)
def qlinear_matmul(c, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp=None):
    acc = int_matmul(_minus_zp(a, a_zp, -2), _minus_zp(b, b_zp, -1), eight_bit(c, 0, 3))
    scale = a_scale.mul(b_scale.cast(a_scale.dtype)).div(y_scale.cast(a_scale.dtype))
    to = c.elem_type(7) if y_zp is not None else c.elem_type(0)
    return _requantize(c, acc, scale, y_scale, y_zp, to or TP.UINT8, True)


@onnx_op("QLinearConv", since=10)
def qlinear_conv(c, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp=None, bias=None, **attrs):
    acc = conv(c, _minus_zp(x, x_zp), _minus_zp(w, w_zp, 0), None, **attrs)
    if bias is not None:
        acc = acc.add(bias.cast(acc.dtype).reshape((bias.shape[0],) + (1,) * (acc.ndim - 2)))
    if w_scale.ndim == 1 and not sym.equal(w_scale.shape[0], 1):
        w_scale = w_scale.reshape((w_scale.shape[0],) + (1,) * (acc.ndim - 2))
    elif w_scale.ndim == 1:
        w_scale = w_scale.reshape(())
    scale = x_scale.mul(w_scale).div(y_scale)
    to = c.elem_type(7) if y_zp is not None else c.elem_type(0)
    return _requantize(c, acc, scale, y_scale, y_zp, to if to in (TP.INT8,) else TP.UINT8, False)

