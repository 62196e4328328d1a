"""What differs between the targets kernels are written for: a `Dialect` per target.

The generators (`kernels.py`) write each op once against three loop shapes a dialect spells:

- `elements`: a body per element of a shape. CUDA: a thread per element, its index unravelled
  (16-byte loads and stores where the innermost dim allows); C: a row loop over all dims but
  the last (OpenMP across cores when the work is large) around an `omp simd` inner loop.
- `rows`: per row of a shape, a sequence of `Pass`es over the row's `n` elements, each either a
  map or a reduction into state variables. CUDA: a warp (one pass) or a block per row, threads
  striding over the row, states merged by warp shuffles (and shared memory across warps) and
  broadcast; C: a row loop whose passes are `omp simd` loops (with OpenMP reductions where every
  state has one), each row on one thread.
- `kernels`: the parts of one node. CUDA: a launch each (the grid-wide barrier between them is
  the launch boundary); C: one function running them in sequence.

Besides the loops a dialect carries only spellings: the signature's kernel kind and `restrict`,
the accumulator of sums, half-type conversions, non-finite literals and atomic updates. The
index type of CUDA kernels (32-bit where every size fits, `cstyle.index_variants`) is also its.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.errors import UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node
from luminal.hlir.shape import contiguous_strides
from luminal.kernels.render import cstyle, inline
from luminal.kernels.render.cexpr import c_dim, compute_type, index_type
from luminal.kernels.render.cstyle import (
    PHILOX_C,
    KernelSpec,
    dtypes_of,
    index_variants,
    load_value,
    signature,
    store_value,
    unravel,
)


@dataclass
class Pass:
    """One loop over a row's elements (index `j`, from 0 to the row's `n`).

    A map pass has no `state`; a reduction pass declares its accumulators `state` as
    (C type, name, initial value, OpenMP reduction operator or None), and `merge` folds another
    thread's accumulators (named `<name>_o`) into this thread's. After a reduction pass every
    thread of the row holds the whole row's state."""

    step: str  # statements for element j (`v` is `value` when given)
    state: tuple = ()
    merge: str = ""
    value: str | None = None  # the element as the first state's type: `v` in `step`
    contiguous: tuple | None = None  # (source, its index with "j" on the axis): CUDA loads 16 bytes at a time
    guard: str | None = None  # the loop runs only where this holds (the same for the whole row)
    after: str = ""  # statements every thread of the row runs after the pass
    # a float max (state `acc`, step `lum_max_nan`): C may run it in lanes (`CDialect._lanes_max`)
    float_max: bool = False


@dataclass
class Part:
    """A loop of a node's kernel: its body and, on CUDA, its grid. `scratch` (CUDA): a node the
    part writes instead of the node's output (a buffer of the plan's, `attention_decode.partials`),
    which every later part of the kernel reads as its last input."""

    body: str
    grid: object = None
    block: int = 0
    scratch: Node | None = None


class Dialect:
    name: str
    kernel_kind: str
    restrict: str
    half_load = {DType.F16: "", DType.BF16: ""}
    half_store = {DType.F16: "", DType.BF16: ""}
    # a Select computes both values and picks one (`cstyle.select`): a libm call under a condition
    # is a call per element, where an unconditional one is a vector call
    speculate_select = False

    def ctype(self, dtype: DType) -> str:
        """The C type elements of `dtype` are stored as."""
        return dtype.ctype

    def bool_load(self, pointer: str, index: str) -> str:
        """A stored bool read (an int-valued expression in C, 0 or 1)."""
        return f"{pointer}[{index}]"

    def sum_type(self, dtype: DType) -> str:
        """The type sums of `dtype` accumulate in (bool sums count in int)."""
        t = compute_type(dtype)
        return t if t in ("float", "double", "int", "long long") else "int"

    def float_bits(self, bits: int, double: bool) -> str:
        """A float (double) given by its bit pattern: how NaN and the infinities are spelled."""
        raise NotImplementedError

    def build(self, node: Node, render) -> list:
        """The launches `render()` gives for `node` (CUDA: in 32- or 64-bit index math)."""
        return render()

    def elements(self, shape, body_of, ordered: bool = False, vector: bool = False, work: int | object = 1,
                 ordered_along: int | None = None) -> Part:
        """`body_of(index names, flat index)` -> (statements, value or None) for every element of
        `shape`; a value is stored at `out[flat]`. `ordered`: the elements one after another, in
        order (scatter's updates: duplicates resolve as in NumPy); with `ordered_along` = axis, only
        the elements that differ in that axis alone may touch the same place: each line along it
        in order, the lines in any order (on any thread). `work`: per element, in units of a simple
        element (a convolution's window: its terms)."""
        raise NotImplementedError

    def column_sums(self, shape, n, value: str, store) -> Part | None:
        """A sum over an axis that is not its input's innermost, whose output's last dim is (a
        bias's or a norm's gradient: (1024, 1408) summed over its rows), as a loop the dialect
        runs column-wise: `value` reads element (o0.., j, o_last) of the input, `store(acc)` the
        output's C value. None: the row loop (`rows`)."""
        return None

    def rows(self, row_shape, n, passes: list[Pass], finish: str, work_per_row=None) -> Part:
        """The `passes` for every row of `row_shape` (index names `o0..`, flat number `row`), then
        `finish` once per row (with the reductions' state)."""
        raise NotImplementedError

    def update(self, kind: str | None, dtype: DType, address: str, value: str, combine) -> str:
        """`out[address]` set to `value` (`kind` None) or combined with it (`combine(old, value)`),
        where other elements may update the same address."""
        raise NotImplementedError

    def kernels(self, node: Node, name: str, parts: list[Part], inputs, symbols, err: bool):
        raise NotImplementedError


