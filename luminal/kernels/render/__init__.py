"""The CUDA C renderer: one kernel per HLIR op (or fused region), as tables per op kind.

    cexpr.py    symbolic dims and literals as C expressions
    cstyle.py   the CUDA dialect: types, loads/stores through views, `code_for_op`
    kernels.py  kernel generators per op kind (elementwise, reduce, gather, scatter)
"""

from luminal.kernels.render.kernels import KernelSpec, render_node

__all__ = ["KernelSpec", "render_node"]
