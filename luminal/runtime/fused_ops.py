"""NumPy implementations of the fused ops (group `FUSED` of `luminal.hlir.ops`).

Fused ops exist only after the egraph layer rewrote a graph. Each computes the same function
as its primitive decomposition (`luminal/egraph/reference.py`) in exact arithmetic, and is
allowed to round *less*: that is the point of the rewrites (DESIGN.md, soundness contract).

Precision choice: f32/f16/bf16 inputs are computed in float64 and rounded once at the end.
For KahanSum this replaces the compensated loop of the CUDA kernel: a float64 accumulator over
f32 values is at least as accurate as Kahan summation in f32 and is one vectorized NumPy call.
`set_precision("float32")` trades that for speed: fused ops on f32/f16/bf16 then compute in
float32, each step rounding as PyTorch's eager ops do (sums still accumulate in float64, which
costs little): MatMul is an f32 BLAS GEMM, and exponentials use NumPy's SIMD float32 exp.
float64 graphs compute in float64 either way. Measurements: `benchmarks/results/`.

Each device has its own default (`DEFAULT_PRECISION`): the NumPy runtime, the specification,
computes in float64; the compiled backends (`cpu`, `cuda`) run f32 GEMMs as PyTorch does (with
sums accumulated in double or Kahan-compensated), because a double GEMM costs them about 2x on
GEMM-bound models. `set_precision` overrides the default for every device until reset.
A call may instead compute like the C (`NumpyRuntime.run(..., like="cpu")`, the tiered first
call): f32 elementwise math, sums in double, f32 conv windows, GEMMs as `get_precision("cpu")`.
"""

from __future__ import annotations

import numpy as np

from luminal.errors import DeviceError, OptionError
from luminal.hlir.ops import Expr, Op
from luminal.runtime.numpy_runtime import (
    BINARY_FNS,
    TERNARY_FNS,
    UNARY_FNS,
    _shape,
    check_divisor,
    computing_like,
    impl,
)

_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)


def _work() -> np.dtype:
    """The dtype f32/f16/bf16 values are computed in: float64, or float32 under
    set_precision("float32") or in a call computing like the C (`computing_like`), whose
    elementwise math is f32 under either precision. float64 values always stay float64."""
    if computing_like() == "cpu":
        return _F32
    return _F64 if get_precision("numpy") == "float64" else _F32


def _gemm_work() -> np.dtype:
    """The dtype f32/f16/bf16 GEMMs multiply and accumulate in: the elementwise one, but the C's
    GEMMs follow `get_precision("cpu")`."""
    if computing_like() == "cpu":
        return _F64 if get_precision("cpu") == "float64" else _F32
    return _work()


def _lift(x: np.ndarray, work: np.dtype) -> np.ndarray:
    """Float arrays narrower than `work` as `work` (no copy if already); others unchanged."""
    if (x.dtype.kind == "f" or x.dtype.name == "bfloat16") and x.dtype.itemsize < work.itemsize:
        return x.astype(work)
    return x


PRECISIONS = ("float64", "float32")
# every device (`luminal.devices.DEVICES`, which sits above this layer: a test keeps them equal);
# the compiled ones run f32 GEMMs as PyTorch does
DEFAULT_PRECISION = {"numpy": "float64", "cpu": "float32", "cuda": "float32", "cuda-emulator": "float32"}
_precision: list[str | None] = [None]  # None: each device's default


def set_precision(precision: str | None) -> str | None:
    """The working precision of f32/f16/bf16 math, process-wide (as
    `torch.set_float32_matmul_precision`), from the next call on, for every device:
    "float64" (computed in float64, rounded once: more precise than PyTorch's f32; on `cpu` the
    GEMMs accumulate in double, about 2x slower on GEMM-bound models) or "float32" (f32 GEMMs
    and, on the NumPy runtime, f32 elementwise math: about PyTorch's precision); None goes back
    to each device's default (`DEFAULT_PRECISION`: float64 on "numpy", float32 elsewhere).
    Returns the previous setting, so `set_precision(previous)` restores it."""
    if precision is not None and precision not in PRECISIONS:
        raise OptionError(f"precision {precision!r}: expected one of {PRECISIONS} or None (each device's default)")
    previous, _precision[0] = _precision[0], precision
    return previous


