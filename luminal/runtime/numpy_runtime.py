"""The NumPy reference runtime: one NumPy expression per op. This is the executable spec.

`NumpyRuntime(outputs)` plans once (topological order, the last use of every buffer) and can
then be called many times with different values of the symbolic dims. Buffers are dropped as
soon as their last consumer ran; views are NumPy views of their source buffer (no copy).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import sympy

from luminal.errors import DivisionByZero, IndexOutOfRange, LuminalError, UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.ops import UNARY, ConstantArray, Node, Op, toposort
from luminal.hlir.shape import ShapeTracker
from luminal.runtime.binding import bind_inputs

Impl = Callable[..., np.ndarray]
IMPLS: dict[Op, Impl] = {}


def impl(*ops: Op):
    def register(fn: Impl) -> Impl:
        for op in ops:
            IMPLS[op] = fn
        return fn

    return register


def _shape(node: Node, b) -> tuple[int, ...]:
    return tuple(sym.evaluate(d, b) for d in node.shape)


def sigmoid(v: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """1 / (1 + e**-v), in place on `out` when given; an array for 0-d values too."""
    t = np.negative(v, out=np.empty_like(v) if out is None else out)
    np.exp(t, out=t)
    t += 1.0
    return np.reciprocal(t, out=t)


# the pointwise ops (hlir.ops.POINTWISE but CAST) by Op: the primitives' impls below and the
# fused Exp, Sigmoid and FusedElementwise (runtime/fused_ops.py) all apply these.
# On bool, np.add and np.multiply are logical or / and, as the HLIR defines ADD and MUL.
UNARY_FNS = {Op.EXP2: np.exp2, Op.LOG2: np.log2, Op.SIN: np.sin, Op.SQRT: np.sqrt, Op.RECIP: np.reciprocal,
             Op.EXP: np.exp, Op.SIGMOID: sigmoid}
BINARY_FNS = {Op.ADD: np.add, Op.MUL: np.multiply, Op.MOD: np.fmod, Op.LESS_THAN: np.less}
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
    if op is Op.MOD and dtype.is_int and size and not compact(np.asarray(y)).all():
        raise DivisionByZero("integer division or remainder by zero (Mod)")


@impl(Op.CAST)
def _cast(node, b, x):
    return x.astype(node.dtype.numpy)


@impl(Op.SUM_REDUCE)
def _sum(node, b, x):
    return np.sum(x, axis=node.arg, dtype=node.dtype.numpy)


@impl(Op.MAX_REDUCE)
def _max(node, b, x):
    dt = node.dtype.numpy
    lowest = False if dt == np.bool_ else (-np.inf if node.dtype.is_float else np.iinfo(dt).min)
    return np.max(x, axis=node.arg, initial=lowest).astype(dt, copy=False)


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
    index = compact(index)  # a broadcast index holds few distinct values: check those once
    if index.size and (index.min() < 0 or index.max() >= n):
        bad = index[(index < 0) | (index >= n)].ravel()[0]
        raise IndexOutOfRange(f"{node.op.title}: index {bad} is out of range for axis {axis} of size {n}")


def compact(x: np.ndarray) -> np.ndarray:
    """`x` with each broadcast (stride-0) dim cut to length 1: the same values, which still
    broadcast to x's shape, without reading (or converting) the repeats."""
    if 0 not in x.strides or x.size == 0:
        return x
    return x[tuple(slice(0, 1) if s == 0 else slice(None) for s in x.strides)]


