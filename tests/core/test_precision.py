"""Precision is an option of a compile (`precision=`), with `luminal.set_precision` as the process
default read at each call, and every device honours it: at "float64" an f32 GEMM accumulates in
double and rounds once (bit-equal to torch's float64 product rounded to f32), at "float32" it does
not (a K=4096 dot product differs measurably)."""

import numpy as np
import pytest
import torch

import luminal as lm
from luminal import devices

DEVICES = ["numpy", "cpu", "cuda-emulator"]
M, K, N = 8, 4096, 16  # M <= 8: the GEMV rule's shapes too, which a widened GEMM must not skip


def _operands(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)


def _reference(a, b) -> tuple[np.ndarray, np.ndarray]:
    """(torch's float64 product rounded once to f32, the float64 product itself)."""
    exact = torch.from_numpy(a).double() @ torch.from_numpy(b).double()
    return exact.float().numpy(), exact.numpy()


def _graph() -> lm.Graph:
    g = lm.Graph()
    g.output(g.input("a", (M, K)).matmul(g.input("b", (K, N))), "c")
    return g


def _check(out: np.ndarray, precision: str, a, b) -> None:
    rounded, exact = _reference(a, b)
    if precision == "float64":
        np.testing.assert_array_equal(out, rounded)  # accumulated in double, rounded once
    else:
        assert not np.array_equal(out, rounded)  # f32 accumulation: K=4096 terms round measurably
        np.testing.assert_allclose(out, exact, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_a_compiles_precision_is_honoured_and_fixed(device):
    a, b = _operands()
    wide = _graph().compile(device=device, precision="float64")
    narrow = _graph().compile(device=device, precision="float32")
    assert wide.device.precision == "float64" and narrow.device.precision == "float32"
    assert wide.device.name == narrow.device.name == device
    previous = lm.set_precision("float32" if device == "numpy" else "float64")  # the opposite of neither's default
    try:
        for _ in range(3):  # kernel devices: eager, captured, replayed
            _check(wide(a=a, b=b)[0], "float64", a, b)
            _check(narrow(a=a, b=b)[0], "float32", a, b)
        lm.set_precision(None)
        _check(wide(a=a, b=b)[0], "float64", a, b)
        _check(narrow(a=a, b=b)[0], "float32", a, b)
    finally:
        lm.set_precision(previous)


@pytest.mark.parametrize("device", DEVICES)
def test_without_one_each_call_follows_set_precision(device):
    a, b = _operands(1)
    compiled = _graph().compile(device=device)
    default = devices.get(device).default_precision
    assert compiled.device.precision == default == ("float64" if device == "numpy" else "float32")
    _check(compiled(a=a, b=b)[0], default, a, b)
    previous = lm.set_precision("float64")
    try:
        assert compiled.device.precision == "float64"
        _check(compiled(a=a, b=b)[0], "float64", a, b)
        lm.set_precision("float32")
        _check(compiled(a=a, b=b)[0], "float32", a, b)
    finally:
        lm.set_precision(previous)


def test_the_kernel_runtime_says_how_it_widens():
    wide = _graph().compile(device="cuda-emulator", precision="float64")
    a, b = _operands()
    wide(a=a, b=b)
    assert "precision float64: f32 MatMuls as widened GEMMs" in str(wide.report())
    (seq,) = wide.runtime.sequences.values()
    assert [ln.extern[0].widened for ln in seq.launches if ln.extern is not None] == [True]


@pytest.mark.parametrize("bad", ["tf32", "highest", 64])
def test_a_bad_precision_is_an_option_error_before_any_work(bad):
    for compile_it in (lambda: _graph().compile(device="cpu", precision=bad),
                       lambda: lm.compile_graph(_graph(), device="numpy", precision=bad),
                       lambda: devices.resolve("numpy", bad)):
        with pytest.raises(lm.OptionError, match=rf"precision {bad!r}: expected one of \('float64', 'float32'\)"):
            compile_it()


class _Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        a, b = _operands(2)
        self.w = torch.nn.Parameter(torch.from_numpy(b.T.copy()))  # (N, K)
        self.x = torch.from_numpy(a)

    def forward(self, x):
        return torch.nn.functional.linear(x, self.w)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_the_torch_entry_points_take_it(precision):
    model = _Linear().eval()
    a, b = _operands(2)
    with torch.no_grad():
        exported = lm.compile(model, (model.x,), device="cpu", precision=precision)
        assert exported.device.precision == precision
        _check(exported(model.x).numpy(), precision, a, b)
        torch._dynamo.reset()
        dynamo = torch.compile(model, backend="luminal", options={"device": "cpu", "precision": precision,
                                                                  "strict": True})
        _check(dynamo(model.x).numpy(), precision, a, b)


def test_the_dynamo_backend_names_a_bad_precision():
    torch._dynamo.reset()
    model = _Linear().eval()
    with pytest.raises(Exception, match=r"precision 'tf32': expected one of"), torch.no_grad():
        torch.compile(model, backend="luminal", options={"precision": "tf32"})(model.x)
    with pytest.raises(lm.OptionError, match="precision 'tf32'"):
        lm.compile(model, (model.x,), precision="tf32")


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_the_onnx_entry_point_takes_it(precision):
    from onnx import TensorProto, helper, numpy_helper

    a, b = _operands(3)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])], "mm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [M, N])],
        initializer=[numpy_helper.from_array(b, "b")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = lm.onnx.compile(proto, device="cpu", precision=precision)
    assert compiled.device.precision == precision
    _check(compiled(a=a)[0], precision, a, b)
    with pytest.raises(lm.OptionError, match="precision 'tf32'"):
        lm.onnx.compile(proto, precision="tf32")


def test_two_models_in_one_process_keep_theirs_across_threads():
    """Two compiles of one graph at different precisions, called from two threads at once: each
    call computes at its model's precision (the precision is the call's, not a process global)."""
    import threading

    a, b = _operands(4)
    models = {p: _graph().compile(device="cpu", precision=p) for p in ("float64", "float32")}
    errors = []

    def run(p):
        try:
            for _ in range(20):
                _check(models[p](a=a, b=b)[0], p, a, b)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(p,)) for p in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_a_compile_cache_hit_computes_at_the_precision_asked(cache):
    """The precision is no part of the cache key (it is read at each call): a hit of an entry
    stored by a float32 compile runs at the float64 its compile asks for, and the other way."""
    model = _Linear().eval()
    a, b = _operands(2)
    with torch.no_grad():
        cold = lm.compile(model, (model.x,), device="cpu", precision="float32")
        _check(cold(model.x).numpy(), "float32", a, b)
        hit = lm.compile(model, (model.x,), device="cpu", precision="float64")
        assert hit.report().cache.get("exported program") == "hit", hit.report().cache
        _check(hit(model.x).numpy(), "float64", a, b)
        _check(cold(model.x).numpy(), "float32", a, b)


