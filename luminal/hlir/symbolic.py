"""Symbolic dimensions: named integer symbols and expressions over them.

A dim is either a Python `int` or a `sympy` expression over integer symbols ("seq", "batch").
sympy (already a dependency of torch) gives canonical forms for free, so `seq*4 == 4*seq` holds
structurally and `(4*seq)/4` simplifies to `seq`. Expressions are evaluated at call time from
the bindings that the runtime reads off the input shapes; the evaluation of each expression is
compiled once (`lambdify`) and cached.

Dims written as text (`"seq + past"`, a `.lum` file's graph.json, an ONNX dim) are read by
`parse`, a small grammar and never `eval`: integers, identifiers, `+ - * / // % **` (integer
exponents), unary minus, parentheses, and the calls `min max floor ceiling Mod Min Max` (so
that `str()` of every dim reads back as the same expression). Its input is bounded in length,
nesting, size and integer magnitude, so hostile text can neither run code nor hang it.
"""

from __future__ import annotations

import ast
import functools
import keyword

import numpy as np
import sympy

from luminal.errors import ShapeError

Dim = int | sympy.Expr


@functools.cache
def symbol(name: str) -> sympy.Symbol:
    """The dim symbol called `name` (a nonnegative integer)."""
    if not isinstance(name, str) or not (name.isascii() and name.isidentifier()) or keyword.iskeyword(name) or name in FUNCS:
        raise ShapeError(f"symbolic dim names must be ASCII identifiers other than keywords and {sorted(FUNCS)} "
                         f"(they become C and Python names), got {name!r}")
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
        return symbol(spec) if spec.isidentifier() else parse_expr(spec)
    if hasattr(spec, "__index__"):
        return parse(int(spec))
    raise ShapeError(f"a dim must be an int, a symbol name or an expression, got {spec!r}")


# --- the text grammar --------------------------------------------------------------------------
MAX_TEXT = 4096  # characters of one dim expression
MAX_NODES = 512  # syntax-tree nodes of one expression
MAX_DEPTH = 48  # nesting of one expression
MAX_INT = 2**63  # integer literals (and every number of the result) below this in magnitude
MAX_POW = 16  # |exponent| of `**`
MAX_TERMS = 4096  # terms of the expression multiplied out (what `expand` in `equal` would build)
FUNCS = {  # name -> (sympy function, least and most arguments)
    "min": (sympy.Min, 2, 64), "max": (sympy.Max, 2, 64), "Min": (sympy.Min, 2, 64), "Max": (sympy.Max, 2, 64),
    "floor": (sympy.floor, 1, 1), "ceiling": (sympy.ceiling, 1, 1), "Mod": (sympy.Mod, 2, 2),
}


def _call(fn, *args):
    """`fn(*args)`, simplified by sympy only when every argument is a number: simplifying
    symbolic Min/Max/Mod/floor costs up to seconds each (hostile text could make loading hang),
    and the text of a dim is already the simplified form `str()` printed."""
    if all(a.is_Number for a in args):
        return fn(*args)
    return fn(*args, evaluate=False)


_BINOPS = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: _call(sympy.floor, a / b),
    ast.Mod: lambda a, b: _call(sympy.Mod, a, b),
}


@functools.lru_cache(maxsize=8192)  # a graph repeats its dims many times
def parse_expr(text: str, integer: bool = True) -> Dim:
    """A dim expression from text, by the grammar above (ShapeError on anything else).
    `integer`: the expression must be integer-valued (every dim and stride is)."""
    if not isinstance(text, str):
        raise ShapeError(f"a dim expression must be text, got {type(text).__name__}")
    shown = repr(text) if len(text) <= 80 else repr(text[:80]) + f"... ({len(text)} characters)"
    if len(text) > MAX_TEXT:
        raise ShapeError(f"dim expression {shown} is too long (at most {MAX_TEXT} characters)")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise ShapeError(f"cannot parse dim expression {shown}: {exc}") from None
    count = [0]
    try:
        expr = _build(tree.body, 0, count)
    except ShapeError as exc:
        raise ShapeError(f"cannot parse dim expression {shown}: {exc}") from None
    except (ZeroDivisionError, TypeError, ValueError, RecursionError) as exc:  # e.g. Mod(n, 0)
        raise ShapeError(f"cannot evaluate dim expression {shown}: {type(exc).__name__}: {exc}") from None
    if expr.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo) or any(
            abs(a.p) >= MAX_INT or abs(a.q) >= MAX_INT for a in expr.atoms(sympy.Rational)):
        raise ShapeError(f"dim expression {shown} is not finite or has numbers beyond 2**63")
    work = [0]
    if _expanded_terms(expr, work) > MAX_TERMS or work[0] > MAX_TERMS:
        raise ShapeError(f"dim expression {shown} multiplies out to more than {MAX_TERMS} terms")
    if integer and expr.is_integer is not True:
        raise ShapeError(f"dim expression {shown} is not integer-valued")
    return norm(expr)


def _expanded_terms(e: sympy.Expr, work: list) -> int:
    """An upper bound on the number of terms of `e` multiplied out; function arguments (floor,
    Mod, Min, ...) are multiplied out on their own and their terms added to `work`."""
    if e.is_Atom:
        return 1
    if e.is_Add:
        return sum(_expanded_terms(a, work) for a in e.args)
    if e.is_Mul:
        n = 1
        for a in e.args:
            n *= _expanded_terms(a, work)
        return n
    if e.is_Pow:
        return _expanded_terms(e.base, work) ** abs(int(e.exp)) if e.exp.is_Integer else MAX_TERMS + 1
    work[0] += sum(_expanded_terms(a, work) for a in e.args)
    return 1


