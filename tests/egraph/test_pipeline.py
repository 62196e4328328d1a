"""The pipeline around the rules: partitioning, caching, limits, fallbacks, determinism."""

from __future__ import annotations

import llama_graph as L
import numpy as np
import pytest

import luminal as lm
from luminal.egraph import pipeline
from luminal.egraph.partition import partition


def small_graph():
    g = lm.Graph("small")
    x = g.input("x", ("n", 8))
    w = g.constant(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), name="w")
    g.output((x @ w).softmax(-1).sum(-1), "s")
    g.output(x.sigmoid(), "sig")
    return g


def feeds():
    return {"x": np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)}


def test_report_phases_rules_and_counts():
    cg = small_graph().compile()
    rep = cg.report()
    for phase in ("partition", "encode", "saturate", "extract", "splice", "regions"):
        assert phase in rep.phases
    assert rep.egraph_size > 0 and rep.rules_fired
    assert rep.ops_after.get("MatMul") == 1 and rep.ops_after.get("Softmax") == 1
    assert "Sigmoid" in rep.ops_after or any("Sigmoid" in n for n in rep.notes)


def test_op_counts_count_every_node_and_every_use_inside_regions():
    """The report's counts: every node of the graph, and inside the FusedElementwise regions
    every op (as the unfused graph would hold them: a level the region reads twice, once), most
    common first; against a plain per-node and per-instance count, on a graph of repeated layers."""
    import collections

    from luminal.compiler import op_counts
    from luminal.egraph.regions import region_op_counts
    from luminal.hlir.ops import POINTWISE, Op, toposort

    outs = L.build(L.make_weights(3)).compile().outputs
    nodes = toposort(outs)
    uses: collections.Counter = collections.Counter()

    for n in nodes:  # each distinct level of a region once (a level read twice is one op)
        if n.op is Op.FUSED_ELEMENTWISE:
            uses.update(e.op.title for e in n.arg.toposort() if e.op in POINTWISE)
    plain = dict(collections.Counter(n.op.title for n in nodes).most_common())
    assert list(op_counts(outs).items()) == list(plain.items())
    assert uses and list(region_op_counts(outs).items()) == list(dict(uses.most_common()).items())


@pytest.mark.parametrize("how", ["argument", "env"])
def test_rewriting_can_be_turned_off(how, monkeypatch):
    g = small_graph()
    if how == "env":
        monkeypatch.setenv("LUMINAL_OPTIMIZE", "0")
        cg = g.compile()
    else:
        cg = g.compile(optimize=False)
    assert cg.report().ops_after == cg.report().ops_before
    assert not cg.report().rules_fired


def test_deterministic_and_cached():
    g = small_graph()
    pipeline._CACHE.clear()
    first = g.compile().outputs
    pipeline._CACHE.clear()
    second = g.compile().outputs
    assert all(a is b for a, b in zip(first, second))  # interned nodes: same graph, same objects
    third = g.compile()
    assert any("from the template cache" in n and "(0 from" not in n for n in third.report().notes)


def test_egglog_failure_keeps_the_part(monkeypatch):
    class FakePanic(BaseException):  # pyo3's PanicException derives from BaseException
        pass

    def boom(part, times):
        raise FakePanic("rust panicked")

    monkeypatch.setenv("LUMINAL_EGRAPH_STRICT", "0")
    monkeypatch.setattr(pipeline, "optimize_part", boom)
    pipeline._CACHE.clear()
    g = small_graph()
    cg = g.compile()
    assert any("kept unoptimized" in n for n in cg.report().notes)
    for a, b in zip(cg(feeds()), g.run(feeds())):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    pipeline._CACHE.clear()


def test_node_limit_stops_rewriting(monkeypatch):
    monkeypatch.setattr(pipeline, "MAX_ENODES", 1)
    pipeline._CACHE.clear()
    g = small_graph()
    cg = g.compile()
    assert any("MAX_ENODES" in n for n in cg.report().notes)
    for a, b in zip(cg(feeds()), g.run(feeds())):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    pipeline._CACHE.clear()


def test_partition_finds_repeated_layers():
    parts = partition(L.build(L.make_weights(4)).output_nodes)
    sigs = [p.signature for p in parts]
    assert len(parts) == 2 * 4 + 2 and len(set(sigs)) == 4
    assert len(partition(small_graph().output_nodes)) == 1  # nothing repeats: one part


def test_graphs_without_inputs_or_with_passthrough_outputs():
    g = lm.Graph()
    x = g.input("x", (3,))
    g.output(x, "same")
    g.output(g.arange(4, dtype=lm.f32).exp(), "const")
    g.output((x * 2).sigmoid(), "y")
    cg = g.compile()
    vals = np.array([1.0, -2.0, 3.0], np.float32)
    for a, b in zip(cg(x=vals), g.run(x=vals)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
