"""Elementwise math, comparisons, logic, activations, reductions and matrix products."""

from __future__ import annotations

import numpy as np

from luminal.builder import functional as F
from luminal.errors import UnsupportedError
from luminal.frontends.onnx import narrow
from luminal.frontends.onnx.errors import NeedsShape
from luminal.frontends.onnx.registry import onnx_op
from luminal.frontends.onnx.values import Seq, Value
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType

# --- unary -------------------------------------------------------------------------------
_UNARY = {
    "Abs": lambda x: x.abs(), "Neg": lambda x: x.neg(), "Exp": lambda x: x.exp(), "Log": lambda x: x.log(),
    "Sqrt": lambda x: x.sqrt(), "Reciprocal": lambda x: x.reciprocal(), "Sigmoid": lambda x: x.sigmoid(),
    "Tanh": lambda x: x.tanh(), "Erf": lambda x: x.erf(), "Sin": lambda x: x.sin(), "Cos": lambda x: x.cos(),
    "Floor": lambda x: x.floor(), "Ceil": lambda x: x.ceil(), "Round": lambda x: x.round(),
    "Sign": lambda x: _sign(x), "Relu": lambda x: x.relu(), "Not": lambda x: x.logical_not(),
    "Softsign": lambda x: x.div(x.abs().add(1.0)), "IsNaN": lambda x: x.isnan(),
    "Tan": lambda x: x.sin().div(x.cos()),
    "Sinh": lambda x: x.exp().sub(x.neg().exp()).mul(0.5), "Cosh": lambda x: x.exp().add(x.neg().exp()).mul(0.5),
    "Asinh": lambda x: x.add(x.square().add(1.0).sqrt()).log(),
    "Acosh": lambda x: x.add(x.square().sub(1.0).sqrt()).log(),
    "Atanh": lambda x: x.add(1.0).div(x.neg().add(1.0)).log().mul(0.5),
    "Atan": lambda x: _atan(x),
    "Asin": lambda x: _atan(x.div(x.square().neg().add(1.0).sqrt())),  # x = +-1: atan(+-inf) = +-pi/2
    "Acos": lambda x: _atan(x.neg().add(1.0).div(x.add(1.0)).sqrt()).mul(2.0),  # exact near 1 too
}


def _atan(x):
    """Cephes' atanf: reduce |x| to [0, tan(pi/8)] by atan(x) = pi/2 + atan(-1/x) and pi/4 +
    atan((x-1)/(x+1)), then a degree-9 odd polynomial (about 1 ulp in f32)."""
    a = x.abs()
    big, mid = a.gt(2.414213562373095), a.gt(0.4142135623730950)
    r = a.reciprocal().neg().where_(big, a.sub(1.0).div(a.add(1.0)).where_(mid, a))
    base = r.mul(0.0).add(np.pi / 2).where_(big, r.mul(0.0).add(np.pi / 4).where_(mid, r.mul(0.0)))
    z = r.square()
    p = z.mul(8.05374449538e-2).sub(1.38776856032e-1).mul(z).add(1.99777106478e-1).mul(z).sub(3.33329491539e-1)
    y = base.add(p.mul(z).mul(r).add(r))
    return y.where_(x.ge(0.0), y.neg()).where_(x.notnan(), x)
for _name, _fn in _UNARY.items():
    onnx_op(_name)(lambda c, x, _fn=_fn: _fn(x))


@onnx_op("Identity")
def identity(c, x):
    if x is None:  # an empty optional, passed on as one
        return Value()
    return Seq(x) if isinstance(x, list) else x  # a sequence (a list of values) as one value


@onnx_op("IsInf")
def isinf(c, x, detect_negative=1, detect_positive=1):
    out = c.g.scalar(False, DType.BOOL).expand(x.shape)
    if detect_positive:
        out = out.logical_or(x.eq(float("inf")))
    if detect_negative:
        out = out.logical_or(x.eq(float("-inf")))
    return out


# --- binary ------------------------------------------------------------------------------
@onnx_op("Add")
def add(c, a, b):
    return a.add(b)


@onnx_op("Sub")
def sub(c, a, b):
    return a.sub(b)


