"""A convolution without its im2col matrix (`steps.DirectConv`): the C of the fused im2col GEMM's
direct path (`conv_gemm.im2col_gemm_kernel` puts it first).

Per call the input is rewritten once as phase planes (its padding included: the pad's mask gives
the zeros), then tiles of output positions, one per thread, each multiply the weight by B read
in place from the planes (`c/direct_conv.h`), and write the positions that exist out of the
extended grid into the output, through the GEMM's epilogue region (BatchNorm, ReLU, a residual)
on the way: the region reads the product from the tile and writes the output once (not a copy
and then a second pass of the region over the output). The im2col path fills every tile of B first and then hands it
to a BLAS that packs it again: for a 32-channel 3x3 convolution that is two passes over nine
times the input per product of K = 288 multiply-adds a column. The micro-kernel's vectors are as
wide as the build's (8 floats on AVX2, 16 on AVX-512: `steps.dc_kernels`), and the direct path
takes the convolutions to the rate of a large GEMM on both (README: "The compiled CPU backend"). Not at precision "float64", which keeps
the im2col path's widened GEMM.

The same micro-kernel runs a grouped 1x1 convolution's GEMMs with their epilogue, a group per
thread (`conv_gemm.gemm_epilogue_kernel`), B's rows the input's channel planes in place: AVX2's
tiles only. An ungrouped 1x1 convolution is a BLAS GEMM on both ISAs (measured faster).

`LUMINAL_CONV`: "auto" (default: direct on x86 with AVX2 and FMA, AVX-512 included, where it was
measured; im2col tiles and the BLAS elsewhere), "direct" (wherever the shape
allows, for tests on any machine) or "im2col" (the BLAS for both). A program's own choice
(`Choices.conv`, which the search times) overrides it.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass

from luminal.hlir.ops import Node
from luminal.kernels.cpu import choices, sgemm
from luminal.kernels.cpu.prelude import c_source
from luminal.kernels.cpu.steps import (
    DC_KERNELS_AVX512,
    DC_RATE,
    DC_SLACK,
    DirectConv,
    dc_kernels,
)
from luminal.kernels.render.cstyle import pointer_of, read, unmasked, unravel, view_of

# the planes' fill runs on the team from this many floats, under PAR_MIN: the convolution's own
# parallel region follows at once, so the team is awake and one more region costs little
FILL_PAR_MIN = 8192

MICRO_KERNEL = c_source("direct_conv.h")
# the path of the program being rendered (`Choices.conv`: `render_program(conv=...)`), None: the
# environment's; scoped to the rendering thread's context, never a process-wide setting
_CHOSEN: contextvars.ContextVar[str | None] = contextvars.ContextVar("luminal_conv_path", default=None)


@contextlib.contextmanager
def chosen(path: str | None):
    """Render under a program's choice of convolution path (`choices.CONVS`, None: the default)."""
    token = _CHOSEN.set(path)
    try:
        yield
    finally:
        _CHOSEN.reset(token)


def wanted() -> bool:
    """Whether convolutions take the direct path (see the module's doc; `choices.conv_path`)."""
    return choices.conv_path(_CHOSEN.get()) == "direct"


def takes(reads_per_input: float) -> bool:
    """Whether a convolution takes the direct path: wherever `wanted()`, except that the default
    (auto) leaves on the im2col tiles one whose im2col copy is no larger than its input
    (`reads_per_input`, the copy's elements over the input's, at most 1: a strided 1x1
    convolution, a ResNet shortcut, whose copy is a subsample while the planes would copy every
    phase of the input and read one; README, "Direct convolutions"). A chosen path
    (LUMINAL_CONV=direct, the search's candidate) takes every shape it can."""
    if not wanted():
        return False
    if _CHOSEN.get() is not None or choices.conv_mode() != "auto":
        return True
    return reads_per_input > 1