# --- CUDA -----------------------------------------------------------------------------------------
THREADS = 256
WARPS_PER_BLOCK = 4
ROW_THREADS = 128  # a block per row when a row kernel has several passes

_ATOMIC = {
    ("add", "float"): "atomicAdd(&out[{a}], {v})",
    ("add", "double"): "atomicAdd(&out[{a}], {v})",
    ("add", "int"): "atomicAdd(&out[{a}], {v})",
    ("add", "long long"): "atomicAdd((unsigned long long*)&out[{a}], (unsigned long long){v})",
    ("max", "int"): "atomicMax(&out[{a}], {v})",
    ("min", "int"): "atomicMin(&out[{a}], {v})",
    ("max", "long long"): "atomicMax(&out[{a}], {v})",
    ("min", "long long"): "atomicMin(&out[{a}], {v})",
}


_CUDA_PRELUDE = """\
// generated by luminal
static __device__ __forceinline__ long long lum_min(long long a, long long b) { return a < b ? a : b; }
static __device__ __forceinline__ long long lum_max(long long a, long long b) { return a > b ? a : b; }
static __device__ __forceinline__ void lum_flag(int* err, int code) { atomicOr(err, code); }  // 1: index, 2: integer Mod by 0
template <typename T> static __device__ __forceinline__ T lum_imod(T a, T b, int* err) {
  if (b == 0) { lum_flag(err, 2); return (T)0; }
  return b == (T)-1 ? (T)0 : (T)(a % b);  // lowest % -1 overflows (a trap on x86)
}
// a Select whose value holds an integer remainder: both values computed (arguments are), so the
// remainder's error flag is raised wherever the unfused graph computes it (`cstyle.select`)
template <typename T> static __device__ __forceinline__ T lum_pick(bool c, T a, T b) { return c ? a : b; }
template <typename T> static __device__ __forceinline__ T lum_max_nan(T a, T b) { return (b > a || b != b) ? b : a; }
template <typename T> static __device__ __forceinline__ T lum_min_nan(T a, T b) { return (b < a || b != b) ? b : a; }
static __device__ __forceinline__ bool lum_aligned16(const void* p) { return ((unsigned long long)p & 15ull) == 0; }
"""