@pytest.mark.parametrize("device", ["cpu", "cuda-emulator"])
def test_load_takes_it(device, tmp_path):
    a, b = _operands(5)
    path = _graph().compile(device="numpy").save(tmp_path / "mm.lum")
    for precision in ("float64", "float32"):
        loaded = lm.load(path, device=device, precision=precision)
        assert loaded.device.precision == precision
        _check(loaded(a=a, b=b)[0], precision, a, b)
    with pytest.raises(lm.OptionError, match="precision 'tf32'"):
        lm.load(path, device=device, precision="tf32")


def test_a_layout_no_gemm_takes_accumulates_in_double_on_the_kernels():
    """An f32 MatMul whose operand no GEMM call describes (a view with no unit stride) runs the
    generated kernel: at "float64" its build accumulating in double, rounded once."""
    a, b = _operands(3)
    g = lm.Graph()
    wide_b = g.input("b", (K, 2 * N))
    g.output(g.input("a", (M, K)).matmul(wide_b[:, ::2]), "c")
    b2 = np.repeat(b, 2, axis=1)  # every other column is b
    for precision in ("float64", "float32"):
        cg = g.compile(device="cuda-emulator", precision=precision)
        _check(cg(a=a, b=b2)[0], precision, a, b)
        (matmul,) = cg.runtime.plan.launches
        (seq,) = cg.runtime.sequences.values()
        ran = [ln.name for ln in seq.launches]
        assert ran == ([matmul.wide.name] if precision == "float64" else [matmul.name])
