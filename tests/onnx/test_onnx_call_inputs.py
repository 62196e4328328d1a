"""The per-call path of a compiled model (`binding.bind_inputs`' per-node specs, the C runtime's
buffer addresses through ctypes views): inputs that are read-only, strided, 0-d, empty, lists or
subclasses give the NumPy runtime's results, and wrong ones raise the named errors."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import luminal.onnx as lo


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
