"""Named float constants used by decompositions.

Every decomposition and every rewrite rule takes its constants from here, so the rules of
`luminal/egraph/` can match the *exact* float the builder emitted (the soundness contract of
DESIGN.md: constants are matched exactly, never by a tolerance window).
"""

import math

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)
LN2 = 0.6931471805599453  # ln(2): log(x) = log2(x) * LN2
PI = math.pi
HALF_PI = math.pi / 2  # cos(x) = sin(x + HALF_PI)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)  # gelu, tanh form
GELU_TANH_COEFF = 0.044715  # gelu, tanh form
INV_SQRT2 = 1.0 / math.sqrt(2.0)  # gelu, erf form: 0.5 x (1 + erf(x / sqrt 2))

# erf(x) by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7, below f32's 1e-5 tolerance):
# erf(x) = sign(x) (1 - (a1 t + a2 t^2 + ... + a5 t^5) exp(-x^2)), t = 1 / (1 + p |x|)
ERF_P = 0.3275911
ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
# below ERF_SMALL, where 1 - (...) exp(-x^2) cancels (an f32 error of 5e-7 near 0), erf's Maclaurin
# series instead: x (c0 + c1 x^2 + ... + c6 x^12), c_n = 2/sqrt(pi) (-1)^n / (n! (2n + 1)); the next
# term is below 1e-9 of erf(x) there
ERF_SMALL = 0.5
ERF_SERIES = tuple(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(7))

# random numbers (`Op.PHILOX`, `luminal/builder/random.py`): a graph with random ops has one more
# input, a 0-d int64 seed of this name, which `CompiledGraph` draws per call when not given
RNG_SEED_INPUT = "__luminal_rng_seed__"
RNG_STREAM_SHIFT = 40  # a random op's counters are (stream << 40) + linear index: 2**40 elements per stream
