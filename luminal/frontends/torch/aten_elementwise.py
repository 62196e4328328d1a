"""Elementwise ATen ops: arithmetic, math, comparisons, logic, selection, casts.

Arithmetic computes in the result dtype torch reports (`cx.dtype`): `int_tensor * 0.5` casts
the ints to f32 first, exactly as torch does. Comparisons compute in the promoted dtype.
"""

from __future__ import annotations

from luminal.builder import Tensor
from luminal.builder.functional import where as lwhere
from luminal.errors import UnsupportedError
from luminal.frontends.torch.aten_ops import Ctx, as_tensor, aten, cast_to, fit_scalar, promote
from luminal.hlir.dtypes import DType


def _lhs(cx: Ctx, a, b=None):
    """Operands in the result dtype, the first one a Tensor."""
    a, b = cast_to(cx.dtype, a, b)
    return as_tensor(cx, a, cx.dtype), b


# --- arithmetic --------------------------------------------------------------------------
def _times_alpha(cx, b, alpha):
    """`alpha * b` of add/sub (b a tensor or a Python scalar), in the computation dtype."""
    if alpha == 1:
        return b
    scale = fit_scalar(alpha, cx.dtype)
    return b.mul(scale) if isinstance(b, Tensor) else b * scale


@aten("add.Tensor", "add.Scalar")
def add(cx, a, b, alpha=1):
    a, b = _lhs(cx, a, b)
    return a.add(_times_alpha(cx, b, alpha))


@aten("sub.Tensor", "sub.Scalar")
def sub(cx, a, b, alpha=1):
    a, b = _lhs(cx, a, b)
    return a.sub(_times_alpha(cx, b, alpha))


@aten("rsub.Scalar", "rsub.Tensor")
def rsub(cx, a, b, alpha=1):
    a, b = _lhs(cx, a, b)
    if alpha != 1:
        a = a.mul(fit_scalar(alpha, cx.dtype))
    return as_tensor(cx, b, cx.dtype).sub(a)


def _opmath_scalar(cx, b):
    """The float32 operand torch's CPU kernels of `mul` and `div` use for a half tensor's second
    operand when that is a scalar (a Python float, or a 0-d float tensor: its
    `original_scalar_value<opmath_t>`), None otherwise. They compute in float with the scalar's own
    value and round once: x * 0.1 is fl16(x * 0.1f), not fl16(x * fl16(0.1)) (`add` and `sub`
    round the scalar to half first: torch's own kernels differ, and luminal follows each)."""
    if cx.dtype not in (DType.F16, DType.BF16):
        return None
    if isinstance(b, float):
        return as_tensor(cx, b, DType.F32)
    if isinstance(b, Tensor) and b.ndim == 0 and b.dtype in (DType.F32, DType.F64):
        return b.cast(DType.F32)
    return None


@aten("mul.Tensor", "mul.Scalar")
def mul(cx, a, b):
    if (wide := _opmath_scalar(cx, b)) is not None:
        return _lhs(cx, a)[0].cast(DType.F32).mul(wide).cast(cx.dtype)
    a, b = _lhs(cx, a, b)
    return a.mul(b)


@aten("div.Tensor", "div.Scalar", "div.Tensor_mode", "div.Scalar_mode")
def div(cx, a, b, rounding_mode=None):
    if rounding_mode is None and (wide := _opmath_scalar(cx, b)) is not None:
        return _lhs(cx, a)[0].cast(DType.F32).div(wide).cast(cx.dtype)
    a, b = _lhs(cx, a, b)
    return a.div(as_tensor(cx, b, cx.dtype), rounding_mode=rounding_mode)


@aten("prims::fma.default")
def fma(cx, a, b, c):
    """Inductor's fused multiply-add `a * b + c`, rounded once; Dynamo writes `addcmul_`,
    `addcdiv_` and `add_(alpha=tensor)` with it (`p.addcdiv_(m, d, value=-lr)` is
    `fma(m / d, -lr, p)`). f32/f16/bf16 compute in f64, where the product is exact and the sum
    is rounded once more to the narrow dtype (a double rounding that differs from a true fma
    only when the f64 sum lands exactly on a narrow tie). f64 rounds the product and the sum,
    as torch's own reference implementation of the prim does: no wider dtype exists here."""
    a, b, c = (as_tensor(cx, v, cx.dtype) for v in (a, b, c))  # a Python scalar rounded to the dtype first
    if cx.dtype.is_float and cx.dtype is not DType.F64:
        return a.cast(DType.F64).mul(b.cast(DType.F64)).add(c.cast(DType.F64)).cast(cx.dtype)
    return a.mul(b).add(c)