def _build(node: ast.AST, depth: int, count: list):
    count[0] += 1
    if count[0] > MAX_NODES or depth > MAX_DEPTH:
        raise ShapeError(f"too big (at most {MAX_NODES} terms nested {MAX_DEPTH} deep)")
    if isinstance(node, ast.Constant) and type(node.value) is int:
        if node.value >= MAX_INT:
            raise ShapeError(f"integer {node.value} is beyond 2**63")
        return sympy.Integer(node.value)
    if isinstance(node, ast.Name):
        return symbol(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _build(node.operand, depth + 1, count)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        exp = _build(node.right, depth + 1, count)
        if not exp.is_Integer or abs(int(exp)) > MAX_POW:
            raise ShapeError(f"exponents must be integers of at most {MAX_POW} in magnitude")
        base = _build(node.left, depth + 1, count)
        if base.is_Number and abs(base) > 1 and abs(int(exp)) * abs(base).p.bit_length() > 64:
            raise ShapeError("a power beyond 2**63")
        return base ** exp
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)) \
            and isinstance(node.left, ast.UnaryOp) and isinstance(node.left.op, ast.USub):
        # sympy prints Mul(-1, a, b) as "-a*b", which Python's precedence reads as (-a)*b, and
        # -(n + 1) alone distributes to -n - 1: read the sign as the whole product's, so the
        # text of a dim parses back to the same expression, not an equal one of another shape
        a, b = _build(node.left.operand, depth + 1, count), _build(node.right, depth + 1, count)
        return -_BINOPS[type(node.op)](a, b)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _build(node.left, depth + 1, count), _build(node.right, depth + 1, count)
        return _BINOPS[type(node.op)](a, b)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCS and not node.keywords:
        fn, least, most = FUNCS[node.func.id]
        if not least <= len(node.args) <= most:
            raise ShapeError(f"{node.func.id} takes {least}..{most} arguments, got {len(node.args)}")
        return _call(fn, *(_build(a, depth + 1, count) for a in node.args))
    raise ShapeError(f"{ast.dump(node)[:60]} is not part of the dim grammar")


def as_expr(d) -> sympy.Expr:
    """A dim (or a number next to one) as a sympy expression. Use it instead of `sympify`, which
    would `eval` a string."""
    if isinstance(d, sympy.Basic):
        return d
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool):
        return sympy.Integer(int(d))
    if isinstance(d, (float, np.floating)):
        return sympy.Float(float(d))
    raise ShapeError(f"a dim must be a number or a sympy expression here, got {type(d).__name__}")


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
    return a == b or sympy.expand(as_expr(a) - b) == 0


def floordiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return norm(sympy.floor(as_expr(a) / b))


def ceildiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return norm(sympy.ceiling(as_expr(a) / b))


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
    q = as_expr(a) / b
    if not q.is_integer:  # sympy cancels equal factors as it builds the quotient: simplify only if it did not
        if _fraction_somewhere(a, b):
            return None
        q = sympy.simplify(q)
    return norm(q) if q.is_integer else None


def _fraction_somewhere(a: Dim, b: Dim) -> bool:
    """Whether a / b is not an integer at some sample binding (so not for every binding): a cheap
    no before sympy.simplify, which takes seconds over nested floor() dims."""
    names = sorted(s.name for s in free_symbols(a) | free_symbols(b))
    for base in (97, 160):
        env = {n: base + 7 * i for i, n in enumerate(names)}
        try:
            x, y = evaluate(a, env), evaluate(b, env)
        except ShapeError:
            continue
        if y != 0 and x % y != 0:
            return True
    return False


def product(dims) -> Dim:
    out: Dim = 1
    for d in dims:
        out = out * d
    return norm(out) if not isinstance(out, int) else out


def free_symbols(d: Dim) -> set[sympy.Symbol]:
    return set() if isinstance(d, int) else set(d.free_symbols)


_FLOORDIV, _CEILDIV = sympy.Function("lum_floordiv"), sympy.Function("lum_ceildiv")


def _exact_divisions(expr: sympy.Expr) -> sympy.Expr:
    """floor(a) and ceiling(a) as integer divisions of a's numerator by its denominator: sympy
    writes floor((W - 1)/3) as floor(W/3 - 1/3), whose float sum is 1.9999999999999998 at W = 7."""
    def exact(fn):
        def rewrite(arg):
            num, den = sympy.fraction(sympy.together(arg))
            return fn(num, den)
        return rewrite

    return expr.replace(sympy.floor, exact(_FLOORDIV)).replace(sympy.ceiling, exact(_CEILDIV))


@functools.lru_cache(maxsize=4096)
def _compiled(expr: sympy.Expr):
    syms = sorted(expr.free_symbols, key=lambda s: s.name)
    fns = {"floor": _ifloor, "ceiling": _iceil, "lum_floordiv": _ifloordiv, "lum_ceildiv": _iceildiv}
    fn = sympy.lambdify(syms, _exact_divisions(expr), modules=[fns, "math"])
    return [s.name for s in syms], fn


def _ifloordiv(n, d):
    n, d = _iexact(n), _iexact(d)
    return n // d


def _iceildiv(n, d):
    n, d = _iexact(n), _iexact(d)
    return -(-n // d)


def _iexact(x):
    """An integer-valued operand (a numerator over integers) as an int."""
    return int(x) if isinstance(x, (int, np.integer)) or float(x).is_integer() else x


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
    except (ZeroDivisionError, ValueError, OverflowError) as exc:
        raise ShapeError(f"dim {d} cannot be evaluated at {bindings}: {type(exc).__name__}: {exc}") from None
