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
"""

from __future__ import annotations

import itertools

import numpy as np

from luminal.errors import LuminalError
from luminal.hlir.ops import Expr, Op
from luminal.runtime.numpy_runtime import BINARY_FNS, UNARY_FNS, _shape, check_divisor, compact, impl

_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)


def _size(dt) -> int:
    return np.dtype(dt).itemsize


def _work() -> np.dtype:
    """The dtype f32/f16/bf16 values are computed in: float64, or float32 under
    set_precision("float32"). float64 values always stay float64."""
    return _F64 if _precision[0] == "float64" else _F32


def _lift(x: np.ndarray, work: np.dtype) -> np.ndarray:
    """Float arrays narrower than `work` as `work` (no copy if already); others unchanged."""
    if (x.dtype.kind == "f" or x.dtype.name == "bfloat16") and x.dtype.itemsize < work.itemsize:
        return x.astype(work)
    return x


PRECISIONS = ("float64", "float32")
_precision = ["float64"]


def set_precision(precision: str) -> None:
    """The NumPy runtime's working precision for fused ops on f32/f16/bf16 (MatMul, Softmax,
    Exp, Sigmoid, FusedElementwise), process-wide (as `torch.set_float32_matmul_precision`),
    from the next call on: "float64" (default: computed in float64, rounded once; more precise
    than PyTorch's f32) or "float32" (f32 GEMMs and elementwise math: about PyTorch's
    precision, about twice as fast)."""
    if precision not in PRECISIONS:
        raise LuminalError(f"precision {precision!r}: expected one of {PRECISIONS}")
    _precision[0] = precision


def get_precision() -> str:
    return _precision[0]


@impl(Op.EXP, Op.SIGMOID)
def _pointwise(node, b, x):
    return UNARY_FNS[node.op](_lift(x, _work())).astype(node.dtype.numpy, copy=False)


@impl(Op.SOFTMAX)
def _softmax(node, b, x):
    out = np.empty(x.shape, node.dtype.numpy)
    if out.size == 0:  # an empty axis (or batch): torch returns the empty tensor
        return out
    for at in chunks(x.shape, keep=node.arg % max(x.ndim, 1)):
        out[at] = _softmax_rows(x[at] if at else x, node.arg)
    return out


def _softmax_rows(x: np.ndarray, axis: int) -> np.ndarray:
    # the same formula as the decomposition (so -inf rows give NaN as torch does), in the
    # working precision with a float64 sum; in place on the lifted copy, or on a fresh array
    w = _lift(x, _work())
    e = np.subtract(w, np.max(w, axis=axis, keepdims=True), out=w if w is not x else None)
    np.exp(e, out=e)
    e /= np.sum(e, axis=axis, keepdims=True, dtype=_F64)
    return e


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
        work = _work()
        x, y = _lift(x, work), _lift(y, work)
    out = np.matmul(x, y)
    shape = _shape(node, b)
    if out.shape != shape:  # both operands were broadcast over the batch
        return np.broadcast_to(out, shape).astype(node.dtype.numpy)
    return out.astype(node.dtype.numpy, copy=False)


# --- FusedElementwise: an expression over input slots, evaluated in one pass ---------------
# decisions (comparisons, fmod, casts to integers) see values rounded to their declared dtype,
# so a wider intermediate never flips a comparison the unfused graph would make
_DECIDING = {Op.LESS_THAN, Op.MOD}


def _eval(e: Expr, inputs: list[np.ndarray], wide: dict, work: np.dtype) -> tuple[np.ndarray, bool]:
    """(value, owned): owned values are temporaries nothing else refers to (ufuncs return
    NumPy scalars for 0-d operands: those are never written into). Floats are computed in
    `work` (float64 values stay float64)."""
    op, dtype = e.op, e.dtype
    if op is Op.INPUT:
        if e.arg not in wide:
            wide[e.arg] = _lift(compact(inputs[e.arg]), work)
        return wide[e.arg], False
    if op is Op.CONSTANT:
        return np.asarray(e.arg, dtype=max(work, dtype.numpy, key=_size) if dtype.is_float else dtype.numpy), False
    if op is Op.CAST:
        child = _eval(e.src[0], inputs, wide, work)[0]
        if not dtype.is_float:
            child = child.astype(e.src[0].dtype.numpy, copy=False)
        return _lift(child.astype(dtype.numpy), work), True
    args = [_eval(c, inputs, wide, work) for c in e.src]
    if op in _DECIDING:
        args = [(r, r is not v or own) for (v, own), c in zip(args, e.src) for r in [v.astype(c.dtype.numpy, copy=False)]]
    if op in UNARY_FNS:
        v, own = args[0]
        return UNARY_FNS[op](v, v if own and isinstance(v, np.ndarray) and v.dtype.kind == "f" else None), True
    (a, own_a), (c, own_c) = args
    fn = BINARY_FNS[op]
    if op is Op.LESS_THAN:
        return fn(a, c), True
    # the output dtype of the op: the operands' (floats are all lifted to at least `work`)
    want = np.result_type(a, c)
    out = None
    shape = np.broadcast_shapes(a.shape, c.shape)
    check_divisor(op, dtype, 0 not in shape, c)
    for v, own in ((a, own_a), (c, own_c)):
        if own and isinstance(v, np.ndarray) and v.shape == shape and v.dtype == want:
            out = v
            break
    return _lift(fn(a, c, out=out), work), True


@impl(Op.FUSED_ELEMENTWISE)
def _fused_elementwise(node, b, *inputs):
    """The expression over each chunk; floats kept in the working precision (`_work`: float64
    by default) between ops and rounded once. Broadcast inputs are read compacted (`compact`)
    and lifted once each; every op then writes into a temporary this evaluation made, when one
    of its operands is such a temporary of the result's shape and dtype: the same values as
    fresh arrays, with far fewer passes over memory and allocations."""
    shape = _shape(node, b)
    out = np.empty(shape, node.dtype.numpy)
    for at in chunks(shape):  # sequential: a thread pool over the pieces measured slower on 2 cores
        out[at] = _eval(node.arg, [x[at] for x in inputs] if at else list(inputs), {}, _work())[0]
    return out


# Elements per piece of a large elementwise op: its float64 temporaries then stay in the L2
# cache and are reused by the allocator, instead of fresh pages per temporary of the whole array.
CHUNK = 1 << 16


def chunks(shape: tuple[int, ...], keep: int | None = None):
    """Index tuples that split an array of `shape` into pieces of about CHUNK elements (the
    empty tuple, the whole array, when it is small), never splitting axis `keep` (a softmax's)."""
    inner, split = 1, None
    for axis in reversed(range(len(shape))):
        if axis != keep and inner * shape[axis] > CHUNK:
            split = axis
            break
        inner *= shape[axis]
    if split is None:
        yield ()
        return
    step = max(1, CHUNK // inner)
    outer = [[slice(None)] if a == keep else [slice(i, i + 1) for i in range(n)] for a, n in enumerate(shape[:split])]
    for at in itertools.product(*outer):
        for lo in range(0, shape[split], step):
            yield (*at, slice(lo, lo + step))
