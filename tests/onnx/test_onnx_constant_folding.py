"""Subgraphs that depend only on constants are evaluated once, at import, as onnxruntime folds
them (`luminal/frontends/onnx/importer.py`, FOLD_LIMIT): a weight a model computes
(ConstantOfShape, as the ONNX suite's light models build theirs; DequantizeLinear of an int8
initializer; a transposed or cast initializer) compiles to the same kernels as the same weight
stored, and a broadcast constant (an Expand of a scalar into a large mask) stays a broadcast,
stored as its source."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import luminal.onnx as lo

RNG = np.random.default_rng(0)


def _model(nodes, inits, x_shape, y_rank=None, name="m"):
    y_shape = [f"y{i}" for i in range(len(x_shape) if y_rank is None else y_rank)]
    graph = oh.make_graph(nodes, name, [oh.make_tensor_value_info("x", TP.FLOAT, x_shape)],
                          [oh.make_tensor_value_info("y", TP.FLOAT, y_shape)], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def _steps(compiled) -> list[str]:
    """The kinds of the C steps a cpu model runs (the kernel names without their hashes)."""
    return [s.name.rsplit("_", 1)[0] for s in compiled.compiled.runtime.program.steps]


def _conv_weight(computed: bool, shape):
    """Conv weight nodes and initializers: ConstantOfShape(0.02) or the same values stored."""
    if computed:
        value = oh.make_tensor("v", TP.FLOAT, [1], [0.02])
        return ([oh.make_node("ConstantOfShape", ["wshape"], ["w"], value=value)],
                [nh.from_array(np.array(shape, np.int64), "wshape")])
    return [], [nh.from_array(np.full(shape, 0.02, np.float32), "w")]


@pytest.mark.parametrize("shape", [(8, 4, 3, 3), (256, 512, 3, 3)], ids=["small", "over_a_million"])
def test_constant_of_shape_weight_takes_the_stored_weight_path(shape, monkeypatch):
    monkeypatch.setenv("LUMINAL_TIERED", "0")
    x = RNG.standard_normal((1, shape[1], 6, 6)).astype(np.float32)
    got, steps = {}, {}
    for computed in (False, True):
        nodes, inits = _conv_weight(computed, shape)
        model = _model(nodes + [oh.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], inits, list(x.shape))
        cpu = lo.compile(model, device="cpu")
        got[computed] = cpu({"x": x})[0]
        steps[computed] = _steps(cpu)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(got[computed], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(lo.compile(model, device="numpy")({"x": x})[0], want, rtol=1e-5, atol=1e-5)
    assert steps[True] == steps[False]
    assert any(s.startswith("matmul") for s in steps[True])  # the GEMM of the im2col convolution
    assert got[True].tobytes() == got[False].tobytes()


def test_computed_gemm_weights_match_stored_ones(monkeypatch):
    """DequantizeLinear of an int8 initializer, then Transpose, feeding MatMul; and a cast
    initializer feeding Gemm: folded, so the kernels are those of the stored f32 weights."""
    monkeypatch.setenv("LUMINAL_TIERED", "0")
    q = RNG.integers(-128, 128, (48, 32), dtype=np.int8)
    scale, zero = np.float32(0.03), np.int8(3)
    w_f32 = ((q.astype(np.float32) - zero) * scale).T.copy()  # (32, 48)
    w2 = RNG.standard_normal((48, 16)).astype(np.float16)
    x = RNG.standard_normal((5, 32)).astype(np.float32)
    computed = _model(
        [oh.make_node("DequantizeLinear", ["q", "s", "z"], ["wq"]),
         oh.make_node("Transpose", ["wq"], ["w"], perm=[1, 0]),
         oh.make_node("MatMul", ["x", "w"], ["h"]),
         oh.make_node("Cast", ["w2h"], ["w2"], to=TP.FLOAT),
         oh.make_node("Gemm", ["h", "w2"], ["y"])],
        [nh.from_array(q, "q"), nh.from_array(np.array(scale), "s"), nh.from_array(np.array(zero), "z"),
         nh.from_array(w2, "w2h")], [5, 32])
    stored = _model(
        [oh.make_node("MatMul", ["x", "w"], ["h"]), oh.make_node("Gemm", ["h", "w2"], ["y"])],
        [nh.from_array(w_f32, "w"), nh.from_array(w2.astype(np.float32), "w2")], [5, 32])
    runs = {}
    for name, model in (("computed", computed), ("stored", stored)):
        cpu = lo.compile(model, device="cpu")
        runs[name] = (cpu({"x": x})[0], _steps(cpu))
    options = ort.SessionOptions()  # unoptimized: onnxruntime rewrites DequantizeLinear -> MatMul into a
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # dynamically quantized product
    want = ort.InferenceSession(computed.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(runs["computed"][0], want, rtol=1e-5, atol=1e-5)
    assert runs["computed"][1] == runs["stored"][1]
    assert runs["computed"][0].tobytes() == runs["stored"][0].tobytes()


def test_a_large_broadcast_constant_is_stored_as_its_source(tmp_path):
    """Expand of a scalar into a (1, 1, 2048, 2048) additive mask: folded to a broadcast view of
    one number, never a 16 MiB dense constant in the compiled model or its saved file."""
    n = 2048
    model = _model(
        [oh.make_node("Expand", ["zero", "mshape"], ["mask"]),
         oh.make_node("Add", ["x", "mask"], ["y"])],
        [nh.from_array(np.array(0.5, np.float32), "zero"), nh.from_array(np.array([1, 1, n, n], np.int64), "mshape")],
        [1, 1, n, n])
    x = RNG.standard_normal((1, 1, n, n)).astype(np.float32)
    for device in ("numpy", "cpu"):
        compiled = lo.compile(model, device=device)
        np.testing.assert_array_equal(compiled({"x": x})[0], x + np.float32(0.5))
        path = tmp_path / f"mask_{device}.lum"
        compiled.compiled.save(path)
        assert path.stat().st_size < 1 << 20


def test_folded_broadcast_values_are_read_only_views():
    """A folded ConstantOfShape read at compile time by another op (here Reshape's shape comes
    from a Shape of it, and Mul folds it again): values equal onnxruntime's."""
    model = _model(
        [oh.make_node("ConstantOfShape", ["cshape"], ["c"], value=oh.make_tensor("v", TP.FLOAT, [1], [-0.0])),
         oh.make_node("Mul", ["c", "c"], ["c2"]),
         oh.make_node("Shape", ["c2"], ["s"]),
         oh.make_node("Reshape", ["x", "s"], ["xr"]),
         oh.make_node("Sub", ["xr", "c2"], ["y"])],
        [nh.from_array(np.array([3, 4], np.int64), "cshape")], [12], y_rank=2)
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1, 2, 3, 4, 5, 6, 7], np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for device in ("numpy", "cpu"):
        got = lo.compile(model, device=device)({"x": x})[0]
        assert got.tobytes() == want.tobytes()
