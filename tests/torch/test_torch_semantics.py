"""torch semantics both entry points keep (issue 15): autograd, training mode, guards on
non-tensor arguments, mutated 0-d state, data-dependent control flow, rebound weights, and a
saved model that mutates a buffer called like the model after `luminal.load`."""

import copy
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from torch_helpers import assert_same, runs_on_luminal

import luminal
from luminal.frontends.torch.weight_watch import REBOUND_CHECK_EVERY


class Counter(torch.nn.Module):
    """A 0-d buffer updated in place at every call."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.tensor(0))
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        self.count += 1
        return self.lin(x) * self.count


def _inputs(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


# --- autograd --------------------------------------------------------------------------------
def test_luminal_compile_backward_matches_eager():
    """luminal runs the forward; the output joins the autograd graph (gradients for inputs and
    parameters are eager torch's), where it used to be cut from it without an error."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 4))
    x = _inputs(3, 4).requires_grad_()
    cm = luminal.compile(model, (x,))
    with runs_on_luminal():
        out = cm(x)
    assert out.grad_fn is not None
    (out + x).pow(2).sum().backward()
    got_x, got_w = x.grad.clone(), model[0].weight.grad.clone()
    x.grad = None
    model.zero_grad()
    (model(x) + x).pow(2).sum().backward()
    torch.testing.assert_close(got_x, x.grad)
    torch.testing.assert_close(got_w, model[0].weight.grad)
    with torch.no_grad():  # no grad wanted: a plain call
        assert cm(x).grad_fn is None
    from_program = luminal.compile(torch.export.export(model, (x,)))  # the backward runs ep.module()
    x.grad = None
    from_program(x).sin().sum().backward()
    got_x = x.grad.clone()
    x.grad = None
    model(x).sin().sum().backward()
    torch.testing.assert_close(got_x, x.grad)


def test_luminal_compile_backward_through_mutated_state():
    """Grad mode on a model that updates a buffer: the buffer is updated once per call (the joint
    graph runs once; it used to be refused), and the gradients are eager's."""
    torch.manual_seed(0)
    model, x = Counter(), _inputs(2, 4)
    eager = copy.deepcopy(model)
    cm = luminal.compile(model, (x,))
    for _ in range(2):
        xx, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        with runs_on_luminal(2):
            cm(xx).sin().sum().backward()
        eager(xe).sin().sum().backward()
        torch.testing.assert_close(xx.grad, xe.grad)
    assert int(model.count) == int(eager.count) == 2
    torch.testing.assert_close(model.lin.weight.grad, eager.lin.weight.grad)


# --- training mode ---------------------------------------------------------------------------
def test_dropout_in_training_runs_on_luminal_under_torch_compile():
    """Dropout in training mode compiles (luminal's Philox generator, `tests/torch/test_random_torch.py`):
    no eager fallback, strict or not; it drops about p of the values and scales the rest exactly."""
    from luminal.frontends.torch.dynamo import EAGER_FALLBACKS

    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.5)).train()
    x = _inputs(16, 64)
    fallbacks = len(EAGER_FALLBACKS)
    with torch.no_grad(), runs_on_luminal():
        out = torch.compile(model, backend="luminal", options={"strict": True})(x)
        dense = model[0](x)
    assert len(EAGER_FALLBACKS) == fallbacks
    kept = out != 0
    assert 0.4 < kept.float().mean() < 0.6
    assert_same(out[kept], (dense * 2.0)[kept])
    torch._dynamo.reset()
    model.eval()  # identity: luminal runs it
    with torch.no_grad(), runs_on_luminal():
        assert_same(torch.compile(model, backend="luminal", options={"strict": True})(x), model(x))