class CudaDialect(Dialect):
    name = "cuda"
    kernel_kind = 'extern "C" __global__ void'
    restrict = "__restrict__"
    half_load = {DType.F16: "__half2float", DType.BF16: "__bfloat162float"}
    half_store = {DType.F16: "__float2half", DType.BF16: "__float2bfloat16"}

    def prelude(self, dtypes: set) -> str:
        """The helpers every kernel of a plan may call; headers only when half types are used
        (NVRTC has no default include path for others)."""
        head = "#include <cuda_fp16.h>\n" if DType.F16 in dtypes else ""
        head += "#include <cuda_bf16.h>\n" if DType.BF16 in dtypes else ""
        return head + _CUDA_PRELUDE + PHILOX_C.format(q="static __device__ __forceinline__")

    def build(self, node, render):
        return index_variants(node, render)

    def float_bits(self, bits: int, double: bool) -> str:
        return f"__longlong_as_double(0x{bits:016x}LL)" if double else f"__int_as_float(0x{bits:08x})"

    def elements(self, shape, body_of, ordered=False, vector=False, work=1, ordered_along=None) -> Part:
        numel = sym.product(shape)
        if vector:
            found = _vector_elements(shape, body_of)
            if found is not None:
                return found
        it = index_type()
        names, lines = unravel("idx", shape)
        stmts, value = body_of(names, "idx")
        store = [] if value is None else [f"out[idx] = {_store(value)};"]
        body = "\n    ".join(lines + ([stmts] if stmts else []) + store)
        return Part(f"""{it} idx = ({it})blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= {c_dim(numel)}) return;
  {{
    {body}
  }}""", sym.ceildiv(numel, THREADS), THREADS)

    def rows(self, row_shape, n, passes, finish, work_per_row=None) -> Part:
        it = index_type()
        warp = len(passes) == 1  # one pass: a warp per row, lanes merge by shuffles alone
        threads = 32 if warp else ROW_THREADS
        n_rows = sym.product(row_shape)
        _, lines = unravel("row", row_shape, "o")
        out = []
        if warp:
            out.append(f"""{it} row = ({it})blockIdx.x * {WARPS_PER_BLOCK} + threadIdx.x / 32;
  int lane = threadIdx.x % 32, tid = lane;
  if (row >= {c_dim(n_rows)}) return;  // warp-uniform: whole warps leave together""")
        else:
            out.append(f"""{it} row = blockIdx.x;
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, tid = threadIdx.x;""")
        out += lines
        for k, p in enumerate(passes):
            out.append(self._pass(p, n, threads, k, it, last=k == len(passes) - 1))
        out.append(f"if (tid == 0) {{\n    {finish}\n  }}" if finish else "")
        grid = sym.ceildiv(n_rows, WARPS_PER_BLOCK) if warp else n_rows
        return Part("\n  ".join(x for x in out if x), grid, 32 * WARPS_PER_BLOCK if warp else threads)

    def _pass(self, p: Pass, n, threads: int, k: int, it: str, last: bool) -> str:
        decls = " ".join(f"{t} {name} = {init};" for t, name, init, _ in p.state)
        vt = p.state[0][0] if p.state else None
        one = f"{{ {vt} v = ({vt})({p.value}); {p.step} }}" if p.value is not None else f"{{ {p.step} }}"
        loop = f"for ({it} j = tid; j < {c_dim(n)}; j += {threads}) {one}"
        if p.contiguous is not None and p.value is not None:
            loop = _vector_row_loop(p, n, threads, it, vt) or loop
        if p.guard:
            loop = f"if ({p.guard}) {{\n    {loop}\n  }}"
        code = [decls, loop] if decls else [loop]
        if p.state:
            others = " ".join(f"{t} {name}_o = __shfl_down_sync(0xffffffffu, {name}, off);" for t, name, _, _ in p.state)
            code.append(f"for (int off = 16; off > 0; off >>= 1) {{ {others} {p.merge} }}")
            if threads == 32 and (p.after or not last):  # lane 0 holds the row's state: every lane takes it
                code += [f"{name} = __shfl_sync(0xffffffffu, {name}, 0);" for _, name, _, _ in p.state]
            elif threads > 32:  # the warps' states through shared memory, merged by every thread in warp order
                w = threads // 32
                shared = " ".join(f"__shared__ {t} s{k}_{name}[{w}];" for t, name, _, _ in p.state)
                put = " ".join(f"s{k}_{name}[warp] = {name};" for _, name, _, _ in p.state)
                first = " ".join(f"{name} = s{k}_{name}[0];" for _, name, _, _ in p.state)
                other = " ".join(f"{t} {name}_o = s{k}_{name}[w];" for t, name, _, _ in p.state)
                code.append(f"""{shared}
  if (lane == 0) {{ {put} }}
  __syncthreads();
  {first}
  for (int w = 1; w < {w}; ++w) {{ {other} {p.merge} }}""")
        if p.after:
            code.append(p.after)
        return "\n  ".join(code)

    def update(self, kind, dtype, address, value, combine) -> str:
        if kind is None:
            return f"out[{address}] = {_store(value)};"
        atomic = _ATOMIC.get((kind, dtype.ctype))
        if atomic is None:
            raise UnsupportedError(f"scatter with reduce={kind!r} on {dtype} has no CUDA kernel")
        return atomic.format(a=address, v=value) + ";"

    def kernels(self, node, name, parts, inputs, symbols, err):
        specs, reads = [], list(inputs)
        for k, part in enumerate(parts):
            kname = name if k == len(parts) - 1 else f"{name}_{k}"
            out = part.scratch or node
            src = f"{signature(kname, out, reads, symbols, err)} {{\n  {part.body}\n}}\n"
            specs.append(KernelSpec(kname, src, out, list(reads), symbols, part.grid, part.block, err, dtypes_of(node)))
            if part.scratch is not None:
                reads.append(part.scratch)
        return specs


