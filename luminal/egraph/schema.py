"""The egglog term language of the HLIR, and the program text that declares it with its rules.

One e-class per HLIR value. `(N i)` names node i of the part being optimized and is unioned
with the node's term, so terms refer to their operands through `N` (a DAG, linear in size);
the extractor never picks `N`. Ops the rules do not look into are `Opaque0..3` with an index
into a Python table that remembers op, dtype, shape and arg. Views and scalar constants carry
the id of a shape tracker (again a Python table); facts about trackers are relations.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.hlir.ops import BINARY, REDUCE, UNARY, Op

# the e-class operands, then the literals (and their sorts), of each op's constructor; the
# constructor is named `op.title`. Every other op is an `Opaque<n>` (OPAQUE).
LITERALS = {"axis": "i64", "dtype": "String", "src_dtype": "String", "tracker": "i64"}
CONSTRUCTORS: dict[Op, tuple[int, tuple[str, ...]]] = {
    **{op: (1, ()) for op in UNARY | {Op.EXP, Op.SIGMOID}},
    **{op: (2, ()) for op in (BINARY - {Op.PHILOX}) | {Op.MAT_MUL}},  # Philox: opaque (no rule looks into it)
    **{op: (1, ("axis",)) for op in REDUCE | {Op.SOFTMAX, Op.KAHAN_SUM}},
    Op.SUM_REDUCE: (1, ("axis", "dtype")),
    Op.CAST: (1, ("src_dtype", "dtype")),
    Op.VIEW: (1, ("tracker",)),
    Op.SELECT: (3, ()),
    Op.CONCAT: (2, ("axis",)),
    Op.MAXIMUM: (2, ()),
}
OPAQUE = frozenset(Op) - CONSTRUCTORS.keys()  # leaves, indexing, copies, FusedElementwise, Philox
OPS = {op.title: op for op in CONSTRUCTORS}  # constructor name -> op


def _signature(op: Op) -> str:
    arity, lits = CONSTRUCTORS[op]
    return " ".join([op.title] + ["Expr"] * arity + [LITERALS[k] for k in lits])


DECLARATIONS = f"""
(datatype Expr
  (N i64) (Leaf i64) (Splat f64 String i64)
  (Opaque0 i64) (Opaque1 i64 Expr) (Opaque2 i64 Expr Expr) (Opaque3 i64 Expr Expr Expr)
  {" ".join(f"({_signature(op)})" for op in Op if op in CONSTRUCTORS)})
(relation Bcast (i64))
(relation KeepDim (i64 i64))
(relation ExpandDim (i64 i64))
(function MatA (i64 i64) i64 :merge old)
(function MatB (i64 i64) i64 :merge old)
(relation Repr (f64 String))
(relation ExactRecip (f64 String))
(relation Widens (String String))
(relation SelectOf (Expr Expr Expr Expr i64))
(relation ConcatOf (Expr Expr))
(relation WindowOf (Expr Expr))
(relation MaximumOf (Expr Expr Expr))
(relation NarrowMatMulOf (Expr Expr))
"""

# exact round trips: every value of the first dtype is a value of the second
WIDENS = [("f16", "f32"), ("bf16", "f32"), ("f16", "f64"), ("bf16", "f64"), ("f32", "f64"), ("i32", "i64"),
          ("bool", "i32"), ("bool", "i64"), ("bool", "f16"), ("bool", "bf16"), ("bool", "f32"), ("bool", "f64")]


@dataclass(frozen=True)
class Rule:
    name: str
    text: str


def rule(name: str, text: str) -> Rule:
    """One rewrite or rule in egglog syntax, named by the identity it applies."""
    return Rule(name, text)


def program(rulesets: dict[str, list[Rule]]) -> str:
    """Declarations, rulesets and rules as egglog text (small: never scales with the model)."""
    lines = [DECLARATIONS]
    lines += [f'(Widens "{a}" "{b}")' for a, b in WIDENS]
    for name, rules in rulesets.items():
        lines.append(f"(ruleset {name})")
        for r in rules:
            body = r.text.rstrip()
            assert body.endswith(")"), r.name
            lines.append(f'{body[:-1]} :ruleset {name} :name "{r.name}")')
    return "\n".join(lines)
