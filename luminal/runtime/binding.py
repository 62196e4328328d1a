"""Checking run-time inputs against a graph's declared inputs and binding its symbolic dims.

Shared by every runtime: the dims of the arrays a user passes give values to the symbols of
the declared shapes ("seq" -> 17); every other dim expression is then evaluated from those.
"""

from __future__ import annotations

import numpy as np
import sympy

from luminal.errors import IndexOutOfRange, InputError
from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Node, Op, toposort
from luminal.runtime.torch_arrays import is_torch, torch_to_numpy


def as_array(value, name: str) -> np.ndarray:
    """A NumPy array from an array, a NumPy scalar, a Python scalar or a (CPU) torch tensor."""
    if is_torch(value):
        return torch_to_numpy(value)
    try:
        return np.asarray(value)
    except Exception as exc:
        raise InputError(f"input {name!r}: cannot convert {type(value).__name__} to an array: {exc}") from None


def bind_inputs(inputs: list[Node], feeds: dict, convert: bool = True) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Validate `feeds` (name -> array) against `inputs`; return the arrays and dim bindings.

    `convert=False`: the values are taken as they are (anything with `shape`, `ndim`, `dtype`,
    e.g. device arrays the GPU runtime must not copy to the host)."""
    specs = [_spec(n) for n in inputs]
    if len(feeds) != len(specs) or any(name not in feeds for name, *_ in specs):
        names = [n.arg for n in inputs]
        missing = [n for n in names if n not in feeds]
        if missing:
            raise InputError(f"missing input(s) {missing}; the graph's inputs are {names}")
        extra = [k for k in feeds if k not in names]
        if extra:
            raise InputError(f"unknown input(s) {extra}; the graph's inputs are {names}")
    arrays: dict[str, np.ndarray] = {}
    bindings: dict[str, int] = {}
    deferred = []
    for (name, dtype, ndim, symbols, static, others), node in zip(specs, inputs):
        arr = feeds[name]
        if convert and type(arr) is not np.ndarray:
            arr = as_array(arr, name)
        if arr.dtype != dtype:
            raise InputError(
                f"input {name!r} has dtype {arr.dtype}, expected {dtype} "
                f"({node.dtype}); cast it before calling"
            )
        shape = arr.shape
        if len(shape) != ndim:
            raise InputError(
                f"input {name!r} has shape {shape} ({len(shape)} dims), expected "
                f"{_fmt(node.shape)} ({ndim} dims)"
            )
        for axis, symbol in symbols:
            actual = shape[axis]
            bound = bindings.setdefault(symbol, actual)
            if bound != actual:
                raise InputError(
                    f"input {name!r} dim {axis} is {actual}, but symbol {symbol!r} "
                    f"is already bound to {bound} by another input"
                )
        for axis, dim in static:
            if dim != shape[axis]:
                raise InputError(
                    f"input {name!r} has shape {shape}, expected {_fmt(node.shape)} "
                    f"(dim {axis} must be {dim})"
                )
        for axis, dim in others:
            deferred.append((name, axis, dim, shape[axis], shape, node.shape))
        if dtype == np.bool_ and type(arr) is np.ndarray:
            arr = proper_bools(arr)
        if convert and not (arr.flags.c_contiguous and arr.ndim):
            arr = np.ascontiguousarray(arr).reshape(shape)  # ascontiguousarray makes 0-d 1-d
        arrays[name] = arr
    for name, axis, dim, actual, got, want in deferred:
        unbound = [s for s in sym.free_symbols(dim) if s.name not in bindings]
        if len(unbound) == 1:  # solve e.g. 2*n = 6 for n
            roots = [r for r in sympy.solve(sympy.Eq(dim, actual), unbound[0]) if r.is_integer and r >= 0]
            if len(roots) == 1:
                bindings[unbound[0].name] = int(roots[0])
        if any(s.name not in bindings for s in sym.free_symbols(dim)):
            raise InputError(f"input {name!r}: cannot bind the symbols of dim {axis} ({dim}) from size {actual}")
        if sym.evaluate(dim, bindings) != actual:
            raise InputError(
                f"input {name!r} has shape {got}, expected {_fmt(want)}: dim {axis} ({dim}) "
                f"is {sym.evaluate(dim, bindings)} under {bindings}"
            )
    return arrays, bindings


def proper_bools(arr: np.ndarray) -> np.ndarray:
    """`arr` (bool) with every byte 0 or 1. A 0/255 mask viewed as bool holds other bytes, which
    NumPy and torch read as True, but C reads a bool's byte as a number (cast to f32: 255; a sum:
    258; `!b`: true again): such an array is replaced by its copy `!= 0`. One pass over the bytes,
    only for bool inputs."""
    raw = arr.view(np.uint8)
    return raw != 0 if raw.size and raw.max() > 1 else arr


_SPECS: dict[int, tuple] = {}  # id(input node) -> (the node, its spec): nodes are immutable, the spec never changes


def _spec(node: Node) -> tuple:
    """What checking an array against the input `node` needs, worked out once per node (a call of a
    small model checks its inputs in a few microseconds): name, NumPy dtype, rank, the (axis,
    symbol name) dims that bind a symbol, the (axis, size) static dims, the (axis, expression) rest."""
    hit = _SPECS.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    symbols, static, others = [], [], []
    for axis, dim in enumerate(node.shape):
        if isinstance(dim, sympy.Symbol):
            symbols.append((axis, dim.name))
        elif sym.is_static(dim):
            static.append((axis, int(dim)))
        else:
            others.append((axis, dim))
    spec = (node.arg, np.dtype(node.dtype.numpy), len(node.shape), tuple(symbols), tuple(static), tuple(others))
    if len(_SPECS) > 4096:  # nodes of graphs long gone: start afresh
        _SPECS.clear()
    _SPECS[id(node)] = (node, spec)
    return spec


def _fmt(dims) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ")"


def empty_axis_error(node: Node, axis: int) -> IndexOutOfRange:
    """The error of a Gather/Scatter `node` whose indexed `axis` is empty at run time."""
    dim = node.src[0].shape[axis]
    size = "" if sym.is_static(dim) else f" ({dim})"
    return IndexOutOfRange(f"{node.op.title}: axis {axis}{size} is empty, so no index is in range "
                           "(argmax/argmin over an empty axis raises here, as in torch)")


def index_error(outputs: list[Node], bindings: dict, flagged_by: str) -> IndexOutOfRange:
    """The error for a Gather/Scatter index a compiled kernel flagged out of range: where one
    indexes an axis that `bindings` make empty (no index can be in it), it names that axis; else
    generic (the kernels flag a bad index, not which). Computed on the error path only."""
    for n in toposort(outputs):
        if n.op in (Op.GATHER, Op.SCATTER):
            axis = n.arg if n.op is Op.GATHER else n.arg[0]
            if (sym.evaluate(n.src[0].shape[axis], bindings) == 0
                    and sym.evaluate(sym.product(n.src[1].shape), bindings) > 0):
                return empty_axis_error(n, axis)
    return IndexOutOfRange(f"a Gather/Scatter index was out of range (flagged by {flagged_by})")
