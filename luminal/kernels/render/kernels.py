"""Kernel generators, one per op kind. Each returns the launches that compute one HLIR node.

- elementwise (pointwise ops, iota, contiguous copies): one thread per output element;
- reductions: one warp per output element, lanes stride over the axis (16 bytes at a time where
  it is contiguous and aligned), then warp shuffles;
- gather: one thread per output element; an out-of-range index sets the error flag;
- scatter: a copy of the data, then one thread per update (atomics when reducing).
Sources are read through their views (strides, offset, padding mask) and symbolic dims are
`long long d_<name>` kernel arguments.
"""

from __future__ import annotations

from luminal.errors import UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op
from luminal.hlir.shape import contiguous_strides
from luminal.kernels.render.cexpr import c_dim, compute_type, index_type
from luminal.kernels.render.cstyle import (
    THREADS,
    WARPS_PER_BLOCK,
    KernelSpec,
    buffer_sources,
    dtypes_of,
    index_variants,
    load_value,
    pointer_of,
    pointwise,
    pointwise_value,
    read,
    signature,
    store_value,
    symbols_of,
    unravel,
    view_of,
    wrapping,
)


def elementwise(node: Node, name: str) -> list[KernelSpec]:
    return pointwise(node, name, lambda idx, inputs: pointwise_value(node, idx, inputs), vector=node.op is not Op.IOTA)


_SHFL_TYPES = {"float", "double", "int", "long long"}


def reduce(node: Node, name: str) -> list[KernelSpec]:
    """A warp per output element: strided partial sums/maxes, then a shuffle tree (32-bit index
    math where the sizes fit)."""
    return index_variants(node, lambda: _reduce(node, name))


def _reduce(node: Node, name: str) -> list[KernelSpec]:
    (src,) = node.src
    axis = node.arg
    inputs = buffer_sources(node)
    symbols = symbols_of(node, extra=[src.shape])
    t = compute_type(node.dtype)
    acc_t = t if t in _SHFL_TYPES else "int"  # bool max reduces as int
    n_out = sym.product(node.shape)
    k = src.shape[axis]
    out_idx, lines = unravel("row", node.shape, "o")
    full = out_idx[:axis] + ["r"] + out_idx[axis:]
    value = read(src, full, pointer_of(src, inputs))
    if node.op is Op.SUM_REDUCE:
        init, combine = f"({acc_t})0", wrapping(acc_t, "acc", "+", "v")
    else:
        lowest = {"float": "-__int_as_float(0x7f800000)", "double": "-__longlong_as_double(0x7ff0000000000000LL)",
                  "int": "(-2147483647 - 1)", "long long": "(-9223372036854775807LL - 1)"}[acc_t]
        if node.dtype is DType.BOOL:
            lowest = "0"  # an empty `any` is false
        init, combine = lowest, "lum_max_nan(acc, v)"
    body = "\n    ".join(lines)
    it = index_type()
    src_code = f"""{signature(name, node, inputs, symbols, False)} {{
  {it} row = ({it})blockIdx.x * {WARPS_PER_BLOCK} + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= {c_dim(n_out)}) return;  // warp-uniform: whole warps leave together
  {body}
  {acc_t} acc = {init};
  {_axis_loop(src, axis, full, inputs, acc_t, combine, value, c_dim(k), it)}
  for (int offset = 16; offset > 0; offset >>= 1) {{
    {acc_t} v = __shfl_down_sync(0xffffffffu, acc, offset);
    acc = {combine};
  }}
  if (lane == 0) out[row] = {store_value(node.dtype, "acc")};
}}
"""
    grid = sym.ceildiv(n_out, WARPS_PER_BLOCK)
    return [KernelSpec(name, src_code, node, inputs, symbols, grid, 32 * WARPS_PER_BLOCK, dtypes=dtypes_of(node))]


def _axis_loop(src: Node, axis: int, full: list[str], inputs, acc_t: str, combine: str, value: str, k: str,
               it: str) -> str:
    """The lanes' loop over the reduced axis: where the axis is contiguous (stride 1, no mask,
    2- to 8-byte items), 16-byte loads when the row is aligned (warp-uniform) and element loads
    for the tail; otherwise (or unaligned) one element per lane per step."""
    scalar = f"""for ({it} r = lane; r < {k}; r += 32) {{
    {acc_t} v = ({acc_t})({value});
    acc = {combine};
  }}"""
    base, st = view_of(src)
    if st.mask is not None or base.dtype.itemsize not in (2, 4, 8) or not sym.equal(st.strides[axis], 1):
        return scalar
    lanes = 16 // base.dtype.itemsize
    t = base.dtype.ctype
    row0 = full[:axis] + ["0"] + full[axis + 1:]
    addr = " + ".join([c_dim(st.offset)] + [f"{i} * {c_dim(s)}" for i, s in zip(row0, st.strides) if s != 0])
    return f"""const {t}* rp = {pointer_of(src, inputs)} + {addr};
  if (lum_aligned16(rp)) {{  // 16-byte loads along the contiguous axis
    const {it} kv = {k} / {lanes};
    for ({it} q = lane; q < kv; q += 32) {{
      alignas(16) {t} vb[{lanes}];
      *(uint4*)vb = *(const uint4*)(rp + q * {lanes});
      #pragma unroll
      for (int j = 0; j < {lanes}; ++j) {{
        {acc_t} v = ({acc_t})({load_value(base.dtype, "vb[j]")});
        acc = {combine};
      }}
    }}
    for ({it} r = kv * {lanes} + lane; r < {k}; r += 32) {{
      {acc_t} v = ({acc_t})({load_value(base.dtype, "rp[r]")});
      acc = {combine};
    }}
  }} else {{
  {scalar}
  }}"""


