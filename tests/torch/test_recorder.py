"""The decomposer's recorder (luminal/frontends/torch/recorder.py) traces the graph make_fx
traces: every trace the decomposer makes, for every model of the test zoo and every tiny HF
family, is traced both ways and compared node for node (target, arguments, and each result's
shape, strides and dtype), `alias` nodes aside (the one difference the recorder's docstring
explains). Where the recorder refuses, the decomposer falls back to make_fx."""

import operator

import pytest
import torch
from hf_models import ALL, example, make
from zoo import CASES, case_inputs

from luminal.frontends.torch import decompose
from luminal.frontends.torch.recorder import Unrecordable, record


def _spelled(graph: torch.fx.Graph) -> list:
    """The graph as a list of nodes, `alias` nodes replaced by their input, each node by its
    position among the rest."""
    position, same, out = {}, {}, []
    for n in graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.aten.alias.default:
            same[n] = same.get(n.args[0], n.args[0])
            continue
        args = torch.fx.node.map_arg((n.args, n.kwargs), lambda m: ("node", position[same.get(m, m)]))
        val = n.meta.get("val")
        meta = ((tuple(val.shape), val.stride(), val.dtype) if isinstance(val, torch.Tensor)
                else [(tuple(v.shape), v.stride(), v.dtype) if isinstance(v, torch.Tensor) else v for v in val]
                if isinstance(val, (tuple, list)) else None)
        position[n] = len(out)
        out.append((n.op, str(n.target) if n.op != "placeholder" else "", repr(args), meta))
    return out


@pytest.fixture
def compared(monkeypatch):
    """Every recorded trace checked against make_fx; the counts of traces compared and refused."""
    counts = {"compared": 0, "refused": 0, "ops": 0}

    def both(fn, fakes, table, fake_mode):
        try:
            got = record(fn, fakes, table, fake_mode)
        except Unrecordable as exc:
            counts["refused"] += 1
            counts.setdefault("why", []).append(str(exc))
            raise
        with fake_mode:
            fresh = [torch.empty_strided(f.shape, f.stride(), dtype=f.dtype, device=f.device) for f in fakes]
        want = decompose.make_fx(fn, decomposition_table=table, **decompose._MAKE_FX_OPTIONS)(*fresh)
        assert _spelled(got.graph) == _spelled(want.graph)
        counts["compared"] += 1
        counts["ops"] += sum(n.op == "call_function" and n.target is not operator.getitem for n in got.graph.nodes)
        return got

    monkeypatch.setattr(decompose, "record", both)
    return counts


def _decompose_only(model, *args, **kwargs):
    """Dynamo's graphs of `model`, decomposed (not compiled: eager runs them)."""
    def backend(gm, example_inputs):
        decompose.decompose_calls(gm, example_inputs)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend)(*args, **kwargs)


def test_the_zoo_records_as_make_fx_traces(compared):
    for name, make_model, make_inputs in CASES:
        _decompose_only(make_model(), *case_inputs(name, make_inputs))
    print(f"\nzoo: {compared}")
    assert compared["compared"] >= len(CASES) - 10 and compared["ops"] > 300


@pytest.mark.parametrize("family", ALL)
def test_hf_families_record_as_make_fx_traces(compared, family):
    _decompose_only(make(family), **example(family))
    assert compared["compared"] >= 1 and compared["refused"] == 0


def test_a_constant_made_inside_the_trace_is_refused():
    fake_mode = torch._subclasses.fake_tensor.FakeTensorMode()
    with fake_mode:
        x = torch.empty(2, 3)
    with torch.no_grad(), pytest.raises(Unrecordable, match="lift_fresh"):
        record(lambda t: t * torch.tensor([1.0, 2.0, 3.0]), [x], decompose.decompositions(), fake_mode)
    with torch.no_grad(), pytest.raises(Unrecordable, match="_local_scalar_dense"):
        record(lambda t: t.sum().item(), [x], decompose.decompositions(), fake_mode)


def test_a_refused_trace_falls_back_to_make_fx(monkeypatch):
    """A recorder that refuses everything: the decomposer traces with make_fx, and the model
    compiles and runs as before."""
    import luminal

    def refuse(*args):
        raise Unrecordable("refused by the test")

    monkeypatch.setattr(decompose, "record", refuse)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model, backend="luminal", options={"strict": True})(x)
        want = model(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    notes = [n for g in luminal.compiler.STATS.compiled[-1:] for n in g.report().notes if "distinct" in n]
    assert notes, "the per-call decomposition (not aot_autograd) lowered the graph"
