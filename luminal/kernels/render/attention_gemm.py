"""Attention's f32 C kernel on the CPU library's SGEMM (`lum_sgemm`: the BLAS, or luminal's AVX-512
one in front of it): the online softmax of `attention.py`, with the two products of each block
(S = Q·Kᵀ and P·V) as GEMM calls on the calling thread of the team, the way PyTorch's CPU flash
attention does it; P·V, where the library is built for AVX-512, V's rows are contiguous and its
width a multiple of the tile's, on a micro-kernel that reads P in place (`c/attention_pv.h`: a BLAS packs all of P, as large as
the block's scores, every call). The register-tile kernel (`attention._c_body`) serves what this one does not:
f64, f16/bf16 (their scores round to the half type), precision "float64", no BLAS, and operands
no GEMM can read in place.

Layout: scores as rows (a query's BK keys contiguous), so the softmax's passes are vector loops
along a row and P·V is a plain GEMM. Blocks of BQ queries x BK keys: larger blocks keep the GEMMs
near the BLAS's peak (the figures: README, "Fused attention").

Operands are read in place: q (M, D), kᵀ (D, N) and v (N, DV) each a matrix of f32 with one axis
of stride 1 and the other at least as long as its rows (a head cut out of a wider row, transposed
or not: BLAS's leading dimension); the test is made at run time, where symbolic strides are
known. Each output's value does not depend on the team (tasks are fixed blocks of queries), and
edge values follow the register kernel's: a row with a NaN or +inf score is NaN; an all -inf row is
NaN, or 0 @ v under `zero_empty_rows`; p below exp(LUM_LO) is the exact denormal exp.
"""

from __future__ import annotations

from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Node, attention_arg
from luminal.kernels.render.attention_parts import _exp_floor, _mask_varies, _operands, _score, _store_rows
from luminal.kernels.render.cexpr import c_dim
from luminal.kernels.render.cstyle import current, pointer_of, unravel, view_of
from luminal.kernels.render.dialect import PAR_MIN

BQ, BK = 256, 512  # queries per task, keys per block (measured: README, "Fused attention")


def _in_place(x: Node, z: list[str]) -> tuple[str, str, str] | None:
    """(pointer at batch element z, next-to-last axis's stride, last axis's stride) of operand x
    read in place by a GEMM: a plain strided view of an f32 buffer; else None."""
    base, st = view_of(x)
    ptr = pointer_of(x, current()[1])
    if ptr is None or st.mask is not None or base.dtype.ctype != "float":
        return None
    at = " + ".join([c_dim(st.offset)] + [f"{i} * {c_dim(s)}" for i, s in zip(z, st.strides[:-2])])
    return f"({ptr} + {at})", c_dim(st.strides[-2]), c_dim(st.strides[-1])


