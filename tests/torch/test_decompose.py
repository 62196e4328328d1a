"""Lowering to core ATen one distinct call at a time (luminal/frontends/torch/decompose.py):
where it applies, that repeated calls are traced once, and that everything it cannot do
exactly falls back to aot_autograd / run_decompositions with the same results."""

import re

import pytest
import torch
from torch_helpers import assert_same

import luminal
from luminal.compiler import STATS
from luminal.frontends.torch.decompose import decompose_graph


class Block(torch.nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up, self.down = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Deep(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x.softmax(-1)


class InPlace(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y.add_(1)
        y[0] = 7.0
        return y


class BufferUpdate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x):
        self.count.add_(1)
        return x + self.count


def lowering_notes(since):
    return [n for g in STATS.compiled[since:] for n in g.report().notes if n.startswith("lowered to core ATen")]


def compile_dynamo(model, x, **options):
    torch._dynamo.reset()
    since = len(STATS.compiled)
    out = torch.compile(model, backend="luminal", options={"strict": True, **options})(x)
    return out, lowering_notes(since)


def test_repeated_layers_are_traced_once():
    x = torch.randn(2, 5, 16)
    shallow, deep = Deep(1), Deep(8)
    with torch.no_grad():
        _, (note1,) = compile_dynamo(shallow, x)
        got, (note8,) = compile_dynamo(deep, x)
        want = deep(x)
    assert_same(got, want)
    distinct1, calls1 = map(int, re.search(r"decomposing (\d+) distinct of (\d+) calls", note1).groups())
    distinct8, calls8 = map(int, re.search(r"decomposing (\d+) distinct of (\d+) calls", note8).groups())
    print(f"\n1 block: {note1}\n8 blocks: {note8}")
    assert calls8 > 6 * calls1
    assert distinct8 == distinct1  # the 7 further blocks add no distinct call


@pytest.mark.parametrize("lowering", ["auto", "aot_autograd"])
def test_both_lowerings_agree(lowering):
    x = torch.randn(2, 5, 16)
    model = Deep(3)
    with torch.no_grad():
        got, (note,) = compile_dynamo(model, x, lowering=lowering)
        want = model(x)
    assert_same(got, want)
    assert ("decomposing" in note) == (lowering == "auto"), note


def test_in_place_falls_back_to_aot_autograd():
    x = torch.randn(4, 3)
    with torch.no_grad():
        got, (note,) = compile_dynamo(InPlace(), x.clone())
        want = InPlace()(x.clone())
    assert_same(got, want)
    assert note.endswith("aot_autograd"), note


def test_training_falls_back_to_aot_autograd():
    model = Deep(1)
    x = torch.randn(2, 5, 16)
    got, (note,) = compile_dynamo(model, x)
    got.sum().backward()
    assert note.endswith("aot_autograd"), note
    assert all(p.grad is not None for p in model.parameters())


def test_symbolic_shapes_fall_back_to_aot_autograd():
    model = Deep(1)
    x = torch.randn(2, 5, 16)
    torch._dynamo.mark_dynamic(x, 1)
    with torch.no_grad():
        got, (note,) = compile_dynamo(model, x)
        want = model(x)
    assert_same(got, want)
    assert note.endswith("aot_autograd"), note


def test_export_path_decomposes_per_call_and_falls_back_on_mutation():
    x = torch.randn(2, 5, 16)
    model = Deep(4)
    with torch.no_grad():
        cm = luminal.compile(model, (x,))
        assert_same(cm(x), model(x))
    assert "decomposing" in cm.report().notes[0]
    assert {"export", "lower", "import"} <= set(cm.report().phases)

    model = BufferUpdate()
    cm = luminal.compile(model, (torch.zeros(3),))
    assert cm.report().notes[0].endswith("run_decompositions")
    assert_same(cm(torch.zeros(3)), torch.full((3,), 1.0))
    assert_same(cm(torch.zeros(3)), torch.full((3,), 2.0))  # the buffer update was written back


def test_decompose_graph_lowers_eval_batch_norm_and_declines_training():
    # eval mode: the functional op aot_autograd gives; training mode traced without
    # functionalization updates the running statistics in place: aot_autograd's job
    x = torch.randn(3, 4)
    model = torch.nn.BatchNorm1d(4).eval()
    with torch.no_grad():
        model.running_mean.uniform_(-1, 1)
        model.running_var.uniform_(0.5, 2)
        ep = torch.export.export(model, (x,))
        aten = decompose_graph(ep.graph_module)
        targets = [n.target for n in aten.graph.nodes if n.op == "call_function"]
        assert torch.ops.aten._native_batch_norm_legit_no_training.default in targets, targets
        cm = luminal.compile(model, (x,))
        assert_same(cm(x), model(x))
        assert "decomposing" in cm.report().notes[0]
        trained = torch.nn.BatchNorm1d(4).train()
        assert decompose_graph(torch.export.export(trained, (x,)).graph_module) is None
