"""A WindowReduce's padded operand read in place (`WindowPad`, planned by `conv.window_pad`: a
depthwise conv's or a max pool's `pad`, never written): what each form reads with
(`pad_reads`), the copy's coordinates of a window row (`pad_row`), and the strided forms' phase rows, the fill where the pad's mask is
false: per output row (`padded_rows`), or per plane (`plane_rows`: every row of the copy a plane
reads filled once, then every output row of the plane reads them). The stride-1 form is
`conv._border_split_body`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Node
from luminal.kernels.cpu.conv_phases import phases_side_by_side
from luminal.kernels.render.cexpr import compute_type
from luminal.kernels.render.cstyle import pointer_of, read, unmasked, view_of


@dataclass(frozen=True)
class WindowPad:
    """A WindowReduce's operand that views a padded copy nothing else reads (a depthwise conv's or
    a max pool's `pad`): each output row reads the unpadded input, the pad's fill where the mask
    is false (stride 1: `conv._border_split_body`; strided rows: `padded_rows`; over many planes
    a plane at a time: `plane_rows`), so the copy is never written. Planned where the
    WindowReduce runs rows (`conv.window_pad`), the copy absorbed."""

    copy: Node  # the padded copy (CONTIGUOUS of a masked view, or a Select of one and a scalar)
    operand: int  # the WindowReduce's source reading it
    src: Node  # the masked view of the unpadded input
    fill: Node | None  # the Select's scalar (None: zeros)
    terms: tuple  # `steps.through`: per dim of the copy, ((window view dim, coefficient)..., offset)
    w: int  # the copy's dim the output row moves, by `s` a step
    s: int
    axis: int | None  # the window axis moving it too, by `u` a step (None: none)
    u: int


@dataclass(frozen=True)
class PadReads:
    """What both row forms of a `WindowPad` read with: the input unmasked (`ptr`), the fill (C, the
    compute type), the row dim's mask [lo_w, hi_w), and per window position along the row its
    offset into the copy's row (`xs`)."""

    kernel: list
    t: str
    plain: Node
    ptr: str
    fill: str
    lo_w: int
    hi_w: int
    xs: list


def _window_xs(kernel: list[int], pad: WindowPad) -> list[int]:
    """Per window position along the row, its offset into the copy's row (`PadReads.xs`)."""
    return [pad.u * k + pad.terms[pad.w][1] for k in range(kernel[pad.axis] if pad.axis is not None else 1)]


def pad_reads(node: Node, inputs: list[Node], pad: WindowPad) -> PadReads:
    kernel = [int(d) for d in node.src[0].shape[len(node.shape):]]
    t = compute_type(node.dtype)
    st = view_of(pad.src)[1]
    fill = f"(({t})({'0' if pad.fill is None else read(pad.fill, ['0'] * len(st.shape), None)}))"
    lo_w, hi_w = (int(v) for v in st.mask[pad.w])
    return PadReads(kernel, t, unmasked(pad.src), pointer_of(pad.src, inputs), fill, lo_w, hi_w, _window_xs(kernel, pad))


