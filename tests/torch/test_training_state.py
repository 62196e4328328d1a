"""Training state on the torch.compile backend: an optimizer's step and BatchNorm in train().

`torch.compile(opt.step, backend="luminal")`: aot_autograd functionalizes the step's in-place
updates (parameters, momentum and moment buffers, the step count) into outputs it copies back
into the optimizer's own tensors, so the parameters and every state tensor must be graph inputs
read afresh each call, never constants: a stale constant would show from the second step on.
Each case runs several steps on fresh random gradients and compares every tensor after every
step with an eager copy, on the `cpu` and `numpy` devices, strict (no eager fallback).

Tolerance: 1e-6 relative, with an absolute floor of 1e-6 x the tensor's largest magnitude (a
parameter that an update brings near zero has no relative accuracy to compare). The compiled
step is not eager's program to the last bit: Dynamo computes Adam's bias corrections from the
f32 `step` tensor (eager in Python doubles), so torch's own `aot_eager` differs from eager by
about 2e-7 of the largest value after six steps; luminal stays as close.
"""

import copy

import pytest
import torch
from torch_helpers import runs_on_luminal

from luminal.frontends.torch import dynamo

DEVICES = ["cpu", "numpy"]
OPTIMIZERS = {
    "sgd_momentum": lambda ps, foreach: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=foreach),
    "adam": lambda ps, foreach: torch.optim.Adam(ps, lr=0.01, foreach=foreach),
    "adamw": lambda ps, foreach: torch.optim.AdamW(ps, lr=0.01, foreach=foreach),
}


def assert_close(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if not want.dtype.is_floating_point:
        assert torch.equal(got, want), f"{what}: {got} != {want}"
        return
    floor = 1e-6 * want.abs().max().item() if want.numel() else 0.0
    torch.testing.assert_close(got, want, rtol=1e-6, atol=floor, msg=lambda m: f"{what}: {m}")


@pytest.fixture
def no_fallback():
    """Asserts that no graph of the test ran eagerly instead of on luminal."""
    before = len(dynamo.EAGER_FALLBACKS)
    yield
    assert len(dynamo.EAGER_FALLBACKS) == before, list(dynamo.EAGER_FALLBACKS)[-1]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "single"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_step(name, foreach, device, no_fallback):
    torch._dynamo.reset()
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(6, 5)), torch.nn.Parameter(torch.randn(5))]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt, ref_opt = OPTIMIZERS[name](params, foreach), OPTIMIZERS[name](ref, foreach)
    step = torch.compile(opt.step, backend="luminal", options={"strict": True, "device": device})
    ptrs = [p.data_ptr() for p in params]
    state_ptrs = None
    with runs_on_luminal(5):
        for i in range(5):
            for p, r in zip(params, ref):
                g = torch.randn_like(p)
                p.grad, r.grad = g.clone(), g.clone()
            step()
            ref_opt.step()
            for j, (p, r) in enumerate(zip(params, ref)):
                assert_close(p.detach(), r.detach(), f"step {i + 1}, parameter {j}")
                assert opt.state[p].keys() == ref_opt.state[r].keys()
                for key, value in ref_opt.state[r].items():
                    assert_close(opt.state[p][key], value, f"step {i + 1}, parameter {j}, state {key}")
            # updated in place: the very tensors the optimizer holds, never copies
            assert [p.data_ptr() for p in params] == ptrs
            now = [(k, v.data_ptr()) for p in params for k, v in opt.state[p].items()]
            state_ptrs = state_ptrs or now  # the state the first step made, updated in place since
            assert now == state_ptrs


class ConvNet(torch.nn.Module):
    """conv -> BatchNorm2d -> relu -> linear -> BatchNorm1d (on (N, C) and on (N, C, L))."""

    def __init__(self, momentum):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn2d = torch.nn.BatchNorm2d(4, momentum=momentum)
        self.fc = torch.nn.Linear(4 * 5 * 5, 6)
        self.bn1d = torch.nn.BatchNorm1d(6, momentum=momentum)
        self.bn1d_seq = torch.nn.BatchNorm1d(4, momentum=momentum)

    def forward(self, x):
        h = self.bn2d(self.conv(x)).relu()
        return self.bn1d(self.fc(h.flatten(1))), self.bn1d_seq(h.flatten(2))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("momentum", [0.1, None], ids=["momentum", "cumulative"])
