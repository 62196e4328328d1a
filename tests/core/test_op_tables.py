"""One op vocabulary: every `Op` has its entry in every table that must cover it.

Adding an op means the `Op` enum (and its group) plus one entry per table below; a missing
entry fails here, not deep inside a compile."""

from __future__ import annotations

from luminal.egraph import reference, schema
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import (
    BINARY,
    FUSED,
    INDEXING,
    LEAF,
    MOVEMENT,
    POINTWISE,
    REDUCE,
    UNARY,
    Expr,
    Op,
)
from luminal.kernels.cpu.render import SPECIAL as C_SPECIAL
from luminal.kernels.render import CUDA_SPECIAL, GENERATORS, NO_KERNEL
from luminal.kernels.render.cstyle import code_for_op
from luminal.runtime.numpy_runtime import BINARY_FNS, IMPLS, TERNARY_FNS, UNARY_FNS
from luminal.saving import decode_arg, encode_arg

ALL = set(Op)


def test_groups_partition_the_ops():
    groups = [LEAF, UNARY | {Op.CAST}, BINARY, REDUCE, INDEXING, MOVEMENT, FUSED]
    assert sum(len(g) for g in groups) == len(ALL) and set().union(*groups) == ALL


def test_numpy_runtime_implements_every_op():
    assert IMPLS.keys() == ALL - {Op.INPUT}  # inputs are fed, not computed
    assert UNARY_FNS.keys() | BINARY_FNS.keys() | TERNARY_FNS.keys() == POINTWISE - {Op.CAST}  # what FusedElementwise applies


def test_every_dialect_renders_every_op():
    """One generator table for every dialect; what is left to a dialect (MatMul, the "gemm"
    extern step) is in its own table, and nothing else is."""
    assert not GENERATORS.keys() & NO_KERNEL
    for special in (CUDA_SPECIAL, C_SPECIAL):
        assert GENERATORS.keys() | special.keys() | NO_KERNEL == ALL
    assert ALL - GENERATORS.keys() - NO_KERNEL == {Op.MAT_MUL}
    assert code_for_op.keys() == POINTWISE - {Op.CAST}  # CAST is cast_value: it needs both dtypes


def test_egglog_schema_covers_every_op():
    assert schema.CONSTRUCTORS.keys() | schema.OPAQUE == ALL
    for op in schema.CONSTRUCTORS:
        assert f"({op.title} Expr" in schema.DECLARATIONS and schema.OPS[op.title] is op
    assert {k for _, lits in schema.CONSTRUCTORS.values() for k in lits} <= schema.LITERALS.keys()


def test_every_fused_op_has_a_reference_definition():
    assert reference.DEFINITIONS.keys() == FUSED


def test_save_format_names_every_op():
    assert all(Op.from_name(op.title) is op for op in ALL)
    x = Expr(Op.INPUT, DType.F32, (), 0)
    leaves = (x, Expr(Op.CONSTANT, DType.F32, (), -0.0))
    for op in POINTWISE:
        src = (Expr(Op.INPUT, DType.BOOL, (), 1), *leaves) if op is Op.SELECT else leaves[: 2 if op in BINARY else 1]
        e = Expr(op, DType.BOOL if op is Op.LESS_THAN else DType.F32, src)
        back = decode_arg(encode_arg(e, {}), {})
        assert back == e and back.src == e.src
    assert Expr(Op.CONSTANT, DType.F32, (), 0.0) != leaves[1]  # -0.0 is not 0.0