def _phase_lengths(width: int, s: int, xs: list[int]) -> dict[int, int]:
    """Phase p -> the elements of its row that a row of `width` outputs reads (window positions at
    `xs` along the copy's row, stride s)."""
    return {p: width + max(x // s for x in xs if x % s == p) for p in sorted({x % s for x in xs})}


def padded_rows(node: Node, inputs: list[Node], rows: list[str], inner: str, pad: WindowPad) -> tuple[str, object]:
    """As `conv_phases.strided_phases`, for an operand read through its padded copy (`WindowPad`): per output row,
    per value of the window axes that do not move along it, the copy's row it reads is filled from
    the unpadded input into s phase buffers (phase p: the row's elements s*j + p, so each term is
    a contiguous vector load, stride 1 or 2 alike), the fill value where the pad's mask is false:
    a row of the padding all fill, else fill, a plain vector copy and fill. The terms and their
    order are unchanged, and the values are the copy's, so are the bits."""
    nd, (_, r) = len(node.shape), node.arg
    pr = pad_reads(node, inputs, pad)
    t, s, xs, lo_w, hi_w, fill = pr.t, pad.s, pr.xs, pr.lo_w, pr.hi_w, pr.fill
    others = [a for a in range(r) if a != pad.axis]
    groups = padded_groups(node, pad, pr)
    width = int(node.shape[-1])
    length = _phase_lengths(width, s, xs)
    lines = []
    for g, values in enumerate(groups):
        coords, conds = pad_row(pad, rows, nd, dict(zip(others, values)), "x")
        value = read(pr.plain, coords, pr.ptr)
        lines.append(phases_side_by_side(g, length, s, lo_w, hi_w, t, fill, conds, value))

    def term_read(p: int, k: list[int]) -> str | None:
        if p != pad.operand:
            return None
        g = groups.index(tuple(k[a] for a in others))
        x = xs[k[pad.axis] if pad.axis is not None else 0]
        return f"pd{g}_{x % s}[{inner} + {x // s}LL]"

    return "\n        ".join(lines), term_read


def pad_row(pad: WindowPad, rows: list[str], nd: int, at: dict, x: str,
            given: dict[int, str] | None = None) -> tuple[list[str], list[str]]:
    """(the copy's coordinates, the mask's tests on its dims other than the row's) of the element
    at `x` along the row of the copy that output row `rows` reads at window position `at` (the
    window axes that do not move along the row); `given`: dims of the copy whose coordinate is
    this C expression instead (`plane_rows`' row of the copy)."""
    st = view_of(pad.src)[1]
    coords, conds = [], []
    for j, (coefs, off) in enumerate(pad.terms):
        if j == pad.w:
            coords.append(x)
            continue
        if given and j in given:
            coords.append(given[j])
        else:
            parts = [f"{rows[i]} * {c}LL" if i < nd - 1 else f"{at[i - nd] * c}LL" for i, c in coefs]
            coords.append("(" + " + ".join(parts + [f"{off}LL"]) + ")")
        lo, hi = (int(v) for v in st.mask[j])
        conds += ([f"{coords[j]} >= {lo}"] if lo > 0 else []) + ([f"{coords[j]} < {hi}"] if hi < int(st.shape[j]) else [])
    return coords, conds


def padded_groups(node: Node, pad: WindowPad, pr: PadReads) -> list[tuple]:
    """The values of the window axes that do not move along the row (`padded_rows`' groups)."""
    r = node.arg[1]
    return list(itertools.product(*(range(pr.kernel[a]) for a in range(r) if a != pad.axis)))


PLANE_MAX = 16384  # elements of one plane's phase rows (on the stack: 64 KiB in f32, held in L2)
PLANES_MIN = 16  # planes a kernel needs for `plane_rows`: the team splits planes, where rows split evenly
FLAT_STRIDED_MAX = 32  # strided rows under this many outputs run flat over their plane (`plane_rows`)


@dataclass(frozen=True)
class PlaneRows:
    """`plane_rows`' plan: `fill` (C) declares `pl` and fills it with the plane's rows of the copy
    (each `row_w` long), `term_read` reads a term from them (`hoisted_element`'s): of output row
    `rows[-1]`, or of flat element `inner` (`flat`: q = y * row_w + x)."""

    fill: str
    term_read: object
    n_planes: int
    row_w: int


def _plane_geometry(node: Node, pad: WindowPad, flat: bool) -> tuple | None:
    """(h, off, sh, axis, uh, n_rows, width_l, xs) of `plane_rows` (width_l: the length of every
    phase row, the longest phase's), or None (see there)."""
    nd, s = len(node.shape), pad.s
    if (s != 1 and flat and int(node.shape[-1]) >= FLAT_STRIDED_MAX) or (s < 2 and not flat) \
            or nd < 2 or not all(sym.is_static(d) for d in node.shape):
        return None
    moved = [j for j, (coefs, _) in enumerate(pad.terms) if j != pad.w and any(i == nd - 2 for i, _ in coefs)]
    if len(moved) != 1:
        return None
    h = moved[0]
    coefs, off = pad.terms[h]
    sh = next(c for i, c in coefs if i == nd - 2)
    along = [(i - nd, c) for i, c in coefs if i >= nd]
    if len(coefs) != 1 + len(along) or len(along) > 1 or sh <= 0:
        return None
    axis, uh = along[0] if along else (None, 0)
    if uh < 0 or (axis is not None and axis == pad.axis):
        return None
    if any(i >= nd - 2 for j, (cs, _) in enumerate(pad.terms) if j not in (pad.w, h) for i, _ in cs):
        return None
    kernel = [int(d) for d in node.src[0].shape[nd:]]
    xs = _window_xs(kernel, pad)
    ho, width, n_planes = int(node.shape[-2]), int(node.shape[-1]), int(sym.product(node.shape[:-2]))
    n_rows = sh * (ho - 1) + uh * ((kernel[axis] if axis is not None else 1) - 1) + 1
    length = _phase_lengths(width, s, xs)
    width_l = max(length.values())
    if n_planes < PLANES_MIN or -(-n_rows // sh) * sh * len(length) * width_l > PLANE_MAX:
        return None
    return h, off, sh, axis, uh, n_rows, width_l, xs


def plane_fits(node: Node, pad: WindowPad, flat: bool) -> bool:
    """Whether `plane_rows` takes WindowReduce `node` reading through `pad` (`conv.window_pad`)."""
    return _plane_geometry(node, pad, flat) is not None


def plane_rows(node: Node, inputs: list[Node], rows: list[str], inner: str, pad: WindowPad,
               flat: bool = False) -> PlaneRows | None:
    """Strided rows (`padded_rows`) a plane at a time: a stride-2 3x3 reads each row of the copy
    from two output rows (one from three at stride 3), each time through two dozen short loops
    filling its phases. Every row of the copy that the plane's
    output rows read (rows[-1] moving it by sh, at most one window axis by uh, the copy's other dims
    fixed over the plane) is filled once into `pl`, its phases side by side; each output row's
    terms then read their rows of it. `pl` holds the rows by row phase (r % sh), then column
    phase, each phase row width_l long, so that consecutive output rows read consecutive rows of
    `pl`: `flat` reads them as one run per plane (`conv._plane_flat_body`; narrow rows: a stride-1
    window `conv._flat_plane` takes, whose copy was written whole, or strided rows under
    FLAT_STRIDED_MAX outputs). The same terms in the same order, the copy's values: the same bits.
    None where the plane's rows pass PLANE_MAX, or with fewer than PLANES_MIN planes."""
    geometry = _plane_geometry(node, pad, flat)
    if geometry is None:
        return None
    h, off, sh, axis, uh, n_rows, width_l, xs = geometry
    nd, s = len(node.shape), pad.s
    pr = pad_reads(node, inputs, pad)
    phases = sorted({x % s for x in xs})
    n_rr = -(-n_rows // sh)  # rows of each row phase

    def at(ry: int, p: int, rr: str) -> str:  # the start of row rr of row phase ry, column phase p
        return f"(({ry * len(phases) + phases.index(p)}LL * {n_rr}LL + {rr}) * {width_l}LL)"

    coords, conds = pad_row(pad, rows, nd, {}, "x", {h: f"(r + {off}LL)"})
    rows_of = " ".join(f"{pr.t}* restrict pd0_{p} = pl + ((r % {sh}LL * {len(phases)}LL + {phases.index(p)}LL) * {n_rr}LL"
                       f" + r / {sh}LL) * {width_l}LL;" for p in phases)
    fill = f"""{pr.t} pl[{sh * len(phases) * n_rr * width_l}];  /* the plane's rows of the copy by row phase, column phase, row ({width_l} each) */
    for (long long r = 0; r < {n_rows}LL; ++r) {{
      {rows_of}
      {phases_side_by_side(0, dict.fromkeys(phases, width_l), s, pr.lo_w, pr.hi_w, pr.t, pr.fill, conds,
                           read(pr.plain, coords, pr.ptr), False)}
    }}"""

    def term_read(p: int, k: list[int]) -> str | None:
        if p != pad.operand:
            return None
        x = xs[k[pad.axis] if pad.axis is not None else 0]
        c = uh * k[axis] if axis is not None else 0  # the row below output row i's first: r = sh * i + c
        if flat:
            return f"pl[{at(c % sh, x % s, f'{c // sh}LL')} + {x // s}LL + {inner}]"
        return f"pl[{at(c % sh, x % s, f'{rows[-1]} + {c // sh}LL')} + {x // s}LL + {inner}]"

    return PlaneRows(fill, term_read, int(sym.product(node.shape[:-2])), width_l)
