"""Training through luminal (issue 30): forward and backward graphs compiled, gradients equal to eager's.

Under `torch.compile(backend="luminal")` aot_autograd hands luminal both halves of the joint graph;
`luminal.compile` in grad mode takes the same path. Every test checks that luminal served the
backward graph (`runs_on_luminal` counts the compiled graphs' calls by name), not eager torch.
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from hf_models import ALL, example, first_output, make
from torch_helpers import runs_on_luminal

import luminal
from luminal.frontends.torch import dynamo
from luminal.frontends.torch.training_decomps import training_decompositions

DEVICES = ["numpy", "cpu"]


def _compiled(model, device):
    torch._dynamo.reset()
    return torch.compile(model, backend="luminal", options={"device": device, "strict": True})


def _grads(model) -> dict:
    return {n: p.grad for n, p in model.named_parameters()}


def assert_grads_equal(got: dict, want: dict, rtol=1e-5, atol=1e-7):
    """Each gradient within rtol of eager's, relative to that gradient's largest element, or within
    atol where a gradient is zero in exact arithmetic and eager's is rounding noise (attention's key
    bias: softmax ignores a constant added to a row's scores)."""
    assert got.keys() == want.keys()
    for name, w in want.items():
        g = got[name]
        if w is None:  # eager left it unset: luminal leaves it unset, or zero (torch.compile's own behaviour)
            assert g is None or not g.any(), name
            continue
        assert g is not None, f"{name}: no gradient"
        scale = w.abs().max().item()
        err = (g - w).abs().max().item()
        assert err <= rtol * scale + atol, f"{name}: gradient differs by {err:.2e} (largest element {scale:.2e})"


def _served_backward(served) -> bool:
    return any(name.endswith("_backward") for name in served)


# --- attention: the decomposition table ---------------------------------------------------------
class _Attention(torch.nn.Module):
    def __init__(self, kv_heads=3, mask=None, causal=True):
        super().__init__()
        self.q, self.kv = torch.nn.Linear(16, 24), torch.nn.Linear(16, 16 * kv_heads)
        self.kv_heads, self.mask, self.causal = kv_heads, mask, causal

    def forward(self, x):
        q = self.q(x).view(2, 5, 3, 8).transpose(1, 2)
        k, v = self.kv(x).view(2, 5, 2, self.kv_heads, 8).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, attn_mask=self.mask,
                                             enable_gqa=self.kv_heads != 3)
        return out.pow(2).sum()


def _bool_mask():
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    mask[2] = False  # a row masked everywhere
    return mask


ATTENTION = {"causal": {}, "gqa": {"kv_heads": 1}, "float mask": {"mask": "float", "causal": False},
             "bool mask, a row masked everywhere": {"mask": "bool", "causal": False}}


def _attention(kind):
    kw = dict(ATTENTION[kind])
    torch.manual_seed(0)
    if kw.get("mask") == "float":
        kw["mask"] = torch.randn(5, 5)
    elif kw.get("mask") == "bool":
        kw["mask"] = _bool_mask()
    return _Attention(**kw), torch.randn(2, 5, 16)


