"""The kernel generators, each written once against the `Dialect` (`dialect.py`), and
`render_node`, which renders a node in a dialect.

- pointwise ops, iota, copies, fused elementwise regions, concat along the last axis: an
  element loop whose element is the op's value (`cstyle.pointwise_value`, `expression`);
- SumReduce, MaxReduce, KahanSum: a row pass per output (Neumaier-compensated where the
  dialect's sum type is the values' own); axes of at most `SMALL_AXIS` unrolled per element;
- Softmax: per row, the max (and whether a NaN is in the row), the sum of exp(x - max), then
  the scaled exps (f32/f64 store the exps and scale them in place);
- Gather: an element loop; an index out of range sets the error flag (1) and gives 0;
- Scatter: a copy of the data, then the updates (atomic where the dialect's updates run in
  parallel, in order where they don't);
- Concat along another axis: per row, a copy of the operand the row comes from;
- WindowReduce: an element loop whose element is the unrolled window (`conv.element`).
Sources are read through their views (strides, offset, padding mask), and symbolic dims are
`long long d_<name>` kernel arguments. A dialect's own kernels (its extern steps, and faster
forms of an op it has) are passed to `render_node` as `special` and tried first.
"""

from __future__ import annotations

from luminal.errors import UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import POINTWISE, REDUCE, Node, Op
from luminal.hlir.shape import ShapeTracker, contiguous_strides
from luminal.kernels.render import conv
from luminal.kernels.render.attention import attention
from luminal.kernels.render.cexpr import c_dim, c_literal, compute_type, lowest, rendering
from luminal.kernels.render.cstyle import (
    INT_MOD,
    LIBM,
    KernelSpec,
    buffer_sources,
    code_for_op,
    current,
    pointer_of,
    pointwise_value,
    read,
    rendering_node,
    store_value,
    symbols_of,
    view_of,
    wrapping,
)
from luminal.kernels.render.dialect import Dialect, Pass, element_work
from luminal.kernels.render.grouped import grouped_matmul


def _read(x: Node, idx: list[str]) -> str:
    return read(x, idx, pointer_of(x, current()[1]))


def elementwise(node: Node, d: Dialect):
    value = lambda idx, flat: ("", pointwise_value(node, idx, _inputs()))  # noqa: E731
    return [d.elements(node.shape, value, vector=node.op is not Op.IOTA, work=element_work(node))], None


def _inputs() -> list[Node]:
    return current()[1]


SMALL_AXIS = 8  # reductions over a static axis this short are unrolled, an element loop over the output


def reduce(node: Node, d: Dialect):
    (src,) = node.src
    axis = node.arg
    k = src.shape[axis]
    is_max = node.op is Op.MAX_REDUCE
    acc = d.sum_type(node.dtype) if not is_max else (compute_type(node.dtype) if compute_type(node.dtype) in (
        "float", "double", "int", "long long") else "int")
    compensated = node.op is Op.KAHAN_SUM and node.dtype.is_float and acc == compute_type(node.dtype)
    if sym.is_static(k) and 1 <= int(k) <= SMALL_AXIS and not compensated:
        def element(idx, flat):  # the terms in axis order, as the row pass adds them
            terms = [f"(({acc})({_read(src, idx[:axis] + [f'{r}LL'] + idx[axis:])}))" for r in range(int(k))]
            expr = terms[0]
            for t in terms[1:]:
                expr = f"lum_max_nan({expr}, {t})" if is_max else wrapping(acc, expr, "+", t)
            return "", expr

        return [d.elements(node.shape, element)], None
    o = [f"o{i}" for i in range(len(node.shape))]
    full = o[:axis] + ["j"] + o[axis:]
    value = _read(src, full)
    if compensated:  # Neumaier: c collects the low-order bits s + v loses; an inf sum must not make c NaN
        e = LIBM[acc]
        two_sum = lambda a, b: f"(fabs{e}({a}) >= fabs{e}({b}) ? ({a} - u) + {b} : ({b} - u) + {a})"  # noqa: E731
        p = Pass(step=f"{{ {acc} u = s + v; if (u - u == ({acc})0) c += {two_sum('s', 'v')}; s = u; }}",
                 state=((acc, "s", "0", None), (acc, "c", "0", None)), value=value, contiguous=(src, full),
                 merge=f"{{ {acc} u = s + s_o; c += c_o + (u - u == ({acc})0 ? {two_sum('s', 's_o')} : ({acc})0); s = u; }}")
        return [d.rows(node.shape, k, [p], f"out[row] = {_store(node, 's + c')};")], None
    if not is_max and acc == "double" and node.shape and axis < len(node.shape):
        st = view_of(src)[1]
        if sym.equal(st.strides[-1], 1) and not sym.equal(st.strides[axis], 1):
            part = d.column_sums(node.shape, k, value, lambda v: _store(node, v))
            if part is not None:
                return [part], None
    if is_max:
        init = "0" if node.dtype is DType.BOOL else lowest(acc)  # an empty `any` is false
        step, merge, op = "acc = lum_max_nan(acc, v);", "acc = lum_max_nan(acc, acc_o);", None
    else:
        init, step, merge, op = f"({acc})0", f"acc = {wrapping(acc, 'acc', '+', 'v')};", \
            f"acc = {wrapping(acc, 'acc', '+', 'acc_o')};", "+"
    p = Pass(step=step, state=((acc, "acc", init, op),), merge=merge, value=value, contiguous=(src, full),
             float_max=is_max and acc in ("float", "double"))
    return [d.rows(node.shape, k, [p], f"out[row] = {_store(node, 'acc')};")], None


