"""Attention with few queries per batch element (decode: one query a head, or a GQA group's G
heads folded into the rows of one KV head): kernels that spread the keys, not the queries.
The tiles of `attention.py` are as wide as a vector (C) or a block (CUDA) of queries, so a
handful of queries would leave most of them idle.

- C (`c_few`): a task per (batch element, span of FEW_SPLIT keys; spans combined after); per
  block of FEW_BK keys, the scores 4 keys at a time, each a dot product over the head (a SIMD
  reduction) with the key's row read in place (staged where kᵀ is no transposed view of plain
  rows), then scale, transform and mask as one vector pass per query, the online softmax per
  query row, and acc += p @ v as vector loops over the value columns, 4 rows a pass.
- CUDA split-K (`cuda_split_parts`, flash-decoding): two launches. The first has a block per (batch
  element, chunk of SPLIT_KEYS keys), so a long KV cache fills the GPU even with one head. Its
  threads compute the chunk's scores a key each, the chunk's max, sum and NaN/+inf flag per
  query a warp each, and its p @ v a (query, column) pair each. It writes them to a scratch
  buffer (`partials`: per row and chunk, DV accumulators, then max, sum and flag). The second has
  a block per query row: it rescales each chunk by exp(max_chunk - max) and divides by the sum.

Edge values as `attention.py`'s kernels give them: a NaN or +inf score makes the row NaN, an all
-inf row is NaN (0 @ v for the safe softmax), no keys give 0, and p = 0 terms are multiplied into
the accumulator (0 * NaN in v is NaN). A chunk whose scores are all -inf keeps p = 0 and max -inf,
so its rescale factor is exp(-inf) = 0 in a row with a finite max: 0 * its accumulator keeps a
NaN of v, as the unfused product does.
"""

from __future__ import annotations

from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op
from luminal.kernels.render.attention_parts import (
    _empty_row,
    _exp_floor,
    _k_rows,
    _literals,
    _operands,
    _score,
    _store_rows,
    _v_rows,
)
from luminal.kernels.render.cexpr import c_dim
from luminal.kernels.render.cstyle import LIBM, current, store_value, unravel
from luminal.kernels.render.dialect import PAR_MIN, Part

FEW_QUERIES = 15  # queries per batch element (static) up to which these kernels are taken: fewer than a tile's 16
FEW_BK = 256  # C: keys per staged block (its scores, M x FEW_BK, stay in L1)
FEW_SPLIT = 2048  # C: a longer cache is split into spans of this many keys, each a task (a team's threads share a
# head: MQA), combined after; set by N alone, so the bits do not depend on the team's size
SPLIT_KEYS = 128  # CUDA: keys per chunk (a thread each in the first launch)
SPLIT_MAX_HEAD = 128  # CUDA: static q and v heads up to this size (q and the chunk's p in shared memory)
SPLIT_THREADS = 128  # CUDA: threads per block of the first launch
COMBINE_THREADS = 64  # CUDA: threads per block of the second (a query row; columns spread over them)
_PARTIALS = "split-K partials"  # the scratch node's arg tag


def few(node: Node) -> bool:
    """Whether `node` has few (static) queries per batch element: these kernels take it."""
    m = node.shape[-2]
    return sym.is_static(m) and 1 <= int(m) <= FEW_QUERIES


def cuda_split(node: Node) -> bool:
    """Whether CUDA renders `node` as the split-K launches (static heads within SPLIT_MAX_HEAD)."""
    d, dv = node.src[0].shape[-1], node.src[2].shape[-1]
    return (few(node) and sym.is_static(d) and sym.is_static(dv)
            and 1 <= int(d) <= SPLIT_MAX_HEAD and 1 <= int(dv) <= SPLIT_MAX_HEAD)


def partials(node: Node) -> Node:
    """The scratch buffer of `node`'s split-K launches: (*batch, M, chunks, DV + 3) in the
    compute type (DV accumulators, then the chunk's max, sum and NaN/+inf flag per query row)."""
    t = DType.F64 if node.dtype is DType.F64 else DType.F32
    chunks = sym.ceildiv(node.src[1].shape[-1], SPLIT_KEYS)
    return Node(Op.ATTENTION, t, (*node.shape[:-1], chunks, int(node.shape[-1]) + 3), node.src, (_PARTIALS, node.arg))


