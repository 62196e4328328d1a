"""Training under `torch.autocast` (bf16 on the CPU), and a forward that runs eagerly.

Autocast runs linear layers and convolutions in bf16 and leaves the norms' weights (and batch
norm's running statistics) in f32, so a norm meets a bf16 input with f32 parameters; torch's CPU
kernels compute that in float and return the input's dtype. luminal lowers the same mix (one
dtype for all, `builder.nn.one_dtype`), so the forward and the backward both run on luminal. A
forward that runs eagerly takes its backward with it: what torch's kernels save need not be what
the trace declared (a bf16 layer norm's mean and rstd come back f32), which a backward compiled
from the trace would refuse.
"""

import copy
import warnings

import pytest
import torch
from torch import nn
from torch_helpers import runs_on_luminal

from luminal.errors import UnsupportedError
from luminal.frontends.torch import dynamo
from luminal.frontends.torch.aten_ops import ATEN

NORMS = {
    "layer norm": (lambda: nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4)), (6, 16)),
    "rms norm": (lambda: nn.Sequential(nn.Linear(16, 16), nn.RMSNorm(16)), (6, 16)),
    "group norm": (lambda: nn.Sequential(nn.Conv2d(4, 8, 3), nn.GroupNorm(2, 8)), (2, 4, 6, 6)),
    "batch norm, train": (lambda: nn.Sequential(nn.Conv2d(4, 8, 3), nn.BatchNorm2d(8)), (2, 4, 6, 6)),
    "batch norm, eval": (lambda: nn.Sequential(nn.Conv2d(4, 8, 3), nn.BatchNorm2d(8)).eval(), (2, 4, 6, 6)),
    "batch norm 1d": (lambda: nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16)), (6, 16)),
    "instance norm": (lambda: nn.Sequential(nn.Conv2d(4, 8, 3), nn.InstanceNorm2d(8, affine=True)), (2, 4, 6, 6)),
}
BF16 = 2.0**-8  # bf16's relative rounding step: what two correct bf16 computations may differ by, a few times


def _step(module, params, x):
    """One autocast forward and backward; (output, gradients, buffers)."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = module(x)
    weights = torch.linspace(-1, 2, y.numel()).reshape(y.shape)  # a loss no norm makes constant
    (y.float() * weights).sum().backward()
    return y.detach().float(), [p.grad for p in params.parameters()], [b.clone() for b in params.buffers()]


def _close(got, want, steps):
    scale = max((w.abs().max().item() for w in want), default=0.0) or 1.0
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        err = (g.float() - w.float()).abs().max().item()
        assert err <= steps * BF16 * scale, f"differs by {err:.2e} (largest element {scale:.2e})"


def _eager_step(norm):
    """(a fresh copy of the `norm` model, its input, eager's `_step` on the original)."""
    make, shape = NORMS[norm]
    torch.manual_seed(0)
    eager = make()
    model = copy.deepcopy(eager)
    x = torch.randn(*shape)
    want = _step(eager, eager, x)
    torch._dynamo.reset()
    return model, x, want


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("norm", list(NORMS))
def test_autocast_training_runs_on_luminal(norm, device):
    model, x, want = _eager_step(norm)
    compiled = torch.compile(model, backend="luminal", options={"device": device, "strict": True})
    with runs_on_luminal() as served:
        got = _step(compiled, model, x)
    assert any(name.endswith("_backward") for name in served), served
    y, grads, buffers = got
    assert y.shape == want[0].shape
    _close([y], [want[0]], 4)
    _close(grads, want[1], 4)
    _close(buffers, want[2], 4)  # running mean and variance (f32), num_batches_tracked (int64)


def test_a_forward_that_runs_eagerly_takes_its_backward_along(monkeypatch):
    """A forward that falls back to eager after it was compiled (here: its layer norm's lowering
    fails) saves what torch's kernels return; its backward runs eagerly too, and the gradients are
    eager's, where the backward compiled from the trace used to refuse the f32 mean and rstd."""
    def refuse(*args, **kwargs):
        raise UnsupportedError("native_layer_norm refused for this test")

    monkeypatch.setitem(ATEN, "native_layer_norm.default", refuse)
    model, x, want = _eager_step("layer norm")
    before = len(dynamo.EAGER_FALLBACKS)
    compiled = torch.compile(model, backend="luminal", options={"device": "numpy"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _step(compiled, model, x)
    assert len(dynamo.EAGER_FALLBACKS) - before == 2, list(dynamo.EAGER_FALLBACKS)
    fell_back = list(dynamo.EAGER_FALLBACKS)[-2:]
    assert "refused for this test" in fell_back[0]
    assert fell_back[1].endswith("runs eagerly") and "_backward" in fell_back[1]
    assert any("_backward eagerly" in str(w.message) for w in caught)
    _close(got[1], want[1], 4)


@pytest.mark.parametrize("name", ["llama", "gpt2", "vit"])
def test_hugging_face_training_under_autocast(name):
    """A whole model's training step under bf16 autocast: both graphs on luminal, the gradients
    within a few bf16 steps of eager's."""
    from hf_models import example, first_output, make

    model = make(name)  # eval mode: no dropout, whose random streams differ by design
    eager = copy.deepcopy(model)
    kw = example(name)

    def grads(module, params):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = first_output(module(**kw))
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
        (out.float() * weights).sum().backward()
        return [p.grad for p in params.parameters()]

    want = grads(eager, eager)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="luminal", options={"device": "cpu", "strict": True})
    with runs_on_luminal() as served:
        got = grads(compiled, model)
    assert any(n.endswith("_backward") for n in served), served
    pairs = [(g, w) for g, w in zip(got, want, strict=True) if w is not None]  # eager's unset: torch.compile's zeros
    _close([g for g, _ in pairs], [w for _, w in pairs], 4)