def test_batchnorm_train(momentum, grad, device, no_fallback):
    """Forward equal to eager, and running_mean / running_var / num_batches_tracked updated in
    place as eager updates them, after each of 3 calls. With a momentum the whole forward, state
    update included, is one luminal graph. momentum=None (a cumulative average) reads
    `float(num_batches_tracked)` in torch's BatchNorm.forward: Dynamo breaks the graph there (for
    every backend; with `capture_scalar_outputs` it still breaks, on `F.batch_norm` guarding the
    data-dependent factor) and runs each BatchNorm module in eager torch, so luminal runs only the
    graphs around them (conv, relu, linear, flatten); the state is eager's own there."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = ConvNet(momentum).train()
    ref = copy.deepcopy(model)
    fast = torch.compile(model, backend="luminal", options={"strict": True, "device": device})
    buffers = {k: v.data_ptr() for k, v in model.named_buffers()}
    with runs_on_luminal(3):
        for i in range(3):
            x = torch.randn(4, 3, 5, 5)
            with torch.set_grad_enabled(grad):
                out, want = fast(x), ref(x)
            for o, w in zip(out, want):
                torch.testing.assert_close(o, w, rtol=1e-5, atol=1e-5)
            for (k, b), (_, rb) in zip(model.named_buffers(), ref.named_buffers()):
                assert_close(b, rb, f"call {i + 1}, {k}")
            if grad:
                sum(o.square().sum() for o in out).backward()
                sum(w.square().sum() for w in want).backward()
    assert {k: v.data_ptr() for k, v in model.named_buffers()} == buffers
    assert model.bn2d.num_batches_tracked.item() == 3
    if grad:  # gradients through batch statistics cancel: f32 noise of 1e-5 in eager itself
        for (k, p), (_, rp) in zip(model.named_parameters(), ref.named_parameters()):
            torch.testing.assert_close(p.grad, rp.grad, rtol=1e-3, atol=1e-4, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("device", DEVICES)
def test_foreach_list_overloads(device, no_fallback):
    """The `_foreach_*` overloads with a second list argument (which the ATen edge sweep cannot
    generate), lowered element by element through their per-tensor ops; lerp on both sides of
    its |w| = 0.5 switch and with per-element weights, as eager's kernel computes it."""

    def f(xs, ys, zs, ws):
        return (
            torch._foreach_add(xs, ys, alpha=0.5), torch._foreach_sub(xs, [1.5, -2.0]),
            torch._foreach_mul(xs, ys), torch._foreach_div(xs, [3.0, 0.25]),
            torch._foreach_addcdiv(xs, ys, zs, [0.1, -0.2]), torch._foreach_addcmul(xs, ys, zs, [0.7, -1.3]),
            torch._foreach_addcdiv(xs, ys, zs, 0.3), torch._foreach_addcmul(xs, ys, zs, 0.3),
            torch._foreach_lerp(xs, ys, 0.3), torch._foreach_lerp(xs, ys, 0.8),
            torch._foreach_lerp(xs, ys, [0.2, 0.9]), torch._foreach_lerp(xs, ys, ws),
            torch._foreach_maximum(xs, ys), torch._foreach_minimum(xs, [0.0, 0.5]),
            torch._foreach_clamp_min(xs, ys), torch._foreach_clamp_max(xs, [0.1, 0.2]),
            torch._foreach_pow(zs, ys), torch._foreach_pow(zs, [2.0, 0.5]), torch._foreach_norm(xs),
        )

    torch._dynamo.reset()
    torch.manual_seed(0)
    xs, ys = [torch.randn(3, 4), torch.randn(7)], [torch.randn(3, 4), torch.randn(7)]
    zs = [torch.rand(3, 4) + 0.5, torch.rand(7) + 0.5]
    ws = [torch.rand(3, 4), torch.rand(7)]
    fast = torch.compile(f, backend="luminal", options={"strict": True, "device": device})
    with runs_on_luminal(1):
        got = fast(xs, ys, zs, ws)
    want = f(xs, ys, zs, ws)
    for i, (g, w) in enumerate(zip(got, want)):
        for j, (a, b) in enumerate(zip(g, w)):
            assert_close(a, b, f"result {i}, element {j}")