def gemm_body(node: Node) -> tuple[str, str] | None:
    """(C condition, C block) of the GEMM kernel for an f32 Attention node, None where it cannot
    apply."""
    q, kt, v, mask, _ = _operands(node)
    z, zlines = unravel("bz", node.shape[:-2], "z")
    found = [_in_place(x, z) for x in (q, kt, v)]
    if any(f is None for f in found):
        return None
    (qp, q0, q1), (kp, k0, k1), (vp, v0, v1) = found
    per_query, per_key = _mask_varies(node)
    qmask = kmask = ""
    mask_code = None
    if mask is not None and not per_key:  # one value per query (or one for all): once per task
        qmask = f"for (int i = 0; i < nq; ++i) qm[i] = (float)({mask(z, '(i0 + i)', '0')});"
        mask_code = "qm[i]"
    elif mask is not None and not per_query:  # one per key (padding): once per block of keys
        kmask = f"for (int j = 0; j < nk; ++j) km[j] = (float)({mask(z, 'i0', '(j0 + j)')});"
        mask_code = "km[j]"
    elif mask is not None:
        mask_code = f"(float)({mask(z, '(i0 + i)', '(j0 + j)')})"
    score = _score(node, "float", mask_code)
    # pass 2 computes a score again where that is a multiply and an add; a mask computed per score
    # (causal, ALiBi: index arithmetic) or a function of the scores (a soft cap) is cheaper stored by pass 1
    transform = attention_arg(node.arg)[5]
    stored = (mask is not None and per_query and per_key) or transform is not None
    keep, again = ("s[j] = y;", "const float y = s[j];") if stored else ("", f"const float y = {score};")
    # mode 1: the last axis has stride 1 (rows), 2: the next-to-last has (a transposed matrix)
    m, dv, dd, n = node.shape[-2], node.shape[-1], q.shape[-1], kt.shape[-1]
    modes = f"""const long long M = {c_dim(m)}, N = {c_dim(n)}, D = {c_dim(dd)}, DV = {c_dim(dv)};
  const long long q_s0 = {q0}, q_s1 = {q1}, k_s0 = {k0}, k_s1 = {k1}, v_s0 = {v0}, v_s1 = {v1};
  const int q_mode = q_s1 == 1 && q_s0 >= lum_max(D, 1) ? 1 : q_s0 == 1 && q_s1 >= lum_max(lum_min(M, {BQ}), 1) ? 2 : 0;
  const int k_mode = k_s1 == 1 && k_s0 >= lum_max(lum_min(N, {BK}), 1) ? 1 : k_s0 == 1 && k_s1 >= lum_max(D, 1) ? 2 : 0;
  const int v_mode = v_s1 == 1 && v_s0 >= lum_max(DV, 1) ? 1 : v_s0 == 1 && v_s1 >= lum_max(lum_min(N, {BK}), 1) ? 2 : 0;"""
    cond = "lum_sgemm != NULL && !lum_f64 && D > 0 && q_mode && k_mode && v_mode"
    par = f"n_tasks_g > 1 && n_tasks_g * {BQ} * lum_max(N, 1) * lum_max(D + DV, 1) >= {PAR_MIN}"
    ninf, inf = "lum_f32_bits(0xff800000u)", "lum_f32_bits(0x7f800000u)"
    block = f"""{{
  const long long n_qb_g = (M + {BQ - 1}) / {BQ}, n_tasks_g = {c_dim(sym.product(node.shape[:-2]))} * n_qb_g;
  if (n_tasks_g <= 0 || DV <= 0) return;
  #pragma omp parallel if ({par})
  {{
    const int mkl_ = lum_mkl_one();  /* MKL on this thread of the team: one thread (prelude) */
    const long long ls = lum_max(lum_min(N, {BK}), 16), rows = lum_min(M, {BQ});  /* (as short as the problem) */
    float* sb = (float*)aligned_alloc(64, sizeof(float) * rows * ls);  /* S, then P: a query's keys as a row, ls apart */
    float* acc = (float*)aligned_alloc(64, sizeof(float) * rows * lum_max(DV, 16));
    float mrow[{BQ}], alpha[{BQ}], qm[{BQ}], km[{BK}];
    double lrow[{BQ}];  /* the softmax's sums: a block's in float lanes, the blocks' in double */
    int badrow[{BQ}];
    {_exp_floor("float")}
    (void)qm; (void)km;
    #pragma omp for schedule(dynamic, 1)
    for (long long task = 0; task < n_tasks_g; ++task) {{
      const long long bz = task / n_qb_g, i0 = (task % n_qb_g) * {BQ};
      const int nq = (int)lum_min({BQ}, M - i0);
      {" ".join(zlines)}
      const float* q_at = {qp}; const float* k_at = {kp}; const float* v_at = {vp};
      for (int i = 0; i < nq; ++i) {{ mrow[i] = {ninf}; lrow[i] = 0; badrow[i] = 0; }}
      for (long long c = 0; c < (long long)nq * DV; ++c) acc[c] = 0;
      {qmask}
      for (long long j0 = 0; j0 < N; j0 += {BK}) {{
        const int nk = (int)lum_min({BK}, N - j0);
        {kmask}
        lum_sgemm(101, q_mode == 1 ? 111 : 112, k_mode == 1 ? 111 : 112, nq, nk, D, 1.0f,
                  q_mode == 1 ? q_at + i0 * q_s0 : q_at + i0, q_mode == 1 ? q_s0 : q_s1,
                  k_mode == 1 ? k_at + j0 : k_at + j0 * k_s1, k_mode == 1 ? k_s0 : k_s1, 0.0f, sb, ls);  /* S = Q Kᵀ */
        for (int i = 0; i < nq; ++i) {{
          float* s = sb + (long long)i * ls;
          float mb = {ninf}; int bad = 0;
          #pragma omp simd reduction(max:mb) reduction(|:bad)
          for (int j = 0; j < nk; ++j) {{  /* the row's max score over the block */
            const float x = s[j]; const float y = {score}; {keep} mb = y > mb ? y : mb; bad |= (y != y) | (y == {inf});
          }}
          badrow[i] |= bad;
          const float mn = mrow[i] > mb ? mrow[i] : mb;
          float sum = 0;
          if (mn == {ninf}) {{  /* every score so far -inf: p = 0 (the row's end decides NaN or 0) */
            memset(s, 0, sizeof(float) * nk);
            alpha[i] = 1;
          }} else {{
            int tiny = 0;  /* a p in (0, exp(LUM_LO)): its lane holds s - max (< 0) until the exact pass */
            #pragma omp simd reduction(+:sum) reduction(|:tiny)
            for (int j = 0; j < nk; ++j) {{  /* p = exp(score - max), the row's sum */
              const float x = s[j]; {again} const float d = y - mn; (void)x;
              const int ok = d >= LUM_LO, low = d < LUM_LO && d > {ninf};
              const float p = lum_expf_nonpos(d < LUM_LO ? LUM_LO : d) * (float)ok;
              s[j] = low ? d : p; sum += p; tiny |= low;
            }}
            if (tiny) for (int j = 0; j < nk; ++j) if (s[j] < 0) {{ s[j] = expf(s[j]); sum += s[j]; }}
            alpha[i] = expf(mrow[i] - mn);  /* 0 from a -inf max; exact below exp(LUM_LO) (scalar) */
          }}
          mrow[i] = mn;
          lrow[i] = lrow[i] * alpha[i] + sum;
        }}
        for (int i = 0; i < nq; ++i) {{  /* acc = acc * alpha, then acc += P V in the GEMM (beta 1: no copy of P V) */
          const float al = alpha[i];
          if (al == 1.0f) continue;
          float* o = acc + (long long)i * DV;
          #pragma omp simd
          for (long long c = 0; c < DV; ++c) o[c] = o[c] * al;
        }}
        if (LUM_PV_WANTED && v_mode == 1 && DV % LUM_PV_COLS == 0)  /* P V, P read in place (c/attention_pv.h) */
          lum_attn_pv(nq, nk, DV, sb, ls, v_at + j0 * v_s0, v_s0, acc, DV);
        else lum_sgemm(101, 111, v_mode == 1 ? 111 : 112, nq, DV, nk, 1.0f, sb, ls,
                       v_mode == 1 ? v_at + j0 * v_s0 : v_at + j0, v_mode == 1 ? v_s0 : v_s1, 1.0f, acc, DV);
      }}
      {_store_rows(node, 'float')}
    }}
    free(sb); free(acc);
    lum_mkl_restore(mkl_);
  }}
  }}"""
    return modes + "\n  " + f"if ({cond})", block

