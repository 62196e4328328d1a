"""Fusion rules: recover the fast, precise ops that the builder decomposed into primitives.

Each line is one identity, `rule(name, egglog)`. Constants are matched exactly (the builder
emitted the very floats of `luminal.hlir.constants`), never within a tolerance. Facts about
views (`Bcast`, `KeepDim`, `ExpandDim`, `MatA`, `MatB`) are computed in Python from the shape
trackers when a graph is encoded (`encode.tracker_facts`), because strides are what decide
whether a broadcast-multiply is a matmul, and Python can check them on symbolic dims too.
"""

from luminal.egraph.schema import rule
from luminal.hlir.constants import LOG2E

RULESET = "fusion"

RULES = [
    # exp(x) = exp2(x * log2 e): the builder's spelling of exp, back to one native op
    rule("exp2(x*LOG2E) = Exp(x)", f"(rewrite (Exp2 (Mul x (Splat {LOG2E!r} dt s))) (Exp x))"),
    rule("exp2(LOG2E*x) = Exp(x)", f"(rewrite (Exp2 (Mul (Splat {LOG2E!r} dt s) x)) (Exp x))"),
    # sigmoid(x) = 1 / (1 + exp(-x)), with -x spelled x * -1
    rule("recip(1+exp(-x)) = Sigmoid(x)",
         "(rewrite (Recip (Add (Exp (Mul x (Splat -1.0 dt s1))) (Splat 1.0 dt s2))) (Sigmoid x))"),
    rule("recip(exp(-x)+1) = Sigmoid(x)",
         "(rewrite (Recip (Add (Splat 1.0 dt s2) (Exp (Mul x (Splat -1.0 dt s1))))) (Sigmoid x))"),
    # softmax(x, a) = e / sum_a(e), e = exp(x - max_a(x)); keepdim views and broadcasts checked
    rule("exp(x-max)*recip(sum) = Softmax(x)",
         "(rule ((= sh (Add x (View (Mul (View (MaxReduce x a) u) (Splat -1.0 dt s1)) e)))"
         " (= ex (Exp sh)) (= out (Mul ex (View (Recip (View (SumReduce ex a dt2) u2)) e2)))"
         " (KeepDim u a) (ExpandDim e a) (KeepDim u2 a) (ExpandDim e2 a))"
         " ((union out (Softmax x a))))"),
    # sum_k a[.., m, n, k] * b[.., m, n, k] with a constant in n and b constant in m is a matmul
    rule("sum_k(a[m,1,k]*bT[1,n,k]) = MatMul(a,b)",
         "(rule ((= e (SumReduce (Mul (View a sa) (View b sb)) k dt)) (= la (MatA sa k)) (= lb (MatB sb k)))"
         " ((union e (MatMul (View a la) (View b lb)))))"),
    rule("sum_k(bT[1,n,k]*a[m,1,k]) = MatMul(a,b)",
         "(rule ((= e (SumReduce (Mul (View b sb) (View a sa)) k dt)) (= la (MatA sa k)) (= lb (MatB sb k)))"
         " ((union e (MatMul (View a la) (View b lb)))))"),
    # cast(sum_k(widen(a)*widen(b)), f32 -> bf16/f16), the builder's narrow matmul, is a MatMul
    # in the narrow dtype (f32 accumulation) on the narrow operands (`patterns.narrow_matmul_of`)
    rule("narrow(sum_k(widen(a)*widen(b))) = MatMul(a,b)", "(rule ((NarrowMatMulOf o x)) ((union o x)))"),
    # where(c, a, b), spelled gather(stack([b, a], -1), cast(c)), is a pick: Select (`patterns.py`);
    # a view of the gather (shape (..., 1)) reads the Select (shape (...)) with the same tracker
    rule("gather(stack(b,a), c) = Select(c,a,b)", "(rule ((SelectOf o c a b t)) ((union o (View (Select c a b) t))))"),
    # concat spelled as scatters of its pieces into zeros at consecutive spans: slice copies
    rule("scatter spans into zeros = Concat", "(rule ((ConcatOf o x)) ((union o x)))"),
    # a product of overlapping window views (or one view) reduced over its last axes, one at a
    # time: a direct convolution or a pooling, one WindowReduce (`patterns.window_reduce_of`)
    rule("reduce_k(window*w) = WindowReduce", "(rule ((WindowOf o x)) ((union o x)))"),
    # maximum(a, b), spelled max(stack([a, b], -1), -1): one pointwise op that regions absorb
    rule("max(stack(a,b)) = Maximum(a,b)", "(rule ((MaximumOf o a b)) ((union o (Maximum a b))))"),
]
