"""The C dialect's convolution kernels.

WindowReduce (direct convolutions, pooling): one vector loop per output row, the reads that stay
put along it (a conv's weights) loaded once per row before it (`_row_body`); planes under 64
wide as one flat vector loop per plane (`_flat_plane`), not rows of 14 or 7. A WindowReduce read
only by the pointwise region after it (BatchNorm, ReLU6, hardswish) is computed in that region's
kernel, each value going straight into it (`WindowEpilogue`, planned by `conv_gemm.fusion_plan`).

The convolutions that are GEMMs (im2col tiles, GEMM epilogues) and the fused kernels
`program.py` plans are in `conv_gemm.py`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import UNARY, Node, Op
from luminal.hlir.shape import ShapeTracker, contiguous_strides
from luminal.kernels.render.cexpr import c_dim, compute_type
from luminal.kernels.render.conv import UNROLL, hoisted_element
from luminal.kernels.render.cstyle import (
    buffer_sources,
    is_inline_scalar,
    lanes,
    pointer_of,
    pointwise_value,
    read,
    signature,
    store_value,
    symbols_of,
    unravel,
    view_of,
)
from luminal.kernels.render.dialect import PAR_MIN, C, _c_rows

FLAT_MAX = 4096  # elements of one flat plane (a stack buffer per row of the loop)


def window_reduce(node: Node) -> tuple[list[Node], list[str], bool, str] | None:
    """A WindowReduce as (inputs, symbols, err, body): short rows as flat planes (`_flat_plane`),
    others a vector loop along each output row (`_row_body`); None for a scalar output (the
    shared generator's element loop)."""
    if not node.shape:
        return None
    inputs = buffer_sources(node)
    flat = _flat_plane(node)
    body = _row_body(node, inputs) if flat is None else _flat_body(node, *flat, inputs)
    return inputs, symbols_of(node), False, body


def _row_body(node: Node, inputs: list[Node], epilogue=None, out_dtype: DType | None = None) -> str:
    """Per output row, the reads that do not move along it (a conv's weights) into locals, then one
    vector loop over the row. `epilogue(idx, value, moving)`: (setup, the value stored, of
    `out_dtype`) given the window's, the window dims in `moving` changing inside the loop
    (`WindowEpilogue`)."""
    outer, nd = node.shape[:-1], len(node.shape)
    rows, inner = [f"i{k}" for k in range(nd - 1)], f"i{nd - 1}"  # the row loop's names (`_c_rows`)
    phases = _phases(node, inputs, rows, inner)
    setup, stmts, value = hoisted_element(node, rows + [inner], inputs, inner, phases and phases[1])
    if phases:
        setup = f"{setup}\n        {phases[0]}"
    out_dtype = out_dtype or node.dtype
    if epilogue is not None:
        more, value = epilogue(rows + [inner], value, {nd - 1})
        setup = f"{setup} {more}"
    per_row = node.shape[-1] * sym.product(node.src[0].shape[nd:])
    body = f"""{setup}
        {C.ctype(out_dtype)}* restrict dst = out + row * n_in;
        #pragma omp simd
        for (long long {inner} = 0; {inner} < n_in; ++{inner}) {{
          {stmts}
          dst[{inner}] = {store_value(out_dtype, value)};
        }}"""
    # the rows as the shared generator steps them (a thread's first row split into indices, then
    # carries: no division per row, which short rows would feel)
    return f"const long long n_in = {c_dim(node.shape[-1])};\n  " + _c_rows(outer, "i", f"n_rows * {c_dim(per_row)}", body, per_row)


PHASE_MAX = 8192  # elements of one output row's phase buffers (on the stack)


def _phases(node: Node, inputs: list[Node], rows: list[str], inner: str) -> tuple[str, object] | None:
    """A strided window along the output row (a stride-2 depthwise conv or max pool): the operand
    that moves along the row reads element s*u*i + u*k of its row at output i and window position
    k (u the window axis's stride), a strided load per term that does not vectorize well. Split
    per output row into s phase rows, phase p holding the elements u*(s*j + p): position k is
    then phase k % s at j = i + k // s, a contiguous vector load. (the C filling the phase rows,
    one per phase and value of the other window axes, before the row's loop; the `term_read` of
    `hoisted_element` reading them), or None. The terms and their order are unchanged, so are
    the bits."""
    kind, r = node.arg
    nd = len(node.shape)
    kernel = node.src[0].shape[nd:]
    if not all(sym.is_static(d) for d in (*kernel, node.shape[-1])) or sym.product(kernel) > UNROLL:
        return None
    kernel, width = [int(d) for d in kernel], int(node.shape[-1])
    moving = [p for p, s in enumerate(node.src) if not sym.equal(view_of(s)[1].strides[nd - 1], 0)]
    if len(moving) != 1:
        return None
    src = node.src[moving[0]]
    base, st = view_of(src)
    strides = st.strides[nd - 1:]
    if st.mask is not None or is_inline_scalar(base) or not all(sym.is_static(w) for w in strides):
        return None
    step, window = int(strides[0]), [int(w) for w in strides[1:]]
    axis = next((a for a, u in enumerate(window) if u > 0 and step % u == 0 and step // u >= 2 and kernel[a] > 1), None)
    if axis is None:
        return None
    s, t = step // window[axis], compute_type(node.dtype)
    others = [a for a in range(r) if a != axis]
    groups = list(itertools.product(*(range(kernel[a]) for a in others)))
    length = {p: width + max(k // s for k in range(p, kernel[axis], s)) for p in range(min(s, kernel[axis]))}
    if len(groups) * sum(length.values()) > PHASE_MAX:
        return None
    common = min(length.values())
    fills = [f"{t} ph{g}_{p}[{n}];" for g in range(len(groups)) for p, n in length.items()]

    def fill(g: int, p: int) -> str:
        k = dict(zip(others, groups[g])) | {axis: p}
        return f"ph{g}_{p}[j] = (({t}){read(src, rows + ['j'] + [f'{k[a]}LL' for a in range(r)], pointer_of(src, inputs))});"

    for g in range(len(groups)):
        # the phases side by side (an interleaved load the compiler vectorizes), then their tails
        fills.append(f"#pragma omp simd\n        for (long long j = 0; j < {common}LL; ++j) {{ {' '.join(fill(g, p) for p in length)} }}")
        fills += [f"for (long long j = {common}LL; j < {n}LL; ++j) {fill(g, p)}" for p, n in length.items() if n > common]

    def term_read(p: int, k: list[int]) -> str | None:
        if p != moving[0]:
            return None
        g = groups.index(tuple(k[a] for a in others))
        return f"ph{g}_{k[axis] % s}[{inner} + {k[axis] // s}LL]"

    return "\n        ".join(fills), term_read


def _flat_plane(node: Node) -> tuple[Node, int] | None:
    """Short output rows (a depthwise conv at 14x14 or 7x7: an 8-wide vector loop and a scalar
    tail of 6, or all scalar) as one flat run over the plane: when every operand reads the last
    two output dims (H, W) at strides (Wq * s, s), Wq the row width of the input plane (W plus
    the window's extent less one: a stride-1 window), element q = h * Wq + w of the flat run
    reads what element (h, w) reads, and the q with w >= W read in-bounds values of the next row
    (computed, then dropped). (the WindowReduce over the flat run of (H - 1) * Wq + W elements,
    Wq), or None."""
    shape, nd = node.shape, len(node.shape)
    if nd < 2 or not all(sym.is_static(d) for d in shape[-2:]):
        return None
    h, w = int(shape[-2]), int(shape[-1])
    if h < 2 or w >= 64:
        return None
    wq = None
    for s in node.src:
        st = view_of(s)[1]
        sh, sw = st.strides[nd - 2], st.strides[nd - 1]
        if st.mask is not None or not (sym.is_static(sh) and sym.is_static(sw)):
            return None
        sh, sw = int(sh), int(sw)
        if sh == 0 and sw == 0:  # the weight, broadcast over the plane
            continue
        if sw <= 0 or sh % sw or wq not in (None, sh // sw):
            return None
        wq = sh // sw
    if wq is None or not w <= wq <= w + 8 or h * wq > FLAT_MAX:
        return None
    n = (h - 1) * wq + w
    srcs = []
    for s in node.src:
        base, st = view_of(s)
        flat = ShapeTracker(st.shape[:nd - 2] + (n,) + st.shape[nd:], st.strides[:nd - 2] + (st.strides[nd - 1],) + st.strides[nd:],
                            st.offset)
        srcs.append(Node(Op.VIEW, s.dtype, flat.shape, (base,), flat))
    return Node(Op.WINDOW_REDUCE, node.dtype, shape[:-2] + (n,), tuple(srcs), node.arg), wq


def _flat_body(node: Node, flat: Node, wq: int, inputs: list[Node], epilogue=None, out_dtype: DType | None = None) -> str:
    """Per plane: the flat run into a stack buffer (one vector loop), then its rows W wide to out
    (through `epilogue`, as in `_row_body`)."""
    h, w = int(node.shape[-2]), int(node.shape[-1])
    outer = node.shape[:-2]
    rows, lines = unravel("row", outer, "i")
    out_dtype = out_dtype or node.dtype
    more, result = "", f"plane[y * {wq}LL + x]"
    if epilogue is not None:
        more, result = epilogue(rows + ["y", "x"], result, {len(node.shape) - 2, len(node.shape) - 1})
    setup, stmts, value = hoisted_element(flat, rows + ["q"], inputs, "q")
    t = compute_type(node.dtype)
    terms = c_dim(sym.product(node.src[0].shape[len(node.shape):]))
    setup = "\n    ".join(lines + [setup, more])
    return f"""const long long n_rows = {c_dim(sym.product(outer))}, n_q = {flat.shape[-1]}LL;
  #pragma omp parallel for if (n_rows > 1 && n_rows * {h * w}LL * {terms} >= {PAR_MIN})
  for (long long row = 0; row < n_rows; ++row) {{
    {setup}
    {t} plane[{h * wq}];  /* element (y, x) at y * {wq} + x */
    #pragma omp simd
    for (long long q = 0; q < n_q; ++q) {{
      {stmts}
      plane[q] = {value};
    }}
    for (long long y = 0; y < {h}LL; ++y)
      #pragma omp simd
      for (long long x = 0; x < {w}LL; ++x) out[(row * {h}LL + y) * {w}LL + x] = {store_value(out_dtype, result)};
  }}"""


@dataclass
class WindowEpilogue:
    """A WindowReduce read only by the pointwise region after it (a conv's BatchNorm and
    activation), element for element: one kernel computes both, each window's value going
    straight into the region, so the WindowReduce's buffer is neither written nor read."""

    node: Node  # the region (a FusedElementwise, or one pointwise op): the kernel writes its buffer
    window: Node  # the WindowReduce, absorbed

    @property
    def absorbed(self) -> list[Node]:
        return [self.window]


_FLOATS = (DType.F32, DType.F64)
_EPILOGUES = frozenset({Op.FUSED_ELEMENTWISE, Op.CONTIGUOUS, Op.ADD, Op.MUL, Op.MAXIMUM, Op.EXP, Op.SIGMOID}) | UNARY


def window_epilogue(node: Node, users) -> WindowEpilogue | None:
    """The plan fusing a pointwise `node` into the WindowReduce it reads, when that is the
    WindowReduce's only reader (`users`: readers by id, a graph output counting as one), every
    read of it is element for element (same shape, contiguous) and the region is float (no
    error flag); else None."""
    if node.op not in _EPILOGUES or not node.shape or node.dtype not in _FLOATS:
        return None
    windows = [b for b in buffer_sources(node) if b.op is Op.WINDOW_REDUCE]
    if len(windows) != 1 or (node.op is Op.FUSED_ELEMENTWISE and any(e.dtype not in _FLOATS for e in node.arg.toposort())):
        return None
    window = windows[0]
    if users[id(window)] != 1 or window.dtype not in _FLOATS or _index_map(window.shape, node.shape) is None:
        return None
    strides = contiguous_strides(node.shape)
    for s in node.src:
        base, st = view_of(s)
        if base is window and not (st.mask is None and sym.equal(st.offset, 0)
                                   and all(sym.equal(a, b) or sym.equal(d, 1) for a, b, d in zip(st.strides, strides, node.shape))):
            return None
    return WindowEpilogue(node, window)


def _index_map(shape, to) -> list[int | None] | None:
    """For each dim of `to`, the dim of `shape` it is (None: a dim of 1), when the two shapes are
    the same but for dims of 1 (a grouped conv's (N, G, 1, H, W) read as (N, C, H, W)); else None."""
    ours = [i for i, d in enumerate(shape) if not sym.equal(d, 1)]
    theirs = [j for j, d in enumerate(to) if not sym.equal(d, 1)]
    if len(ours) != len(theirs) or not all(sym.equal(shape[i], to[j]) for i, j in zip(ours, theirs)):
        return None
    at = dict(zip(theirs, ours))
    return [at.get(j) for j in range(len(to))]


def window_epilogue_kernel(plan: WindowEpilogue, name: str, operand=None) -> tuple[str, list[Node], list[str]]:
    """(code, inputs, symbols) of the fused kernel: the WindowReduce's loops (`window_reduce`), the
    region evaluated on each value as it is stored. `operand` is unused (the im2col's signature)."""
    node, window = plan.node, plan.window
    inputs = buffer_sources(window)
    inputs += [b for b in buffer_sources(node) if b is not window and all(b is not x for x in inputs)]
    symbols = sorted(set(symbols_of(node)) | set(symbols_of(window)))
    reads = [s for s in node.src if view_of(s)[0] is window]
    dims = _index_map(window.shape, node.shape)

    def epilogue(idx: list[str], value: str, moving: set[int]) -> tuple[str, str]:  # idx: the window's index
        # the region's other float reads that stay put in the loop (a BatchNorm's per-channel
        # scale and shift) as locals before it, as `hoisted_element` does for the weights
        at = ["0LL" if d is None else idx[d] for d in dims]
        fixed = [s for s in node.src if view_of(s)[0] is not window and view_of(s)[0].dtype in _FLOATS
                 and not is_inline_scalar(view_of(s)[0]) and view_of(s)[1].mask is None
                 and all(sym.equal(st, 0) for d, st in zip(dims, view_of(s)[1].strides) if d in moving)]
        names = {id(s): f"e{k}" for k, s in enumerate(fixed)}
        setup = " ".join(f"const {compute_type(s.dtype)} e{k} = {read(s, at, pointer_of(s, inputs))};" for k, s in enumerate(fixed))
        with lanes(names | {id(s): store_value(window.dtype, value) for s in reads}):
            return setup, pointwise_value(node, at, inputs)

    flat = _flat_plane(window)
    if flat is None:
        body = _row_body(window, inputs, epilogue, node.dtype)
    else:
        body = _flat_body(window, *flat, inputs, epilogue, node.dtype)
    return f"{signature(name, node, inputs, symbols, False)} {{\n  {body}\n}}\n", inputs, symbols


# --- padded copies ----------------------------------------------------------------------------
def pad_copy(node: Node) -> tuple[list[Node], list[str], bool, str] | None:
    """A contiguous copy of a masked view (a conv's zero padding), or a Select of such a view
    and a scalar where the same mask is true (a max pool's -inf padding), per row: the mask of
    the other dims decides the whole row, the last dim's bounds split it into fill values, a
    plain vector copy (no test per element: the masked read, a select of a load that may be out
    of range, does not vectorize) and fill values. (inputs, symbols, err, body) like
    `window_reduce`, or None for any other node."""
    if not node.shape:
        return None
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
    inputs = buffer_sources(node)
    plain = Node(Op.VIEW, src.dtype, src.shape, (base,), ShapeTracker(st.shape, st.strides, st.offset))
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