def test_luminal_compile_training_mode():
    """Dropout in training mode is compiled (random); batch norm's training mode is compiled, with a warning."""
    drop = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.1)).train()
    x = _inputs(256, 4)
    with torch.no_grad():
        out = luminal.compile(drop, (x,))(x)
        kept = out != 0
        assert 0.85 < kept.float().mean() < 0.95
        assert_same(out[kept], (drop[0](x) / 0.9)[kept])
    assert_same(luminal.compile(drop.eval(), (_inputs(2, 4),))(_inputs(2, 4)), drop(_inputs(2, 4)))
    bn = torch.nn.BatchNorm1d(4).train()
    x = _inputs(8, 4)
    with pytest.warns(UserWarning, match="training mode"):
        cm = luminal.compile(bn, (x,))
    ref = torch.nn.BatchNorm1d(4).train()
    with torch.no_grad():
        assert_same(cm(x), ref(x))  # batch statistics
    torch.testing.assert_close(bn.running_mean, ref.running_mean)


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("device", ["cpu", "numpy"])
def test_eval_batch_norm_is_torchs_cpu_formula(device, affine):
    """Eval-mode batch norm computes as torch's CPU kernel does: per channel alpha = weight /
    sqrt(var + eps) and beta = bias - mean * alpha, then x * alpha + beta (two operations an
    element, a convolution's epilogue; torch fuses each pair into one FMA, so its last bits may
    differ); without affine parameters, beta = 0 - mean * alpha (+0, never -0, at a zero mean:
    a -0 input gives +0, as torch's)."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(6, affine=affine).eval()
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_mean[0] = 0.0
        bn.running_var.uniform_(0.25, 4)
        if affine:
            bn.weight.uniform_(-2, 2)
            bn.bias.uniform_(-1, 1)
    x = torch.randn(2, 6, 5, 7)
    x[0, 0, 0, :5] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0])
    with torch.no_grad():
        got = luminal.compile(bn, (x,), device=device)(x)
        eager = bn(x)
    f = np.float32
    var, mean = bn.running_var.numpy(), bn.running_mean.numpy()
    alpha = f(1) / np.sqrt(var + f(bn.eps))
    if affine:
        alpha = alpha * bn.weight.detach().numpy()
    beta = (bn.bias.detach().numpy() - mean * alpha) if affine else (-(mean * alpha) + f(0))
    want = x.numpy() * alpha[:, None, None] + beta[:, None, None]
    # the last bit of alpha and beta may differ (constants folded at compile time round once)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-7)
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got.numpy()[zero]), np.signbit(want[zero]))
    torch.testing.assert_close(got, eager, rtol=2e-6, atol=1e-6, equal_nan=True)
    np.testing.assert_array_equal(np.signbit(got.numpy()[zero]), np.signbit(eager.numpy()[zero]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_eval_batch_norm_in_half_computes_in_float_and_rounds_once(dtype):
    """A half model's eval batch norm computes alpha, beta and x * alpha + beta in float and
    rounds once, as torch's CPU kernel does (its opmath): within one unit in the last place of
    eager everywhere (the half form rounded five times: two)."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(16).eval()
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.25, 4)
        bn.weight.uniform_(-2, 2)
        bn.bias.uniform_(-1, 1)
    bn = bn.to(dtype)
    x = (torch.randn(4, 16, 6, 6) * 3).to(dtype)
    with torch.no_grad():
        got = luminal.compile(bn, (x,))(x)
        eager = bn(x)
    assert got.dtype == dtype
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(got.float(), eager.float(), rtol=eps, atol=eps * 2.0**-14)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm_in_half_applies_weight_and_bias_in_float(dtype):
    """A half model's layer norm applies its weight and bias in float and rounds once, as torch's
    kernel does: within one unit of eager, and its mean error against float64 is eager's (rounding
    the normalized value to half first, ONNX's form, made it 1.3x eager's on this input)."""
    torch.manual_seed(0)
    ln = torch.nn.LayerNorm(64).eval()
    with torch.no_grad():
        ln.weight.uniform_(-2, 2)
        ln.bias.uniform_(-1, 1)
    ln = ln.to(dtype)
    x = (torch.randn(8, 16, 64) * 3).to(dtype)
    with torch.no_grad():
        got = luminal.compile(ln, (x,))(x)
        eager = ln(x)
        exact = torch.nn.functional.layer_norm(x.double(), (64,), ln.weight.double(), ln.bias.double())
    assert got.dtype == dtype
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(got.float(), eager.float(), rtol=eps, atol=eps * 2.0**-14)
    assert (got.double() - exact).abs().mean() <= (eager.double() - exact).abs().mean() * 1.05


