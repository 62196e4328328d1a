"""The CUDA C renderer: `GENERATORS` maps each op to its kernel generator (`NO_KERNEL`: ops
that launch nothing, their consumers read them).

    cexpr.py    symbolic dims and literals as C expressions
    cstyle.py   the CUDA dialect (`code_for_op`, types, reads through views) and what every
                generator shares (signatures, `KernelSpec`, the pointwise skeleton)
    kernels.py  pointwise ops, reduce, gather, scatter; fused.py  regions, softmax, Kahan sum, matmul
    conv.py     WindowReduce: direct convolutions and pooling
"""

from luminal.errors import UnsupportedError
from luminal.hlir.ops import POINTWISE, REDUCE, Node, Op
from luminal.kernels.render import conv, fused, kernels
from luminal.kernels.render.cstyle import KernelSpec

GENERATORS = {
    **{op: kernels.elementwise for op in POINTWISE | {Op.IOTA, Op.CONTIGUOUS}},
    **{op: kernels.reduce for op in REDUCE},
    Op.GATHER: kernels.gather,
    Op.SCATTER: kernels.scatter,
    Op.FUSED_ELEMENTWISE: fused.fused_elementwise,
    Op.SOFTMAX: fused.softmax,
    Op.KAHAN_SUM: fused.kahan_sum,
    Op.MAT_MUL: fused.matmul,
    Op.CONCAT: fused.concat,
    Op.WINDOW_REDUCE: conv.window_reduce,
}
NO_KERNEL = frozenset({Op.INPUT, Op.CONSTANT, Op.VIEW})  # scalars are inlined, buffers and views read


def render_node(node: Node, name: str) -> list[KernelSpec]:
    """The launches that compute `node` into its own contiguous buffer."""
    gen = GENERATORS.get(node.op)
    if gen is None:
        raise UnsupportedError(f"no CUDA kernel for op {node.op.title}")
    return gen(node, name)


__all__ = ["GENERATORS", "NO_KERNEL", "KernelSpec", "render_node"]