def _store(node: Node, value: str) -> str:
    return store_value(node.dtype, value)


def softmax(node: Node, d: Dialect):
    (src,) = node.src
    axis = node.arg
    if node.dtype not in (DType.F32, DType.F16, DType.BF16, DType.F64):
        raise UnsupportedError(f"Softmax on {node.dtype}")
    t = compute_type(node.dtype)
    st = d.sum_type(node.dtype)
    e = LIBM[t]
    row_shape = src.shape[:axis] + src.shape[axis + 1:]
    o = [f"o{i}" for i in range(len(row_shape))]
    full = o[:axis] + ["j"] + o[axis:]
    x = _read(src, full)
    out = "out[" + " + ".join(f"{i} * {c_dim(s)}" for i, s in zip(full, contiguous_strides(node.shape))) + "]"
    wide = DType.F64 if t == "double" else DType.F32
    ninf, nan = c_literal(float("-inf"), wide), c_literal(float("nan"), wide)
    # the max, vectorizable: a plain max and a NaN flag (a NaN poisons the row, as in the
    # decomposition; which of -0.0/0.0 is the max cannot change exp(x - m))
    passes = [Pass(step="m = v > m ? v : m; has_nan |= v != v;", value=x, state=((t, "m", ninf, "max"), ("int", "has_nan", "0", "|")),
                   merge="m = m_o > m ? m_o : m; has_nan |= has_nan_o;", after=f"if (has_nan) m = {nan};")]
    # a row of -inf sums to 0: inv = inf, and exp(NaN) * inf = NaN, as the decomposition gives
    total = dict(state=((st, "s", "0", "+"),), merge="s += s_o;", guard=f"m != {ninf}", after=f"{t} inv = ({t})(({st})1 / s);")
    if node.dtype in (DType.F32, DType.F64):  # exp once, into the output; the sum reads it back
        passes += [Pass(step=f"{out} = exp{e}(({x}) - m);"),
                   Pass(step="s += v;", value=out, **total),
                   Pass(step=f"{out} *= inv;")]
    else:  # f16/bf16: the output holds rounded values, so exp is computed again
        passes += [Pass(step="s += v;", value=f"exp{e}(({x}) - m)", **total),
                   Pass(step=f"{out} = {_store(node, f'exp{e}(({x}) - m) * inv')};")]
    return [d.rows(row_shape, src.shape[axis], passes, "", work_per_row=sym.product([src.shape[axis], 8]))], None


def gather(node: Node, d: Dialect):
    data, index = node.src
    axis = node.arg
    zero = "false" if node.dtype is DType.BOOL else f"(({compute_type(node.dtype)})0)"

    def element(idx, flat):
        stmts = (f"long long g = (long long)({_read(index, idx)});\n    "
                 f"const bool bad = g < 0 || g >= {c_dim(data.shape[axis])};\n    if (bad) lum_flag(err, 1);")
        return stmts, f"(bad ? {zero} : {_read(data, idx[:axis] + ['g'] + idx[axis + 1:])})"

    return [d.elements(node.shape, element)], True


def scatter(node: Node, d: Dialect):
    """Copy `data` into the output, then write (or combine) each update."""
    data, index, updates = node.src
    axis, kind = node.arg
    t = compute_type(node.dtype)
    if kind not in (None, "add", "mul", "max", "min"):
        raise UnsupportedError(f"scatter with reduce={kind!r}")

    def combine(cur, v):
        if kind in ("add", "mul"):
            return code_for_op[Op.ADD if kind == "add" else Op.MUL](t, cur, v)
        if node.dtype is DType.BOOL:
            return f"({cur} || {v})" if kind == "max" else f"({cur} && {v})"
        return f"lum_{kind}_nan(({t}){cur}, {v})"

    strides = contiguous_strides(node.shape)

    def update(idx, flat):
        address = " + ".join([f"{i} * {c_dim(s)}" for a, (i, s) in enumerate(zip(idx, strides)) if a != axis]
                             + [f"g * {c_dim(strides[axis])}"])
        return (f"long long g = (long long)({_read(index, idx)});\n    "
                f"if (g < 0 || g >= {c_dim(node.shape[axis])}) lum_flag(err, 1);\n    "
                f"else {{ long long a = {address}; {t} v = ({t})({_read(updates, idx)}); "
                f"{d.update(kind, node.dtype, 'a', 'v', combine)} }}"), None

    copy = d.elements(node.shape, lambda idx, flat: ("", _read(data, idx)), vector=True)
    # two updates of one place differ only in `axis` (the others index the output as they index
    # `index`): lines along it in order, as NumPy applies them, and the lines on any thread
    return [copy, d.elements(index.shape, update, ordered=True, ordered_along=axis)], True


