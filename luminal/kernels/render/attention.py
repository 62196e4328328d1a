"""Attention's kernels (the `Attention` op, `luminal/egraph/attention.py`): the scores are
never a buffer. Both dialects compute, per query row, an online softmax over blocks of keys:
the row's running max m and sum l, and an accumulator of p @ v rescaled by exp(m_old - m_new)
whenever the max grows; at the end out = acc / l.

Edge values as the unfused graph gives them: a row whose scores hold a NaN or +inf is NaN; a
row whose scores are all -inf is NaN, or, for torch's safe softmax (`zero_empty_rows`), p = 0,
so out = 0 @ v (NaN where v is); no keys at all gives 0. p = 0 terms are still multiplied
into the accumulator (0 * NaN in v is NaN, as in the GEMM).

- C: one task per (batch element, block of BQ queries), tasks spread over the OpenMP team; per
  block of BK keys, the scores as R keys x lum_w queries register tiles (R = 6 in f32, 4 in f64;
  GCC/Clang vector types as wide as the build's ISA: 64 bytes where `cpu/build` enables AVX-512,
  else 32; FMAs where the CPU has them, `cpu/render.attention`), the softmax's steps as vector loops over the queries (exp
  of exponents below LUM_LO, -inf ones of masked scores included, kept off glibc's vector exp,
  which takes a scalar path per lane for them), p @ v as R queries x lum_w columns tiles
  (`_c_body`). A mask that varies along one
  axis only (padding) is evaluated once per key or per query, not per score. Float
  accumulators; at precision "float64" (`lum_f64`) the same loops in double. Measured against
  the unfused path: `luminal/egraph/attention.py` (MIN_KEYS). In f32 with the library's BLAS
  bound and operands a GEMM reads in place, the same online softmax with the block products on
  the SGEMM runs instead (`attention_gemm.py`); these loops serve the rest.
- CUDA: a block per (batch element, 64 queries), a thread per query, its q row, accumulator
  and a tile's scores in registers; tiles of 32 keys of kᵀ and v staged in shared memory by the
  block (f32, f16 and bf16 heads of static size up to `CUDA_MAX_HEAD`; others, and f64: a thread
  per query reading keys from global memory).
- Few queries per batch element (decode; `attention_decode.py`): C loops that spread the keys,
  and on CUDA the split-K launches (a block per chunk of keys, then one combining the chunks).
- f16/bf16 (the softmax in f32 between casts): q, kᵀ, v read into float, each step of the
  scores rounded to the half type as its unfused op rounds (`_score`), the output rounded once;
  p stays f32 where the unfused graph rounds it before p @ v.
"""

from __future__ import annotations

from luminal.errors import UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node
from luminal.kernels.render import attention_decode, attention_gemm
from luminal.kernels.render.attention_parts import (
    _empty_row,
    _exp_floor,
    _literals,
    _mask_varies,
    _operands,
    _score,
    _store_rows,
    _v_rows,
)
from luminal.kernels.render.cexpr import c_dim
from luminal.kernels.render.cstyle import (
    LIBM,
    store_value,
    unravel,
)
from luminal.kernels.render.dialect import PAR_MIN, Dialect, Part

BQ, BK = 128, 128  # C: queries per task, keys per staged block (a tile's width, lum_w, is two or four vectors)
CUDA_Q, CUDA_K = 64, 32  # CUDA: queries per block (a thread each), keys per shared-memory tile
CUDA_MAX_HEAD = 64  # CUDA: the tiled kernel for static f32/f16/bf16 heads up to this size (q, acc, 32 scores in registers)


