"""The C dialect: the kernels of a graph's plan as C for the system C compiler.

The same op code as the CUDA dialect (`code_for_op`, `read`, `cast_value`, literals and dims
from `render/cstyle.py` and `render/cexpr.py`); a kernel is a `static void` function of loops
instead of a grid:

- pointwise ops, fused elementwise regions, gather: a row loop over all dims but the last
  (OpenMP `parallel for` across cores when the work is large), the last dim an inner loop the
  compiler vectorizes (contiguous stores, `restrict` pointers);
- reductions, Softmax, KahanSum: a loop over rows, each row summed in double (f32/f16/bf16;
  Neumaier-compensated for f64 KahanSum), so precision holds;
- scatter: a copy, then the updates in order (serial: duplicates resolve as in NumPy);
- MatMul: the plan's extern step, a call of `cblas_sgemm`/`cblas_dgemm` per batch element
  (the BLAS NumPy ships, passed in at load) on the operand views when they are plain,
  possibly transposed, matrices, else on contiguous copies (f16/bf16 always widened to f32);
  M or N of 1 is a gemv. The precision is read per call (`get_precision("cpu")`): "float32"
  (this device's default, as PyTorch's) is the f32 BLAS call; `set_precision("float64")`
  accumulates f32 GEMMs in double and rounds once, as the NumPy runtime does
  (double-accumulating dot loops for a matrix-vector product, else dgemm on widened operands;
  about 2x the time of "float32" on GEMM-bound models). Sums, Softmax's sums and KahanSum
  accumulate in double in both modes; elementwise math is f32 in both (the NumPy runtime's
  "float64" also computes it in float64: the one difference).

Each kernel is rendered with a placeholder name; `program.py` names it by a hash of its body,
keeps each distinct one once and builds the library and the launch table around them.
"""

from __future__ import annotations

