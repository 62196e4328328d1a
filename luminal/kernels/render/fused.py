"""Kernels for the fused ops the egraph layer produces (group FUSED of luminal.hlir.ops).

- FusedElementwise: one thread per element, the whole expression in registers, each input
  read once, one store (Exp and Sigmoid are elementwise kernels of `code_for_op`).
- Softmax: one block per row; an online (max, sum) per thread, merged across the block with
  warp shuffles; then one pass writes exp(x - max) / sum.
- KahanSum: a warp per output; each lane sums with Neumaier compensation, partials merged
  with a compensated two-sum through the shuffles.
- Concat: one thread per element, reading the first or the second operand (slice copies).
- MatMul: 32x32 output tiles of 256 threads (2x2 outputs each), K in steps of 16 through
  shared memory, f32 accumulation (f16/bf16 widen on load); for M <= 8 (decode) the GEMV
  kernel of gemv.py (128-bit loads, split-K across warps); integer M = 1: a warp per output.
"""

from __future__ import annotations

from luminal.errors import UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Op
from luminal.hlir.shape import contiguous_strides
from luminal.kernels.render.cexpr import c_dim, compute_type, index_type
from luminal.kernels.render.cstyle import (
    LIBM,
    WARPS_PER_BLOCK,
    KernelSpec,
    buffer_sources,
    dtypes_of,
    expression,
    index_variants,
    pointer_of,
    pointwise,
    read,
    signature,
    store_value,
    symbols_of,
    unravel,
    wrapping,
)
from luminal.kernels.render.gemv import FLOAT_TYPES, GEMV_ROWS, gemv
from luminal.kernels.render.kernels import reduce


def fused_elementwise(node, name) -> list[KernelSpec]:
    specs = pointwise(node, name, lambda idx, inputs: expression(
        node.arg, lambda i: read(node.src[i], idx, pointer_of(node.src[i], inputs))), vector=True)
    for k in specs:  # casts inside the region need their dtype's header too
        k.dtypes |= {e.dtype for e in node.arg.toposort()}
    return specs


def _row_setup(node, axis):
    """Index names of a row (all dims but `axis`) from the row number `row`."""
    row_shape = node.src[0].shape[:axis] + node.src[0].shape[axis + 1 :]
    names, lines = unravel("row", row_shape, "o")
    return row_shape, names, lines


SOFTMAX_THREADS = 128


def softmax(node, name) -> list[KernelSpec]:
    return index_variants(node, lambda: _softmax(node, name))


def _softmax(node, name) -> list[KernelSpec]:
    (src,) = node.src
    axis = node.arg
    if node.dtype not in (DType.F32, DType.F16, DType.BF16, DType.F64):
        raise UnsupportedError(f"Softmax on {node.dtype}")
    inputs = buffer_sources(node)
    symbols = symbols_of(node)
    t = compute_type(node.dtype)
    e = LIBM[t]
    row_shape, o, lines = _row_setup(node, axis)
    full = o[:axis] + ["j"] + o[axis:]
    x = read(src, full, pointer_of(src, inputs))
    strides = contiguous_strides(node.shape)
    out_addr = " + ".join(f"{i} * {c_dim(s)}" for i, s in zip(full, strides))
    n = c_dim(src.shape[axis])
    ninf = "-__int_as_float(0x7f800000)" if t == "float" else "-__longlong_as_double(0x7ff0000000000000LL)"
    body = "\n  ".join(lines)
    it = index_type()
    code = f"""{signature(name, node, inputs, symbols, False)} {{
  __shared__ {t} s_max[{SOFTMAX_THREADS // 32}];
  __shared__ {t} s_sum[{SOFTMAX_THREADS // 32}];
  {it} row = blockIdx.x;
  {body}
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  {t} m = {ninf}, s = 0;  // online softmax: running max and the sum scaled to it
  for ({it} j = threadIdx.x; j < {n}; j += blockDim.x) {{
    {t} v = {x};
    {t} m2 = lum_max_nan(m, v);  // a NaN max poisons the row, as in the decomposition
    s = (m == m2 ? s : s * exp{e}(m - m2)) + (v == {ninf} ? ({t})0 : exp{e}(v - m2));
    m = m2;
  }}
  for (int off = 16; off > 0; off >>= 1) {{  // merge (m, s) pairs across the warp
    {t} m_o = __shfl_down_sync(0xffffffffu, m, off), s_o = __shfl_down_sync(0xffffffffu, s, off);
    {t} m2 = lum_max_nan(m, m_o);
    s = (m == {ninf} ? ({t})0 : s * exp{e}(m - m2)) + (m_o == {ninf} ? ({t})0 : s_o * exp{e}(m_o - m2));
    m = m2;
  }}
  if (lane == 0) {{ s_max[warp] = m; s_sum[warp] = s; }}
  __syncthreads();
  m = s_max[0]; s = s_sum[0];
  for (int w = 1; w < {SOFTMAX_THREADS // 32}; ++w) {{
    {t} m2 = lum_max_nan(m, s_max[w]);
    s = (m == {ninf} ? ({t})0 : s * exp{e}(m - m2)) + (s_max[w] == {ninf} ? ({t})0 : s_sum[w] * exp{e}(s_max[w] - m2));
    m = m2;
  }}
  {t} inv = ({t})1 / s;  // a row of -inf gives 0 * inf = NaN, as the decomposition does
  for ({it} j = threadIdx.x; j < {n}; j += blockDim.x) {{
    out[{out_addr}] = {store_value(node.dtype, f"exp{e}(({x}) - m) * inv")};
  }}
}}
"""
    return [KernelSpec(name, code, node, inputs, symbols, sym.product(row_shape), SOFTMAX_THREADS, dtypes=dtypes_of(node))]