def attention(node: Node, d: Dialect):
    if node.dtype not in (DType.F32, DType.F64, DType.F16, DType.BF16):
        raise UnsupportedError(f"Attention on {node.dtype}")
    if d.name == "c":
        loops = attention_decode.c_few if attention_decode.few(node) else _c_body  # decode: its own loops
        if node.dtype is DType.F32:  # float loops, or double ones at precision "float64"
            body = f"{{\n  {loops(node, 'float')}\n  }}"
            gemm = None if loops is not _c_body else attention_gemm.gemm_body(node)
            if gemm is not None:  # on the library's SGEMM where it runs (`attention_gemm.py`), else the loops
                body = f"{{\n  {gemm[0]} {gemm[1]} else {body}\n  }}"
            body = f"if (lum_f64) {{\n  {loops(node, 'double')}\n  }} else {body}"
        else:  # f16/bf16 in float (the unfused softmax's f32), f64 in double
            body = loops(node, "double" if node.dtype is DType.F64 else "float")
        return [Part(body)], None
    if attention_decode.cuda_split(node):  # decode: split-K, two launches (`attention_decode.py`)
        return attention_decode.cuda_split_parts(node), None
    return [_cuda_part(node)], None


def _c_body(node: Node, t: str) -> str:
    """Per task: q's block transposed once (qT[c][i]); per block of keys, the scores transposed
    (sT[j][i]) so that the softmax's reductions over keys and the scores' tiles are vectors over
    queries; the block's keys staged as rows (kb[j][c]: one scalar per key and column, broadcast;
    read in place, a kᵀ laid out as (D, N) walks columns N floats apart, which at N = 2,048 fall
    in one L1 set), v's rows read in place when its view is plain rows of this element type,
    else staged."""
    q, kt, v, mask, at = _operands(node)
    batch = node.shape[:-2]
    z, zlines = unravel("bz", batch, "z")
    e = LIBM[t]
    ninf, inf, nan = _literals(t)
    per_query, per_key = _mask_varies(node)
    qmask = kmask = ""
    mask_code = None
    if mask is not None and not per_key:  # a value per query (or one for all): once per task
        qmask = f"for (int i = 0; i < nq; ++i) qm[i] = ({t})({mask(z, '(i0 + i)', '0')});"
        mask_code = "qm[i]"
    elif mask is not None and not per_query:  # a value per key (padding): once per key, not per score
        kmask = f"const {t} mk = ({t})({mask(z, 'i0', '(j0 + j)')});"
        mask_code = "mk"
    elif mask is not None:
        mask_code = f"({t})({mask(z, '(i0 + i)', '(j0 + j)')})"
    score = _score(node, t, mask_code)
    # vectors per tile row and rows (keys, or queries for p @ v) per tile: 16 or 12 accumulators,
    # within AVX2's 16 registers with the loads (f32: 12 FMAs per 2 vector loads and 6 broadcasts);
    # each output is one chain over c whatever the tile (README: "Fused attention")
    nv, R = (4, 4) if t == "double" else (2, 6)
    tiles = [(r, k) for r in range(R) for k in range(nv)]
    vrow, stage_v, v_direct, _ = _v_rows(v, z, t, at)
    zero = f"lum_vt {', '.join(f'c{r}{k} = {{0}}' for r, k in tiles)};"
    load_q = f"const lum_vt {', '.join(f'x{k} = *(const lum_vt*)(qt + {k} * lum_l)' for k in range(nv))};"
    keys = f"const {t} " + ", ".join(["b0 = kr[c]"] + [f"b{r} = kr[k{r} + c]" for r in range(1, R)]) + ";"
    key_rows = "const long long " + ", ".join(f"k{r} = (r > {r} ? {r} : 0) * D" for r in range(1, R)) + ";"
    p_rows = f"const {t} " + ", ".join(["a0 = pj[0]"] + [f"a{r} = pj[r > {r} ? {r} : 0]" for r in range(1, R)]) + ";"
    mac_k = " ".join(f"c{r}{k} += b{r} * x{k};" for r, k in tiles)
    store_s = " ".join(f"{'' if r == 0 else f'if (r > {r}) '}*(lum_vt*)(sb + (j + {r}) * {BQ} + ic + {k} * lum_l) = c{r}{k};" for r, k in tiles)
    at_row = lambda r: "" if r == 0 else f" + {r} * DV"  # noqa: E731
    load_o = zero + "\n            " + " ".join(
        f"{'' if r == 0 else f'if (r > {r}) '}c{r}{k} = *(const lum_vt*)(o0{at_row(r)} + {k} * lum_l);" for r, k in tiles)
    load_v = f"const lum_vt {', '.join(f'v{k} = *(const lum_vt*)(vr + {k} * lum_l)' for k in range(nv))};"
    mac_v = " ".join(f"c{r}{k} += a{r} * v{k};" for r, k in tiles)
    store_o = " ".join(f"{'' if r == 0 else f'if (r > {r}) '}*(lum_vt*)(o0{at_row(r)} + {k} * lum_l) = c{r}{k};" for r, k in tiles)
    block = f"""{{
#if defined(__AVX512F__)
    enum {{ lum_vb = 64 }};  /* the vector width the library is built for (build.machine_flags) */
#else
    enum {{ lum_vb = 32 }};
#endif
    typedef {t} lum_vt __attribute__((vector_size(lum_vb), aligned(sizeof({t}))));  /* GCC/Clang vectors: tiles stay in registers */
    enum {{ lum_l = lum_vb / sizeof({t}), lum_w = {nv} * lum_l }};  /* lanes, a tile's width: BQ is a multiple */
    {t}* qtb = ({t}*)malloc(sizeof({t}) * {BQ} * lum_max(D, 1));
    {t}* sb = ({t}*)malloc(sizeof({t}) * {BK} * {BQ});
    {t}* kb = ({t}*)malloc(sizeof({t}) * {BK} * lum_max(D, 1));  /* the block's keys as rows: kᵀ's columns are far apart */
    {t}* acc = ({t}*)malloc(sizeof({t}) * {BQ} * lum_max(DV, 1));
    {t}* vb = {"NULL" if v_direct else f"({t}*)malloc(sizeof({t}) * {BK} * lum_max(DV, 1))"};
    {t} mrow[{BQ}], mblk[{BQ}], alpha[{BQ}], qm[{BQ}];
    double lrow[{BQ}], lsum[{BQ}];  /* the softmax's sums in double, as the unfused Softmax kernel sums */
    {_exp_floor(t)}
    int badrow[{BQ}];
    #pragma omp for schedule(dynamic, 1)
    for (long long task = 0; task < n_tasks; ++task) {{
      const long long bz = task / n_qb, i0 = (task % n_qb) * {BQ};
      const int nq = (int)lum_min({BQ}, M - i0);
      {" ".join(zlines)}
      for (long long c = 0; c < D; ++c) for (int i = 0; i < {BQ}; ++i)
        qtb[c * {BQ} + i] = i < nq ? ({t})({at(q, *z, "(i0 + i)", "c")}) : ({t})0;
      for (int i = 0; i < {BQ}; ++i) {{ mrow[i] = {ninf}; lrow[i] = 0; badrow[i] = 0; }}
      for (long long c = 0; c < {BQ} * DV; ++c) acc[c] = 0;
      {qmask}
      for (long long j0 = 0; j0 < N; j0 += {BK}) {{
        const int nk = (int)lum_min({BK}, N - j0);
        for (long long c = 0; c < D; ++c) for (int j = 0; j < nk; ++j) kb[j * D + c] = ({t})({at(kt, *z, "c", "(j0 + j)")});
        {stage_v}
        for (int ic = 0; ic < nq; ic += lum_w) {{  /* scores of R keys x lum_w queries in vector registers */
          for (int j = 0; j < nk; j += {R}) {{  /* (inner: this chunk's columns of qT stay in L1) */
            const int r = nk - j < {R} ? nk - j : {R};
            const {t}* kr = kb + j * D;
            {key_rows}
            {zero}
            for (long long c = 0; c < D; ++c) {{
              const {t}* qt = qtb + c * {BQ} + ic;
              {load_q}
              {keys}
              {mac_k}
            }}
            {store_s}
          }}
        }}
        for (int i = 0; i < nq; ++i) {{ mblk[i] = {ninf}; lsum[i] = 0; }}
        for (int j = 0; j < nk; ++j) {{  /* scale, mask, each query's max over the block */
          {t}* s = sb + j * {BQ};
          {kmask}
          #pragma omp simd
          for (int i = 0; i < nq; ++i) {{ const {t} x = s[i]; const {t} y = {score}; s[i] = y; mblk[i] = y > mblk[i] ? y : mblk[i]; badrow[i] |= (y != y) | (y == {inf}); }}
        }}
        #pragma omp simd
        for (int i = 0; i < nq; ++i) {{  /* alpha < 0 marks an exponent below LUM_LO: exp'd exactly below */
          const {t} mn = mrow[i] > mblk[i] ? mrow[i] : mblk[i], d = mrow[i] - mn;
          /* (a clamp GCC cannot fold into the use's condition, which would pass d itself) */
          const {t} ea = exp{e}(d < LUM_LO || mn == {ninf} ? LUM_LO : d) * ({t})(d >= LUM_LO);
          alpha[i] = mn == {ninf} ? ({t})1 : d >= LUM_LO || d == {ninf} ? ea : d; mrow[i] = mn;
        }}
        int tiny = 0;  /* a p in (0, exp(LUM_LO)): its lane holds s - max (< 0) until the exact pass */
        for (int j = 0; j < nk; ++j) {{  /* p = exp(s - max), each query's sum */
          {t}* s = sb + j * {BQ};
          #pragma omp simd reduction(|:tiny)
          for (int i = 0; i < nq; ++i) {{
            const {t} d = s[i] - mrow[i];
            const int ok = d >= LUM_LO, low = d < LUM_LO && d > {ninf};
            const {t} p = exp{e}(d < LUM_LO || mrow[i] == {ninf} ? LUM_LO : d) * ({t})ok;  /* (as alpha's) */
            s[i] = low ? d : p; lsum[i] += p; tiny |= low;
          }}
        }}
        if (tiny) for (int j = 0; j < nk; ++j) for (int i = 0; i < nq; ++i) {{
          {t}* s = sb + j * {BQ} + i;
          if (*s < 0) {{ *s = exp{e}(*s); lsum[i] += *s; }}
        }}
        for (int i = 0; i < nq; ++i) {{
          if (alpha[i] < 0) alpha[i] = exp{e}(alpha[i]);
          lrow[i] = lrow[i] * alpha[i] + lsum[i];
          if (alpha[i] != ({t})1) {{ {t}* o = acc + i * DV; const {t} al = alpha[i]; for (long long c = 0; c < DV; ++c) o[c] *= al; }}
        }}
        for (int i = 0; i < nq; i += {R}) {{  /* acc += p @ v: R queries x lum_w columns in registers */
          const int r = nq - i < {R} ? nq - i : {R};
          long long cc = 0;
          for (; cc + lum_w <= DV; cc += lum_w) {{
            {t}* o0 = acc + i * DV + cc;
            {load_o}
            for (int j = 0; j < nk; ++j) {{
              const {t}* vr = {vrow} + cc;
              {load_v}
              const {t}* pj = sb + j * {BQ} + i;
              {p_rows}
              {mac_v}
            }}
            {store_o}
          }}
          for (int ii = 0; ii < r; ++ii) {{  /* the columns past the last whole group of lum_w */
            {t}* o = acc + (i + ii) * DV;
            for (int j = 0; j < nk; ++j) {{ const {t} a = sb[j * {BQ} + i + ii]; const {t}* vr = {vrow}; for (long long c = cc; c < DV; ++c) o[c] += a * vr[c]; }}
          }}
        }}
      }}
      {_store_rows(node, t)}
    }}
    free(qtb); free(sb); free(kb); free(acc); free(vb);
  }}"""
    m, dv, dd, n = node.shape[-2], node.shape[-1], q.shape[-1], kt.shape[-1]
    head = f"""const long long M = {c_dim(m)}, N = {c_dim(n)}, D = {c_dim(dd)}, DV = {c_dim(dv)};
  const long long n_qb = (M + {BQ - 1}) / {BQ}, n_tasks = {c_dim(sym.product(batch))} * n_qb;
  if (n_tasks <= 0 || DV <= 0) return;
  """
    return head + f"""if (n_tasks > 1 && n_tasks * {BQ} * lum_max(N, 1) * lum_max(D + DV, 1) >= {PAR_MIN}) {{
  #pragma omp parallel
  {block}
  }} else {block}"""


