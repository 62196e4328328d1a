"""MatMul in the CUDA dialect, the kernel behind its "gemm" extern step (what the emulator runs):
32x32 output tiles of 256 threads, K in steps of 16 through shared memory, f32 accumulation; the
GEMV kernel (gemv.py) for M <= 8; integer M = 1: a warp per output.
"""

from __future__ import annotations

from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.shape import contiguous_strides
from luminal.kernels.render.cexpr import c_dim
from luminal.kernels.render.cstyle import (
    KernelSpec,
    buffer_sources,
    dtypes_of,
    pointer_of,
    read,
    signature,
    store_value,
    symbols_of,
    unravel,
    wrapping,
)
from luminal.kernels.render.dialect import WARPS_PER_BLOCK
from luminal.kernels.render.gemv import FLOAT_TYPES, GEMV_ROWS, gemv

TILE, KTILE = 32, 16


def matmul(node, name) -> list[KernelSpec]:
    """Float MatMuls: the GEMV kernel for M <= GEMV_ROWS, the tiled one above; a symbolic M gets
    both, picked per binding (the launch's `chooser`)."""
    m = node.shape[-2]
    if node.dtype not in FLOAT_TYPES:
        return _matmul(node, name)
    if sym.is_static(m):
        (spec,) = gemv(node, name) if m <= GEMV_ROWS else _matmul(node, name)
    else:
        (spec,) = _matmul(node, name)
        (small,) = gemv(node, f"{name}_gemv")
        spec.variants = [small]
        spec.chooser = lambda bindings: int(sym.evaluate(m, bindings) <= GEMV_ROWS)
    if node.dtype is not DType.F64:  # precision "float64": the tiles accumulate in double, rounded once
        (spec.wide,) = _matmul(node, f"{name}_f64acc", acc="double")
    return [spec]


def residual_gemv(mm, out, r, name) -> list[KernelSpec]:
    """The launch of `out` = Add(MatMul `mm`, r) for a GEMV's M (`plan.residual_gemvs`): the GEMV
    kernel adding r to each sum before its one rounding, and its build accumulating in double
    (precision "float64")."""
    (spec,) = gemv(mm, name, residual=(out, r))
    if mm.dtype is not DType.F64:
        (spec.wide,) = gemv(mm, f"{name}_f64acc", acc="double", residual=(out, r))
    return [spec]


def pair_gemv(mm, mm2, out, name) -> list[KernelSpec]:
    """The launch of pointwise `out` of two GEMVs of the same A (`plan.pair_gemvs`: a SwiGLU's
    gate and up), both summed in one pass over A, and its double-accumulating build."""
    (spec,) = gemv(mm, name, pair=(mm2, out))
    if mm.dtype is not DType.F64:
        (spec.wide,) = gemv(mm, f"{name}_f64acc", acc="double", pair=(mm2, out))
    return [spec]


def _matmul(node, name, acc: str | None = None) -> list[KernelSpec]:
    """The tiled kernel (a warp per output for an integer M = 1), accumulating in `acc` (by
    default the output's compute type: float for f16/bf16)."""
    a, b = node.src
    inputs = buffer_sources(node)
    symbols = symbols_of(node)
    t = acc or ("double" if node.dtype is DType.F64 else ("long long" if node.dtype is DType.I64 else
                                                         "int" if node.dtype is DType.I32 else "float"))
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

    if sym.is_static(m) and m == 1 and acc is None:  # GEMV: a warp per output column
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