@impl(Op.GATHER)
def _gather(node, b, data, index):
    axis = node.arg
    _check_index(node, data, index, axis)
    if index.size == 0 or index.shape[:axis] + index.shape[axis + 1:] != data.shape[:axis] + data.shape[axis + 1:]:
        return np.take_along_axis(data, index.astype(np.intp, copy=False), axis=axis)
    if data.shape[axis] == 2 and index.shape[axis] == 1:  # `where`: a pick from a stacked pair
        at = (slice(None),) * axis
        return np.where(index != 0, data[at + (slice(1, 2),)], data[at + (slice(0, 1),)])
    # as one `take` of flat positions: several times faster than take_along_axis's fancy indexing
    outer, n, inner = math.prod(data.shape[:axis]), data.shape[axis], math.prod(data.shape[axis + 1:])
    flat = index.reshape(outer, index.shape[axis], inner).astype(np.intp)
    if inner != 1:
        flat *= inner
        flat += _positions(inner, 1)
    if outer != 1:
        flat += _positions(outer, n * inner)[:, None, None]
    return np.ascontiguousarray(data).reshape(-1).take(flat).reshape(index.shape)


@functools.lru_cache(maxsize=256)
def _positions(count: int, step: int) -> np.ndarray:
    """0, step, 2*step, ...: the flat offsets of a gather's rows (the same at every call)."""
    out = np.arange(count, dtype=np.intp) * step
    out.flags.writeable = False
    return out


@impl(Op.SCATTER)
def _scatter(node, b, data, index, updates):
    axis, reduce = node.arg
    _check_index(node, data, index, axis)
    span = _constant_span(index, axis) if reduce is None else None
    if span is not None:  # e.g. concat: a block of consecutive positions, as slice copies
        lo, hi = span
        out = np.empty(data.shape, data.dtype)
        at = (slice(None),) * axis
        out[at + (slice(lo, hi),)] = updates
        out[at + (slice(0, lo),)] = data[at + (slice(0, lo),)]
        out[at + (slice(hi, None),)] = data[at + (slice(hi, None),)]
        return out
    out = np.array(data, copy=True)
    index = index.astype(np.intp, copy=False)
    if reduce is None:
        np.put_along_axis(out, index, updates, axis=axis)
    else:
        grid = list(np.ix_(*[np.arange(n) for n in index.shape]))
        grid[axis] = index
        SCATTER_UFUNCS[reduce].at(out, tuple(grid), updates)
    return out


def _constant_span(index: np.ndarray, axis: int) -> tuple[int, int] | None:
    """(lo, hi) when `index` is lo, lo+1, ..., hi-1 along `axis` at every other position (a
    broadcast range, as concat and stack build): writing it is a slice copy. None otherwise."""
    if index.size == 0 or any(s != 0 and n != 1 for i, (s, n) in enumerate(zip(index.strides, index.shape)) if i != axis):
        return None
    line = index[tuple(slice(None) if i == axis else 0 for i in range(index.ndim))]
    lo = int(line[0])
    return (lo, lo + line.size) if np.array_equal(line, np.arange(lo, lo + line.size)) else None


@impl(Op.CONTIGUOUS)
def _contiguous(node, b, x):
    return np.ascontiguousarray(x).reshape(x.shape)  # ascontiguousarray makes 0-d 1-d


@impl(Op.VIEW)
def _view(node, b, x):
    return read_view(np.ascontiguousarray(x), node.arg, b)


def read_view(buf: np.ndarray, st: ShapeTracker, b) -> np.ndarray:
    """The elements `st` describes, read out of the contiguous buffer `buf` (no copy unless masked)."""
    shape, strides, offset, box = _view_plan(st) or _evaluate_view(st, b)
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


@functools.lru_cache(maxsize=8192)
def _view_plan(st: ShapeTracker) -> tuple | None:
    """`_evaluate_view` once per tracker without symbols (views are the most frequent op, and
    evaluating their dims was most of their cost); None for a symbolic tracker."""
    return _evaluate_view(st, {}) if all(sym.is_static(d) for d in st.dims) else None


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