@aten("addcmul.default")
def addcmul(cx, x, t1, t2, value=1):
    """`x + value * t1 * t2`, multiplied left to right as eager's CPU kernel does (core ATen
    decomposes the op the same way; `_foreach_addcmul` lowers through here)."""
    x, t1, t2, value = cast_to(cx.dtype, x, t1, t2, value)
    prod = t1 if isinstance(value, (int, float)) and value == 1 else t1.mul(value)
    return as_tensor(cx, x, cx.dtype).add(prod.mul(t2))


@aten("addcdiv.default")
def addcdiv(cx, x, t1, t2, value=1):
    """`x + (value * t1) / t2`, eager's CPU kernel's order (torch refuses integer operands)."""
    x, t1, t2, value = cast_to(cx.dtype, x, t1, t2, value)
    num = t1 if isinstance(value, (int, float)) and value == 1 else t1.mul(value)
    return as_tensor(cx, x, cx.dtype).add(num.div(as_tensor(cx, t2, cx.dtype)))


@aten("lerp.Scalar", "lerp.Tensor")
def lerp(cx, x, end, weight):
    """`x + w * (end - x)` as eager's CPU kernel computes it: in the op-math dtype (f32 for
    f16/bf16), `diff = end - x` rounded, then `fma(w, diff, x)` where |w| < 0.5 and
    `fma(-(1 - w), diff, end)` elsewhere (1 - w rounded first). The fused multiply-adds round
    once, as `prims::fma` does here (in f64; an f64 lerp rounds the product too). Core ATen
    decomposes lerp otherwise (two roundings); `_foreach_lerp` lowers through here."""
    op = DType.F32 if cx.dtype in (DType.F16, DType.BF16) else cx.dtype
    x, end = x.cast(op), end.cast(op)
    w = as_tensor(cx, weight, op)  # a Python weight rounded to the op-math dtype, as eager's `to<opmath_t>`
    diff = end.sub(x)
    one_minus = as_tensor(cx, 1.0, op).sub(w)
    wide = DType.F64
    x64, end64, w64, diff64, om64 = (t.cast(wide) for t in (x, end, w, diff, one_minus))
    low = x64.add(w64.mul(diff64))
    high = end64.sub(diff64.mul(om64))
    if isinstance(weight, Tensor):
        out = lwhere(w.abs().lt(0.5), low, high)
    else:  # a Python weight picks its formula here (NaN: the second, as in eager)
        out = low if abs(float(weight)) < 0.5 else high
    return out.cast(op).cast(cx.dtype)


@aten("floor_divide.default", "floor_divide.Scalar")
def floor_divide(cx, a, b):
    return div(cx, a, b, "floor")


@aten("true_divide.Tensor")
def true_divide(cx, a, b):
    return div(cx, a, b)


@aten("fmod.Tensor", "fmod.Scalar")
def fmod(cx, a, b):
    a, b = _lhs(cx, a, b)
    return a.fmod(b)


@aten("remainder.Tensor", "remainder.Scalar")
def remainder(cx, a, b):
    a, b = _lhs(cx, a, b)
    return a.remainder(b)


@aten("remainder.Scalar_Tensor")
def remainder_scalar(cx, a, b):
    return as_tensor(cx, a, cx.dtype).remainder(b.cast(cx.dtype))


@aten("pow.Tensor_Scalar")
def pow_ts(cx, x, e):
    return x.cast(cx.dtype).pow(e)


@aten("pow.Tensor_Tensor")
def pow_tt(cx, x, e):
    x, e = _lhs(cx, x, e)
    return x.pow(e)


@aten("pow.Scalar")
def pow_s(cx, base, e):
    return as_tensor(cx, base, cx.dtype).pow(e.cast(cx.dtype))


@aten("neg.default")
def neg(cx, x):
    return x.cast(cx.dtype).neg()


@aten("abs.default")
def abs_(cx, x):
    return x.abs()


@aten("sign.default", "sgn.default")
def sign(cx, x):
    return x.sign() if x.dtype is not DType.BOOL else x


@aten("reciprocal.default")
def reciprocal(cx, x):
    return x.cast(cx.dtype).reciprocal()


@aten("square.default")
def square(cx, x):
    return x.cast(cx.dtype).square()