def _x_index(g: DirectConv, names: list[str]) -> str:
    """The planes' index (C) of X's element at `names` (one C expression per dim of X)."""
    other, stride = [], 1
    for j in reversed(g.others):
        other.append(f"({names[j]}) * {stride}LL" if stride != 1 else f"({names[j]})")
        stride *= g.space[j]
    flat = " + ".join(reversed(other)) or "0"
    y = names[g.h] if g.h is not None else "0"
    x = names[g.w]
    phase = f"(({y}) % {g.sh} * {g.sw} + ({x}) % {g.sw})" if g.sh * g.sw > 1 else "0"
    return (f"({flat}) * {g.sh * g.sw * g.plane}LL + {phase} * {g.plane}LL + ({y}) / {g.sh} * {g.wq}LL"
            f" + ({x}) / {g.sw}")


def _fill_row(g: DirectConv, x_src: Node, names: list[str], inputs: list[Node]) -> str:
    """C writing one row of X (its other dims at `names`, the moved one "xw") into its planes:
    per phase pw, the plane's row is X's elements xw = xq * sw + pw, contiguous writes. A padded
    input's mask splits each into zeros, plain reads (vectorized, no test per element) and
    zeros; its other dims' mask is tested once per row (a row of the padding: all zeros)."""
    st = view_of(x_src)[1]
    ptr = pointer_of(x_src, inputs)
    width = g.space[g.w]
    lo, hi, conds = 0, width, []
    if st.mask is not None:
        lo, hi = (int(v) for v in st.mask[g.w])
        for j, ((a, b), d) in enumerate(zip(st.mask, st.shape)):
            if j != g.w:
                conds += ([f"{names[j]} >= {int(a)}"] if int(a) != 0 else []) + ([f"{names[j]} < {int(b)}"] if int(b) != int(d) else [])
    value = read(unmasked(x_src), names, ptr)
    row = _x_index(g, [("pw" if j == g.w else n) for j, n in enumerate(names)])
    return f"""const int in_rows = {' && '.join(conds) or '1'};
      for (long long pw = 0; pw < {g.sw}; ++pw) {{
        float* const dst = planes + {row};
        const long long q_lo = in_rows ? lum_min(lum_max({lo} - pw + {g.sw - 1}, 0) / {g.sw}, {g.wq}LL) : {g.wq}LL;
        const long long q_hi = in_rows ? lum_max(q_lo, lum_min(lum_max({hi} - pw + {g.sw - 1}, 0) / {g.sw}, {g.wq}LL)) : {g.wq}LL;
        for (long long xq = 0; xq < q_lo; ++xq) dst[xq] = 0.0f;
        #pragma omp simd
        for (long long xq = q_lo; xq < q_hi; ++xq) {{ const long long xw = xq * {g.sw} + pw; dst[xq] = {value}; }}
        for (long long xq = q_hi; xq < {g.wq}; ++xq) dst[xq] = 0.0f;
      }}"""


def _planes(g: DirectConv, x_src: Node, inputs: list[Node]) -> str:
    """C filling `planes` (= scratch) with X's phase planes, and zeroing their slack."""
    xnames, xlines = unravel("xi", [g.space[j] for j in range(len(g.space)) if j != g.w], "xd")
    names = list(xnames)
    names.insert(g.w, "xw")
    outer = 1  # X's elements over its last-moved dim's
    for j in range(len(g.space)):
        if j != g.w:
            outer *= g.space[j]
    return f"""float* const planes = scratch;
    #pragma omp parallel for if ({outer * g.space[g.w]}LL >= {FILL_PAR_MIN})
    for (long long xi = 0; xi < {outer}LL; ++xi) {{  /* X (the padded input) into its phase planes */
      {" ".join(xlines)}
      {_fill_row(g, x_src, names, inputs)}
    }}
    for (long long q = 0; q < {DC_SLACK}; ++q) planes[{g.planes_floats}LL + q] = 0.0f;"""


