"""Ops whose inputs have types of their own: BatchNormalization's X (T), scale and B (T1) and
statistics (T2) may differ (a float16 model that kept float32 statistics). Computed in the widest
of them, Y in X's type and the running statistics in theirs; against onnxruntime, or ONNX's
reference evaluator where onnxruntime has no kernel."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

import luminal.onnx as lo

RNG = np.random.default_rng(0)
TYPES = {np.float16: TP.FLOAT16, np.float32: TP.FLOAT, np.float64: TP.DOUBLE}


def _bn_model(x_type, param_type, stat_type, training: bool, stats_as_inputs: bool):
    shape = [2, 3, 4, 5]
    x = oh.make_tensor_value_info("X", TYPES[x_type], shape)
    outputs = [oh.make_tensor_value_info("Y", TYPES[x_type], shape)]
    if training:
        outputs += [oh.make_tensor_value_info(n, TYPES[stat_type], [3]) for n in ("rm", "rv")]
    params = {"s": (RNG.random(3) + 0.5).astype(param_type), "b": RNG.standard_normal(3).astype(param_type),
              "m": RNG.standard_normal(3).astype(stat_type), "v": (RNG.random(3) + 0.5).astype(stat_type)}
    inputs, inits, feeds = [x], [], {"X": RNG.standard_normal(shape).astype(x_type)}
    for name, value in params.items():
        if stats_as_inputs and name in ("m", "v"):
            inputs.append(oh.make_tensor_value_info(name, TYPES[stat_type], [3]))
            feeds[name] = value
        else:
            inits.append(numpy_helper.from_array(value, name))
    node = oh.make_node("BatchNormalization", ["X", "s", "b", "m", "v"], [o.name for o in outputs],
                        epsilon=1e-3, momentum=0.8, training_mode=int(training))
    graph = oh.make_graph([node], "bn", inputs, outputs, inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 15)], ir_version=8), feeds


def _want(model, feeds):
    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, feeds)
    except Exception:  # no onnxruntime kernel for this mix: the reference evaluator, in float64
        wide = {k: v.astype(np.float64) for k, v in feeds.items()}
        return ReferenceEvaluator(model).run(None, wide)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("stats_as_inputs", [False, True], ids=["constant stats", "stats fed"])
@pytest.mark.parametrize("types", [(np.float16, np.float32, np.float32), (np.float16, np.float16, np.float32),
                                   (np.float32, np.float32, np.float64)], ids=["f16/f32/f32", "f16/f16/f32", "f32/f32/f64"])
def test_batch_norm_with_mixed_types(types, stats_as_inputs, training, device):
    model, feeds = _bn_model(*types, training, stats_as_inputs)
    want = _want(model, feeds)
    got = lo.compile(model, device=device)(feeds)
    assert [g.dtype for g in got] == [np.dtype(t) for t in [types[0]] + [types[2]] * (2 * training)]
    for g, w in zip(got, want, strict=True):
        tol = 2e-3 if g.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(g.astype(np.float64), np.asarray(w, np.float64), atol=tol, rtol=tol)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("base_type", [np.int64, np.int32])
@pytest.mark.parametrize("exp_type", [np.float32, np.float64])
def test_pow_of_an_integer_base_by_a_float_exponent_truncates(base_type, exp_type, device):
    """Pow(T, T1) with T an integer: onnxruntime's static_cast of the float power (4 ** 1.5 = 8,
    2 ** 1.5 = 2.83 -> 2); integral exponents stay exact (3 ** 4 = 81)."""
    base = np.array([2, 4, 3, 7, 0, 1, 10, 5, 6, 9], base_type)
    exponent = np.array([1.5, 1.5, 4.0, 0.5, 2.0, 7.25, 3.0, 2.9, 0.0, 1.0 / 3], exp_type)
    graph = oh.make_graph([oh.make_node("Pow", ["b", "e"], ["y"])], "pow",
                          [oh.make_tensor_value_info("b", TP.INT64 if base_type is np.int64 else TP.INT32, [10]),
                           oh.make_tensor_value_info("e", TYPES[exp_type], [10])],
                          [oh.make_tensor_value_info("y", TP.INT64 if base_type is np.int64 else TP.INT32, [10])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 15)], ir_version=8)
    feeds = {"b": base, "e": exponent}
    want = _want(model, feeds)[0]
    np.testing.assert_array_equal(want, np.trunc(np.power(base.astype(np.float64), exponent.astype(np.float64))))
    got = lo.compile(model, device=device)(feeds)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
