"""Padded copies on the CPU: a contiguous copy of a masked view (a conv's zero padding) or a
Select of one and a scalar (a max pool's -inf padding), written per row as fill, a plain vector
copy and fill (`pad_copy`); `pad_parts` recognizes them for the kernels that read the padding in
place instead (`conv.window_pad`)."""

from __future__ import annotations

from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op
from luminal.hlir.shape import ShapeTracker
from luminal.kernels.render.cexpr import c_dim
from luminal.kernels.render.cstyle import (
    buffer_sources,
    is_inline_scalar,
    pointer_of,
    read,
    store_value,
    symbols_of,
    unmasked,
    unravel,
    view_of,
)
from luminal.kernels.render.dialect import PAR_MIN, C


def pad_copy(node: Node) -> tuple[list[Node], list[str], bool, str] | None:
    """A contiguous copy of a masked view (a conv's zero padding), or a Select of such a view
    and a scalar where the same mask is true (a max pool's -inf padding), per row: the mask of
    the other dims decides the whole row, the last dim's bounds split it into fill values, a
    plain vector copy (no test per element: the masked read, a select of a load that may be out
    of range, does not vectorize) and fill values. (inputs, symbols, err, body) like
    `window_reduce`, or None for any other node."""
    parts = pad_parts(node) if node.shape else None
    if parts is None:
        return None
    src, fill = parts
    st = view_of(src)[1]
    inputs = buffer_sources(node)
    plain = unmasked(src)
    outer = node.shape[:-1]
    rows, lines = unravel("row", outer, "i")
    inner = f"i{len(outer)}"
    conds = [c for i, (lo, hi), d in zip(rows, st.mask, st.shape)
             for c in ([] if sym.equal(lo, 0) else [f"{i} >= {c_dim(lo)}"]) + ([] if sym.equal(hi, d) else [f"{i} < {c_dim(hi)}"])]
    lo, hi = st.mask[-1]
    other = store_value(node.dtype, "0" if fill is None else read(fill, rows + [inner], None))
    value = store_value(node.dtype, read(plain, rows + [inner], pointer_of(src, inputs)))
    setup = "\n    ".join(lines)
    body = f"""const long long n_rows = {c_dim(sym.product(outer))}, n_in = {c_dim(node.shape[-1])};
  #pragma omp parallel for if (n_rows > 1 && n_rows * n_in >= {PAR_MIN})
  for (long long row = 0; row < n_rows; ++row) {{
    {setup}
    long long lo = lum_max(0, {c_dim(lo)}), hi = lum_min(n_in, {c_dim(hi)});
    if (!({' && '.join(conds) or '1'}) || hi < lo) lo = hi = n_in;  /* a row of the padding */
    {C.ctype(node.dtype)}* restrict dst = out + row * n_in;
    for (long long {inner} = 0; {inner} < lo; ++{inner}) dst[{inner}] = {other};
    #pragma omp simd
    for (long long {inner} = lo; {inner} < hi; ++{inner}) dst[{inner}] = {value};
    for (long long {inner} = hi; {inner} < n_in; ++{inner}) dst[{inner}] = {other};
  }}"""
    return inputs, symbols_of(node), False, body


def _scalar(x: Node, value=None) -> bool:
    """`x` reads one inline scalar constant everywhere (of `value`, when given)."""
    base, st = view_of(x)
    return (is_inline_scalar(base) and all(sym.equal(s, 0) for s in st.strides)
            and (value is None or (st.mask is not None and base.dtype is DType.BOOL and bool(base.arg) is value)))


def _same_mask(a: ShapeTracker, b: ShapeTracker) -> bool:
    return a.mask is not None and b.mask is not None and len(a.mask) == len(b.mask) and all(
        sym.equal(x, y) for pa, pb in zip(a.mask, b.mask) for x, y in zip(pa, pb))


def pad_parts(node: Node) -> tuple[Node, Node | None] | None:
    """(the masked view, the fill scalar or None for zeros) of a padded copy (see `pad_copy`), or None."""
    if node.op is Op.CONTIGUOUS:
        src, fill = node.src[0], None
    elif node.op is Op.SELECT:
        cond, src, fill = node.src
        if not (_scalar(cond, True) and _scalar(fill) and cond.op is Op.VIEW and view_of(src)[1].mask is not None
                and _same_mask(cond.arg, view_of(src)[1])):
            return None
    else:
        return None
    base, st = view_of(src)
    if src.op is not Op.VIEW or st.mask is None or base.dtype is not node.dtype:
        return None
    return src, fill