# --- guards ----------------------------------------------------------------------------------
def test_non_tensor_arguments_are_guarded():
    class Scale(torch.nn.Module):
        def forward(self, x, k: int, mode: str = "mul"):
            return x * k if mode == "mul" else x + k

    x = _inputs(3)
    cm = luminal.compile(Scale(), (x, 2), {"mode": "add"})
    assert_same(cm(x, 2, mode="add"), x + 2)
    with pytest.raises(luminal.InputError, match=r"argument 'k' is 3; the model was compiled for k=2"):
        cm(x, 3, mode="add")
    with pytest.raises(luminal.InputError, match="mode"):
        cm(x, 2, mode="mul")
    with pytest.raises(luminal.InputError, match="compiled for k=2"):
        cm(x, 2.0, mode="add")  # torch.export compared to the int 2


# --- state -----------------------------------------------------------------------------------
def test_mutated_0d_buffer_under_torch_compile():
    """`self.count += 1` on a 0-d buffer: it stays 0-d, is updated each call, and is never frozen
    into a constant (the second call sees the first one's update)."""
    torch._dynamo.reset()
    model, ref, x = Counter(), Counter(), _inputs(2, 4)
    ref.load_state_dict(model.state_dict())
    fast = torch.compile(model, backend="luminal", options={"strict": True})
    with torch.no_grad(), runs_on_luminal(3):
        for _ in range(3):
            assert_same(fast(x), ref(x))
    assert model.count.shape == () and int(model.count) == 3
    cm = luminal.compile(model, (x,))
    with torch.no_grad():
        assert_same(cm(x), ref(x))
    assert model.count.shape == () and int(model.count) == 4


