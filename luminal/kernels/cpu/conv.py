"""The C dialect's convolution kernels.

WindowReduce (direct convolutions, pooling): one vector loop per output row, the reads that stay
put along it (a conv's weights) loaded once per row before it (`_row_body`); planes under 64
wide as one flat vector loop per plane (`_flat_plane`), not rows of 14 or 7. A WindowReduce read
only by the pointwise region after it (BatchNorm, ReLU6, hardswish) is computed in that region's
kernel, each value going straight into it (`WindowEpilogue`, planned by `conv_gemm.fusion_plan`).
A window past `UNROLL` terms runs its loops outside the loop over the row, each output's
accumulator in a row buffer (`_window_outside_body`); a large or wide max pool runs as two 1-D
passes (`max_pool.py`). Strided rows read through phase rows (`conv_phases.py`). Padded
copies are `pad_copy.py`'s; a padded operand nothing else reads is read in place (`WindowPad`,
`conv_padded.py`), over 16 planes or more a plane at a time (`_plane_body`, `_plane_flat_body`).

The convolutions that are GEMMs (im2col tiles, GEMM epilogues) and the fused kernels
`program.py` plans are in `conv_gemm.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import UNARY, Node, Op
from luminal.hlir.shape import ShapeTracker, contiguous_strides
from luminal.kernels.cpu.conv_padded import (
    WindowPad,
    pad_reads,
    pad_row,
    padded_groups,
    padded_rows,
    plane_fits,
    plane_rows,
)
from luminal.kernels.cpu.conv_phases import PHASE_MAX, strided_phases
from luminal.kernels.cpu.max_pool import separable_max, separable_max_body
from luminal.kernels.cpu.pad_copy import pad_parts
from luminal.kernels.cpu.steps import through
from luminal.kernels.render.cexpr import c_dim, compute_type
from luminal.kernels.render.conv import UNROLL, hoisted_element, window_loops, window_step
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
    separable = separable_max(node)
    if separable is not None:
        return inputs, symbols_of(node), False, separable_max_body(node, separable, inputs)
    flat = _flat_plane(node)
    body = _row_body(node, inputs) if flat is None else _flat_body(node, *flat, inputs)
    return inputs, symbols_of(node), False, body


def _row_body(node: Node, inputs: list[Node], epilogue=None, out_dtype: DType | None = None,
              pad: WindowPad | None = None) -> str:
    """Per output row, the reads that do not move along it (a conv's weights) into locals, then one
    vector loop over the row. `epilogue(idx, value, moving)`: (setup, the value stored, of
    `out_dtype`) given the window's, the window dims in `moving` changing inside the loop
    (`WindowEpilogue`); `pad`: the padded operand read through its copy (`conv_padded.padded_rows`)."""
    outer, nd = node.shape[:-1], len(node.shape)
    rows, inner = [f"i{k}" for k in range(nd - 1)], f"i{nd - 1}"  # the row loop's names (`_c_rows`)
    out_dtype = out_dtype or node.dtype
    if pad is not None and (pad.s > 1 or _flat_plane(node) is not None):
        flat = _plane_flat_body(node, inputs, pad, epilogue, out_dtype)
        if flat is not None:
            return flat
    if pad is not None and pad.s == 1:
        body = _border_split_body(node, inputs, rows, inner, pad, epilogue, out_dtype)
    elif _window_outside(node):
        body = _window_outside_body(node, inputs, rows, inner, epilogue, out_dtype)
    else:
        plane = plane_rows(node, inputs, rows, inner, pad) if pad is not None else None
        if plane is not None:
            return _plane_body(node, inputs, plane, epilogue, out_dtype)
        phases = padded_rows(node, inputs, rows, inner, pad) if pad is not None else strided_phases(node, inputs, rows, inner)
        setup, stmts, value = hoisted_element(node, rows + [inner], inputs, inner, phases and phases[1])
        if phases:
            setup = f"{setup}\n        {phases[0]}"
        if epilogue is not None:
            more, value = epilogue(rows + [inner], value, {nd - 1})
            setup = f"{setup} {more}"
        body = f"""{setup}
        {C.ctype(out_dtype)}* restrict dst = out + row * n_in;
        {_row_loop(inner, "0", "n_in", stmts, store_value(out_dtype, value), True)}"""
    per_row = node.shape[-1] * sym.product(node.src[0].shape[nd:])
    # the rows as the shared generator steps them (a thread's first row split into indices, then
    # carries: no division per row, which short rows would feel)
    return f"const long long n_in = {c_dim(node.shape[-1])};\n  " + _c_rows(outer, "i", f"n_rows * {c_dim(per_row)}", body, per_row)


def _plane_body(node: Node, inputs: list[Node], plane, epilogue, out_dtype: DType) -> str:
    """Strided rows a plane at a time (`conv_padded.plane_rows`): the team splits the planes; per
    plane its rows of the copy are filled, then each output row is `_row_body`'s vector loop."""
    nd = len(node.shape)
    rows, inner = [f"i{k}" for k in range(nd - 1)], f"i{nd - 1}"
    _, lines = unravel("plane", node.shape[:-2], "i")
    setup, stmts, value = hoisted_element(node, rows + [inner], inputs, inner, plane.term_read)
    if epilogue is not None:
        more, value = epilogue(rows + [inner], value, {nd - 1})
        setup = f"{setup} {more}"
    ho, width = int(node.shape[-2]), int(node.shape[-1])
    work = plane.n_planes * ho * width * sym.product(node.src[0].shape[nd:])
    return f"""const long long n_in = {width}LL;
  {"#pragma omp parallel for schedule(static)" if work >= PAR_MIN else ""}
  for (long long plane = 0; plane < {plane.n_planes}LL; ++plane) {{
    {" ".join(lines)}
    {plane.fill}
    for (long long {rows[-1]} = 0; {rows[-1]} < {ho}LL; ++{rows[-1]}) {{
      const long long row = plane * {ho}LL + {rows[-1]};
      {setup}
      {C.ctype(out_dtype)}* restrict dst = out + row * n_in;
      {_row_loop(inner, "0", "n_in", stmts, store_value(out_dtype, value), True)}
    }}
  }}"""


def _plane_flat_body(node: Node, inputs: list[Node], pad: WindowPad, epilogue, out_dtype: DType) -> str | None:
    """Narrow rows over their padding a plane at a time (`conv_padded.plane_rows`, flat): per plane
    its rows of the copy in `pl` (a stack buffer: at stride 1 not a copy written whole and read
    back), then one flat vector loop over them as `_flat_body`'s, element q = y * row_w + x (the
    q with x >= W computed from the next row's values, then dropped). None where it does not
    apply (an operand other than the padded one moving over the plane)."""
    nd, h, w = len(node.shape), int(node.shape[-2]), int(node.shape[-1])
    rows = [f"i{k}" for k in range(nd - 2)]  # `_flat_body`'s names of the plane's dims
    plane = plane_rows(node, inputs, [*rows, "y"], "q", pad, True)
    if plane is None:
        return None
    n = (h - 1) * plane.row_w + w
    srcs = []  # the window over the flat run: the padded operand's reads are `plane.term_read`'s
    for p, src in enumerate(node.src):
        base, st = view_of(src)
        if p != pad.operand and (st.mask is not None or not all(sym.equal(st.strides[d], 0) for d in (nd - 2, nd - 1))):
            return None
        flat = ShapeTracker((*st.shape[:nd - 2], n, *st.shape[nd:]), (*st.strides[:nd - 2], 0, *st.strides[nd:]), st.offset)
        srcs.append(Node(Op.VIEW, src.dtype, flat.shape, (base,), flat))
    flat = Node(Op.WINDOW_REDUCE, node.dtype, (*node.shape[:-2], n), tuple(srcs), node.arg)
    return _flat_body(node, flat, plane.row_w, inputs, epilogue, out_dtype, plane)


ROW_ACC_MAX = 4096  # outputs of one row accumulated at once (a stack buffer per row)


def _window_outside(node: Node) -> bool:
    """A window past `UNROLL` terms over static rows of at most ROW_ACC_MAX outputs: its loops run
    outside the loop over the row (`_window_outside_body`). Inside it, per output, they leave the
    row loop scalar (README, "Convolution and pooling")."""
    kernel = node.src[0].shape[len(node.shape):]
    return (sym.product(kernel) > UNROLL and sym.is_static(node.shape[-1])
            and 0 < int(node.shape[-1]) <= ROW_ACC_MAX)


def _window_outside_body(node: Node, inputs: list[Node], rows: list[str], inner: str, epilogue,
                         out_dtype: DType) -> str:
    """A row's outputs accumulated side by side: for each window position (in order), one vector
    loop adds (or maxes) its term into every output's accumulator. Each output's terms are
    combined in the order of the loop inside it, from the same identity, so are the bits."""
    t = compute_type(node.dtype)
    init, step = window_step(node, rows + [inner], inputs, f"acc[{inner}]")
    value, setup = f"acc[{inner}]", ""
    if epilogue is not None:
        setup, value = epilogue(rows + [inner], value, {len(node.shape) - 1})
    return f"""{t} acc[{int(node.shape[-1])}];
        for (long long {inner} = 0; {inner} < n_in; ++{inner}) acc[{inner}] = {init};
        {window_loops(node)}{{
          #pragma omp simd
          for (long long {inner} = 0; {inner} < n_in; ++{inner}) acc[{inner}] = {step};
        }}
        {setup}
        {C.ctype(out_dtype)}* restrict dst = out + row * n_in;
        {_row_loop(inner, "0", "n_in", "", store_value(out_dtype, value), True)}"""


def _row_loop(inner: str, lo: str, hi: str, stmts: str, stored: str, simd: bool) -> str:
    """C: outputs lo .. hi of the row, `dst[inner] = stored` after `stmts`."""
    return f"""{"#pragma omp simd" if simd else ""}
        for (long long {inner} = {lo}; {inner} < {hi}; ++{inner}) {{
          {stmts}
          dst[{inner}] = {stored};
        }}"""


def _two_passes(window: Node) -> bool:
    """A max pool that runs as two 1-D passes whatever its padding and readers (`max_pool.py`)."""
    plan = separable_max(window)
    return plan is not None and plan.decisive


def window_pad(window: Node, users) -> WindowPad | None:
    """The `WindowPad` of WindowReduce `window` (`users`: readers by id), or None: static rows (flat
    planes only a plane at a time, `conv_padded.plane_fits`; otherwise they keep reading the copy:
    in place was slower there, README "Padding read in place"), an unrolled window, one operand reading a single-use padded copy
    whose row dim the output row and at most one window axis move, the copy's other dims fixed
    along the row."""
    if window.op is not Op.WINDOW_REDUCE or window.dtype not in _FLOATS or not window.shape or _two_passes(window):
        return None
    nd, (_, r) = len(window.shape), window.arg
    kernel = window.src[0].shape[nd:]
    if not all(sym.is_static(d) for d in (*kernel, *window.shape)) or sym.product(kernel) > UNROLL:
        return None
    flat = _flat_plane(window) is not None  # read through only a plane at a time (`conv_padded.plane_rows`)
    found = []
    for p, src in enumerate(window.src):
        copy, st = view_of(src)
        parts = pad_parts(copy)
        if parts is not None and users.get(id(copy)) == 1 and st.mask is None and all(sym.is_static(d) for d in copy.shape):
            found.append((p, copy, parts))
    if len(found) != 1:
        return None
    p, copy, (src, fill) = found[0]
    terms = through(view_of(window.src[p])[1], copy.shape)
    if terms is None:
        return None
    moved = [j for j, (coefs, _) in enumerate(terms) if any(i == nd - 1 for i, _ in coefs)]
    if len(moved) != 1:
        return None
    w = moved[0]
    s = next(c for i, c in terms[w][0] if i == nd - 1)
    along = [(i - nd, c) for i, c in terms[w][0] if i >= nd]
    if len(along) > 1 or len(along) + 1 != len(terms[w][0]):
        return None
    axis, u = along[0] if along else (None, 0)
    if axis is not None and any(i == nd + axis for j, (coefs, _) in enumerate(terms) if j != w for i, _ in coefs):
        return None
    groups = sym.product([kernel[a] for a in range(r) if a != axis])
    reach = max(u * k + terms[w][1] for k in range(int(kernel[axis]) if axis is not None else 1)) // s
    if int(groups) * s * (int(window.shape[-1]) + reach) > PHASE_MAX:
        return None
    pad = WindowPad(copy, p, src, fill, tuple((tuple(c), o) for c, o in terms), w, s, axis, u)
    return None if flat and not plane_fits(window, pad, True) else pad


def _border_split_body(node: Node, inputs: list[Node], rows: list[str], inner: str, pad: WindowPad, epilogue,
                       out_dtype: DType) -> str:
    """A stride-1 row (`_row_body`) reading its padded operand in place: where every window
    position is inside the input (a row away from the top and bottom, the columns away from the
    sides: all but a few) the terms read the input directly in one vector loop; the other
    outputs test each term against the pad's mask (the fill where it is false). The terms and
    their order are the unpadded kernel's, and the values the copy's, so are the bits. (Not
    staged in row buffers as strided rows are: the vector loads would straddle the stores just
    made.)"""
    nd, (_, r) = len(node.shape), node.arg
    pr = pad_reads(node, inputs, pad)
    xs, lo_w, hi_w = pr.xs, pr.lo_w, pr.hi_w
    row_conds: list[str] = []

    def reader(masked: bool):
        def term_read(p: int, k: list[int]) -> str | None:
            if p != pad.operand:
                return None
            at = {a: k[a] for a in range(r) if a != pad.axis}
            x = f"({inner} + {xs[k[pad.axis] if pad.axis is not None else 0]}LL)"
            coords, conds = pad_row(pad, rows, nd, at, x)
            value = f"(({pr.t}){read(pr.plain, coords, pr.ptr)})"
            if not masked:
                row_conds.extend(c for c in conds if c not in row_conds)
                return value
            tests = " && ".join(conds + [f"{x} >= {lo_w}", f"{x} < {hi_w}"])
            return f"(({tests}) ? {value} : {pr.fill})"
        return term_read

    # both forms hoist the same reads (the weights) under the same names, in the same order: the
    # padded operand's reads, the only ones that differ, are never hoisted
    setup, stmts, value = hoisted_element(node, rows + [inner], inputs, inner, reader(False))
    _, stmts_m, value_m = hoisted_element(node, rows + [inner], inputs, inner, reader(True))
    if epilogue is not None:
        more, value = epilogue(rows + [inner], value, {nd - 1})
        _, value_m = epilogue(rows + [inner], value_m, {nd - 1})
        setup = f"{setup} {more}"
    width = int(node.shape[-1])
    c_lo = min(width, max(0, lo_w - min(xs)))  # the outputs whose every term is inside the input
    c_hi = max(c_lo, min(width, hi_w - max(xs)))
    stored, stored_m = store_value(out_dtype, value), store_value(out_dtype, value_m)
    # a row with a window row outside the input (a padded 3x3's top and bottom rows): its window
    # rows staged with the fill (`conv_padded.padded_rows`, as strided rows are), then one vector loop rather
    # than a scalar loop testing each term; the same values in the same order. Past PHASE_MAX
    # staged elements (a very wide row), tested terms.
    staged = None
    if row_conds and len(padded_groups(node, pad, pr)) * (width + max(xs) + 1) <= PHASE_MAX:
        lines, staged_read = padded_rows(node, inputs, rows, inner, pad)
        _, stmts_s, value_s = hoisted_element(node, rows + [inner], inputs, inner, staged_read)
        if epilogue is not None:
            _, value_s = epilogue(rows + [inner], value_s, {nd - 1})
        staged = f"""{{  /* a window row outside the input: its rows staged */
          {lines}
          {_row_loop(inner, "0", "n_in", stmts_s, store_value(out_dtype, value_s), True)}
        }}"""
    inside = " && ".join(row_conds) or "1"
    return f"""{setup}
        {C.ctype(out_dtype)}* restrict dst = out + row * n_in;
        const int inside = {inside};  /* every window row of this output row in the input */
        if ({"inside" if staged else "1"}) {{
        const long long c_lo = inside ? {c_lo}LL : n_in, c_hi = inside ? {c_hi}LL : n_in;
        const long long c_8 = c_lo + (c_hi - c_lo) / 8 * 8;
        {_row_loop(inner, "0", "c_lo", stmts_m, stored_m, False)}
        {_row_loop(inner, "c_lo", "c_8", stmts, stored, True)}
        /* the rest as the last 8, again (the same values: no scalar tail beside the borders) */
        const long long c_t = c_hi - c_lo >= 8 ? c_hi - 8 : c_8;
        {_row_loop(inner, "c_t", "c_hi", stmts, stored, True)}
        {_row_loop(inner, "c_hi", "n_in", stmts_m, stored_m, False)}
        }}{" else " + staged if staged else ""}"""


def _flat_plane(node: Node) -> tuple[Node, int] | None:
    """Short output rows (a depthwise conv at 14x14 or 7x7: an 8-wide vector loop and a scalar
    tail of 6, or all scalar) as one flat run over the plane: when every operand reads the last
    two output dims (H, W) at strides (Wq * s, s), Wq the row width of the input plane (W plus
    the window's extent less one: a stride-1 window), element q = h * Wq + w of the flat run
    reads what element (h, w) reads, and the q with w >= W read in-bounds values of the next row
    (computed, then dropped). (the WindowReduce over the flat run of (H - 1) * Wq + W elements,
    Wq), or None."""
    shape, nd = node.shape, len(node.shape)
    if nd < 2 or not all(sym.is_static(d) for d in shape[-2:]) or _window_outside(node):
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


def _flat_body(node: Node, flat: Node, wq: int, inputs: list[Node], epilogue=None, out_dtype: DType | None = None,
               plane=None) -> str:
    """Per plane: the flat run into a stack buffer (one vector loop), then its rows W wide to out
    (through `epilogue`, as in `_row_body`). `plane` (`conv_padded.PlaneRows`, `_plane_flat_body`):
    the padded operand's rows filled into `pl` first, its terms read from there."""
    h, w = int(node.shape[-2]), int(node.shape[-1])
    outer = node.shape[:-2]
    rows, lines = unravel("row", outer, "i")
    out_dtype = out_dtype or node.dtype
    more, result = "", f"plane[y * {wq}LL + x]"
    if epilogue is not None:
        more, result = epilogue(rows + ["y", "x"], result, {len(node.shape) - 2, len(node.shape) - 1})
    setup, stmts, value = hoisted_element(flat, rows + ["q"], inputs, "q", plane and plane.term_read)
    t = compute_type(node.dtype)
    terms = sym.product(node.src[0].shape[len(node.shape):])
    if plane is None:
        pragma, what = f"#pragma omp parallel for if (n_rows > 1 && n_rows * {h * w}LL * {c_dim(terms)} >= {PAR_MIN})", "element"
    else:  # static sizes: the team only where the work reaches PAR_MIN
        pragma, what = "#pragma omp parallel for schedule(static)" if plane.n_planes * h * w * terms >= PAR_MIN else "", "output"
        lines.append(plane.fill)
    setup = "\n    ".join(lines + [setup, more])
    return f"""const long long n_rows = {c_dim(sym.product(outer))}, n_q = {flat.shape[-1]}LL;
  {pragma}
  for (long long row = 0; row < n_rows; ++row) {{
    {setup}
    {t} plane[{h * wq}];  /* {what} (y, x) at y * {wq} + x */
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

    node: Node  # the region (a FusedElementwise, or one pointwise op): the kernel writes its buffer; or the WindowReduce
    window: Node  # the WindowReduce, absorbed (unless it is `node`: a padded copy's reader without a region)
    pad: WindowPad | None = None  # its operand's padded copy, read through (absorbed)

    @property
    def absorbed(self) -> list[Node]:
        return ([self.window] if self.window is not self.node else []) + ([self.pad.copy] if self.pad is not None else [])


_FLOATS = (DType.F32, DType.F64)
_EPILOGUES = frozenset({Op.FUSED_ELEMENTWISE, Op.CONTIGUOUS, Op.ADD, Op.MUL, Op.MAXIMUM, Op.EXP, Op.SIGMOID}) | UNARY


def float_region(expr) -> bool:
    """A region an epilogue may compute: float values, and bool ones (comparisons feeding a Select:
    erf's sign in an exact GELU), never an integer, whose Mod could raise the error flag that an
    epilogue's kernel does not take."""
    return all(e.dtype in _FLOATS or e.dtype is DType.BOOL for e in expr.toposort())


def window_epilogue(node: Node, users) -> WindowEpilogue | None:
    """The plan fusing a pointwise `node` into the WindowReduce it reads, when that is the
    WindowReduce's only reader (`users`: readers by id, a graph output counting as one), every
    read of it is element for element (same shape, contiguous) and the region is float (no
    error flag); else None."""
    if node.op not in _EPILOGUES or not node.shape or node.dtype not in _FLOATS:
        return None
    windows = [b for b in buffer_sources(node) if b.op is Op.WINDOW_REDUCE]
    if len(windows) != 1 or (node.op is Op.FUSED_ELEMENTWISE and not float_region(node.arg)):
        return None
    window = windows[0]
    if (users[id(window)] != 1 or window.dtype not in _FLOATS or _index_map(window.shape, node.shape) is None
            or _two_passes(window)):  # the two passes run apart (`max_pool.py`)
        return None
    strides = contiguous_strides(node.shape)
    for s in node.src:
        base, st = view_of(s)
        if base is window and not (st.mask is None and sym.equal(st.offset, 0)
                                   and all(sym.equal(a, b) or sym.equal(d, 1) for a, b, d in zip(st.strides, strides, node.shape))):
            return None
    return WindowEpilogue(node, window, window_pad(window, users))


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
    node, window, pad = plan.node, plan.window, plan.pad
    inputs = [b for b in buffer_sources(window) if pad is None or b is not pad.copy]
    if pad is not None:
        inputs += [b for b in buffer_sources(pad.copy) if all(b is not x for x in inputs)]
    inputs += [b for b in buffer_sources(node) if b is not window and all(b is not x for x in inputs)]
    symbols = sorted(set(symbols_of(node)) | set(symbols_of(window)) | set(symbols_of(pad.copy) if pad is not None else ()))
    if node is window:  # the WindowReduce alone, its padded operand read through
        body = _row_body(window, inputs, pad=pad)
        return f"{signature(name, node, inputs, symbols, False)} {{\n  {body}\n}}\n", inputs, symbols
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

    flat = None if pad is not None else _flat_plane(window)
    if flat is None:
        body = _row_body(window, inputs, epilogue, node.dtype, pad)
    else:
        body = _flat_body(window, *flat, inputs, epilogue, node.dtype)
    return f"{signature(name, node, inputs, symbols, False)} {{\n  {body}\n}}\n", inputs, symbols
