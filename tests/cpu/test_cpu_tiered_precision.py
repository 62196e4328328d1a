"""The tiered first call (`luminal.kernels.cpu.tiered`) computes as the C does
(`NumpyRuntime(outputs, arithmetic=precision.C)`): it may differ from the later calls in the
last bits, never in overflow, underflow or NaN. With the reference's own float64 intermediates, `sqrt(x * x)` at
1e30 was 1e30 on the first call and inf (torch's answer) on every later one."""

import threading

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto as TP
from onnx import helper as oh

import luminal as lm
import luminal.onnx as lonnx
from luminal import precision
from luminal.errors import LuminalError
from luminal.kernels.cpu import build
from luminal.kernels.cpu import runtime as cpu_runtime
from luminal.precision import set_precision
from luminal.runtime import NumpyRuntime, bind_inputs

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


@pytest.fixture
def tiered_held(on, held):
    """Tiered on, a cold cache, and the C build held until the first call is over (so that
    call is the reference's, whatever the machine's speed): tests/cpu/conftest.py."""
    return held


def test_sqrt_of_a_square_overflows_on_the_first_call_as_on_later_ones(tiered_held):
    g = lm.Graph("sqrt_square")
    x = g.input("x", (6,))
    g.output((x * x).sqrt())
    compiled = g.compile(device="cpu")
    a = np.array([1e30, -1e30, 1e-30, 3.0, 1e20, -0.0], np.float32)
    first = compiled({"x": a})[0]
    assert compiled.runtime.reference_calls == 1
    tiered_held.set()
    later = [compiled({"x": a})[0] for _ in range(2)]
    assert compiled.runtime.reference_calls == 1
    want = torch.sqrt(torch.from_numpy(a) * torch.from_numpy(a)).numpy()
    assert want[0] == np.inf and want[2] == 0.0
    for got in (first, *later):
        np.testing.assert_array_equal(got, want)


def _lstm(seq="T", batch=2, size=3, hidden=4) -> onnx.ModelProto:
    rng = np.random.default_rng(5)

    def init(name, shape):
        return oh.make_tensor(name, TP.FLOAT, shape, (rng.standard_normal(shape) * 0.5).astype(np.float32).ravel())

    node = oh.make_node("LSTM", ["x", "W", "R", "B"], ["y", "y_h", "y_c"], hidden_size=hidden, direction="bidirectional")
    outs = [oh.make_tensor_value_info("y", TP.FLOAT, [seq, 2, batch, hidden])] + [
        oh.make_tensor_value_info(o, TP.FLOAT, [2, batch, hidden]) for o in ("y_h", "y_c")]
    graph = oh.make_graph([node], "lstm", [oh.make_tensor_value_info("x", TP.FLOAT, [seq, batch, size])], outs,
                          initializer=[init("W", [2, 4 * hidden, size]), init("R", [2, 4 * hidden, hidden]),
                                       init("B", [2, 8 * hidden])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)], ir_version=8)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("why", ["no compiler", "a failing compiler"])
def test_a_cpu_model_the_c_cannot_serve_computes_at_the_cs_precision(why, monkeypatch):
    """The NumPy runtime standing in for the C on `device="cpu"` (no compiler, a failing one)
    computes as the C does on every call, not at the reference's own float64."""
    if why == "no compiler":
        monkeypatch.setattr(build, "compiler", lambda: None)
    else:
        def fail(*args, **kwargs):
            raise build.CpuBuildError("cc: error: no such flag")

        monkeypatch.setattr(cpu_runtime, "CpuRuntime", fail)
    monkeypatch.setattr(cpu_runtime, "_warned", set())
    g = lm.Graph("sqrt_square_fallback")
    x = g.input("x", (3,))
    g.output((x * x).sqrt())
    with pytest.warns(RuntimeWarning, match="NumPy reference runtime"):
        compiled = g.compile(device="cpu")
        got = [compiled({"x": np.array([1e30, 1e-30, 3.0], np.float32)})[0] for _ in range(2)]
    assert isinstance(compiled.runtime, NumpyRuntime) and compiled.runtime.arithmetic is precision.C
    for y in got:
        np.testing.assert_array_equal(y, np.array([np.inf, 0.0, 3.0], np.float32))


