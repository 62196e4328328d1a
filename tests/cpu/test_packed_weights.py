"""Weights packed once (`CpuRuntime.pack_weights`, the prelude's `lum_gemm_fw`): a GEMM whose B is
a stored float32 weight reads it from panels packed on first use instead of packing it every
call. The answers are the unpacked runtime's bit for bit (the same chains of fused multiply-adds),
at every shape (edge panels, fewer rows than the packed path takes, a symbolic row count, a batch
against one weight), under two threads racing to pack; a weight changed in place is seen
(torch's version counter, or `weights_changed`); float64 precision and ONNX models too."""

import ctypes

import numpy as np
import pytest
import torch
from graph_helpers import hammer

import luminal as lm
from luminal.kernels.cpu import build, sgemm
from luminal.kernels.cpu.runtime import CpuRuntime

needs_own_sgemm = pytest.mark.skipif(build.compiler() is None or sgemm.isa() is None,
                                  reason="no C compiler, or a CPU without AVX-512 or AVX2: weights are never packed")


def _graph(rows, k, n, transposed, batch=None, bias=True, seed=0):
    """x (rows x k, or batch x rows x k) @ W (W stored as n x k and transposed, or k x n) [+ bias]."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    g = lm.Graph("packed")
    x = g.input("x", (rows, k) if batch is None else (batch, rows, k))
    y = x @ (g.constant(w).T if transposed else g.constant(w))
    g.output(y + g.constant(b) if bias else y, "y")
    return g, w, b


def _runtimes(g):
    outputs = g.compile(device="numpy").outputs  # the optimized graph, its runtime unused
    plain, packed = CpuRuntime(outputs), CpuRuntime(outputs)
    on = packed.pack_weights()
    assert on == packed.gemm.startswith("luminal")
    return plain, packed, on


def _used(runtime) -> int:
    """Entries of the runtime's table holding packed panels."""
    return int((runtime._pack[0][:-1].reshape(-1, 8)[:, 6] == 2).sum()) if runtime._pack is not None else 0


SHAPES = [  # rows, k, n: one panel, edge panels, K past one block, more rows than columns (rows split), few rows
    (32, 16, 32), (37, 100, 70), (128, 512, 1408), (64, 33, 1000), (300, 64, 40), (200, 700, 333), (5, 64, 96),
    (4, 64, 96), (20, 80, 6906), (16, 64, 96), (17, 64, 96)]


