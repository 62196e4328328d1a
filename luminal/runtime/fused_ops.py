"""NumPy implementations of the fused ops (group `FUSED` of `luminal.hlir.ops`).

Fused ops exist only after the egraph layer rewrote a graph. Each computes the same function
as its primitive decomposition (`luminal/egraph/reference.py`) in exact arithmetic, and is
allowed to round *less*: that is the point of the rewrites (DESIGN.md, soundness contract).

Precision choice (`luminal.precision`): at "float64", the reference's default, f32/f16/bf16
inputs are computed in float64 and rounded once at the end. For KahanSum this replaces the
compensated loop of the CUDA kernel: a float64 accumulator over f32 values is at least as
accurate as Kahan summation in f32 and is one vectorized NumPy call. "float32" trades that for
speed: fused ops on f32/f16/bf16 then compute in float32, each step rounding as PyTorch's eager
ops do (sums still accumulate in float64, which costs little): MatMul is an f32 BLAS GEMM, and
exponentials use NumPy's SIMD float32 exp. float64 graphs compute in float64 either way.
Measurements: `benchmarks/results/`. Serving the `cpu` device (its `Arithmetic`, `precision.C`)
a call computes like the C: f32 elementwise math, sums in double, f32 conv windows, GEMMs at the
call's precision.
"""

from __future__ import annotations

import numpy as np

from luminal.hlir.ops import Expr, Op, attention_arg
from luminal.runtime.numpy_runtime import (
    BINARY_FNS,
    TERNARY_FNS,
    UNARY_FNS,
    _shape,
    check_divisor,
    first_zero_sign,
    impl,
    working,
)

_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)


def _work() -> np.dtype:
    """The dtype f32/f16/bf16 values are computed in: the call's precision, but f32 in a call
    computing as the C (whose elementwise math is f32 at either precision). float64 values
    always stay float64."""
    arithmetic, precision = working()
    return _F64 if precision == "float64" and not arithmetic.elementwise_f32 else _F32


def _gemm_work() -> np.dtype:
    """The dtype f32/f16/bf16 GEMMs multiply and accumulate in: the call's precision."""
    return _F64 if working()[1] == "float64" else _F32


def _lift(x: np.ndarray, work: np.dtype) -> np.ndarray:
    """Float arrays narrower than `work` as `work` (no copy if already); others unchanged."""
    if (x.dtype.kind == "f" or x.dtype.name == "bfloat16") and x.dtype.itemsize < work.itemsize:
        return x.astype(work)
    return x


@impl(Op.EXP, Op.SIGMOID)
def _pointwise(node, b, x):
    return UNARY_FNS[node.op](_lift(x, _work())).astype(node.dtype.numpy, copy=False)


@impl(Op.SOFTMAX)
def _softmax(node, b, x):
    return _softmax_of(x, node.arg, node.dtype.numpy)


def _softmax_of(x: np.ndarray, axis: int, dt: np.dtype) -> np.ndarray:
    # the same formula as the decomposition (so -inf rows give NaN as torch does), in the
    # working precision with a float64 sum
    if x.size == 0:  # an empty axis (or batch): torch returns the empty tensor
        return np.empty(x.shape, dt)
    w = _lift(x, _work())
    e = np.exp(w - np.max(w, axis=axis, keepdims=True))
    return (e / np.sum(e, axis=axis, keepdims=True, dtype=_F64)).astype(dt)


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
    # (an empty batch dim, stride 0 too, has no matrix to take)
    if x.ndim > 2 and all(s == 0 and n > 0 or n == 1 for s, n in zip(x.strides[:-2], x.shape[:-2])):
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


@impl(Op.ATTENTION)
def _attention(node, b, q, kt, v, *mask):
    """The unfused steps, each rounded as its own op rounds (MatMul, the scalar Mul, the mask's
    Add or Select, in f16/bf16 the casts around an f32 Softmax, the Select of safe softmax,
    MatMul), one batch element at a time so that at most one scores matrix is alive."""
    scale, zero_empty_rows, expr, select, half, transform = attention_arg(node.arg)
    dt = node.dtype.numpy
    soft = np.dtype(np.float32) if half is not None else dt  # the softmax's dtype
    out = np.empty(_shape(node, b), dt)
    work = _gemm_work()
    for i in np.ndindex(out.shape[:-2]):
        s = np.matmul(_lift(q[i], work), _lift(kt[i], work)).astype(dt, copy=False)
        if scale is not None:  # (in f16/bf16 the product in f32, rounded: the scale may be an f32 constant)
            s = np.multiply(s, dt.type(scale)) if half is None else (s.astype(soft) * soft.type(scale)).astype(dt)
        if transform is not None:  # a pointwise function of the scores (a soft cap), as its region computes it
            s = np.asarray(_eval(transform, [s], {}, _work())).astype(dt, copy=False)
        m = None
        if expr is not None:  # the mask's expression over its inputs, as a FusedElementwise
            m = np.broadcast_to(_eval(expr, [x[i] for x in mask], {}, _work()), s.shape)
        elif mask:
            m = mask[0][i]
        if m is not None and select is None:
            s = np.add(s, m.astype(dt, copy=False))
        elif m is not None:
            fill, keep = select
            s = np.where(m.astype(bool) == keep, s, dt.type(fill))
        s = s.astype(soft, copy=False)
        p = _softmax_of(s, -1, soft)
        if zero_empty_rows:
            p = np.where(np.all(s == -np.inf, axis=-1, keepdims=True), soft.type(0), p)
        out[i] = np.matmul(_lift(p.astype(dt, copy=False), work), _lift(v[i], work)).astype(dt, copy=False)
    return out