from luminal.errors import UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op
from luminal.hlir.shape import ShapeTracker, contiguous_strides
from luminal.kernels.cpu import conv as cpu_conv
from luminal.kernels.cpu.steps import CStep
from luminal.kernels.plan import EXTERN
from luminal.kernels.render.cexpr import c_dim, compute_type
from luminal.kernels.render.cstyle import (
    INT_MOD,
    LIBM,
    buffer_sources,
    code_for_op,
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

PAR_MIN = 65536  # elements of work below which a loop stays on one core (a parallel region costs µs)



def _signature(name: str, out: Node, inputs: list[Node], symbols: list[str], err: bool) -> str:
    return signature(name, out, inputs, symbols, err, kind="static void", restrict="restrict")


def _rows(shape, prefix: str, work: str, body: str, per_row) -> str:
    """`body` for every row of `shape` (index names `<prefix>0..`, flat number `row`): each thread
    (OpenMP, when `work` = n_rows * `per_row` reaches PAR_MIN) takes a contiguous range of rows,
    splits its first row into indices once and then steps them with carries (no division per row).
    `work` is the test as C, `per_row` the same work per row as a dim."""
    names, init = unravel("lo", shape, prefix)
    # build the carry chain from the outside in
    chain = ""
    for k in range(len(shape)):
        if k == 0:
            chain = f"++{names[0]};"
        else:
            chain = f"if (++{names[k]} == {c_dim(shape[k])}) {{ {names[k]} = 0; {chain} }}"
    setup = "\n      ".join(init)
    block = f"""{{
    const long long nt = omp_get_num_threads(), t = omp_get_thread_num();
    const long long lo = n_rows * t / nt, hi = n_rows * (t + 1) / nt;
    if (lo < hi) {{
      {setup}
      for (long long row = lo; row < hi; ++row) {{
        {body}
        {chain}
      }}
    }}
  }}"""
    # the same block outside any parallel region when the work is small (one thread: nt = 1, t = 0):
    # `omp parallel if (0)` still builds a team of one in libgomp, ~0.4 us a launch (a fifth of a
    # small model's call)
    n_rows = sym.product(shape)
    head = f"const long long n_rows = {c_dim(n_rows)};\n  "
    if sym.is_static(n_rows) and sym.is_static(per_row):
        # static sizes decide the test here: only the block that runs is rendered (the compiler
        # drops the other anyway, so the machine code is the same; a quarter less source to parse
        # and outline)
        if n_rows > 1 and n_rows * per_row >= PAR_MIN:
            return head + f"""{{
  #pragma omp parallel
  {block}
  }}"""
        return head + block
    return head + f"""if (n_rows > 1 && {work} >= {PAR_MIN}) {{
  #pragma omp parallel
  {block}
  }} else {block}"""


def _loops(node: Node, body_of, simd: bool = True) -> tuple[str, list[str]]:
    """A row loop over all dims of `node` but the last, the last dim inner: `body_of(index names,
    flat index)` gives the statements for one element. `simd`: the inner loop is `omp simd`
    (vectorized whatever the cost model; only for bodies without side effects)."""
    shape = node.shape
    if not shape:
        return "{\n    const long long row = 0;\n    " + body_of([], "0LL") + "\n  }", []
    k = len(shape)  # trailing dims of size 1 stay out of the loops (a (.., 113, 113, 1) copy: rows of 113, not of 1)
    while k > 1 and sym.equal(shape[k - 1], 1):
        k -= 1
    outer, last = shape[:k - 1], shape[k - 1]
    names = [f"i{j}" for j in range(len(outer))]
    inner = f"i{len(outer)}"
    body = body_of(names + [inner] + ["0LL"] * (len(shape) - k), f"row * n_in + {inner}")
    vector = "#pragma omp simd" if simd and "err" not in body else ""
    row_body = f"""{vector}
        for (long long {inner} = 0; {inner} < n_in; ++{inner}) {{
          {body}
        }}"""
    code = f"const long long n_in = {c_dim(last)};\n  " + _rows(outer, "i", "n_rows * n_in", row_body, last)
    return code, names + [inner] + ["0LL"] * (len(shape) - k)


def _kernel(name, node, inputs, symbols, err, body) -> tuple[str, CStep]:
    return f"{_signature(name, node, inputs, symbols, err)} {{\n  {body}\n}}\n", CStep(name, node, inputs, symbols, err)


def elementwise(node: Node, name: str):
    inputs = buffer_sources(node)
    values = []

    def body(idx, flat):
        values.append(pointwise_value(node, idx, inputs))
        return f"out[{flat}] = {store_value(node.dtype, values[-1])};"

    code, _ = _loops(node, body)
    err = INT_MOD + "(" in values[0]
    return _kernel(name, node, inputs, symbols_of(node), err, code)


def _acc_type(node: Node) -> str:
    t = compute_type(node.dtype)
    if t == "float":
        return "double"  # f32/f16/bf16 rows summed in double
    return t if t in ("double", "int", "long long") else "int"  # bool reduces as int


def reduce(node: Node, name: str):
    (src,) = node.src
    axis = node.arg
    inputs = buffer_sources(node)
    symbols = symbols_of(node, extra=[src.shape])
    small = src.shape[axis] if sym.is_static(src.shape[axis]) and 1 <= int(src.shape[axis]) <= SMALL_AXIS else None
    if small is not None and not (node.op is Op.KAHAN_SUM and node.dtype is DType.F64):
        return _small_reduce(node, name, int(small), inputs, symbols)
    o = [f"o{i}" for i in range(len(node.shape))]
    value = read(src, o[:axis] + ["r"] + o[axis:], pointer_of(src, inputs))
    k = c_dim(src.shape[axis])
    if node.op is Op.SUM_REDUCE or node.op is Op.KAHAN_SUM:
        acc = _acc_type(node)
        if node.op is Op.KAHAN_SUM and acc == "double" and compute_type(node.dtype) == "double":
            body = f"""double s = 0, c = 0;  // Neumaier: c collects the low-order bits s + v loses
    for (long long r = 0; r < {k}; ++r) {{
      double v = {value};
      double u = s + v;
      if (u - u == 0.0) c += fabs(s) >= fabs(v) ? (s - u) + v : (v - u) + s;  // finite u only: no inf - inf
      s = u;
    }}
    out[row] = {store_value(node.dtype, "s + c")};"""
        else:
            body = f"""{acc} acc = 0;
    #pragma omp simd reduction(+:acc)
    for (long long r = 0; r < {k}; ++r) acc += ({acc})({value});
    out[row] = {store_value(node.dtype, "acc")};"""
    else:
        acc = compute_type(node.dtype)
        acc = acc if acc in ("float", "double", "int", "long long") else "int"
        lowest = {"float": "-__int_as_float(0x7f800000)", "double": "-__longlong_as_double(0x7ff0000000000000LL)",
                  "int": "(-2147483647 - 1)", "long long": "(-9223372036854775807LL - 1)"}[acc]
        if node.dtype is DType.BOOL:
            lowest = "0"  # an empty `any` is false
        body = f"""{acc} acc = {lowest};
    for (long long r = 0; r < {k}; ++r) acc = lum_max_nan(acc, ({acc})({value}));
    out[row] = {store_value(node.dtype, "acc")};"""
    return _kernel(name, node, inputs, symbols, False, _rows(node.shape, "o", f"n_rows * {k}", body, src.shape[axis]))


SMALL_AXIS = 8  # reductions over a static axis this short are unrolled into a vectorized elementwise loop


def _small_reduce(node: Node, name: str, k: int, inputs, symbols):
    """A reduction over a short static axis as an elementwise kernel over the output: the terms
    combined in axis order (as the row loop does), the output's last dim an `omp simd` loop."""
    (src,) = node.src
    axis = node.arg
    if node.op is Op.MAX_REDUCE:
        acc = compute_type(node.dtype)
        acc = acc if acc in ("float", "double", "int", "long long") else "int"
    else:
        acc = _acc_type(node)

    def body(idx, flat):
        terms = [f"(({acc})({read(src, idx[:axis] + [f'{r}LL'] + idx[axis:], pointer_of(src, inputs))}))"
                 for r in range(k)]
        expr = terms[0]
        for t in terms[1:]:
            expr = f"lum_max_nan({expr}, {t})" if node.op is Op.MAX_REDUCE else f"({expr} + {t})"
        return f"out[{flat}] = {store_value(node.dtype, expr)};"

    code, _ = _loops(node, body)
    return _kernel(name, node, inputs, symbols, False, code)


def kahan_sum(node: Node, name: str):
    return reduce(node, name)  # integers sum exactly; floats in double (Neumaier for f64)


def softmax(node: Node, name: str):
    (src,) = node.src
    axis = node.arg
    if node.dtype not in (DType.F32, DType.F16, DType.BF16, DType.F64):
        raise UnsupportedError(f"Softmax on {node.dtype}")
    inputs = buffer_sources(node)
    t = compute_type(node.dtype)
    e = LIBM[t]
    row_shape = src.shape[:axis] + src.shape[axis + 1:]
    o = [f"o{i}" for i in range(len(row_shape))]
    full = o[:axis] + ["j"] + o[axis:]
    x = read(src, full, pointer_of(src, inputs))
    out_addr = " + ".join(f"{i} * {c_dim(s)}" for i, s in zip(full, contiguous_strides(node.shape)))
    n = c_dim(src.shape[axis])
    ninf = "-__int_as_float(0x7f800000)" if t == "float" else "-__longlong_as_double(0x7ff0000000000000LL)"
    nan = "__int_as_float(0x7fc00000)" if t == "float" else "__longlong_as_double(0x7ff8000000000000LL)"
    # the row max, vectorized: a plain max plus a NaN flag (a NaN max poisons the row, as in the
    # decomposition; which of -0.0/0.0 is the max cannot change exp(x - m))
    head = f"""{t} m = {ninf}; int has_nan = 0;
    #pragma omp simd reduction(max:m) reduction(|:has_nan)
    for (long long j = 0; j < {n}; ++j) {{ {t} v = {x}; m = v > m ? v : m; has_nan |= v != v; }}
    if (has_nan) m = {nan};"""
    if node.dtype in (DType.F32, DType.F64):  # exp once, into the output; the sum reads it back
        body = f"""{head}
    #pragma omp simd
    for (long long j = 0; j < {n}; ++j) out[{out_addr}] = exp{e}(({x}) - m);
    double s = 0;  // a row of -inf (m = -inf) sums to 0: inv = inf, and NaN = exp(NaN) * inf below
    if (m != {ninf}) {{
      #pragma omp simd reduction(+:s)
      for (long long j = 0; j < {n}; ++j) s += (double)out[{out_addr}];
    }}
    {t} inv = ({t})(1.0 / s);
    #pragma omp simd
    for (long long j = 0; j < {n}; ++j) out[{out_addr}] *= inv;"""
    else:  # f16/bf16: the output holds rounded values, so exp is computed again in float
        body = f"""{head}
    double s = 0;
    if (m != {ninf}) {{
      #pragma omp simd reduction(+:s)
      for (long long j = 0; j < {n}; ++j) s += (double)exp{e}(({x}) - m);
    }}
    {t} inv = ({t})(1.0 / s);  // a row of -inf gives 0 * inf = NaN, as the decomposition does
    #pragma omp simd
    for (long long j = 0; j < {n}; ++j) out[{out_addr}] = {store_value(node.dtype, f"exp{e}(({x}) - m) * inv")};"""
    code = _rows(row_shape, "o", f"n_rows * {n} * 8", body, sym.product([src.shape[axis], 8]))
    return _kernel(name, node, inputs, symbols_of(node), False, code)


def gather(node: Node, name: str):
    data, index = node.src
    axis = node.arg
    inputs = buffer_sources(node)
    zero = "false" if node.dtype is DType.BOOL else f"({compute_type(node.dtype)})0"
    n_axis = c_dim(data.shape[axis])

    def body(idx, flat):
        where = read(index, idx, pointer_of(index, inputs))
        value = read(data, idx[:axis] + ["g"] + idx[axis + 1:], pointer_of(data, inputs))
        return (f"long long g = (long long)({where});\n      "
                f"if (g < 0 || g >= {n_axis}) {{ atomicExch(err, 1); out[{flat}] = {store_value(node.dtype, zero)}; }}\n"
                f"      else out[{flat}] = {store_value(node.dtype, value)};")

    code, _ = _loops(node, body, simd=False)
    return _kernel(name, node, inputs, symbols_of(node, extra=[data.shape]), True, code)


def scatter(node: Node, name: str):
    """Copy `data` into the output, then write (or combine) each update in order."""
    data, index, updates = node.src
    axis, reduce_kind = node.arg
    inputs = buffer_sources(node)
    t = compute_type(node.dtype)
    copy, _ = _loops(node, lambda idx, flat: f"out[{flat}] = {store_value(node.dtype, read(data, idx, pointer_of(data, inputs)))};")
    idx, lines = unravel("u", index.shape, "s")
    where = read(index, idx, pointer_of(index, inputs))
    value = read(updates, idx, pointer_of(updates, inputs))
    strides = contiguous_strides(node.shape)
    address = " + ".join([f"{i} * {c_dim(s)}" for a, (i, s) in enumerate(zip(idx, strides)) if a != axis]
                         + [f"g * {c_dim(strides[axis])}"])
    cur = load_value(node.dtype, "out[a]")
    if reduce_kind is None:
        new = "v"
    elif reduce_kind in ("add", "mul"):
        new = code_for_op[Op.ADD if reduce_kind == "add" else Op.MUL](t, cur, "v")
    elif reduce_kind in ("max", "min"):
        if node.dtype is DType.BOOL:
            new = f"({cur} || v)" if reduce_kind == "max" else f"({cur} && v)"
        else:
            new = f"lum_{reduce_kind}_nan(({t}){cur}, v)"
    else:
        raise UnsupportedError(f"scatter with reduce={reduce_kind!r}")
    setup = "\n    ".join(lines)
    code = f"""{copy}
  const long long n_up = {c_dim(sym.product(index.shape))};
  for (long long u = 0; u < n_up; ++u) {{  // in order: duplicate indices resolve as in NumPy
    {setup}
    long long g = (long long)({where});
    if (g < 0 || g >= {c_dim(node.shape[axis])}) {{ atomicExch(err, 1); continue; }}
    long long a = {address};
    {t} v = ({t})({value});
    out[a] = {store_value(node.dtype, new)};
  }}"""
    return _kernel(name, node, inputs, symbols_of(node, extra=[index.shape]), True, code)


def concat(node: Node, name: str):
    """out[.., i, ..] = a[.., i, ..] for i < len_a along the axis, else b[.., i - len_a, ..].
    Along any axis but the last the operand is chosen per row, so each row is a plain copy loop
    (a select of two masked reads per element does not vectorize), and the dims after the axis
    are one row where both operands read them contiguously (a channel concat of 13x13 maps: rows
    of 169, not 13)."""
    a, b = node.src
    axis = node.arg
    split = c_dim(a.shape[axis])
    inputs = buffer_sources(node)
    if axis < len(node.shape) - 1:
        merged = [_merge_tail(x, axis) for x in (a, b)]
        shape = node.shape[:axis + 1] + (sym.product(node.shape[axis + 1:]),)
        if None in merged:
            merged, shape = [a, b], node.shape
        names = [f"i{k}" for k in range(len(shape) - 1)]
        inner = f"i{len(shape) - 1}"
        shifted = names[:axis] + [f"({names[axis]} - {split})"] + names[axis + 1:]

        def copy(x, idx):
            value = store_value(node.dtype, read(x, idx + [inner], pointer_of(x, inputs)))
            return f"""#pragma omp simd
          for (long long {inner} = 0; {inner} < n_in; ++{inner}) out[row * n_in + {inner}] = {value};"""

        rows = f"""if ({names[axis]} < {split}) {{
          {copy(merged[0], names)}
        }} else {{
          {copy(merged[1], shifted)}
        }}"""
        code = f"const long long n_in = {c_dim(shape[-1])};\n  " + _rows(shape[:-1], "i", "n_rows * n_in", rows, shape[-1])
        return _kernel(name, node, inputs, symbols_of(node), False, code)

    def body(idx, flat):
        shifted = idx[:axis] + [f"({idx[axis]} - {split})"] + idx[axis + 1:]
        value = (f"({idx[axis]} < {split} ? {read(a, idx, pointer_of(a, inputs))} : "
                 f"{read(b, shifted, pointer_of(b, inputs))})")
        return f"out[{flat}] = {store_value(node.dtype, value)};"

    code, _ = _loops(node, body)
    return _kernel(name, node, inputs, symbols_of(node), False, code)


def _merge_tail(x: Node, axis: int) -> Node | None:
    """`x` read with its dims after `axis` as one (a view of its buffer), when it reads them as
    one run (contiguous strides, no mask on them); else None."""
    base, st = view_of(x)
    tail = x.shape[axis + 1:]
    if st.mask is not None and not all(sym.equal(lo, 0) and sym.equal(hi, d) for (lo, hi), d in zip(st.mask[axis + 1:], tail)):
        return None
    if not all(sym.equal(d, 1) or sym.equal(s, w) for d, s, w in zip(tail, st.strides[axis + 1:], contiguous_strides(tail))):
        return None
    size = sym.product(tail)
    mask = None if st.mask is None else st.mask[:axis + 1] + ((0, size),)
    merged = ShapeTracker(x.shape[:axis + 1] + (size,), st.strides[:axis + 1] + (1,), st.offset, mask)
    return Node(Op.VIEW, x.dtype, merged.shape, (base,), merged)


_GEMM = {"float": "f", "double": "d", "int": "i", "long long": "ll"}


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


def matmul(node: Node, name: str):
    """The extern GEMM step: one BLAS call per batch element (loops for integers)."""
    a, b = node.src
    if node.dtype is DType.BOOL:
        raise UnsupportedError("MatMul on bool")
    inputs = buffer_sources(node)
    t = compute_type(node.dtype)
    g = _GEMM[t]
    batch = node.shape[:-2]
    m, n, k = (c_dim(d) for d in (node.shape[-2], node.shape[-1], a.shape[-1]))
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
      lum_gemm_{g}(a_tr, b_tr, {m}, {n}, {k}, a_ptr, a_ld, b_ptr, b_ld, {c_ptr}, {n});
      {store}
    }}
    free(a_buf); free(b_buf); free(c_buf);"""

    n_batch = sym.product(batch)
    head = f"""const long long n_batch = {c_dim(n_batch)};
  if ({m} <= 0 || {n} <= 0) return;
  if ({k} <= 0) {{ for (long long q = 0; q < n_batch * {m} * {n}; ++q) out[q] = {store_value(node.dtype, "0")}; return; }}
  """
    if sym.is_static(n_batch) and n_batch <= 1:
        # one GEMM: no batch to share out (lum_batch_parallel is false), so only the serial loop
        # is rendered (the same machine code; the compiler need not outline and drop the other)
        return _kernel(name, node, inputs, symbols_of(node), False, head + f"""{{
    {batch_loop("")}
  }}""")
    code = head + f"""/* small GEMMs of a batch (attention's heads) in parallel, one per thread, when the BLAS is
     the OpenMP team's own (MKL runs single-threaded inside the region); else one after another,
     outside any parallel region (inside even an inactive one, MKL threads by nested teams that
     libgomp builds afresh per call: bert-small's GEMMs 3x slower on 2 threads) */
  if (lum_batch_parallel(n_batch, {m}, {n}, {k})) {{
    #pragma omp parallel
    {{
    {batch_loop("#pragma omp for schedule(static)")}
    }}
  }} else {{
    {batch_loop("")}
  }}"""
    return _kernel(name, node, inputs, symbols_of(node), False, code)


GENERATORS = {  # every other op (pointwise, iota, contiguous copies) is `elementwise`
    Op.GATHER: gather,
    Op.SCATTER: scatter,
    Op.FUSED_ELEMENTWISE: elementwise,
    Op.SOFTMAX: softmax,
    Op.KAHAN_SUM: kahan_sum,
    Op.SUM_REDUCE: reduce,
    Op.MAX_REDUCE: reduce,
}
if hasattr(Op, "CONCAT"):
    GENERATORS[Op.CONCAT] = concat
GENERATORS[Op.WINDOW_REDUCE] = lambda node, name: _kernel(name, node, *cpu_conv.window_reduce(node))  # conv, pooling
GENERATORS[Op.CONTIGUOUS] = GENERATORS[Op.SELECT] = lambda node, name: (  # padding: rows of fill, copy, fill
    _kernel(name, node, *found) if (found := cpu_conv.pad_copy(node)) else elementwise(node, name))
EXTERNS = {"gemm": matmul}  # extern steps of the plan (`luminal.kernels.plan.EXTERN`) in this dialect


def _generator(node: Node):
    extern = EXTERN.get(node.op)
    if extern is not None:
        return EXTERNS[extern]
    return GENERATORS.get(node.op, elementwise)