# --- math (int inputs are promoted to float) ---------------------------------------------
def _float_unary(name, method):
    @aten(name)
    def fn(cx, x):
        return getattr(x.cast(cx.dtype), method)()

    fn.__name__ = method
    return fn


for _name, _method in [("exp", "exp"), ("exp2", "exp2"), ("log", "log"), ("log2", "log2"), ("sin", "sin"),
                       ("cos", "cos"), ("sqrt", "sqrt"), ("rsqrt", "rsqrt"), ("sigmoid", "sigmoid"),
                       ("tanh", "tanh"), ("erf", "erf"), ("silu", "silu"), ("floor", "floor"), ("ceil", "ceil"),
                       ("trunc", "trunc"), ("round", "round")]:
    _float_unary(f"{_name}.default", _method)


@aten("atan.default")
def atan(cx, x):
    return x.cast(cx.dtype).atan()


@aten("atan2.default")
def atan2(cx, y, x):
    return y.cast(cx.dtype).atan2(x.cast(cx.dtype) if isinstance(x, Tensor) else cx.full((), x, cx.dtype))


@aten("log10.default")
def log10(cx, x):
    return x.cast(cx.dtype).log2().mul(0.30102999566398120)  # log10(x) = log2(x) * log10(2)


@aten("log1p.default")
def log1p(cx, x):
    return x.cast(cx.dtype).add(1).log()


@aten("expm1.default")
def expm1(cx, x):
    return x.cast(cx.dtype).exp().add(-1)


@aten("tan.default")
def tan(cx, x):
    x = x.cast(cx.dtype)
    return x.sin().div(x.cos())


@aten("frac.default")
def frac(cx, x):
    return x.sub(x.trunc())


@aten("gelu.default")
def gelu(cx, x, approximate="none"):
    return x.gelu(approximate)


@aten("relu.default")
def relu(cx, x):
    return x.relu()


@aten("leaky_relu.default")
def leaky_relu(cx, x, negative_slope=0.01):
    return x.where_(x.gt(0), x.mul(negative_slope))


@aten("elu.default")
def elu(cx, x, alpha=1.0, scale=1.0, input_scale=1.0):
    neg = x.mul(input_scale).exp().add(-1).mul(alpha)
    return x.where_(x.gt(0), neg).mul(scale)


@aten("softplus.default")
def softplus(cx, x, beta=1.0, threshold=20.0):
    bx = x.mul(beta)
    return x.where_(bx.gt(threshold), bx.exp().add(1).log().mul(1.0 / beta))


@aten("hardtanh.default")
def hardtanh(cx, x, min_val=-1.0, max_val=1.0):
    return x.clamp(fit_scalar(min_val, x.dtype), fit_scalar(max_val, x.dtype))


@aten("hardsigmoid.default")
def hardsigmoid(cx, x):
    return x.add(3.0).clamp(0.0, 6.0).mul(1.0 / 6.0)


@aten("hardswish.default")
def hardswish(cx, x):
    return x.mul(hardsigmoid(cx, x))


@aten("clamp.default", "clamp.Tensor", "clip.default", "clip.Tensor")
def clamp(cx, x, min=None, max=None):  # noqa: A002 - ATen's names
    x, lo = _lhs(cx, x, min)
    hi = cast_to(cx.dtype, max)
    return x.clamp(lo, hi)


@aten("clamp_min.default", "clamp_min.Tensor")
def clamp_min(cx, x, lo):
    return clamp(cx, x, lo, None)


@aten("clamp_max.default", "clamp_max.Tensor")
def clamp_max(cx, x, hi):
    return clamp(cx, x, None, hi)


@aten("maximum.default", "max.other")
def maximum(cx, a, b):
    a, b = _lhs(cx, a, b)
    return a.maximum(b)


@aten("minimum.default", "min.other")
def minimum(cx, a, b):
    a, b = _lhs(cx, a, b)
    return a.minimum(b)


@aten("fmax.default", "fmin.default")
def fmax_fmin(cx, a, b):
    """fmax / fmin: like maximum / minimum, but a NaN loses to a number (NaN only if both are)."""
    a, b = _lhs(cx, a, b)
    out = a.maximum(b) if cx.node.target.__name__.startswith("fmax") else a.minimum(b)
    if not out.dtype.is_float:
        return out
    return out.where_(a.isnan().logical_not(), b).where_(b.isnan().logical_not(), a)