def gather(node: Node, name: str) -> list[KernelSpec]:
    data, index = node.src
    axis = node.arg
    inputs = buffer_sources(node)
    symbols = symbols_of(node, extra=[data.shape])
    numel = sym.product(node.shape)
    idx, lines = unravel("idx", node.shape)
    where = read(index, idx, pointer_of(index, inputs))
    picked = idx[:axis] + ["g"] + idx[axis + 1 :]
    value = read(data, picked, pointer_of(data, inputs))
    zero = "false" if node.dtype is DType.BOOL else f"({compute_type(node.dtype)})0"
    body = "\n    ".join(lines)
    src = f"""{signature(name, node, inputs, symbols, True)} {{
  long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= {c_dim(numel)}) return;
  {{
    {body}
    long long g = (long long)({where});
    if (g < 0 || g >= {c_dim(data.shape[axis])}) {{ atomicExch(err, 1); out[idx] = {store_value(node.dtype, zero)}; return; }}
    out[idx] = {store_value(node.dtype, value)};
  }}
}}
"""
    return [KernelSpec(name, src, node, inputs, symbols, sym.ceildiv(numel, THREADS), THREADS, True, dtypes_of(node))]


_ATOMIC = {
    ("add", "float"): "atomicAdd(&out[a], v)",
    ("add", "double"): "atomicAdd(&out[a], v)",
    ("add", "int"): "atomicAdd(&out[a], v)",
    ("add", "long long"): "atomicAdd((unsigned long long*)&out[a], (unsigned long long)v)",
    ("max", "int"): "atomicMax(&out[a], v)",
    ("min", "int"): "atomicMin(&out[a], v)",
    ("max", "long long"): "atomicMax(&out[a], v)",
    ("min", "long long"): "atomicMin(&out[a], v)",
}


def scatter(node: Node, name: str) -> list[KernelSpec]:
    """Copy `data` into the output, then write (or atomically combine) each update."""
    data, index, updates = node.src
    axis, reduce_kind = node.arg
    copy_node = Node(Op.CONTIGUOUS, node.dtype, node.shape, (data,))
    copy = elementwise(copy_node, f"{name}_copy")[0]
    for c in (copy, *copy.variants):
        c.output = node
    inputs = buffer_sources(node, (index, updates))  # the scatter launch reads only these two
    symbols = symbols_of(node, extra=[index.shape])
    numel = sym.product(index.shape)
    idx, lines = unravel("idx", index.shape)
    where = read(index, idx, pointer_of(index, inputs))
    value = read(updates, idx, pointer_of(updates, inputs))
    strides = contiguous_strides(node.shape)
    address = " + ".join([f"{i} * {c_dim(s)}" for k, (i, s) in enumerate(zip(idx, strides)) if k != axis] + [f"g * {c_dim(strides[axis])}"])
    t = node.dtype.ctype
    if reduce_kind is None:
        write = f"out[a] = {store_value(node.dtype, 'v')};"
    elif (reduce_kind, t) in _ATOMIC:
        write = _ATOMIC[(reduce_kind, t)] + ";"
    else:
        raise UnsupportedError(f"scatter with reduce={reduce_kind!r} on {node.dtype} has no CUDA kernel")
    body = "\n    ".join(lines)
    v_t = compute_type(node.dtype) if reduce_kind is None else t
    src = f"""{signature(name, node, inputs, symbols, True)} {{
  long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= {c_dim(numel)}) return;
  {{
    {body}
    long long g = (long long)({where});
    if (g < 0 || g >= {c_dim(node.shape[axis])}) {{ atomicExch(err, 1); return; }}
    long long a = {address};
    {v_t} v = ({v_t})({value});
    {write}
  }}
}}
"""
    spec = KernelSpec(name, src, node, inputs, symbols, sym.ceildiv(numel, THREADS), THREADS, True, dtypes_of(node))
    return [copy, spec]
