"""The C dialect's own kernels (`render_node`'s `special` for C); every other op is the shared
generator in the C dialect.

- MatMul: the plan's "gemm" extern step, a BLAS call per batch element on the operand views when
  they are plain (maybe transposed) matrices, else on contiguous copies (f16/bf16 widened to f32);
- WindowReduce: one vector loop per output row with the weights loaded before it, or over short
  rows one per flat plane (`conv.window_reduce`);
- a padded copy (Contiguous or Select of a masked view): rows of fill, copy, fill (`pad_copy.pad_copy`);
- a transposing copy (Contiguous of a view whose last dim is not the source's contiguous one, another
  dim is): in square tiles (`transpose_copy`).
"""

from __future__ import annotations

from luminal.errors import UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import ConstantArray, Node, Op
from luminal.hlir.shape import ShapeTracker, contiguous_strides, merged_stride
from luminal.kernels.cpu import conv as cpu_conv
from luminal.kernels.cpu.grouped import grouped_matmul
from luminal.kernels.cpu.pad_copy import pad_copy
from luminal.kernels.cpu.prelude import c_source
from luminal.kernels.render.cexpr import c_dim, compute_type
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
    view_of,
)
from luminal.kernels.render.dialect import PAR_MIN, C


def kernel(name: str, node: Node, inputs: list[Node], symbols: list[str], err: bool, body: str) -> list[KernelSpec]:
    """A C kernel function around `body`."""
    src = f"{signature(name, node, inputs, symbols, err)} {{\n  {body}\n}}\n"
    return [KernelSpec(name, src, node, inputs, symbols, None, 0, err, dtypes_of(node))]


_GEMM = {"float": "f", "double": "d", "int": "i", "long long": "ll"}


def stored_weight(x: Node) -> bool:
    """`x` reads a weight stored in the graph (a CONSTANT array)."""
    base = view_of(x)[0]
    return base.op is Op.CONSTANT and isinstance(base.arg, ConstantArray)


def packs_weight(node: Node, b: Node) -> bool:
    """Whether the GEMM computing `node` = A @ `b` is a float32 one whose B is a stored weight (a
    linear layer's): its call goes through `lum_gemm_fw`, which reads the weight's panels packed
    once per runtime (the prelude)."""
    t = compute_type(node.dtype)
    return t == "float" and node.dtype.ctype == t and stored_weight(b)


def gemm_call(node: Node, b: Node, args: str) -> str:
    """The C call of a GEMM step computing `node` = A @ `b` (`args`: the operands as `_operand` set
    them up, then M, N, K, A, lda, B, ldb, C, ldc): `lum_gemm_fw` where `packs_weight` (only where
    B is the weight itself, not the copy `_operand` made: `b_buf`), else `lum_gemm_<t>`."""
    if packs_weight(node, b):
        return f"lum_gemm_fw(b_ptr != b_buf, a_tr, b_tr, {args});"
    return f"lum_gemm_{_GEMM[compute_type(node.dtype)]}(a_tr, b_tr, {args});"


