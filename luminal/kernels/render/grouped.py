"""GroupedMatMul's generator (both dialects): an element loop over the (S, N) output, each
element finding its row's group in the offsets, then its dot product over K. CUDA's kernel (one
thread per output, the threads of a warp along N: coalesced weight reads, the row's x broadcast);
C uses it for integer dtypes only (floats are `kernels/cpu/grouped.py`'s BLAS call per group).
"""

from __future__ import annotations

from luminal.errors import UnsupportedError
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node
from luminal.kernels.render.cexpr import c_dim
from luminal.kernels.render.cstyle import current, pointer_of, read, wrapping
from luminal.kernels.render.dialect import Dialect


def accumulator(dtype: DType) -> str:
    """What a GroupedMatMul of `dtype` sums in: as MatMul's kernels (f32 for f16/bf16/f32)."""
    if dtype is DType.BOOL:
        raise UnsupportedError("GroupedMatMul on bool")
    if dtype.is_float:
        return "double" if dtype is DType.F64 else "float"
    return "long long" if dtype.itemsize == 8 else "int"


def grouped_matmul(node: Node, d: Dialect):
    x, w, offs = node.src
    inputs = current()[1]
    t = accumulator(node.dtype)
    experts, k = c_dim(w.shape[0]), c_dim(x.shape[1])
    at = lambda n, idx: read(n, idx, pointer_of(n, inputs))  # noqa: E731

    def element(idx, flat):
        s, col = idx
        product = wrapping(t, f"({t})({at(x, [s, 'gk'])})", "*", f"({t})({at(w, ['gg', 'gk', col])})")
        return (f"long long gg = 0;  // the row's group: how many offsets are <= the row\n    "
                f"for (long long ge = 0; ge < {experts}; ++ge) gg += (long long)({at(offs, ['ge'])}) <= (long long){s};\n    "
                f"{t} gacc = ({t})0;\n    "
                f"if (gg < {experts}) for (long long gk = 0; gk < {k}; ++gk) gacc = {wrapping(t, 'gacc', '+', product)};"), "gacc"

    return [d.elements(node.shape, element, work=x.shape[1])], None
