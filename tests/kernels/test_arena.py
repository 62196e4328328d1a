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
    rt = KernelRuntime(g.output_nodes, lm.devices.get("cuda-emulator"))
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


def _peak_live_bytes(order, final):
    """The most bytes of computed, non-output buffers alive at once when launched in `order`."""
    from luminal.hlir.ops import Op

    steps = [n for n in order if n.op not in (Op.INPUT, Op.VIEW, Op.CONSTANT)]
    position = {id(n): i for i, n in enumerate(steps)}
    outputs = {id(n) for n in final}

    def computed(n):  # a view reads the buffer of what it views
        while n.op is Op.VIEW:
            n = n.src[0]
        return n

    last = {}
    for i, n in enumerate(steps):
        for s in n.src:
            last[id(computed(s))] = i
    live = np.zeros(len(steps) + 1)
    for n in steps:
        if id(n) not in outputs:
            live[position[id(n)]:last.get(id(n), position[id(n)]) + 1] += int(np.prod(n.shape)) * n.dtype.itemsize
    return live.max()


def _backward_like_graph():
    """A chain of layers whose every layer also makes an output from its activation gradient (as
    a backward pass makes weight gradients), the chain's end listed first among the outputs."""
    g = lm.Graph()
    x = g.input("x", (64, 256))
    w = g.input("w", (256, 256))
    outs, h = [], x
    for _ in range(6):
        grad = (h * 1.5).sin()  # a large activation gradient
        outs.append(grad.transpose(0, 1).matmul(x))  # its "weight gradient": an output
        h = grad.matmul(w)
    return g, [h.sum(-1), *outs]


def test_launch_order_is_topological_and_frees_early():
    from luminal.hlir.ops import toposort
    from luminal.kernels.plan import Schedule, launch_order

    g, outs = _backward_like_graph()
    for t in outs:
        g.output(t)
    optimized = g.compile(device="numpy").outputs  # MatMuls, fused regions: what a plan launches
    final = Schedule.build(optimized).outputs
    order = launch_order(final)
    assert {id(n) for n in order} == {id(n) for n in toposort(final)}
    seen = set()
    for n in order:
        assert all(id(s) in seen for s in n.src), "a node before its operand"
        seen.add(id(n))
    # the plain walk holds every layer's gradient until the walk reaches its output; this order
    # makes each output as soon as it can
    ours, plain = _peak_live_bytes(order, final), _peak_live_bytes(toposort(final), final)
    assert ours <= plain / 3, (ours, plain)


