"""HLIR part -> egglog commands (built from binding objects, never from program text).

`encode(part)` returns the commands that insert every node of the part as
`(union (N i) <term>)` plus the facts about the shape trackers its views use, and the tables
(`Encoding`) that extraction needs to turn e-nodes back into HLIR nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from luminal.egraph import compat as eg
from luminal.egraph.patterns import (
    concat_pieces,
    mat_a,
    mat_b,
    maximum_operands,
    narrow_matmul_of,
    select_operands,
    window_reduce_of,
)
from luminal.egraph.schema import CONSTRUCTORS
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import ConstantArray, Node, Op
from luminal.hlir.shape import ShapeTracker, contiguous_strides

DTYPES = {d.short: d for d in DType}
WINDOW_REDUCERS = (Op.SUM_REDUCE, Op.MAX_REDUCE)


@dataclass
class Encoding:
    nodes: list[Node]
    slots: list[Node]
    trackers: list[ShapeTracker] = field(default_factory=list)
    opaque: list[Node] = field(default_factory=list)  # Opaque* index -> the original node
    commands: list = field(default_factory=list)
    _tracker_ids: dict = field(default_factory=dict)

    def tracker(self, st: ShapeTracker) -> int:
        tid = self._tracker_ids.get(st)
        if tid is None:
            tid = self._tracker_ids[st] = len(self.trackers)
            self.trackers.append(st)
        return tid


def splat_value(node: Node) -> float | None:
    """The value of a scalar float constant that rules may match on, else None.

    NaN and -0.0 stay opaque: egglog's f64 compares them equal to other floats (all NaNs,
    +0.0), and merging -0.0 with +0.0 would change recip(-0.0) = -inf into +inf.
    """
    if node.op is not Op.CONSTANT or node.shape != () or not node.dtype.is_float:
        return None
    v = node.arg
    if isinstance(v, ConstantArray) or not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    v = float(v)
    if math.isnan(v) or (v == 0.0 and math.copysign(1.0, v) < 0):
        return None
    return v


def is_bcast(st: ShapeTracker) -> bool:
    """Every element reads element 0 of the source: a broadcast of one value."""
    return st.mask is None and sym.equal(st.offset, 0) and all(sym.equal(s, 0) for s in st.strides)


def representable(v: float, dtype: DType) -> bool:
    if dtype is DType.F64 or math.isinf(v):
        return True
    with np.errstate(over="ignore"):
        return float(np.array(v).astype(dtype.numpy)) == v


# the least positive normal value of each float dtype: a subnormal constant is flushed to zero
# where the device flushes subnormals (`-ftz`), so neither it nor its reciprocal may be folded
SMALLEST_NORMAL = {DType.F16: 2.0 ** -14, DType.BF16: 2.0 ** -126, DType.F32: 2.0 ** -126, DType.F64: 2.0 ** -1022}


def exact_reciprocal(v: float, dtype: DType) -> bool:
    """Whether `x * (1/v)` is `x / v` for every x of `dtype`: v is a power of two whose
    reciprocal is a normal value of the dtype too (then both products are exact scalings,
    rounded once). Any other reciprocal is rounded, so `x * (1/3)` differs from `x / 3`."""
    if not math.isfinite(v) or v == 0.0 or abs(math.frexp(v)[0]) != 0.5:
        return False
    tiny = SMALLEST_NORMAL.get(dtype)
    r = 1.0 / v  # exact: a power of two within float64's normal range both ways
    return tiny is not None and min(abs(v), abs(r)) >= tiny and representable(v, dtype) and representable(r, dtype)


def encode(nodes: list[Node], slots: list[Node]) -> Encoding:
    enc = Encoding(nodes, slots)
    index = {id(n): i for i, n in enumerate(nodes)}
    slot_index = {id(n): i for i, n in enumerate(slots)}
    reprs: set[tuple[float, str]] = set()
    exact_recips: set[tuple[float, str]] = set()

    def ref(n: Node):
        i = index.get(id(n))
        return eg.call("N", eg.i64(i)) if i is not None else eg.call("Leaf", eg.i64(slot_index[id(n)]))

    def splat(v: float, dt: DType, st: ShapeTracker):
        if representable(v, dt):
            reprs.add((v, dt.short))
        if exact_reciprocal(v, dt):
            exact_recips.add((v, dt.short))
        return eg.call("Splat", eg.f64(v), eg.string(dt.short), eg.i64(enc.tracker(st)))

    for i, n in enumerate(nodes):
        op, src = n.op, n.src
        if (v := splat_value(n)) is not None:
            term = splat(v, n.dtype, ShapeTracker.contiguous(()))
        elif op is Op.VIEW and (v := splat_value(src[0])) is not None and is_bcast(n.arg):
            term = splat(v, n.dtype, n.arg)
        elif op in CONSTRUCTORS:
            term = eg.call(op.title, *(ref(s) for s in src), *(_literal(k, n, enc) for k in CONSTRUCTORS[op][1]))
        else:  # ops no rule looks into: remembered by index, operands still e-classes
            enc.opaque.append(n)
            term = eg.call(f"Opaque{len(src)}", eg.i64(len(enc.opaque) - 1), *(ref(s) for s in src))
        enc.commands.append(eg.union(eg.call("N", eg.i64(i)), term))
    enc.commands += [eg.fact(eg.call("Repr", eg.f64(v), eg.string(d))) for v, d in sorted(reprs)]
    enc.commands += [eg.fact(eg.call("ExactRecip", eg.f64(v), eg.string(d))) for v, d in sorted(exact_recips)]
    enc.commands += tracker_facts(enc)
    enc.commands += pattern_facts(enc, index, slot_index, ref)
    return enc


def pattern_facts(enc: Encoding, index: dict, slot_index: dict, ref) -> list:
    """`SelectOf`, `ConcatOf`, `MaximumOf`, `NarrowMatMulOf` and `WindowOf` facts: the part's
    spellings of where, concat, maximum, bf16/f16 matmuls and direct convolutions / pooling
    (`patterns.py`), with operands this part can refer to."""
    known = lambda n: id(n) in index or id(n) in slot_index  # noqa: E731
    cmds = []
    for i, n in enumerate(enc.nodes):
        if n.op in (Op.VIEW, Op.GATHER) and (found := select_operands(n)) is not None:
            cond, *values, outer = found
            if known(cond) and all(known(v) for v, _ in values):
                terms = [eg.call(Op.VIEW.title, ref(v), eg.i64(enc.tracker(st))) for v, st in values]
                cmds.append(eg.fact(eg.call("SelectOf", eg.call("N", eg.i64(i)), ref(cond), *terms, eg.i64(enc.tracker(outer)))))
        elif n.op is Op.SCATTER and (found := concat_pieces(n)) is not None:
            axis, pieces = found
            if all(known(p) for p in pieces):
                term = ref(pieces[0])
                for p in pieces[1:]:
                    term = eg.call(Op.CONCAT.title, term, ref(p), eg.i64(axis))
                cmds.append(eg.fact(eg.call("ConcatOf", eg.call("N", eg.i64(i)), term)))
        elif n.op is Op.MAX_REDUCE and (found := maximum_operands(n)) is not None:
            if all(known(v) for v, _ in found):
                terms = [eg.call(Op.VIEW.title, ref(v), eg.i64(enc.tracker(st))) for v, st in found]
                cmds.append(eg.fact(eg.call("MaximumOf", eg.call("N", eg.i64(i)), *terms)))
        elif n.op is Op.CAST and (found := narrow_matmul_of(n)) is not None:
            if all(known(v) for v, _ in found):
                a, b = (eg.call(Op.VIEW.title, ref(v), eg.i64(enc.tracker(st))) for v, st in found)
                cmds.append(eg.fact(eg.call("NarrowMatMulOf", eg.call("N", eg.i64(i)), eg.call(Op.MAT_MUL.title, a, b))))
        if n.op in WINDOW_REDUCERS and (found := window_reduce_of(n)) is not None:
            kind, r, operands = found
            if all(known(v) for v in operands):  # the fused node, opaque to the rules
                enc.opaque.append(Node(Op.WINDOW_REDUCE, n.dtype, n.shape, operands, (kind, r)))
                term = eg.call(f"Opaque{len(operands)}", eg.i64(len(enc.opaque) - 1), *(ref(v) for v in operands))
                cmds.append(eg.fact(eg.call("WindowOf", eg.call("N", eg.i64(i)), term)))
    return cmds


def _literal(field: str, n: Node, enc: Encoding):
    """One literal of `n`'s constructor (the fields of `schema.LITERALS`)."""
    if field == "axis":
        return eg.i64(n.arg)
    if field == "tracker":
        return eg.i64(enc.tracker(n.arg))
    return eg.string((n.src[0] if field == "src_dtype" else n).dtype.short)