def _operand(x: Node, which: str, bnames, rows, cols, inputs, t) -> tuple[str, str]:
    """(setup, call args) for one GEMM operand: the view itself when it is a plain (maybe
    transposed) matrix of the compute type, checked at run time, else a contiguous copy."""
    base, st = view_of(x)
    ptr = pointer_of(x, inputs)
    r, c = c_dim(rows), c_dim(cols)
    copy = f"""if (!{which}_buf) {which}_buf = ({t}*)malloc(sizeof({t}) * lum_max(1, {r} * {c}));
      for (long long q = 0; q < {r}; ++q) for (long long p = 0; p < {c}; ++p)
        {which}_buf[q * {c} + p] = ({t})({read(x, bnames + ["q", "p"], ptr)});
      {which}_ptr = {which}_buf; {which}_tr = 0; {which}_ld = lum_max(1, {c});"""
    full_mask = st.mask is None or all(sym.equal(lo, 0) and sym.equal(hi, d) for (lo, hi), d in zip(st.mask, st.shape))
    if compute_type(base.dtype) != t or base.dtype.ctype != t or not full_mask:
        return f"""{{
      {copy}
    }}""", "copy"
    sr, sc = c_dim(st.strides[-2]), c_dim(st.strides[-1])
    off = " + ".join([c_dim(st.offset)] + [f"{i} * {c_dim(s)}" for i, s in zip(bnames, st.strides[:-2])])
    return f"""{{
      const long long sr = {sr}, sc = {sc};
      if (sc == 1 && (sr >= lum_max(1, {c}) || {r} <= 1)) {{ {which}_ptr = {ptr} + {off}; {which}_tr = 0; {which}_ld = {r} <= 1 ? lum_max(1, {c}) : sr; }}
      else if (sr == 1 && (sc >= lum_max(1, {r}) || {c} <= 1)) {{ {which}_ptr = {ptr} + {off}; {which}_tr = 1; {which}_ld = {c} <= 1 ? lum_max(1, {r}) : sc; }}
      else {{
      {copy}
      }}
    }}""", "view"


def _folded_rows(node: Node) -> Node | None:
    """A batch of GEMMs against one B (B's batch strides all 0: an LSTM's input projection over
    its time steps, (T, 1, K) @ (K, 4H)) whose A rows run on at one stride across the batch: A
    as one (batch * M, K) matrix view, so the batch is one GEMM reading B once instead of one
    GEMV per element (T passes over the weight); None where that does not hold. Static shapes
    and strides only; the output (batch, M, N), contiguous, is that GEMM's (batch * M, N)."""
    a, b = node.src
    batch = node.shape[:-2]
    if not batch or not all(sym.is_static(d) for d in (*node.shape, a.shape[-1])) or int(sym.product(batch)) <= 1 \
            or int(sym.product(node.shape)) == 0:
        return None
    if compute_type(node.dtype) not in ("float", "double") or node.dtype.ctype != compute_type(node.dtype):
        return None
    b_st, (a_base, a_st) = view_of(b)[1], view_of(a)
    if b_st.mask is not None or a_st.mask is not None:
        return None
    if not all(sym.equal(w, 0) or sym.equal(d, 1) for d, w in zip(b_st.shape[:-2], b_st.strides[:-2])):
        return None
    if not all(sym.is_static(w) for w in (*a_st.strides, a_st.offset)):
        return None
    row_stride = merged_stride(a_st.shape[:-1], a_st.strides[:-1])
    if row_stride is None:
        return None
    n_rows = int(sym.product(node.shape[:-1]))
    st = ShapeTracker((n_rows, a_st.shape[-1]), (int(row_stride), int(a_st.strides[-1])), int(a_st.offset))
    return Node(Op.VIEW, a.dtype, st.shape, (a_base,), st)