def kahan_sum(node, name) -> list[KernelSpec]:
    (src,) = node.src
    if not node.dtype.is_float:
        return reduce(node.replace(op=Op.SUM_REDUCE), name)  # integers sum exactly
    return index_variants(node, lambda: _kahan_sum(node, name))


def _kahan_sum(node, name) -> list[KernelSpec]:
    (src,) = node.src
    axis = node.arg
    inputs = buffer_sources(node)
    symbols = symbols_of(node, extra=[src.shape])
    t = compute_type(node.dtype)
    e = LIBM[t]
    n_out = sym.product(node.shape)
    o, lines = unravel("row", node.shape, "o")
    full = o[:axis] + ["r"] + o[axis:]
    x = read(src, full, pointer_of(src, inputs))
    body = "\n  ".join(lines)
    it = index_type()
    code = f"""{signature(name, node, inputs, symbols, False)} {{
  {it} row = ({it})blockIdx.x * {WARPS_PER_BLOCK} + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= {c_dim(n_out)}) return;  // warp-uniform
  {body}
  {t} s = 0, c = 0;  // Neumaier: c collects the low-order bits s + v loses
  for ({it} r = lane; r < {c_dim(src.shape[axis])}; r += 32) {{
    {t} v = {x};
    {t} u = s + v;
    if (u - u == ({t})0)  // u finite: an inf sum must not turn the compensation into NaN (inf - inf)
      c += fabs{e}(s) >= fabs{e}(v) ? (s - u) + v : (v - u) + s;
    s = u;
  }}
  for (int off = 16; off > 0; off >>= 1) {{  // compensated merge of the lanes' (s, c)
    {t} s_o = __shfl_down_sync(0xffffffffu, s, off), c_o = __shfl_down_sync(0xffffffffu, c, off);
    {t} u = s + s_o;
    c += c_o + (u - u == ({t})0 ? (fabs{e}(s) >= fabs{e}(s_o) ? (s - u) + s_o : (s_o - u) + s) : ({t})0);
    s = u;
  }}
  if (lane == 0) out[row] = {store_value(node.dtype, "s + c")};
}}
"""
    return [KernelSpec(name, code, node, inputs, symbols, sym.ceildiv(n_out, WARPS_PER_BLOCK), 32 * WARPS_PER_BLOCK,
                       dtypes=dtypes_of(node))]


TILE, KTILE = 32, 16


def matmul(node, name) -> list[KernelSpec]:
    """Float MatMuls: the GEMV kernel for M <= GEMV_ROWS, the tiled one above; a symbolic M gets
    both, picked per binding (the launch's `chooser`)."""
    m = node.shape[-2]
    if node.dtype not in FLOAT_TYPES:
        return _matmul(node, name)
    if sym.is_static(m):
        return gemv(node, name) if m <= GEMV_ROWS else _matmul(node, name)
    (tiled,) = _matmul(node, name)
    (small,) = gemv(node, f"{name}_gemv")
    tiled.variants = [small]
    tiled.chooser = lambda bindings: int(sym.evaluate(m, bindings) <= GEMV_ROWS)
    return [tiled]