# the lanes kernels' positions a unit (`c/direct_conv.h`, LUM_DCONV_LANES: 2 x R accumulators of
# AVX-512's 32 registers) and a packed weight's panel there: 2 vectors of output channels (the
# SGEMM's NR)
LANES = (12, 8, 7)
LANES_PANEL = 32
# AVX2's (LUM_DCONV_GATHER: 2 x 6 accumulators of its 16 registers): units of 6 positions anywhere
# on the output grid, panels of 16 channels (its SGEMM's NR)
GATHER = 6
GATHER_PANEL = 16
GATHER_SPAN_MAX = 64  # extended-grid positions one gathered unit may span (its tile: 16 x 64 floats)
# floats of the planes and a panel (K x 16) together at most: every unit of 6 positions reads a
# whole panel and every channel's planes, which must stay in L2 (320 KiB; the grid's blocks of
# depth keep its reads there at any size; README, "Direct convolutions")
GATHER_CACHE_FLOATS = 81920
# the lanes path is taken where it computes at most this share of what the extended grid does
LANES_GAIN = 0.95


@dataclass(frozen=True)
class Lanes:
    """How the lanes path cuts a convolution (`lanes`): units of `r` positions times a panel of
    `panel` output channels. `span` 0: a unit is a run of one output row, its tile channels x r
    (LUM_DCONV_LANES); else r positions in row-major order across output rows, its tile
    channels-last over the `span` extended-grid positions a unit covers at most (LUM_DCONV_GATHER)."""

    r: int
    panel: int
    span: int = 0


