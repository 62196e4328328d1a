"""torch's symbolic sizes as luminal dims.

Dims are luminal symbols named after torch's (`s0`, `s77`); `translate` turns a torch shape-env
expression into luminal's, `conform` relabels a luminal shape with torch's spelling of the same
(checked) dims. Used by the importer (`fx_import`) and the op families (`aten_*`) alike.
"""

from __future__ import annotations

import functools
import operator

import sympy
import torch

from luminal.builder import Tensor
from luminal.errors import ShapeError, UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Node, Op
from luminal.hlir.shape import ShapeTracker

SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _nary(f):
    return lambda *a: functools.reduce(f, a)


_SYM_FUNCS = {
    "FloorDiv": sym.floordiv, "CeilDiv": sym.ceildiv, "CleanDiv": sym.floordiv, "IntTrueDiv": lambda a, b: sympy.sympify(a) / b,
    "Mod": sym.mod, "PythonMod": sym.mod, "Max": _nary(sym.dmax), "Min": _nary(sym.dmin),
    "ModularIndexing": lambda x, d, m: sym.mod(sym.floordiv(x, d), m), "Identity": lambda x: x,
    "TruncToInt": lambda x: sym.norm(sympy.floor(x)) if x >= 0 else sym.norm(sympy.ceiling(x)),
    "FloorToInt": lambda x: sym.norm(sympy.floor(x)), "CeilToInt": lambda x: sym.norm(sympy.ceiling(x)),
    "ToFloat": lambda x: x, "floor": lambda x: sym.norm(sympy.floor(x)), "ceiling": lambda x: sym.norm(sympy.ceiling(x)),
}


@functools.lru_cache(maxsize=4096)
def translate(expr):
    """A torch shape-env sympy expression as a luminal dim (int or sympy over luminal symbols)."""
    if isinstance(expr, (int, float)):
        return expr
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        if expr.name.startswith("u"):
            raise UnsupportedError(f"data-dependent size {expr.name} (from .item(), nonzero(), ...)")
        return sym.symbol(expr.name)
    if expr.is_Number:
        return float(expr)
    if expr in (sympy.true, sympy.false):
        return bool(expr)
    args = [translate(a) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return sym.norm(sum(args[1:], args[0]))
    if isinstance(expr, sympy.Mul):
        return sym.norm(functools.reduce(operator.mul, args))
    if isinstance(expr, sympy.Pow):
        return sym.norm(sympy.sympify(args[0]) ** args[1])
    fn = _SYM_FUNCS.get(type(expr).__name__)
    if fn is None:
        raise UnsupportedError(f"symbolic expression {expr} ({type(expr).__name__}) is not supported")
    out = fn(*args)
    return out if isinstance(out, float) else sym.norm(out)


def to_dim(v):
    """An int, SymInt (or SymFloat/SymBool) as a luminal dim / Python value."""
    if isinstance(v, SYM_TYPES):
        node = v.node
        if isinstance(v, torch.SymBool):
            const = node.maybe_as_bool() if hasattr(node, "maybe_as_bool") else None
            if const is not None:
                return bool(const)
        out = translate(node.expr)
        return float(out) if isinstance(v, torch.SymFloat) and isinstance(out, int) else out
    return v


def shape_of(t) -> tuple:
    return tuple(to_dim(d) for d in t.shape)


def hints_of(vals) -> dict[str, int]:
    """The traced value of every symbol, read off the shape env of any SymInt among `vals`."""
    for v in vals:
        for d in getattr(v, "shape", ()) if isinstance(v, torch.Tensor) else (v,):
            if isinstance(d, torch.SymInt):
                env = d.node.shape_env
                known = getattr(env, "backed_var_to_val", None) or env.var_to_val
                return {str(k): int(x) for k, x in known.items() if str(k).startswith("s")}
    return {}


def conform(t: Tensor, want: tuple, hints: dict) -> Tensor:
    """`t` with torch's spelling of its shape. luminal's own symbolic dims can be more general
    (`Max(0, s0 - 1)` where torch knows `s0 >= 1`): those are relabelled once both agree on
    the traced sizes; torch's range constraints (checked at call time) make that sound."""
    if len(t.shape) == len(want) and all(sym.equal(a, b) for a, b in zip(t.shape, want)):
        return t
    if len(t.shape) == len(want) and not all(sym.is_static(d) for d in t.shape) and all(
        sym.evaluate(a, hints) == sym.evaluate(b, hints) for a, b in zip(t.shape, want)
    ):
        return relabel(t, want)
    raise ShapeError(f"internal: luminal computed shape {t.shape}, torch reports {want}")


def relabel(t: Tensor, shape) -> Tensor:
    """The same elements under torch's spelling of the (equal) symbolic dims."""
    if t.node.op is Op.VIEW:
        st = t.node.arg
        st = ShapeTracker(tuple(shape), st.strides, st.offset, st.mask)
        return Tensor(t.graph, Node(Op.VIEW, t.dtype, tuple(shape), t.node.src, st))
    return Tensor(t.graph, Node(Op.VIEW, t.dtype, tuple(shape), (t.node,), ShapeTracker.contiguous(shape)))