@onnx_op("Mul")
def mul(c, a, b):
    return a.mul(b)


@onnx_op("Div")
def div(c, a, b):
    return a.div(b) if a.dtype.is_float else a.div(b, rounding_mode="trunc")


@onnx_op("Mod")
def mod(c, a, b, fmod=0):
    return a.fmod(b) if fmod else a.remainder(b)  # fmod=0: the sign of the divisor, floats too


@onnx_op("Pow")
def pow_(c, x, y):
    k = c.known(1)
    if k is not None and k.dtype != object and k.size == 1 and float(k.reshape(-1)[0]).is_integer() \
            and abs(float(k.reshape(-1)[0])) <= 16 and (x.dtype.is_float or float(k.reshape(-1)[0]) >= 0):
        return x.pow(int(float(k.reshape(-1)[0]))).expand(_bshape([x, y]))
    if x.dtype.is_float:
        return x.pow(y.cast(x.dtype))
    # an integer base: the power in float64, then to the integer type as onnxruntime's
    # static_cast (truncated: 2 ** 1.5 is 2); an integral exponent's power is an exact integer,
    # rounded there so that exp2(y log2 x) one ulp low (3 ** 4 = 80.99..) is not truncated
    xf, yf = x.cast(DType.F64), y.cast(DType.F64)
    p = xf.pow(yf)
    return p.round().where_(yf.floor().eq(yf), p).cast(x.dtype)


@onnx_op("Equal")
def equal(c, a, b):
    return a.eq(b)


@onnx_op("Less")
def less(c, a, b):
    return a.lt(b)


@onnx_op("LessOrEqual")
def less_equal(c, a, b):
    return a.le(b)


@onnx_op("Greater")
def greater(c, a, b):
    return a.gt(b)


@onnx_op("GreaterOrEqual")
def greater_equal(c, a, b):
    return a.ge(b)


@onnx_op("And")
def and_(c, a, b):
    return a.logical_and(b)


@onnx_op("Or")
def or_(c, a, b):
    return a.logical_or(b)


@onnx_op("Xor")
def xor(c, a, b):
    return a.logical_xor(b)


@onnx_op("Where")
def where(c, cond, a, b):
    return F.where(cond, a, b)


def _variadic(fold):
    def fn(c, *xs):
        out = xs[0]
        for x in xs[1:]:
            out = fold(out, x)
        return out.expand(_bshape(xs)) if len(xs) == 1 else out

    return fn


def _bshape(xs):
    from luminal.builder.tensor import broadcast_shapes

    return broadcast_shapes(*(x.shape for x in xs))


onnx_op("Sum", variadic=True)(_variadic(lambda a, b: a.add(b)))
onnx_op("Max", variadic=True)(_variadic(lambda a, b: a.maximum(b)))
onnx_op("Min", variadic=True)(_variadic(lambda a, b: a.minimum(b)))


@onnx_op("Mean", variadic=True)
def mean(c, *xs):
    return _variadic(lambda a, b: a.add(b))(c, *xs).mul(1.0 / len(xs))


@onnx_op("Clip", since=11)
def clip(c, x, lo=None, hi=None):
    if lo is not None:
        x = x.maximum(lo.reshape(()) if lo.ndim else lo)
    if hi is not None:
        x = x.minimum(hi.reshape(()) if hi.ndim else hi)
    return x


@onnx_op("Clip", since=1)
def clip_v6(c, x, min=-3.4028234663852886e38, max=3.4028234663852886e38):  # noqa: A002 - ONNX names
    return x.maximum(float(min)).minimum(float(max))


# --- casts -------------------------------------------------------------------------------
@onnx_op("Cast")
def cast(c, x, to, saturate=1, round_mode="up"):
    dtype = c.dtype(to)
    if narrow.is_narrow(to):
        return narrow.cast_to_narrow(x, to, bool(saturate), round_mode)
    if x.dtype.is_float and dtype is DType.BOOL:
        return x.ne(0.0)
    return x.cast(dtype)