def is_partials(node: Node) -> bool:
    return node.op is Op.ATTENTION and isinstance(node.arg, tuple) and node.arg[:1] == (_PARTIALS,)


def c_few(node: Node, t: str) -> str:
    """The C loops (compute type `t`) of a few-query Attention (see the module docstring)."""
    q, kt, v, mask, at = _operands(node)
    batch = node.shape[:-2]
    z, zlines = unravel("bz", batch, "z")
    e = LIBM[t]
    ninf, inf, nan = _literals(t)
    empty = _empty_row(node, "a", nan)
    m, dv, dd, n = int(node.shape[-2]), node.shape[-1], q.shape[-1], kt.shape[-1]

    score = _score(node, t, None if mask is None else f"({t})({mask(z, 'i', '(j0 + j)')})")

    vrow, stage_v, v_direct, vstep = _v_rows(v, z, t, at)
    krow, stage_k, kstep = _k_rows(kt, z, t, at)
    block = f"""{{
    {t}* qs = ({t}*)malloc(sizeof({t}) * {m} * lum_max(D, 1));
    {t}* kb = {"NULL" if not stage_k else f"({t}*)malloc(sizeof({t}) * {FEW_BK} * lum_max(D, 1))"};  /* the block's keys as rows */
    {t}* sb = ({t}*)malloc(sizeof({t}) * {m} * {FEW_BK});
    {t}* acc = ({t}*)malloc(sizeof({t}) * {m} * lum_max(DV, 1));
    {t}* vb = {"NULL" if v_direct else f"({t}*)malloc(sizeof({t}) * {FEW_BK} * lum_max(DV, 1))"};
    {t} mrow[{m}], mx[{m}];
    double lrow[{m}];  /* the softmax's sums in double, as the unfused Softmax kernel sums */
    int badrow[{m}], bad[{m}];
    {_exp_floor(t)}
    #pragma omp for schedule(dynamic, 1)
    for (long long task = 0; task < n_tasks * n_split; ++task) {{  /* (batch element, span of FEW_SPLIT keys) */
      const long long bz = task / n_split, k0 = (task % n_split) * {FEW_SPLIT}, k1 = lum_min(N, k0 + {FEW_SPLIT});
      const long long i0 = 0;
      const int nq = {m};
      {" ".join(zlines)}
      for (long long i = 0; i < {m}; ++i) for (long long c = 0; c < D; ++c) qs[i * D + c] = ({t})({at(q, *z, "i", "c")});
      for (int i = 0; i < {m}; ++i) {{ mrow[i] = {ninf}; lrow[i] = 0; badrow[i] = 0; }}
      for (long long c = 0; c < {m} * DV; ++c) acc[c] = 0;
      for (long long j0 = k0; j0 < k1; j0 += {FEW_BK}) {{
        const int nk = (int)lum_min({FEW_BK}, k1 - j0);
        {stage_k}
        {stage_v}
        int j = 0;
        for (; j + 4 <= nk; j += 4) {{  /* the scores: 4 keys at a time, a dot product over the head each (4 vector chains) */
          const {t}* k0 = {krow};
          const {t}* k1 = k0 + {kstep}, *k2 = k1 + {kstep}, *k3 = k2 + {kstep};
          for (long long i = 0; i < {m}; ++i) {{
            const {t}* qi = qs + i * D;
            {t} x0 = 0, x1 = 0, x2 = 0, x3 = 0;
            #pragma omp simd reduction(+:x0, x1, x2, x3)
            for (long long c = 0; c < D; ++c) {{ const {t} qc = qi[c]; x0 += qc * k0[c]; x1 += qc * k1[c]; x2 += qc * k2[c]; x3 += qc * k3[c]; }}
            {t}* s = sb + i * {FEW_BK} + j;
            s[0] = x0; s[1] = x1; s[2] = x2; s[3] = x3;
          }}
        }}
        for (; j < nk; ++j) {{  /* the last keys, one at a time */
          const {t}* kr = {krow};
          for (long long i = 0; i < {m}; ++i) {{
            const {t}* qi = qs + i * D;
            {t} x = 0;
            #pragma omp simd reduction(+:x)
            for (long long c = 0; c < D; ++c) x += qi[c] * kr[c];
            sb[i * {FEW_BK} + j] = x;
          }}
        }}
        for (long long i = 0; i < {m}; ++i) {{  /* the scores scaled, (capped,) masked: each query's max, NaN/+inf flag */
          {t}* s = sb + i * {FEW_BK};
          {t} mb = {ninf};
          int b = 0;
          #pragma omp simd reduction(max:mb) reduction(|:b)
          for (int j = 0; j < nk; ++j) {{ const {t} x = s[j]; const {t} y = {score}; s[j] = y; b |= (y != y) | (y == {inf}); mb = y > mb ? y : mb; }}
          mx[i] = mb; bad[i] = b;
        }}
        for (int i = 0; i < {m}; ++i) {{  /* the online softmax's step per query */
          {t}* s = sb + i * {FEW_BK};
          badrow[i] |= bad[i];
          const {t} mn = mrow[i] > mx[i] ? mrow[i] : mx[i];
          const {t} alpha = mn == {ninf} ? ({t})1 : exp{e}(mrow[i] - mn);
          double sum = 0;
          int tiny = 0;  /* an exponent below LUM_LO (not -inf): its lane keeps s - max (< 0) until the exact pass */
          if (mn == {ninf}) for (int j = 0; j < nk; ++j) s[j] = 0;
          else {{
            #pragma omp simd reduction(+:sum) reduction(|:tiny)
            for (int j = 0; j < nk; ++j) {{  /* p = exp(s - max): a vector exp (`LUM_LIBMVEC`) off its slow inputs */
              const {t} d = s[j] - mn;
              const int ok = d >= LUM_LO, low = d < LUM_LO && d > {ninf};
              const {t} p = exp{e}(ok ? d : LUM_LO) * ({t})ok;
              s[j] = low ? d : p; sum += p; tiny |= low;
            }}
          }}
          if (tiny) for (int j = 0; j < nk; ++j) if (s[j] < 0) {{ s[j] = exp{e}(s[j]); sum += s[j]; }}
          lrow[i] = lrow[i] * alpha + sum;
          mrow[i] = mn;
          {t}* o = acc + i * DV;
          if (alpha != ({t})1) for (long long c = 0; c < DV; ++c) o[c] *= alpha;
        }}
        for (int i = 0; i < {m}; ++i) {{  /* acc += p @ v: 4 value rows a pass over the query's accumulator row */
          const {t}* s = sb + i * {FEW_BK};
          {t}* o = acc + i * DV;
          int j = 0;
          for (; j + 4 <= nk; j += 4) {{
            const {t}* v0 = {vrow};
            const {t}* v1 = v0 + {vstep}, *v2 = v1 + {vstep}, *v3 = v2 + {vstep};
            const {t} a0 = s[j], a1 = s[j + 1], a2 = s[j + 2], a3 = s[j + 3];
            #pragma omp simd
            for (long long c = 0; c < DV; ++c) o[c] += a0 * v0[c] + a1 * v1[c] + a2 * v2[c] + a3 * v3[c];
          }}
          for (; j < nk; ++j) {{
            const {t}* v0 = {vrow};
            const {t} a0 = s[j];
            #pragma omp simd
            for (long long c = 0; c < DV; ++c) o[c] += a0 * v0[c];
          }}
        }}
      }}
      if (n_split == 1) {{
      {_store_rows(node, t)}
      }} else for (int i = 0; i < {m}; ++i) {{  /* the span's partial: acc, max, sum, flag */
        double* pt = part + (task * {m} + i) * (DV + 3);
        for (long long c = 0; c < DV; ++c) pt[c] = acc[i * DV + c];
        pt[DV] = mrow[i]; pt[DV + 1] = lrow[i]; pt[DV + 2] = badrow[i];
      }}
    }}
    if (n_split > 1) {{
      #pragma omp for schedule(static)
      for (long long bz = 0; bz < n_tasks; ++bz) for (int i = 0; i < {m}; ++i) {{  /* the spans combined, rescaled to the row's max */
        double* pt = part + (bz * n_split * {m} + i) * (DV + 3);
        const long long step = {m} * (DV + 3);
        double mt = {ninf}, lt = 0;
        int bt = 0;
        for (long long sp = 0; sp < n_split; ++sp) {{ mt = pt[sp * step + DV] > mt ? pt[sp * step + DV] : mt; bt |= pt[sp * step + DV + 2] != 0; }}
        for (long long sp = 0; sp < n_split; ++sp) {{  /* each span's factor, once: it takes the max's place */
          double* f = pt + sp * step + DV;
          *f = mt == {ninf} ? 1.0 : exp(*f - mt);
          lt += f[1] * f[0];
        }}
        const long long dst = (bz * M + i) * DV;
        for (long long c = 0; c < DV; ++c) {{
          double a = 0;
          for (long long sp = 0; sp < n_split; ++sp) a += pt[sp * step + c] * pt[sp * step + DV];
          out[dst + c] = {store_value(node.dtype, f"bt ? {nan} : mt == {ninf} ? {empty} : a / lt")};
        }}
      }}
    }}
    free(qs); free(kb); free(sb); free(acc); free(vb);
  }}"""
    head = f"""const long long M = {m}, N = {c_dim(n)}, D = {c_dim(dd)}, DV = {c_dim(dv)};
  const long long n_tasks = {c_dim(sym.product(batch))}, n_split = N > {FEW_SPLIT} ? (N + {FEW_SPLIT - 1}) / {FEW_SPLIT} : 1;
  if (n_tasks <= 0 || DV <= 0) return;
  double* part = n_split > 1 ? (double*)malloc(sizeof(double) * n_tasks * n_split * M * (DV + 3)) : NULL;
  """
    return head + f"""if (n_tasks * n_split > 1 && n_tasks * M * lum_max(N, 1) * lum_max(D + DV, 1) >= {PAR_MIN}) {{
  #pragma omp parallel
  {block}
  }} else {block}
  free(part);"""


