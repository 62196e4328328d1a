"""Soundness of every rule: random instances of its left side, evaluated as built (primitives)
and after rewriting, agree on the NumPy runtime. Each case is built so that its rule fires."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.egraph import rules_algebra, rules_fusion, rules_numerics
from luminal.hlir import constants as C
from luminal.hlir.ops import Op

SEEDS = range(6)


def _shape(rng, ndim_lo=1, ndim_hi=3):
    return tuple(int(d) for d in rng.integers(1, 6, rng.integers(ndim_lo, ndim_hi + 1)))


def unary(f, special=True):
    """A case: one input of a random shape, output f(x)."""
    def make(g, rng):
        shape = _shape(rng)
        x = g.input("x", shape)
        vals = (rng.standard_normal(shape) * 3).astype(np.float32)
        if special and vals.size > 2:
            vals.flat[:3] = [0.0, 40.0, -40.0][: vals.size]
        return f(x), {"x": vals}
    return make


def const(x, v):
    return x._scalar(v).expand(x.shape)


def softmax_case(g, rng):
    shape = _shape(rng, 1, 3)
    axis = int(rng.integers(-len(shape), len(shape)))
    x = g.input("x", shape)
    vals = (rng.standard_normal(shape) * 4).astype(np.float32)
    return x.softmax(axis), {"x": vals}


def matmul_case(swapped):
    def make(g, rng):
        batch = _shape(rng, 0, 2)
        m, k, n = (int(v) for v in rng.integers(1, 7, 3))
        a = g.input("a", batch + (m, k))
        b = g.input("b", (k, n) if rng.integers(2) else batch + (k, n))
        feeds = {"a": rng.standard_normal(a.shape).astype(np.float32), "b": rng.standard_normal(b.shape).astype(np.float32)}
        if not swapped:
            return a.matmul(b), feeds
        full = batch + (m, n, k)
        lhs = a.unsqueeze(-2).expand(full)
        rhs = b.transpose(-1, -2).unsqueeze(-3).expand(full)
        return rhs.mul(lhs).sum(-1), feeds
    return make


def sum_case(g, rng):
    shape = _shape(rng, 1, 3)
    x = g.input("x", shape)
    return x.sum(int(rng.integers(len(shape)))), {"x": (rng.standard_normal(shape) * 1e3).astype(np.float32)}


def _special(rng, shape):
    """Random f32 values with NaN, ±inf and -0.0 among them."""
    vals = rng.standard_normal(shape).astype(np.float32)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0], np.float32)
    return np.where(rng.random(shape) < 0.3, specials[rng.integers(0, 4, shape)], vals)


def where_case(g, rng):
    """where(c, a, b) with c, a and b broadcast against each other (a scalar b, sometimes)."""
    shape = _shape(rng, 1, 3)
    part = lambda: tuple(d if rng.integers(2) else 1 for d in shape)  # noqa: E731
    sc, sa, sb = part(), part(), part()
    c, a = g.input("c", sc, lm.bool_), g.input("a", sa)
    feeds = {"c": rng.random(sc) < 0.5, "a": _special(rng, sa)}
    if rng.integers(3) == 0:
        return lm.where(c, a, float(rng.choice([-np.inf, np.nan, -0.0]))), feeds
    feeds["b"] = _special(rng, sb)
    return lm.where(c, a, g.input("b", sb)), feeds


def concat_case(g, rng):
    """concat (or stack) of 2 or 3 pieces along a random axis; f32 or int32."""
    shape = _shape(rng, 1, 3)
    axis = int(rng.integers(len(shape)))
    dtype = [lm.f32, lm.int32][int(rng.integers(2))]
    stack = bool(rng.integers(2))
    pieces, feeds = [], {}
    for k in range(int(rng.integers(2, 4))):
        s = shape if stack else shape[:axis] + (int(rng.integers(1, 4)),) + shape[axis + 1:]
        feeds[f"x{k}"] = _special(rng, s) if dtype is lm.f32 else rng.integers(-9, 9, s).astype(np.int32)
        pieces.append(g.input(f"x{k}", s, dtype))
    return (lm.stack(pieces, axis) if stack else lm.concat(pieces, axis)), feeds


def window_case(g, rng):
    """A depthwise or grouped conv (1-D or 2-D; stride, padding, dilation, channel multiplier) or a max/avg
    pool: a product of window views (or one view) reduced over the kernel axes (builder/nn.py)."""
    from luminal.builder import nn

    nsp, c, cg = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 3))
    k, s, d, p = (int(rng.integers(1, 4)) for _ in range(4))
    xs = (int(rng.integers(1, 3)), c * cg) + tuple(int(rng.integers(d * (k - 1) + 1, 9)) for _ in range(nsp))
    feeds = {"x": _special(rng, xs)}
    x, kind = g.input("x", xs), int(rng.integers(3))
    if kind == 0:  # c groups of cg channels each (depthwise for cg = 1), m outputs per group
        m = int(rng.integers(1, 3))
        feeds["w"] = rng.standard_normal((c * m, cg) + (k,) * nsp).astype(np.float32)
        return nn.conv(x, g.input("w", feeds["w"].shape), None, s, min(p, k - 1), d, c), feeds
    if kind == 1:
        return nn.max_pool(x, (k,) * nsp, s, min(p, k // 2), d), feeds
    return nn.avg_pool(x, (k,) * nsp, s, min(p, k // 2)), feeds


def maximum_case(g, rng):
    """maximum (and clamp, its use) of broadcast operands, NaN, ±inf and -0.0 among them."""
    shape = _shape(rng, 1, 3)
    sb = tuple(d if rng.integers(2) else 1 for d in shape)
    a, feeds = g.input("a", shape), {"a": _special(rng, shape)}
    if rng.integers(3) == 0:
        return a.clamp(-0.5, 0.5), feeds
    feeds["b"] = _special(rng, sb)
    return a.maximum(g.input("b", sb)), feeds


def narrow_matmul_case(g, rng):
    """bf16/f16 matmuls as the builder spells them (widened to f32, summed, rounded back): a
    linear (transposed weight), a batched matmul, a slice of a wider B. Values are multiples of
    1/4 below 2, so every f32 product and sum is exact and both sides round the same sum."""
    dt = [lm.bf16, lm.f16][int(rng.integers(2))]
    batch = _shape(rng, 0, 2)
    m, k, n = (int(v) for v in rng.integers(1, 7, 3))
    vals = lambda s: (rng.integers(-8, 9, s) / 4).astype(dt.numpy)  # noqa: E731
    a, kind = g.input("a", batch + (m, k), dt), int(rng.integers(3))
    shape = [(n, k), batch + (k, n), (k, n + 2)][kind]
    b = g.input("b", shape, dt)
    out = a.linear(b) if kind == 0 else a.matmul(b) if kind == 1 else a.matmul(b[:, 1:n + 1])
    return out, {"a": vals(a.shape), "b": vals(shape)}


def cast_same(x):
    return x._new(Op.CAST, x.dtype, x.shape, (x,)).sin()


CASES = {
    "exp2(x*LOG2E) = Exp(x)": unary(lambda x: x.exp()),
    "exp2(LOG2E*x) = Exp(x)": unary(lambda x: const(x, C.LOG2E).mul(x).exp2()),
    "recip(1+exp(-x)) = Sigmoid(x)": unary(lambda x: x.sigmoid()),
    "recip(exp(-x)+1) = Sigmoid(x)": unary(lambda x: const(x, 1.0).add(x.neg().exp()).reciprocal()),
    "exp(x-max)*recip(sum) = Softmax(x)": softmax_case,
    "sum_k(a[m,1,k]*bT[1,n,k]) = MatMul(a,b)": matmul_case(False),
    "sum_k(bT[1,n,k]*a[m,1,k]) = MatMul(a,b)": matmul_case(True),
    "SumReduce(f32) = KahanSum": sum_case,
    "x*1 = x": unary(lambda x: x.mul(1.0).sin()),
    "1*x = x": unary(lambda x: const(x, 1.0).mul(x).sin()),
    "recip(recip(x)) = x": unary(lambda x: x.reciprocal().reciprocal()),
    "(x*-1)*-1 = x": unary(lambda x: x.neg().neg().sqrt()),
    "cast(x, a->a) = x": unary(cast_same),
    "cast(cast(x, a->b), b->a) = x": unary(lambda x: x.cast(lm.f64).cast(lm.f32).sin()),
    "fold c1*c2": unary(lambda x: x.add(x.graph.scalar(1.5, lm.f32).mul(2.25))),
    "fold c1+c2": unary(lambda x: x.mul(x.graph.scalar(1.5, lm.f32).add(0.25))),
    "fold recip(c)": unary(lambda x: x.mean(-1)),
    "view(c) = c": unary(lambda x: x.mean(-1)),
    "(x*c1)*c2 = x*(c1*c2)": unary(lambda x: x.mul(3.0).mul(0.1).sin()),
    "gather(stack(b,a), c) = Select(c,a,b)": where_case,
    "scatter spans into zeros = Concat": concat_case,
    "reduce_k(window*w) = WindowReduce": window_case,
    "max(stack(a,b)) = Maximum(a,b)": maximum_case,
    "narrow(sum_k(widen(a)*widen(b))) = MatMul(a,b)": narrow_matmul_case,
}
EXACT = {"gather(stack(b,a), c) = Select(c,a,b)", "scatter spans into zeros = Concat", "max(stack(a,b)) = Maximum(a,b)",
         "narrow(sum_k(widen(a)*widen(b))) = MatMul(a,b)"}
ALL_RULES = [r.name for r in rules_fusion.RULES + rules_numerics.RULES + rules_algebra.RULES]


def test_every_rule_has_a_soundness_case():
    assert sorted(CASES) == sorted(ALL_RULES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_is_sound(name):
    fired = 0
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        g = lm.Graph(name)
        out, feeds = CASES[name](g, rng)
        g.output(out)
        (lhs,) = g.run(feeds)
        cg = g.compile()
        (rhs,) = cg(feeds)
        assert rhs.dtype == lhs.dtype and rhs.shape == lhs.shape
        np.testing.assert_allclose(rhs, lhs, rtol=2e-5, atol=1e-6, err_msg=f"{name}, seed {seed}")
        if name in EXACT:  # values move unchanged: NaN, ±inf and the sign of zero included
            np.testing.assert_array_equal(rhs, lhs)
            np.testing.assert_array_equal(np.signbit(rhs), np.signbit(lhs))
        fired += cg.report().rules_fired.get(name, 0)
    assert fired > 0, f"rule {name!r} never fired on its own cases"


def test_softmax_keeps_fully_masked_rows_nan():
    g = lm.Graph()
    x = g.input("x", (2, 3))
    g.output(x.softmax(-1))
    vals = np.array([[-np.inf] * 3, [0.0, 1.0, -np.inf]], np.float32)
    cg = g.compile()
    assert cg.report().ops_after.get("Softmax") == 1
    np.testing.assert_array_equal(np.isnan(cg(x=vals)[0]), np.isnan(g.run(x=vals)[0]))


def test_matmul_not_matched_without_broadcast_strides():
    """A product of two full tensors summed over the last axis is not a matmul."""
    g = lm.Graph()
    a, b = g.input("a", (2, 3, 4)), g.input("b", (2, 3, 4))
    g.output(a.mul(b).sum(-1))
    cg = g.compile()
    assert "MatMul" not in cg.report().ops_after
    feeds = {"a": np.ones((2, 3, 4), np.float32), "b": np.full((2, 3, 4), 2, np.float32)}
    np.testing.assert_allclose(cg(feeds)[0], g.run(feeds)[0])


def test_negative_zero_and_nan_constants_are_not_merged():
    g = lm.Graph()
    x = g.input("x", (3,))
    g.output(x.mul(-0.0).reciprocal().add(x.mul(0.0).reciprocal()))  # -inf + inf = nan
    vals = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(np.isnan(g.compile()(x=vals)[0]), np.isnan(g.run(x=vals)[0]))


def test_the_sign_of_a_zero_survives_rewriting():
    """-0.0 + 0.0 is +0.0 and 1 * (-1 * 0.0) is -0.0: no rule may lose a zero's sign."""
    g = lm.Graph()
    x = g.input("x", (4,))
    zero = g.scalar(0.0, lm.f32)
    g.output(x.add(0.0).reciprocal())
    g.output(x.mul(g.scalar(-1.0, lm.f32).mul(zero)).reciprocal())
    vals = np.array([-0.0, 0.0, 1.0, -2.0], np.float32)
    cg = g.compile()
    for got, want in zip(cg(x=vals), g.run(x=vals)):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_where_and_concat_become_select_and_concat():
    """The builder's spellings leave no Gather or Scatter behind, on symbolic dims too."""
    g = lm.Graph()
    x, y = g.input("x", ("seq", 4)), g.input("y", (2, 4))
    c = x.lt(0.0)
    g.output(lm.concat([y, lm.where(c, x, -np.inf)], 0))
    cg = g.compile()
    ops = cg.report().ops_after
    assert "Gather" not in ops and "Scatter" not in ops and ops.get("Concat") == 1, ops
    for n in (0, 1, 5):
        feeds = {"x": _special(np.random.default_rng(n), (n, 4)), "y": np.ones((2, 4), np.float32)}
        np.testing.assert_array_equal(cg(feeds)[0], g.run(feeds)[0])


