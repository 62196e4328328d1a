"""GroupedMatMul on the CPU: one BLAS GEMM per group on its contiguous range of rows.

g(s) = #{i : offs[i] <= s} is nondecreasing in s, so the rows of group e are one range, from the
e-th smallest offset (clamped to [0, S]) to the next: the offsets are read at run time, sorted
(already sorted for the cumulative counts MoE routing makes: one pass), and each nonempty group is
`lum_gemm` of its rows (S_e x K) by its expert's matrix (K x N), written in place; the rows past the
last offset are zeroed. Operands are the views themselves when they are plain (maybe transposed)
matrices of the compute type, else copies (`render._operand`: x once, a group's matrix per group,
f16/bf16 widened to f32), as MatMul's extern step. Integer dtypes use the shared generator.
"""

from __future__ import annotations

from luminal.hlir.ops import Node
from luminal.kernels.render.cexpr import c_dim, compute_type
from luminal.kernels.render.cstyle import buffer_sources, pointer_of, read, store_value, symbols_of


def grouped_matmul(node: Node, name: str, operand, kernel):
    """The C kernel; `operand` and `kernel` are `render._operand` and `render.kernel` (MatMul's)."""
    x, w, offs = node.src
    inputs = buffer_sources(node)
    if not node.dtype.is_float or pointer_of(x, inputs) is None or pointer_of(w, inputs) is None:
        return None  # integers (no BLAS), or an operand that is one broadcast scalar: the generator
    t = compute_type(node.dtype)
    g = {"float": "f", "double": "d"}[t]
    rows, n, k, experts = (c_dim(d) for d in (node.shape[0], node.shape[1], x.shape[1], w.shape[0]))
    a_setup, _ = operand(x, "a", [], x.shape[0], x.shape[1], inputs, t)
    b_setup, _ = operand(w, "b", ["e"], w.shape[1], w.shape[2], inputs, t)
    direct = node.dtype.ctype == t
    zero = store_value(node.dtype, "0")
    code = f"""const long long S = {rows}, N = {n}, K = {k}, E = {experts};
  if (S <= 0 || N <= 0) return;
  long long* ends = (long long*)malloc(sizeof(long long) * lum_max(1, E));
  for (long long e = 0; e < E; ++e) {{
    const long long v = (long long)({read(offs, ["e"], pointer_of(offs, inputs))});
    ends[e] = v < 0 ? 0 : v > S ? S : v;
  }}
  for (long long e = 1; e < E; ++e) {{  /* insertion sort: one pass over nondecreasing offsets */
    const long long v = ends[e]; long long j = e;
    while (j > 0 && ends[j - 1] > v) {{ ends[j] = ends[j - 1]; --j; }}
    ends[j] = v;
  }}
  const long long covered = E > 0 ? ends[E - 1] : 0;  /* rows past it belong to no group */
  for (long long q = (K <= 0 ? 0 : covered) * N; q < S * N; ++q) out[q] = {zero};
  if (K <= 0 || covered <= 0) {{ free(ends); return; }}
  {t}* a_buf = NULL;  /* contiguous copies, when an operand is not a plain matrix */
  {t}* b_buf = NULL;
  {t}* c_buf = {"NULL" if direct else f"({t}*)malloc(sizeof({t}) * covered * N)"};
  const {t}* a_ptr; const {t}* b_ptr; int a_tr, b_tr; long long a_ld, b_ld;
  {a_setup}
  long long start = 0;
  for (long long e = 0; e < E; ++e) {{
    const long long end = ends[e];
    if (end > start) {{
      {b_setup}
      lum_gemm_{g}(a_tr, b_tr, end - start, N, K, a_tr ? a_ptr + start : a_ptr + start * a_ld, a_ld, b_ptr, b_ld,
                   {"out" if direct else "c_buf"} + start * N, N);
    }}
    start = end;
  }}
  {"" if direct else f"for (long long q = 0; q < covered * N; ++q) out[q] = {store_value(node.dtype, 'c_buf[q]')};"}
  free(ends); free(a_buf); free(b_buf); free(c_buf);"""
    return kernel(name, node, inputs, symbols_of(node, extra=[s.shape for s in node.src]), False, code)