def cuda_split_parts(node: Node) -> list[Part]:
    """The two CUDA launches of a few-query Attention (see the module docstring)."""
    q, kt, v, mask, at = _operands(node)
    batch = node.shape[:-2]
    z, zlines = unravel("bz", batch, "z")
    t = "double" if node.dtype is DType.F64 else "float"
    e = LIBM[t]
    ninf, inf, nan = _literals(t)
    m, d, dv, n = int(node.shape[-2]), int(q.shape[-1]), int(node.shape[-1]), kt.shape[-1]
    chunks = sym.ceildiv(n, SPLIT_KEYS)
    kc, warps, width = SPLIT_KEYS, SPLIT_THREADS // 32, dv + 3
    score = _score(node, t, None if mask is None else mask(z, "i", "(j0 + j)"))
    first = f"""const long long N = {c_dim(n)}, S = {c_dim(chunks)};
  const long long bz = blockIdx.x / S, chunk = blockIdx.x % S, j0 = chunk * {kc};
  {" ".join(zlines)}
  const int nk = (int)(N - j0 < {kc} ? N - j0 : {kc});
  __shared__ {t} Qs[{m}][{d}];
  __shared__ {t} Ps[{m}][{kc}];
  __shared__ {t} Rm[{m}], Rl[{m}];
  __shared__ int Rb[{m}];
  for (int l = threadIdx.x; l < {m * d}; l += {SPLIT_THREADS}) {{ const long long i = l / {d}, c = l % {d}; Qs[i][c] = ({t})({at(q, *z, "i", "c")}); }}
  __syncthreads();
  for (int j = threadIdx.x; j < nk; j += {SPLIT_THREADS}) {{  /* a key per thread: its score for every query */
    {t} xs[{m}];
    #pragma unroll
    for (int i = 0; i < {m}; ++i) xs[i] = 0;
    for (int c = 0; c < {d}; ++c) {{
      const {t} kv = ({t})({at(kt, *z, "c", "(j0 + j)")});
      #pragma unroll
      for (int i = 0; i < {m}; ++i) xs[i] += Qs[i][c] * kv;
    }}
    #pragma unroll
    for (int ii = 0; ii < {m}; ++ii) {{ const long long i = ii; const {t} x = xs[ii]; Ps[ii][j] = {score}; }}
  }}
  __syncthreads();
  const int lane = threadIdx.x & 31;
  for (int i = threadIdx.x >> 5; i < {m}; i += {warps}) {{  /* a warp per query: the chunk's max, flag, p and sum */
    {t} mx = {ninf};
    int bad = 0;
    for (int j = lane; j < nk; j += 32) {{ const {t} y = Ps[i][j]; bad |= (y != y) | (y == {inf}); mx = y > mx ? y : mx; }}
    for (int o = 16; o > 0; o >>= 1) {{
      const {t} other = __shfl_xor_sync(0xffffffffu, mx, o);
      mx = other > mx ? other : mx;
      bad |= __shfl_xor_sync(0xffffffffu, bad, o);
    }}
    {t} sum = 0;
    for (int j = lane; j < nk; j += 32) {{ const {t} p = mx == {ninf} ? ({t})0 : exp{e}(Ps[i][j] - mx); Ps[i][j] = p; sum += p; }}
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) {{ Rm[i] = mx; Rl[i] = sum; Rb[i] = bad; }}
  }}
  __syncthreads();
  for (int l = threadIdx.x; l < {m * dv}; l += {SPLIT_THREADS}) {{  /* the chunk's p @ v: a (query, column) each */
    const int i = l / {dv}, c = l % {dv};
    {t} a = 0;
    for (int j = 0; j < nk; ++j) a += Ps[i][j] * ({t})({at(v, *z, "(j0 + j)", "c")});
    out[((bz * {m} + i) * S + chunk) * {width} + c] = a;
  }}
  if (threadIdx.x < {m}) {{
    const long long o = ((bz * {m} + threadIdx.x) * S + chunk) * {width} + {dv};
    out[o] = Rm[threadIdx.x]; out[o + 1] = Rl[threadIdx.x]; out[o + 2] = ({t})Rb[threadIdx.x];
  }}"""
    empty = _empty_row(node, "a", nan)
    scratch = f"in{len(current()[1])}"  # the first launch's buffer, after the node's inputs (`CudaDialect.kernels`)
    second = f"""const long long N = {c_dim(n)}, S = {c_dim(chunks)}, row = blockIdx.x;
  const {t}* P = {scratch} + row * S * {width};
  {t} mx = {ninf};
  int bad = 0;
  for (long long s = 0; s < S; ++s) {{ const {t} ms = P[s * {width} + {dv}]; mx = ms > mx ? ms : mx; bad |= P[s * {width} + {dv + 2}] != ({t})0; }}
  {t} l = 0;
  for (long long s = 0; s < S; ++s) l += P[s * {width} + {dv + 1}] * (mx == {ninf} ? ({t})1 : exp{e}(P[s * {width} + {dv}] - mx));
  for (int c = threadIdx.x; c < {dv}; c += {COMBINE_THREADS}) {{
    {t} a = 0;
    for (long long s = 0; s < S; ++s) a += P[s * {width} + c] * (mx == {ninf} ? ({t})1 : exp{e}(P[s * {width} + {dv}] - mx));
    out[row * {dv} + c] = {store_value(node.dtype, f"bad ? {nan} : mx == {ninf} ? {empty} : a / l")};
  }}"""
    rows = sym.norm(sym.product(batch) * m)
    return [Part(first, sym.norm(sym.product(batch) * chunks), SPLIT_THREADS, scratch=partials(node)),
            Part(second, rows, COMBINE_THREADS)]