@pytest.mark.parametrize("kind", list(ATTENTION))
def test_attention_gradients_with_the_training_table(kind):
    """The regression itself, in torch alone: torch's core-ATen table makes attention's gradients
    wrong under aot_autograd (errors of 1e1 here); luminal's training table gives eager's."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    model, x = _attention(kind)
    eager = copy.deepcopy(model)
    eager(x).backward()

    def run_eagerly(gm, _):
        assert not any("attention" in str(n.target) for n in gm.graph.nodes)  # decomposed to core ATen
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=run_eagerly, bw_compiler=run_eagerly, decompositions=training_decompositions())
    torch.compile(model, backend=backend)(x).backward()
    assert_grads_equal(_grads(model), _grads(eager))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", list(ATTENTION))
def test_attention_gradients_on_luminal(kind, device):
    """Eager's gradients, and the backward recomputes the scores from Q, K and the row
    log-sum-exp as the flash kernel's does (`partition.partition`): no (batch,
    heads, length, length) tensor is saved."""
    model, x = _attention(kind)
    eager = copy.deepcopy(model)
    eager(x).backward()
    saved = []
    with runs_on_luminal(2) as served:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
            loss = _compiled(model, device)(x)
        loss.backward()
    assert _served_backward(served)
    assert_grads_equal(_grads(model), _grads(eager))
    assert saved and (2, 3, 5, 5) not in saved, saved


# --- every Hugging Face family: one training step ---------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ALL)
def test_hf_family_gradients(name, device):
    model = make(name)  # in eval mode: the configs' dropout is random, compared bit for bit elsewhere
    eager = copy.deepcopy(model)
    kw = example(name)
    fallbacks = len(dynamo.EAGER_FALLBACKS)
    def loss_of(out):  # a fixed random projection (a norm of a LayerNorm's output barely depends on its input)
        out = first_output(out)
        return (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(2))).sum()

    with runs_on_luminal(2) as served:
        loss = loss_of(_compiled(model, device)(**kw))
        loss.backward()
    want = loss_of(eager(**kw))
    want.backward()
    assert len(dynamo.EAGER_FALLBACKS) == fallbacks
    assert _served_backward(served)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=0)
    assert_grads_equal(_grads(model), _grads(eager))


# --- convolution, pooling, padding: the backward-only ATen ops (aten_backward.py) ---------------
CONVS = {
    "conv2d": lambda: torch.nn.Conv2d(3, 4, 3),
    "strided grouped": lambda: torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
    "dilated depthwise": lambda: torch.nn.Conv2d(4, 4, (3, 2), stride=(2, 1), dilation=(1, 2), padding=(2, 0), groups=4),
    "conv1d cut": lambda: torch.nn.Conv1d(3, 5, 4, stride=3),
    "transposed": lambda: torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
    "transposed 1d": lambda: torch.nn.ConvTranspose1d(3, 2, 3, stride=2),
    "1x1 no bias": lambda: torch.nn.Conv2d(4, 3, 1, bias=False),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", list(CONVS))
def test_convolution_backward(kind, device):
    torch.manual_seed(0)
    conv = CONVS[kind]()
    spatial = (9,) if isinstance(conv, (torch.nn.Conv1d, torch.nn.ConvTranspose1d)) else (9, 9)
    x = torch.randn(2, conv.in_channels, *spatial, requires_grad=True)
    eager, xe = copy.deepcopy(conv), x.detach().clone().requires_grad_()
    with runs_on_luminal(2) as served:
        _compiled(conv, device)(x).sin().sum().backward()
    eager(xe).sin().sum().backward()
    assert _served_backward(served)
    assert_grads_equal({"x": x.grad, **_grads(conv)}, {"x": xe.grad, **_grads(eager)})


POOLS = {
    "avg ceil, padding not counted": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "avg ceil, padding counted": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True),
    "avg divisor override": lambda x: F.avg_pool2d(x, (2, 3), (1, 2), (1, 0), divisor_override=5),
    "avg 1d": lambda x: F.avg_pool1d(x[:, 0], 3, 2, 1, ceil_mode=True),
    "max dilated ceil": lambda x: F.max_pool2d(x, 3, 2, 1, dilation=2, ceil_mode=True),
    "max 1d": lambda x: F.max_pool1d(x[:, 0], 2),
    "adaptive avg": lambda x: F.adaptive_avg_pool2d(x, (3, 2)),
    "adaptive max": lambda x: F.adaptive_max_pool2d(x, (3, 2)),
    "replicate pad 2d": lambda x: F.pad(x, (1, 2, 1, 0), mode="replicate"),
    "replicate pad 1d": lambda x: F.pad(x[:, 0], (3, 1), mode="replicate"),
    "replicate pad 3d": lambda x: F.pad(x[None], (1, 2, 0, 1, 2, 0), mode="replicate"),
    "avg 3d ceil, padding not counted": lambda x: F.avg_pool3d(x[None], (2, 3, 2), (1, 2, 2), (1, 1, 0), ceil_mode=True,
                                                             count_include_pad=False),
    "local response norm": lambda x: F.local_response_norm(x, 3),  # an avg_pool3d over the channels
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", list(POOLS))
def test_pooling_backward(kind, device):
    f = POOLS[kind]
    x = torch.randn(2, 3, 9, 10, generator=torch.Generator().manual_seed(0)).requires_grad_()
    xe = x.detach().clone().requires_grad_()
    with runs_on_luminal(2) as served:
        y = _compiled(f, device)(x)
        (y * torch.arange(y.numel()).reshape(y.shape)).sum().backward()  # a distinct weight per output
    ye = f(xe)
    (ye * torch.arange(ye.numel()).reshape(ye.shape)).sum().backward()
    assert _served_backward(served)
    assert_grads_equal({"x": x.grad}, {"x": xe.grad})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_backward(dim, device):
    """`_weight_norm_interface_backward`, which core ATen keeps whole: per-direction sums over
    every axis but `dim`."""
    P = torch.nn.utils.parametrizations.weight_norm
    torch.manual_seed(0)
    eager = torch.nn.Sequential(P(torch.nn.Linear(4, 6), dim=dim), torch.nn.Tanh(), P(torch.nn.Conv1d(1, 2, 3), dim=dim))
    model = copy.deepcopy(eager)
    x = torch.randn(2, 1, 4, generator=torch.Generator().manual_seed(1))
    with runs_on_luminal(2) as served:
        (_compiled(model, device)(x) ** 2).sum().backward()
    (eager(x) ** 2).sum().backward()
    assert _served_backward(served)
    assert_grads_equal(_grads(model), _grads(eager))


# --- luminal.compile in grad mode; what must never be silently wrong ---------------------------
def _tanh_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh())


@pytest.mark.parametrize("entry", ["torch.compile", "luminal.compile"])
def test_double_backward_raises(entry):
    """A second grad through the compiled model raises; it used to return only the terms outside
    the model (here 6 * x), silently."""
    model = _tanh_mlp()
    x = torch.randn(4, 3)
    compiled = _compiled(model, "numpy") if entry == "torch.compile" else luminal.compile(model, (x,), device="numpy")
    xx = x.clone().requires_grad_()
    y = compiled(xx).pow(2).sum() + xx.pow(3).sum()
    (g1,) = torch.autograd.grad(y, xx, create_graph=True)
    ye = model(xx).pow(2).sum() + xx.pow(3).sum()
    (g1e,) = torch.autograd.grad(ye, xx, create_graph=True)
    torch.testing.assert_close(g1, g1e)  # the first grad is right
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(g1.sum(), xx)


@pytest.mark.parametrize("entry", ["torch.compile", "luminal.compile"])
def test_weight_changed_between_forward_and_backward_raises(entry):
    model = _tanh_mlp()
    x = torch.randn(4, 3, requires_grad=True)
    compiled = _compiled(model, "numpy") if entry == "torch.compile" else luminal.compile(model, (x,), device="numpy")
    out = compiled(x).sum()
    with torch.no_grad():
        model[0].weight.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_saved_views_of_weights_are_torch_views(device):
    """A view of an input that aot_autograd's forward returns for the backward (here the batch
    flattened for the first linear layer; a transposed weight in HF models) is made in torch, as
    eager's view of the same tensor (no memory), not a copy luminal computes and keeps until the
    backward; the gradients stay eager's, and a weight changed in place between forward and
    backward still raises."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 5))
    eager = copy.deepcopy(model)
    x = torch.randn(2, 4, 6)
    graphs = []
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=lambda gm, ex: dynamo.backend(gm, ex, {"device": device, "strict": True},
                                                                          graphs=graphs))
    compiled(x).square().sum().backward()
    eager(x).square().sum().backward()
    assert_grads_equal(_grads(model), _grads(eager))
    forward = next(g for g in graphs if not g.name.endswith("_backward"))
    views = [(i, j, chain) for i, j, chain in forward.aliases if chain]
    assert forward.pruned and views, forward.aliases
    n_out = sum(1 for n in forward.graph.graph.nodes if n.op == "output")
    assert n_out == 1 and len(forward.graph.graph.output_node().args[0]) < len(forward.gm.graph.output_node().args[0])
    out = compiled(x).sum()
    with torch.no_grad():
        model[2].weight.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_luminal_compile_backward_is_compiled(device):
    """luminal.compile in grad mode: forward and backward both luminal's graphs, eager's gradients."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 4))
    eager = copy.deepcopy(model)
    x = torch.randn(3, 4)
    cm = luminal.compile(model, (x,), device=device)
    xx, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch._dynamo.reset()
    with runs_on_luminal(2) as served:
        (cm(xx) + xx).pow(2).sum().backward()
    (eager(xe) + xe).pow(2).sum().backward()
    assert _served_backward(served)
    assert_grads_equal({"x": xx.grad, **_grads(model)}, {"x": xe.grad, **_grads(eager)})
    report = str(cm.report())  # the export graph's report, then the grad-mode forward's and backward's
    assert report.count("luminal compile report") == 3 and "_backward" in report


def test_one_module_compiled_for_two_sizes_trains_at_both():
    """Two `luminal.compile`s of one module, each for its own static sizes, both called in grad
    mode: each grad-mode graph keeps its sizes static (Dynamo's cache is the module code's, shared
    by the two, and its automatic dynamic shapes made the second trace symbolic dims, where a max
    pool's indices raised UnsupportedError), with eager's outputs and gradients."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.MaxPool2d(3, 2, 1))
    eager = copy.deepcopy(model)
    torch._dynamo.reset()
    for shape in ((1, 2, 9, 13), (1, 2, 8, 20)):
        x = torch.randn(*shape)
        cm = luminal.compile(model, (x,), device="cpu")
        xx, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        for p in (*model.parameters(), *eager.parameters()):
            p.grad = None
        out = cm(xx)
        torch.testing.assert_close(out, eager(xe), rtol=1e-5, atol=1e-5)
        out.pow(2).sum().backward()
        eager(xe).pow(2).sum().backward()
        assert_grads_equal({"x": xx.grad, **_grads(model)}, {"x": xe.grad, **_grads(eager)})


# --- 30 AdamW steps against eager ----------------------------------------------------------------
def _gpt2(dropout: float):
    import transformers as T

    torch.manual_seed(0)
    cfg = T.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=64, resid_pdrop=dropout,
                       embd_pdrop=dropout, attn_pdrop=dropout, attn_implementation="sdpa")
    return T.GPT2LMHeadModel(cfg)


