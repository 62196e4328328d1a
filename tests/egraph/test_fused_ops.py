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


def test_maximum_is_the_max_reduce_it_stands_for_signed_zeros_included():
    # np.maximum gives the second of two equal zeros; the MaxReduce over (a, b) and the C and CUDA
    # kernels' lum_max_nan the first (a cold cpu build's first call runs the optimized graph,
    # fused Maximum included, on this runtime; torch.maximum's own choice differs between its
    # scalar and vector loops)
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        shape = tuple(int(d) for d in rng.integers(1, 6, rng.integers(1, 4)))
        a, b = (Node(Op.INPUT, DType.F32, shape, (), k) for k in "ab")
        feeds = {k: _specials(rng, shape) for k in "ab"}
        zeros = rng.random(shape) < 0.3  # both zeros, of either sign
        feeds["a"][zeros] = np.where(rng.random(shape) < 0.5, -0.0, 0.0)[zeros]
        feeds["b"][zeros] = np.where(rng.random(shape) < 0.5, -0.0, 0.0)[zeros]
        fused = Node(Op.MAXIMUM, DType.F32, shape, (a, b))
        (ref,) = reference.decompose([fused])
        got, want = run(fused, feeds), run(ref, feeds)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))


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


def _erf_gelu(x):
    """GELU through erf's polynomial (Abramowitz-Stegun 7.1.26) as the decomposition writes it:
    `x / sqrt 2`, its magnitude and `1 / (1 + p|x|)` are each read more than once."""
    t = x * 0.7071067811865476
    a = t.maximum(t * -1.0) + 0.0
    r = (a * 0.3275911 + 1.0).reciprocal()
    poly = ((((r * 1.061405429 - 1.453152027) * r + 1.421413741) * r - 0.284496736) * r + 0.254829592) * r
    erf_abs = 1.0 - poly * (a * a * -1.0).exp()
    erf = lm.where(t < 0.0, erf_abs * -1.0, erf_abs)
    return x * 0.5 * (erf + 1.0)


def test_levels_read_twice_inside_one_region_join_it_once():
    """Every op of erf's GELU is one region reading x only; a level read twice is one shared
    Expr (evaluated once), and the region computes what the unfused graph does, on NumPy, C and
    the CUDA emulator."""
    g = lm.Graph()
    x = g.input("x", (4, 33))
    y = _erf_gelu(x)
    g.output(y)
    (fused,) = g.compile(device="numpy").outputs  # maximum and where as the egraph writes them
    tensors = [s for s in fused.src if not (s.op is Op.VIEW and s.src[0].shape == ())]  # not a scalar's broadcast
    assert fused.op is Op.FUSED_ELEMENTWISE and [s.op for s in tensors] == [Op.INPUT], fused
    seen: set[int] = set()

    def walk(e):  # the ops by object: a level read twice is the same object
        if e.src and id(e) not in seen:
            seen.add(id(e))
            for s in e.src:
                walk(s)

    walk(fused.arg)
    assert len(seen) == sum(1 for e in fused.arg.toposort() if e.src)  # no level repeated as a copy of itself
    rng = np.random.default_rng(0)
    v = values(rng, (4, 33))
    v.flat[3:8] = [np.inf, -np.inf, np.nan, -0.0, 1e-30]
    feeds = {"x": v}
    want = run(y.node, feeds)
    np.testing.assert_allclose(run(fused, feeds), want, rtol=1e-6, atol=1e-7)
    for device in ("cpu", "cuda-emulator"):
        np.testing.assert_allclose(g.compile(device=device)(feeds)[0], want, rtol=1e-6, atol=1e-7)


def test_a_region_with_shared_levels_saves_and_loads(tmp_path):
    """A saved region with shared levels (its file writes each use out) loads and computes the
    same on every device."""
    g = lm.Graph()
    x = g.input("x", (4, 33))
    g.output(_erf_gelu(x))
    compiled = g.compile(device="cpu")
    feeds = {"x": values(np.random.default_rng(1), (4, 33))}
    want = compiled(feeds)[0]
    compiled.save(tmp_path / "gelu.lum")
    for device in ("cpu", "numpy", "cuda-emulator"):
        np.testing.assert_allclose(lm.load(tmp_path / "gelu.lum", device=device)(feeds)[0], want, rtol=1e-6, atol=1e-7)


def test_a_region_with_shared_levels_stays_bounded():
    """x <- x * x + x twelve times: each level is read twice, so as a tree the region would hold
    2**12 ops; the region stops where its C (which repeats a shared level's text at each use)
    would pass `MAX_EXPANDED_OPS`, and what it holds is right."""
    from luminal.egraph.regions import MAX_EXPANDED_OPS

    g = lm.Graph()
    x = g.input("x", (8,))
    t = x
    for _ in range(12):
        t = t * t + t
    g.output(t)
    (fused,), regions = fuse_regions([t.node])
    assert regions >= 2

    def expanded(e):
        return 1 + sum(expanded(s) for s in e.src) if e.op not in (Op.INPUT, Op.CONSTANT) else 0

    def each_region(n, seen):
        if id(n) not in seen:
            seen.add(id(n))
            if n.op is Op.FUSED_ELEMENTWISE:
                yield n
            for s in n.src:
                yield from each_region(s, seen)

    sizes = [expanded(r.arg) for r in each_region(fused, set())]
    assert sizes and max(sizes) <= MAX_EXPANDED_OPS, sizes
    feeds = {"x": np.linspace(-1.0, 0.2, 8, dtype=np.float32) * 0.05}
    want = run(t.node, feeds)
    np.testing.assert_allclose(g.compile(device="cpu")(feeds)[0], want, rtol=1e-5, atol=1e-7)


def test_a_level_read_by_two_regions_stays_a_buffer():
    g = lm.Graph()
    x = g.input("x", (16,))
    e = x.exp() * 3.0
    a, b = (e + 1.0).sin(), (e * 2.0).cos()
    (fa, fb), _ = fuse_regions([a.node, b.node])
    shared = [s for s in fa.src if any(s is t for t in fb.src)]
    assert len(shared) == 1 and shared[0].op in (Op.FUSED_ELEMENTWISE, Op.MUL)


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
