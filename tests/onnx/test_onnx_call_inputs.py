"""The per-call path of a compiled model (`binding.bind_inputs`' per-node specs, the C runtime's
buffer addresses through ctypes views): inputs that are read-only, strided, 0-d, empty, lists or
subclasses give the NumPy runtime's results, and wrong ones raise the named errors."""

import numpy as np
import pytest
from graph_helpers import hammer
from onnx import TensorProto as TP
from onnx import helper as oh

import luminal.onnx as lo
from luminal.frontends.onnx.model import ARM_TRIES


def _model():
    nodes = [oh.make_node("Add", ["x", "s"], ["t"]), oh.make_node("Mul", ["t", "k"], ["y"]),
             oh.make_node("ReduceSum", ["y"], ["r"], keepdims=0)]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 3]),
                                       oh.make_tensor_value_info("s", TP.FLOAT, []),
                                       oh.make_tensor_value_info("k", TP.INT64, [])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, ["n", 3]), oh.make_tensor_value_info("r", TP.FLOAT, [])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8)
    return model


def _cast_mul():  # Mul needs one dtype: k cast to float inside
    model = _model()
    model.graph.node.insert(1, oh.make_node("Cast", ["k"], ["kf"], to=TP.FLOAT))
    model.graph.node[2].input[1] = "kf"
    return model


@pytest.fixture(scope="module")
def models():
    model = _cast_mul()
    return lo.compile(model, device="cpu"), lo.compile(model, device="numpy")


def _inputs():
    base = np.arange(24, dtype=np.float32).reshape(4, 6) - 7.5
    readonly = np.frombuffer(base.tobytes(), np.float32).reshape(8, 3)
    assert not readonly.flags.writeable
    return {
        "read-only": (readonly, np.float32(0.5), np.int64(3)),
        "strided": (base[:, ::2], np.array(-1.0, np.float32), np.array(2)),
        "transposed": (base[:3, :3].T, np.float32(2.0), np.int64(-1)),
        "empty": (np.zeros((0, 3), np.float32), np.float32(1.0), np.int64(1)),
        "lists": ([[1.0, -2.0, 3.0]], np.float32(0.25), np.int64(4)),
        "subclass": (np.ma.masked_array(base[:2, :3].copy()), np.float32(0.0), np.int64(5)),
    }


@pytest.mark.parametrize("case", list(_inputs()))
def test_unusual_inputs_match_the_reference(models, case):
    cpu, ref = models
    x, s, k = _inputs()[case]
    if case == "lists":
        x = np.asarray(x, np.float32).tolist()
        with pytest.raises(lo.InputError):  # a list converts to float64: the declared dtype is float32
            cpu(x, s, k)
        x = np.asarray(x, np.float32)
    got, want = cpu(x, s, k), ref(x, s, k)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6)
    np.testing.assert_allclose(got[0], (np.asarray(x) + s) * np.float32(k), rtol=1e-6)


def test_wrong_inputs_raise_named_errors(models):
    cpu, _ = models
    x = np.ones((2, 3), np.float32)
    with pytest.raises(lo.InputError, match="dtype"):
        cpu(x.astype(np.float64), np.float32(1), np.int64(1))
    with pytest.raises(lo.InputError, match="dim"):
        cpu(np.ones((2, 4), np.float32), np.float32(1), np.int64(1))
    with pytest.raises(lo.InputError):
        cpu(np.ones((2, 3, 1), np.float32), np.float32(1), np.int64(1))
    with pytest.raises(lo.InputError, match="missing"):
        cpu({"x": x, "s": np.float32(1)})
    # a later call with good inputs still runs (no state left behind by the failures)
    np.testing.assert_allclose(cpu(x, np.float32(1), np.int64(2))[0], np.full((2, 3), 4.0, np.float32))


def test_an_empty_call_leaves_the_dynamic_graph_in_place():
    cpu = lo.compile(_cast_mul(), device="cpu")  # a fresh model: the size-0 call first
    x = np.ones((2, 3), np.float32)
    empty = cpu(np.zeros((0, 3), np.float32), np.float32(1), np.int64(1))
    assert empty[0].shape == (0, 3) and empty[1] == 0
    np.testing.assert_allclose(cpu(x, np.float32(1), np.int64(2))[0], np.full((2, 3), 4.0, np.float32))
    assert cpu.compiled.inputs[0].shape[0] != 0  # the report/graph of the model is still the dynamic one