class _SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, padding=1, stride=2, bias=False), torch.nn.BatchNorm2d(16), torch.nn.SiLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))

    def forward(self, x, labels):
        return F.cross_entropy(self.body(x), labels)


def _training_setup(kind: str, dropout: float = 0.0):
    """(model in train mode, a function model -> loss of one fixed batch)."""
    g = torch.Generator().manual_seed(3)
    if kind == "cnn":
        x, labels = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
        return _SmallCNN().train(), lambda m: m(x, labels)
    ids = torch.randint(0, 256, (4, 12), generator=g)
    model = _gpt2(dropout) if kind == "gpt2" else make("llama")
    return model.train(), lambda m: m(input_ids=ids, labels=ids).loss


def _train(model, loss_of, steps: int, compiled=None):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, grads = [], []
    for _ in range(steps):
        loss = loss_of(compiled if compiled is not None else model)
        loss.backward()
        losses.append(loss.item())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        opt.step()
        opt.zero_grad()
    return losses, grads


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["llama", "gpt2", "cnn"])
def test_thirty_adamw_steps_match_eager(kind, device):
    """Every step's loss within 1e-5 relative, every gradient within 1e-5 of eager's (batch norm's
    running statistics updated as eager's too). The first step's gradients agree to ~1e-7 of their
    largest element; from then on Adam turns the last bits of gradients near zero into whole
    steps of the learning rate, so both runs drift apart (inductor's by as much), as any two
    correct implementations would, by an amount that depends on the CPU's kernels (up to 3.1e-5
    measured, llama's lm_head at step 30), so the bound after the first step is 5e-5 on every CPU. The convolutions before batch norm have no bias:
    batch norm cancels it, its gradient is rounding noise, and Adam would make the bias (and the
    running mean that includes it) a random walk."""
    model, loss_of = _training_setup(kind)
    eager = copy.deepcopy(model)
    fallbacks = len(dynamo.EAGER_FALLBACKS)
    with runs_on_luminal(60) as served:
        losses, grads = _train(model, loss_of, 30, _compiled(model, device))
    assert len(dynamo.EAGER_FALLBACKS) == fallbacks
    assert sum(name.endswith("_backward") for name in served) >= 30
    want_losses, want_grads = _train(eager, loss_of, 30)
    for step, (got, want, g, w) in enumerate(zip(losses, want_losses, grads, want_grads)):
        assert abs(got - want) <= 1e-5 * abs(want), f"step {step}: loss {got} against eager's {want}"
        assert_grads_equal(g, w, rtol=0, atol=5e-5) if step else assert_grads_equal(g, w)
    assert losses[-1] < losses[0]
    for (name, b), (_, be) in zip(model.named_buffers(), eager.named_buffers()):
        torch.testing.assert_close(b, be, rtol=1e-5, atol=1e-6, msg=name)