def test_0d_outputs_keep_their_shape():
    class Stats(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("offset", torch.tensor(1.5))

        def forward(self, x):
            return x.sum(), self.offset + 1, x * self.offset

    model, x = Stats(), _inputs(3)
    torch._dynamo.reset()
    with torch.no_grad(), runs_on_luminal():
        assert_same(torch.compile(model, backend="luminal", options={"strict": True})(x), model(x))
    assert_same(luminal.compile(model, (x,))(x), model(x))


# --- what torch.export cannot do -------------------------------------------------------------
def test_data_dependent_control_flow_is_a_named_error():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x + 1 if x.sum() > 0 else x - 1

    x = _inputs(4)
    with pytest.raises(luminal.UnsupportedError, match=r"(?s)data-dependent control flow.*backend=\"luminal\""):
        luminal.compile(Branchy(), (x,))
    torch._dynamo.reset()
    with torch.no_grad():  # Dynamo graph-breaks at the branch: both pieces still run
        assert_same(torch.compile(Branchy(), backend="luminal")(x), Branchy()(x))


def test_dynamic_dim_of_size_one_names_the_users_dim():
    model = torch.nn.Linear(4, 4)
    cm = luminal.compile(model, (_inputs(3, 4),), dynamic={"input": {0: "batch"}})
    with pytest.raises(luminal.InputError, match=r"\(batch\) is 1; .*batch in \[2, inf\].*specialises sizes 0 and 1"):
        cm(_inputs(1, 4))
    assert_same(cm(_inputs(5, 4)), model(_inputs(5, 4)))


# --- weights rebound after compiling ---------------------------------------------------------
@pytest.mark.parametrize("change", ["rebind", "double"])
def test_rebound_weights_warn(change):
    """torch.export's semantics: the compiled model keeps the tensors it was compiled with; a
    rebound parameter or a dtype conversion is detected at call time (at one call in
    REBOUND_CHECK_EVERY: the check reads every weight) and reported once."""
    model, x = torch.nn.Linear(4, 4), _inputs(2, 4)
    with torch.no_grad():
        cm = luminal.compile(model, (x,))
        want = model(x)
        model.weight.mul_(2)  # in place: seen, silently
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert_same(cm(x), model(x))
        want = model(x)
        if change == "rebind":
            model.weight = torch.nn.Parameter(torch.randn(4, 4))
        else:
            model.double()
        with pytest.warns(UserWarning, match=r"weight.* replaced or converted after luminal.compile") as seen:
            for _ in range(REBOUND_CHECK_EVERY):
                assert_same(cm(x), want)
        assert len([w for w in seen if "replaced or converted" in str(w.message)]) == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for _ in range(2 * REBOUND_CHECK_EVERY):
                cm(x)  # once


# --- saved models ----------------------------------------------------------------------------
def test_saved_model_with_mutated_buffer_keeps_its_signature(tmp_path):
    """luminal.load restores the call signature: the mutated buffer is state, not an argument."""
    model, ref, x = Counter(), Counter(), _inputs(2, 4)
    ref.load_state_dict(model.state_dict())
    with torch.no_grad():
        cm = luminal.compile(model, (x,))
        assert_same(cm(x), ref(x))
        path = cm.save(tmp_path / "counter.lum")
        loaded = luminal.load(path)
        for _ in range(2):  # the saved count (1), then the loaded model's own updates
            assert_same(loaded(x), ref(x))
        assert_same(loaded(x=x), ref(x))
    assert int(loaded.state["count"]) == 4 and int(model.count) == 1  # the loaded copy has its own state
    with pytest.raises(luminal.InputError, match=r"missing argument\(s\) \['x'\]"):
        loaded()
    raw = loaded({"x": x.numpy(), "b_count": torch.tensor(7).numpy()})  # the graph's own convention
    assert len(raw) == len(loaded.output_names)


def test_saved_model_structure_and_guards(tmp_path):
    class Two(torch.nn.Module):
        def forward(self, x, k: int, acc):
            acc.add_(x)
            return {"y": x * k, "n": x.shape[0]}

    x = _inputs(3)
    cm = luminal.compile(Two(), (x, 2, torch.zeros(3)))
    loaded = luminal.load(cm.save(tmp_path / "two.lum"))
    assert repr(loaded).endswith(" on cpu>")
    acc = torch.zeros(3)
    assert_same(loaded(x, 2, acc), {"y": x * 2, "n": 3})
    torch.testing.assert_close(acc, x)  # the input mutation is written back
    with pytest.raises(luminal.InputError, match="compiled for k=2"):
        loaded(x, 3, acc)


def test_loaded_model_runs_without_torch(tmp_path):
    """No torch at load time: the signature and state still hold; outputs are NumPy, flat."""
    model, x = Counter(), _inputs(2, 4)
    with torch.no_grad():
        path = luminal.compile(model, (x,)).save(tmp_path / "counter.lum")
        want = model.lin(x) * 2  # the second call: count 0 -> 1 -> 2
    np.save(tmp_path / "x.npy", x.numpy())
    code = f"""
import sys
sys.modules["torch"] = None  # import torch fails
import numpy as np
import luminal
m = luminal.load({str(path)!r})
x = np.load({str(tmp_path / "x.npy")!r})
m(x)
(out,) = m(x=x)
np.save({str(tmp_path / "out.npy")!r}, out)
print(type(out).__name__, int(m.state["count"]))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["ndarray", "2"]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want.numpy(), rtol=1e-5, atol=1e-5)


# --- the one bf16 <-> torch conversion -------------------------------------------------------
def test_torch_arrays_round_trip():
    from luminal.runtime.torch_arrays import numpy_to_torch, torch_to_numpy

    for t in (torch.randn(3, 4).to(torch.bfloat16), torch.tensor(1.5, dtype=torch.bfloat16), torch.arange(6).reshape(2, 3).t(),
              torch.tensor(True)):
        a = torch_to_numpy(t)
        assert a.shape == tuple(t.shape) and a.dtype == (luminal.bf16.numpy if t.dtype == torch.bfloat16 else t.numpy().dtype)
        back = numpy_to_torch(a)
        assert back.dtype == t.dtype and torch.equal(back, t)
    ro = torch_to_numpy(torch.ones(2, dtype=torch.bfloat16)).copy()
    ro.flags.writeable = False
    assert numpy_to_torch(ro).dtype == torch.bfloat16  # read-only: copied, never a warning


def test_bf16_model_both_entry_points():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SiLU()).to(torch.bfloat16).eval()
    x = _inputs(2, 8).to(torch.bfloat16)
    with torch.no_grad():
        want = model(x)
        assert_same(luminal.compile(model, (x,))(x), want, atol=2e-2, rtol=2e-2)
        torch._dynamo.reset()
        with runs_on_luminal():
            got = torch.compile(model, backend="luminal", options={"strict": True})(x)
        assert_same(got, want, atol=2e-2, rtol=2e-2)


class _ViewsOut(torch.nn.Module):
    def forward(self, x):
        z = x * 2
        return x.t(), z, x[1:], z.view(-1), z.t()[0], x.unsqueeze(0).expand(2, 3, 4)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("entry", ["torch.compile", "luminal.compile"])
def test_outputs_that_view_an_input_or_an_output_stay_views(entry, device):
    """As eager, inductor and torch.export's module: an output viewing an input or another output
    shares its memory, so an in-place change of either shows in it; and the views carry
    gradients back."""
    torch._dynamo.reset()
    x = torch.randn(3, 4)
    want = _ViewsOut()(x.clone())
    if entry == "torch.compile":
        out = torch.compile(_ViewsOut(), backend="luminal", options={"device": device})(x)
    else:
        out = luminal.compile(_ViewsOut(), (x.clone(),), device=device)(x)
    for got, w in zip(out, want, strict=True):
        torch.testing.assert_close(got, w, rtol=0, atol=0)
    x.add_(100)
    out[1].mul_(-1)
    torch.testing.assert_close(out[0], x.t(), rtol=0, atol=0)
    torch.testing.assert_close(out[2], x[1:], rtol=0, atol=0)
    torch.testing.assert_close(out[3], out[1].view(-1), rtol=0, atol=0)
    torch.testing.assert_close(out[4], out[1].t()[0], rtol=0, atol=0)
    torch.testing.assert_close(out[5][1], x, rtol=0, atol=0)

    torch._dynamo.reset()
    xe, xc = torch.randn(3, 4, requires_grad=True), None
    xc = xe.detach().clone().requires_grad_()
    weights = [torch.randn(o.shape, generator=torch.Generator().manual_seed(k)) for k, o in enumerate(want)]
    sum((o * w).sum() for o, w in zip(_ViewsOut()(xe), weights)).backward()
    if entry == "torch.compile":
        compiled = torch.compile(_ViewsOut(), backend="luminal", options={"device": device})
    else:
        compiled = luminal.compile(_ViewsOut(), (xc.detach(),), device=device)
    sum((o * w).sum() for o, w in zip(compiled(xc), weights)).backward()
    torch.testing.assert_close(xc.grad, xe.grad)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample(mode, device):
    """F.grid_sample (grid_sampler_2d/3d) on the sampler ONNX's GridSample uses,
    with a grid running past every border."""
    g = torch.Generator().manual_seed(3)
    for nd in (2, 3) if mode != "bicubic" else (2,):
        x = torch.randn((2, 3) + (5, 6, 4)[:nd], generator=g)
        grid = torch.rand((2,) + (4, 3, 2)[:nd] + (nd,), generator=g) * 2.6 - 1.3
        for padding in ("zeros", "border", "reflection"):
            for align in (False, True):
                def f(a, b, padding=padding, align=align):
                    return torch.nn.functional.grid_sample(a, b, mode=mode, padding_mode=padding, align_corners=align)

                torch._dynamo.reset()
                got = torch.compile(f, backend="luminal", options={"device": device, "strict": True})(x, grid)
                torch.testing.assert_close(got, f(x, grid), rtol=2e-5, atol=2e-5)