def concat(node: Node, d: Dialect):
    """out[.., i, ..] = a[.., i, ..] for i < len_a along the axis, else b[.., i - len_a, ..].
    Along any axis but the last the operand is chosen per row, so each row is a plain copy (a
    select of two masked reads per element does not vectorize), and the dims after the axis
    are one row where both operands read them contiguously (a channel concat of 13x13 maps: rows
    of 169, not 13)."""
    a, b = node.src
    axis = node.arg
    split = c_dim(a.shape[axis])
    if axis == len(node.shape) - 1:
        return [d.elements(node.shape, lambda idx, flat: ("", pointwise_value(node, idx, _inputs())))], None
    merged = [_merge_tail(x, axis) for x in (a, b)]
    shape = node.shape[:axis + 1] + (sym.product(node.shape[axis + 1:]),)
    if None in merged:
        merged, shape = [a, b], node.shape
    o = [f"o{k}" for k in range(len(shape) - 1)]
    shifted = o[:axis] + [f"({o[axis]} - {split})"] + o[axis + 1:]
    out = f"out[row * {c_dim(shape[-1])} + j]"
    passes = [Pass(step=f"{out} = {_store(node, _read(merged[0], o + ['j']))};", guard=f"{o[axis]} < {split}"),
              Pass(step=f"{out} = {_store(node, _read(merged[1], shifted + ['j']))};", guard=f"{o[axis]} >= {split}")]
    return [d.rows(shape[:-1], shape[-1], passes, "")], None


def _merge_tail(x: Node, axis: int) -> Node | None:
    """`x` read with its dims after `axis` as one (a view of its buffer), when it reads them as
    one run (contiguous strides, no mask on them); else None."""
    base, st = view_of(x)
    tail = x.shape[axis + 1:]
    if st.mask is not None and not all(sym.equal(lo, 0) and sym.equal(hi, d) for (lo, hi), d in zip(st.mask[axis + 1:], tail)):
        return None
    if not all(sym.equal(d, 1) or sym.equal(s, w) for d, s, w in zip(tail, st.strides[axis + 1:], contiguous_strides(tail))):
        return None
    size = sym.product(tail)
    mask = None if st.mask is None else st.mask[:axis + 1] + ((0, size),)
    merged = ShapeTracker(x.shape[:axis + 1] + (size,), st.strides[:axis + 1] + (1,), st.offset, mask)
    return Node(Op.VIEW, x.dtype, merged.shape, (base,), merged)


def window_reduce(node: Node, d: Dialect):
    terms = sym.product(node.src[0].shape[len(node.shape):])
    return [d.elements(node.shape, lambda idx, flat: conv.element(node, idx, _inputs()), work=terms)], None


GENERATORS = {
    **{op: elementwise for op in POINTWISE | {Op.IOTA, Op.CONTIGUOUS, Op.FUSED_ELEMENTWISE}},
    **{op: reduce for op in REDUCE | {Op.KAHAN_SUM}},
    Op.SOFTMAX: softmax,
    Op.GATHER: gather,
    Op.SCATTER: scatter,
    Op.CONCAT: concat,
    Op.WINDOW_REDUCE: window_reduce,
    Op.ATTENTION: attention,  # `attention.py`: online softmax over key blocks, scores never stored
    Op.GROUPED_MAT_MUL: grouped_matmul,  # `grouped.py`: per output, its row's group, then the dot product
}
NO_KERNEL = frozenset({Op.INPUT, Op.CONSTANT, Op.VIEW})  # scalars are inlined, buffers and views read


def render_node(node: Node, name: str, d: Dialect, special: dict | None = None) -> list[KernelSpec]:
    """The kernels computing `node` into its own contiguous buffer in dialect `d`: the dialect's
    own kernel for the op when `special` has one that takes it (returns launches, not None),
    else the generator. CUDA builds each in 32-bit index math where the sizes fit."""
    with rendering(d):
        own = (special or {}).get(node.op)
        found = own(node, name) if own is not None else None
        if found is not None:
            return found
        gen = GENERATORS.get(node.op)
        if gen is None:
            raise UnsupportedError(f"no {d.name} kernel for op {node.op.title}")
        inputs = buffer_sources(node)

        def render():
            with rendering_node(node, inputs):
                parts, err = gen(node, d)
            body = "".join(p.body for p in parts)
            err = bool(err) or INT_MOD + "(" in body
            specs = d.kernels(node, name, parts, inputs, symbols_of(node, extra=[s.shape for s in node.src]), err)
            if node.op is Op.FUSED_ELEMENTWISE:  # casts inside the region need their dtype's header too
                for k in specs:
                    k.dtypes |= {e.dtype for e in node.arg.toposort()}
            return specs

        return d.build(node, render)