def _matmul(node, name) -> list[KernelSpec]:
    a, b = node.src
    inputs = buffer_sources(node)
    symbols = symbols_of(node)
    t = "double" if node.dtype is DType.F64 else ("long long" if node.dtype is DType.I64 else
                                                  "int" if node.dtype is DType.I32 else "float")
    batch = node.shape[:-2]
    m, n, k = node.shape[-2], node.shape[-1], a.shape[-1]
    bnames, blines = unravel("bz", batch, "z")
    strides = contiguous_strides(node.shape)
    out_base = " + ".join([f"{i} * {c_dim(s)}" for i, s in zip(bnames, strides)] + ["0LL"])
    a_at = lambda r, c: read(a, bnames + [r, c], pointer_of(a, inputs))  # noqa: E731
    b_at = lambda r, c: read(b, bnames + [r, c], pointer_of(b, inputs))  # noqa: E731
    bl = "\n  ".join(blines)
    n_batch = sym.product(batch)

    def mac(acc: str, x: str, y: str = "") -> str:  # acc += x * y (or += x), wrapping on integers
        if t in ("float", "double"):
            return f"{acc} += {x} * {y};" if y else f"{acc} += {x};"
        return f"{acc} = {wrapping(t, acc, '+', wrapping(t, x, '*', y) if y else x)};"

    if sym.is_static(m) and m == 1:  # GEMV: a warp per output column
        code = f"""{signature(name, node, inputs, symbols, False)} {{
  long long w = (long long)blockIdx.x * {WARPS_PER_BLOCK} + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (w >= {c_dim(sym.norm(n_batch * n))}) return;  // warp-uniform
  long long col = w % {c_dim(n)}, bz = w / {c_dim(n)};
  {bl}
  long long row = 0;
  {t} acc = 0;
  for (long long kk = lane; kk < {c_dim(k)}; kk += 32) {mac("acc", f"({t})({a_at('row', 'kk')})", f"({t})({b_at('kk', 'col')})")}
  for (int off = 16; off > 0; off >>= 1) {mac("acc", "__shfl_down_sync(0xffffffffu, acc, off)")}
  if (lane == 0) out[{out_base} + col] = {store_value(node.dtype, "acc")};
}}
"""
        grid = sym.ceildiv(sym.norm(n_batch * n), WARPS_PER_BLOCK)
        return [KernelSpec(name, code, node, inputs, symbols, grid, 32 * WARPS_PER_BLOCK, dtypes=dtypes_of(node))]
    tiles_n, tiles_m = sym.ceildiv(n, TILE), sym.ceildiv(m, TILE)
    code = f"""{signature(name, node, inputs, symbols, False)} {{
  __shared__ {t} As[{KTILE}][{TILE + 1}];  // +1: no bank conflicts on the transposed reads
  __shared__ {t} Bs[{KTILE}][{TILE + 1}];
  long long tile = blockIdx.x;
  long long tn = tile % {c_dim(tiles_n)}; tile /= {c_dim(tiles_n)};
  long long tm = tile % {c_dim(tiles_m)}; long long bz = tile / {c_dim(tiles_m)};
  {bl}
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // each thread: rows ty, ty+16; cols tx, tx+16
  {t} acc[2][2] = {{{{0, 0}}, {{0, 0}}}};
  for (long long k0 = 0; k0 < {c_dim(k)}; k0 += {KTILE}) {{
    for (int l = threadIdx.x; l < {KTILE * TILE}; l += 256) {{  // stage A[32 x 16] and B[16 x 32]
      int kk = l % {KTILE}, rr = l / {KTILE};
      long long ar = tm * {TILE} + rr, ak = k0 + kk;
      As[kk][rr] = (ar < {c_dim(m)} && ak < {c_dim(k)}) ? ({t})({a_at("ar", "ak")}) : ({t})0;
      int cc = l % {TILE}, kb = l / {TILE};
      long long bk = k0 + kb, bc = tn * {TILE} + cc;
      Bs[kb][cc] = (bk < {c_dim(k)} && bc < {c_dim(n)}) ? ({t})({b_at("bk", "bc")}) : ({t})0;
    }}
    __syncthreads();
    for (int kk = 0; kk < {KTILE}; ++kk) {{
      {t} a0 = As[kk][ty], a1 = As[kk][ty + 16], b0 = Bs[kk][tx], b1 = Bs[kk][tx + 16];
      {mac("acc[0][0]", "a0", "b0")} {mac("acc[0][1]", "a0", "b1")} {mac("acc[1][0]", "a1", "b0")} {mac("acc[1][1]", "a1", "b1")}
    }}
    __syncthreads();
  }}
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {{
      long long r = tm * {TILE} + ty + 16 * i, c = tn * {TILE} + tx + 16 * j;
      if (r < {c_dim(m)} && c < {c_dim(n)}) out[{out_base} + r * {c_dim(n)} + c] = {store_value(node.dtype, "acc[i][j]")};
    }}
}}
"""
    grid = sym.norm(n_batch * tiles_m * tiles_n)
    return [KernelSpec(name, code, node, inputs, symbols, grid, 256, dtypes=dtypes_of(node))]


def concat(node, name) -> list[KernelSpec]:
    """out[.., i, ..] = a[.., i, ..] for i < len_a along the axis, else b[.., i - len_a, ..]."""
    a, b = node.src
    axis = node.arg
    split = c_dim(a.shape[axis])

    def value(idx, inputs):
        shifted = idx[:axis] + [f"({idx[axis]} - {split})"] + idx[axis + 1 :]
        return f"({idx[axis]} < {split} ? {read(a, idx, pointer_of(a, inputs))} : {read(b, shifted, pointer_of(b, inputs))})"

    return pointwise(node, name, value)

