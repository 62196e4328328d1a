"""The arena planner: buffers alive at the same time never overlap, dead ones share bytes."""

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import luminal as lm
from luminal.kernels.arena import ALIGN, plan_arena
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


def _best_fit_reference(sizes, intervals):
    """The layout rule spelled plainly (every placed buffer scanned in Python): what plan_arena's
    vectorized liveness test must reproduce offset for offset."""
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], intervals[i][0], i))
    placed, offsets, total = [], [0] * len(sizes), 0
    for i in order:
        size = -(-max(sizes[i], 1) // ALIGN) * ALIGN
        lo, hi = intervals[i]
        busy = sorted((o, e) for o, e, j in placed if intervals[j][0] <= hi and lo <= intervals[j][1])
        best, cursor = None, 0
        for o, e in busy:
            if o - cursor >= size and (best is None or o - cursor < best[1]):
                best = (cursor, o - cursor)
            cursor = max(cursor, e)
        offsets[i] = best[0] if best is not None else cursor
        placed.append((offsets[i], offsets[i] + size, i))
        total = max(total, offsets[i] + size)
    return tuple(offsets), total


def test_the_layout_is_the_plain_best_fit():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(0, 50)
        sizes = [rng.choice([0, 1, 7, 256, 300, 4096, 10**6]) for _ in range(n)]
        starts = [rng.randint(0, 40) for _ in range(n)]
        intervals = [(a, a + rng.randint(0, 15)) for a in starts]
        layout = plan_arena(sizes, intervals)
        assert (layout.offsets, layout.total) == _best_fit_reference(sizes, intervals)
        layout.check(sizes, intervals)
