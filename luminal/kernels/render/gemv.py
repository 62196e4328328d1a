"""GEMV: a MatMul with M <= `GEMV_ROWS` (decode), streaming each weight once at memory bandwidth
(README: "Decode: the GEMV rule").

- `k`-contiguous B (a Linear's weight): a block per output column, or a warp where a row of B is at
  most `WARP_K_BYTES` (a block would idle), splitting K with 16-byte loads when aligned.
- any other B: 2 x 16 bytes of columns per block with 128 thread pairs splitting K where B is
  contiguous along n, else a lane per column.
Accumulates in f32 (f64 for f64); rows are unrolled with a guard, so a symbolic M of 1..8 shares it.
"""

from __future__ import annotations

from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.shape import contiguous_strides
from luminal.kernels.render.cexpr import c_dim
from luminal.kernels.render.cstyle import (
    KernelSpec,
    active,
    buffer_sources,
    dtypes_of,
    load_value,
    pointer_of,
    pointwise_value,
    read,
    signature,
    store_value,
    symbols_of,
    unravel,
    view_of,
)
from luminal.kernels.render.cstyle import lanes as preloaded

GEMV_ROWS = 8  # the most rows (M) one GEMV launch accumulates
GEMV_THREADS = 256
GEMV_WARPS = GEMV_THREADS // 32
WARP_K_BYTES = 2048  # a k-contiguous row of B at most this long gets a warp, not a block
FLOAT_TYPES = (DType.F32, DType.F16, DType.BF16, DType.F64)


