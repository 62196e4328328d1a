"""WindowReduce (direct convolutions, pooling) in the C dialect: a row loop over every output
dim but the last (OpenMP across cores when the work is large), the last dim an `omp simd` loop
whose element is the unrolled window (`luminal/kernels/render/conv.py`, shared with CUDA).
For a depthwise 3x3 conv over NCHW that is nine fused multiply-adds per output, vectorized
along the output row, reading the input row and one broadcast weight per term.

`window_reduce(node)` returns (inputs, symbols, err, body); the C renderer wraps it into its
kernel function (`render.GENERATORS`).
"""

from __future__ import annotations

from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Node
from luminal.kernels.render.cexpr import c_dim
from luminal.kernels.render.conv import element
from luminal.kernels.render.cstyle import buffer_sources, store_value, symbols_of, unravel

PAR_MIN = 65536  # multiply-adds below which the loop stays on one core


def window_reduce(node: Node) -> tuple[list[Node], list[str], bool, str]:
    inputs = buffer_sources(node)
    shape = node.shape or (1,)
    outer, last = shape[:-1], shape[-1]
    rows, lines = unravel("row", outer, "i")
    inner = f"i{len(outer)}"
    idx = (rows + [inner]) if node.shape else []
    stmts, value = element(node, idx, inputs)
    terms = c_dim(sym.product(node.src[0].shape[len(node.shape):]))
    setup = "\n    ".join(lines)
    body = f"""const long long n_rows = {c_dim(sym.product(outer))}, n_in = {c_dim(last)};
  #pragma omp parallel for if (n_rows > 1 && n_rows * n_in * {terms} >= {PAR_MIN})
  for (long long row = 0; row < n_rows; ++row) {{
    {setup}
    #pragma omp simd
    for (long long {inner} = 0; {inner} < n_in; ++{inner}) {{
      {stmts}
      out[row * n_in + {inner}] = {store_value(node.dtype, value)};
    }}
  }}"""
    return inputs, symbols_of(node), False, body