def _store(value: str) -> str:
    """`value` as the output's stored type (the node being rendered: `cstyle.current`)."""
    return store_value(cstyle.current()[0].dtype, value)


def _vector_elements(shape, body_of) -> Part | None:
    """Each thread computes V = 16 / itemsize consecutive elements of the innermost dim (static,
    a multiple of V): sources contiguous along it with the output's item size are read by one
    16-byte load (when the address is aligned: checked per thread, else element by element),
    the others element by element; the V results are written by one 16-byte store. None where
    the output's dtype, the innermost dim or the body (statements) do not allow it."""
    node, inputs = cstyle.current()
    dtype = node.dtype
    if not shape or dtype.itemsize not in (2, 4, 8) or not sym.is_static(shape[-1]):
        return None
    v = 16 // dtype.itemsize
    if shape[-1] % v:
        return None
    numel = sym.product(shape)
    idx, lines = cstyle.unravel("idx", shape)
    it = index_type()
    lane_idx = idx[:-1] + [f"({idx[-1]} + j)"]
    loads, lanes = [], {}
    for s in dict.fromkeys(inline.read_at_reader_index(node.src)):  # each source view once
        base, st = cstyle.view_of(s)
        if (cstyle.is_inline_scalar(base) or st.mask is not None or base.dtype.itemsize != dtype.itemsize
                or not sym.equal(st.strides[-1], 1)):
            continue
        k = len(lanes)
        addr = " + ".join([c_dim(st.offset)] + [f"{i} * {c_dim(t)}" for i, t in zip(idx, st.strides) if t != 0])
        loads.append(f"""alignas(16) {base.dtype.ctype} v{k}[{v}];
    {{ const {base.dtype.ctype}* p = {cstyle.pointer_of(s, inputs)} + {addr};
      if (lum_aligned16(p)) *(uint4*)v{k} = *(const uint4*)p; else for (int j = 0; j < {v}; ++j) v{k}[j] = p[j]; }}""")
        lanes[id(s)] = f"v{k}[j]"
    with cstyle.lanes(lanes):
        stmts, value = body_of(lane_idx, None)
    if stmts or value is None:
        return None
    body = "\n    ".join(lines + loads)
    t = dtype.ctype
    return Part(f"""{it} vi = ({it})blockIdx.x * blockDim.x + threadIdx.x;  // {v} elements per thread
  if (vi >= {c_dim(sym.floordiv(numel, v))}) return;
  {{
    {it} idx = vi * {v};
    {body}
    alignas(16) {t} o[{v}];
    #pragma unroll
    for (int j = 0; j < {v}; ++j) o[j] = {_store(value)};
    if (lum_aligned16(out + idx)) *(uint4*)(out + idx) = *(const uint4*)o;
    else for (int j = 0; j < {v}; ++j) out[idx + j] = o[j];
  }}""", sym.ceildiv(sym.floordiv(numel, v), THREADS), THREADS)


