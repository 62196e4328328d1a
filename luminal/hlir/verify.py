"""The shape and dtype rules of each op, checked on a node built from untrusted data.

The builder and the rewrites only make nodes that follow the rules of `ops.py`; a graph read
from a file (`luminal.load`) may be anything, so `check_node` holds each node to those rules
before any runtime sees it: source count, dtypes, the output shape the op implies, a reduce
axis in range, a weight of exactly the node's shape and dtype, and views that read inside
their buffer (exactly for static views; for symbolic ones at a few small bindings of the
symbols, where the view and its buffer have sizes >= 0). Each broken rule is a `ShapeError`
or `DTypeError` naming what is wrong; the caller adds which node.
"""

from __future__ import annotations

import itertools

from luminal.errors import DTypeError, ShapeError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import BINARY, FUSED, LEAF, REDUCE, UNARY, ConstantArray, Expr, Node, Op, attention_arg
from luminal.hlir.shape import ShapeTracker

N_SRC = {**dict.fromkeys(LEAF, 0), **dict.fromkeys(UNARY | REDUCE, 1), **dict.fromkeys(BINARY, 2),
         Op.CAST: 1, Op.VIEW: 1, Op.CONTIGUOUS: 1, Op.GATHER: 2, Op.SCATTER: 3, Op.EXP: 1, Op.SIGMOID: 1,
         Op.SOFTMAX: 1, Op.KAHAN_SUM: 1, Op.MAT_MUL: 2, Op.SELECT: 3, Op.CONCAT: 2, Op.MAXIMUM: 2}
SAME_AS_SOURCE = UNARY | {Op.CONTIGUOUS, Op.EXP, Op.SIGMOID, Op.SOFTMAX}
SCATTER_REDUCE = (None, "add", "mul", "max", "min")
PROBES = (1, 2, 3, 5)  # values given to every symbol when checking a symbolic view


def _same(a, b) -> bool:
    return len(a) == len(b) and all(sym.equal(x, y) for x, y in zip(a, b))


