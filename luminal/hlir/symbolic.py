"""Symbolic dimensions: named integer symbols and expressions over them.

A dim is either a Python `int` or a `sympy` expression over integer symbols ("seq", "batch").
sympy (already a dependency of torch) gives canonical forms for free, so `seq*4 == 4*seq` holds
structurally and `(4*seq)/4` simplifies to `seq`. Expressions are evaluated at call time from
the bindings that the runtime reads off the input shapes; the evaluation of each expression is
compiled once (`lambdify`) and cached.
"""

from __future__ import annotations

import functools

import sympy

from luminal.errors import ShapeError

Dim = int | sympy.Expr


@functools.cache
def symbol(name: str) -> sympy.Symbol:
    """The dim symbol called `name` (a nonnegative integer)."""
    if not name.isidentifier():
        raise ShapeError(f"symbolic dim names must be identifiers, got {name!r}")
    return sympy.Symbol(name, integer=True, nonnegative=True)


def parse(spec) -> Dim:
    """A dim from an int, a sympy expression, or a string such as 'seq' or 'seq + past'."""
    if isinstance(spec, bool):
        raise ShapeError(f"a dim must be an int or a symbol name, got {spec!r}")
    if isinstance(spec, int):
        if spec < 0:
            raise ShapeError(f"dims must be nonnegative, got {spec}")
        return spec
    if isinstance(spec, sympy.Basic):
        return norm(spec)
    if isinstance(spec, str):
        if spec.isidentifier():
            return symbol(spec)
        funcs = {"min": sympy.Min, "max": sympy.Max}
        try:
            expr = sympy.parsing.sympy_parser.parse_expr(spec, local_dict=funcs)
        except Exception as exc:
            raise ShapeError(f"cannot parse dim expression {spec!r}: {exc}") from None
        return norm(expr.subs({s: symbol(s.name) for s in expr.free_symbols}))
    if hasattr(spec, "__index__"):
        return parse(int(spec))
    raise ShapeError(f"a dim must be an int, a symbol name or an expression, got {spec!r}")


def norm(d: Dim) -> Dim:
    """Integers as Python ints, everything else as a sympy expression."""
    if isinstance(d, sympy.Basic):
        if d.is_Integer:
            return int(d)
        return d
    return int(d)


def is_static(d: Dim) -> bool:
    return isinstance(d, int)


def equal(a: Dim, b: Dim) -> bool:
    """Whether two dims are equal for every binding of their symbols."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return a == b or sympy.expand(sympy.sympify(a) - b) == 0


def floordiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return norm(sympy.floor(sympy.sympify(a) / b))


def ceildiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return norm(sympy.ceiling(sympy.sympify(a) / b))


def mod(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    return norm(sympy.Mod(a, b))


def dmin(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return norm(sympy.Min(a, b))


def dmax(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return norm(sympy.Max(a, b))


def exact_div(a: Dim, b: Dim) -> Dim | None:
    """a / b when it is an integer for every binding, else None."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b and a % b == 0 else None
    q = sympy.simplify(sympy.sympify(a) / b)
    return norm(q) if q.is_integer else None


def product(dims) -> Dim:
    out: Dim = 1
    for d in dims:
        out = out * d
    return norm(out) if not isinstance(out, int) else out


def free_symbols(d: Dim) -> set[sympy.Symbol]:
    return set() if isinstance(d, int) else set(d.free_symbols)


@functools.lru_cache(maxsize=4096)
def _compiled(expr: sympy.Expr):
    syms = sorted(expr.free_symbols, key=lambda s: s.name)
    fn = sympy.lambdify(syms, expr, modules=[{"floor": _ifloor, "ceiling": _iceil}, "math"])
    return [s.name for s in syms], fn


def _ifloor(x):
    return int(x // 1)


def _iceil(x):
    return -int(-x // 1)


def evaluate(d: Dim, bindings: dict[str, int]) -> int:
    """The value of a dim under `bindings` (symbol name -> int)."""
    if isinstance(d, int):
        return d
    names, fn = _compiled(d)
    try:
        return int(fn(*(bindings[n] for n in names)))
    except KeyError as exc:
        raise ShapeError(f"symbolic dim {exc.args[0]!r} is not bound (needed by {d})") from None


def to_str(d: Dim) -> str:
    return str(d)