def test_an_onnx_recurrence_first_call_is_the_third_within_rounding(tiered_held):
    """recurrence="auto": the first length compiles unrolled; its first call is the reference's,
    the third the C's: the same NaN and infinities, the finite values within rounding."""
    compiled = lonnx.compile(_lstm(), device="cpu")
    x = np.random.default_rng(6).standard_normal((5, 2, 3)).astype(np.float32)
    x[1, 0, 0], x[2, 1, 2], x[3, 0, 1] = 1e30, np.nan, -3e38
    threading.Timer(0.5, tiered_held.set).start()  # after the first call took the reference
    first = compiled({"x": x})
    (unrolled,) = compiled._unrolled.values()
    assert unrolled.runtime.reference_calls == 1
    compiled({"x": x})
    third = compiled({"x": x})
    assert unrolled.runtime.reference_calls == 1
    assert any(np.isnan(f).any() for f in first)
    for f, t in zip(first, third, strict=True):
        np.testing.assert_array_equal(np.isnan(f), np.isnan(t))
        np.testing.assert_array_equal(np.isposinf(f), np.isposinf(t))
        np.testing.assert_array_equal(np.isneginf(f), np.isneginf(t))
        np.testing.assert_allclose(f, t, rtol=1e-5, atol=1e-6)


# --- property: the first call's non-finite pattern is the C's ------------------------------
VALUES = np.array([3e38, -3e38, 1e38, 2e30, -1e30, 1e20, 1e-20, -1e-30, 1e-38, 1e-44, 0.0, -0.0, 1.0, -2.5,
                   90.0, -90.0, 100.0, 0.5], np.float32)
UNARY = {
    "square": lambda t: t * t, "sqrt": lambda t: t.sqrt(), "exp": lambda t: t.exp(), "log": lambda t: t.abs().log(),
    "recip": lambda t: t.reciprocal(), "tiny": lambda t: t * 1e-30, "huge": lambda t: t * 1e30,
    "sum": lambda t: t.sum(-1, keepdim=True) + t, "mean": lambda t: t.mean(-1, keepdim=True) * t,
    "softmax": lambda t: t.softmax(-1), "sigmoid": lambda t: t.sigmoid(), "tanh": lambda t: t.tanh(),
    # an intermediate past f32's range and back: inf or 0 in f32, finite in float64
    "norm": lambda t: (t * t).sqrt(), "explog": lambda t: t.exp().log(), "sqdiv": lambda t: (t * t) / t,
    "tinyback": lambda t: (t * t * t) / (t * t),
}
# no matmul: where a dot product holds inf and -inf products, an FMA-based BLAS (NumPy's
# OpenBLAS) keeps the exact product and returns inf where another (MKL, the C's when torch is
# loaded) returns NaN: the BLASes differ there, not the working precisions
BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b}


def _programs(n: int, seed: int = 0) -> list[list[tuple[str, str]]]:
    rng = np.random.default_rng(seed)
    names = [("u", k) for k in UNARY] + [("b", k) for k in BINARY]
    return [[names[i] for i in rng.integers(0, len(names), 3)] for _ in range(n)]


def _apply(program, x, y):
    t = x
    for kind, name in program:
        t = UNARY[name](t) if kind == "u" else BINARY[name](t, y)
    return t


def test_the_first_calls_non_finite_values_are_the_cs(tiered_held):
    programs = _programs(40)
    g = lm.Graph("edge_programs")
    x, y = g.input("x", (4, 4)), g.input("y", (4, 4))
    for p in programs:
        g.output(_apply(p, x, y))
    rng = np.random.default_rng(1)
    feeds = {k: rng.choice(VALUES, (4, 4)).astype(np.float32) for k in ("x", "y")}
    compiled = g.compile(device="cpu")
    first = compiled(feeds)
    assert compiled.runtime.reference_calls == 1
    tiered_held.set()
    c = compiled(feeds)
    assert sum(not np.isfinite(got).all() for got in c) >= 10  # the programs overflow, underflow and turn NaN
    for p, f, got in zip(programs, first, c, strict=True):
        for kind in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(kind(f), kind(got), err_msg=f"{kind.__name__} of {p}: first call vs C")


def test_the_c_arithmetic_is_the_runtimes_and_leaves_the_reference_default():
    """A reference runtime serving `cpu` (`precision.C`) computes elementwise math in f32 at
    either precision; device="numpy" keeps float64 intermediates."""
    g = lm.Graph()
    x = g.input("x", (2,))
    g.output((x * x).sqrt())
    outputs = g.compile(device="numpy").outputs
    rt, like_c = NumpyRuntime(outputs), NumpyRuntime(outputs, arithmetic=precision.C)
    arrays, bindings = bind_inputs(rt.inputs, {"x": np.array([1e30, 2.0], np.float32)})
    assert like_c.run(arrays, bindings)[0][0] == np.inf
    assert rt.run(arrays, bindings)[0][0] == np.float32(1e30)  # the spec's float64 intermediates
    previous = set_precision("float64")  # the C's elementwise math stays f32 under it too
    try:
        assert like_c.run(arrays, bindings)[0][0] == np.inf
        assert NumpyRuntime(outputs, arithmetic=precision.C.fixing("float64")).run(arrays, bindings)[0][0] == np.inf
    finally:
        set_precision(previous)
    with pytest.raises(LuminalError, match="arithmetic='cpu'"):
        NumpyRuntime(outputs, arithmetic="cpu")
