"""The arena planner: buffers alive at the same time never overlap, dead ones share bytes."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import luminal as lm
from luminal.kernels.arena import plan_arena
from luminal.kernels.runtime import KernelRuntime


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 20), st.integers(0, 6)), min_size=1, max_size=30))
def test_live_buffers_never_overlap(buffers):
    sizes = [s for s, _, _ in buffers]
    intervals = [(start, start + length) for _, start, length in buffers]
    layout = plan_arena(sizes, intervals)
    layout.check(sizes, intervals)
    assert all(o % 256 == 0 for o in layout.offsets)


def test_chain_reuses_memory_and_matches():
    g = lm.Graph()
    x = g.input("x", ("n", 64))
    y = x
    for _ in range(8):  # a chain: each intermediate dies right after its consumer
        y = (y * 1.5).sin()
    g.output(y.sum(-1))
    rt = KernelRuntime(g.output_nodes, "cuda-emulator")
    a = np.random.default_rng(0).standard_normal((5, 64)).astype(np.float32)
    np.testing.assert_allclose(rt({"x": a})[0], g.run(x=a)[0], rtol=1e-5, atol=1e-5)
    layout, shapes = next(iter(rt.layouts.values()))
    total_separately = sum(int(np.prod(s)) * 4 for s in shapes)
    assert layout.total <= total_separately // 4  # the chain needs ~2 live buffers, not 16
    b = np.random.default_rng(1).standard_normal((9, 64)).astype(np.float32)  # another binding: a new layout
    np.testing.assert_allclose(rt({"x": b})[0], g.run(x=b)[0], rtol=1e-5, atol=1e-5)
    assert len(rt.layouts) == 2
