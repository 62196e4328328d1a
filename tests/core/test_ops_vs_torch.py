"""Every high-level builder op against PyTorch eager (f32 atol/rtol 1e-5; exact for ints/bools).

The cases live in tests/op_cases.py (shared with the CUDA tests)."""

import zlib

import numpy as np
import pytest
import torch
from op_cases import CASES, make

import luminal as lm

ATOL = RTOL = 1e-5


@pytest.mark.parametrize("name,specs,lum,ref", CASES, ids=[c[0] for c in CASES])
def test_op_matches_torch(name, specs, lum, ref):
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # the same inputs in every process
    arrays = [make(s, rng) for s in specs]
    g = lm.Graph()
    tensors = [g.input(f"x{i}", a.shape, lm.DType.of(a.dtype)) for i, a in enumerate(arrays)]
    g.output(lum(*tensors))
    got = g.run({f"x{i}": a for i, a in enumerate(arrays)})[0]
    want = ref(*[torch.from_numpy(a) for a in arrays]).numpy()
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind in "biu":
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    else:
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)


def test_f16_sum_accumulates_in_f32():
    a = np.full(4096, 0.1, np.float16)
    g = lm.Graph()
    x = g.input("x", a.shape, lm.f16)
    g.output(x.sum())
    got = g.run(x=a)[0]
    assert got.dtype == np.float16
    assert got == torch.from_numpy(a).sum().numpy()  # torch accumulates in f32 too


def test_where_keeps_masked_infinities_exact():
    scores = np.array([[0.5, -1.0, 2.0]], np.float32)
    mask = np.array([[True, False, True]])
    g = lm.Graph()
    s, m = g.input("s", (1, 3)), g.input("m", (1, 3), lm.bool_)
    g.output(lm.where(m, s, float("-inf")).softmax(-1))
    got = g.run(s=scores, m=mask)[0]
    want = torch.where(torch.from_numpy(mask), torch.from_numpy(scores), float("-inf")).softmax(-1).numpy()
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)
    assert got[0, 1] == 0.0


def test_nan_semantics_match_torch():
    a = np.array([np.nan, 1.0, -2.0, np.inf, -np.inf, 0.0], np.float32)
    b = np.array([np.nan, np.nan, -2.0, np.inf, 3.0, -0.0], np.float32)
    g = lm.Graph()
    x, y = g.input("x", a.shape), g.input("y", b.shape)
    exprs = [x.eq(y), x.ne(y), x.le(y), x.ge(y), x.maximum(y), x.minimum(y), x.relu(), x.floor(), x.sign()]
    for e in exprs:
        g.output(e)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    wants = [ta.eq(tb), ta.ne(tb), ta.le(tb), ta.ge(tb), torch.maximum(ta, tb), torch.minimum(ta, tb),
             ta.relu(), ta.floor(), ta.sign()]
    for got, want in zip(g.run(x=a, y=b), wants):
        np.testing.assert_array_equal(got, want.numpy())


def test_arange_full_zeros_ones():
    g = lm.Graph()
    g.output(g.arange(2, 11, 3))
    g.output(g.arange(0.5, 2.0, 0.25, dtype=lm.f32))
    g.output(g.full((2, 3), 1.5))
    g.output(g.zeros((2,), lm.int32))
    g.output(g.ones((2,), lm.bool_))
    a, b, c, z, o = g.run()
    np.testing.assert_array_equal(a, torch.arange(2, 11, 3).numpy())
    np.testing.assert_allclose(b, torch.arange(0.5, 2.0, 0.25).numpy())
    np.testing.assert_array_equal(c, np.full((2, 3), 1.5, np.float32))
    assert z.dtype == np.int32 and o.dtype == np.bool_ and o.all()


def test_high_level_ops_decompose_into_primitives():
    from luminal.hlir.ops import BINARY, LEAF, MOVEMENT, REDUCE, UNARY, Op

    allowed = UNARY | BINARY | REDUCE | LEAF | MOVEMENT | {Op.CAST, Op.GATHER, Op.SCATTER}
    g = lm.Graph()
    x = g.input("x", (2, 8))
    w = g.input("w", (8, 8))
    g.output(x.matmul(w).gelu().layer_norm((8,)).softmax(-1).topk(3)[0])
    assert {n.op for n in g.nodes()} <= allowed
    ops = g.op_counts()
    assert "Exp2" in ops and "SumReduce" in ops and "MaxReduce" in ops