def test_inputs_found_while_compiling_do_not_compile_twice():
    """Tile by the shape of z, then by the shape of w: compiled per shape of both, found one at a
    time by retrying; the graph is stored under the key the next call computes, so that call
    does not build it again."""
    nodes = [oh.make_node("Shape", ["z"], ["sz"]), oh.make_node("Tile", ["x", "sz"], ["t"]),
             oh.make_node("Shape", ["w"], ["sw"]), oh.make_node("Tile", ["t", "sw"], ["y"])]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info(n, TP.FLOAT, [d]) for n, d in zip("xzw", "nmk")],
                          [oh.make_tensor_value_info("y", TP.FLOAT, ["a"])])
    cpu = lo.compile(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8), device="cpu")
    x, z, w = np.arange(3, dtype=np.float32), np.zeros(2, np.float32), np.zeros(4, np.float32)
    first = cpu(x, z, w)[0]
    assert set(cpu.shape_inputs) == {"z", "w"} and len(cpu._cache) == 1
    second = cpu(x, z, w)[0]
    assert len(cpu._cache) == 1 and cpu.compiled.calls == 2  # the same graph served both calls
    np.testing.assert_array_equal(first, np.tile(x, 8))
    np.testing.assert_array_equal(second, first)


def _scale_shift():
    """y = x * w + 1 and the row sums of y: x (n, 3), w (3,)."""
    one = oh.make_tensor("one", TP.FLOAT, [], [1.0])
    nodes = [oh.make_node("Mul", ["x", "w"], ["p"]), oh.make_node("Add", ["p", "one"], ["y"]),
             oh.make_node("ReduceSum", ["y", "axes"], ["r"], keepdims=0)]
    axes = oh.make_tensor("axes", TP.INT64, [1], [1])
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 3]),
                                       oh.make_tensor_value_info("w", TP.FLOAT, [3])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, ["n", 3]), oh.make_tensor_value_info("r", TP.FLOAT, ["n"])],
                          initializer=[one, axes])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8)


def _expect(x, w):
    y = np.asarray(x, np.float32) * np.asarray(w, np.float32) + np.float32(1)
    return y, y.sum(axis=1, dtype=np.float64)


def _check(got, x, w):
    y, r = _expect(x, w)
    np.testing.assert_array_equal(got[0], y)
    np.testing.assert_allclose(got[1], r, rtol=1e-6)
    assert got[0].dtype == np.float32 and got[1].dtype == np.float32


def test_a_signature_called_twice_is_bound_and_anything_else_takes_the_full_path():
    """The second call running with the same input dtypes and shapes binds the C for them
    (`model._Bound`); calls that differ in any way (shape, dtype, layout, names, type) take the
    full path, with its conversions and its errors, and the results are the same either way."""
    cpu = lo.compile(_scale_shift(), device="cpu")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((5, 3), np.float32), rng.standard_normal(3, np.float32)
    _check(cpu(x, w), x, w)
    assert cpu._bound is None  # one call: nothing bound yet
    _check(cpu({"x": x, "w": w}), x, w)
    assert cpu._bound is not None
    graph = cpu.graph_for({"x": x, "w": w})  # the first call's shapes' static graph (`first_shape.py`)
    calls = graph.calls
    first = cpu(x, w)
    x2 = rng.standard_normal((5, 3), np.float32)
    second = cpu({"w": w, "x": x2})  # a dict in another order, the same signature
    _check(first, x, w)  # not overwritten by the next call
    _check(second, x2, w)
    assert graph.calls == calls + 2  # the bound calls are counted (`luminal.stats()`)
    # another shape, another dtype, a strided view, a subclass, an extra or a missing name
    x3 = rng.standard_normal((7, 3), np.float32)
    _check(cpu(x3, w), x3, w)
    _check(cpu(x, w), x, w)
    strided = rng.standard_normal((5, 6), np.float32)[:, ::2]
    _check(cpu(strided, w), strided, w)
    _check(cpu(np.ma.masked_array(x), w), x, w)  # a subclass: converted on the full path
    readonly = np.frombuffer(x.tobytes(), np.float32).reshape(5, 3)
    _check(cpu(readonly, w), x, w)
    with pytest.raises(lo.InputError, match="dtype"):
        cpu(x.astype(np.float64), w)
    with pytest.raises(lo.InputError, match="dtype"):
        cpu(x, w.astype(">f4"))  # byte order is part of the dtype
    with pytest.raises(lo.InputError, match="unknown"):
        cpu({"x": x, "w": w, "z": w})
    with pytest.raises(lo.InputError, match="missing"):
        cpu({"x": x})
    with pytest.raises(lo.InputError):
        cpu(x)
    _check(cpu(x=x, w=w), x, w)
    _check(cpu(x, w), x, w)


