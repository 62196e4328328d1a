"""Checking run-time inputs against a graph's declared inputs and binding its symbolic dims.

Shared by every runtime: the dims of the arrays a user passes give values to the symbols of
the declared shapes ("seq" -> 17); every other dim expression is then evaluated from those.
"""

from __future__ import annotations

import numpy as np
import sympy

from luminal.errors import InputError
from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Node
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
    for node in inputs:
        name = node.arg
        arr = as_array(feeds[name], name) if convert else feeds[name]
        if arr.dtype != node.dtype.numpy:
            raise InputError(
                f"input {name!r} has dtype {arr.dtype}, expected {node.dtype.numpy} "
                f"({node.dtype}); cast it before calling"
            )
        if arr.ndim != len(node.shape):
            raise InputError(
                f"input {name!r} has shape {arr.shape} ({arr.ndim} dims), expected "
                f"{_fmt(node.shape)} ({len(node.shape)} dims)"
            )
        for axis, (dim, actual) in enumerate(zip(node.shape, arr.shape)):
            if isinstance(dim, sympy.Symbol):
                bound = bindings.setdefault(dim.name, actual)
                if bound != actual:
                    raise InputError(
                        f"input {name!r} dim {axis} is {actual}, but symbol {dim.name!r} "
                        f"is already bound to {bound} by another input"
                    )
            elif sym.is_static(dim):
                if dim != actual:
                    raise InputError(
                        f"input {name!r} has shape {arr.shape}, expected {_fmt(node.shape)} "
                        f"(dim {axis} must be {dim})"
                    )
            else:
                deferred.append((name, axis, dim, actual, arr.shape, node.shape))
        arrays[name] = np.ascontiguousarray(arr).reshape(arr.shape) if convert else arr  # ascontiguousarray makes 0-d 1-d
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


def _fmt(dims) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ")"
