"""A model whose inputs have symbolic dims compiles its first call's shapes static
(`frontends/onnx/first_shape.py`): that graph serves those shapes, the symbolic one every other,
each with the reference's values; options={"specialize": False} keeps the symbolic one."""

import threading

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import luminal.onnx as lo
from luminal.errors import LuminalError, OptionError
from luminal.hlir import symbolic as sym


def _depthwise(channels=16, side=64):
    """A depthwise 3x3 conv (pad 1) and a ReLU over a batch of symbolic size: the C reads the
    padding in place only where the sizes are known."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((channels, 1, 3, 3)).astype(np.float32), "w")
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], group=channels, pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             oh.make_node("Relu", ["c"], ["y"])]
    graph = oh.make_graph(nodes, "dw", [oh.make_tensor_value_info("x", TP.FLOAT, ["batch", channels, side, side])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, ["batch", channels, side, side])], [w])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8)


def _matmul():
    """A graph without windows: known sizes are not worth a second compile there."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    graph = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 8])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, ["n", 4])], [w])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8)


def _small():
    return _depthwise(channels=2, side=6)


@pytest.fixture(scope="module")
def small_ref():
    return lo.compile(_small(), device="numpy")


def _static(graph) -> bool:
    return all(sym.is_static(d) for n in [*graph.inputs, *graph.outputs] for d in n.shape)


@pytest.fixture(scope="module")
def depthwise():
    model = _depthwise()
    return model, lo.compile(model, device="numpy")


def test_the_first_shape_runs_a_static_graph_and_others_the_symbolic_one(depthwise):
    proto, ref = depthwise
    model = lo.compile(proto, device="cpu")
    rng = np.random.default_rng(2)
    first = rng.standard_normal((1, 16, 64, 64)).astype(np.float32)
    other = rng.standard_normal((3, 16, 64, 64)).astype(np.float32)
    first[0, 0, 0, :3] = [np.nan, np.inf, -0.0]
    np.testing.assert_allclose(model(first)[0], ref(first)[0], rtol=1e-5, atol=1e-5)
    static = model.graph_for({"x": first})
    assert static is not model.compiled and _static(static) and not _static(model.compiled)
    assert model.graph_for({"x": other}) is model.compiled
    np.testing.assert_allclose(model(other)[0], ref(other)[0], rtol=1e-5, atol=1e-5)
    for _ in range(3):  # bound after two calls of one signature: still the static graph's
        np.testing.assert_allclose(model(first)[0], ref(first)[0], rtol=1e-5, atol=1e-5)
    assert static.calls == 4 and model.compiled.calls == 1
    # what the sizes buy: the padded copy of x is read in place (absorbed), not written
    def copies(graph, absorbed):
        return sum(1 for s in graph.runtime.program.steps if s.output.op.name == "CONTIGUOUS" and s.absorbed == absorbed)
    assert copies(static, True) == 1 and copies(static, False) == 0
    assert copies(model.compiled, False) == 1
    notes = "\n".join(model.report().notes)
    assert "(x (1, 16, 64, 64)) compiled static" in notes


def test_specialize_false_keeps_the_symbolic_graph(depthwise):
    proto, ref = depthwise
    model = lo.compile(proto, device="cpu", options={"specialize": False})
    x = np.random.default_rng(3).standard_normal((2, 16, 64, 64)).astype(np.float32)
    np.testing.assert_allclose(model(x)[0], ref(x)[0], rtol=1e-5, atol=1e-5)
    assert model.graph_for({"x": x}) is model.compiled and model.compiled.calls == 1
    assert "compiled static" not in "\n".join(model.report().notes)


def test_the_option_is_checked():
    with pytest.raises(OptionError, match="specialize=1"):
        lo.compile(_matmul(), device="numpy", options={"specialize": 1})
    with pytest.raises(OptionError, match="'specialize'"):  # a misspelt key lists the options
        lo.compile(_matmul(), device="numpy", options={"specialise": False})


@pytest.mark.parametrize("device, proto", [("numpy", _small), ("cpu", _matmul)])
def test_the_reference_runtime_and_graphs_without_windows_are_not_specialized(device, proto):
    """The NumPy device runs the same array calls at any size; a graph without windows (a
    MatMul) measured slower as often as faster with known sizes."""
    model = lo.compile(proto(), device=device)
    x = np.ones((2, 2, 6, 6) if proto is _small else (2, 8), np.float32)
    model(x)
    assert model._first is None
    assert model.graph_for({"x": x}) is model.compiled and model.compiled.calls == 1