def gather_span(g: DirectConv, r: int) -> int:
    """The most extended-grid positions a unit of r output positions (taken in row-major order
    from a multiple of r) spans: its tile's rows."""
    p, ow, wq = g.oh * g.ow, g.ow, g.wq
    return max((q1 // ow - q0 // ow) * wq + q1 % ow - q0 % ow + 1
               for q0, q1 in ((q0, min(q0 + r, p) - 1) for q0 in range(0, p, r)))


def lanes(g: DirectConv, m: int, k: int, stored: bool) -> Lanes | None:
    """The lanes path's cut (`Lanes`), or None: for a convolution of one batch element (depth `k`)
    whose weight is stored (its panels are packed once: `lum_packed_weight`), where the units, with the
    channels rounded up to whole panels, compute at most `LANES_GAIN` of what the extended grid
    computes with the micro-tile's rows (small images: 7x7 computes 64 positions for 49 on the
    grid; a strided one likewise; every image's grid computes its rows' pad columns). AVX-512:
    runs of R of one output row (`LANES`). AVX2: units of `GATHER` positions anywhere on the
    grid, where the planes and a panel fit in L2 (`GATHER_CACHE_FLOATS`; where each rule was
    measured: README, "Direct convolutions")."""
    # the panels are the SGEMM's (`lum_packed_weight`): as wide as its build's NR, which must be the kernels'
    wide, isa = dc_kernels() is DC_KERNELS_AVX512, sgemm.isa()
    if not (stored and g.columns and isa == ("avx512" if wide else "avx2")):
        return None
    panel = LANES_PANEL if wide else GATHER_PANEL
    if m < panel // 2:
        return None
    grid_work = -(-m // g.mr) * g.mr * g.chunks * g.nr / DC_RATE.get(g.nr, 1.0)
    panels = -(-m // panel) * panel
    if wide:
        r = min(LANES, key=lambda r: (-(-g.ow // r) * r, -r))
        cut = Lanes(r, panel)
        work = panels * g.oh * -(-g.ow // r) * r
    else:
        cut = Lanes(GATHER, panel, gather_span(g, GATHER))
        work = panels * -(-(g.oh * g.ow) // GATHER) * GATHER
        if cut.span > GATHER_SPAN_MAX or g.planes_floats + k * panel > GATHER_CACHE_FLOATS:
            return None
    return cut if work <= LANES_GAIN * grid_work else None


def direct_path(g: DirectConv, m: int, copy: Node, x_src: Node, inputs: list[Node], a_setup: str, blines: list[str],
                after, stored: bool = False) -> str:
    """C run first in the fused kernel (`out`, `scratch`, n_batch, M = `m`, N, K in scope): the
    direct convolution of every batch element, then `return`. `x_src`: what X's element [i] is
    read as (the pad's masked view of the input, or X's own buffer); `after(p0, nt, par, rows)`:
    the epilogue's C on columns p0 .. p0 + nt of batch element bz, rows (first, end) of it. The
    units of work are tiles of positions times blocks of output channels (`DirectConv.block_rows`);
    or, where `lanes` gives R (`stored`: A is a weight stored in the graph, one batch element) and the call finds
    the weight's panels packed, a run of R positions of one output row times a panel of
    channels, the channels in the vector lanes (LUM_DCONV_LANES). Same bits either way."""
    rows = copy.shape[:g.split]
    rnames, rlines = unravel("R", rows, "r")
    row_x = [" + ".join([f"{rnames[i]} * {c}LL" for i, c in coefs if i < g.split] + [f"{off}LL"])
             for coefs, off in g.terms]
    n_rows = 1
    for d in rows:
        n_rows *= int(d)
    mb, per = g.block_rows(m), g.tile_chunks(m)
    te = per * g.nr

    def copy_out(te, channels_last: int = 0) -> str:
        """Rows m0 .. m0 + mn, extended-grid positions e0 .. e1 (rows r0 .. r1) of `tile` (rows
        `te` apart, position e at e - e0; `channels_last`: position e's channels at
        (e - e0) * channels_last) into the output: through the region (one write of `out`), or
        without one a copy."""
        # each output row's run of the unit's positions q0 .. q1 (the region's locals are e0, e1, ...):
        # columns c0 .. c1 of image row r, at tile[sb + pc] (channels-last: tile[(sb + pc) * C + mr - m0])
        sb = f"r * {g.wq - g.ow} - q0" if channels_last else f"(mr - m0) * {te} + r * {g.wq - g.ow} - q0"
        value = f"tile[(sb + pc) * {channels_last} + (mr - m0)]" if channels_last else "tile[sb + pc]"
        run = (f"for (long long r = r0; r <= r1; ++r) {{ const long long c0 = lum_max(q0 - r * {g.wq}, 0), "
               f"c1 = lum_min(q1 - r * {g.wq}, {g.ow}LL), sb = {sb};")
        epilogue = after("", "", "", ("m0", "m0 + mn"), (run, f"r * {g.ow} + c0", f"r * {g.ow} + c1", value))
        if epilogue:
            return f"const long long q0 = e0, q1 = e1; {epilogue}"
        if channels_last:
            return f"""for (long long i = 0; i < mn; ++i)
          for (long long r = r0; r <= r1; ++r) {{
            const long long c0 = lum_max(e0 - r * {g.wq}, 0), c1 = lum_min(e1 - r * {g.wq}, {g.ow}LL);
            float* const dst = out + (bz * M + m0 + i) * N + r * {g.ow};
            for (long long c = c0; c < c1; ++c) dst[c] = tile[(r * {g.wq} + c - e0) * {channels_last} + i];
          }}"""
        return f"""for (long long i = 0; i < mn; ++i)
          for (long long r = r0; r <= r1; ++r) {{
            const long long c0 = lum_max(e0 - r * {g.wq}, 0), c1 = lum_min(e1 - r * {g.wq}, {g.ow}LL);
            if (c0 < c1) memcpy(out + (bz * M + m0 + i) * N + r * {g.ow} + c0, tile + i * {te} + r * {g.wq} + c0 - e0,
                                sizeof(float) * (c1 - c0));
          }}"""

    cut = lanes(g, m, n_rows, stored)
    if cut is None:
        lanes_path = ""
    else:
        r, panel = cut.r, cut.panel
        if cut.span:  # AVX2: units of R positions anywhere on the grid, the tile channels-last
            units = f"const long long per_panel = ({g.oh * g.ow}LL + R - 1) / R, units = (M + {panel} - 1) / {panel} * per_panel;"
            tile = f"float tile[{panel * cut.span}];  /* a unit's outputs: {cut.span} grid positions x {panel} channels */"
            unit = f"""const long long m0 = wi / per_panel * {panel}, mn = lum_min({panel}, M - m0);
          const long long p0 = wi % per_panel * R, nr = lum_min(R, {g.oh * g.ow}LL - p0);
          long long pos[{r}];  /* each position's offset on the extended grid; the last repeated */
          for (long long j = 0; j < R; ++j) {{ const long long p = p0 + lum_min(j, nr - 1); pos[j] = p / {g.ow} * {g.wq} + p % {g.ow}; }}
          lum_dconv_gather_{r}(K, panels + m0 * K, planes, pos, off, tile);
          const long long e0 = pos[0], e1 = pos[nr - 1] + 1, r0 = p0 / {g.ow}, r1 = (p0 + nr - 1) / {g.ow};
          {copy_out(str(cut.span), panel)}"""
        else:  # AVX-512: runs of R positions of one output row
            units = f"const long long per_row = ({g.ow} + R - 1) / R, units = (M + {panel} - 1) / {panel} * {g.oh} * per_row;"
            tile = f"float tile[{panel * r}];  /* a unit's outputs: {panel} channels x R positions */"
            unit = f"""const long long m0 = wi / ({g.oh} * per_row) * {panel}, mn = lum_min({panel}, M - m0);
          const long long oy = wi / per_row % {g.oh}, x0 = wi % per_row * R, nr = lum_min(R, {g.ow} - x0);
          const long long e0 = oy * {g.wq} + x0, e1 = e0 + nr, r0 = oy, r1 = oy;
          lum_dconv_lanes_{r}(K, panels + m0 * K, planes + e0, off, tile, R, nr, mn);
          {copy_out("R")}"""
        lanes_path = f"""
      /* the weight's panels, packed on the first call (the runtime's table; NULL: none, or being
         packed by another thread): the lanes kernel, the channels in the vector lanes (`stored`:
         one batch element; not a transposed copy made above) */
      const float* const panels = !a_buf ? lum_packed_weight(1, M, K, a_ptr, a_ld) : NULL;
      if (panels) {{
        const long long R = {r};
        {units}
        #pragma omp parallel num_threads(lum_min(lum_threads, units))
        {{
        {tile}
        #pragma omp for schedule(static)  /* a thread's units: contiguous, its panels' rows together */
        for (long long wi = 0; wi < units; ++wi) {{
          {unit}
        }}
        }}
        continue;
      }}"""
    return f"""long long* const offs = lum_f64 ? NULL : (long long*)malloc(sizeof(long long) * {max(1, n_rows)});  /* per row of B: its run */
  if (offs) {{  /* the direct path (conv_direct.py): the im2col matrix is never written */
    int failed = 0;  /* out of memory for a transposed weight's copy: the im2col path below, from the start */
    float* a_buf = NULL;
    float* const tiles = scratch + {g.planes_floats}LL + {DC_SLACK};  /* a tile of {mb} x {te} per thread */
    {_planes(g, x_src, inputs)}
    for (long long R = 0; R < {n_rows}LL; ++R) {{
      {" ".join(rlines)}
      offs[R] = {_x_index(g, row_x)};
    }}
    const long long chunks = {g.chunks}, MB = {mb}, blocks = (M + MB - 1) / MB;
    const long long per = blocks > 1 ? {per} : lum_dc_per(chunks, {per}, lum_threads), n_tiles = (chunks + per - 1) / per;
    const long long n_work = n_tiles * blocks;  /* tiles of positions x blocks of channels */
    for (long long bz = 0; bz < n_batch && !failed; ++bz) {{
      {" ".join(blines)}
      const float* a_ptr; int a_tr; long long a_ld;
      {a_setup}
      if (a_tr) {{  /* the weight transposed: rows of k for the micro-kernel */
        float* rows_copy = (float*)malloc(sizeof(float) * lum_max(1, M * K));
        if (!rows_copy) {{ failed = 1; break; }}
        for (long long i = 0; i < M; ++i) for (long long k = 0; k < K; ++k) rows_copy[i * K + k] = a_ptr[k * a_ld + i];
        free(a_buf); a_buf = rows_copy; a_ptr = rows_copy; a_tr = 0; a_ld = K;
      }}
      const long long* const off = offs + bz * K;{lanes_path}
      #pragma omp parallel num_threads(lum_min(lum_threads, n_work))
      {{
      float* const tile = tiles + omp_get_thread_num() * MB * {te}LL;
      /* each thread the same contiguous run of units every call, its rows of the planes and of
         the output near each other (dynamic hand-outs, which scatter a call's rows across the
         cores' caches, measured slower: README); each output is one chain whoever computes it */
      #pragma omp for schedule(static)
      for (long long wi = 0; wi < n_work; ++wi) {{
        const long long ti = wi % n_tiles, m0 = wi / n_tiles * MB, mn = lum_min(MB, M - m0);
        const long long e0 = ti * per * {g.nr}, ne = lum_min(per, chunks - ti * per) * {g.nr};
        lum_dconv_{g.mr}x{g.nr}(mn, K, a_ptr + m0 * a_ld, a_ld, planes + e0, off, tile, {te}, ne);
        /* the positions that exist (oh, ow < {g.ow}) out of the extended grid (rows {g.wq} wide) */
        const long long e1 = lum_min(e0 + ne, {g.ext}LL), r0 = e0 / {g.wq}, r1 = (e1 - 1) / {g.wq};
        {copy_out(str(te))}
      }}
      }}
    }}
    free(offs); free(a_buf);
    if (!failed) return;
  }}"""


# a weight gradient's chunk of A transposed (positions x channels padded to the tile), 256 KiB:
# transposed by the team between two barriers, then read by every thread's column tiles
WGRAD_CHUNK_FLOATS = 65536


def wgrad_path(g: DirectConv, m: int, copy: Node, x_src: Node, inputs: list[Node], a_setup: str, blines: list[str],
               after) -> str:
    """C run first in the fused kernel of a weight gradient's GEMM (`g.columns` False; `out`,
    `scratch`, n_batch = 1, M = `m`, N, K in scope): dW = A B with B read from the phase planes, as
    outer products with the channels in the vector lanes (`lum_dwgrad_op_*`, `c/direct_conv.h`):
    chunks of positions in order, each chunk of A transposed by the team, the columns split
    across it; then the epilogue, then `return`."""
    split = g.split
    rows, cols = copy.shape[:split - 1], copy.shape[split:]
    rnames, rlines = unravel("r", rows, "pr")
    cnames, clines = unravel("j", cols, "pc")

    def x_at(row_names, col_names):  # X's planes index of the copy's element (row.., ow = 0, col..)
        idx = [*row_names, "0", *col_names]
        exprs = [" + ".join([f"{idx[i]} * {c}LL" for i, c in coefs] + [f"{off}LL"]) for coefs, off in g.terms]
        return _x_index(g, exprs)

    n_prow = 1
    for d in rows:
        n_prow *= int(d)
    zero_r, zero_c = ["0"] * len(rows), ["0"] * len(cols)
    # the tile: V vectors of channels x R columns (`c/direct_conv.h`): 64 x 6 on AVX-512's 16-float
    # vectors, 32 x 8 for at most 32 channels; 16 x 6 on AVX2
    wide = dc_kernels() is DC_KERNELS_AVX512
    v, r = ((2, 8) if m <= 32 else (4, 6)) if wide else (2, 6)
    loop = f"""const long long R = {r}, n_jt = (N + R - 1) / R;  /* the kernel's columns a tile */
      const long long MT = {v * (16 if wide else 8)}, Mp = (M + MT - 1) / MT * MT, KK = {n_prow}LL * OW;
      const long long CH = lum_max({WGRAD_CHUNK_FLOATS}LL / Mp / 64, 1) * 64;  /* positions a chunk */
      float* const at = (float*)aligned_alloc(64, sizeof(float) * CH * Mp);
      if (!at) {{ failed = 1; break; }}
      #pragma omp parallel num_threads(lum_min(lum_threads, n_jt))
      {{
      const long long t = omp_get_thread_num(), team = omp_get_num_threads();
      const long long j_lo = lum_min(N, n_jt * t / team * R), j_hi = lum_min(N, n_jt * (t + 1) / team * R);
      float* const ct = j_hi > j_lo ? (float*)aligned_alloc(64, sizeof(float) * (j_hi - j_lo) * Mp) : NULL;
      if (ct) memset(ct, 0, sizeof(float) * (j_hi - j_lo) * Mp);
      else if (j_hi > j_lo) {{
        #pragma omp atomic write
        failed = 1;
      }}
      for (long long k0 = 0; k0 < KK; k0 += CH) {{  /* every thread meets each chunk's barriers */
        const long long nk = lum_min(CH, KK - k0);
        #pragma omp for schedule(static)  /* blocks of positions: a thread writes whole rows of at */
        for (long long kb = 0; kb < nk; kb += 64) lum_wg_transpose(M, a_ptr, a_ld, k0, kb, lum_min(kb + 64, nk), at, Mp);
        if (ct) lum_dwgrad_op_{v}x{r}(Mp, at, k0, nk, planes, rowoff, coloff, OW, j_lo, j_hi, ct);
        #pragma omp barrier
      }}
      if (ct) for (long long m = 0; m < M; ++m) for (long long j = j_lo; j < j_hi; ++j) out[bz * M * N + m * N + j] = ct[(j - j_lo) * Mp + m];
      free(ct);
      }}
      free(at);
      if (failed) break;"""
    return f"""long long* const rowoff = lum_f64 ? NULL : (long long*)malloc(sizeof(long long) * ({n_prow} + N));
  if (rowoff) {{  /* the direct path (conv_direct.py): the im2col matrix is never written */
    long long* const coloff = rowoff + {n_prow};
    int failed = 0;  /* out of memory for a transposed operand's copy: the im2col path below, from the start */
    float* a_buf = NULL;
    {_planes(g, x_src, inputs)}
    const long long base = {x_at(zero_r, zero_c)};
    for (long long r = 0; r < {n_prow}LL; ++r) {{  /* a row of positions (its ow = 0): where it starts */
      {" ".join(rlines)}
      rowoff[r] = {x_at(rnames, zero_c)} - base;
    }}
    for (long long j = 0; j < N; ++j) {{  /* a column of B (c, kh, kw): its offset */
      {" ".join(clines)}
      coloff[j] = {x_at(zero_r, cnames)};
    }}
    const long long OW = {g.ow};
    for (long long bz = 0; bz < n_batch && !failed; ++bz) {{
      {" ".join(blines)}
      const float* a_ptr; int a_tr; long long a_ld;
      {a_setup}
      if (a_tr) {{  /* A transposed: rows of k for the micro-kernel */
        float* rows_copy = (float*)malloc(sizeof(float) * lum_max(1, M * K));
        if (!rows_copy) {{ failed = 1; break; }}
        for (long long i = 0; i < M; ++i) for (long long k = 0; k < K; ++k) rows_copy[i * K + k] = a_ptr[k * a_ld + i];
        free(a_buf); a_buf = rows_copy; a_ptr = rows_copy; a_tr = 0; a_ld = K;
      }}
      {loop}
      {after("0", "N", "M * N")}
    }}
    free(rowoff); free(a_buf);
    if (!failed) return;
  }}"""
