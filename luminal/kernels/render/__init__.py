"""The kernel renderer: each op's generator written once (`kernels.py`) against a dialect per
target (`dialect.py`: CUDA C for NVRTC and the emulator, C for the system compiler).

    cexpr.py    symbolic dims and literals as C expressions
    cstyle.py   what every generator shares: op code (`code_for_op`), reads through views,
                signatures, `KernelSpec`, CUDA's 32/64-bit index variants
    dialect.py  `Dialect`, `CudaDialect`, `CDialect`: loops, row passes and spellings
    kernels.py  the generators (`GENERATORS`) and `render_node`
    conv.py     a WindowReduce's element (convolutions, pooling)
    matmul.py, gemv.py  CUDA's MatMul kernels (its "gemm" extern step's fallback)

A dialect's own kernels (its extern steps, and faster forms of an op) are passed to
`render_node` as `special`: `CUDA_SPECIAL` here, `luminal.kernels.cpu.render.SPECIAL` for C.
"""

from luminal.hlir.ops import Op
from luminal.kernels.render.cstyle import KernelSpec
from luminal.kernels.render.dialect import CUDA, C, Dialect
from luminal.kernels.render.kernels import GENERATORS, NO_KERNEL, render_node
from luminal.kernels.render.matmul import matmul

CUDA_SPECIAL = {Op.MAT_MUL: matmul}

__all__ = ["C", "CUDA", "CUDA_SPECIAL", "GENERATORS", "NO_KERNEL", "Dialect", "KernelSpec", "render_node"]
