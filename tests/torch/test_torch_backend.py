"""The torch.compile backend and luminal.compile: registration, options, errors, weights, shapes."""

import shutil
from importlib.metadata import entry_points

import numpy as np
import pytest
import torch
from graph_helpers import hammer
from torch_helpers import assert_same, runs_on_luminal

import luminal
from luminal.frontends.torch import dynamo
from luminal.hlir.ops import ConstantArray, Op


class Unsupported(torch.nn.Module):
    def forward(self, x):
        return torch.lgamma(x) + torch.digamma(x) + x.sin()


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("scale", torch.full((8,), 0.5))

    def forward(self, x):
        return {"y": self.lin(x).relu() * self.scale, "n": x.shape[0] * 2}


def test_entry_point_registered():
    names = [e.name for e in entry_points(group="torch_dynamo_backends")]
    assert "luminal" in names
    assert "luminal" in torch._dynamo.list_backends()
    assert luminal.backend is dynamo.backend


def test_strict_lists_every_unsupported_op():
    torch._dynamo.reset()
    x = torch.rand(3) + 1
    with pytest.raises(Exception) as info:
        torch.compile(Unsupported(), backend="luminal", options={"strict": True})(x)
    inner = getattr(info.value, "inner_exception", info.value)  # Dynamo wraps backend errors
    assert isinstance(inner, luminal.UnsupportedError)
    assert "lgamma.default" in str(inner) and "digamma.default" in str(inner)
    with pytest.raises(luminal.UnsupportedError, match="digamma.default, lgamma.default"):
        luminal.compile(Unsupported(), (x,))


def test_default_warns_and_runs_eagerly():
    torch._dynamo.reset()
    x = torch.rand(3) + 1
    with pytest.warns(UserWarning, match="running graph .* eagerly"):
        out = torch.compile(Unsupported(), backend="luminal")(x)
    torch.testing.assert_close(out, Unsupported()(x))


def test_unknown_option():
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown luminal backend option"):
        torch.compile(Small(), backend="luminal", options={"devise": "cpu"})(torch.randn(2, 8))


def test_weights_are_constants_sharing_memory():
    """Lifted parameters are loaded once as constants that alias the model's memory."""
    torch._dynamo.reset()
    model = Small()
    with torch.no_grad():
        fast = torch.compile(model, backend="luminal")
        out = fast(torch.randn(2, 8))
        graph = luminal.stats()["graphs_compiled"]
        compiled = [g for g in _compiled_graphs()][-1]
    assert graph >= 1
    consts = [n.arg.array for n in _nodes(compiled) if n.op is Op.CONSTANT and isinstance(n.arg, ConstantArray)]
    weight = model.lin.weight.detach().numpy()
    assert any(np.shares_memory(c, weight) for c in consts)
    for t in (model.lin.bias, model.scale):
        assert any(np.shares_memory(c, t.detach().numpy()) for c in consts)
    assert out["n"] == 4


def test_weight_update_is_seen():
    """Weights alias the model: an in-place update needs no recompilation; a new tensor rebuilds."""
    torch._dynamo.reset()
    model = Small()
    x = torch.randn(2, 8)
    with torch.no_grad():
        fast = torch.compile(model, backend="luminal", options={"strict": True})  # no eager fallback
        with runs_on_luminal(3):
            fast(x)
            model.lin.weight.mul_(2)
            assert_same(fast(x)["y"], model(x)["y"])
            model.lin.weight.data = torch.randn(8, 8)
            assert_same(fast(x)["y"], model(x)["y"])


def test_dynamo_graph_module_not_mutated():
    seen = []

    def spy(gm, example_inputs):
        code = gm.code
        fn = dynamo.backend(gm, example_inputs)
        seen.append((gm, code))
        return fn

    torch._dynamo.reset()
    x = torch.randn(2, 8)
    with torch.no_grad(), runs_on_luminal():
        out = torch.compile(Small(), backend=spy)(x)
    for gm, code in seen:
        assert gm.code == code
    assert out["n"] == 4


def test_dynamic_shapes_one_graph():
    torch._dynamo.reset()
    model = Small()
    before = luminal.stats()["graphs_compiled"]
    with torch.no_grad(), runs_on_luminal(4):
        fast = torch.compile(model, backend="luminal", dynamic=True)
        for n in (2, 5, 7, 3):
            x = torch.randn(n, 8)
            got = fast(x)
            assert_same(got, model(x))
    assert luminal.stats()["graphs_compiled"] - before == 1


def test_luminal_compile_dynamic_dims():
    model = Small()
    x = torch.randn(3, 8)
    with torch.no_grad():
        for dynamic in ({"x": {0: "batch"}}, {"x": [0]}, {"x": {0: torch.export.Dim("b")}}, True):
            cm = luminal.compile(model, (x,), dynamic=dynamic)
            for n in (3, 6, 2):
                xn = torch.randn(n, 8)
                assert_same(cm(xn), model(xn))
            if dynamic is not True and isinstance(dynamic["x"], list):  # Dim.DYNAMIC's inferred range starts at 2
                with pytest.raises(luminal.InputError, match="compiled for"):
                    cm(torch.randn(1, 8))