def gemv(node, name, acc: str | None = None, residual: tuple | None = None, pair: tuple | None = None) -> list[KernelSpec]:
    """The GEMV kernel of MatMul `node`, accumulating in `acc` (default: float, double for f64).
    `residual` (out, r): the launch computes `out` = Add(node, r) instead, r added to each sum
    before its one rounding to out's dtype (`plan.residual_gemvs`: the MatMul never stored).
    `pair` (mm2, out): a second MatMul of the same A (k-contiguous Bs: a SwiGLU's gate and up)
    summed beside the first, and `out`, a pointwise node of the two, computed from both sums
    each rounded to its dtype, as the unfused launches would store them (`plan.pair_gemvs`)."""
    a, b = node.src
    out = residual[0] if residual is not None else pair[1] if pair is not None else node
    inputs = buffer_sources(node)
    symbols = symbols_of(node)
    if residual is not None or pair is not None:
        extra = buffer_sources(out, [residual[1]]) if residual is not None else buffer_sources(pair[0])
        inputs += [x for x in extra if all(x is not y for y in inputs)]
        symbols += [x for x in symbols_of(out) + (symbols_of(pair[0]) if pair else []) if x not in symbols]
    acc_t = "double" if node.dtype is DType.F64 or acc == "double" else "float"
    accs = ("acc", "acc2") if pair is not None else ("acc",)

    def put(at: str) -> str:
        """The statement storing the sums `s` (and `s2`) as output element `at`."""
        if residual is None and pair is None:
            return f"out[{at}] = {store_value(node.dtype, 's')};"
        names, lines = unravel("f_", out.shape, "e")
        head = f"const long long f_ = {at}; {' '.join(lines)}"
        if residual is not None:
            r_at = read(residual[1], names, pointer_of(residual[1], inputs))
            return f"{{ {head} out[f_] = {store_value(out.dtype, f's + ({acc_t})({r_at})')}; }}"
        t = active().ctype(node.dtype)
        with preloaded({id(x): "v0" if view_of(x)[0] is node else "v1" for x in out.src
                        if view_of(x)[0] is node or view_of(x)[0] is pair[0]}):
            value = pointwise_value(out, names, inputs)
        return (f"{{ {head} const {t} v0 = {store_value(node.dtype, 's')}; const {t} v1 = {store_value(node.dtype, 's2')}; "
                f"out[f_] = {store_value(out.dtype, value)}; }}")
    batch = node.shape[:-2]
    m, n, k = node.shape[-2], node.shape[-1], a.shape[-1]
    rows = min(GEMV_ROWS, m) if sym.is_static(m) else GEMV_ROWS
    bnames, blines = unravel("bz", batch, "z")
    out_base = " + ".join([f"{i} * {c_dim(s)}" for i, s in zip(bnames, contiguous_strides(node.shape))] + ["0LL"])
    pa, pb = pointer_of(a, inputs), pointer_of(b, inputs)
    a_at = lambda r, c: read(a, bnames + [r, c], pa)  # noqa: E731
    b_at = lambda r, c: read(b, bnames + [r, c], pb)  # noqa: E731
    bl = "\n  ".join(blines)
    n_batch = sym.product(batch)
    _, b_st = view_of(b)
    _, a_st = view_of(a)
    reduce = _reduction(rows, acc_t, put(f"{out_base} + r * N + col"), accs)
    parts = "".join(f"\n  __shared__ {acc_t} {p}[{GEMV_WARPS}][{rows}];" for p in _parts(accs))
    head = f"""{signature(name, out, inputs, symbols, False)} {{{parts}
  const long long M = {c_dim(m)}, K = {c_dim(k)}, N = {c_dim(n)};
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  {acc_t} {", ".join(f"{x}[{rows}]" for x in accs)};
  #pragma unroll
  for (int r = 0; r < {rows}; ++r) {{ {" ".join(f"{x}[r] = 0;" for x in accs)} }}"""
    small_k = sym.is_static(k) and k * node.dtype.itemsize <= WARP_K_BYTES
    if sym.equal(b_st.strides[-2], 1) and b_st.mask is None and a_st.mask is None and small_k:
        vec = _vectors(node, a, b, pair, inputs, bnames, rows, acc_t, "lane", 32)
        sums = " ".join(f"{acc_t} {v} = {x}[r]; for (int off = 16; off > 0; off >>= 1) {v} += __shfl_down_sync(0xffffffffu, {v}, off);"
                        for x, v in zip(accs, _sums(accs)))
        code = f"""{head}
  long long tiles = (N + {GEMV_WARPS - 1}) / {GEMV_WARPS};  // a warp per column: K is short
  long long col = (blockIdx.x % tiles) * {GEMV_WARPS} + warp, bz = blockIdx.x / tiles;
  if (col >= N) return;  // warp-uniform, and no barrier below
  {bl}
  {vec}
  #pragma unroll
  for (int r = 0; r < {rows}; ++r) {{
    {sums}
    if (lane == 0 && r < M) {put(f"{out_base} + r * N + col")}
  }}
  {" ".join(f"(void){p};" for p in _parts(accs))}
}}
"""
        grid = sym.norm(n_batch * sym.ceildiv(n, GEMV_WARPS))
    elif sym.equal(b_st.strides[-2], 1) and b_st.mask is None and a_st.mask is None:
        vec = _vectors(node, a, b, pair, inputs, bnames, rows, acc_t, "threadIdx.x", GEMV_THREADS)
        code = f"""{head}
  long long col = blockIdx.x % N, bz = blockIdx.x / N;
  {bl}
  {vec}
  {reduce}
}}
"""
        grid = sym.norm(n_batch * n)
    else:
        assert pair is None, "pair_gemvs takes k-contiguous weights only"
        v = _column_lanes(node, b)
        lanes = 2 if v > 1 else 32  # threads sharing one row of B per step; the others split K
        cols, groups = lanes * v, GEMV_THREADS // lanes
        loads = _column_loads(node, b, inputs, bnames, v, acc_t, b_at)
        code = f"""{head.replace(f"acc[{rows}]", f"acc[{rows}][{v}]").replace("acc[r] = 0", f"for (int j = 0; j < {v}; ++j) acc[r][j] = 0")}
  long long tiles = (N + {cols - 1}) / {cols};
  int cl = threadIdx.x % {lanes}, kg = threadIdx.x / {lanes};  // {lanes} x {v} columns, {groups} slices of K
  long long col = (blockIdx.x % tiles) * {cols} + cl * {v}, bz = blockIdx.x / tiles;
  {bl}
  for (long long kk = kg; kk < K; kk += {groups}) {{
    {acc_t} bv[{v}];
    {loads}
    #pragma unroll
    for (int r = 0; r < {rows}; ++r) {{
      if (r < M) {{
        {acc_t} av = ({acc_t})({a_at("r", "kk")});
        #pragma unroll
        for (int j = 0; j < {v}; ++j) acc[r][j] += av * bv[j];
      }}
    }}
  }}
  __shared__ {acc_t} red[{GEMV_WARPS}][{cols}];
  #pragma unroll
  for (int r = 0; r < {rows}; ++r) {{  // a row at a time: shuffles within a warp, then across warps
    #pragma unroll
    for (int j = 0; j < {v}; ++j) {{
      {acc_t} x = acc[r][j];
      for (int off = 16; off >= {lanes}; off >>= 1) x += __shfl_down_sync(0xffffffffu, x, off);
      if (lane < {lanes}) red[warp][cl * {v} + j] = x;
    }}
    __syncthreads();
    long long c = (blockIdx.x % tiles) * {cols} + threadIdx.x;
    if (threadIdx.x < {cols} && c < N && r < M) {{
      {acc_t} s = 0;
      for (int w = 0; w < {GEMV_WARPS}; ++w) s += red[w][threadIdx.x];
      {put(f"{out_base} + r * N + c")}
    }}
    __syncthreads();
  }}
  (void)part;
}}
"""
        grid = sym.norm(n_batch * sym.ceildiv(n, cols))
    gemm = (node, pair[0]) if pair is not None else node if residual is not None else None
    return [KernelSpec(name, code, out, inputs, symbols, grid, GEMV_THREADS, dtypes=dtypes_of(node) | dtypes_of(out), gemm=gemm)]