def matmul(node: Node, name: str):
    """The extern GEMM step: one BLAS call per batch element (loops for integers), or one for the
    whole batch where its elements share B (`_folded_rows`)."""
    a, b = node.src
    if node.dtype is DType.BOOL:
        raise UnsupportedError("MatMul on bool")
    inputs = buffer_sources(node)
    t = compute_type(node.dtype)
    batch = node.shape[:-2]
    m, n, k = (c_dim(d) for d in (node.shape[-2], node.shape[-1], a.shape[-1]))
    folded = _folded_rows(node)
    if folded is not None:
        rows = c_dim(folded.shape[0])
        a_setup, _ = _operand(folded, "a", [], folded.shape[0], folded.shape[1], inputs, t)
        b_setup, _ = _operand(b, "b", ["0"] * len(batch), b.shape[-2], b.shape[-1], inputs, t)
        return kernel(name, node, inputs, symbols_of(node), False, f"""if ({k} <= 0) {{ for (long long q = 0; q < {rows} * {n}; ++q) out[q] = 0; return; }}
  {t}* a_buf = NULL;
  {t}* b_buf = NULL;
  const {t}* a_ptr; const {t}* b_ptr; int a_tr, b_tr; long long a_ld, b_ld;
  {a_setup}
  {b_setup}
  {gemm_call(node, b, f"{rows}, {n}, {k}, a_ptr, a_ld, b_ptr, b_ld, out, {n}")}
  free(a_buf); free(b_buf);""")
    bnames, blines = unravel("bz", batch, "z")
    a_setup, _ = _operand(a, "a", bnames, a.shape[-2], a.shape[-1], inputs, t)
    b_setup, _ = _operand(b, "b", bnames, b.shape[-2], b.shape[-1], inputs, t)
    direct = node.dtype.ctype == t
    c_ptr = f"out + bz * {m} * {n}" if direct else "c_buf"
    store = "" if direct else f"""for (long long q = 0; q < {m} * {n}; ++q) out[bz * {m} * {n} + q] = {store_value(node.dtype, "c_buf[q]")};"""
    setup = "\n    ".join(blines)

    def batch_loop(pragma: str) -> str:  # the GEMMs of batch elements (a thread's share under `omp for`)
        return f"""{t}* a_buf = NULL;  // contiguous copies (per thread), allocated when an operand is not a plain matrix
    {t}* b_buf = NULL;
    {t}* c_buf = {"NULL" if direct else f"({t}*)malloc(sizeof({t}) * {m} * {n})"};
    {pragma}
    for (long long bz = 0; bz < n_batch; ++bz) {{
      {setup}
      const {t}* a_ptr; const {t}* b_ptr; int a_tr, b_tr; long long a_ld, b_ld;
      {a_setup}
      {b_setup}
      {gemm_call(node, b, f"{m}, {n}, {k}, a_ptr, a_ld, b_ptr, b_ld, {c_ptr}, {n}")}
      {store}
    }}
    free(a_buf); free(b_buf); free(c_buf);"""

    n_batch = sym.product(batch)
    head = f"""const long long n_batch = {c_dim(n_batch)};
  if ({m} <= 0 || {n} <= 0) return;
  if ({k} <= 0) {{ for (long long q = 0; q < n_batch * {m} * {n}; ++q) out[q] = {store_value(node.dtype, "0")}; return; }}
  """
    if sym.is_static(n_batch) and n_batch <= 1:
        # one GEMM: only the serial loop (lum_batch_parallel would be false), less for cc to compile
        return kernel(name, node, inputs, symbols_of(node), False, head + f"""{{
    {batch_loop("")}
  }}""")
    code = head + f"""/* a batch's small GEMMs one per thread when the BLAS is the team's own; else serially outside
     any parallel region (inside even an inactive one, MKL builds nested teams afresh per call) */
  if (lum_batch_parallel(n_batch, {m}, {n}, {k})) {{
    #pragma omp parallel
    {{
    const int mkl_ = lum_mkl_one();
    {batch_loop("#pragma omp for schedule(static)")}
    lum_mkl_restore(mkl_);
    }}
  }} else {{
    {batch_loop("")}
  }}"""
    return kernel(name, node, inputs, symbols_of(node), False, code)


_ATTENTION_OPTIONS = """#if defined(LUM_FMA) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("fma")
#pragma GCC optimize("fp-contract=fast")
#ifdef __AVX512F__
#pragma GCC target("prefer-vector-width=512")
#endif
#endif
"""


def attention(node: Node, name: str):
    """The shared generator's Attention kernel, its products contracted into FMAs where the CPU
    has them (`LUM_FMA`; the library is built with -ffp-contract=off for the elementwise kernels'
    roundings, which a GEMM's tiles do not need: BLAS contracts too), GCC only. On AVX-512 its
    softmax loops are 16 floats wide (the library's other loops keep 8, for AVX2's roundings): the
    fused kernel's sums are its own, never the unfused graph's bit for bit, and its exp loops are
    compute-bound (README, "Fused attention")."""
    from luminal.kernels.render import C, render_node

    specs = render_node(node, name, C)
    for k in specs:
        k.source = (_ATTENTION_OPTIONS + c_source("attention_pv.h") + k.source
                    + "#if defined(LUM_FMA) && defined(__GNUC__) && !defined(__clang__)\n#pragma GCC pop_options\n#endif\n")
    return specs


