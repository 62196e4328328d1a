"""ONNX's random ops on luminal's Philox generator (`luminal/builder/random.py`): RandomUniform,
RandomNormal, their `Like` forms and Bernoulli (training-mode Dropout: `ops_tensor.dropout`).

Each node draws from a stream of its own. Without a `seed` attribute the numbers come from the
graph's seed input, drawn afresh at each call (`CompiledGraph`; NumPy's global generator, or
torch's when torch is loaded); with one, from that fixed seed (the float's 64 bits), so the node
gives the same numbers at every call. They are luminal's numbers, not onnxruntime's or the onnx
reference's (each implementation has its own generator): only their distribution is comparable.
"""

from __future__ import annotations

import numpy as np

from luminal.builder import random as R
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir.dtypes import DType

FLOAT = 1  # onnx.TensorProto.FLOAT: the default dtype of RandomUniform / RandomNormal


def seed_of(seed):
    """The builder's seed for an ONNX `seed` attribute: None (the graph's seed input) or the
    float's 64 bits as an int (0.0 and 1.0 differ; -0.0 and 0.0 too)."""
    return None if seed is None else int(np.array(float(seed), np.float64).view(np.int64))


def _float_dtype(c, dtype, default: DType) -> DType:
    dt = default if dtype is None else c.dtype(dtype)
    if not dt.is_float:
        c.fail(f"random values of dtype {dt}: ONNX allows float16, float and double")
    return dt


@onnx_op("RandomUniform")
def random_uniform(c, dtype=FLOAT, high=1.0, low=0.0, seed=None, shape=()):
    dt = _float_dtype(c, dtype, DType.F32)
    return _scaled(R.uniform(c.g, tuple(shape), None, dt, seed_of(seed)), float(high) - float(low), float(low))


@onnx_op("RandomUniformLike")
def random_uniform_like(c, x, dtype=None, high=1.0, low=0.0, seed=None):
    dt = _float_dtype(c, dtype, x.dtype)
    return _scaled(R.uniform(c.g, x.shape, None, dt, seed_of(seed)), float(high) - float(low), float(low))


@onnx_op("RandomNormal")
def random_normal(c, dtype=FLOAT, mean=0.0, scale=1.0, seed=None, shape=()):
    dt = _float_dtype(c, dtype, DType.F32)
    return _scaled(R.normal(c.g, tuple(shape), None, dt, seed_of(seed)), float(scale), float(mean))


@onnx_op("RandomNormalLike")
def random_normal_like(c, x, dtype=None, mean=0.0, scale=1.0, seed=None):
    dt = _float_dtype(c, dtype, x.dtype)
    return _scaled(R.normal(c.g, x.shape, None, dt, seed_of(seed)), float(scale), float(mean))


@onnx_op("Bernoulli", since=15)
def bernoulli(c, x, dtype=None, seed=None):
    """1 with probability x (a float tensor), as `dtype` (default: x's)."""
    out = x.dtype if dtype is None else c.dtype(dtype)
    return R.bernoulli(x, None, seed_of(seed)).cast(out)


def _scaled(t, scale: float, shift: float):
    if scale != 1.0:
        t = t.mul(scale)
    return t.add(shift) if shift != 0.0 else t