def _vector_row_loop(p: Pass, n, threads: int, it: str, vt: str) -> str | None:
    """The row's loop with 16-byte loads where the source is contiguous along it (stride 1, no
    mask, 2- to 8-byte items) and the row is aligned (uniform over the row), element loads for
    the tail; None where the source does not allow it."""
    src, full = p.contiguous
    base, st = cstyle.view_of(src)
    axis = full.index("j")
    if (inline.is_inlined(base) or st.mask is not None or base.dtype.itemsize not in (2, 4, 8)
            or not sym.equal(st.strides[axis], 1)):
        return None
    lanes = 16 // base.dtype.itemsize
    t = base.dtype.ctype
    row0 = full[:axis] + ["0"] + full[axis + 1:]
    addr = " + ".join([c_dim(st.offset)] + [f"{i} * {c_dim(s)}" for i, s in zip(row0, st.strides) if s != 0])
    _, inputs = cstyle.current()
    k = c_dim(n)
    scalar = f"for ({it} j = tid; j < {k}; j += {threads}) {{ {vt} v = ({vt})({p.value}); {p.step} }}"
    return f"""const {t}* rp = {cstyle.pointer_of(src, inputs)} + {addr};
  if (lum_aligned16(rp)) {{  // 16-byte loads along the contiguous row
    const {it} kv = {k} / {lanes};
    for ({it} q = tid; q < kv; q += {threads}) {{
      alignas(16) {t} vb[{lanes}];
      *(uint4*)vb = *(const uint4*)(rp + q * {lanes});
      #pragma unroll
      for (int l = 0; l < {lanes}; ++l) {{ {vt} v = ({vt})({cstyle.load_value(base.dtype, "vb[l]")}); {p.step} }}
    }}
    for ({it} j = kv * {lanes} + tid; j < {k}; j += {threads}) {{ {vt} v = ({vt})({cstyle.load_value(base.dtype, "rp[j]")}); {p.step} }}
  }} else {{
    {scalar}
  }}"""


# --- C --------------------------------------------------------------------------------------------
# elements of work below which a loop stays on one core: a parallel region costs µs, and splitting
# data one core's cache holds moves it between cores (README, "The compiled CPU backend")
PAR_MIN = 16384

CHEAP_OPS = 8  # the operations of an element PAR_MIN was measured on (BatchNorm + ReLU6: 6)