@onnx_op("CastLike")
def cast_like(c, x, like, saturate=1, round_mode="up"):
    to = c.elem_type(1)
    if to is not None and narrow.is_narrow(to):
        return narrow.cast_to_narrow(x, to, bool(saturate), round_mode)
    if x.dtype.is_float and like.dtype is DType.BOOL:
        return x.ne(0.0)
    return x.cast(like.dtype)


# --- activations -------------------------------------------------------------------------
# x * alpha where x < 0, else x: one compare (x >= 0 is spelled not(x < 0) and not NaN, which
# the C loops cannot vectorize); NaN and -0.0 give x either way, as ">= 0, else x * alpha" does
@onnx_op("LeakyRelu")
def leaky_relu(c, x, alpha=0.01):
    return x.mul(alpha).where_(x.lt(0.0), x)


@onnx_op("PRelu")
def prelu(c, x, slope):
    if slope.ndim == 1 and x.ndim > 2 and not sym.equal(slope.shape[0], 1) and sym.equal(slope.shape[0], x.shape[1]):
        slope = slope.reshape((slope.shape[0],) + (1,) * (x.ndim - 2))  # opset < 7: per channel
    return x.mul(slope).where_(x.lt(0.0) if x.dtype.is_float else x.lt(0), x)


@onnx_op("Elu")
def elu(c, x, alpha=1.0):
    return x.where_(x.gt(0.0), x.exp().sub(1.0).mul(alpha))


@onnx_op("Selu")
def selu(c, x, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    return x.where_(x.gt(0.0), x.exp().mul(alpha).sub(alpha)).mul(gamma)


@onnx_op("Celu")
def celu(c, x, alpha=1.0):
    return x.maximum(0.0).add(x.div(alpha).exp().sub(1.0).mul(alpha).minimum(0.0))


@onnx_op("HardSigmoid")
def hard_sigmoid(c, x, alpha=0.2, beta=0.5):
    return x.mul(alpha).add(beta).clamp(0.0, 1.0)


@onnx_op("HardSwish")
def hard_swish(c, x):
    return x.mul(x.mul(1 / 6).add(0.5).clamp(0.0, 1.0))


@onnx_op("Softplus")
def softplus(c, x):
    # log(1 + exp(x)), stable: max(x, 0) + log(1 + exp(-|x|))
    return x.maximum(0.0).add(x.abs().neg().exp().add(1.0).log())


@onnx_op("ThresholdedRelu")
def thresholded_relu(c, x, alpha=1.0):
    return x.where_(x.gt(alpha), 0.0)


@onnx_op("Gelu", since=20)
def gelu(c, x, approximate="none"):
    return x.gelu(approximate)


@onnx_op("Shrink")
def shrink(c, x, bias=0.0, lambd=0.5):
    zero = 0.0 if x.dtype.is_float else 0
    b = bias if x.dtype.is_float else int(bias)
    return x.add(b).where_(x.lt(-lambd), x.sub(b).where_(x.gt(lambd), zero))


@onnx_op("Swish", since=24)
def swish(c, x, alpha=1.0):
    return x.mul(x.mul(alpha).sigmoid())


@onnx_op("Mish")
def mish(c, x):
    return x.mul(softplus(c, x).tanh())


def _coerce_2d(x, axis):
    a = axis % max(x.ndim, 1)
    return x.reshape(sym.product(x.shape[:a]), sym.product(x.shape[a:]))


@onnx_op("Softmax", since=13)
def softmax(c, x, axis=-1):
    return x.softmax(axis)


@onnx_op("LogSoftmax", since=13)
def log_softmax(c, x, axis=-1):
    return x.log_softmax(axis)


@onnx_op("Softmax", since=1)
def softmax_v1(c, x, axis=1):
    return _coerce_2d(x, axis).softmax(-1).reshape(x.shape)


@onnx_op("LogSoftmax", since=1)
def log_softmax_v1(c, x, axis=1):
    return _coerce_2d(x, axis).log_softmax(-1).reshape(x.shape)


@onnx_op("Hardmax", since=13)
def hardmax(c, x, axis=-1):
    idx = x.argmax(axis, keepdim=True)
    a = axis % x.ndim
    pos = c.g.iota(x.shape[a], DType.I64).reshape(tuple(x.shape[a] if i == a else 1 for i in range(x.ndim)))
    return pos.expand(x.shape).eq(idx).cast(x.dtype)


# --- reductions --------------------------------------------------------------------------
def _sign(x):
    """-1, 0 or 1, and NaN for NaN (numpy's sign, as onnxruntime: torch's, which the builder
    follows, gives 0)."""
    s = x.sign()
    return s.where_(x.eq(x), x) if x.dtype.is_float else s


_NOOP_REDUCE = {"l1": lambda x: x.abs(), "l2": lambda x: x.mul(x).sqrt(), "sumsquare": lambda x: x.mul(x),
                "logsum": lambda x: x.log()}  # logsumexp: x itself, as the stable form computes it


def _reduce(c, x, axes, keepdims, noop, kind):
    if axes is None or len(axes) == 0:
        if noop:  # nothing reduced; the op's elementwise part still applies (onnxruntime, the reference)
            return _NOOP_REDUCE.get(kind, lambda t: t)(x)
        axes = list(range(x.ndim))
    axes = sorted({int(a) % max(x.ndim, 1) for a in np.asarray(axes).reshape(-1).tolist()})
    if x.ndim == 0:
        axes = None
    kd = bool(keepdims)
    if kind == "sum":
        return x.sum(axes, kd, dtype=x.dtype) if x.dtype.is_int else x.sum(axes, kd)
    if kind == "mean" and x.dtype.is_int:  # onnxruntime's: the sum in the type, divided truncating
        count = sym.product([x.shape[a] for a in axes] if axes is not None else [])
        if not sym.is_static(count):
            raise UnsupportedError(f"ReduceMean of a {x.dtype} tensor over symbolic dims")
        return x.sum(axes, kd, dtype=x.dtype).div(x._scalar(int(count)), rounding_mode="trunc")
    if kind == "mean":
        return x.mean(axes, kd)
    if kind == "max":
        return x.max(axes, kd)
    if kind == "min":
        return x.min(axes, kd)
    if kind == "prod":
        return x.prod(axes, kd)
    if kind == "l1":
        return x.abs().sum(axes, kd)
    if kind == "l2":
        return x.mul(x).sum(axes, kd).sqrt()
    if kind == "sumsquare":
        return x.mul(x).sum(axes, kd)
    if kind == "logsum":
        return x.sum(axes, kd).log()
    if kind == "logsumexp":
        m = x.max(axes, keepdim=True)
        m = m.where_(m.isinf().logical_not(), 0.0)
        out = x.sub(m).exp().sum(axes, keepdim=True).log().add(m)
        return out if kd else out.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes))
    raise AssertionError(kind)


