"""NaN, ±inf and -0.0 through the generated kernels of the optimized graph (fused Softmax,
KahanSum, MaxReduce, FusedElementwise regions, ...) on the CPU emulator, against torch.

The `edge_*` cases of tests/op_cases.py (rows with a NaN, a +inf, all -inf, ±inf together,
signed zeros) go into one graph: one egglog run and one g++ build. The unoptimized kernels
see the same cases in tests/kernels/test_codegen.py."""

import numpy as np
import pytest
import torch
from op_cases import CASES, case_graph

import luminal as lm
from luminal.errors import DivisionByZero
from luminal.hlir.ops import Op, toposort

EDGE = [c for c in CASES if c[0].startswith("edge_")]


@pytest.fixture(scope="module")
def compiled():
    g, feeds, inputs = case_graph(EDGE, 3, "e")
    wants = [ref(*[torch.from_numpy(a) for a in arrays]).numpy() for (_, _, _, ref), arrays in zip(EDGE, inputs)]
    cg = g.compile(device="cuda-emulator")
    return cg, feeds, wants


def test_the_fused_kernels_are_there(compiled):
    ops = {n.op for n in toposort(compiled[0].outputs)}
    assert {Op.SOFTMAX, Op.KAHAN_SUM, Op.FUSED_ELEMENTWISE} <= ops


def test_edge_values_match_torch(compiled):
    cg, feeds, wants = compiled
    got = cg(feeds)
    for (name, *_), out, want in zip(EDGE, got, wants):
        assert out.dtype == want.dtype and out.shape == want.shape, name
        if want.dtype.kind in "biu":
            np.testing.assert_array_equal(out, want, err_msg=name)
        else:
            np.testing.assert_array_equal(np.isnan(out), np.isnan(want), err_msg=f"{name}: NaN positions")
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("optimize", [False, True])
def test_integer_mod_by_zero_raises_on_the_emulator(optimize):
    g = lm.Graph()
    x, y = g.input("x", (3,), lm.int64), g.input("y", (3,), lm.int64)
    g.output(x % y)
    g.output(x.fmod(y).mul(2).add(1))  # a fused region holding the Mod
    cg = g.compile(device="cuda-emulator", optimize=optimize)
    a = np.array([5, -7, np.iinfo(np.int64).min], np.int64)
    with pytest.raises(DivisionByZero, match="by zero"):
        cg(a, np.array([1, 0, 1], np.int64))
    got = cg(a, np.array([2, 3, -1], np.int64))  # lowest % -1 is 0 (no overflow trap), and the flag was cleared
    np.testing.assert_array_equal(got[0], [1, 2, 0])
    np.testing.assert_array_equal(got[1], [3, -1, 1])


def test_an_empty_symbolic_axis_on_the_emulator():
    g = lm.Graph()
    x = g.input("x", (2, "n"))
    for out in (x.softmax(-1), x.log_softmax(-1), x.sum(-1), x.mean(-1), x.max(-1, keepdim=True), x.argmax(-1)):
        g.output(out)
    cg = g.compile(device="cuda-emulator")
    full = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = [w.numpy() for w in (torch.from_numpy(full).softmax(-1), torch.from_numpy(full).log_softmax(-1),
                                torch.from_numpy(full).sum(-1), torch.from_numpy(full).mean(-1))]
    got = cg(full)
    for a, w in zip(got, want):
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[5], [2, 2])
    with pytest.raises(lm.IndexOutOfRange):  # torch: argmax over an empty dim raises
        cg(np.zeros((2, 0), np.float32))
    h = lm.Graph()
    y = h.input("y", (2, "n"))
    for out in (y.softmax(-1), y.log_softmax(-1), y.sum(-1), y.mean(-1)):
        h.output(out)
    empty = torch.zeros(2, 0)
    want = [empty.softmax(-1), empty.log_softmax(-1), empty.sum(-1), empty.mean(-1)]
    for a, w in zip(h.compile(device="cuda-emulator")(np.zeros((2, 0), np.float32)), want):
        assert a.shape == tuple(w.shape)
        np.testing.assert_array_equal(a, w.numpy())  # sums 0, means NaN
