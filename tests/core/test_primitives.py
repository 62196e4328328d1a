"""Each HLIR primitive against NumPy: odd shapes, broadcasting, views, size-1 and symbolic dims."""

import numpy as np
import pytest

import luminal as lm
from luminal.hlir.ops import Node, Op

RNG = np.random.default_rng(0)


def run1(g, out, **feeds):
    g.output(out)
    return g.run(feeds)[0]


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


UNARY = [
    ("exp2", np.exp2, lambda: rand(3, 5, 7)),
    ("log2", np.log2, lambda: np.abs(rand(3, 5, 7)) + 0.1),
    ("sin", np.sin, lambda: rand(3, 5, 7) * 4),
    ("sqrt", np.sqrt, lambda: np.abs(rand(3, 5, 7))),
    ("reciprocal", np.reciprocal, lambda: rand(3, 5, 7)),
]


@pytest.mark.parametrize("name,ref,make", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_unary(name, ref, make, dtype):
    a = make().astype(dtype)
    g = lm.Graph()
    x = g.input("x", a.shape, lm.DType.of(dtype))
    out = run1(g, getattr(x, name)(), x=a)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref(a), rtol=1e-3 if dtype == np.float16 else 1e-6)


def test_unary_bf16():
    import ml_dtypes

    a = rand(4, 9).astype(ml_dtypes.bfloat16)
    g = lm.Graph()
    x = g.input("x", a.shape, lm.bf16)
    out = run1(g, x.exp2(), x=a)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(out.astype(np.float32), np.exp2(a.astype(np.float32)), rtol=1e-2)


def test_unary_ieee_edges():
    a = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0], np.float32)
    g = lm.Graph()
    x = g.input("x", a.shape)
    g.output(x.reciprocal())
    g.output(x.sqrt())
    g.output(x.log2())
    g.output(x.exp2())
    with np.errstate(all="ignore"):
        for got, want in zip(g.run(x=a), [1 / a, np.sqrt(a), np.log2(a), np.exp2(a)]):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "sa,sb", [((7,), (7,)), ((3, 1, 5), (4, 1)), ((1,), (2, 3)), ((), (4, 3)), ((2, 1, 3, 1), (1, 5, 1, 6))]
)
def test_binary_broadcast(sa, sb):
    a, b = rand(*sa), rand(*sb)
    g = lm.Graph()
    x, y = g.input("x", sa), g.input("y", sb)
    for out in (x + y, x * y, x.lt(y)):
        g.output(out)
    add, mul, lt = g.run(x=a, y=b)
    np.testing.assert_array_equal(add, a + b)
    np.testing.assert_array_equal(mul, a * b)
    assert lt.dtype == np.bool_
    np.testing.assert_array_equal(lt, a < b)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_mod_is_c_fmod_on_negatives(dtype):
    a = np.array([7, -7, 7, -7, 5, -5, 0, 3], dtype)
    b = np.array([3, 3, -3, -3, 5, 2, 4, -7], dtype)
    g = lm.Graph()
    x, y = g.input("x", a.shape, lm.DType.of(dtype)), g.input("y", b.shape, lm.DType.of(dtype))
    out = run1(g, x.fmod(y), x=a, y=b)
    np.testing.assert_array_equal(out, np.fmod(a, b))
    assert out[1] == -1 and out[2] == 1  # sign of the dividend, not of the divisor


def test_bool_add_mul_are_or_and():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    g = lm.Graph()
    x, y = g.input("x", (4,), lm.bool_), g.input("y", (4,), lm.bool_)
    g.output(x + y)
    g.output(x * y)
    o, n = g.run(x=a, y=b)
    np.testing.assert_array_equal(o, a | b)
    np.testing.assert_array_equal(n, a & b)


@pytest.mark.parametrize("op,ref", [(Op.SUM_REDUCE, np.sum), (Op.MAX_REDUCE, np.max)])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_reduce_primitive(op, ref, axis):
    a = rand(3, 1, 5)
    g = lm.Graph()
    x = g.input("x", a.shape)
    shape = tuple(d for i, d in enumerate(a.shape) if i != axis)
    out = run1(g, x._new(op, x.dtype, shape, (x,), axis), x=a)
    np.testing.assert_allclose(out, ref(a, axis=axis), rtol=1e-6)


def test_max_reduce_propagates_nan_and_handles_empty():
    a = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 3.0]], np.float32)
    g = lm.Graph()
    x = g.input("x", (2, "n"))
    out = run1(g, x.max(1), x=a)
    assert np.isnan(out[0]) and out[1] == 3.0
    empty = g.run(x=np.zeros((2, 0), np.float32))[0]
    np.testing.assert_array_equal(empty, [-np.inf, -np.inf])


def test_reduce_over_views():
    a = rand(4, 6, 5)
    g = lm.Graph()
    x = g.input("x", a.shape)
    view = x.permute(2, 0, 1)[:, 1::2, ::-2]
    out = run1(g, view.sum(2), x=a)
    np.testing.assert_allclose(out, a.transpose(2, 0, 1)[:, 1::2, ::-2].sum(2), rtol=1e-5)


@pytest.mark.parametrize("dtype", [lm.int32, lm.int64])
def test_iota(dtype):
    g = lm.Graph()
    out = run1(g, g.iota(7, dtype))
    np.testing.assert_array_equal(out, np.arange(7))
    assert out.dtype == dtype.numpy