def test_launch_order_makes_an_outputs_private_operands_with_it():
    """An output's operands that only it reads are made when the output can be (its other
    operands there), not as soon as theirs are: a backward pass's weight gradient reads a copy of
    a saved activation (an input) and the activation gradient that arrives layer by layer, and a
    norm's weight gradient reads the first gradient times a saved value. Made when their inputs
    were there, every layer's copy lived from the first launch to its layer's."""
    from luminal.kernels.plan import Schedule, launch_order

    g = lm.Graph()
    w = g.input("w", (256, 256))
    saved = [g.input(f"a{k}", (64, 256)) for k in range(6)]
    xhat = g.input("xhat", (64, 256))
    grad = g.input("dy", (64, 256))
    first = (grad * 2.0).sin()
    outs, h = [], first
    for a in saved:
        outs.append(a.transpose(0, 1).exp().matmul(h))  # the copy (an exp of a saved input) and the gradient
        h = (h.matmul(w) * 1.5).cos()
    outs.append((first * xhat).sum(0))  # listed last, computed from the first gradient
    for t in [h, *outs]:
        g.output(t)
    optimized = g.compile(device="numpy").outputs
    final = Schedule.build(optimized).outputs
    order = launch_order(final)
    layer = 64 * 256 * 4
    assert _peak_live_bytes(order, final) <= 3 * layer, _peak_live_bytes(order, final) / layer
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) * 0.1 for name, shape in
             [("w", (256, 256)), ("xhat", (64, 256)), ("dy", (64, 256)), *((f"a{k}", (64, 256)) for k in range(6))]}
    for got, want in zip(g.compile(device="cpu")(feeds), g.run(feeds)):  # in this order, the same results
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_launch_order_makes_a_shared_recomputation_when_its_first_reader_can_be():
    """A value recomputed from saved inputs and read by several outputs (a backward's layer norm
    output, read by the query, key and value weights' gradients) belongs to no one output: made
    where the walk met it, at the walk's end, it held every layer's activation gradient alive until
    then."""
    from luminal.kernels.plan import Schedule, launch_order

    g = lm.Graph()
    w = g.input("w", (256, 256))
    saved = [(g.input(f"x{k}", (64, 256)), g.input(f"s{k}", (64, 1))) for k in range(6)]
    h = (g.input("dy", (64, 256)) * 2.0).sin()
    outs = []
    for x, s in saved:
        xhat = x * s  # the recomputation: from inputs alone, read by three outputs
        outs += [xhat.transpose(0, 1).matmul((h * c).cos()) for c in (1.0, 2.0, 3.0)]
        h = (h.matmul(w) * 1.5).cos()
    for t in [h, *outs]:
        g.output(t)
    final = Schedule.build(g.compile(device="numpy").outputs).outputs
    order = launch_order(final)
    layer = 64 * 256 * 4
    assert _peak_live_bytes(order, final) <= 4 * layer, _peak_live_bytes(order, final) / layer
    rng = np.random.default_rng(0)
    feeds = {"w": rng.standard_normal((256, 256)).astype(np.float32) * 0.1,
             "dy": rng.standard_normal((64, 256)).astype(np.float32)}
    for k in range(6):
        feeds[f"x{k}"] = rng.standard_normal((64, 256)).astype(np.float32)
        feeds[f"s{k}"] = rng.standard_normal((64, 1)).astype(np.float32)
    for got, want in zip(g.compile(device="cpu")(feeds), g.run(feeds)):  # in this order, the same results
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_launch_order_keeps_results():
    g, outs = _backward_like_graph()
    for t in outs:
        g.output(t)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((64, 256)).astype(np.float32) * 0.1,
             "w": rng.standard_normal((256, 256)).astype(np.float32) * 0.05}
    want = g.run(feeds)
    for device in ("cpu", "cuda-emulator"):
        got = g.compile(device=device)(feeds)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)


def test_graphs_share_one_arena_per_thread():
    """The cpu runtime's arena is the thread's, for every graph: the largest graph's size, once."""
    import threading

    from luminal.kernels.cpu import runtime as cpu_runtime

    def graph(width):
        g = lm.Graph()
        x = g.input("x", (32, width))
        g.output(((x * 2.0).sin() * (x + 1.0).cos()).sum(-1))
        return g

    small, large = graph(64).compile(device="cpu"), graph(4096).compile(device="cpu")
    a, b = (np.random.default_rng(0).standard_normal((32, w)).astype(np.float32) for w in (64, 4096))
    results = {}

    def run(tag):
        out = [small({"x": a})[0], large({"x": b})[0], small({"x": a})[0]]
        results[tag] = (out, cpu_runtime._ARENA.__dict__.get("arena"))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want_small, want_large = graph(64).run({"x": a})[0], graph(4096).run({"x": b})[0]
    arenas = []
    for out, arena in results.values():
        np.testing.assert_allclose(out[0], want_small, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out[1], want_large, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out[2], want_small, rtol=1e-5, atol=1e-5)
        arenas.append(arena)
    assert arenas[0] is not None and arenas[1] is not None and arenas[0] is not arenas[1]  # each thread its own
    assert arenas[0].nbytes == max(rt.arena_bytes for rt in (small.runtime, large.runtime))  # the largest, once