def _column_lanes(node, b) -> int:
    """Columns per lane in the n-contiguous form: 16 bytes of B's row where that divides N, else 1."""
    _, st = view_of(b)
    v = 16 // node.dtype.itemsize
    n = node.shape[-1]
    if st.mask is None and sym.equal(st.strides[-1], 1) and sym.is_static(n) and n % v == 0 and v <= GEMV_ROWS:
        return v
    return 1


def _column_loads(node, b, inputs, bnames, v, acc_t, b_at) -> str:
    """B[kk, col .. col + v) into `bv`: one 16-byte load when aligned (B's rows and base: block-
    uniform), else element by element."""
    if v == 1:
        return f"bv[0] = col < N ? ({acc_t})({b_at('kk', 'col')}) : ({acc_t})0;"
    base, st = view_of(b)
    t = base.dtype.ctype
    addr = " + ".join([c_dim(st.offset)] + [f"{i} * {c_dim(s)}" for i, s in zip(bnames + ["kk", "col"], st.strides)])
    row = c_dim(st.strides[-2])
    return f"""if (col < N) {{
      const {t}* bp = {pointer_of(b, inputs)} + {addr};
      alignas(16) {t} raw[{v}];
      if (lum_aligned16(bp) && (({row} * (long long)sizeof({t})) & 15) == 0) *(uint4*)raw = *(const uint4*)bp;
      else for (int j = 0; j < {v}; ++j) raw[j] = bp[j];
      #pragma unroll
      for (int j = 0; j < {v}; ++j) bv[j] = ({acc_t})({load_value(base.dtype, "raw[j]")});
    }} else {{
      for (int j = 0; j < {v}; ++j) bv[j] = 0;
    }}"""


def _vectors(node, a, b, pair, inputs, bnames, rows, acc_t, tid: str, step: int) -> str:
    """`_vector_loop` of each MatMul of the launch (`pair`: the second's into acc2)."""
    loops = [_vector_loop(node, a, b, inputs, bnames, rows, acc_t, tid, step)]
    if pair is not None:
        loops.append(_vector_loop(pair[0], a, pair[0].src[1], inputs, bnames, rows, acc_t, tid, step, "acc2"))
    return "\n  ".join(f"{{ {x} }}" for x in loops)


def _sums(accs) -> list[str]:
    return ["s" if x == "acc" else "s" + x[3:] for x in accs]


