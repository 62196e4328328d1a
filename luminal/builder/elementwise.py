"""Elementwise ops, each decomposed into primitives exactly as DESIGN.md states.

Exactness notes: `where` selects with a Gather (never `c*a + (1-c)*b`, which turns a masked
-inf into NaN); `maximum` is a MaxReduce over the stacked pair, so NaN propagates as in torch;
`eq` and `ne` test NaN explicitly since LessThan alone cannot tell NaN from equality.
"""

from __future__ import annotations

import numbers

from luminal.errors import DTypeError
from luminal.hlir import constants as C
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Op


class ElementwiseMixin:
    # --- arithmetic ------------------------------------------------------------------------
    def add(self, other):
        return self._binary_prim(Op.ADD, other)

    def mul(self, other):
        return self._binary_prim(Op.MUL, other)

    def neg(self):
        if self.dtype is DType.BOOL:
            raise DTypeError("neg of a bool tensor; use logical_not")
        return self.mul(-1)

    def sub(self, other):
        # x - y = x + (-1 * y)
        return self.add(self._operand(other, "Sub").neg())

    def reciprocal(self):
        return self._unary_prim(Op.RECIP)

    def div(self, other, rounding_mode: str | None = None):
        other = self._operand(other, "Div")
        if self.dtype.is_float:
            q = self.mul(other.reciprocal())  # x / y = x * recip(y)
        elif rounding_mode is None:
            raise DTypeError(f"true division of {self.dtype} tensors; cast to float first")
        else:
            q = None
        if rounding_mode is None:
            return q
        if rounding_mode == "trunc":
            if q is None:  # integers: (x - fmod(x, y)) / y is exact
                return self.sub(self.fmod(other)).floordiv_exact(other)
            return q.trunc()
        if rounding_mode == "floor":
            if q is None:  # the truncated quotient (x - fmod(x, y) cannot overflow), less one if x/y < 0 is inexact
                r = self.fmod(other)
                quotient = self.sub(r).floordiv_exact(other)
                fix = r.ne(0).logical_and(r.lt(0).logical_xor(other.lt(0)))
                return quotient.add(-1).where_(fix, quotient)
            return self._floor_div_float(other, q)
        raise ValueError(f"unknown rounding_mode {rounding_mode!r}")

    def _floor_div_float(self, other, q):
        """torch's div_floor_floating: (x - fmod(x, y)) / y is near an integer, so the
        rounding of x * recip(y) cannot move it across one (1.0 // 0.1 == 9, not 10)."""
        mod = self.fmod(other)
        div = self.sub(mod).mul(other.reciprocal())
        fix = mod.ne(0).logical_and(other.lt(0).logical_xor(mod.lt(0)))
        div = div.add(-1).where_(fix, div).round()
        div = div.where_(div.ne(0), q.mul(0))  # a zero quotient takes the sign of x / y
        return div.where_(other.ne(0), q)  # y == 0: the IEEE quotient (inf, -inf, NaN)

    def floordiv_exact(self, other):
        """x / y for integers where y divides x exactly: a float64 quotient, then one exact
        correction (the residual x - q*y is small, so its float64 quotient is exact)."""
        inv = other.cast(DType.F64).reciprocal()
        q = self.cast(DType.F64).mul(inv).round().cast(self.dtype)
        residual = self.sub(q.mul(other))  # wraps to the true (small) value in int64
        return q.add(residual.cast(DType.F64).mul(inv).round().cast(self.dtype))

    def fmod(self, other):
        """C fmod: truncated remainder, sign of the dividend."""
        return self._binary_prim(Op.MOD, other)

    def remainder(self, other):
        """Python/torch remainder: the sign of the divisor."""
        other = self._operand(other, "Remainder")
        r = self.fmod(other)
        fix = r.ne(0).logical_and(r.lt(0).logical_xor(other.lt(0)))
        return r.where_(fix.logical_not(), r.add(other))

    def pow(self, exponent):
        if isinstance(exponent, numbers.Number) and not isinstance(exponent, bool):
            e = float(exponent)
            if e.is_integer() and abs(e) <= 16:
                return self._int_pow(int(e))
            if e == 0.5:
                return self.sqrt()
            if e == -0.5:
                return self.rsqrt()
            if not self.dtype.is_float:
                raise DTypeError(f"pow of a {self.dtype} tensor by {exponent}; cast to float first")
            base = self.abs().log2().mul(e).exp2()  # C pow: NaN for a finite negative base
            return self._scalar(float("nan")).where_(self.lt(0).logical_and(self.gt(-float("inf"))), base)
        y = self._operand(exponent, "Pow")
        if not self.dtype.is_float:
            raise DTypeError(f"pow with a tensor exponent needs float tensors, got {self.dtype}")
        return self._pow_tensor(y)

    def _pow_tensor(self, y):
        """C99 pow (torch's): |x|^y = exp2(y log2|x|), the sign from an odd integer y on a
        negative base (-0.0 and -inf included), NaN for a finite negative base and a non-integer
        y, and the exact cases: x ** 0 = 1 and 1 ** y = 1 (even NaN), (-1) ** ±inf = 1."""
        inf = float("inf")
        mag = self.abs().log2().mul(y).exp2()
        odd = y.fmod(2.0).abs().eq(1)  # false for ±inf and NaN
        negative = self.lt(0).logical_or(self.reciprocal().lt(0))  # -0.0 too: 1 / -0.0 = -inf
        out = mag.neg().where_(odd, mag).where_(negative, mag)
        non_integer = y.floor().eq(y).logical_not()  # ±inf count as (even) integers
        out = self._scalar(float("nan")).where_(self.lt(0).logical_and(self.gt(-inf)).logical_and(non_integer), out)
        one = self.eq(-1).logical_and(y.abs().eq(inf)).logical_or(self.eq(1)).logical_or(y.eq(0))
        return self._scalar(1.0).where_(one, out)

    def _int_pow(self, n: int):
        if n == 0:
            return self.mul(0).add(1) if not self.dtype.is_float else self._scalar(1.0).expand(self.shape)
        if n < 0:
            return self._int_pow(-n).reciprocal()
        result, base = None, self
        while n:  # square and multiply
            if n & 1:
                result = base if result is None else result.mul(base)
            n >>= 1
            if n:
                base = base.mul(base)
        return result

    def square(self):
        return self.mul(self)

    # --- transcendental --------------------------------------------------------------------
    def exp2(self):
        return self._unary_prim(Op.EXP2)

    def log2(self):
        return self._unary_prim(Op.LOG2)

    def sin(self):
        return self._unary_prim(Op.SIN)

    def sqrt(self):
        return self._unary_prim(Op.SQRT)

    def rsqrt(self):
        return self.sqrt().reciprocal()

    def exp(self):
        self._need_float("exp")
        return self.mul(C.LOG2E).exp2()  # exp(x) = exp2(x * log2 e)

    def log(self):
        self._need_float("log")
        return self.log2().mul(C.LN2)  # log(x) = log2(x) * ln 2

    def cos(self):
        self._need_float("cos")
        return self.add(C.HALF_PI).sin()  # cos(x) = sin(x + pi/2)

    def sigmoid(self):
        self._need_float("sigmoid")
        return self.neg().exp().add(1).reciprocal()  # 1 / (1 + exp(-x))

    def tanh(self):
        self._need_float("tanh")
        return self.mul(2).sigmoid().mul(2).add(-1)  # 2 sigmoid(2x) - 1

    def erf(self):
        """Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7) from ERF_SMALL on, the Maclaurin series
        below (`constants.py`). A&S's 1 - t (a1 + t (a2 + ...)) exp(-x^2), t = 1 / u, u = 1 + p|x|,
        is summed as N(u) / u^5 (N: the coefficients in reverse order): one division, where the
        polynomial in t was five (a product by a reciprocal is a division in the IR, rounded once).
        |x| is capped at 8 there (erf is +-1 in every float type well before; NaN stays NaN), so
        u^5 stays finite. The series keeps erf(-0.0) = -0.0."""
        self._need_float("erf")
        a = self.abs().minimum(8.0)
        u = a.mul(C.ERF_P).add(1)
        num = self._scalar(C.ERF_A[0]).expand(self.shape)
        for coeff in C.ERF_A[1:]:
            num = num.mul(u).add(coeff)
        u2 = u.mul(u)
        tail = num.div(u2.mul(u2).mul(u)).mul(a.mul(a).neg().exp())
        large = tail.neg().add(1).mul(self.sign())
        x2 = self.mul(self)
        series = self._scalar(C.ERF_SERIES[-1]).expand(self.shape)
        for coeff in reversed(C.ERF_SERIES[:-1]):
            series = series.mul(x2).add(coeff)
        return series.mul(self).where_(a.lt(C.ERF_SMALL), large)

    # --- activations -----------------------------------------------------------------------
    def relu(self):
        return self.maximum(0)

    def silu(self):
        self._need_float("silu")
        return self.mul(self.sigmoid())

    def gelu(self, approximate: str = "none"):
        self._need_float("gelu")
        if approximate == "tanh":  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            inner = self.add(self.mul(self).mul(self).mul(C.GELU_TANH_COEFF)).mul(C.SQRT_2_OVER_PI)
            return self.mul(0.5).mul(inner.tanh().add(1))
        if approximate != "none":
            raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
        return self.mul(0.5).mul(self.mul(C.INV_SQRT2).erf().add(1))  # 0.5 x (1 + erf(x/sqrt 2))

    def atan(self):
        """arctan: Cephes' double-precision atan (|x| reduced at tan(3pi/8) and 0.66, then a
        rational approximation good to about 1e-16), computed in float64 and rounded once to the
        dtype; signed zeros, +-inf (+-pi/2) and NaN as C's atan."""
        self._need_float("atan")
        x = self.cast(DType.F64)
        full = lambda v: x.graph.scalar(v, DType.F64).expand(x.shape)  # noqa: E731
        a = x.abs()
        big, mid = a.gt(2.41421356237309504880), a.gt(0.66)
        r = a.reciprocal().neg().where_(big, a.sub(1.0).div(a.add(1.0)).where_(mid, a))
        base = full(C.PI / 2).where_(big, full(C.PI / 4).where_(mid, full(0.0)))
        more = full(6.123233995736765886130e-17).where_(big, full(3.061616997868382943065e-17).where_(mid, full(0.0)))
        z = r.mul(r)
        p = z.mul(-8.750608600031904122785e-1).add(-1.615753718733365076637e1).mul(z).add(
            -7.500855792314704667340e1).mul(z).add(-1.228866684490136173410e2).mul(z).add(-6.485021904942025371773e1)
        q = z.add(2.485846490142306297962e1).mul(z).add(1.650270098316988542046e2).mul(z).add(
            4.328810604912902668951e2).mul(z).add(4.853903996359136964868e2).mul(z).add(1.945506571482613964425e2)
        y = base.add(r.mul(z.mul(p).div(q)).add(r).add(more))
        y = y.where_(x.gt(0.0), y.neg()).where_(a.gt(0.0), x)  # odd; +-0 and NaN are themselves
        return y.cast(self.dtype)

    def atan2(self, other):
        """atan2(self, other), the angle of the point (other, self), in float64 rounded once,
        with C's special cases: signed zeros (atan2(+-0, -0) = +-pi), infinities (+-pi/4,
        +-3pi/4), NaN in either gives NaN."""
        self._need_float("atan2")
        from luminal.builder.tensor import broadcast_shapes

        shape = broadcast_shapes(self.shape, other.shape)
        y, x = self.cast(DType.F64).expand(shape), other.cast(DType.F64).expand(shape)
        full = lambda v: y.graph.scalar(v, DType.F64).expand(y.shape)  # noqa: E731

        def negative(v):  # the sign bit: v < 0, or -0.0 (1 / -0 = -inf)
            return v.lt(0.0).logical_or(v.eq(0.0).logical_and(v.reciprocal().lt(0.0)))

        pi = full(C.PI).where_(negative(y).logical_not(), full(-C.PI))  # copysign(pi, y)
        t = y.div(x).atan()
        t = t.add(pi).where_(negative(x), t)
        both_inf = y.isinf().logical_and(x.isinf())
        quarter = full(C.PI / 4).where_(negative(x).logical_not(), full(3 * C.PI / 4))
        t = quarter.where_(negative(y).logical_not(), quarter.neg()).where_(both_inf, t)
        both_zero = y.eq(0.0).logical_and(x.eq(0.0))
        t = pi.where_(negative(x), y).where_(both_zero, t)
        return t.cast(self.dtype)

    def _need_float(self, name: str):
        if not self.dtype.is_float:
            raise DTypeError(f"{name} needs a float tensor, got {self.dtype}; cast it first")

    # --- sign, rounding, clamping ----------------------------------------------------------
    def abs(self):
        out = self.maximum(self.neg())
        # -0.0 and 0.0 compare equal, so the max of the pair may be either; + 0.0 makes it +0.0,
        # as torch's abs, and changes no other value (the rewriter has no x + 0 = x)
        return out.add(0.0) if self.dtype.is_float else out

    def sign(self):
        one = self._scalar(1).expand(self.shape)
        zero = self._scalar(0).expand(self.shape)
        return one.where_(self.gt(0), zero).sub(one.where_(self.lt(0), zero))  # sign(NaN) = 0, as torch

    def trunc(self):
        if not self.dtype.is_float:
            return self
        out = self.sub(self.fmod(1.0)).where_(self.abs().lt(_mantissa_limit(self.dtype)), self)  # ±inf stay
        return out._signed_zero(self)

    def _signed_zero(self, x):
        """`self` (x rounded to an integer) with a zero result carrying x's sign, as torch's
        trunc/floor/round give -0.0 for x in (-1, 0) or -0.0; x * 0 is that zero."""
        return self.where_(self.ne(0), x.mul(0))

    def floor(self):
        if not self.dtype.is_float:
            return self
        # x - fmod(x, 1), minus 1 for negative non-integers; exact while |x| < 2**mantissa.
        r = self.fmod(1.0)
        f = self.sub(r)
        f = f.where_(r.ge(0), f.add(-1))
        return f.where_(self.abs().lt(_mantissa_limit(self.dtype)), self)._signed_zero(self)

    def ceil(self):
        if not self.dtype.is_float:
            return self
        return self.neg().floor().neg()

    def round(self):
        """Round half to even, like torch.round."""
        if not self.dtype.is_float:
            return self
        f = self.floor()
        d = self.sub(f)  # exact fractional part in [0, 1)
        f_odd = f.fmod(2.0).ne(0)
        up = d.gt(0.5).logical_or(d.eq(0.5).logical_and(f_odd))
        return f.add(1).where_(up, f)._signed_zero(self)

    def clamp(self, min=None, max=None):  # noqa: A002 - torch's names
        out = self
        if min is not None:
            out = out.maximum(min)
        if max is not None:
            out = out.minimum(max)
        return out

    clip = clamp

    def maximum(self, other):
        other = self._operand(other, Op.MAXIMUM.title)
        from luminal.builder import functional as F
        from luminal.builder.tensor import broadcast_shapes

        shape = broadcast_shapes(self.shape, other.shape)
        return F.stack([self.expand(shape), other.expand(shape)], -1).max(-1)

    def minimum(self, other):
        other = self._operand(other, "Minimum")
        if self.dtype is DType.BOOL:
            return self.logical_and(other)
        return self.order_flip().maximum(other.order_flip()).order_flip()

    def order_flip(self):
        """An order-reversing involution, exact on every value: -x for floats, not x for bools,
        ~x = -1 - x for integers (-x would overflow at the lowest value)."""
        if self.dtype is DType.BOOL:
            return self.logical_not()
        return self.neg() if self.dtype.is_float else self.neg().add(-1)

    # --- comparisons and logic -------------------------------------------------------------
    def lt(self, other):
        return self._binary_prim(Op.LESS_THAN, other)

    def gt(self, other):
        return self._binary_prim(Op.LESS_THAN, other, reverse=True)

    def le(self, other):
        known = _not_nan(other)
        other = self._operand(other, "LessEqual")
        return _and_notnan(self.gt(other).logical_not().logical_and(self.notnan()), other, known)

    def ge(self, other):
        known = _not_nan(other)
        other = self._operand(other, "GreaterEqual")
        return _and_notnan(self.lt(other).logical_not().logical_and(self.notnan()), other, known)

    def eq(self, other):
        known = _not_nan(other)
        other = self._operand(other, "Equal")
        if self.dtype is DType.BOOL:
            return self.logical_xor(other).logical_not()
        differ = self.lt(other).logical_or(self.gt(other))
        return _and_notnan(differ.logical_not().logical_and(self.notnan()), other, known)

    def ne(self, other):
        return self.eq(other).logical_not()

    def notnan(self):
        """x == x, in primitives: true unless NaN (x < inf or -inf < x holds for all others)."""
        if not self.dtype.is_float:
            return self.graph.scalar(True, DType.BOOL).expand(self.shape)
        inf = float("inf")
        return self.lt(inf).logical_or(self.gt(-inf))

    def isnan(self):
        return self.notnan().logical_not()

    def isinf(self):
        return self.abs().eq(float("inf"))

    def _as_bool(self, name):
        if self.dtype is not DType.BOOL:
            raise DTypeError(f"{name} needs bool tensors, got {self.dtype}; compare first or cast")
        return self

    def logical_and(self, other):
        return self._as_bool("logical_and")._binary_prim(Op.MUL, other)

    def logical_or(self, other):
        return self._as_bool("logical_or")._binary_prim(Op.ADD, other)

    def logical_not(self):
        return self._as_bool("logical_not")._binary_prim(Op.LESS_THAN, True)  # x < True

    def logical_xor(self, other):
        other = self._operand(other, "logical_xor")
        return self.logical_or(other).logical_and(self.logical_and(other).logical_not())

    def where_(self, cond, other):
        """`self` where `cond` holds, else `other` (torch's `Tensor.where`)."""
        from luminal.builder import functional as F

        return F.where(cond, self, other)

    where = where_


def _not_nan(value) -> bool:
    """A Python number (or dim expression) that is not NaN: its `notnan()` is true, known now."""
    return (isinstance(value, numbers.Number) and value == value) or hasattr(value, "free_symbols")


def _and_notnan(cond, other, known: bool):
    """cond and other.notnan(), the latter left out where it is known to hold: a scalar's mask
    is a bool buffer of its own the C kernels read (and then do not vectorize)."""
    return cond if known else cond.logical_and(other.notnan())


def _mantissa_limit(dtype: DType) -> float:
    """Above this magnitude every value of `dtype` is an integer."""
    bits = {DType.F16: 10, DType.BF16: 7, DType.F32: 23, DType.F64: 52}[dtype]
    return float(2**bits)
