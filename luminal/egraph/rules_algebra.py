"""Algebra rules: identities and constant folding. Every rule holds in exact arithmetic.

Constant folding runs in egglog's f64 and is exact for what the runtime computes: a folded
result is stored as a constant of the original dtype, and for f32/f16/bf16 operands that are
exactly representable (`Repr`, checked in Python at encode time) rounding the f64 result of
+, * or / once more to the narrow dtype gives the correctly rounded narrow result (double
rounding is innocuous when 53 >= 2p + 2; Figueroa 1995). Folded values are not `Repr`, so
folding never chains a second rounding. Reassociating constants is the one expansive rule: the
schedule caps its iterations (`pipeline.SCHEDULE`).
"""

from luminal.egraph.schema import rule

RULESET = "algebra"

RULES = [
    # x * 1 = x
    rule("x*1 = x", "(rewrite (Mul x (Splat 1.0 dt s)) x)"),
    rule("1*x = x", "(rewrite (Mul (Splat 1.0 dt s) x) x)"),
    # no x + 0 = x: -0.0 + 0.0 is +0.0 in IEEE, and the sign of a zero shows (1 / x = -inf)
    # 1 / (1 / x) = x
    rule("recip(recip(x)) = x", "(rewrite (Recip (Recip x)) x)"),
    # -(-x) = x, with negation spelled x * -1 (exact in IEEE too)
    rule("(x*-1)*-1 = x", "(rewrite (Mul (Mul x (Splat -1.0 dt s1)) (Splat -1.0 dt s2)) x)"),
    # cast to the same dtype is the identity
    rule("cast(x, a->a) = x", "(rewrite (Cast x a a) x)"),
    # a widening cast and back is exact (f32 -> f64 -> f32, i32 -> i64 -> i32, ...)
    rule("cast(cast(x, a->b), b->a) = x", "(rewrite (Cast (Cast x a b) b a) x :when ((Widens a b)))"),
    # constant folding (see the module docstring for why f64 folding is exact)
    # not to a zero: its sign depends on the operands' (-1 * 0 = -0.0), and egglog's f64 keeps one zero
    rule("fold c1*c2", "(rule ((= e (Mul (Splat p dt s) (Splat q dt s))) (Repr p dt) (Repr q dt) (!= (* p q) 0.0))"
         " ((union e (Splat (* p q) dt s))))"),
    rule("fold c1+c2", "(rule ((= e (Add (Splat p dt s) (Splat q dt s))) (Repr p dt) (Repr q dt))"
         " ((union e (Splat (+ p q) dt s))))"),
    # only an exact reciprocal (a power of two, `ExactRecip`): x * recip(3) renders as x / 3,
    # rounded once as torch's division; x * fl(1/3) would be off by an ulp on a third of x
    rule("fold recip(c)", "(rule ((= e (Recip (Splat p dt s))) (Repr p dt) (ExactRecip p dt))"
         " ((union e (Splat (/ 1.0 p) dt s))))"),
    # a broadcast view of a constant is the constant at the view's shape
    rule("view(c) = c", "(rule ((= e (View (Splat p dt s0) st)) (Bcast st)) ((union e (Splat p dt st))))"),
    # (x * c1) * c2 = x * (c1 * c2): exact arithmetic; expansive, so iteration-capped
    rule("(x*c1)*c2 = x*(c1*c2)", "(rewrite (Mul (Mul x (Splat p dt s)) (Splat q dt s))"
         " (Mul x (Mul (Splat p dt s) (Splat q dt s))))"),
]