def cuda_tiled(node: Node) -> bool:
    """Whether CUDA renders `node` as the tiled kernel (a thread per query, which reads its q
    row once: `render/inline.py` lets a producer of q be computed there)."""
    d, dv = node.src[0].shape[-1], node.src[2].shape[-1]
    return (not attention_decode.cuda_split(node) and node.dtype is not DType.F64 and sym.is_static(d) and sym.is_static(dv)  # (f64 registers are pairs:
            and 1 <= int(d) <= CUDA_MAX_HEAD and 1 <= int(dv) <= CUDA_MAX_HEAD)  # its tiles would spill)


def _cuda_part(node: Node) -> Part:
    if cuda_tiled(node):
        return _cuda_tiled(node, int(node.src[0].shape[-1]), int(node.src[2].shape[-1]))
    return _cuda_rows(node)


def _cuda_common(node: Node, key: str):
    """What both CUDA kernels start from: the operands and their reader, the batch dims, the
    compute type and its libm suffix, the -inf/inf/NaN literals, the batch index unravelled (z,
    its lines), and the C of score x of query i and key `key` (scaled, masked)."""
    q, kt, v, mask, at = _operands(node)
    batch = node.shape[:-2]
    t = "double" if node.dtype is DType.F64 else "float"
    literals = _literals(t)
    z, zlines = unravel("bz", batch, "z")
    score = _score(node, t, None if mask is None else mask(z, "i", key))
    return q, kt, v, at, batch, t, LIBM[t], literals, z, zlines, score


