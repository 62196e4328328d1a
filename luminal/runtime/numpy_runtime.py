"""The NumPy reference runtime: one NumPy expression per op. This is the executable spec.

`NumpyRuntime(outputs)` plans once (topological order, the last use of every buffer) and can
then be called many times with different values of the symbolic dims. Buffers are dropped as
soon as their last consumer ran; views are NumPy views of their source buffer (no copy).
It stays plain (DESIGN.md): no run-time pattern detection, no values kept between calls, no
in-place or chunked evaluation. Speed belongs to the graph rewrites (`where` runs as Select,
`concat` as Concat, see `luminal/egraph/rules_fusion.py`) and to the compiled backends.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from luminal.errors import DivisionByZero, IndexOutOfRange, LuminalError, UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.ops import UNARY, ConstantArray, Node, Op, toposort
from luminal.hlir.shape import ShapeTracker
from luminal.precision import REFERENCE, Arithmetic
from luminal.runtime.binding import bind_inputs, empty_axis_error
from luminal.runtime.protocol import Runtime
from luminal.runtime.rng import philox_uniform
from luminal.threadflags import ThreadValue

Impl = Callable[..., np.ndarray]
IMPLS: dict[Op, Impl] = {}


def impl(*ops: Op):
    def register(fn: Impl) -> Impl:
        for op in ops:
            IMPLS[op] = fn
        return fn

    return register


# How this thread's current call computes (`NumpyRuntime(outputs, arithmetic=)`): (the arithmetic
# of the device it serves, its precision, resolved once at the call's start). The reference's own
# by default; the C's where it serves `cpu` (the tiered first call), so that call overflows,
# underflows and turns NaN where the later calls do.
_working = ThreadValue((REFERENCE, REFERENCE.default))


def working() -> tuple[Arithmetic, str]:
    """(arithmetic, precision) of this thread's current call."""
    return _working.get()


def _shape(node: Node, b) -> tuple[int, ...]:
    return tuple(sym.evaluate(d, b) for d in node.shape)


def sigmoid(v: np.ndarray) -> np.ndarray:
    """1 / (1 + e**-v)."""
    return np.reciprocal(np.exp(np.negative(v)) + v.dtype.type(1))


def maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The fused Maximum, as the C and CUDA kernels' `lum_max_nan(a, b)` and the MaxReduce over
    (a, b) it stands for: b where b > a or b is NaN, else a (NaN where either is; of two equal
    zeros a's sign, where np.maximum gives b's)."""
    return np.where((b > a) | np.isnan(b), b, a)


# the pointwise ops (hlir.ops.POINTWISE but CAST) by Op: the primitives' impls below and the
# fused Exp, Sigmoid and FusedElementwise (runtime/fused_ops.py) all apply these.
# On bool, np.add and np.multiply are logical or / and, as the HLIR defines ADD and MUL.
UNARY_FNS = {Op.EXP2: np.exp2, Op.LOG2: np.log2, Op.SIN: np.sin, Op.SQRT: np.sqrt, Op.RECIP: np.reciprocal,
             Op.EXP: np.exp, Op.SIGMOID: sigmoid}
BINARY_FNS = {Op.ADD: np.add, Op.MUL: np.multiply, Op.MOD: np.fmod, Op.LESS_THAN: np.less,
              Op.PHILOX: philox_uniform,  # (seed, counter) -> uniform f32 (`runtime/rng.py`)
              Op.MAXIMUM: maximum}  # the fused Maximum: NaN-propagating, as MaxReduce
TERNARY_FNS = {Op.SELECT: np.where}  # (cond, a, b): the chosen value moves, nothing is computed on it
SCATTER_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@impl(*(UNARY_FNS.keys() & UNARY))
def _unary(node, b, x):
    return UNARY_FNS[node.op](x).astype(node.dtype.numpy, copy=False)


@impl(*BINARY_FNS)
def _binary(node, b, x, y):
    check_divisor(node.op, node.dtype, x.size, y)
    return BINARY_FNS[node.op](x, y).astype(node.dtype.numpy, copy=False)


def check_divisor(op: Op, dtype, size: int, y) -> None:
    """An integer MOD by zero raises DivisionByZero, as torch does (NumPy would give 0)."""
    if op is Op.MOD and dtype.is_int and size and not np.all(y):
        raise DivisionByZero("integer division or remainder by zero (Mod)")


@impl(Op.CAST)
def _cast(node, b, x):
    return x.astype(node.dtype.numpy)


@impl(Op.SUM_REDUCE)
def _sum(node, b, x):
    if node.dtype.is_float and node.dtype.itemsize < 8 and working()[0].sums_rows_in_double:
        return np.sum(x, axis=node.arg, dtype=np.float64).astype(node.dtype.numpy)
    return np.sum(x, axis=node.arg, dtype=node.dtype.numpy)


@impl(Op.MAX_REDUCE)
def _max(node, b, x):
    dt = node.dtype.numpy
    lowest = False if dt == np.bool_ else (-np.inf if node.dtype.is_float else np.iinfo(dt).min)
    out = np.asarray(np.max(x, axis=node.arg, initial=lowest)).astype(dt, copy=False)
    return first_zero_sign(x, node.arg, out) if node.dtype.is_float else out


def first_zero_sign(x: np.ndarray, axis: int, out: np.ndarray) -> np.ndarray:
    """`out`, the float max of `x` along `axis`, with each zero maximum given the sign of the
    first zero along the axis, as the sequential chain (`acc = x > acc ? x : acc`) the torch and
    C kernels keep (NumPy's own max keeps whichever its vector lanes meet last)."""
    zero = out == 0
    if not x.shape[axis] or not zero.any():
        return out
    first = np.expand_dims(np.argmax(x == 0, axis=axis), axis)
    negative = np.signbit(np.take_along_axis(x, first, axis=axis).astype(np.float64)).squeeze(axis)
    return np.where(zero, np.where(negative, -0.0, 0.0).astype(out.dtype), out).astype(out.dtype, copy=False)


@impl(Op.IOTA)
def _iota(node, b):
    return np.arange(sym.evaluate(node.arg, b), dtype=node.dtype.numpy)


@impl(Op.CONSTANT)
def _constant(node, b):
    if isinstance(node.arg, ConstantArray):
        return node.arg.array
    value = node.arg if isinstance(node.arg, (bool, int, float)) else sym.evaluate(node.arg, b)
    return np.array(value).astype(node.dtype.numpy)


def _check_index(node, data, index, axis):
    n = data.shape[axis]
    if index.size and not n:
        raise empty_axis_error(node, axis)
    if index.size and (index.min() < 0 or index.max() >= n):
        bad = index[(index < 0) | (index >= n)].ravel()[0]
        raise IndexOutOfRange(f"{node.op.title}: index {bad} is out of range for axis {axis} of size {n}")


@impl(Op.GATHER)
def _gather(node, b, data, index):
    _check_index(node, data, index, node.arg)
    return np.take_along_axis(data, index.astype(np.intp, copy=False), axis=node.arg)


@impl(Op.SCATTER)
def _scatter(node, b, data, index, updates):
    axis, reduce = node.arg
    _check_index(node, data, index, axis)
    out = np.array(data, copy=True)
    index = index.astype(np.intp, copy=False)
    if reduce is None:
        np.put_along_axis(out, index, updates, axis=axis)
    else:
        grid = list(np.ix_(*[np.arange(n) for n in index.shape]))
        grid[axis] = index
        SCATTER_UFUNCS[reduce].at(out, tuple(grid), updates)
    return out


@impl(Op.CONTIGUOUS)
def _contiguous(node, b, x):
    return np.ascontiguousarray(x).reshape(x.shape)  # ascontiguousarray makes 0-d 1-d


@impl(Op.VIEW)
def _view(node, b, x):
    return read_view(np.ascontiguousarray(x), node.arg, b)


def read_view(buf: np.ndarray, st: ShapeTracker, b) -> np.ndarray:
    """The elements `st` describes, read out of the contiguous buffer `buf` (no copy unless masked)."""
    shape, strides, offset, box = _evaluate_view(st, b)
    if 0 in shape:
        return np.zeros(shape, buf.dtype)
    flat = buf.reshape(-1)
    if box is None:
        return _strided(flat, offset, shape, strides)
    out = np.zeros(shape, buf.dtype)
    box_shape = [max(hi - lo, 0) for lo, hi in box]
    if 0 not in box_shape:
        start = offset + sum(lo * s for (lo, _), s in zip(box, strides))
        out[tuple(slice(lo, hi) for lo, hi in box)] = _strided(flat, start, box_shape, strides)
    return out


def _evaluate_view(st: ShapeTracker, b) -> tuple:
    """(shape, strides, offset, box): the tracker's numbers under the bindings `b`; box is
    the valid region of a masked view, clipped to the shape."""
    shape = tuple(sym.evaluate(d, b) for d in st.shape)
    strides = tuple(sym.evaluate(s, b) for s in st.strides)
    offset = sym.evaluate(st.offset, b)
    box = None
    if st.mask is not None:
        box = tuple((min(max(sym.evaluate(lo, b), 0), n), min(max(sym.evaluate(hi, b), 0), n))
                    for (lo, hi), n in zip(st.mask, shape))
    return shape, strides, offset, box


def _strided(flat: np.ndarray, offset: int, shape, strides) -> np.ndarray:
    lo = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    if lo < 0 or hi >= flat.size:
        raise LuminalError(f"internal error: view reads [{lo}, {hi}] of a buffer of {flat.size} elements")
    item = flat.itemsize
    # np.ndarray over the buffer: what as_strided does, at a fraction of its call overhead
    out = np.ndarray(shape, flat.dtype, buffer=flat, offset=offset * item, strides=[s * item for s in strides])
    out.flags.writeable = False
    return out


class NumpyRuntime(Runtime):
    """Executes the graph that computes `outputs` on NumPy arrays, every op at every call.

    Safe to call from several threads: the plan is read-only and each call has its own buffers.
    `arithmetic`: how its calls compute (`luminal.precision`): the device's it serves, so that a
    `cpu` model's calls (the tiered first call, a graph the C cannot build) round as the C's, at
    that compile's precision."""

    def __init__(self, outputs: list[Node], arithmetic: Arithmetic = REFERENCE):
        if not isinstance(arithmetic, Arithmetic):
            raise LuminalError(f"NumpyRuntime: arithmetic={arithmetic!r} is no luminal.precision.Arithmetic")
        self.arithmetic = arithmetic
        self.outputs = list(outputs)
        self.order = toposort(self.outputs)
        missing = sorted({n.op.title for n in self.order if n.op not in IMPLS and n.op is not Op.INPUT})
        if missing:
            raise UnsupportedError(f"the NumPy runtime has no implementation of op(s) {missing}")
        self.inputs = [n for n in self.order if n.op is Op.INPUT]
        keep = {id(n) for n in self.outputs}
        # after step i ran, these buffers are dead
        self.frees: list[list[int]] = [[] for _ in self.order]
        last: dict[int, int] = {}
        for i, node in enumerate(self.order):
            for s in node.src:
                last[id(s)] = i
        for nid, i in last.items():
            if nid not in keep:
                self.frees[i].append(nid)

    def __call__(self, feeds: dict) -> list[np.ndarray]:
        arrays, bindings = bind_inputs(self.inputs, feeds)
        return self.run(arrays, bindings)

    def run(self, arrays: dict[str, np.ndarray], bindings: dict[str, int]) -> list[np.ndarray]:
        """The outputs, computed as `self.arithmetic` says, at its precision now."""
        arithmetic = self.arithmetic
        buffers: dict[int, np.ndarray] = {}
        with _working.set((arithmetic, arithmetic.precision)), np.errstate(all="ignore"):
            for node, dead in zip(self.order, self.frees):
                if node.op is Op.INPUT:
                    buffers[id(node)] = arrays[node.arg]
                else:
                    buffers[id(node)] = IMPLS[node.op](node, bindings, *(buffers[id(s)] for s in node.src))
                for nid in dead:
                    del buffers[nid]
        results, handed_out = [], set()
        for node in self.outputs:
            out = np.asarray(buffers[id(node)])
            # never hand out a view of a weight, an input or another output
            if node.op in (Op.INPUT, Op.CONSTANT) or not out.flags.owndata or id(node) in handed_out:
                out = np.array(out)
            handed_out.add(id(node))
            results.append(out)
        return results