# --- comparisons and logic ---------------------------------------------------------------
def _compare(name, method):
    @aten(f"{name}.Tensor", f"{name}.Scalar")
    def fn(cx, a, b):
        dt = promote(a, b)
        a, b = cast_to(dt, a, b)
        return getattr(as_tensor(cx, a, dt), method)(b)

    fn.__name__ = name
    return fn


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _compare(_name, _name)


def _bool(x):
    return x if x.dtype is DType.BOOL else x.ne(0)


@aten("logical_not.default")
def logical_not(cx, x):
    return _bool(x).logical_not()


@aten("logical_and.default")
def logical_and(cx, a, b):
    return _bool(a).logical_and(_bool(b))


@aten("logical_or.default")
def logical_or(cx, a, b):
    return _bool(a).logical_or(_bool(b))


@aten("logical_xor.default")
def logical_xor(cx, a, b):
    return _bool(a).logical_xor(_bool(b))


def _bitwise(cx, a, b, method):
    if cx.dtype is not DType.BOOL:
        raise UnsupportedError(f"bitwise ops on {cx.dtype} (only bool tensors)")
    a, b = cast_to(DType.BOOL, a, b)
    return getattr(as_tensor(cx, a, DType.BOOL), method)(b)


@aten("bitwise_and.Tensor", "bitwise_and.Scalar")
def bitwise_and(cx, a, b):
    return _bitwise(cx, a, b, "logical_and")


@aten("bitwise_or.Tensor", "bitwise_or.Scalar")
def bitwise_or(cx, a, b):
    return _bitwise(cx, a, b, "logical_or")


@aten("bitwise_xor.Tensor", "bitwise_xor.Scalar")
def bitwise_xor(cx, a, b):
    return _bitwise(cx, a, b, "logical_xor")


@aten("bitwise_not.default")
def bitwise_not(cx, x):
    if x.dtype is not DType.BOOL:
        raise UnsupportedError(f"bitwise_not on {x.dtype} (only bool tensors)")
    return x.logical_not()


@aten("isnan.default")
def isnan(cx, x):
    return x.isnan()


@aten("isinf.default")
def isinf(cx, x):
    return x.isinf() if x.dtype.is_float else x.ne(x)


@aten("isfinite.default")
def isfinite(cx, x):
    if not x.dtype.is_float:
        return x.eq(x)
    return x.isinf().logical_or(x.isnan()).logical_not()


# --- selection and casts -----------------------------------------------------------------
@aten("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar")
def where(cx, cond, a, b):
    a, b = cast_to(cx.dtype, a, b)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = as_tensor(cx, a, cx.dtype)
    return lwhere(_bool(cond), a, b)


@aten("masked_fill.Scalar", "masked_fill.Tensor")
def masked_fill(cx, x, mask, value):
    value = cast_to(cx.dtype, value)
    return lwhere(_bool(mask), value.reshape(()) if isinstance(value, Tensor) else value, x.cast(cx.dtype))


@aten("_to_copy.default", "to.dtype", "to.dtype_layout", "to.device", "to.other", "type_as.default",
      "_to_dim_order_copy.default", "prims::convert_element_type.default")
def to_copy(cx, x, *args, **kwargs):
    return x.cast(cx.dtype)  # device, layout and memory format mean nothing here


@aten("clone.default", "alias.default", "detach.default", "lift_fresh_copy.default", "contiguous.default",
      "alias_copy.default", "detach_copy.default", "lift_fresh.default")
def identity(cx, x, *args, **kwargs):
    return x


@aten("dropout.default", "native_dropout.default", "feature_dropout.default")
def dropout(cx, x, p, train=None):
    """The identity in eval mode (or p=0); in training random, on luminal's Philox generator
    (`aten_random.dropout_train`)."""
    native = cx.node.target.__name__.startswith("native_dropout")
    if train is not False and p != 0:
        from luminal.frontends.torch.aten_random import dropout_train

        return dropout_train(cx, x, p, native, cx.node.target.__name__.startswith("feature_dropout"))
    if native:
        return x, cx.full(x.shape, True, DType.BOOL)
    return x


@aten("copy.default")
def copy(cx, x, src, non_blocking=False):
    return src.cast(cx.dtype).expand(x.shape)


@aten("fill.Scalar", "fill.Tensor")
def fill(cx, x, value):
    if isinstance(value, Tensor):
        return value.cast(cx.dtype).reshape(()).expand(x.shape)
    return cx.full(x.shape, value, cx.dtype)