def _cuda_tiled(node: Node, d: int, dv: int) -> Part:
    """A block per (batch element, CUDA_Q queries), a thread per query: its q row and its
    accumulator in registers; tiles of CUDA_K keys of kᵀ and v staged in shared memory by the
    whole block (every thread then reads the same key: a broadcast)."""
    q, kt, v, at, batch, t, e, (ninf, inf, nan), z, zlines, score = _cuda_common(node, "(j0 + j)")
    m, n = node.shape[-2], kt.shape[-1]
    tiles = sym.ceildiv(m, CUDA_Q)
    kq = CUDA_K
    body = f"""const long long M = {c_dim(m)}, N = {c_dim(n)};
  const long long bz = blockIdx.x / {c_dim(tiles)}, i = (blockIdx.x % {c_dim(tiles)}) * {CUDA_Q} + threadIdx.x;
  {" ".join(zlines)}
  const bool live = i < M;  // every thread stages tiles and meets the barriers; live ones compute
  __shared__ {t} Ks[{kq}][{d}];
  __shared__ {t} Vs[{kq}][{dv}];
  {t} qr[{d}], acc[{dv}], s[{kq}];
  #pragma unroll
  for (int c = 0; c < {d}; ++c) qr[c] = live ? ({t})({at(q, *z, "i", "c")}) : ({t})0;
  #pragma unroll
  for (int c = 0; c < {dv}; ++c) acc[c] = 0;
  {t} mrow = {ninf}, lrow = 0;
  int bad = 0;
  for (long long j0 = 0; j0 < N; j0 += {kq}) {{
    const int nk = (int)(N - j0 < {kq} ? N - j0 : {kq});
    for (int l = threadIdx.x; l < {kq * d}; l += {CUDA_Q}) {{ const int j = l / {d}, c = l % {d}; Ks[j][c] = j < nk ? ({t})({at(kt, *z, "c", "(j0 + j)")}) : ({t})0; }}
    for (int l = threadIdx.x; l < {kq * dv}; l += {CUDA_Q}) {{ const int j = l / {dv}, c = l % {dv}; Vs[j][c] = j < nk ? ({t})({at(v, *z, "(j0 + j)", "c")}) : ({t})0; }}
    __syncthreads();
    {t} mx = {ninf};
    #pragma unroll
    for (int j = 0; j < {kq}; ++j) {{
      {t} x = 0;
      #pragma unroll
      for (int c = 0; c < {d}; ++c) x += qr[c] * Ks[j][c];
      const {t} y = live && j < nk ? {score} : {ninf};
      bad |= (y != y) | (y == {inf});
      mx = y > mx ? y : mx;
      s[j] = y;
    }}
    const {t} mn = mrow > mx ? mrow : mx;
    const {t} alpha = mn == {ninf} ? ({t})1 : exp{e}(mrow - mn);
    {t} sum = 0;
    #pragma unroll
    for (int j = 0; j < {kq}; ++j) {{ const {t} p = mn == {ninf} || j >= nk ? ({t})0 : exp{e}(s[j] - mn); s[j] = p; sum += p; }}
    lrow = lrow * alpha + sum;
    mrow = mn;
    #pragma unroll
    for (int c = 0; c < {dv}; ++c) {{
      {t} a = acc[c] * alpha;
      #pragma unroll
      for (int j = 0; j < {kq}; ++j) a += s[j] * Vs[j][c];
      acc[c] = a;
    }}
    __syncthreads();
  }}
  if (!live) return;
  const long long o = (bz * M + i) * {dv};
  #pragma unroll
  for (int c = 0; c < {dv}; ++c)
    out[o + c] = {store_value(node.dtype, f"bad ? {nan} : mrow == {ninf} ? {_empty_row(node, 'acc[c]', nan)} : acc[c] / lrow")};"""
    return Part(body, sym.norm(sym.product(batch) * tiles), CUDA_Q)