def element_work(node: Node) -> int:
    """One element of pointwise `node` (a FusedElementwise region: its distinct levels) as that many
    elements of a cheap loop, at least 1: a loop's parallel threshold is PAR_MIN of those. An exact
    GELU's element (an erf polynomial and an exp: 56 levels) counts 10, so its loop splits from a
    tenth of PAR_MIN: its arithmetic, not its memory, takes the time."""
    return max(1, inline.work(node) // CHEAP_OPS)


def par_min(node: Node) -> int:
    """The elements of pointwise `node` from which its loop runs on the team (`element_work`)."""
    return max(1, PAR_MIN // element_work(node))


_OMP_TYPES = {"float", "double", "int", "long long"}


class CDialect(Dialect):
    name = "c"
    kernel_kind = "static void"
    restrict = "restrict"
    half_load = {DType.F16: "lum_half_to_float", DType.BF16: "lum_bfloat16_to_float"}
    half_store = {DType.F16: "lum_float_to_half", DType.BF16: "lum_float_to_bfloat16"}
    speculate_select = True

    def ctype(self, dtype):
        return {DType.F16: "lum_half", DType.BF16: "lum_bfloat16"}.get(dtype, dtype.ctype)

    def bool_load(self, pointer, index):
        # through its byte: GCC vectorizes no loop that loads a _Bool ("no vectype")
        return f"(((const unsigned char*){pointer})[{index}] != 0)"

    def sum_type(self, dtype):
        t = compute_type(dtype)
        return "double" if t == "float" else super().sum_type(dtype)  # f32/f16/bf16 rows summed in double

    def float_bits(self, bits: int, double: bool) -> str:
        return f"lum_f64_bits(0x{bits:016x}ULL)" if double else f"lum_f32_bits(0x{bits:08x}u)"

    def elements(self, shape, body_of, ordered=False, vector=False, work=1, ordered_along=None) -> Part:
        def statement(idx, flat):
            stmts, value = body_of(idx, flat)
            store = [] if value is None else [f"out[{flat}] = {_store(value)};"]
            return "\n          ".join(([stmts] if stmts else []) + store)

        if ordered and ordered_along is not None and len(shape) > 1:  # lines along the axis across the team, each in order
            axis = ordered_along
            others = [d for k, d in enumerate(shape) if k != axis]
            onames, lines = unravel("o", others, "s")
            names = onames[:axis] + ["j"] + onames[axis:]
            strides = contiguous_strides(shape)
            flat = " + ".join(f"{n} * {c_dim(st)}" for n, st in zip(names, strides))
            setup = "\n    ".join(lines)
            n_lines, n_el = c_dim(sym.product(others)), c_dim(sym.product(shape))
            return Part(f"""const long long n_lines = {n_lines}, n_along = {c_dim(shape[axis])};
  #pragma omp parallel for schedule(static) if (n_lines > 1 && {n_el} >= {PAR_MIN})
  for (long long o = 0; o < n_lines; ++o) {{
    {setup}
    for (long long j = 0; j < n_along; ++j) {{
      const long long e = {flat}; (void)e;
      {statement(names, "e")}
    }}
  }}""")
        if ordered:  # one thread, in order
            names, lines = unravel("e", shape, "s")
            setup = "\n    ".join(lines)
            return Part(f"""const long long n_el = {c_dim(sym.product(shape))};
  for (long long e = 0; e < n_el; ++e) {{
    {setup}
    {statement(names, "e")}
  }}""")
        if not shape:
            return Part("{\n    const long long row = 0;\n    " + statement([], "0LL") + "\n  }")
        k = len(shape)  # trailing dims of size 1 stay out of the loops (a (.., 113, 113, 1) copy: rows of 113, not of 1)
        while k > 1 and sym.equal(shape[k - 1], 1):
            k -= 1
        outer, last = shape[:k - 1], shape[k - 1]
        inner = f"i{len(outer)}"
        idx = [f"i{j}" for j in range(len(outer))] + [inner] + ["0LL"] * (len(shape) - k)
        body = statement(idx, f"row * n_in + {inner}")
        vector = "#pragma omp simd" if "err" not in body else ""
        row_body = f"""{vector}
        for (long long {inner} = 0; {inner} < n_in; ++{inner}) {{
          {body}
        }}"""
        per_row = sym.product([last, work])
        return Part(f"const long long n_in = {c_dim(last)};\n  " + _c_rows(outer, "i", f"n_rows * {c_dim(per_row)}", row_body, per_row))

    def column_sums(self, shape, n, value, store):
        """Blocks of up to 256 outputs along the last dim, each summing the input's rows into
        double accumulators in one vector loop per row (the row loop would read each output's
        column with a stride). Each output is still one sum over j in order, whatever the blocks
        and the team."""
        width = shape[-1]
        if not sym.is_static(width) or int(width) < 16:
            return None
        names, unravel_outer = unravel("ob", shape[:-1], "o")
        last = f"o{len(shape) - 1}"
        body = f"""const long long n_outer = {c_dim(sym.product(shape[:-1]))}, W = {int(width)}LL, CB = 256;
  const long long n_blocks = (W + CB - 1) / CB, n_tasks = n_outer * n_blocks;
  #pragma omp parallel for if (n_tasks > 1 && n_outer * W * {c_dim(n)} >= {PAR_MIN}) schedule(static)
  for (long long task = 0; task < n_tasks; ++task) {{
    const long long ob = task / n_blocks, c0 = (task % n_blocks) * CB, cw = lum_min(CB, W - c0);
    {" ".join(unravel_outer)}
    double acc[256];
    for (long long c = 0; c < cw; ++c) acc[c] = 0;
    for (long long j = 0; j < {c_dim(n)}; ++j) {{
      #pragma omp simd
      for (long long c = 0; c < cw; ++c) {{ const long long {last} = c0 + c; acc[c] = acc[c] + (double)({value}); }}
    }}
    for (long long c = 0; c < cw; ++c) out[ob * W + c0 + c] = {store("acc[c]")};
  }}"""
        return Part(body)

    def rows(self, row_shape, n, passes, finish, work_per_row=None) -> Part:
        per_row = n if work_per_row is None else work_per_row
        body = "\n    ".join([self._pass(p, n) for p in passes] + ([finish] if finish else []))
        return Part(_c_rows(row_shape, "o", f"n_rows * {c_dim(per_row)}", body, per_row))

    def _pass(self, p: Pass, n) -> str:
        if p.float_max and p.value is not None and not p.guard and len(p.state) == 1:
            return self._lanes_max(p, n)
        decls = " ".join(f"{t} {name} = {init};" for t, name, init, _ in p.state)
        vt = p.state[0][0] if p.state else None
        one = f"{{ {vt} v = ({vt})({p.value}); {p.step} }}" if p.value is not None else p.step
        pragma = ""
        if "err" not in p.step and all(op is not None and t in _OMP_TYPES for t, _, _, op in p.state):
            pragma = "#pragma omp simd" + "".join(f" reduction({op}:{name})" for _, name, _, op in p.state) + "\n    "
        loop = f"{pragma}for (long long j = 0; j < {c_dim(n)}; ++j) {one}"
        if p.guard:
            loop = f"if ({p.guard}) {{\n      {loop}\n    }}"
        return "\n    ".join(x for x in (decls, loop, p.after) if x)

    def _lanes_max(self, p: Pass, n) -> str:
        """A float row max in MAX_LANES independent lanes (a vector max per step, where the
        sequential `lum_max_nan` chain is a dependent compare and select per element), then the
        lanes and the row's tail. Where the lanes' order could show, the row runs again as
        the sequential chain, so the bits are always the chain's: a NaN (its payload: the chain
        keeps the last NaN) and a max of zero (its sign: the chain keeps the first of -0.0 and
        0.0). Otherwise the max is one value, found in any order."""
        t, name, init, _ = p.state[0]
        lanes = MAX_LANES
        one = f"{{ {t} v = ({t})({p.value}); {p.step} }}"
        return f"""{t} {name} = {init};
    {{
      {t} lane[{lanes}];
      int odd = 0;  /* a NaN seen */
      for (int l = 0; l < {lanes}; ++l) lane[l] = {init};
      const long long n_lanes = ({c_dim(n)}) / {lanes} * {lanes};
      for (long long j0 = 0; j0 < n_lanes; j0 += {lanes}) {{
        #pragma omp simd reduction(|:odd)
        for (int l = 0; l < {lanes}; ++l) {{ const long long j = j0 + l; const {t} v = ({t})({p.value}); odd |= v != v; lane[l] = v > lane[l] ? v : lane[l]; }}
      }}
      for (int l = 0; l < {lanes}; ++l) {name} = lane[l] > {name} ? lane[l] : {name};
      for (long long j = n_lanes; j < {c_dim(n)}; ++j) {{ const {t} v = ({t})({p.value}); odd |= v != v; {name} = v > {name} ? v : {name}; }}
      if (odd || {name} == ({t})0) {{  /* the sequential chain's bits */
        {name} = {init};
        for (long long j = 0; j < {c_dim(n)}; ++j) {one}
      }}
    }}""" + (f"\n    {p.after}" if p.after else "")

    def update(self, kind, dtype, address, value, combine) -> str:
        new = value if kind is None else combine(load_value(dtype, f"out[{address}]"), value)
        return f"out[{address}] = {_store(new)};"

    def kernels(self, node, name, parts, inputs, symbols, err):
        if any(p.scratch is not None for p in parts):
            raise AssertionError("a C kernel is one function: its parts share the node's output")
        body = "\n  ".join(p.body if len(parts) == 1 else f"{{\n  {p.body}\n  }}" for p in parts)
        src = f"{signature(name, node, inputs, symbols, err)} {{\n  {body}\n}}\n"
        return [KernelSpec(name, src, node, inputs, symbols, None, 0, err, dtypes_of(node))]


MAX_LANES = 16  # a float row max's independent lanes (`CDialect._lanes_max`): two AVX2 vectors of f32


def _c_rows(shape, prefix: str, work: str, body: str, per_row) -> str:
    """`body` for every row of `shape` (index names `<prefix>0..`, flat number `row`): each thread
    (OpenMP, when `work` = n_rows * `per_row` reaches PAR_MIN) takes a contiguous range of rows,
    splits its first row into indices once and then steps them with carries (no division per row).
    `work` is the test as C, `per_row` the same work per row as a dim."""
    names, init = unravel("lo", shape, prefix)
    chain = ""  # the carry chain, from the outside in
    for k in range(len(shape)):
        chain = f"++{names[0]};" if k == 0 else f"if (++{names[k]} == {c_dim(shape[k])}) {{ {names[k]} = 0; {chain} }}"
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
    # small work runs the block outside any parallel region (a team of one: nt = 1, t = 0), since
    # libgomp builds a team even for `omp parallel if (0)`; static sizes decide here, so only the
    # block that runs is rendered
    n_rows = sym.product(shape)
    head = f"const long long n_rows = {c_dim(n_rows)};\n  "
    if sym.is_static(n_rows) and sym.is_static(per_row):
        if n_rows > 1 and n_rows * per_row >= PAR_MIN:
            return head + f"{{\n  #pragma omp parallel\n  {block}\n  }}"
        return head + block
    return head + f"""if (n_rows > 1 && {work} >= {PAR_MIN}) {{
  #pragma omp parallel
  {block}
  }} else {block}"""


CUDA = CudaDialect()
C = CDialect()