def get_precision(device: str = "numpy") -> str:
    """The precision `device` computes in now: the `set_precision` setting, else its default."""
    default = DEFAULT_PRECISION.get(device)
    if default is None:
        raise DeviceError(f"get_precision: unknown device {device!r}; luminal knows "
                          f"{', '.join(map(repr, DEFAULT_PRECISION))} (set_precision takes the precision)")
    return _precision[0] or default


@impl(Op.EXP, Op.SIGMOID)
def _pointwise(node, b, x):
    return UNARY_FNS[node.op](_lift(x, _work())).astype(node.dtype.numpy, copy=False)


@impl(Op.SOFTMAX)
def _softmax(node, b, x):
    # the same formula as the decomposition (so -inf rows give NaN as torch does), in the
    # working precision with a float64 sum
    if x.size == 0:  # an empty axis (or batch): torch returns the empty tensor
        return np.empty(x.shape, node.dtype.numpy)
    w = _lift(x, _work())
    e = np.exp(w - np.max(w, axis=node.arg, keepdims=True))
    return (e / np.sum(e, axis=node.arg, keepdims=True, dtype=_F64)).astype(node.dtype.numpy)


@impl(Op.SELECT)
def _select(node, b, cond, x, y):
    return np.where(cond, x, y)


@impl(Op.CONCAT)
def _concat(node, b, x, y):
    return np.concatenate((x, y), axis=node.arg)


@impl(Op.KAHAN_SUM)
def _kahan_sum(node, b, x):
    acc = _F64 if node.dtype.is_float else node.dtype.numpy
    return np.sum(x, axis=node.arg, dtype=acc).astype(node.dtype.numpy, copy=False)


def _drop_broadcast_batch(x: np.ndarray) -> np.ndarray:
    """A matmul operand whose batch dims are all broadcast (stride 0, e.g. a weight expanded
    over the batch) as the plain matrix: np.matmul then broadcasts it itself and calls BLAS,
    instead of its slow strided loop over a stride-0 batch."""
    if x.ndim > 2 and all(s == 0 or n == 1 for s, n in zip(x.strides[:-2], x.shape[:-2])):
        return x[(0,) * (x.ndim - 2)]
    return x


@impl(Op.MAT_MUL)
def _matmul(node, b, x, y):
    x, y = _drop_broadcast_batch(x), _drop_broadcast_batch(y)
    if node.dtype.is_float:
        work = _gemm_work()
        x, y = _lift(x, work), _lift(y, work)
    out = np.matmul(x, y)
    shape = _shape(node, b)
    if out.shape != shape:  # both operands were broadcast over the batch
        return np.broadcast_to(out, shape).astype(node.dtype.numpy)
    return out.astype(node.dtype.numpy, copy=False)


# --- FusedElementwise: an expression over input slots ------------------------------------
# decisions (comparisons, fmod, casts to integers) see values rounded to their declared dtype,
# so a wider intermediate never flips a comparison the unfused graph would make
_DECIDING = {Op.LESS_THAN, Op.MOD}