@impl(Op.GROUPED_MAT_MUL)
def _grouped_matmul(node, b, x, weight, offs):
    """One matmul per group on its rows (g(s) is nondecreasing in s, so a group's rows are one
    range: from the e-th smallest offset to the next), each rounded as MatMul rounds; the rows
    past the last offset stay 0."""
    dt = node.dtype.numpy
    out = np.zeros(_shape(node, b), dt)
    rows = out.shape[0]
    ends = np.clip(np.sort(offs.astype(np.int64)), 0, rows)
    work = _gemm_work() if node.dtype.is_float else None
    start = 0
    for e, end in enumerate(ends.tolist()):
        if end > start:
            a, w = x[start:end], weight[e]
            if work is not None:
                a, w = _lift(a, work), _lift(w, work)
            out[start:end] = np.matmul(a, w).astype(dt, copy=False)
        start = end
    return out


# --- FusedElementwise: an expression over input slots ------------------------------------
# decisions (comparisons, fmod, casts) see values rounded to their declared dtype, so a wider
# intermediate never flips a comparison the unfused graph would make; and every other reader of
# such a value sees it rounded too: trunc is x - fmod(x, 1), exact only when both read one x
_DECIDING = {Op.LESS_THAN, Op.MOD}


def _decided(root: Expr) -> frozenset[Expr]:
    """The float values of `root` that a comparison, fmod or cast reads (by value: equal levels
    may be distinct objects)."""
    return frozenset(c for e in root.toposort() if e.op in _DECIDING or e.op is Op.CAST
                     for c in e.src if c.dtype.is_float)


def _eval(e: Expr, inputs: list[np.ndarray], values: dict, work: np.dtype, decided: frozenset = frozenset()) -> np.ndarray:
    """The value of `e` (each level object once, kept in `values` by id); floats are computed in
    `work` (float64 values stay float64), those in `decided` rounded to their dtype."""
    if id(e) in values:
        return values[id(e)]
    op, dtype = e.op, e.dtype
    if op is Op.INPUT:
        v = _lift(inputs[e.arg], work)
    elif op is Op.CONSTANT:
        v = _lift(np.asarray(e.arg).astype(dtype.numpy), work)  # the value its dtype holds (0.1 in f32), as the C's literal
    elif (quotient := _quotient(e)) is not None:  # as the renderers: `x * recip(y)` is x / y, rounded once
        v = np.divide(*(_eval(c, inputs, values, work, decided) for c in quotient))
    elif op is Op.CAST:
        # a cast reads a value of its source dtype: f32 then f16 rounds twice, as torch and the C
        # do (an f32 quotient on a tie of f16 goes to even; from float64 it would not)
        child = _eval(e.src[0], inputs, values, work, decided).astype(e.src[0].dtype.numpy, copy=False)
        v = _lift(child.astype(dtype.numpy), work)
    else:
        args = [_eval(c, inputs, values, work, decided) for c in e.src]
        if op in _DECIDING:
            args = [a.astype(c.dtype.numpy, copy=False) for a, c in zip(args, e.src)]
        if op in UNARY_FNS:
            v = UNARY_FNS[op](args[0])
        elif op in TERNARY_FNS:
            v = TERNARY_FNS[op](*args)
        else:
            check_divisor(op, dtype, np.broadcast(*args).size, args[1])
            v = _lift(np.asarray(BINARY_FNS[op](*args)), work)
    if v.dtype != dtype.numpy and e in decided:
        v = _lift(v.astype(dtype.numpy), work)
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
    out = _eval(node.arg, list(inputs), {}, _work(), _decided(node.arg))
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
        out = np.max(x, axis=axes, initial=lowest).astype(dt, copy=False)
        if not node.dtype.is_float:
            return out
        # a zero max pool's sign: the first zero's in window order, as MaxReduce's (torch's too)
        return first_zero_sign(x.reshape(*x.shape[:x.ndim - r], int(np.prod(x.shape[x.ndim - r:]))), -1, out)
    if node.dtype.is_float:
        work = _work()
        if work == _F64 and all(x.dtype in (_F32, _F64) for x in operands):
            # the same float64 products and sum (in einsum's order), without materializing the
            # window product or float64 copies of the operands: einsum casts as it goes
            return _window_sum(operands, r).astype(dt, copy=False)
        operands = [_lift(x, work) for x in operands]
    x = operands[0] if len(operands) == 1 else operands[0] * operands[1]
    acc = (_F32 if working()[0].sums_windows_in_f32 and dt.itemsize < 8 else _F64) if node.dtype.is_float else dt
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