TRANSPOSE_TILE = 16  # a tile's source runs and output rows, 64 B of f32 each; not 32: a power-of-two
# source stride puts a wider tile's lines in a few of L1's sets


def transpose_copy(node: Node) -> tuple[list[Node], list[str], bool, str] | None:
    """A contiguous copy of a view that reads its last dim with a stride and another dim with
    stride 1 (a head's K transposed for Q·Kᵀ, a permute before a reshape), in tiles of
    TRANSPOSE_TILE x TRANSPOSE_TILE: the tile's source lines stay in L1 while its output rows are
    written, where an element loop in output order touches a new source line per element.
    (inputs, symbols, err, body) like `pad_copy.pad_copy`, or None for any other copy."""
    if node.op is not Op.CONTIGUOUS or len(node.shape) < 2:
        return None
    src = node.src[0]
    base, st = view_of(src)
    if src.op is not Op.VIEW or st.mask is not None or base.dtype is not node.dtype or node.dtype is DType.BOOL:
        return None
    last = len(node.shape) - 1
    if sym.equal(st.strides[last], 1) or sym.equal(st.strides[last], 0):
        return None
    rows = [j for j in range(last) if sym.equal(st.strides[j], 1) and not sym.equal(node.shape[j], 1)]
    if not rows:
        return None
    j = rows[-1]
    inputs = buffer_sources(node)
    others = [d for k, d in enumerate(node.shape) if k not in (j, last)]
    onames, olines = unravel("ob", others, "o")
    names = list(onames)
    names.insert(j, "r")
    names.append("c")
    out_strides = contiguous_strides(node.shape)
    out_at = " + ".join(f"{n} * {c_dim(w)}" for n, w in zip(names[:-1], out_strides[:-1])) or "0"
    value = store_value(node.dtype, read(src, names, pointer_of(src, inputs)))
    t = TRANSPOSE_TILE
    body = f"""const long long n_outer = {c_dim(sym.product(others))}, R = {c_dim(node.shape[j])}, CC = {c_dim(node.shape[last])};
  const long long tr = (R + {t - 1}) / {t}, tc = (CC + {t - 1}) / {t};
  #pragma omp parallel for if (n_outer * R * CC >= {PAR_MIN})
  for (long long tile = 0; tile < n_outer * tr * tc; ++tile) {{
    const long long ob = tile / (tr * tc), rest = tile % (tr * tc), r0 = rest / tc * {t}, c0 = rest % tc * {t};
    {" ".join(olines)}
    const long long r1 = lum_min(R, r0 + {t}), c1 = lum_min(CC, c0 + {t});
    for (long long r = r0; r < r1; ++r) {{
      {C.ctype(node.dtype)}* restrict dst = out + {out_at};
      for (long long c = c0; c < c1; ++c) dst[c] = {value};
    }}
  }}"""
    return inputs, symbols_of(node), False, body


def _first(*forms):
    """The first of `forms` (each node -> (inputs, symbols, err, body) or None) that takes the node."""
    return lambda node: next((found for form in forms if (found := form(node)) is not None), None)


def _own(form):
    """A kernel of `form(node)` ((inputs, symbols, err, body) or None: the op's generator)."""
    return lambda node, name: None if (found := form(node)) is None else kernel(name, node, *found)


SPECIAL = {
    Op.MAT_MUL: matmul,  # the "gemm" extern step (`luminal.kernels.plan.EXTERN`)
    Op.WINDOW_REDUCE: _own(cpu_conv.window_reduce),
    Op.CONTIGUOUS: _own(_first(pad_copy, transpose_copy)),
    Op.SELECT: _own(pad_copy),
    Op.ATTENTION: attention,  # the generator's kernel, with FMAs
    Op.GROUPED_MAT_MUL: lambda node, name: grouped_matmul(node, name, _operand, kernel),  # a BLAS GEMM per group (`grouped.py`)
}
