"""The egglog term language of the HLIR, and the program text that declares it with its rules.

One e-class per HLIR value. `(N i)` names node i of the part being optimized and is unioned
with the node's term, so terms refer to their operands through `N` (a DAG, linear in size);
the extractor never picks `N`. Ops the rules do not look into are `Opaque0..3` with an index
into a Python table that remembers op, dtype, shape and arg. Views and scalar constants carry
the id of a shape tracker (again a Python table); facts about trackers are relations.
"""

from __future__ import annotations

from dataclasses import dataclass

DECLARATIONS = """
(datatype Expr
  (N i64) (Leaf i64) (Splat f64 String i64)
  (Opaque0 i64) (Opaque1 i64 Expr) (Opaque2 i64 Expr Expr) (Opaque3 i64 Expr Expr Expr)
  (View Expr i64) (Cast Expr String String)
  (Exp2 Expr) (Log2 Expr) (Sin Expr) (Sqrt Expr) (Recip Expr)
  (Add Expr Expr) (Mul Expr Expr) (Mod Expr Expr) (LessThan Expr Expr)
  (SumReduce Expr i64 String) (MaxReduce Expr i64)
  (Exp Expr) (Sigmoid Expr) (Softmax Expr i64) (KahanSum Expr i64) (MatMul Expr Expr))
(relation Bcast (i64))
(relation KeepDim (i64 i64))
(relation ExpandDim (i64 i64))
(function MatA (i64 i64) i64 :merge old)
(function MatB (i64 i64) i64 :merge old)
(relation Repr (f64 String))
(relation Widens (String String))
"""

# exact round trips: every value of the first dtype is a value of the second
WIDENS = [("f16", "f32"), ("bf16", "f32"), ("f16", "f64"), ("bf16", "f64"), ("f32", "f64"), ("i32", "i64"),
          ("bool", "i32"), ("bool", "i64"), ("bool", "f16"), ("bool", "bf16"), ("bool", "f32"), ("bool", "f64")]

# constructors that hold an e-class per argument position (None: a literal of that sort)
UNARY = {"Exp2": "EXP2", "Log2": "LOG2", "Sin": "SIN", "Sqrt": "SQRT", "Recip": "RECIP"}
BINARY = {"Add": "ADD", "Mul": "MUL", "Mod": "MOD", "LessThan": "LESS_THAN"}


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
