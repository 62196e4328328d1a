"""Random tensors from the one random primitive, `Op.PHILOX` (seed, counter) -> uniform f32.

A graph with random ops reads one more input: a 0-d int64 seed named `RNG_SEED_INPUT`
(`Graph.rng_seed()`), which `CompiledGraph` (and `Graph.run`) draws at each call unless the caller
gives it (`luminal/runtime/rng.py`: from torch's default generator when torch is loaded, so
`torch.manual_seed` makes runs repeat). Each random op has a *stream* number, distinct per op in a
graph (`Graph.rng_stream()` hands out the next one when none is given); element i (row-major
linear index) of draw d (0, or 1 for Box-Muller's second uniform) of stream s has the counter

    (s << RNG_STREAM_SHIFT) + (d << (RNG_STREAM_SHIFT - 1)) + i,

so no two ops share a counter, up to 2**39 elements per op. The linear index is built from one
small iota per axis times its (possibly symbolic) stride, so a fused elementwise region computes
the counters of a large tensor without materializing them. The same seed, stream and shape give
the same bits on every device: the generator is integer arithmetic, evaluated per element.

- `uniform`: [0, 1), 24 random bits (f32); other float dtypes are cast (f16/bf16 kept below 1).
- `normal`: Box-Muller from two uniform draws, sqrt(-2 ln(1 - u1)) cos(2 pi u2) (1 - u1 > 0).
- `bernoulli(p)`: u < p, bool. A Python float p is compared exactly as a float64 would be (u has
  24 bits, so u < p iff u < ceil(p 2**24) 2**-24, an f32).
- `dropout(x, p)`: torch's `native_dropout`: mask = bernoulli(1 - p), out = x * mask * (1 / (1 - p)),
  the scale rounded to f32 and f16/bf16 computed in f32, as torch computes it.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from luminal.errors import DTypeError, LuminalError
from luminal.hlir import symbolic as sym
from luminal.hlir.constants import RNG_SEED_INPUT, RNG_STREAM_SHIFT
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op

MAX_STREAM = (1 << (63 - RNG_STREAM_SHIFT)) - 1  # the counter stays a nonnegative int64
BELOW_ONE = {DType.F16: 1.0 - 2.0**-11, DType.BF16: 1.0 - 2.0**-8}  # the largest value below 1


def seed_node() -> Node:
    """The seed input every random op of a graph reads (interned: one node per graph)."""
    return Node(Op.INPUT, DType.I64, (), (), RNG_SEED_INPUT)


def _seed(g, seed):
    """The seed tensor: the graph's seed input (None), a 0-d int64 tensor, or a fixed int."""
    if seed is None:
        return g.rng_seed()
    if isinstance(getattr(seed, "node", None), Node):  # a Tensor (not imported: the mixin stays out of a cycle)
        if seed.dtype is not DType.I64 or seed.ndim != 0:
            raise DTypeError(f"a random op's seed must be a 0-d int64 tensor, got {seed.dtype}{list(seed.shape)}")
        return seed
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        return g.scalar(int(seed) - (1 << 64) if int(seed) >= 1 << 63 else int(seed), DType.I64)  # 64 bits as int64
    raise DTypeError(f"a random op's seed must be None, an int or a 0-d int64 tensor, got {type(seed).__name__}")


def _stream(g, stream) -> int:
    if stream is None:
        return g.rng_stream()
    if not isinstance(stream, numbers.Integral) or isinstance(stream, bool) or not 0 <= stream <= MAX_STREAM:
        raise LuminalError(f"a random op's stream must be an int in [0, {MAX_STREAM}], got {stream!r}")
    return int(stream)


def _linear_index(g, shape):
    """int64 row-major linear index of every element of `shape`: a sum of per-axis iotas times strides."""
    index, stride = None, 1
    for axis in reversed(range(len(shape))):
        d = shape[axis]
        if not sym.equal(d, 1):
            term = g.iota(d, DType.I64)
            if not sym.equal(stride, 1):
                term = term.mul(sym.norm(stride) if not isinstance(stride, int) else stride)
            term = term.reshape((d,) + (1,) * (len(shape) - 1 - axis)).expand(shape[axis:])
            index = term if index is None else term.add(index.expand(shape[axis:]))
        stride = stride * d
    base = g.scalar(0, DType.I64)
    return (index if index is not None else base).expand(tuple(shape))


def _uniform_f32(g, shape, stream: int, draw: int, seed):
    shape = tuple(sym.parse(d) for d in shape)
    offset = (stream << RNG_STREAM_SHIFT) + (draw << (RNG_STREAM_SHIFT - 1))
    counter = _linear_index(g, shape)
    if offset:
        counter = counter.add(offset)
    seed = _seed(g, seed).expand(shape)
    return seed._new(Op.PHILOX, DType.F32, shape, (seed, counter))