def test_a_bound_model_follows_the_precision_and_serves_two_threads():
    from luminal.precision import set_precision

    graph = oh.make_graph([oh.make_node("MatMul", ["a", "b"], ["c"])], "g",
                          [oh.make_tensor_value_info("a", TP.FLOAT, ["n", 3]), oh.make_tensor_value_info("b", TP.FLOAT, [3, 1])],
                          [oh.make_tensor_value_info("c", TP.FLOAT, ["n", 1])])
    matmul = lo.compile(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8), device="cpu")
    a, b = np.array([[1e8, 1.0, -1e8]], np.float32), np.ones((3, 1), np.float32)  # 1 in float64, 0 or 1 in f32
    in_f32 = matmul(a, b)[0]
    np.testing.assert_array_equal(matmul(a, b)[0], in_f32)
    assert matmul._bound is not None
    previous = set_precision("float64")
    try:
        assert matmul(a, b)[0][0, 0] == 1.0  # computed at the precision set now, not the one bound
    finally:
        set_precision(previous)
    np.testing.assert_array_equal(matmul(a, b)[0], in_f32)
    cpu = lo.compile(_scale_shift(), device="cpu")
    rng = np.random.default_rng(1)
    inputs = [(rng.standard_normal((64, 3), np.float32), rng.standard_normal(3, np.float32)) for _ in range(2)]
    for xi, wi in inputs:
        cpu(xi, wi)
    hammer(lambda args: _check(cpu(*args), *args), [[args] * 200 for args in inputs])


def test_a_bound_bool_input_has_its_bytes_checked_every_call():
    """A bool array's bytes are checked every call, bound or not (`binding.proper_bools`): a 0/255
    mask reads as 1 in the C, as NumPy and torch read it."""
    graph = oh.make_graph([oh.make_node("Cast", ["b"], ["y"], to=TP.FLOAT)], "g",
                          [oh.make_tensor_value_info("b", TP.BOOL, ["n"])], [oh.make_tensor_value_info("y", TP.FLOAT, ["n"])])
    cpu = lo.compile(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8), device="cpu")
    good = np.array([True, False, True])
    cpu(good)
    cpu(good)
    assert cpu._bound is not None  # a mask is no reason to leave the fast path (a decoder's src_mask)
    raw = np.array([255, 0, 7], np.uint8).view(np.bool_)
    np.testing.assert_array_equal(cpu(raw)[0], [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(cpu(good)[0], [1.0, 0.0, 1.0])
    assert raw.view(np.uint8).tolist() == [255, 0, 7]  # the caller's array is not changed
    fresh = lo.compile(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8), device="cpu")
    for _ in range(3):  # bound while the mask holds 0/255 bytes: the same answer
        np.testing.assert_array_equal(fresh(raw)[0], [1.0, 0.0, 1.0])


def test_a_signature_that_binds_nothing_is_not_asked_at_every_call(monkeypatch):
    """`_arm` asks the graph to bind a signature for a few calls (the C may still be building),
    then no more: a graph that binds nothing (here, forced) costs its full path only."""
    cpu = lo.compile(_cast_mul(), device="cpu")
    x, s, k = np.ones((4, 3), np.float32), np.float32(1.0), np.int64(2)
    graph = cpu.graph_for({"x": x, "s": np.asarray(s), "k": np.asarray(k)})
    asked = []
    monkeypatch.setattr(graph, "bound_call", lambda feeds: asked.append(1))
    for _ in range(10):
        cpu(x, s, k)
    assert cpu._bound is None and len(asked) == ARM_TRIES


def test_a_model_compiled_per_shape_binds_each_signature():
    """x read only through its shape compiles per shape (`shape_inputs`): the graph a signature's
    shapes decide is bound as a plain model's is, and another shape takes the full path."""
    graph = oh.make_graph([oh.make_node("Shape", ["x"], ["s"]), oh.make_node("ConstantOfShape", ["s"], ["z"]),
                           oh.make_node("Add", ["z", "y"], ["out"])], "g",
                          [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 4]), oh.make_tensor_value_info("y", TP.FLOAT, [4])],
                          [oh.make_tensor_value_info("out", TP.FLOAT, ["n", 4])])
    cpu = lo.compile(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8), device="cpu")
    y = np.arange(4, dtype=np.float32)
    for n in (3, 3, 3, 5, 3):
        got = cpu(np.ones((n, 4), np.float32), y)[0]
        np.testing.assert_array_equal(got, np.broadcast_to(y, (n, 4)))
    assert cpu.shape_inputs == ("x",) and cpu._bound is not None and cpu._bound.sig[0][1] == (3, 4)
