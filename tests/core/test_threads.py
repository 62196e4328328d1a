"""Concurrent calls on one compiled object: every call gets its own answer, equal to the serial one.

Each runtime is hammered by N threads x M calls with different inputs of one shape (one binding
of the symbolic dims: the same arena layout and, on the kernel runtimes, the same captured graph)
and of a second shape, started together behind a barrier."""

import shutil
import threading

import numpy as np
import pytest
from graph_helpers import hammer

import luminal as lm

THREADS, CALLS = 4, 10
DEVICES = ["numpy", "cpu", pytest.param("cuda-emulator", marks=pytest.mark.skipif(
    shutil.which("g++") is None, reason="the CUDA emulator needs g++"))]


def _graph():
    rng = np.random.default_rng(0)
    g = lm.Graph("threads")
    ids = g.input("ids", ("n",), lm.int64)
    x = g.input("x", ("n", 16))
    table = g.constant(rng.standard_normal((32, 16)).astype(np.float32), name="table")
    h = (table.index_select(0, ids) + x) @ g.constant(rng.standard_normal((16, 8)).astype(np.float32), name="w")
    g.output(h.gelu().softmax(-1), "probs")
    g.output(h.max(-1) + g.arange(3).cast(lm.f32).sum(), "peak")  # a value kept between calls
    return g


def _feeds(k: int) -> dict:
    rng = np.random.default_rng(100 + k)
    n = 5 if k % 3 else 7  # two bindings, most calls on the first
    return {"ids": rng.integers(0, 32, n).astype(np.int64), "x": rng.standard_normal((n, 16)).astype(np.float32)}



@pytest.fixture(scope="module")
def graph():
    return _graph()


@pytest.mark.parametrize("graphs", ["1", "0"])
@pytest.mark.parametrize("device", DEVICES)
def test_concurrent_calls_get_their_own_answers(graph, device, graphs, monkeypatch):
    if graphs == "0" and device != "cuda-emulator":
        pytest.skip("CUDA graphs concern the kernel runtimes only")
    monkeypatch.setenv("LUMINAL_CUDA_GRAPHS", graphs)
    compiled = graph.compile(device=device)
    jobs = [[_feeds(t * CALLS + c) for c in range(CALLS)] for t in range(THREADS)]
    want = [[compiled(f) for f in fs] for fs in jobs]  # serial: warms up and captures the graphs too
    got = hammer(compiled, jobs)
    for t in range(THREADS):
        for c in range(CALLS):
            for a, b in zip(got[t][c], want[t][c]):
                np.testing.assert_array_equal(a, b, err_msg=f"thread {t} call {c} on {device}")


@pytest.mark.parametrize("device", DEVICES)
def test_an_index_error_reaches_only_the_thread_that_caused_it(graph, device):
    compiled = graph.compile(device=device)
    good, bad = _feeds(1), dict(_feeds(1), ids=np.array([0, 1, 99, 2, 3], np.int64))
    for _ in range(2):
        compiled(good)  # captured on the kernel runtimes

    def call(feeds):
        try:
            return compiled(feeds)
        except lm.IndexOutOfRange:
            return "raised"

    got = hammer(call, [[bad] * CALLS] + [[good] * CALLS] * (THREADS - 1))
    assert got[0] == ["raised"] * CALLS
    want = compiled(good)
    for results in got[1:]:
        for r in results:
            assert r != "raised"
            for a, b in zip(r, want):
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_concurrent_first_calls_of_fresh_models(device):
    """Compiles and first calls racing each other (the NumPy runtime fills its kept values then)."""
    graphs = [_graph() for _ in range(THREADS)]
    compiled = [g.compile(device=device, optimize=False) for g in graphs]
    feeds = _feeds(4)
    want = graphs[0].run(feeds)
    got = hammer(lambda k: compiled[k](feeds), [[k, k] for k in range(THREADS)])
    for results in got:
        for r in results:
            for a, b in zip(r, want):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_compiling_on_another_thread_after_the_main_one():
    """The optimizer's e-graph is per thread (egglog's EGraph panics when another thread touches
    it): a model compiled on a worker thread after one on the main thread is optimized too (the
    suite's LUMINAL_EGRAPH_STRICT=1 turns a skipped rewrite into an error)."""
    _graph().compile(device="numpy", optimize=True)
    out: dict = {}

    def other():  # a graph of its own (an identical one would reuse the optimized template)
        g = lm.Graph("other")
        x = g.input("x", ("n", 16))
        g.output((x.exp() * 3.0).sum(-1).sqrt(), "y")
        return g

    def work():
        try:
            compiled = other().compile(device="numpy", optimize=True)
            out["notes"] = compiled.report().notes
            out["y"] = compiled({"x": _feeds(1)["x"]})[0]
        except BaseException as exc:  # noqa: BLE001 - egglog panics are BaseExceptions
            out["error"] = exc

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert "error" not in out, out.get("error")
    assert not any("rewriting failed" in n for n in out["notes"])
    np.testing.assert_allclose(out["y"], other().compile(device="numpy", optimize=False)({"x": _feeds(1)["x"]})[0],
                               rtol=1e-6)