def test_gather_and_scatter_primitives():
    data = rand(3, 5)
    idx = np.array([[4, 0, 2], [1, 1, 3], [0, 4, 4]], np.int64)
    g = lm.Graph()
    x, i = g.input("x", data.shape), g.input("i", idx.shape, lm.int64)
    g.output(x.gather(1, i))
    g.output(x.scatter(1, i, x.slice(1, 0, 3)))
    g.output(x.scatter(1, i, x.slice(1, 0, 3), reduce="add"))
    gathered, scattered, added = g.run(x=data, i=idx)
    np.testing.assert_array_equal(gathered, np.take_along_axis(data, idx, 1))
    want = data.copy()
    np.put_along_axis(want, idx, data[:, :3], 1)
    np.testing.assert_array_equal(scattered, want)
    want = data.copy()
    for r in range(3):
        for c in range(3):
            want[r, idx[r, c]] += data[r, c]
    np.testing.assert_allclose(added, want, rtol=1e-6)


def test_gather_out_of_range_is_a_clear_error():
    g = lm.Graph()
    x, i = g.input("x", (3,)), g.input("i", (2,), lm.int64)
    g.output(x.gather(0, i))
    with pytest.raises(lm.IndexOutOfRange, match="index 5 is out of range for axis 0 of size 3"):
        g.run(x=rand(3), i=np.array([0, 5]))


@pytest.mark.parametrize(
    "src,dst,values",
    [
        (lm.f32, lm.int32, [1.7, -1.7, 2.5, -0.5, 0.0]),  # truncation toward zero
        (lm.f32, lm.bool_, [0.0, -0.0, 2.0, -1.0, 0.5]),
        (lm.int64, lm.f32, [3, -4, 0, 7, 2**20]),
        (lm.bool_, lm.f32, [True, False, True, True, False]),
        (lm.f32, lm.f16, [1.0, 65504.0, 1e-3, -2.5, 3.14159]),
        (lm.f32, lm.bf16, [1.0, 3.0e38, 1e-3, -2.5, 3.14159]),
    ],
)
def test_cast(src, dst, values):
    a = np.array(values, src.numpy)
    g = lm.Graph()
    x = g.input("x", a.shape, src)
    out = run1(g, x.cast(dst), x=a)
    assert out.dtype == dst.numpy
    np.testing.assert_array_equal(out, a.astype(dst.numpy))


def test_nodes_are_interned_and_immutable():
    g = lm.Graph()
    x = g.input("x", (3,))
    assert (x + 1).node is (x + 1).node
    with pytest.raises(AttributeError):
        x.node.op = Op.ADD
    a = Node(Op.CONSTANT, lm.f32, (), (), 0.0)
    b = Node(Op.CONSTANT, lm.f32, (), (), -0.0)
    assert a is not b  # 0.0 == -0.0 in Python, but they are different constants
    assert Node(Op.CONSTANT, lm.f32, (), (), 1.0) is not Node(Op.CONSTANT, lm.f32, (), (), 1)


def test_a_dropped_node_leaves_the_intern_table():
    """The table holds nodes weakly: a node nothing uses is freed with its entry, and building
    it again makes a new, equal node (whose entry a late callback of the old one leaves alone)."""
    import gc

    from luminal.hlir import ops

    x = Node(Op.INPUT, lm.f32, (5,), (), "dropped_x")
    y = Node(Op.SIN, lm.f32, (5,), (x,))
    key = y._key
    assert key in ops._INTERNED and ops._INTERNED[key]() is y
    del y
    gc.collect()
    assert key not in ops._INTERNED
    again = Node(Op.SIN, lm.f32, (5,), (x,))
    assert again.src == (x,) and again.op is Op.SIN and ops._INTERNED[again._key]() is again
    assert Node(Op.SIN, lm.f32, (5,), [x]) is again  # a list of sources interns as the tuple
    del x
    gc.collect()  # `again` keeps x alive
    assert again.src[0].arg == "dropped_x"


def test_toposort_is_the_depth_first_post_order():
    """Every node once, after its operands, in the order of a recursive depth-first walk that
    takes operands in order (shared nodes and repeated operands included)."""
    import random

    from luminal.hlir.ops import _toposort

    rng = random.Random(0)
    x = Node(Op.INPUT, lm.f32, (4,), (), "topo_x")
    nodes = [x]
    for i in range(300):
        a, b = rng.choice(nodes), rng.choice(nodes[-5:])
        nodes.append(Node(rng.choice([Op.ADD, Op.MUL]), lm.f32, (4,), (a, a if i % 7 == 0 else b)))
    roots = [nodes[-1], nodes[150], nodes[-1], nodes[40]]
    want, seen = [], set()

    def visit(n):
        if id(n) in seen:
            return
        seen.add(id(n))
        for s in n.src:
            visit(s)
        want.append(n)

    for r in roots:
        visit(r)
    got = _toposort(roots)
    assert len(got) == len(want) and all(a is b for a, b in zip(got, want))


def test_op_table_groups_and_lookup():
    from luminal.hlir import ops

    assert {o.title for o in ops.UNARY} == {"Exp2", "Log2", "Sin", "Sqrt", "Recip"}
    assert {o.title for o in ops.BINARY} == {"Add", "Mul", "Mod", "LessThan", "Philox"}  # Philox: the random primitive
    assert lm.Op.from_name("LessThan") is Op.LESS_THAN
    assert lm.Op.from_name("sum_reduce") is Op.SUM_REDUCE
    with pytest.raises(lm.UnknownOpError, match="unknown op 'Tanh'"):
        lm.Op.from_name("Tanh")