def test_a_refused_call_is_not_the_first_shape():
    model = lo.compile(_small(), device="cpu")
    with pytest.raises(lo.OnnxInputError, match="dtype"):
        model(np.ones((5, 2, 6, 6), np.float64))
    with pytest.raises(lo.OnnxInputError, match="dim 1 must be 2"):
        model(np.ones((5, 3, 6, 6), np.float32))
    assert model._first.shapes is None
    x = np.ones((2, 2, 6, 6), np.float32)
    model(x)
    assert model._first.shapes == ((2, 2, 6, 6),)


def test_a_size_zero_call_is_not_the_first_shape(small_ref):
    model, ref = lo.compile(_small(), device="cpu"), small_ref
    empty = np.zeros((0, 2, 6, 6), np.float32)
    assert model(empty)[0].shape == (0, 2, 6, 6)
    x = np.random.default_rng(4).standard_normal((5, 2, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(model(x)[0], ref(x)[0], rtol=1e-5, atol=1e-6)
    assert _static(model.graph_for({"x": x})) and model.graph_for({"x": x}) is not model.compiled


def test_a_failed_static_build_is_noted_and_the_symbolic_graph_serves(monkeypatch, small_ref):
    model = lo.compile(_small(), device="cpu")

    def fails(arrays):
        raise LuminalError("no static graph today")

    monkeypatch.setattr(model._first, "build", fails)
    x = np.random.default_rng(5).standard_normal((3, 2, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(model(x)[0], small_ref(x)[0], rtol=1e-5, atol=1e-6)
    assert model.graph_for({"x": x}) is model.compiled
    assert "did not compile static (LuminalError: no static graph today)" in "\n".join(model.report().notes)


def test_two_threads_calling_first_build_one_static_graph(small_ref):
    model = lo.compile(_small(), device="cpu")
    built = []
    build = model._first.build
    model._first.build = lambda arrays: built.append(1) or build(arrays)
    x = np.random.default_rng(6).standard_normal((6, 2, 6, 6)).astype(np.float32)
    want = small_ref(x)[0]
    results, start = [], threading.Barrier(2)

    def call():
        start.wait()
        results.append(model(x)[0])

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert built == [1] and len(results) == 2
    for r in results:
        np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-6)


def test_shapes_the_symbolic_graph_refuses_are_refused_before_a_static_build():
    """A slice of a 16-column table by the sequence length, then a depthwise conv (windows: the
    model specializes): seq <= 16 is the symbolic graph's assumption, checked before the first
    call's shapes compile (ONNX's Slice would clamp)."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(4, 16), "table"),
             numpy_helper.from_array(rng.standard_normal((4, 1, 3)).astype(np.float32), "w")]
    inits += [numpy_helper.from_array(np.array([v], np.int64), n) for v, n in ((0, "zero"), (1, "one"), (2, "two"))]
    nodes = [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Gather", ["s", "two"], ["n"], axis=0),
             oh.make_node("Slice", ["table", "zero", "n", "one"], ["t"]), oh.make_node("Add", ["x", "t"], ["a"]),
             oh.make_node("Conv", ["a", "w"], ["y"], group=4, pads=[1, 1], kernel_shape=[3])]
    graph = oh.make_graph(nodes, "pos", [oh.make_tensor_value_info("x", TP.FLOAT, [1, 4, "seq"])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, [1, 4, "seq"])], inits)
    proto = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8)
    model, ref = lo.compile(proto, device="cpu"), lo.compile(proto, device="numpy")
    assert model._first is not None
    too_long = np.ones((1, 4, 20), np.float32)
    with pytest.raises(lo.OnnxInputError, match="seq <= 16"):
        model(too_long)
    assert model._first.shapes is None  # not the first shape: nothing built for it
    x = rng.standard_normal((1, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(model(x)[0], ref(x)[0], rtol=1e-5, atol=1e-6)
    assert _static(model.graph_for({"x": x}))
    with pytest.raises(lo.OnnxInputError, match="seq <= 16"):
        model(too_long)
