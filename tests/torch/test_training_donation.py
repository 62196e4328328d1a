"""Training's backward writes gradients into the saved activations aot_autograd donates
(`bw_donated_idxs`, `kernels/cpu/donation.py`): the same gradients and steps as eager, and a
graph run backward twice is either refused by torch or compiled without donations, never read
after it was overwritten."""

from __future__ import annotations

import copy

import pytest
import torch

from luminal import devices
from luminal.compiler import STATS

pytestmark = pytest.mark.skipif(not devices.get("cpu").available, reason="no C compiler")


class _Mlp(torch.nn.Module):
    def __init__(self, width=256):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(3))
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(width) for _ in range(3))

    def forward(self, x):
        for lin, norm in zip(self.layers, self.norms):
            x = x + torch.nn.functional.gelu(lin(norm(x)))
        return x.square().mean()


def _backward_runtime():
    graphs = [g for _, g in STATS.compiled.numbered() if g.name.endswith("_backward")]
    assert graphs, "no backward graph compiled by luminal"
    return graphs[-1].runtime


def test_training_steps_with_donated_activations_match_eager(monkeypatch):
    monkeypatch.setenv("LUMINAL_TIERED", "0")
    torch.manual_seed(0)
    eager = _Mlp()
    model = copy.deepcopy(eager)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="luminal", options={"device": "cpu", "strict": True})
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (eager, model)]
    x = torch.randn(512, 256)
    for _ in range(3):
        for m in (eager, compiled):
            m(x).backward()
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            err, scale = (q.grad - p.grad).abs().max().item(), p.grad.abs().max().item()
            assert err <= 1e-5 * scale, f"{name}: gradient differs by {err:.2e} (largest element {scale:.2e})"
        for opt in opts:
            opt.step()
            opt.zero_grad()
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)
    assert _backward_runtime().stats()["donated_outputs"] > 0  # the gradients above were written into activations
    backward = [g for _, g in STATS.compiled.numbered() if g.name.endswith("_backward")][-1]
    assert "donated inputs took" in str(backward.report())


def test_a_retained_graph_is_never_read_after_it_was_written(monkeypatch):
    """torch refuses `retain_graph` once the backward was compiled with donated buffers; a backward
    first compiled under `retain_graph` gets none, and then runs twice with eager's gradients."""
    monkeypatch.setenv("LUMINAL_TIERED", "0")
    torch.manual_seed(0)
    x = torch.randn(512, 256)
    torch._dynamo.reset()
    compiled = torch.compile(_Mlp(), backend="luminal", options={"device": "cpu", "strict": True})
    compiled(x).backward()
    loss = compiled(x)
    with pytest.raises(RuntimeError, match="donated buffers"):
        loss.backward(retain_graph=True)

    eager = _Mlp()
    model = copy.deepcopy(eager)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="luminal", options={"device": "cpu", "strict": True})
    for m in (eager, compiled):
        loss = m(x)
        loss.backward(retain_graph=True)
        loss.backward()
    for (name, p), q in zip(eager.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)
    assert _backward_runtime().stats()["donated_outputs"] == 0