def test_gather_by_an_integer_index_is_not_a_select():
    """Only a bool cast to integers is known to be 0 or 1: another index may be out of range."""
    g = lm.Graph()
    a, b = g.input("a", (3,)), g.input("b", (3,))
    pair = lm.stack([b, a], -1)
    i = g.input("i", (3, 1), lm.int32)
    g.output(pair._new(Op.GATHER, lm.f32, (3, 1), (pair, i), 1).reshape((3,)))
    cg = g.compile()
    assert "Select" not in cg.report().ops_after and cg.report().ops_after.get("Concat") == 1
    with pytest.raises(lm.IndexOutOfRange):
        cg(a=np.zeros(3, np.float32), b=np.ones(3, np.float32), i=np.array([[0], [1], [2]], np.int32))


def test_select_under_a_merged_view():
    """The where's reshape merges with a following transpose or expand into one view of the
    Gather; that view reads the Select with the same tracker."""
    g = lm.Graph()
    c, a = g.input("c", (3, 4), lm.bool_), g.input("a", (3, 4))
    picked = lm.where(c, a, -np.inf)
    g.output(picked.transpose(0, 1).sin())
    g.output(picked.reshape(3, 4, 1).expand(3, 4, 2).cos())
    cg = g.compile(device="numpy")
    assert "Gather" not in cg.report().ops_after, cg.report().ops_after
    rng = np.random.default_rng(0)
    feeds = {"c": rng.random((3, 4)) < 0.5, "a": _special(rng, (3, 4))}
    for got, want in zip(cg(feeds), g.run(feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