def _eval(e: Expr, inputs: list[np.ndarray], values: dict, work: np.dtype) -> np.ndarray:
    """The value of `e` (each level object once, kept in `values` by id); floats are computed in
    `work` (float64 values stay float64)."""
    if id(e) in values:
        return values[id(e)]
    op, dtype = e.op, e.dtype
    if op is Op.INPUT:
        v = _lift(inputs[e.arg], work)
    elif op is Op.CONSTANT:
        v = _lift(np.asarray(e.arg).astype(dtype.numpy), work)  # the value its dtype holds (0.1 in f32), as the C's literal
    elif (quotient := _quotient(e)) is not None:  # as the renderers: `x * recip(y)` is x / y, rounded once
        v = np.divide(*(_eval(c, inputs, values, work) for c in quotient))
    elif op is Op.CAST:
        # a cast reads a value of its source dtype: f32 then f16 rounds twice, as torch and the C
        # do (an f32 quotient on a tie of f16 goes to even; from float64 it would not)
        child = _eval(e.src[0], inputs, values, work).astype(e.src[0].dtype.numpy, copy=False)
        v = _lift(child.astype(dtype.numpy), work)
    else:
        args = [_eval(c, inputs, values, work) for c in e.src]
        if op in _DECIDING:
            args = [a.astype(c.dtype.numpy, copy=False) for a, c in zip(args, e.src)]
        if op in UNARY_FNS:
            v = UNARY_FNS[op](args[0])
        elif op in TERNARY_FNS:
            v = TERNARY_FNS[op](*args)
        else:
            check_divisor(op, dtype, np.broadcast(*args).size, args[1])
            v = _lift(np.asarray(BINARY_FNS[op](*args)), work)
    values[id(e)] = v
    return v


def _quotient(e: Expr) -> tuple[Expr, Expr] | None:
    """(x, y) for a float `x * recip(y)` (either order), else None."""
    if e.op is Op.MUL and e.dtype.is_float:
        for num, den in (e.src, e.src[::-1]):
            if den.op is Op.RECIP:
                return num, den.src[0]
    return None


@impl(Op.FUSED_ELEMENTWISE)
def _fused_elementwise(node, b, *inputs):
    """The expression over whole arrays; floats kept in the working precision (`_work`:
    float64 by default) between ops and rounded once, at the end."""
    out = _eval(node.arg, list(inputs), {}, _work())
    return np.broadcast_to(out, _shape(node, b)).astype(node.dtype.numpy)


@impl(Op.WINDOW_REDUCE)
def _window_reduce(node, b, *operands):
    """The product of the operands (window views) reduced over the last r axes: floats in the
    working precision (sums accumulate in float64), as the decomposition computes it."""
    kind, r = node.arg
    axes = tuple(range(operands[0].ndim - r, operands[0].ndim))
    dt = node.dtype.numpy
    if kind == "max":
        lowest = -np.inf if node.dtype.is_float else np.iinfo(dt).min
        x = operands[0] if len(operands) == 1 else operands[0] * operands[1]
        return np.max(x, axis=axes, initial=lowest).astype(dt, copy=False)
    if node.dtype.is_float:
        work = _work()
        if work == _F64 and all(x.dtype in (_F32, _F64) for x in operands):
            # the same float64 products and a float64 sum, without materializing the window
            # product (and the operands' float64 copies) first: einsum casts as it goes. A
            # depthwise 3x3 conv on 16x32x128x128 took 6.3 s on its first call (2.4 GB of fresh
            # float64 pages) and 0.87 s after; this way 0.36 and 0.26 s, the same f32 bits (the
            # float64 sum is in einsum's order: its last bit differs in ~1% of sums)
            return _window_sum(operands, r).astype(dt, copy=False)
        operands = [_lift(x, work) for x in operands]
    x = operands[0] if len(operands) == 1 else operands[0] * operands[1]
    acc = (_F32 if computing_like() == "cpu" and dt.itemsize < 8 else _F64) if node.dtype.is_float else dt  # the C's windows sum in f32
    return np.sum(x, axis=axes, dtype=acc).astype(dt, copy=False)


_LABELS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _window_sum(operands: list[np.ndarray], r: int) -> np.ndarray:
    """The float64 sum over the last `r` axes of the operands' (broadcast) product."""
    operands = np.broadcast_arrays(*operands)
    if len(operands) == 1:
        return np.sum(operands[0], axis=tuple(range(operands[0].ndim - r, operands[0].ndim)), dtype=_F64)
    labels = _LABELS[:operands[0].ndim]
    spec = f"{labels},{labels}->{labels[:len(labels) - r]}"
    return np.einsum(spec, *operands, dtype=_F64, casting="safe")