def tracker_facts(enc: Encoding) -> list:
    """Relations over the trackers in use: what the fusion rules need to know about strides."""
    cmds = []
    for tid, st in enumerate(list(enc.trackers)):
        if is_bcast(st):
            cmds.append(eg.fact(eg.call("Bcast", eg.i64(tid))))
        if st.mask is not None:
            continue
        r = st.ndim
        # a dim of size 1 is constant along itself whatever its stride (a GEMV: M or N is 1);
        # an operand at an offset (a slice of a larger buffer) keeps it
        if (la := mat_a(st)) is not None:  # a[..., M, (N), K]: constant along N
            cmds.append(eg.set_value("MatA", [eg.i64(tid), eg.i64(r - 1)], eg.i64(enc.tracker(la))))
        if (lb := mat_b(st)) is not None:  # bT[..., (M), N, K]: constant along M
            cmds.append(eg.set_value("MatB", [eg.i64(tid), eg.i64(r - 1)], eg.i64(enc.tracker(lb))))
        if not sym.equal(st.offset, 0):
            continue
        for a in range(r):
            if sym.equal(st.shape[a], 1) and st.is_contiguous():
                cmds.append(eg.fact(eg.call("KeepDim", eg.i64(tid), eg.i64(a))))
            if _expands_only(st, a):
                cmds.append(eg.fact(eg.call("ExpandDim", eg.i64(tid), eg.i64(a))))
    return cmds


def _expands_only(st: ShapeTracker, a: int) -> bool:
    """`st` reads a contiguous buffer of st.shape with dim a set to 1, stretched along a."""
    if not sym.equal(st.strides[a], 0):
        return False
    want = contiguous_strides(st.shape[:a] + (1,) + st.shape[a + 1 :])
    return all(i == a or sym.equal(d, 1) or sym.equal(s, w)
               for i, (d, s, w) in enumerate(zip(st.shape, st.strides, want)))