def _parts(accs) -> list[str]:
    return ["part" + x[3:] for x in accs]


def _vector_loop(node, a, b, inputs, bnames, rows, acc_t, tid: str, step: int, acc: str = "acc") -> str:
    """The split-K loop of the k-contiguous form over `step` threads (`tid` the thread's index
    among them): 16-byte loads when every row is aligned."""
    base_a, a_st = view_of(a)
    base_b, b_st = view_of(b)
    pa, pb = pointer_of(a, inputs), pointer_of(b, inputs)

    def addr(st, r, c):
        return " + ".join([c_dim(st.offset)] + [f"{i} * {c_dim(s)}" for i, s in zip(bnames + [r, c], st.strides)])

    s_t = node.dtype.ctype
    lanes = 16 // node.dtype.itemsize
    a_contig = sym.equal(a_st.strides[-1], 1)
    a_row = c_dim(a_st.strides[-2])
    cond = f"lum_aligned16(bp) && lum_aligned16(ap) && (M == 1 || (({a_row} * (long long)sizeof({s_t})) & 15) == 0)"
    scalar = f"""for (long long kk = {tid}; kk < K; kk += {step}) {{
      {acc_t} bv = ({acc_t})({load_value(base_b.dtype, "bp[kk]")});
      #pragma unroll
      for (int r = 0; r < {rows}; ++r)
        if (r < M) {acc}[r] += ({acc_t})({read(a, bnames + ["r", "kk"], pa)}) * bv;
    }}"""
    if not a_contig:
        return f"""const {s_t}* bp = {pb} + {addr(b_st, "0", "col")};
  {scalar}"""
    return f"""const {s_t}* bp = {pb} + {addr(b_st, "0", "col")};
  const {s_t}* ap = {pa} + {addr(a_st, "0", "0")};
  if ({cond}) {{  // block-uniform: 16-byte loads of B's column and A's rows
    const long long KV = K / {lanes};
    for (long long q = {tid}; q < KV; q += {step}) {{
      alignas(16) {s_t} bv[{lanes}];
      *(uint4*)bv = *(const uint4*)(bp + q * {lanes});
      #pragma unroll
      for (int r = 0; r < {rows}; ++r) {{
        if (r < M) {{
          alignas(16) {s_t} av[{lanes}];
          *(uint4*)av = *(const uint4*)(ap + r * {a_row} + q * {lanes});
          #pragma unroll
          for (int j = 0; j < {lanes}; ++j)
            {acc}[r] += ({acc_t})({load_value(base_a.dtype, "av[j]")}) * ({acc_t})({load_value(base_b.dtype, "bv[j]")});
        }}
      }}
    }}
    for (long long kk = KV * {lanes} + {tid}; kk < K; kk += {step}) {{  // the tail
      {acc_t} bv = ({acc_t})({load_value(base_b.dtype, "bp[kk]")});
      #pragma unroll
      for (int r = 0; r < {rows}; ++r)
        if (r < M) {acc}[r] += ({acc_t})({load_value(base_a.dtype, f"ap[r * {a_row} + kk]")}) * bv;
    }}
  }} else {{
    {scalar}
  }}"""


def _reduction(rows: int, acc_t: str, store: str, accs=("acc",)) -> str:
    """Each row's partial sums (of each accumulator): a shuffle tree per warp, then the warps'
    totals added by a thread per row."""
    shuffle = " ".join(f"{{ {acc_t} v = {x}[r]; for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off); "
                       f"if (lane == 0) {p}[warp][r] = v; }}" for x, p in zip(accs, _parts(accs)))
    total = " ".join(f"{acc_t} {v} = 0; for (int w = 0; w < {GEMV_WARPS}; ++w) {v} += {p}[w][r];"
                     for v, p in zip(_sums(accs), _parts(accs)))
    return f"""#pragma unroll
  for (int r = 0; r < {rows}; ++r) {{ {shuffle} }}
  __syncthreads();
  if (threadIdx.x < {rows} && threadIdx.x < M) {{
    int r = threadIdx.x;
    {total}
    {store}
  }}"""