_REDUCE_KINDS = {"ReduceSum": ("sum", 13), "ReduceMean": ("mean", 18), "ReduceMax": ("max", 18),
                 "ReduceMin": ("min", 18), "ReduceProd": ("prod", 18), "ReduceL1": ("l1", 18),
                 "ReduceL2": ("l2", 18), "ReduceSumSquare": ("sumsquare", 18),
                 "ReduceLogSum": ("logsum", 18), "ReduceLogSumExp": ("logsumexp", 18)}
for _name, (_kind, _since) in _REDUCE_KINDS.items():
    onnx_op(_name, since=_since, known=(1,))(
        lambda c, x, axes=None, keepdims=1, noop_with_empty_axes=0, _k=_kind: _reduce(c, x, axes, keepdims, noop_with_empty_axes, _k))
    onnx_op(_name, since=1)(
        lambda c, x, axes=None, keepdims=1, _k=_kind: _reduce(c, x, axes, keepdims, 0, _k))


def _arg(c, x, axis, keepdims, select_last_index, largest):
    a = axis % max(x.ndim, 1)
    n = x.shape[a]
    if select_last_index:
        flipped = x.slice(a, None, None, -1)
        idx = flipped.argmax(a, True) if largest else flipped.argmin(a, True)
        idx = c.g.scalar(sym.norm(n - 1), DType.I64).sub(idx)
    else:
        idx = x.argmax(a, True) if largest else x.argmin(a, True)
    return idx if keepdims else idx.squeeze(a)