def test_backward_on_the_cuda_emulator():
    """The generated CUDA C of both graphs, run on the CPU by the emulator (grouped-query attention)."""
    pytest.importorskip("luminal.kernels.emulator")
    from luminal import devices

    try:
        devices.require("cuda-emulator")
    except luminal.DeviceError as exc:
        pytest.skip(str(exc))
    model, x = _attention("gqa")
    eager = copy.deepcopy(model)
    eager(x).backward()
    with runs_on_luminal(2) as served:
        _compiled(model, "cuda-emulator")(x).backward()
    assert _served_backward(served)
    assert_grads_equal(_grads(model), _grads(eager))


# --- dropout on: luminal's own random numbers ------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_dropout_backward_reads_the_forward_mask(device):
    """The backward scales by the very mask the forward drew (saved, never redrawn)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.25)).train()
    x = torch.randn(32, 64, requires_grad=True)
    with runs_on_luminal(2) as served:
        y = _compiled(model, device)(x)
        w = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
        (y * w).sum().backward()
    assert _served_backward(served)
    kept = y != 0
    assert 0.70 < kept.float().mean().item() < 0.80
    torch.testing.assert_close(x.grad, (w * kept / 0.75) @ model[0].weight, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(y[kept], (model[0](x) / 0.75)[kept], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_gpt2_with_dropout_trains_reproducibly(device):
    """GPT-2 with dropout 0.1, 30 AdamW steps: the loss falls, and the same seed gives the same
    losses bit for bit (the masks are drawn from luminal's Philox, seeded from torch's generator)."""
    runs = []
    for _ in range(2):
        model, loss_of = _training_setup("gpt2", dropout=0.1)
        torch.manual_seed(123)
        with runs_on_luminal(60) as served:
            losses, _ = _train(model, loss_of, 30, _compiled(model, device))
        assert sum(name.endswith("_backward") for name in served) >= 30
        runs.append(losses)
    assert runs[0] == runs[1]
    assert runs[0][-1] < 0.8 * runs[0][0]
    model, loss_of = _training_setup("gpt2", dropout=0.1)
    torch.manual_seed(124)
    other, _ = _train(model, loss_of, 3, _compiled(model, device))
    assert other != runs[0][:3]  # another seed, other masks