@needs_own_sgemm
@pytest.mark.parametrize("transposed", [True, False], ids=["linear", "plain"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_packed_bits_equal_unpacked(shape, transposed):
    rows, k, n = shape
    g, w, b = _graph(rows, k, n, transposed)
    plain, packed, on = _runtimes(g)
    x = np.random.default_rng(1).standard_normal((rows, k)).astype(np.float32)
    want = plain({"x": x})[0]
    for _ in range(2):  # the first call packs, the second reads the panels
        got = packed({"x": x})[0]
        np.testing.assert_array_equal(got, want)
    exact = x.astype(np.float64) @ (w.T if transposed else w).astype(np.float64) + b
    np.testing.assert_allclose(got, exact, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    # fewer rows: the few-rows loops or the BLAS, nothing packed; from 17 the SGEMM's (a transposed
    # weight: an OCR recognizer's 20 time steps), from 5 a plain weight's
    assert on and _used(packed) == (1 if rows > 16 or (rows > 4 and not transposed) else 0)


@needs_own_sgemm
def test_symbolic_rows_and_batch():
    g, w, _ = _graph("t", 96, 160, True, batch=3)
    plain, packed, _ = _runtimes(g)
    for rows in (2, 31, 32, 129):
        x = np.random.default_rng(rows).standard_normal((3, rows, 96)).astype(np.float32)
        np.testing.assert_array_equal(packed({"x": x})[0], plain({"x": x})[0])
    assert _used(packed) >= 1


@needs_own_sgemm
def test_two_threads_race_to_pack():
    g, _, _ = _graph(128, 256, 544, True)
    plain, packed, _ = _runtimes(g)
    xs = [np.random.default_rng(i).standard_normal((128, 256)).astype(np.float32) for i in range(6)]
    want = [plain({"x": x})[0] for x in xs]
    results = hammer(lambda i: packed({"x": xs[i]})[0], [list(range(6)), list(range(5, -1, -1))])
    for t, order in enumerate([range(6), range(5, -1, -1)]):
        for got, i in zip(results[t], order):
            np.testing.assert_array_equal(got, want[i])
    assert _used(packed) == 1


@needs_own_sgemm
def test_weights_changed_packs_anew():
    g, w, b = _graph(64, 48, 96, True)
    _, packed, _ = _runtimes(g)
    x = np.random.default_rng(2).standard_normal((64, 48)).astype(np.float32)
    first = packed({"x": x})[0]
    stored = next(a for a in packed._weights if a.shape == w.shape)  # read-only: written underneath
    doubled = np.ascontiguousarray(2 * w)
    ctypes.memmove(stored.ctypes.data, doubled.ctypes.data, w.nbytes)  # changed in place
    assert np.array_equal(packed({"x": x})[0], first)  # packed panels do not see it ...
    packed.weights_changed()  # ... until the owner says so
    np.testing.assert_allclose(packed({"x": x})[0], x @ doubled.T + b, rtol=1e-4, atol=1e-3)


@needs_own_sgemm
def test_float64_precision_is_not_packed():
    g, w, b = _graph(64, 300, 96, True)
    _, packed, _ = _runtimes(g)
    x = np.random.default_rng(3).standard_normal((64, 300)).astype(np.float32)
    previous = lm.set_precision("float64")
    try:
        got = packed({"x": x})[0]
    finally:
        lm.set_precision(previous)
    exact = x.astype(np.float64) @ w.T.astype(np.float64) + b
    np.testing.assert_allclose(got, exact, rtol=1e-6, atol=1e-6)  # float64's accuracy, not float32's
    assert _used(packed) == 0


@needs_own_sgemm
def test_switched_off(monkeypatch):
    monkeypatch.setenv("LUMINAL_PACK_WEIGHTS", "0")
    g, _, _ = _graph(64, 48, 96, True)
    runtime = CpuRuntime(g.compile(device="numpy").outputs)
    assert runtime.pack_weights() is False and runtime._pack is None


@needs_own_sgemm
def test_torch_inplace_weight_change_is_seen():
    """luminal.compile packs its linear layers' weights; torch's version counter tells it when one
    changed in place (no_grad updates, load_state_dict), so each call matches eager."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 96)).eval()
    x = torch.randn(128, 64)
    with torch.no_grad():
        cm = lm.compile(model, (x,))
        before = cm(x)
        torch.testing.assert_close(before, model(x))
        model[0].weight.mul_(-1.5)
        after = cm(x)
        torch.testing.assert_close(after, model(x))
        assert not torch.allclose(after, before)
        model.load_state_dict({k: torch.randn_like(v) for k, v in model.state_dict().items()})
        torch.testing.assert_close(cm(x), model(x), rtol=1e-4, atol=1e-3)  # N(0, 1) weights: outputs in the tens
        model[2].weight.data.mul_(0.5)  # past the version counter: seen once the user says so
        cm.weights_changed()
        torch.testing.assert_close(cm(x), model(x), rtol=1e-4, atol=1e-3)


@needs_own_sgemm
def test_torch_watches_the_packed_weights_and_sees_every_change():
    """Only the weights with packed copies are watched at each call (`WeightWatch.seen`);
    a weight changed in place right after its first packing, in the steady state, after a
    `weights_changed`, a tied weight, and an unpacked bias are each seen at the next call."""

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(64, 64), torch.nn.Linear(64, 64)
            self.b.weight = self.a.weight  # one storage, two layers

        def forward(self, x):
            return self.b(self.a(x).relu())

    torch.manual_seed(0)
    model, x = Tied().eval(), torch.randn(48, 64)
    with torch.no_grad():
        cm = lm.compile(model, (x,))
        torch.testing.assert_close(cm(x), model(x))  # the first call packs
        model.a.weight.mul_(-0.5)  # changed after its packing, before the packed set was read
        torch.testing.assert_close(cm(x), model(x))
        for _ in range(3):
            torch.testing.assert_close(cm(x), model(x))
        weights = cm._weights
        if weights.packed_generation() is not None:
            watched = {id(weights.versioned[i]) for i in weights.watched}
            assert id(model.a.weight) in watched, "the packed (tied) weight is watched"
            assert id(model.a.bias) not in watched, "a bias is read in place: not watched"
            assert len(weights.watched) < len(weights.versioned)
        for _ in range(3):  # the steady state: only the watched weights read
            model.b.weight.add_(0.25)  # the tied weight, through the other layer
            torch.testing.assert_close(cm(x), model(x))
            model.a.bias.mul_(2)
            torch.testing.assert_close(cm(x), model(x))
        cm.weights_changed()
        model.a.weight.mul_(3)  # right after a fresh table: before anything was packed into it
        torch.testing.assert_close(cm(x), model(x))
        model.a.weight.mul_(-1)
        torch.testing.assert_close(cm(x), model(x))
        small = torch.randn(3, 64)  # a signature whose few rows do not pack: the weights read in place
        ecm = lm.compile(model, (small,))
        model.a.weight.mul_(0.5)
        torch.testing.assert_close(ecm(small), model(small))
        torch.testing.assert_close(cm(x), model(x))


@needs_own_sgemm
def test_onnx_model_packs_its_initializers():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from luminal.frontends.onnx import compile as onnx_compile

    rng = np.random.default_rng(4)
    w = rng.standard_normal((80, 200)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 80])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 200])],
                              [numpy_helper.from_array(w, "w")])
    model = onnx_compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = rng.standard_normal((64, 80)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(model({"x": x})[0], x @ w, rtol=1e-4, atol=1e-4)
    runtime = model.compiled.runtime
    runtime = getattr(runtime, "_compiled", None) or runtime  # a tiered runtime's C
    assert _used(runtime) == 1
    assert onnx is not None


@needs_own_sgemm
def test_loaded_model_packs_its_weights(tmp_path):
    g, w, b = _graph(64, 80, 200, True)
    path = g.compile(device="cpu").save(tmp_path / "linear.lum")
    loaded = lm.load(path)
    x = np.random.default_rng(6).standard_normal((64, 80)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(loaded({"x": x})[0], x @ w.T + b, rtol=1e-4, atol=1e-4)
    runtime = getattr(loaded.runtime, "_compiled", None) or loaded.runtime  # a tiered runtime's C
    assert _used(runtime) == 1