@pytest.mark.parametrize("device", DEVICES)
def test_fma_addcmul_addcdiv_lerp(device, no_fallback):
    """Dynamo writes `addcmul_` / `addcdiv_` with a value as `prims::fma` (rounded once); lerp
    with a tensor weight decomposes in core ATen. In-place on a graph input, written back."""

    def f(p, a, b, w):
        p.addcmul_(a, b, value=-0.25)
        p.addcdiv_(a, b, value=0.5)
        return torch.lerp(p, a, w), torch.lerp(a, b, 0.75)

    torch._dynamo.reset()
    torch.manual_seed(0)
    p, a, b, w = torch.randn(16), torch.randn(16), torch.rand(16) + 0.5, torch.rand(16)
    p_ref = p.clone()
    fast = torch.compile(f, backend="luminal", options={"strict": True, "device": device})
    with runs_on_luminal(1):
        got = fast(p, a, b, w)
    want = f(p_ref, a, b, w)
    assert_close(p, p_ref, "the updated input")
    for g, wt in zip(got, want):
        assert_close(g, wt, "result")


@pytest.mark.parametrize("device", DEVICES)
def test_training_loop(device, no_fallback):
    """A compiled model (BatchNorm in train(), grad on) and a compiled foreach SGD step, four
    iterations: every parameter and buffer as eager's, the optimizer's updates of one call seen
    as inputs of the next forward (no parameter frozen into a constant)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = ConvNet(0.1).train()
    ref = copy.deepcopy(model)

    def sgd(m):
        return torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, foreach=True)

    opt, ref_opt = sgd(model), sgd(ref)
    options = {"strict": True, "device": device}
    fast, step = torch.compile(model, backend="luminal", options=options), torch.compile(opt.step, backend="luminal",
                                                                                        options=options)
    with runs_on_luminal(8):
        for i in range(4):
            x = torch.randn(4, 3, 5, 5)
            for forward, o, s in ((fast, opt, step), (ref, ref_opt, ref_opt.step)):
                o.zero_grad()
                out, seq = forward(x)
                ((out - 1).square().mean() + (seq + 0.5).square().mean()).backward()
                s()
            for (k, a), (_, b) in zip(model.state_dict().items(), ref.state_dict().items()):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m, k=k, i=i: f"step {i + 1}, {k}: {m}")


@pytest.mark.parametrize("device", DEVICES)
def test_lr_schedule(device, no_fallback):
    """A learning rate that changes every step (StepLR): after one recompile Dynamo passes it to
    the single-tensor Adam graph as an input (an f64 0-d tensor that `prims::convert_element_type`
    narrows), which luminal reads afresh each call."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3))]
    ref = [torch.nn.Parameter(params[0].detach().clone())]
    opt, ref_opt = torch.optim.Adam(params, lr=0.01, foreach=False), torch.optim.Adam(ref, lr=0.01, foreach=False)
    schedules = [torch.optim.lr_scheduler.StepLR(o, 1, 0.5) for o in (opt, ref_opt)]
    step = torch.compile(opt.step, backend="luminal", options={"strict": True, "device": device})
    with runs_on_luminal(6) as served:
        for i in range(6):
            g = torch.randn(4, 3)
            params[0].grad, ref[0].grad = g.clone(), g.clone()
            step()
            ref_opt.step()
            for s in schedules:
                s.step()
            assert_close(params[0].detach(), ref[0].detach(), f"step {i + 1}")
    assert len(set(served)) <= 2, served  # the first step's graph, then one with the rate as an input
