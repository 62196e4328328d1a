"""torch's random ops on luminal (`luminal/frontends/torch/aten_random.py`): dropout in training
mode compiles under torch.compile and luminal.compile with no eager fallback, is reproducible under
`torch.manual_seed`, drops about p and scales exactly, and its mask reaches aot_autograd's
backward; rand/randn/bernoulli/uniform/normal by shape, dtype and distribution, one stream per node."""

import pytest
import torch
from torch_helpers import assert_same, runs_on_luminal

import luminal
from luminal.frontends.torch.dynamo import EAGER_FALLBACKS


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compile(model, **options):
    return torch.compile(model, backend="luminal", options={"strict": True, **options})


def test_dropout_in_training_compiles_and_drops_exactly():
    x = torch.randn(512, 64)
    model = torch.nn.Dropout(0.1).train()
    fallbacks = len(EAGER_FALLBACKS)
    with torch.no_grad(), runs_on_luminal():
        out = _compile(model)(x)
    assert len(EAGER_FALLBACKS) == fallbacks
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.01
    scale = torch.tensor(1 / 0.9, dtype=torch.float32)  # torch's scale, rounded to f32
    assert torch.equal(out, torch.where(kept, x * scale, x * 0.0))


def test_manual_seed_makes_compiled_dropout_repeat():
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Dropout(0.5), torch.nn.Linear(32, 8),
                                torch.nn.Dropout(0.5)).train()
    x = torch.randn(64, 32)
    compiled = _compile(model)
    with torch.no_grad(), runs_on_luminal(at_least=3):
        torch.manual_seed(0)
        a = compiled(x)
        torch.manual_seed(0)
        b = compiled(x)
        c = compiled(x)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)  # the next call draws another seed
    cm = luminal.compile(model, (x,))
    with torch.no_grad():
        a, b = _twice_with_seed(cm, x, 3)
    assert torch.equal(a, b) and 0.2 < (a == 0).float().mean() < 0.8


def _twice_with_seed(fn, x, seed):
    """fn(x) after torch.manual_seed(seed), twice."""
    outs = []
    for _ in range(2):
        torch.manual_seed(seed)
        outs.append(fn(x))
    return outs


def test_two_dropouts_draw_different_masks():
    """One stream per node, also for identical calls (decomposed once, imported per call)."""

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = torch.nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(x), self.drop(x), torch.rand_like(x), torch.rand_like(x)

    x = torch.ones(16, 32)
    for run in (_compile(Twice().train()), luminal.compile(Twice().train(), (x,))):
        with torch.no_grad():
            a, b, u, v = run(x)
        assert not torch.equal(a, b) and not torch.equal(u, v)


def test_dropout_mask_reaches_the_backward():
    """The backward multiplies by the forward's mask (aot_autograd's forward, luminal's, returns it)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.25)).train()
    x = torch.randn(128, 64)
    for run in (_compile(model), luminal.compile(model, (x,))):  # luminal.compile: its grad-mode path
        model.zero_grad()
        out = run(x)
        out.sum().backward()
        mask = (out != 0).float()
        assert_same(model[0].weight.grad, (mask / 0.75).t() @ x, atol=1e-4, rtol=1e-4)


def test_dropout_with_a_symbolic_batch():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.5)).train()
    compiled = torch.compile(model, backend="luminal", dynamic=True, options={"strict": True})
    with torch.no_grad():
        for batch in (5, 9, 12):
            out = compiled(torch.randn(batch, 16))
            assert out.shape == (batch, 16) and 0 < (out == 0).float().mean() < 1


def test_random_creation_ops():
    def f(x, p):
        return (torch.rand_like(x), torch.randn_like(x), torch.rand(4096, 8, dtype=torch.float64),
                torch.randn(4096, 8, dtype=torch.float16), torch.bernoulli(p), torch.bernoulli(x, 0.25),
                torch.empty_like(x).uniform_(-1.0, 3.0), torch.empty_like(x).normal_(2.0, 0.5))

    x, p = torch.zeros(4096, 8), torch.full((4096, 8), 0.75)
    with runs_on_luminal():
        outs = _compile(f)(x, p)
    want = f(x, p)
    assert [(o.shape, o.dtype) for o in outs] == [(w.shape, w.dtype) for w in want]
    u, n, u64, n16, b, b25, uni, nor = (o.double() for o in outs)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    assert 0 <= u64.min() and u64.max() < 1 and abs(u64.mean() - 0.5) < 0.01
    for z, mean, std in ((n, 0.0, 1.0), (n16, 0.0, 1.0), (nor, 2.0, 0.5)):
        assert abs(z.mean() - mean) < 0.03 * std and abs(z.std() - std) < 0.03 * std
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean() - 0.75) < 0.02
    assert abs(b25.mean() - 0.25) < 0.02
    assert -1 <= uni.min() and uni.max() < 3 and abs(uni.mean() - 1.0) < 0.03


def test_an_explicit_generator_is_refused():
    from luminal.errors import UnsupportedError
    from luminal.frontends.torch import aten_random

    with pytest.raises(UnsupportedError, match="Generator"):
        aten_random._no_generator({"generator": torch.Generator()})


def test_saved_dropout_model_draws_after_loading(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).train()
    x = torch.randn(64, 8)
    luminal.compile(model, (x,)).save(tmp_path / "dropout.lum")
    loaded = luminal.load(tmp_path / "dropout.lum", device="cpu")
    a, b = _twice_with_seed(loaded, x, 1)
    assert torch.equal(a, b) and 0.3 < (a == 0).float().mean() < 0.7


def test_normal_overloads():
    def f(m, s):
        return torch.normal(m, 2.0), torch.normal(0.5, s), torch.normal(m, s), torch.normal(1.0, 2.0, size=(20000,))

    m, s = torch.full((20000,), 3.0), torch.full((20000,), 0.5)
    with runs_on_luminal():
        outs = _compile(f)(m, s)
    for out, (mean, std) in zip(outs, [(3.0, 2.0), (0.5, 0.5), (3.0, 0.5), (1.0, 2.0)]):
        assert out.shape == (20000,) and out.dtype == torch.float32
        assert abs(out.mean().item() - mean) < 0.05 * std and abs(out.std().item() - std) < 0.05 * std