def uniform(g, shape, stream=None, dtype=DType.F32, seed=None):
    """Uniform in [0, 1) of `shape` and float `dtype` (see the module docstring)."""
    dtype = DType.of(dtype)
    if not dtype.is_float:
        raise DTypeError(f"uniform random numbers need a float dtype, got {dtype}")
    u = _uniform_f32(g, shape, _stream(g, stream), 0, seed)
    if dtype is DType.F32:
        return u
    v = u.cast(dtype)
    if dtype in BELOW_ONE:  # rounding may reach 1.0: the interval stays half-open
        v = v.where_(v.lt(1.0), BELOW_ONE[dtype])
    return v


def normal(g, shape, stream=None, dtype=DType.F32, seed=None):
    """Standard normal of `shape` and float `dtype`: Box-Muller, in f64 for f64, else in f32."""
    dtype = DType.of(dtype)
    if not dtype.is_float:
        raise DTypeError(f"normal random numbers need a float dtype, got {dtype}")
    stream = _stream(g, stream)
    work = DType.F64 if dtype is DType.F64 else DType.F32
    u1 = _uniform_f32(g, shape, stream, 0, seed).cast(work)
    u2 = _uniform_f32(g, shape, stream, 1, seed).cast(work)
    radius = u1.neg().add(1.0).log().mul(-2.0).sqrt()  # sqrt(-2 ln(1 - u1)); 1 - u1 is in (0, 1]
    return radius.mul(u2.mul(2.0 * math.pi).cos()).cast(dtype)


def bernoulli(p, stream=None, seed=None):
    """Bool: true with probability `p` (a float tensor, one draw per element)."""
    if not p.dtype.is_float:
        raise DTypeError(f"bernoulli needs float probabilities, got {p.dtype}")
    u = _uniform_f32(p.graph, p.shape, _stream(p.graph, stream), 0, seed)
    if p.dtype is DType.F64:
        return u.cast(DType.F64).lt(p)
    return u.lt(p.cast(DType.F32))  # f16/bf16 widen exactly


def threshold(p: float) -> float:
    """The f32 t with u < t iff u < p for every 24-bit uniform u (p a Python float in [0, 1])."""
    return math.ceil(min(max(p, 0.0), 1.0) * 2**24) * 2.0**-24


def bernoulli_scalar(g, shape, p: float, stream=None, seed=None):
    """Bool of `shape`: true with probability `p` (a Python float), compared exactly."""
    if not 0.0 <= float(p) <= 1.0:
        raise LuminalError(f"a Bernoulli probability must be in [0, 1], got {p}")
    u = _uniform_f32(g, shape, _stream(g, stream), 0, seed)
    return u.lt(threshold(float(p)))


def dropout(x, p: float, stream=None, seed=None):
    """(out, mask): torch's `native_dropout` in training mode (see the module docstring)."""
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise LuminalError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not x.dtype.is_float:
        raise DTypeError(f"dropout needs a float tensor, got {x.dtype}")
    keep = 1.0 - p
    mask = bernoulli_scalar(x.graph, x.shape, keep, stream, seed)
    scale = 0.0 if keep == 0.0 else 1.0 / keep
    work = DType.F64 if x.dtype is DType.F64 else DType.F32
    if work is DType.F32:
        scale = float(np.float32(scale))
    out = x.cast(work).mul(mask.cast(work)).mul(scale).cast(x.dtype)
    return out, mask


class RandomMixin:
    """The random methods of `Tensor` (`stream=None`: the graph's next stream)."""

    def rand_like(self, dtype=None, stream=None, seed=None):
        """Uniform [0, 1) of this tensor's shape (and float dtype, unless `dtype`)."""
        return uniform(self.graph, self.shape, stream, dtype or self.dtype, seed)

    def randn_like(self, dtype=None, stream=None, seed=None):
        """Standard normal of this tensor's shape (and float dtype, unless `dtype`)."""
        return normal(self.graph, self.shape, stream, dtype or self.dtype, seed)

    def bernoulli(self, stream=None, seed=None):
        """Bool, true with this tensor's probabilities (torch.bernoulli gives them as 0/1 floats)."""
        return bernoulli(self, stream, seed)

    def dropout(self, p: float = 0.5, train: bool = True, stream=None, seed=None):
        """torch's dropout: in training, zero each element with probability p and scale the
        rest by 1 / (1 - p); else the identity."""
        if not train or p == 0:
            return self
        return dropout(self, p, stream, seed)[0]
