"""Numerics rules: the same function, computed with less rounding error.

A plain f32 SumReduce accumulates an error that grows with the reduction length; KahanSum is
the same sum in exact arithmetic with a compensated accumulator (the CUDA kernel) or a float64
one (the NumPy runtime). The cost model ranks KahanSum no dearer than SumReduce, so every f32
sum that is not part of a bigger fusion (MatMul, Softmax) comes out compensated.
"""

from luminal.egraph.schema import rule

RULESET = "numerics"

RULES = [
    # sum(x) = KahanSum(x): compensated summation of the same terms
    rule("SumReduce(f32) = KahanSum", '(rewrite (SumReduce x a "f32") (KahanSum x a))'),
]