def test_repeated_calls_take_the_bound_c_and_leave_it_for_other_signatures():
    """From a signature's second call, `luminal.compile` calls the C bound to its dtypes and shapes
    (`Imported._bound_run`); a call of another shape, a non-contiguous input, an input changed in
    place and two threads calling at once each get eager's answer."""
    model = Small()
    with torch.no_grad():
        cm = luminal.compile(model, (torch.randn(3, 8),), dynamic={"x": {0: "batch"}}, device="cpu")
        x = torch.randn(3, 8)
        for _ in range(3):
            assert_same(cm(x), model(x))
        bound = cm._imported.__dict__.get("_bound")
        assert bound is not None and bound[3] is not None, "the third call of one signature runs the bound C"
        x.mul_(-2)  # the same tensor, new values
        assert_same(cm(x), model(x))
        for n in (5, 3, 5, 5, 3):
            xn = torch.randn(n, 8)
            assert_same(cm(xn), model(xn))
        wide = torch.randn(8, 6)
        assert_same(cm(wide.t()), model(wide.t()))  # a transposed view: borrowed as a contiguous copy
        assert_same(cm(x), model(x))

    def both(xi):  # grad mode is per thread: each call in no_grad, so it takes the bound C too
        with torch.no_grad():
            return cm(xi), model(xi)

    for pairs in hammer(both, [[torch.randn(3, 8) for _ in range(50)] for _ in range(2)]):
        for got, want in pairs:
            assert_same(got, want)


def test_compiled_model_api():
    model = Small()
    x = torch.randn(3, 8)
    cm = luminal.compile(model, (x,))
    assert isinstance(cm, luminal.CompiledModel)
    assert "ops:" in str(cm.report())
    assert cm.graph.op_counts()
    with pytest.raises(luminal.InputError):
        cm(torch.randn(4, 8))  # static shapes: compiled for batch 3


def test_grad_mode_forward_runs_on_luminal():
    """With grad enabled, luminal runs the forward and eager autograd the backward."""
    torch._dynamo.reset()
    model = Small()
    x = torch.randn(2, 8, requires_grad=True)
    with runs_on_luminal():
        out = torch.compile(model, backend="luminal", options={"strict": True})(x)["y"]
    assert out.grad_fn is not None
    (out.sin() + x).sum().backward()
    ref, xr = Small(), x.detach().clone().requires_grad_()
    (ref(xr)["y"].sin() + xr).sum().backward()
    torch.testing.assert_close(model.lin.weight.grad, ref.lin.weight.grad)
    torch.testing.assert_close(model.lin.bias.grad, ref.lin.bias.grad)
    torch.testing.assert_close(x.grad, xr.grad)


def test_input_mutation_written_back():
    class AddInPlace(torch.nn.Module):
        def forward(self, x, acc):
            acc.add_(x)
            return acc * 2

    x, acc = torch.randn(4), torch.zeros(4)
    cm = luminal.compile(AddInPlace(), (x, acc.clone()))
    out = cm(x, acc)
    torch.testing.assert_close(acc, x)
    torch.testing.assert_close(out, 2 * x)
    torch._dynamo.reset()
    acc2 = torch.zeros(4)
    with runs_on_luminal():
        out = torch.compile(AddInPlace(), backend="luminal", options={"strict": True})(x, acc2)
    torch.testing.assert_close(acc2, x)
    torch.testing.assert_close(out, 2 * x)


def _compiled_graphs():
    from luminal.compiler import STATS

    return STATS.compiled


def _nodes(compiled):
    from luminal.hlir.ops import toposort

    return toposort(compiled.outputs)



@pytest.mark.skipif(shutil.which("g++") is None, reason="the CUDA emulator needs g++")
def test_cuda_emulator_device():
    """The same frontend feeds the generated-CUDA runtime (compiled by g++ on the CPU)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).eval()
    x = torch.randn(3, 8)
    torch._dynamo.reset()
    with torch.no_grad():
        want = model(x)
        assert_same(luminal.compile(model, (x,), device="cuda-emulator")(x), want)
        with runs_on_luminal():
            fast = torch.compile(model, backend="luminal", options={"device": "cuda-emulator", "strict": True})
            assert_same(fast(x), want)


def test_dynamic_python_int_argument():
    """An int argument that varies becomes a SymInt placeholder; luminal binds it at call time."""

    class Scale(torch.nn.Module):
        def forward(self, x, n):
            return x * n + torch.arange(n).sum()

    torch._dynamo.reset()
    model, x = Scale(), torch.randn(4)
    fast = torch.compile(model, backend="luminal", options={"strict": True})
    before = luminal.stats()["graphs_compiled"]
    with runs_on_luminal(4):
        for n in (3, 4, 5, 9):
            assert_same(fast(x, n), model(x, n))
    assert luminal.stats()["graphs_compiled"] - before <= 2  # static n=3, then one dynamic graph
