"""ATen's random ops on luminal's Philox generator (`luminal/builder/random.py`).

What the core-ATen decompositions and aot_autograd leave of torch's random ops: `rand`, `randn`
(and `_like`), `bernoulli` (default, `.p`, `.Tensor`), `uniform`, `normal_functional` and the
functional `normal` overloads, and dropout (`native_dropout` under aot_autograd; `dropout` and
`feature_dropout` where a graph keeps them: `aten_elementwise.dropout` calls `dropout_train`).
Each node draws from a stream of its own (`Graph.rng_stream()`, in import order); the seed is the
graph's seed input, drawn per call from torch's default generator, so `torch.manual_seed(s)`
makes a compiled model's random numbers repeat (they are luminal's Philox numbers, not the ones
eager torch would draw). An explicit `generator=` is refused: luminal cannot advance it.
"""

from __future__ import annotations

import numpy as np

from luminal.builder import random as R
from luminal.errors import UnsupportedError
from luminal.frontends.torch.aten_ops import aten
from luminal.hlir.dtypes import DType


def _no_generator(kwargs) -> None:
    if kwargs.get("generator") is not None:
        raise UnsupportedError("a random op with an explicit torch.Generator: luminal draws from its own "
                               "seed (torch's default generator), it cannot advance another one")


@aten("rand.default", "rand_like.default")
def rand(cx, *args, **kwargs):
    _no_generator(kwargs)
    return cx.g.rand(cx.shape, cx.dtype)


@aten("randn.default", "randn_like.default")
def randn(cx, *args, **kwargs):
    _no_generator(kwargs)
    return cx.g.randn(cx.shape, cx.dtype)


@aten("uniform.default")
def uniform(cx, x, low=0.0, high=1.0, **kwargs):
    _no_generator(kwargs)
    return cx.g.rand(cx.shape, cx.dtype).mul(float(high) - float(low)).add(float(low))


@aten("normal_functional.default")
def normal_functional(cx, x, mean=0.0, std=1.0, **kwargs):
    _no_generator(kwargs)
    return cx.g.randn(cx.shape, cx.dtype).mul(float(std)).add(float(mean))


@aten("normal.Tensor_float", "normal.float_Tensor", "normal.Tensor_Tensor", "normal.float_float")
def normal(cx, mean=0.0, std=1.0, *args, **kwargs):
    """mean + std * N(0, 1), each a tensor or a number, broadcast to the result."""
    _no_generator(kwargs)
    z = cx.g.randn(cx.shape, cx.dtype)
    std = std.cast(cx.dtype) if hasattr(std, "node") else float(std)
    mean = mean.cast(cx.dtype) if hasattr(mean, "node") else float(mean)
    return z.mul(std).add(mean)


@aten("bernoulli.default", "bernoulli.Tensor")
def bernoulli(cx, x, p=None, **kwargs):
    """0/1 in x's dtype, 1 with probability p (the tensor x itself, or a tensor `p`)."""
    _no_generator(kwargs)
    p = x if p is None else p.expand(cx.shape)
    return R.bernoulli(p.cast(x.dtype) if not p.dtype.is_float else p).cast(cx.dtype)


@aten("bernoulli.p")
def bernoulli_p(cx, x, p=0.5, **kwargs):
    _no_generator(kwargs)
    return R.bernoulli_scalar(cx.g, cx.shape, float(p)).cast(cx.dtype)


def dropout_train(cx, x, p: float, native: bool, feature: bool):
    """Dropout in training mode with 0 < p: torch's `native_dropout` (x * mask * scale, and the
    mask), or its CPU `dropout`/`feature_dropout` (x * (mask / (1 - p)); feature: one draw per
    (batch, channel), as `make_feature_noise`)."""
    p = float(p)
    if native:
        return R.dropout(x, p)
    if p == 1:
        return x.mul(0)
    shape = tuple(x.shape[:2]) + (1,) * (x.ndim - 2) if feature else tuple(x.shape)
    if feature and x.ndim < 2:
        raise UnsupportedError(f"feature dropout needs at least 2 dims, got {x.ndim}")
    mask = R.bernoulli_scalar(cx.g, shape, 1.0 - p)
    if x.dtype is DType.F64:
        noise = 1.0 / (1.0 - p)
    else:  # noise.div_(1 - p) in x's dtype, computed in f32 and rounded once
        noise = float(np.asarray(np.float32(1.0) / np.float32(1.0 - p)).astype(x.dtype.numpy))
    return x.mul(mask.cast(x.dtype).mul(noise).expand(x.shape))
