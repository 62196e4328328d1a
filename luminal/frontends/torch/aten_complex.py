"""Complex tensors (complex64, complex128) as pairs of real planes: a `Complex` holds one real
HLIR tensor of the complex shape plus a trailing axis of 2 (real, imaginary), torch's
`view_as_real` layout, so `view_as_real`/`view_as_complex` are free and every movement op is
the real one with its dims read on the planes.

`fx_import` sends every call that reads or makes a complex tensor here (`COMPLEX`); an op
without a complex lowering is an UnsupportedError naming it, never a silent real computation.
The FFTs lower through `builder/spectral.py` (the one DFT lowering, ONNX's too), in float64,
rounded once; `abs` is the float64 hypot, rounded once.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from luminal.builder import Tensor, spectral
from luminal.builder import functional as F
from luminal.errors import UnsupportedError
from luminal.frontends.torch import aten_elementwise, aten_index, aten_movement, aten_reduce
from luminal.frontends.torch.aten_ops import aten
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType

COMPLEX_DTYPES = {torch.complex64: DType.F32, torch.complex128: DType.F64}


class Complex:
    """A complex tensor: `planes` is real, of shape (*shape, 2)."""

    __slots__ = ("planes",)

    def __init__(self, planes: Tensor):
        self.planes = planes

    @classmethod
    def of(cls, re: Tensor, im: Tensor) -> Complex:
        return cls(F.stack([re, im.cast(re.dtype)], -1))

    @property
    def re(self) -> Tensor:
        return self.planes.slice(-1, 0, 1).squeeze(-1)

    @property
    def im(self) -> Tensor:
        return self.planes.slice(-1, 1, 2).squeeze(-1)

    @property
    def ndim(self) -> int:
        return self.planes.ndim - 1

    @property
    def shape(self) -> tuple:
        return self.planes.shape[:-1]

    @property
    def dtype(self) -> DType:  # of each plane
        return self.planes.dtype


def is_complex(val) -> bool:
    """Whether a traced value (a fake tensor, or a list of them) is complex."""
    if isinstance(val, (list, tuple)):
        return any(is_complex(v) for v in val)
    return isinstance(val, torch.Tensor) and val.dtype in COMPLEX_DTYPES


def touches_complex(node) -> bool:
    """Whether an FX node reads or makes a complex tensor."""
    return is_complex(node.meta.get("val")) or any(is_complex(a.meta.get("val")) for a in node.all_input_nodes)


COMPLEX: dict[str, object] = {}  # ATen overload key -> lowering taking Complex arguments


def complex_op(*names, only=False):
    """Register the complex lowering of ATen overloads `names`; `only`: ops that exist for complex
    tensors alone (the FFTs, view_as_real, ...), registered in the real table too so that the
    support check knows them (`fx_import` routes their calls here)."""

    def register(fn):
        for name in names:
            COMPLEX[name] = fn
        if only:
            aten(*names)(fn)
        return fn

    return register


def _planes_cx(cx):
    """The op context with the result read as its planes (shape + (2,), the planes' dtype)."""
    val = cx.val[0] if isinstance(cx.val, (list, tuple)) else cx.val
    dtype = COMPLEX_DTYPES.get(getattr(val, "dtype", None), cx.dtype)
    return dataclasses.replace(cx, shape=None if cx.shape is None else tuple(cx.shape) + (2,), dtype=dtype)


def _as_complex(x, dtype: DType) -> Complex:
    """A Complex, a real tensor or a Python number, as a Complex with planes of `dtype`."""
    if isinstance(x, Complex):
        return Complex(x.planes.cast(dtype))
    if isinstance(x, Tensor):
        x = x.cast(dtype)
        return Complex.of(x, x.graph.scalar(0.0, dtype).expand(x.shape))
    raise UnsupportedError(f"a {type(x).__name__} operand of a complex op")


def _dim(d: int, ndim: int) -> int:
    return d % max(ndim, 1)


# --- views and movement: the real op on the planes ------------------------------------------
@complex_op("view_as_real.default", only=True)
def view_as_real(cx, x):
    return x.planes


@complex_op("view_as_complex.default", only=True)
def view_as_complex(cx, x):
    return Complex(x)


@complex_op("view.default", "_unsafe_view.default", "reshape.default", "view_copy.default", "squeeze.dim",
            "squeeze.dims", "squeeze.default", "unsqueeze.default", "flatten.using_ints", "unflatten.int",
            "expand.default", "expand_copy.default", "broadcast_to.default")
def reshape(cx, x, *args, **kwargs):
    planes_cx = _planes_cx(cx)
    if cx.node.target.__name__.startswith(("expand", "broadcast_to")):
        return Complex(x.planes.expand(planes_cx.shape))
    return Complex(x.planes.reshape(planes_cx.shape))


@complex_op("permute.default", "permute_copy.default")
def permute(cx, x, dims):
    return Complex(x.planes.permute([_dim(d, x.ndim) for d in dims] + [x.ndim]))


@complex_op("transpose.int", "transpose_copy.int")
def transpose(cx, x, a, b):
    return Complex(x.planes.transpose(_dim(a, x.ndim), _dim(b, x.ndim)))


@complex_op("slice.Tensor", "slice_copy.Tensor")
def slice_(cx, x, dim=0, start=None, end=None, step=1):
    return Complex(x.planes.slice(_dim(dim, x.ndim), start, end, step))


@complex_op("select.int", "select_copy.int")
def select(cx, x, dim, index):
    return Complex(aten_movement.select(_planes_cx(cx), x.planes, _dim(dim, x.ndim), index))


@complex_op("flip.default")
def flip(cx, x, dims):
    return Complex(aten_movement.flip(cx, x.planes, [_dim(d, x.ndim) for d in dims]))


@complex_op("cat.default", "concat.default")
def cat(cx, tensors, dim=0):
    dtype = _planes_cx(cx).dtype
    parts = [_as_complex(t, dtype).planes for t in tensors]
    return Complex(F.concat(parts, _dim(dim, len(cx.shape))))


@complex_op("clone.default", "alias.default", "detach.default", "contiguous.default", "resolve_conj.default",
            "resolve_neg.default", "lift_fresh_copy.default")
def identity(cx, x, *args, **kwargs):
    return x


@complex_op("_to_copy.default", "to.dtype", "to.dtype_layout", "to.device", "_to_dim_order_copy.default",
            "prims::convert_element_type.default")
def to_copy(cx, x, *args, **kwargs):
    """To a complex dtype (a real tensor gets +0 imaginary parts), or from one to a real dtype:
    the real part, as torch does (with its warning that the imaginary part is discarded)."""
    if is_complex(cx.val):
        return _as_complex(x, _planes_cx(cx).dtype)
    return aten_elementwise.to_copy(cx, x.re)


# --- arithmetic --------------------------------------------------------------------------
def _operand(cx, x, dtype: DType):
    """A binary op's operand: a Complex stays one, a Python complex number becomes one; a real
    tensor or number is returned as it is (the ops scale both planes by it)."""
    if isinstance(x, complex):
        return Complex.of(cx.full((), x.real, dtype), cx.full((), x.imag, dtype))
    return x


def _promoted(cx, x, dtype: DType) -> Complex:
    """An operand of a complex op promoted as torch promotes it: a real tensor or number gets a
    +0 imaginary part, a Python complex number becomes a constant."""
    x = _operand(cx, x, dtype)
    return _as_complex(x if isinstance(x, (Complex, Tensor)) else cx.full((), x, dtype), dtype)


def _times(a: Complex, b: Complex) -> Complex:
    """(ar + i ai)(br + i bi) = (ar br - ai bi) + i (ar bi + ai br), each product rounded."""
    return Complex.of(a.re.mul(b.re).sub(a.im.mul(b.im)), a.re.mul(b.im).add(a.im.mul(b.re)))


@complex_op("add.Tensor", "sub.Tensor")
def add_sub(cx, a, b, *, alpha=1):
    """a + alpha * b (sub: -alpha), with alpha * b a complex product, as torch's kernel computes
    it for every alpha: so (inf + 0i) + (inf + 0i) is inf + NaN i there, and here."""
    dtype = _planes_cx(cx).dtype
    a, b = _promoted(cx, a, dtype), _promoted(cx, b, dtype)
    alpha = -alpha if cx.node.target.__name__.startswith("sub") else alpha
    scaled = _times(_promoted(cx, complex(alpha), dtype), b)
    return Complex(a.planes.add(scaled.planes))


@complex_op("mul.Tensor")
def mul(cx, a, b):
    """The complex product in the planes' dtype, a real operand promoted first (imaginary +0),
    as torch promotes it (so inf * (1 + 0i) has a NaN imaginary part)."""
    dtype = _planes_cx(cx).dtype
    return _times(_promoted(cx, a, dtype), _promoted(cx, b, dtype))


@complex_op("div.Tensor")
def div(cx, a, b):
    """a / b by c10::complex's division (numpy's): scaled by the larger part of b, so no
    overflow; 0 + 0i divides each part by zero. A real operand is promoted first, as torch does,
    so (inf + 0i) / 2 is inf + NaN i."""
    dtype = _planes_cx(cx).dtype
    a, b = _promoted(cx, a, dtype), _promoted(cx, b, dtype)
    ar, ai, c, d = a.re, a.im, b.re, b.im
    abs_c, abs_d = c.abs(), d.abs()
    rat1 = d.div(c)
    scl1 = c.add(d.mul(rat1)).reciprocal()
    re1, im1 = ar.add(ai.mul(rat1)).mul(scl1), ai.sub(ar.mul(rat1)).mul(scl1)
    rat2 = c.div(d)
    scl2 = d.add(c.mul(rat2)).reciprocal()
    re2, im2 = ar.mul(rat2).add(ai).mul(scl2), ai.mul(rat2).sub(ar).mul(scl2)
    zero = abs_c.eq(0.0).logical_and(abs_d.eq(0.0))
    first = abs_c.ge(abs_d)
    re = ar.div(abs_c).where_(zero, re1.where_(first, re2))
    im = ai.div(abs_d).where_(zero, im1.where_(first, im2))
    return Complex.of(re, im)


@complex_op("neg.default")
def neg(cx, x):
    return Complex(x.planes.neg())


@complex_op("_conj.default", only=True)
@complex_op("conj_physical.default", "conj.default")
def conj(cx, x):
    return Complex.of(x.re, x.im.neg())


@complex_op("abs.default")
def abs_(cx, x):
    """|z| as float64 hypot, rounded once (no overflow of re^2 + im^2 in the planes' dtype;
    an infinite part gives inf even beside a NaN, as C's hypot)."""
    re, im = x.re.cast(DType.F64), x.im.cast(DType.F64)
    inf = re.isinf().logical_or(im.isinf())  # hypot(inf, NaN) is inf
    total = re.mul(re).add(im.mul(im)).sqrt()
    return re.graph.scalar(float("inf"), DType.F64).expand(re.shape).where_(inf, total).cast(x.dtype)


@complex_op("angle.default", only=True)
def angle(cx, x):
    """arg z = atan2(im, re) (`Tensor.atan2`); of a real tensor pi where it is negative, 0
    elsewhere, NaN kept, as torch."""
    if isinstance(x, Complex):
        return x.im.atan2(x.re)
    x = x.cast(cx.dtype)
    zero = cx.full(x.shape, 0.0, cx.dtype)
    return cx.full(x.shape, math.pi, cx.dtype).where_(x.lt(0.0), zero).where_(x.notnan(), x)


@complex_op("exp.default")
def exp(cx, x):
    """exp(re) (cos im + i sin im)."""
    mag = x.re.exp()
    im = mag.mul(x.im.sin()).where_(x.im.ne(0.0), x.im)  # exp(x + 0i) = exp(x) + 0i, inf included (C's cexp)
    return Complex.of(mag.mul(x.im.cos()), im)


@complex_op("index_select.default")
def index_select(cx, x, dim, index):
    return Complex(aten_index.index_select(_planes_cx(cx), x.planes, _dim(dim, x.ndim), index))


@complex_op("roll.default")
def roll(cx, x, shifts, dims=()):
    if not dims:  # torch rolls the flattened tensor
        flat = Complex(x.planes.reshape((sym.product(x.shape), 2)))
        return Complex(roll(cx, flat, shifts, [0]).planes.reshape(x.planes.shape))
    return Complex(aten_movement.roll(_planes_cx(cx), x.planes, shifts, [_dim(d, x.ndim) for d in dims]))


@complex_op("real.default")
def real(cx, x):
    return x.re


@complex_op("imag.default")
def imag(cx, x):
    return x.im


@complex_op("complex.default", only=True)
def complex_(cx, re, im):
    dtype = _planes_cx(cx).dtype
    return Complex.of(re.cast(dtype).expand(cx.shape), im.cast(dtype).expand(cx.shape))


@complex_op("polar.default", only=True)
def polar(cx, magnitude, angle):
    return Complex.of(magnitude.mul(angle.cos()), magnitude.mul(angle.sin()))


@complex_op("sum.dim_IntList", "sum.default", "mean.dim", "mean.default")
def sum_mean(cx, x, dim=None, keepdim=False, *, dtype=None):
    """Each plane summed (or averaged) over the complex dims."""
    axes = aten_reduce._axes(x.re, dim) if x.ndim else ()
    if not axes:
        return x
    reduce = x.planes.mean if cx.node.target.__name__.startswith("mean") else x.planes.sum
    return Complex(reduce(tuple(axes), keepdim))


# --- Fourier transforms --------------------------------------------------------------------
_NORM = ("none", "by_root_n", "by_n")  # ATen's fft_norm_mode


def _scale(normalization: int, n: int) -> float:
    if normalization == 0:
        return 1.0
    return 1.0 / (n ** 0.5 if normalization == 1 else n)


def _lengths(x_shape, dims) -> list[int]:
    out = []
    for d in dims:
        n = x_shape[d]
        if not sym.is_static(n):
            raise UnsupportedError(f"an FFT along a symbolic dim ({n})")
        out.append(int(n))
    return out


def _c2c(re, im, dims, lengths, forward: bool, normalization: int):
    total = 1
    for n in lengths:
        total *= n
    for i, d in enumerate(dims):
        scale = _scale(normalization, total) if i == len(dims) - 1 else 1.0
        re, im = spectral.dft(re, im, d, inverse=not forward, scale=scale)
    return re, im


@complex_op("_fft_c2c.default", only=True)
def fft_c2c(cx, x, dim, normalization, forward):
    dims = [_dim(d, x.ndim) for d in dim]
    re, im = _c2c(x.re, x.im, dims, _lengths(x.shape, dims), forward, normalization)
    return Complex(F.stack([re, im], -1).cast(x.dtype))


@complex_op("_fft_r2c.default", only=True)
def fft_r2c(cx, x, dim, normalization, onesided):
    """The last dim of `dim` real-to-complex (one-sided: n // 2 + 1 bins), then the others."""
    dims = [_dim(d, x.ndim) for d in dim]
    lengths = _lengths(x.shape, dims)
    total = 1
    for n in lengths:
        total *= n
    only = len(dims) == 1
    re, im = spectral.dft(x, None, dims[-1], onesided=bool(onesided), scale=_scale(normalization, total) if only else 1.0)
    if not only:
        re, im = _c2c(re, im, dims[:-1], lengths[:-1], True, 0)
        scale = _scale(normalization, total)
        re, im = re.mul(scale), im.mul(scale)
    return Complex(F.stack([re, im], -1).cast(_planes_cx(cx).dtype))


@complex_op("_fft_c2r.default", only=True)
def fft_c2r(cx, x, dim, normalization, last_dim_size):
    """The inverse of a one-sided spectrum: the dims but the last complex-to-complex, then the
    last to `last_dim_size` real samples (imaginary parts of DC and Nyquist ignored)."""
    dims = [_dim(d, x.ndim) for d in dim]
    lengths = _lengths(x.shape, dims)[:-1] + [int(last_dim_size)]
    total = 1
    for n in lengths:
        total *= n
    re, im = x.re, x.im
    if len(dims) > 1:
        re, im = _c2c(re, im, dims[:-1], lengths[:-1], False, 0)
    out, _ = spectral.dft(re, im, dims[-1], length=int(last_dim_size), inverse=True, onesided=True,
                          scale=_scale(normalization, total))
    return out.cast(cx.dtype)