class NumpyRuntime:
    """Executes the graph that computes `outputs` on NumPy arrays.

    Values that are the same at every call are computed once and kept: nodes that depend on no
    input, no weight and no symbolic dim (causal masks, position tables, concat index ranges),
    and views of weights (they alias the weight, so an in-place update of it is still seen).
    Only what a per-call node reads is kept (`cached_bytes` says how much memory that holds).
    Safe to call from several threads: each call has its own buffers, and a kept value is the
    same whichever call stores it (two racing first calls may both compute it; either is kept)."""

    def __init__(self, outputs: list[Node]):
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
        self._plan_cache()

    def _plan_cache(self):
        # pure: depends on no input, no weight and no symbolic dim, so its value never changes.
        # weight views: unmasked views of weights (chains of them): NumPy views, so a cached one
        # still shows an in-place update of the weight. Anything computed *from* a weight is
        # neither (it would go stale), so weight views do not make their consumers pure.
        pure: set[int] = set()
        weights: set[int] = set()  # the weights and their views
        for node in self.order:
            if not _binds_no_symbol(node) or node.op is Op.INPUT:
                continue
            if node.op is Op.CONSTANT:
                (weights if isinstance(node.arg, ConstantArray) else pure).add(id(node))
            elif node.op is Op.VIEW and node.arg.mask is None and id(node.src[0]) in weights:
                weights.add(id(node))
            elif all(id(s) in pure for s in node.src):
                pure.add(id(node))
        # a weight itself is only looked up; its views are worth keeping
        fixed = pure | {id(n) for n in self.order if id(n) in weights and n.op is Op.VIEW}
        read_per_call = {id(s) for n in self.order if id(n) not in fixed for s in n.src}
        read_per_call |= {id(n) for n in self.outputs}
        self._kept = fixed & read_per_call  # filled by the first call that gets there
        self._warm_steps = [i for i, n in enumerate(self.order) if id(n) not in fixed or id(n) in self._kept]
        self._cache: dict[int, np.ndarray] = {}

    @property
    def cached_bytes(self) -> int:
        """Memory held by the values computed once (views of weights count nothing)."""
        return sum(a.nbytes for a in list(self._cache.values()) if a.flags.owndata)  # a copy: calls may add

    def __call__(self, feeds: dict) -> list[np.ndarray]:
        arrays, bindings = bind_inputs(self.inputs, feeds)
        return self.run(arrays, bindings)

    def run(self, arrays: dict[str, np.ndarray], bindings: dict[str, int]) -> list[np.ndarray]:
        buffers: dict[int, np.ndarray] = {}
        cache = self._cache
        warm = len(cache) == len(self._kept)
        order = self.order
        with np.errstate(all="ignore"):
            for i in self._warm_steps if warm else range(len(order)):
                node = order[i]
                nid = id(node)
                if nid in cache:
                    out = cache[nid]
                elif node.op is Op.INPUT:
                    out = arrays[node.arg]
                else:
                    out = IMPLS[node.op](node, bindings, *(buffers[id(s)] for s in node.src))
                    if nid in self._kept:
                        cache[nid] = out
                buffers[nid] = out
                for dead in self.frees[i]:
                    buffers.pop(dead, None)  # a skipped (cached) producer may never have been put
        results, handed_out = [], set()
        for node in self.outputs:
            out = np.asarray(buffers[id(node)])
            # never hand out a view of a weight, an input, another output or a kept value
            if (node.op in (Op.INPUT, Op.CONSTANT) or not out.flags.owndata or id(node) in handed_out
                    or id(node) in cache):
                out = np.array(out)
            handed_out.add(id(node))
            results.append(out)
        return results


def _binds_no_symbol(node: Node) -> bool:
    """Whether the node's value cannot depend on the binding of symbolic dims."""
    arg = node.arg
    if isinstance(arg, ShapeTracker):
        dims = arg.dims
    else:
        dims = list(node.shape) + ([arg] if node.op in (Op.CONSTANT, Op.IOTA) and not isinstance(arg, ConstantArray) else [])
    return all(not isinstance(d, sympy.Basic) for d in dims)
