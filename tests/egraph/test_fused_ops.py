"""Every fused op's NumPy implementation agrees with its reference definition in primitives
(`luminal/egraph/reference.py`) on random inputs, special values included."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.egraph import reference
from luminal.egraph.regions import fuse_regions
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import UNARY, Expr, Node, Op
from luminal.runtime import NumpyRuntime

SEEDS = range(8)


def run(node: Node, feeds: dict) -> np.ndarray:
    return NumpyRuntime([node])(feeds)[0]


def check(fused: Node, feeds: dict, rtol=1e-5, atol=1e-6):
    (ref,) = reference.decompose([fused])
    got, want = run(fused, feeds), run(ref, feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def values(rng, shape, scale=3.0, special=True):
    v = (rng.standard_normal(shape) * scale).astype(np.float32)
    if special and v.size >= 3:
        v.flat[:3] = [0.0, 60.0, -60.0]
    return v


@pytest.mark.parametrize("op", [Op.EXP, Op.SIGMOID])
def test_unary(op):
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        shape = tuple(int(d) for d in rng.integers(1, 5, rng.integers(0, 4)))
        x = Node(Op.INPUT, DType.F32, shape, (), "x")
        check(Node(op, DType.F32, shape, (x,)), {"x": values(rng, shape, special=op is Op.SIGMOID)}, rtol=2e-6)


@pytest.mark.parametrize("op", [Op.SOFTMAX, Op.KAHAN_SUM])
def test_axis_ops(op):
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        shape = tuple(int(d) for d in rng.integers(1, 6, rng.integers(1, 4)))
        axis = int(rng.integers(len(shape)))
        out_shape = shape if op is Op.SOFTMAX else shape[:axis] + shape[axis + 1 :]
        x = Node(Op.INPUT, DType.F32, shape, (), "x")
        vals = values(rng, shape, special=False)
        if op is Op.SOFTMAX and vals.size > 1:
            vals.flat[0] = -np.inf  # a masked entry
        check(Node(op, DType.F32, out_shape, (x,), axis), {"x": vals}, atol=2e-5 if op is Op.KAHAN_SUM else 1e-6)


def _specials(rng, shape):
    v = values(rng, shape, special=False)
    return np.where(rng.random(shape) < 0.3, rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0], np.float32), shape), v)


def test_select_moves_values_as_where():
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        shape = tuple(int(d) for d in rng.integers(1, 5, rng.integers(0, 4)))
        c, a, b = (Node(Op.INPUT, dt, shape, (), k) for k, dt in (("c", DType.BOOL), ("a", DType.F32), ("b", DType.F32)))
        feeds = {"c": rng.random(shape) < 0.5, "a": _specials(rng, shape), "b": _specials(rng, shape)}
        fused = Node(Op.SELECT, DType.F32, shape, (c, a, b))
        (ref,) = reference.decompose([fused])
        got, want = run(fused, feeds), run(ref, feeds)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dtype", [DType.F32, DType.I32, DType.BOOL])
def test_concat(dtype):
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        shape = tuple(int(d) for d in rng.integers(1, 5, rng.integers(1, 4)))
        axis = int(rng.integers(len(shape)))
        other = shape[:axis] + (int(rng.integers(1, 4)),) + shape[axis + 1 :]
        a, b = Node(Op.INPUT, dtype, shape, (), "a"), Node(Op.INPUT, dtype, other, (), "b")
        out = shape[:axis] + (shape[axis] + other[axis],) + shape[axis + 1 :]
        feeds = {k: (_specials(rng, s) if dtype is DType.F32 else rng.integers(0, 2 if dtype is DType.BOOL else 9, s)).astype(
            dtype.numpy) for k, s in (("a", shape), ("b", other))}
        fused = Node(Op.CONCAT, dtype, out, (a, b), axis)
        (ref,) = reference.decompose([fused])
        got, want = run(fused, feeds), run(ref, feeds)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    empty = Node(Op.INPUT, dtype, (2, 0), (), "b")  # an empty piece adds nothing
    a = Node(Op.INPUT, dtype, (2, 3), (), "a")
    ones = np.ones((2, 3), dtype.numpy)
    np.testing.assert_array_equal(run(Node(Op.CONCAT, dtype, (2, 3), (a, empty), 1), {"a": ones, "b": ones[:, :0]}), ones)


def test_kahan_sum_is_more_accurate_than_f32():
    x = np.full(1 << 16, 0.1, np.float32)
    node = Node(Op.KAHAN_SUM, DType.F32, (), (Node(Op.INPUT, DType.F32, x.shape, (), "x"),), 0)
    exact = float(np.sum(x.astype(np.float64)))
    naive = float(np.cumsum(x)[-1])  # sequential f32 accumulation, as a plain loop would do
    assert abs(float(run(node, {"x": x})) - exact) <= abs(naive - exact)


def test_matmul():
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        batch = tuple(int(d) for d in rng.integers(1, 4, rng.integers(0, 3)))
        m, k, n = (int(v) for v in rng.integers(1, 7, 3))
        a = Node(Op.INPUT, DType.F32, batch + (m, k), (), "a")
        b = Node(Op.INPUT, DType.F32, batch + (k, n), (), "b")
        feeds = {"a": values(rng, a.shape, special=False), "b": values(rng, b.shape, special=False)}
        check(Node(Op.MAT_MUL, DType.F32, batch + (m, n), (a, b)), feeds, rtol=1e-5, atol=1e-5)


def test_fused_elementwise_regions():
    """Regions formed from random elementwise chains evaluate like the chains themselves."""
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        g = lm.Graph()
        x, y = g.input("x", (3, 4)), g.input("y", (3, 4))
        steps = [lambda t, y: t * y, lambda t, y: t + 1.5, lambda t, y: t.sigmoid(),
                 lambda t, y: (t * t + 1).sqrt(), lambda t, y: t.reciprocal().cast(lm.f64).cast(lm.f32),
                 lambda t, y: t.exp() * 0.5, lambda t, y: lm.where(t < y, t, y)]
        t = x
        for step in rng.integers(0, len(steps), 6):
            t = steps[int(step)](t, y)
        (fused,), regions = fuse_regions([t.node])
        assert regions >= 1
        feeds = {"x": values(rng, (3, 4), 1.0, False), "y": values(rng, (3, 4), 1.0, False)}
        np.testing.assert_allclose(run(fused, feeds), run(t.node, feeds), rtol=1e-5, atol=1e-6)
        check(fused, feeds) if fused.op is Op.FUSED_ELEMENTWISE else None


def test_fused_elementwise_bool_and_int_ops():
    g = lm.Graph()
    x = g.input("x", (5,), lm.int32)
    t = ((x % 3) + 1) * 2
    m = (t < 5).logical_and(x.lt(4).logical_not())
    (fused,), _ = fuse_regions([m.node])
    assert fused.op is Op.FUSED_ELEMENTWISE
    feeds = {"x": np.arange(-2, 3, dtype=np.int32)}
    np.testing.assert_array_equal(run(fused, feeds), run(m.node, feeds))


def every_pointwise_op(x: Expr, i: Expr) -> Expr:
    """One expression applying every op a FusedElementwise may hold, over f32 x (> 0) and i32 i."""
    f32, i32 = DType.F32, DType.I32
    c = lambda v, dt=f32: Expr(Op.CONSTANT, dt, (), v)  # noqa: E731
    terms = [Expr(op, f32, (x,)) for op in sorted(UNARY | {Op.EXP, Op.SIGMOID}, key=lambda o: o.value)]
    terms += [Expr(Op.MUL, f32, (x, c(0.5))), Expr(Op.MOD, f32, (x, c(0.3))),
              Expr(Op.CAST, f32, (Expr(Op.LESS_THAN, DType.BOOL, (x, c(0.5))),)),
              Expr(Op.CAST, f32, (Expr(Op.MOD, i32, (i, c(3, i32))),))]
    total = terms[0]
    for t in terms[1:]:
        total = Expr(Op.ADD, f32, (total, t))
    return total


@pytest.mark.parametrize("shape", [(), (1,), (3, 1)])
def test_every_fused_op_takes_0d_and_size_1_shapes(shape):
    """0-d values through Exp, Sigmoid and a region of every pointwise op; Softmax and KahanSum
    whose rows (or results) are 0-d; MatMuls of size-1 dims."""
    rng = np.random.default_rng(0)
    x = Node(Op.INPUT, DType.F32, shape, (), "x")
    i = Node(Op.INPUT, DType.I32, shape, (), "i")
    feeds = {"x": (rng.random(shape) + 0.1).astype(np.float32), "i": rng.integers(-5, 5, shape).astype(np.int32)}
    for op in (Op.EXP, Op.SIGMOID):
        check(Node(op, DType.F32, shape, (x,)), {"x": feeds["x"]})
    expr = every_pointwise_op(Expr(Op.INPUT, DType.F32, (), 0), Expr(Op.INPUT, DType.I32, (), 1))
    check(Node(Op.FUSED_ELEMENTWISE, DType.F32, shape, (x, i), expr), feeds)
    if shape:
        check(Node(Op.SOFTMAX, DType.F32, shape, (x,), 0), {"x": feeds["x"]})
        check(Node(Op.KAHAN_SUM, DType.F32, shape[1:], (x,), 0), {"x": feeds["x"]})
    a = Node(Op.INPUT, DType.F32, shape + (1, 2), (), "a")
    b = Node(Op.INPUT, DType.F32, shape + (2, 1), (), "b")
    check(Node(Op.MAT_MUL, DType.F32, shape + (1, 1), (a, b)), {"a": values(rng, a.shape), "b": values(rng, b.shape)})


def test_0d_graph_compiles_and_runs_fused():
    """The issue's case: a 0-d input to a fused sigmoid (and a region around it)."""
    g = lm.Graph()
    x = g.input("x", ())
    g.output(x.sigmoid())
    g.output(x.mul(x.sigmoid()).add(1.0).sqrt())
    v = np.array(0.7, np.float32)
    compiled = g.compile()
    assert {"Sigmoid", "FusedElementwise"} <= compiled.report().ops_after.keys()
    for got, want in zip(compiled({"x": v}), g.run({"x": v})):
        assert got.shape == () and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_select_and_concat_survive_save_and_load(tmp_path):
    from luminal.loading import load

    g = lm.Graph()
    c, a, x = g.input("c", (3, 4), lm.bool_), g.input("a", (3, 4)), g.input("x", (3, 2))
    g.output(lm.where(c, a, -np.inf))  # a Select node
    g.output(lm.where(c, a, 0.5).sin())  # a Select inside a FusedElementwise expression
    g.output(lm.concat([a, x], 1))
    cg = g.compile(device="numpy")
    assert {"Select", "Concat", "FusedElementwise"} <= cg.report().ops_after.keys()
    cg.save(tmp_path / "m.lum")
    rng = np.random.default_rng(0)
    feeds = {"c": rng.random((3, 4)) < 0.5, "a": rng.standard_normal((3, 4)).astype(np.float32),
             "x": rng.standard_normal((3, 2)).astype(np.float32)}
    for got, want in zip(load(tmp_path / "m.lum", device="numpy")(feeds), cg(feeds)):
        np.testing.assert_array_equal(got, want)
