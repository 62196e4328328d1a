"""A 2-D max pool as two 1-D passes (the CPU dialect's form of a large max WindowReduce).

out[y, x] is the max over a KH x KW window. Reduced along each input row first (h[r, x]: the max
of row r's KW terms under output column x), then down the column of row maxima (out[y, x]: the
max of h[r, x] over the window's KH rows), each output costs KW + KH terms where the window
holds KH * KW, and both passes are vector loops along the output row. An SPP block's 13x13 pool
does 26 compares an output instead of 169.

The bits are the window's own: `lum_max_nan(a, b)` keeps a unless b is larger or NaN, so the
max of a sequence is its last NaN if it has one, else the first of its largest values (-0.0
before 0.0 when -0.0 comes first), and the max of consecutive runs, each reduced the same way
and taken in order, is the same element (`render.conv.max_tree` pairs terms by the same
argument). The window's row-major order is the runs of its rows, in order, so reducing each row
then the rows gives what the chain over the window gives. (Columns first would reorder it: a
-0.0 at (0, 1) comes before a 0.0 at (1, 0), which a column-first pass puts first.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op
from luminal.kernels.render.cexpr import c_dim, compute_type
from luminal.kernels.render.conv import UNROLL, max_tree
from luminal.kernels.render.cstyle import pointer_of, view_of
from luminal.kernels.render.dialect import PAR_MIN, C

ROWS_MAX = 8192  # elements of the row maxima of one plane (a stack buffer per plane)
# the two passes' terms against the window's at which they are taken: a 3x3 stride-2 pool's
# are as many, yet its passes are vector loops on contiguous rows where the one-pass window
# fills phase rows first (README, "Convolution and pooling")
WORTH = 1.1
TERMS_MAX = 32  # the most terms of one 1-D pass, unrolled
_DTYPES = (DType.F32, DType.F64, DType.I32, DType.I64)  # stored as computed: no conversion on load


@dataclass(frozen=True)
class SeparableMax:
    """Where a max WindowReduce's single operand reads its buffer (element strides): `plane` per
    output dim before the last two and `offset` (dim expressions: a dynamic batch), `ah`, `aw` per
    output row and column, `bh`, `bw` per window row and column (static). Row r of the row maxima
    starts at r * g (g = gcd(ah, bh)); output row y's window reads rows y * a + k * b (a = ah / g,
    b = bh / g). The outputs go in bands of `band` rows, a band's row maxima on the stack."""

    kh: int
    kw: int
    oh: int
    ow: int
    plane: tuple
    offset: object
    ah: int
    aw: int
    bh: int
    bw: int
    g: int
    band: int

    def rows(self, band: int) -> int:
        """The rows of maxima that `band` output rows read."""
        return (band - 1) * (self.ah // self.g) + (self.kh - 1) * (self.bh // self.g) + 1

    @property
    def terms(self) -> int:
        bands = -(-self.oh // self.band)
        return bands * self.rows(self.band) * self.ow * self.kw + self.oh * self.ow * self.kh

    @property
    def decisive(self) -> bool:
        """Faster than the one-pass window even where that one reads its padding in place (no
        padded copy, `conv.window_pad`) or runs inside the region after it (`conv.window_epilogue`):
        at most half its terms, or a window past `UNROLL` terms (a loop per output there, which
        does not vectorize). Otherwise the two passes are taken only where the one-pass window
        would read a padded copy too."""
        return 2 * self.terms <= self.oh * self.ow * self.kh * self.kw or self.kh * self.kw > UNROLL


def separable_max(node: Node) -> SeparableMax | None:
    """The two-pass plan of a max WindowReduce over a 2-D window, worth it (at most `WORTH` times
    the window's terms, or a window past `UNROLL` terms), whose operand reads its buffer through an
    unmasked view, the output plane and the window static with non-negative strides, and whose
    bands' rows of maxima are every row of a stride g: a band's output rows and the window reach
    each row from its first to its last (a dilation that skips rows would leave some unread, and
    reading them could leave the buffer); else None. The passes read only what the window reads."""
    if node.op is not Op.WINDOW_REDUCE or node.arg != ("max", 2) or len(node.src) != 1 or node.dtype not in _DTYPES:
        return None
    nd = len(node.shape)
    src = node.src[0]
    _, st = view_of(src)
    if nd < 2 or st.mask is not None:
        return None
    spatial = (*node.shape[nd - 2:], *src.shape[nd:], *st.strides[nd - 2:])
    if not all(sym.is_static(d) for d in spatial):
        return None
    oh, ow, kh, kw, ah, aw, bh, bw = (int(d) for d in spatial)
    if kh < 2 or kw < 2 or kh > TERMS_MAX or kw > TERMS_MAX or min(ah, aw, bh, bw) < 0 or bh == 0 or oh * ow == 0:
        return None
    if oh == 1:
        ah = 0
    g = math.gcd(ah, bh)
    a, b = ah // g, bh // g
    band = oh if a == 0 else min(oh, (ROWS_MAX // ow - 1 - (kh - 1) * b) // a + 1)
    if band < 1:
        return None
    plan = SeparableMax(kh, kw, oh, ow, tuple(st.strides[:nd - 2]), st.offset, ah, aw, bh, bw, g, band)
    if plan.rows(band) * ow > ROWS_MAX:  # (a == 0: one output row, whose maxima must fit too)
        return None
    for n in {band, oh % band or band}:  # a whole band and the last one
        reached = {y * a + k * b for y in range(n) for k in range(kh)}
        if len(reached) != max(reached) + 1:
            return None
    return plan if plan.terms <= WORTH * oh * ow * kh * kw or kh * kw > UNROLL else None


def separable_max_body(node: Node, plan: SeparableMax, inputs: list[Node]) -> str:
    """The kernel's body: per plane and band of output rows (in parallel), the band's row maxima
    into a stack buffer, then its outputs from them."""
    t, ct = compute_type(node.dtype), C.ctype(node.dtype)
    ptr = pointer_of(node.src[0], inputs)
    planes = node.shape[:-2]
    # a plane's first element in the operand's buffer (the plane number split into its dims)
    split, at = [], [f"({c_dim(plan.offset)})"]
    for k in reversed(range(len(planes))):
        split.append(f"const long long p{k} = q % {c_dim(planes[k])}; q /= {c_dim(planes[k])};")
        at.append(f"p{k} * {c_dim(plan.plane[k])}")
    # each pass's terms in order, paired level by level (a chain is one dependent compare and
    # select a term; in-order pairs give the same element)
    row_stmts, row_max = max_tree(t, [f"line[x * {plan.aw}LL + {k * plan.bw}LL]" for k in range(plan.kw)])
    a, b, ow = plan.ah // plan.g, plan.bh // plan.g, plan.ow
    col_stmts, col_max = max_tree(t, [f"h0[x + {k * b * ow}LL]" for k in range(plan.kh)])
    n_bands = -(-plan.oh // plan.band)
    per_task = plan.terms // n_bands
    return f"""const long long n_tasks = {c_dim(sym.product(planes))} * {n_bands}LL;
  #pragma omp parallel for schedule(static) if (n_tasks > 1 && n_tasks * {per_task}LL >= {PAR_MIN})
  for (long long task = 0; task < n_tasks; ++task) {{
    const long long pl = task / {n_bands}LL, y0 = task % {n_bands}LL * {plan.band}LL;
    const long long y1 = lum_min(y0 + {plan.band}LL, {plan.oh}LL);
    const long long n_rows = (y1 - 1 - y0) * {a}LL + {(plan.kh - 1) * b + 1}LL;
    long long q = pl; (void)q;
    {" ".join(split)}
    const {ct}* restrict src = {ptr} + {" + ".join(at)} + y0 * {plan.ah}LL;
    {t} hb[{plan.rows(plan.band) * ow}];  /* the band's row r: maxima under each output column, hb[r * {ow} + x] */
    for (long long r = 0; r < n_rows; ++r) {{
      const {ct}* restrict line = src + r * {plan.g}LL;
      #pragma omp simd
      for (long long x = 0; x < {ow}LL; ++x) {{
        {row_stmts}
        hb[r * {ow}LL + x] = {row_max};
      }}
    }}
    {ct}* restrict dst = out + pl * {plan.oh * ow}LL;
    for (long long y = y0; y < y1; ++y) {{
      const {t}* h0 = hb + (y - y0) * {a * ow}LL;
      #pragma omp simd
      for (long long x = 0; x < {ow}LL; ++x) {{
        {col_stmts}
        dst[y * {ow}LL + x] = {col_max};
      }}
    }}
  }}"""