@onnx_op("ArgMax")
def argmax(c, x, axis=0, keepdims=1, select_last_index=0):
    return _arg(c, x, axis, keepdims, select_last_index, True)


@onnx_op("ArgMin")
def argmin(c, x, axis=0, keepdims=1, select_last_index=0):
    return _arg(c, x, axis, keepdims, select_last_index, False)


@onnx_op("CumSum", known=(1,))
def cumsum(c, x, axis, exclusive=0, reverse=0):
    a = int(np.asarray(axis).reshape(-1)[0]) % x.ndim
    if reverse:
        x = x.slice(a, None, None, -1)
    out = x.cumsum(a).cast(x.dtype)
    if exclusive:
        out = out.sub(x)
    return out.slice(a, None, None, -1) if reverse else out


@onnx_op("CumProd", since=26, known=(1,))
def cumprod(c, x, axis, exclusive=0, reverse=0):
    """Hillis-Steele: log2(n) steps of y *= y shifted by 2**k (padding with ones)."""
    a = int(np.asarray(axis).reshape(-1)[0]) % x.ndim
    n = x.shape[a]
    if not sym.is_static(n):
        raise NeedsShape(f"CumProd node {c.name!r}: the scanned axis {n} is symbolic; compiled per shape", c.node.input[0])
    if reverse:
        x = x.slice(a, None, None, -1)
    pads = [(0, 0)] * x.ndim
    y = x
    if exclusive:
        pads[a] = (1, 0)
        y = x.pad(pads, 1).slice(a, 0, n)
    k = 1
    while k < n:
        pads[a] = (k, 0)
        y = y.mul(y.pad(pads, 1).slice(a, 0, n))
        k *= 2
    return y.slice(a, None, None, -1) if reverse else y


# --- matrix products ---------------------------------------------------------------------
@onnx_op("MatMul")
def matmul(c, a, b):
    return c.dense(0, a).matmul(c.dense(1, b))


@onnx_op("Gemm")
def gemm(c, a, b, cc=None, alpha=1.0, beta=1.0, transA=0, transB=0):  # noqa: N803 - ONNX names
    a, b = c.dense(0, a), c.dense(1, b)
    a = a.T if transA else a
    b = b.T if transB else b
    y = a.matmul(b)
    if alpha != 1.0:
        y = y.mul(alpha if y.dtype.is_float else int(alpha))
    if cc is not None and beta != 0:  # beta 0: C is not read (its NaNs neither), as onnxruntime and the reference
        cc = cc if beta == 1.0 else cc.mul(beta if cc.dtype.is_float else int(beta))
        y = y.add(cc)
    return y


@onnx_op("Einsum")
def einsum(c, *xs, equation):
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if any("." in t for t in terms) or len(terms) != len(xs):
        c.fail(f"einsum equation {equation!r} (ellipsis) is not supported")
    if not arrow:
        rhs = "".join(sorted(ch for ch in set(lhs) if ch != "," and lhs.count(ch) == 1))
    letters = sorted(set("".join(terms)))
    size = {}
    for t, x in zip(terms, xs):
        for ch, d in zip(t, x.shape):
            if ch not in size or sym.equal(size[ch], 1):
                size[ch] = d
    full = tuple(size[ch] for ch in letters)
    prod = None
    for t, x in zip(terms, xs):
        if len(set(t)) != len(t):
            c.fail(f"einsum equation {equation!r} (repeated index in one term) is not supported")
        order = sorted(range(len(t)), key=lambda i: letters.index(t[i]))
        xt = x.permute(order) if x.ndim else x
        present = [t[i] for i in order]
        xt = xt.reshape(tuple(xt.shape[present.index(ch)] if ch in present else 1 for ch in letters)).expand(full)
        prod = xt if prod is None else prod.mul(xt)
    summed = [i for i, ch in enumerate(letters) if ch not in rhs]
    out = prod.sum(summed) if summed else prod
    kept = [ch for ch in letters if ch in rhs]
    return out.permute([kept.index(ch) for ch in rhs]) if len(rhs) > 1 else out