def _fmt(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def check_node(n: Node) -> None:
    """Raise ShapeError/DTypeError if `n` breaks its op's rules (its sources are checked)."""
    op, src = n.op, n.src
    want = N_SRC.get(op)
    if want is not None and len(src) != want:
        raise ShapeError(f"{op.title} takes {want} source(s), has {len(src)}")
    for d in n.shape:
        if isinstance(d, int) and d < 0:
            raise ShapeError(f"negative dim in shape {_fmt(n.shape)}")
    if op in SAME_AS_SOURCE or op is Op.CAST:
        if not _same(n.shape, src[0].shape):
            raise ShapeError(f"{op.title} has shape {_fmt(n.shape)}, its source {_fmt(src[0].shape)}")
        if op is not Op.CAST and n.dtype is not src[0].dtype:
            raise DTypeError(f"{op.title} has dtype {n.dtype.short}, its source {src[0].dtype.short}")
        if (op in UNARY or op in (Op.EXP, Op.SIGMOID, Op.SOFTMAX)) and not n.dtype.is_float:
            raise DTypeError(f"{op.title} needs a float dtype, has {n.dtype.short}")
    if op is Op.SOFTMAX:
        _axis(n.arg, len(n.shape), op)
    elif op in BINARY:
        a, b = src
        if op is Op.PHILOX:  # (seed, counter) -> uniform f32
            if not (a.dtype is b.dtype is DType.I64 and n.dtype is DType.F32):
                raise DTypeError(f"Philox of {a.dtype.short} and {b.dtype.short} gives {n.dtype.short}; needs i64, i64 -> f32")
        elif a.dtype is not b.dtype or n.dtype is not (DType.BOOL if op is Op.LESS_THAN else a.dtype):
            raise DTypeError(f"{op.title} of {a.dtype.short} and {b.dtype.short} gives {n.dtype.short}")
        if not (_same(n.shape, a.shape) and _same(n.shape, b.shape)):
            raise ShapeError(f"{op.title} of shapes {_fmt(a.shape)} and {_fmt(b.shape)} has shape {_fmt(n.shape)}")
    elif op in REDUCE or op is Op.KAHAN_SUM:
        axis = _axis(n.arg, len(src[0].shape), op)
        if not _same(n.shape, src[0].shape[:axis] + src[0].shape[axis + 1:]):
            raise ShapeError(f"{op.title} over axis {axis} of {_fmt(src[0].shape)} has shape {_fmt(n.shape)}")
    elif op is Op.GATHER:
        data, index = src
        _axis(n.arg, len(data.shape), op)
        if not index.dtype.is_int or n.dtype is not data.dtype or len(index.shape) != len(data.shape):
            raise DTypeError(f"Gather of {data.dtype.short}{_fmt(data.shape)} by {index.dtype.short}{_fmt(index.shape)}")
        if not _same(n.shape, index.shape):
            raise ShapeError(f"Gather has shape {_fmt(n.shape)}, its index {_fmt(index.shape)}")
    elif op is Op.SCATTER:
        data, index, updates = src
        if not (isinstance(n.arg, tuple) and len(n.arg) == 2 and n.arg[1] in SCATTER_REDUCE):
            raise ShapeError(f"Scatter's argument must be (axis, reduce), got {n.arg!r}")
        _axis(n.arg[0], len(data.shape), op)
        if not index.dtype.is_int or not (n.dtype is data.dtype is updates.dtype):
            raise DTypeError("Scatter needs an integer index and data, updates and output of one dtype")
        if not (_same(n.shape, data.shape) and _same(index.shape, updates.shape) and len(index.shape) == len(n.shape)):
            raise ShapeError(f"Scatter into {_fmt(data.shape)} of {_fmt(updates.shape)} at {_fmt(index.shape)}")
    elif op is Op.MAT_MUL:
        a, b = src
        if len(a.shape) < 2 or len(b.shape) != len(a.shape) or len(n.shape) != len(a.shape) or not (
                sym.equal(a.shape[-1], b.shape[-2]) and _same(n.shape[-2:], (a.shape[-2], b.shape[-1]))):
            raise ShapeError(f"MatMul of {_fmt(a.shape)} and {_fmt(b.shape)} has shape {_fmt(n.shape)}")
        if not (n.dtype is a.dtype is b.dtype):
            raise DTypeError("MatMul operands and output must have one dtype")
    elif op is Op.SELECT:
        cond, a, b = src
        if cond.dtype is not DType.BOOL or not (n.dtype is a.dtype is b.dtype):
            raise DTypeError(f"Select needs a bool condition and values of its dtype {n.dtype.short}")
        if not all(_same(n.shape, s.shape) for s in src):
            raise ShapeError(f"Select of shapes {', '.join(_fmt(s.shape) for s in src)} has shape {_fmt(n.shape)}")
    elif op is Op.CONCAT:
        a, b = src
        axis = _axis(n.arg, len(n.shape), op)
        if not (n.dtype is a.dtype is b.dtype):
            raise DTypeError("Concat operands and output must have one dtype")
        whole = a.shape[:axis] + (sym.norm(a.shape[axis] + b.shape[axis]),) + a.shape[axis + 1:] if axis < len(a.shape) else None
        if whole is None or len(b.shape) != len(a.shape) or not (_same(n.shape, whole) and _same(
                b.shape[:axis] + b.shape[axis + 1:], a.shape[:axis] + a.shape[axis + 1:])):
            raise ShapeError(f"Concat on axis {axis} of {_fmt(a.shape)} and {_fmt(b.shape)} has shape {_fmt(n.shape)}")
    elif op is Op.MAXIMUM:
        if not (n.dtype is src[0].dtype is src[1].dtype) or not all(_same(n.shape, s.shape) for s in src):
            raise ShapeError(f"Maximum of {', '.join(_fmt(s.shape) for s in src)} has {n.dtype.short}{_fmt(n.shape)}")
    elif op is Op.WINDOW_REDUCE:
        arg = n.arg
        if not (isinstance(arg, tuple) and len(arg) == 2 and arg[0] in ("sum", "max") and type(arg[1]) is int
                and len(src) in (1, 2) and 0 <= arg[1] <= len(src[0].shape)):
            raise ShapeError(f"WindowReduce needs one or two sources and ('sum' | 'max', r), got {arg!r}")
        r = arg[1]
        if n.dtype is DType.BOOL or not all(s.dtype is n.dtype for s in src):
            raise DTypeError(f"WindowReduce on {n.dtype.short} of {', '.join(s.dtype.short for s in src)}")
        if not all(_same(s.shape, src[0].shape) for s in src) or not _same(n.shape, src[0].shape[:len(src[0].shape) - r]) or \
                not all(sym.is_static(d) for d in src[0].shape[len(n.shape):]):
            raise ShapeError(f"WindowReduce over the last {r} (static) axes of {_fmt(src[0].shape)} has shape {_fmt(n.shape)}")
    elif op is Op.ATTENTION:
        _check_attention(n)
    elif op is Op.GROUPED_MAT_MUL:
        x, w, offs = src if len(src) == 3 else (None, None, None)
        if x is None or len(x.shape) != 2 or len(w.shape) != 3 or len(offs.shape) != 1 or not (
                sym.equal(w.shape[0], offs.shape[0]) and sym.equal(x.shape[1], w.shape[1])
                and _same(n.shape, (x.shape[0], w.shape[2]))):
            raise ShapeError(f"GroupedMatMul needs x (S, K), weight (E, K, N), offsets (E,) and gives (S, N); got "
                             f"{', '.join(_fmt(s.shape) for s in src)} -> {_fmt(n.shape)}")
        if not (n.dtype is x.dtype is w.dtype) or n.dtype is DType.BOOL or not offs.dtype.is_int:
            raise DTypeError("GroupedMatMul needs x, weight and output of one numeric dtype and integer offsets")
    elif op is Op.FUSED_ELEMENTWISE:
        _check_expression(n)
        for s in src:
            if not _same(s.shape, n.shape):
                raise ShapeError(f"FusedElementwise input {_fmt(s.shape)} does not fit its output {_fmt(n.shape)}")
    elif op is Op.IOTA:
        if not n.dtype.is_int or len(n.shape) != 1 or not sym.equal(n.shape[0], n.arg):
            raise ShapeError(f"Iota of length {n.arg!r} has {n.dtype.short}{_fmt(n.shape)}")
    elif op is Op.INPUT:
        if not isinstance(n.arg, str) or not n.arg:
            raise ShapeError(f"an input needs a name, got {n.arg!r}")
    elif op is Op.CONSTANT:
        _check_constant(n)
    elif op is Op.VIEW:
        _check_view(n)
    elif op not in FUSED and want is None:
        raise ShapeError(f"{op.title} cannot appear in a saved graph")


def _check_attention(n: Node) -> None:
    arg, src = n.arg, n.src
    ok = isinstance(arg, tuple) and len(arg) in (2, 3, 5, 6)
    scale, zero_rows, expr, select, half, transform = attention_arg(arg) if ok else (None,) * 6
    slots = {e.arg for e in expr.toposort() if e.op is Op.INPUT} if isinstance(expr, Expr) else set()
    ok = ok and (transform is None or (isinstance(transform, Expr) and half is None and transform.dtype is n.dtype and
                                       {e.arg for e in transform.toposort() if e.op is Op.INPUT} == {0}))
    if not (ok and (scale is None or type(scale) is float) and type(zero_rows) is bool
            and (select is None or (isinstance(select, tuple) and len(select) == 2 and type(select[0]) is float
                                    and type(select[1]) is bool))
            and (half is None or half in (DType.F16, DType.BF16))
            and (len(src) in (3, 4) if expr is None else isinstance(expr, Expr) and slots == set(range(len(src) - 3)))):
        raise ShapeError(f"Attention needs q, kt, v (and a mask, or its expression's inputs) and "
                         f"(scale, zero_empty_rows[, expression[, select, half[, transform]]]), got {arg!r}")
    want = DType.BOOL if select is not None else n.dtype  # the mask's dtype: a condition, or added
    if n.dtype not in (DType.F32, DType.F64, DType.F16, DType.BF16) or (n.dtype in (DType.F16, DType.BF16)) != (
            half is n.dtype) or not all(s.dtype is n.dtype for s in src[:3]) or (
            expr is None and len(src) == 4 and src[3].dtype is not want) or (expr is not None and expr.dtype is not want):
        raise DTypeError(f"Attention on {n.dtype.short} of {', '.join(s.dtype.short for s in src)}")
    q, kt, v = src[:3]
    batch, (m, d), (n_keys, dv) = q.shape[:-2], q.shape[-2:], v.shape[-2:]
    mask_ok = all(_same(x.shape, (*batch, m, n_keys)) for x in src[3:])
    if len(q.shape) < 2 or not (_same(kt.shape, (*batch, d, n_keys)) and _same(v.shape[:-2], batch)
                                and _same(n.shape, (*batch, m, dv)) and mask_ok):
        raise ShapeError(f"Attention of {', '.join(_fmt(s.shape) for s in src)} has shape {_fmt(n.shape)}")


def _check_expression(n: Node) -> None:
    """A FusedElementwise expression (an `Expr` DAG): reads only its inputs, with their dtypes,
    and yields the node's dtype."""
    expr = n.arg
    if not callable(getattr(expr, "toposort", None)) or expr.dtype is not n.dtype:
        raise DTypeError(f"FusedElementwise needs an expression of dtype {n.dtype.short}, got {expr!r}"[:200])
    for e in expr.toposort():
        if e.op is Op.INPUT and not (type(e.arg) is int and 0 <= e.arg < len(n.src) and e.dtype is n.src[e.arg].dtype):
            raise ShapeError(f"FusedElementwise reads input {e.arg!r} ({e.dtype.short}) of {len(n.src)} inputs")
        if e.op is Op.CONSTANT and (e.src or not isinstance(e.arg, (bool, int, float))):
            raise ShapeError(f"FusedElementwise constant {e.arg!r} must be a number")
        arity = 2 if e.op in BINARY or e.op is Op.MAXIMUM else 3 if e.op is Op.SELECT else 0 if e.op in (Op.INPUT, Op.CONSTANT) else 1
        if len(e.src) != arity:
            raise ShapeError(f"FusedElementwise {e.op.title} takes {arity} operand(s), has {len(e.src)}")
        if e.op is Op.PHILOX and not (e.dtype is DType.F32 and all(s.dtype is DType.I64 for s in e.src)):
            raise DTypeError("FusedElementwise Philox needs i64 operands and gives f32")
        if (e.op in UNARY or e.op in (Op.EXP, Op.SIGMOID)) and not (e.dtype.is_float and e.src[0].dtype is e.dtype):
            # as its node form: an integer Recip would be a C division by zero, a trap, not a value
            raise DTypeError(f"FusedElementwise {e.op.title} needs a float operand of its own dtype, "
                             f"has {e.src[0].dtype.short} -> {e.dtype.short}")


def _axis(axis, ndim: int, op: Op) -> int:
    if type(axis) is not int or not 0 <= axis < max(ndim, 1):
        raise ShapeError(f"{op.title} axis {axis!r} is out of range for {ndim} dims")
    return axis


def _check_constant(n: Node) -> None:
    arg = n.arg
    if isinstance(arg, ConstantArray):
        shape = () if n.shape == () and arg.shape == (1,) else arg.shape  # ConstantArray makes 0-d 1-d
        if shape != n.shape or DType.of(arg.dtype) is not n.dtype:
            raise DTypeError(f"weight {arg.name!r} is {DType.of(arg.dtype).short}{list(arg.shape)}, "
                             f"its node {n.dtype.short}{list(n.shape)}")
    elif n.shape != ():
        raise ShapeError(f"a scalar constant has shape {_fmt(n.shape)}")
    elif not isinstance(arg, (bool, int, float)) and not hasattr(arg, "free_symbols"):
        raise ShapeError(f"a constant's value must be a number, a dim or a weight, got {type(arg).__name__}")


def _check_view(n: Node) -> None:
    st, base = n.arg, n.src[0]
    if not isinstance(st, ShapeTracker):
        raise ShapeError("a View needs a shape tracker")
    if n.dtype is not base.dtype or not _same(n.shape, st.shape):
        raise ShapeError(f"View of {base.dtype.short}{_fmt(base.shape)} has {n.dtype.short}{_fmt(n.shape)}, "
                         f"its tracker {_fmt(st.shape)}")
    if len(st.strides) != len(st.shape) or (st.mask is not None and len(st.mask) != len(st.shape)):
        raise ShapeError("a View's strides and mask need one entry per dim")
    dims = list(st.dims) + list(base.shape)
    names = sorted({s.name for d in dims for s in sym.free_symbols(d)})
    probes = [{}] if not names else [dict.fromkeys(names, v) for v in PROBES]
    if 0 < len(names) <= 3:  # a few mixed bindings as well
        probes += [dict(zip(names, vals)) for vals in itertools.islice(itertools.product(PROBES, repeat=len(names)), 16)]
    for b in probes:
        try:
            shape = [sym.evaluate(d, b) for d in st.shape]
            size = 1
            for d in base.shape:
                size *= sym.evaluate(d, b)
            lo, hi = _reads(st, shape, b)
        except ZeroDivisionError:  # e.g. Mod(n, m - 1) at m = 1
            if not names:
                raise ShapeError(f"View {st} divides by zero") from None
            continue
        if min(shape, default=0) < 0 or size < 0:
            if not names:
                raise ShapeError(f"View has a negative size: {_fmt(shape)} of a buffer of {size}")
            continue  # this binding is not one the graph can run with
        if lo is not None and (lo < 0 or hi >= size):
            at = f" with {b}" if b else ""
            raise ShapeError(f"View {st} reads elements [{lo}, {hi}] of a buffer of {size}{at}")


def _reads(st: ShapeTracker, shape: list[int], b: dict) -> tuple:
    """The lowest and highest buffer element the view reads under bindings `b` (None, None if none)."""
    strides = [sym.evaluate(s, b) for s in st.strides]
    box = [(0, d) for d in shape]
    if st.mask is not None:
        box = [(min(max(sym.evaluate(lo, b), 0), d), min(max(sym.evaluate(hi, b), 0), d))
               for (lo, hi), d in zip(st.mask, shape)]
    if any(hi <= lo for lo, hi in box):
        return None, None
    at = sym.evaluate(st.offset, b)
    lo = at + sum((b0 if s >= 0 else b1 - 1) * s for (b0, b1), s in zip(box, strides))
    hi = at + sum((b1 - 1 if s >= 0 else b0) * s for (b0, b1), s in zip(box, strides))
    return lo, hi


def check_views(nodes, bindings: dict[str, int]) -> None:
    """Every View among `nodes` reads inside its buffer under `bindings`: what a runtime without
    per-read bounds checks (generated kernels) verifies once per binding before it runs.

    A graph built by luminal always passes; a `.lum` file edited by hand may hold a view that
    stays inside its buffer at the sizes `check_node` probes and leaves it at others."""
    for n in nodes:
        if n.op is not Op.VIEW:
            continue
        st = n.arg
        size = 1
        for d in n.src[0].shape:
            size *= sym.evaluate(d, bindings)
        shape = [sym.evaluate(d, bindings) for d in st.shape]
        lo, hi = _reads(st, shape, bindings)
        if lo is not None and (lo < 0 or hi >= size):
            raise ShapeError(f"View {st} reads elements [{lo}, {hi}] of a buffer of {size} with {bindings}: "
                             f"the graph is inconsistent (a corrupt or edited .lum file?)")
