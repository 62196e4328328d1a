"""The C dialect's convolution GEMMs and the fused kernels `program.py` plans (`fusion_plan`).

GEMM convolutions (`Im2colGemm`): a MatMul whose B operand is an im2col copy nothing else reads
runs as one kernel that fills the copy tile by tile (T output columns, about 1 MiB) and
multiplies each tile into its columns of the output, so the full im2col matrix is never written
and the tile is still in cache when BLAS reads it. A
padded copy read only by the im2col is folded into the reads (the pad's mask gives the zeros;
each run of a row splits into zeros, plain reads and zeros). `program.py` finds these and gives
the absorbed copies steps that do nothing, so the launch table still has one step per node; the
im2col's buffer is the tiles' scratch, and the arena gives it only what the tiles use
(`steps.im2col_scratch`), the padded copy nothing.

GEMM epilogues (`GemmEpilogue`): a MatMul (the tiled im2col GEMM, or a plain one: a 1x1 conv, a
linear layer) read only by the pointwise region after it (BatchNorm, bias, activation, residual
add), element for element in its layout, runs in that region's kernel: each tile (a plain GEMM:
each batch element) is multiplied into the region's buffer and the region applied to it in
place while it is in cache. The GEMM's buffer is absorbed (no bytes).

A WindowReduce's pointwise epilogue (`conv.WindowEpilogue`) is planned here too.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op
from luminal.hlir.shape import ShapeTracker, contiguous_strides, merged_stride
from luminal.kernels.cpu import conv_direct, conv_pointwise
from luminal.kernels.cpu.conv import (
    _EPILOGUES,
    _FLOATS,
    WindowEpilogue,
    float_region,
    window_epilogue,
    window_epilogue_kernel,
    window_pad,
)
from luminal.kernels.cpu.render import gemm_call, packs_weight, stored_weight
from luminal.kernels.cpu.steps import (
    DC_KERNELS,
    K_TILE_ROWS_C,
    K_TILED_C,
    TILE_FLOATS,
    TILE_MIN,
    TILE_PAR,
    column_split,
    dc_kernels,
    direct_conv,
    through,
)
from luminal.kernels.render.cexpr import c_dim, compute_type, dims_symbols
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
    unmasked,
    unravel,
    view_of,
)
from luminal.kernels.render.dialect import PAR_MIN, C, par_min

EPILOGUE_TILE_FLOATS = 65536  # a plain GEMM's epilogue tile: M x T outputs at most (256 KiB)
EPILOGUE_TILED_MIN = 131072  # outputs (512 KiB) from which a plain GEMM with an epilogue runs in tiles


def epilogue_tile(m: int, n: int) -> int:
    """The columns per tile of a plain GEMM with an epilogue (m rows, n columns) that its C
    computes (`gemm_epilogue_kernel`, T): at most EPILOGUE_TILE_FLOATS outputs, an even number of
    equal tiles (a team of two takes a half each; the sizes alone choose them, never the team)."""
    t_max = max(64, EPILOGUE_TILE_FLOATS // m // 16 * 16)
    n_even = (-(-n // t_max) + 1) // 2 * 2
    return max(64, (-(-n // n_even) + 15) // 16 * 16)


# --- im2col + GEMM in tiles ------------------------------------------------------------------


@dataclass
class Im2colGemm:
    """A MatMul whose B operand is a copy nothing else reads (a convolution's im2col: the window
    view of the input, materialized as (batch, K, P)), run as one kernel: per tile of T output
    columns, the tile of the copy is filled into the copy's buffer (so the full copy is never
    written: T columns stay in cache; the buffer is only the tiles' size, `steps.im2col_scratch`) and multiplied by BLAS into those columns of the output.
    When the copy reads a padded copy nothing else reads either (conv's `x.pad`), the reads go
    through to the unpadded input (the mask gives the zeros), and that copy goes too."""

    node: Node  # the MatMul
    copy: Node  # its B operand's buffer: the im2col copy (CONTIGUOUS), used as the tile's scratch
    split: int  # copy.shape[:split] are the rows (batch and K), copy.shape[split:] the columns (P)
    pad: Node | None  # the padded copy (CONTIGUOUS) read through, or None: the copy's source is read
    terms: list  # with `pad`: per dim of pad, ([(dim of the copy, coefficient)], offset)

    @property
    def absorbed(self) -> list[Node]:
        """The nodes whose steps do nothing (the fused kernel computes what they would)."""
        return [self.copy] + ([self.pad] if self.pad is not None else [])


def _contiguous_view(st: ShapeTracker) -> bool:
    return st.mask is None and sym.equal(st.offset, 0) and all(
        sym.equal(d, 1) or sym.equal(s, w) for d, s, w in zip(st.shape, st.strides, contiguous_strides(st.shape)))


def im2col_gemm(node: Node, users) -> Im2colGemm | None:
    """The fused form of MatMul `node` when its B operand is a single-use im2col copy (see
    `Im2colGemm`), else None. `users[id(n)]`: the nodes (and graph outputs) reading buffer n."""
    if node.op is not Op.MAT_MUL or node.dtype not in (DType.F32, DType.F64) or len(node.shape) < 2:
        return None
    a, b = node.src
    copy, st = (b.src[0], b.arg) if b.op is Op.VIEW else (b, ShapeTracker.contiguous(b.shape))
    if copy.op is not Op.CONTIGUOUS or copy.dtype is not node.dtype or users.get(id(copy)) != 1 or view_of(a)[0] is copy:
        return None
    if not _contiguous_view(st) or not sym.equal(sym.product(st.shape), sym.product(copy.shape)):
        return None  # B[bz.., k, p] is the copy's element (bz * K + k) * P + p
    split = column_split(copy.shape, b.shape[-1])
    if split is None:
        return None
    source = copy.src[0]
    base, view = view_of(source)
    if view.mask is None and sym.is_static(sym.product(base.shape)) and sym.is_static(sym.product(copy.shape)) \
            and int(sym.product(copy.shape)) == int(sym.product(base.shape)):
        # every element of its source once, no padding: a transpose (training's k^T for q @ k^T)
        # or a patchify conv's exact tiling, not a window's copy: a plain copy and batched GEMM
        # beat the im2col's per-batch tiles
        return None
    pad, terms = None, []
    if source.op is Op.VIEW and source.src[0].op is Op.CONTIGUOUS:
        padded = source.src[0]
        if users.get(id(padded)) == 1 and padded.dtype is copy.dtype:
            found = through(source.arg, padded.shape)
            if found is not None:
                pad, terms = padded, found
    return Im2colGemm(node, copy, split, pad, terms)


@dataclass
class GemmEpilogue:
    """A GEMM (tiled im2col, `Im2colGemm`, or plain) read only by the pointwise region after it
    (a conv's BatchNorm, bias, activation, residual add), element for element in its layout: the
    GEMM multiplies each tile (plain: each batch element) into the region's output, and the region
    is applied to those columns right after, while they are in cache. The GEMM's result is stored (rounded to its dtype)
    before the region reads it, as when the region reads its buffer, so the bits are the same."""

    matmul: Node
    gemm: Im2colGemm | None  # the MatMul's tiled im2col form, or None: a plain GEMM (a 1x1 conv's)
    node: Node  # the region (a FusedElementwise, or one pointwise op): the kernel writes its buffer
    rows: Node  # the region over (its dims before the GEMM's columns, the columns as one dim)

    @property
    def absorbed(self) -> list[Node]:
        return [self.matmul, *(self.gemm.absorbed if self.gemm is not None else ())]


def gemm_epilogue(node: Node, users) -> GemmEpilogue | None:
    """The plan fusing a pointwise `node` into the GEMM it reads (tiled im2col or plain), when that is the
    GEMM's only reader, of its dtype (float, no error flag), reading it contiguously as a reshape
    of its (batch.., M, N) (the conv's (n, C, H, W)), its other operands readable with the dims
    that make up the GEMM's columns as one (a BatchNorm's per-channel vectors, a residual); else None."""
    # (not a bare copy: a conv's output copied out as a graph output keeps its GEMM's own step)
    if node.op not in _EPILOGUES or node.op is Op.CONTIGUOUS or not node.shape or node.dtype not in _FLOATS:
        return None
    if node.op is Op.FUSED_ELEMENTWISE and not float_region(node.arg):
        return None
    # a region reading two GEMMs (a ResNet block's 3x3 conv and its 1x1 shortcut, added) takes in
    # the one with the most work per output, the conv with its im2col first; the other keeps its
    # own step and is read as any operand is
    gemms = sorted(((mm, im2col_gemm(mm, users)) for mm in buffer_sources(node) if mm.op is Op.MAT_MUL),
                   key=lambda g: (g[1] is None, -_depth(g[0])))
    return next((plan for mm, gemm in gemms if (plan := _gemm_epilogue(node, mm, gemm, users)) is not None), None)


def _depth(mm: Node) -> int:
    """A MatMul's multiply-adds per output (its K), 0 where symbolic."""
    k = mm.src[0].shape[-1]
    return int(k) if sym.is_static(k) else 0


def _gemm_epilogue(node: Node, mm: Node, gemm: Im2colGemm | None, users) -> GemmEpilogue | None:
    """`gemm_epilogue`'s plan fusing the region `node` into the GEMM `mm` (`gemm`: its im2col
    form, if any), or None."""
    if users[id(mm)] != 1 or mm.dtype is not node.dtype or not sym.equal(sym.product(node.shape), sym.product(mm.shape)):
        return None
    shape, cols = node.shape, mm.shape[-1]
    split = column_split(shape, cols)
    if split is None:
        return None
    srcs = []
    for s in node.src:
        base, st = view_of(s)
        if base is mm and not _contiguous_view(st):
            return None
        if is_inline_scalar(base):
            srcs.append(s)
            continue
        stride = merged_stride(st.shape[split:], st.strides[split:])
        if st.mask is not None or stride is None:
            return None
        merged = ShapeTracker((*st.shape[:split], cols), (*st.strides[:split], stride), st.offset)
        srcs.append(Node(Op.VIEW, s.dtype, merged.shape, (base,), merged))
    return GemmEpilogue(mm, gemm, node, Node(node.op, node.dtype, (*shape[:split], cols), tuple(srcs), node.arg))


def _epilogue_rows(plan: GemmEpilogue, inputs: list[Node], t: str, p0: str, nt: str, par: str,
                   rows=("0", "M"), runs=None) -> str:
    """C applying the region to columns p0 .. p0 + nt of rows (first, end) of batch element bz of
    the GEMM's output, in place in `out` (the region's buffer); its reads that stay put along a row
    (a BatchNorm's per-channel scale and shift) into locals before the row's vector loop. `par`:
    the rows' element count as C, the rows across the team from `par_min` ("": never).
    `runs` (the direct convolution's copy-out, `conv_direct.direct_path`): (C opening a loop over
    runs of columns inside each row, the run's first and end column, the GEMM's value there): the
    region reads the product where it lies (a tile) and writes `out` once, instead of a copy into
    `out` and a second pass over it."""
    region, mm = plan.rows, plan.matmul
    names, lines = unravel("row", region.shape[:-1], "y")
    idx = [*names, "pc"]
    mine = [s for s in region.src if view_of(s)[0] is mm]
    fixed = [s for s in region.src if view_of(s)[0] is not mm and not is_inline_scalar(view_of(s)[0])
             and sym.equal(view_of(s)[1].strides[-1], 0)]
    setup = " ".join(f"const {compute_type(s.dtype)} e{k} = {read(s, idx, pointer_of(s, inputs))};" for k, s in enumerate(fixed))
    opening, lo, hi, product = runs or ("{", p0, f"{p0} + {nt}", "dst[pc]")
    with lanes({id(s): f"e{k}" for k, s in enumerate(fixed)} | {id(s): product for s in mine}):
        value = pointwise_value(region, idx, inputs)
    pragma = f"#pragma omp parallel for if ({par} >= {par_min(region)})" if par else ""
    return f"""{pragma}
        for (long long mr = {rows[0]}; mr < {rows[1]}; ++mr) {{
          const long long row = bz * M + mr;
          {" ".join(lines)}
          {setup}
          {t}* restrict dst = out + row * N;
          {opening}
          #pragma omp simd
          for (long long pc = {lo}; pc < {hi}; ++pc) dst[pc] = {store_value(region.dtype, value)};
          }}
        }}"""


def gemm_epilogue_kernel(plan: GemmEpilogue, name: str, operand) -> tuple[str, list[Node], list[str]]:
    """(code, inputs, symbols) of a plain GEMM (`render.matmul`'s, the same calls, so the same
    bits) whose batch elements each go through the region as soon as the GEMM has written them.
    `operand`: the C dialect's GEMM operand setup (`render._operand`)."""
    node, region = plan.matmul, plan.node
    a, b = node.src
    t = compute_type(node.dtype)
    g = {"float": "f", "double": "d"}[t]
    inputs = buffer_sources(node)
    inputs += [x for x in buffer_sources(region) if x is not node and all(x is not y for y in inputs)]
    symbols = sorted(set(symbols_of(node)) | set(symbols_of(region)) | set(symbols_of(plan.rows)))
    batch = node.shape[:-2]
    m, n, k = (c_dim(d) for d in (node.shape[-2], node.shape[-1], a.shape[-1]))
    bnames, blines = unravel("bz", batch, "z")
    a_setup, _ = operand(a, "a", bnames, a.shape[-2], a.shape[-1], inputs, t)
    b_setup, _ = operand(b, "b", bnames, b.shape[-2], b.shape[-1], inputs, t)

    # a 1x1 convolution's GEMMs (A a stored weight, B computed: not a linear layer's, whose weight
    # is B) through the direct convolution's micro-kernel where it runs (`conv_direct.wanted`):
    # B's rows are the input's channel planes, read in place (off[k] = k * b_ld), C written
    # straight into the output in units that stay in cache for the region (`conv_pointwise`).
    # Not at precision "float64" (the BLAS's widened GEMM), nor for a transposed operand, nor a
    # weight past EPILOGUE_TILE_FLOATS. AVX2's tiles only (README, "Direct convolutions").
    a_st = view_of(a)[1]
    grouped = any(not sym.equal(w, 0) and not sym.equal(d, 1) for d, w in zip(a_st.shape[:-2], a_st.strides[:-2]))
    micro = (t == "float" and conv_direct.wanted() and stored_weight(a) and not stored_weight(b)
             and dc_kernels() is DC_KERNELS
             and (grouped or conv_pointwise.takes(node.shape[-2], node.shape[-1], a.shape[-1])))

    def units(pragma: str) -> str:  # batch element bz through the micro-kernel
        return conv_pointwise.units(node.shape[-2], grouped, pragma, g,
                                    _epilogue_rows(plan, inputs, t, "p0", "nt", "", ("m0", "m0 + mn")))

    def batch_loop(pragma: str, rows_par: str, tiles: bool) -> str:  # as `render.matmul`'s, each element then through the region
        # tiles False: each batch element on its thread (`pragma` shares them out); True: the
        # columns in tiles across the team, or one GEMM the BLAS splits
        whole = f"""{gemm_call(node, b, "M, N, K, a_ptr, a_ld, b_ptr, b_ld, out + bz * M * N, N")}
      {_epilogue_rows(plan, inputs, t, "0", "N", rows_par)}"""
        # tiles to threads in a static schedule, the same contiguous run each call, as the direct
        # convolution's units (`conv_direct.direct_path`: measured, README)
        if tiles:  # a large output: columns in tiles, each multiplied and through the region while in cache
            whole = f"""if (n_tiles > 1) {{
        #pragma omp parallel for num_threads(lum_threads) schedule(static)
        for (long long ti = 0; ti < n_tiles; ++ti) {{
          const long long p0 = ti * T, nt = lum_min(T, N - p0);
          lum_gemm_{g}(a_tr, b_tr, M, nt, K, a_ptr, a_ld, b_ptr + (b_tr ? p0 * b_ld : p0), b_ld, out + bz * M * N + p0, N);
          {_epilogue_rows(plan, inputs, t, "p0", "nt", "")}
        }}
      }} else {{
        {whole}
      }}"""
        if micro:
            par = "#pragma omp parallel for num_threads(lum_threads) schedule(static) if (n_units > 1)" if tiles else ""
            whole = f"""if (offs && !a_tr && !b_tr && !lum_f64 && M * K <= {EPILOGUE_TILE_FLOATS}LL) {{
        for (long long k = 0; k < K; ++k) offs[k] = k * b_ld;
        {units(par)}
      }} else {{
        {whole}
      }}"""
        return f"""{t}* a_buf = NULL;
    {t}* b_buf = NULL;
    {"long long* const offs = (long long*)malloc(sizeof(long long) * K);  /* B's rows for the micro-kernel */" if micro else ""}
    {pragma}
    for (long long bz = 0; bz < n_batch; ++bz) {{
      {" ".join(blines)}
      const {t}* a_ptr; const {t}* b_ptr; int a_tr, b_tr; long long a_ld, b_ld;
      {a_setup}
      {b_setup}
      {whole}
    }}
    free(a_buf); free(b_buf);{" free(offs);" if micro else ""}"""

    # a linear layer's (B a stored weight): one GEMM, its weight's panels packed once (`render.packs_weight`)
    tiles_when = "0" if packs_weight(node, b) else f"!lum_f64 && M * N >= {EPILOGUE_TILED_MIN}LL && M * K <= {EPILOGUE_TILE_FLOATS}LL"
    code = f"""{conv_direct.MICRO_KERNEL if micro else ""}{signature(name, region, inputs, symbols, False)} {{
  const long long n_batch = {c_dim(sym.product(batch))}, M = {m}, N = {n}, K = {k};
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {{
    for (long long q = 0; q < n_batch * M * N; ++q) out[q] = 0;
    for (long long bz = 0; bz < n_batch; ++bz) {{ {_epilogue_rows(plan, inputs, t, "0", "N", "")} }}
    return;
  }}
  /* columns per tile (`epilogue_tile`): the tile's outputs stay in cache for the region; the
     operand's columns only stream through the GEMM (narrow tiles restarted its row streams) */
  const long long t_max = lum_max(64, {EPILOGUE_TILE_FLOATS}LL / M / 16 * 16), n_even = ((N + t_max - 1) / t_max + 1) / 2 * 2;
  const long long T = lum_max(64, ((N + n_even - 1) / n_even + 15) / 16 * 16);
  if (lum_batch_parallel(n_batch, M, N, K)) {{
    #pragma omp parallel
    {{
    const int mkl_ = lum_mkl_one();
    {batch_loop("#pragma omp for schedule(static)", "", False)}
    lum_mkl_restore(mkl_);
    }}
  }} else {{
    /* an output past what L2 holds (a 1x1 conv at 112 x 112: 64 x 12544): tiles of T columns,
       one per thread; the sizes alone choose them, never the team, and never at precision
       "float64". Only when A is as small (a conv's weights): the BLAS packs all of A for every
       tile, so a linear layer over many tokens runs whole (split across the team by the
       prelude), the region after. */
    const long long n_tiles = {tiles_when}
                              ? (N + T - 1) / T : 1;
    {batch_loop("", "M * N", True)}
  }}
}}
"""
    return code, inputs, symbols


def _index_through(plan: Im2colGemm, idx: list[str]) -> list[str]:
    """The padded copy's index (one C expression per dim) of the copy's element `idx`."""
    index = []
    for coefs, off in plan.terms:
        parts = [f"{idx[i]} * {c}LL" if c != 1 else idx[i] for i, c in coefs] + ([f"{off}LL"] if off or not coefs else [])
        index.append("(" + " + ".join(parts) + ")")
    return index


def _run(plan: Im2colGemm, head: list[str], cl: str, inputs: list[Node], t: str) -> str:
    """C filling dst[q + u] for u < run: the copy's elements at head + [cl + u].
    Through a padded copy, the run splits where the pad's mask on the dim that u moves changes:
    zeros, the unmasked reads (vectorized, no test per element), zeros; the mask of the dims u
    does not move is tested once per run (a row of the padding: all zeros)."""
    last = len(plan.copy.shape) - 1
    idx = head + [f"({cl} + u)"]
    if plan.pad is None:
        src = plan.copy.src[0]
        return f"""#pragma omp simd
          for (long long u = 0; u < run; ++u) dst[q + u] = ({t})({read(src, idx, pointer_of(src, inputs))});"""
    src = plan.pad.src[0]
    index = _index_through(plan, idx)
    st = view_of(src)[1]
    moved = [(j, c) for j, (coefs, _) in enumerate(plan.terms) for i, c in coefs if i == last]
    if st.mask is None or len(moved) > 1:
        return f"""#pragma omp simd
          for (long long u = 0; u < run; ++u) dst[q + u] = ({t})({read(src, index, pointer_of(src, inputs))});"""
    j, c = moved[0] if moved else (None, 0)
    at0 = _index_through(plan, head + [cl])
    conds = [f"{at0[k]} >= {c_dim(lo)}" for k, (lo, hi) in enumerate(st.mask) if k != j and not sym.equal(lo, 0)]
    conds += [f"{at0[k]} < {c_dim(hi)}" for k, (lo, hi) in enumerate(st.mask) if k != j and not sym.equal(hi, st.shape[k])]
    value = read(unmasked(src), index, pointer_of(src, inputs))
    if j is None or (sym.equal(st.mask[j][0], 0) and sym.equal(st.mask[j][1], st.shape[j])):
        bounds = "long long u_lo = 0, u_hi = run;"
    else:
        lo, hi = st.mask[j]
        bounds = f"""const long long y0 = {at0[j]};  /* the padded dim's index at u = 0; it grows by {c} per u */
          long long u_lo = {c_dim(lo)} > y0 ? ({c_dim(lo)} - y0 + {c - 1}) / {c} : 0;
          long long u_hi = {c_dim(hi)} > y0 ? ({c_dim(hi)} - y0 + {c - 1}) / {c} : 0;
          u_lo = lum_min(u_lo, run); u_hi = lum_max(u_lo, lum_min(u_hi, run));"""
    return f"""{bounds}
          if (!({' && '.join(conds) or '1'})) u_lo = u_hi = run;  /* a row of the padding */
          for (long long u = 0; u < u_lo; ++u) dst[q + u] = 0;
          #pragma omp simd
          for (long long u = u_lo; u < u_hi; ++u) dst[q + u] = ({t})({value});
          for (long long u = u_hi; u < run; ++u) dst[q + u] = 0;"""


def im2col_gemm_kernel(plan: Im2colGemm, name: str, operand, epilogue: GemmEpilogue | None = None) -> tuple[str, list[Node], list[str]]:
    """(code, inputs, symbols) of the fused kernel: `name(out, in0.., dims..)`, the copy's
    buffer (scratch) writable. `operand`: the C dialect's GEMM operand setup (`render._operand`).
    With `epilogue`, `out` is the region's buffer: each tile's columns go through the region."""
    node, copy = plan.node, plan.copy
    a = node.src[0]
    t = compute_type(node.dtype)
    g = {"float": "f", "double": "d"}[t]
    reads = buffer_sources(plan.pad if plan.pad is not None else copy)
    inputs = [*buffer_sources(node, [a]), copy]
    inputs += [r for r in reads if all(r is not x for x in inputs)]
    dims = [node.shape, copy.shape]
    for src in (a, copy.src[0], *(plan.pad.src if plan.pad is not None else ())):
        _, st = view_of(src)
        dims += [st.shape, st.strides, (st.offset,)] + ([tuple(x for lh in st.mask for x in lh)] if st.mask else [])
    symbols = dims_symbols(*dims)
    if epilogue is not None:
        inputs += [b for b in buffer_sources(epilogue.node) if b is not node and all(b is not x for x in inputs)]
        symbols = sorted(set(symbols) | set(symbols_of(epilogue.node)) | set(symbols_of(epilogue.rows)))

    def after(p0: str, nt: str, par: str, rows=("0", "M"), runs=None) -> str:  # the region on those columns of batch element bz
        return "" if epilogue is None else _epilogue_rows(epilogue, inputs, t, p0, nt, par, rows, runs)
    params = [f"{t}* restrict out"] + [
        (f"{t}* restrict in{k}" if x is copy else f"const {C.ctype(x.dtype)}* restrict in{k}") for k, x in enumerate(inputs)]
    params += [f"long long d_{s}" for s in symbols]
    batch = node.shape[:-2]
    m, n, k = (c_dim(d) for d in (node.shape[-2], node.shape[-1], a.shape[-1]))
    bnames, blines = unravel("bz", batch, "z")
    a_setup, _ = operand(a, "a", bnames, a.shape[-2], a.shape[-1], inputs, t)
    rows, cols = copy.shape[:plan.split], copy.shape[plan.split:]
    rnames, rlines = unravel("R", rows, "r")
    cnames, clines = unravel("p0", cols, "c")
    last, dl = cnames[-1], c_dim(cols[-1])
    fill = _run(plan, rnames + cnames[:-1], last, inputs, t)
    carry = ""
    for j in range(len(cols) - 1):  # cL reached its end: step the dims before it
        inner = f"if (++{cnames[j]} == {c_dim(cols[j])}) {{ {cnames[j]} = 0; {carry} }}" if carry else f"++{cnames[j]};"
        carry = inner
    carry = carry or ";"

    def fill_rows(first: str, count: str) -> str:  # rows first.. of the copy (of batch bz), columns p0 .. p0 + nt, into tile
        return f"""for (long long kk = 0; kk < {count}; ++kk) {{  /* row kk of the tile: the copy's row bz * K + {first} + kk */
          const long long R = bz * K + {first} + kk;
          {" ".join(rlines)}
          {" ".join(clines)}
          {t}* dst = tile + kk * nt;
          for (long long q = 0; q < nt;) {{
            const long long run = lum_min(nt - q, {dl} - {last});
            {fill}
            q += run;
            {last} += run;
            if ({last} == {dl}) {{ {last} = 0; {carry} }}
          }}
        }}"""

    def tile_loop(fill_pragma: str, epilogue_par: str = "") -> str:  # the tiles: fill one from the input, multiply it into its columns
        return f"""for (long long ti = 0; ti < n_tiles; ++ti) {{
        const long long p0 = ti * T, nt = lum_min(T, N - p0);
        {fill_pragma}
        {fill_rows("0", "K")}
        lum_gemm_{g}(a_tr, 0, M, nt, K, a_ptr, a_ld, tile, nt, out + bz * M * N + p0, N);
        {after("p0", "nt", epilogue_par)}
      }}"""

    x_src = plan.pad.src[0] if plan.pad is not None else copy.src[0].src[0]
    sizes = (sym.product(copy.shape), sym.product(x_src.shape))  # the copy's elements, its input's
    geometry = (direct_conv(copy, node.shape[-1], node.shape[-2], sym.product(batch))
                if t == "float" and all(sym.is_static(d) for d in sizes)
                and conv_direct.takes(int(sizes[0]) / max(1, int(sizes[1]))) else None)
    if geometry is None:
        direct = ""
    elif geometry.columns:
        direct = conv_direct.direct_path(geometry, int(node.shape[-2]), copy, x_src, inputs, a_setup, blines, after,
                                         stored=stored_weight(a) and sym.product(batch) == 1)
    else:
        direct = conv_direct.wgrad_path(geometry, int(node.shape[-2]), copy, x_src, inputs, a_setup, blines, after)
    code = f"""{conv_direct.MICRO_KERNEL if geometry is not None else ""}static void {name}({', '.join(params)}) {{
  const long long n_batch = {c_dim(sym.product(batch))}, M = {m}, N = {n}, K = {k};
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {{
    for (long long q = 0; q < n_batch * M * N; ++q) out[q] = 0;
    for (long long bz = 0; bz < n_batch; ++bz) {{ {after("0", "N", "")} }}
    return;
  }}
  {t}* const scratch = in{inputs.index(copy)};  /* the copy's buffer: only the tiles' size (`steps.im2col_scratch`) */
  {direct}
  {t}* a_buf = NULL;  /* a contiguous copy of the weight, when it is not a plain matrix */
  if (!lum_f64 && {K_TILED_C}) {{
    /* deep and narrow (a weight's gradient: K = batch x positions, N = channels x taps): tiles
       of Tk rows of the copy, all N columns, each multiplied into a partial M x N product of
       its own by a single-threaded GEMM, the partials then summed in tile order. Tk depends on
       N alone, so the bits do not depend on the team. Not at precision "float64", where the
       column tiles below keep one rounding per element. */
    const long long Tk = {K_TILE_ROWS_C}, n_kt = (K + Tk - 1) / Tk, nt = N, p0 = 0;
    {t}* const partial = scratch;  /* n_kt x M x N, then the threads' tiles of Tk x N */
    for (long long bz = 0; bz < n_batch; ++bz) {{
      {" ".join(blines)}
      const {t}* a_ptr; int a_tr; long long a_ld;
      {a_setup}
      #pragma omp parallel num_threads(lum_min(lum_threads, n_kt))  /* a tile each: no more than the scratch holds */
      {{
      {t}* const tile = scratch + n_kt * M * N + omp_get_thread_num() * Tk * N;
      #pragma omp for schedule(static)
      for (long long kt = 0; kt < n_kt; ++kt) {{
        const long long k0 = kt * Tk, nk = lum_min(Tk, K - k0);
        {fill_rows("k0", "nk")}
        lum_gemm_{g}(a_tr, 0, M, N, nk, a_ptr + (a_tr ? k0 * a_ld : k0), a_ld, tile, N, partial + kt * M * N, N);
      }}
      #pragma omp for schedule(static)
      for (long long q = 0; q < M * N; ++q) {{
        {t} s = partial[q];
        for (long long kt = 1; kt < n_kt; ++kt) s += partial[kt * M * N + q];
        out[bz * M * N + q] = s;
      }}
      }}
      {after("0", "N", "M * N")}
    }}
    free(a_buf);
    return;
  }}
  long long T = {TILE_FLOATS}LL / K;  /* columns per tile: the tile stays in cache */
  T = T < {TILE_MIN} ? {TILE_MIN} : T - T % 16;
  T = T < N ? T : N;
  /* tiles in parallel when there are enough for the team: each thread fills its own tile and
     multiplies it by a single-threaded GEMM while it is in its core's cache; the tiles shrink to
     a multiple of the team so no thread waits a whole tile for another, and stay within
     TILE_PAR columns, where luminal's SGEMM reads the weight in place. Else one tile after
     another, the fill across the team. Every element is one FMA chain in k order with luminal's
     SGEMM, so the bits do not depend on the team. Never at precision "float64". */
  const long long t_par = T < {TILE_PAR} ? T : {TILE_PAR};
  const int par = !lum_f64 && lum_threads > 1 && lum_threads * t_par <= N;
  if (par) {{
    T = t_par;
    const long long want = ((N + T - 1) / T + lum_threads - 1) / lum_threads * lum_threads;
    const long long t2 = ((N + want - 1) / want + 15) / 16 * 16;
    if (t2 < T) T = t2;
  }}
  const long long n_tiles = (N + T - 1) / T;
  for (long long bz = 0; bz < n_batch; ++bz) {{
    {" ".join(blines)}
    const {t}* a_ptr; int a_tr; long long a_ld;
    {a_setup}
    if (par) {{  /* an active region: each tile's GEMM on its calling thread */
      #pragma omp parallel
      {{
      {t}* const tile = scratch + omp_get_thread_num() * K * T;
      #pragma omp for schedule(static)
      {tile_loop("")}
      }}
    }} else {{  /* outside any region (inside even an inactive one, MKL threads by nested teams) */
      {t}* const tile = scratch;
      {tile_loop(f"#pragma omp parallel for if (K * nt >= {PAR_MIN})", "M * nt")}
    }}
  }}
  free(a_buf);
}}
"""
    return code, inputs, symbols


def noop_kernel(node: Node, name: str) -> str:
    """The step of a node a fused kernel computes (its buffer, if any, is that kernel's scratch)."""
    return f"static void {name}({C.ctype(node.dtype)}* restrict out) {{ (void)out; }}\n"


def fusion_plan(node: Node, users) -> Im2colGemm | WindowEpilogue | GemmEpilogue | None:
    """The fused kernel `node` heads, if any (`users`: readers by id, an output counting as one):
    a convolution's tiled im2col GEMM, a WindowReduce reading its padded operand in place, a
    WindowReduce's pointwise epilogue (which then absorbs that WindowReduce's plan), or the
    pointwise region after a GEMM (which then absorbs that GEMM's own plan, if any)."""
    if node.op is Op.MAT_MUL:
        return im2col_gemm(node, users)
    if node.op is Op.WINDOW_REDUCE:  # alone, reading its padded operand in place (a region after it may take it in)
        pad = window_pad(node, users)
        return None if pad is None else WindowEpilogue(node, node, pad)
    return window_epilogue(node, users) or gemm_epilogue(node, users)


def fused_kernel(plan: Im2colGemm | WindowEpilogue | GemmEpilogue, name: str, operand) -> tuple[str, list[Node], list[str]]:
    """(code, inputs, symbols) of the kernel of a `fusion_plan`."""
    if isinstance(plan, WindowEpilogue):
        return window_epilogue_kernel(plan, name, operand)
    if isinstance(plan, GemmEpilogue):
        if plan.gemm is None:
            return gemm_epilogue_kernel(plan, name, operand)
        return im2col_gemm_kernel(plan.gemm, name, operand, plan)
    return im2col_gemm_kernel(plan, name, operand)