def _cuda_rows(node: Node) -> Part:
    """A thread per query row: the online softmax over all keys, read from global memory, for
    heads larger than CUDA_MAX_HEAD or of symbolic size. f32/f64 accumulate in the row's own
    output (the accumulation type); f16/bf16 in registers, CUDA_MAX_HEAD columns of v per pass
    over the keys (the scores recomputed per pass), each pass's columns rounded once."""
    q, kt, v, at, batch, t, e, (ninf, inf, nan), z, zlines, score = _cuda_common(node, "j")
    m, dv, dd, n = node.shape[-2], node.shape[-1], q.shape[-1], kt.shape[-1]
    rows = sym.product([*batch, m])
    half = node.dtype in (DType.F16, DType.BF16)
    chunk = CUDA_MAX_HEAD if half else None
    acc = "a[c - c0]" if half else "o[c]"
    finish = f"bad ? {nan} : mrow == {ninf} ? {_empty_row(node, acc, nan)} : {acc} / lrow"
    cols = f"c0; c < (DV < c0 + {chunk} ? DV : c0 + {chunk})" if half else "0; c < DV"
    body = f"""long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= {c_dim(rows)}) return;
  const long long N = {c_dim(n)}, D = {c_dim(dd)}, DV = {c_dim(dv)};
  const long long i = row % {c_dim(m)}, bz = row / {c_dim(m)};
  {" ".join(zlines)}
  {f"for (long long c0 = 0; c0 < DV; c0 += {chunk}) {{ {t} a[{chunk}];" if half else f"{t}* o = out + row * DV; {{"}
  for (long long c = {cols}; ++c) {acc} = 0;
  {t} mrow = {ninf}, lrow = 0;
  int bad = 0;
  for (long long j = 0; j < N; ++j) {{
    {t} x = 0;
    for (long long c = 0; c < D; ++c) x += ({t})({at(q, *z, "i", "c")}) * ({t})({at(kt, *z, "c", "j")});
    const {t} y = {score};
    bad |= (y != y) | (y == {inf});
    const {t} mn = y > mrow ? y : mrow;
    const {t} alpha = mn == {ninf} ? ({t})1 : exp{e}(mrow - mn);
    const {t} p = mn == {ninf} ? ({t})0 : exp{e}(y - mn);
    lrow = lrow * alpha + p;
    mrow = mn;
    for (long long c = {cols}; ++c) {acc} = {acc} * alpha + p * ({t})({at(v, *z, "j", "c")});
  }}
  for (long long c = {cols}; ++c)
    {f"out[row * DV + c] = {store_value(node.dtype, finish)}" if half else f"o[c] = {finish}"};
  }}"""
    return Part(body, sym.ceildiv(rows, CUDA_Q), CUDA_Q)
