"""The CPU kernels CNNs spend their non-GEMM time in, against the specification:

- compare-and-select loops (Relu, Clip, HardSwish, Max/Min, max pools) vectorize only under
  `-fno-trapping-math` (a compare may then be if-converted): the library built with the flag
  gives bit for bit what the one built without it gives (NaN, ±inf and -0.0 in the vector lanes
  and the scalar tail), and the NumPy runtime's NaNs and values (to rounding: the spec computes
  HardSwish in another order; Relu/Max of -0.0 is one of the signed zeros either way);
- concats copied row by row, short window rows as one flat plane, zero and -inf padding split
  into fill and copy: the NumPy runtime's bytes or values;
- inference BatchNormalization with constant statistics folded at import, as onnxruntime does.
"""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import luminal.onnx as lo
from luminal.kernels.cpu import build
from luminal.kernels.cpu.runtime import CpuRuntime

RNG = np.random.default_rng(0)
SHAPE = [1, 4, 20, 37]  # rows of 37: vector lanes and a scalar remainder


def _input():
    x = RNG.standard_normal(SHAPE).astype(np.float32) * 4
    flat = x.reshape(-1)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 3.0, -3.0, 6.0, -6.0], np.float32)
    idx = RNG.choice(flat.size, 400, replace=False)
    flat[idx] = np.resize(special, idx.size)
    flat[:10] = special  # the first lanes of the first vector
    flat[-10:] = special  # the scalar tail of the last row
    return x


NODES = [
    ("relu", [oh.make_node("Relu", ["x"], ["y"])]),
    ("clip", [oh.make_node("Clip", ["x", "lo", "hi"], ["y"])]),
    ("hard_swish", [oh.make_node("HardSwish", ["x"], ["y"])]),
    ("hard_sigmoid", [oh.make_node("HardSigmoid", ["x"], ["y"], alpha=0.2, beta=0.5)]),
    ("leaky_relu", [oh.make_node("LeakyRelu", ["x"], ["y"], alpha=0.1)]),
    ("max_min", [oh.make_node("Max", ["x", "x2"], ["t"]), oh.make_node("Min", ["t", "x3"], ["y"])]),
    ("max_pool", [oh.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]),
    ("relu_max_pool", [oh.make_node("Relu", ["x"], ["r"]),
                       oh.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])]),
]


@pytest.mark.parametrize("name,nodes", NODES, ids=[n for n, _ in NODES])
def test_compare_select_kernels_are_the_same_vectorized(name, nodes, monkeypatch):
    x = _input()
    feeds = {"x": x, "x2": np.flip(x, -1).copy(), "x3": np.roll(x, 3, -1)}
    used = {i for n in nodes for i in n.input}
    inputs = [oh.make_tensor_value_info(k, TP.FLOAT, SHAPE) for k in ("x", "x2", "x3") if k in used]
    inits = [oh.make_tensor("lo", TP.FLOAT, [], [-1.5]), oh.make_tensor("hi", TP.FLOAT, [], [2.5])] if "lo" in used else []
    graph = oh.make_graph(nodes, name, inputs, [oh.make_tensor_value_info("y", TP.FLOAT, ["n", "c", "h", "w"])], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    feeds = {k: v for k, v in feeds.items() if k in used}
    spec = lo.compile(model, device="numpy")(feeds)[0]
    compiled = lo.compile(model, device="cpu").compiled
    got = compiled(feeds)[0]
    assert "-fno-trapping-math" in build.flags()
    monkeypatch.setattr(build, "FLAGS", tuple(f for f in build.FLAGS if f != "-fno-trapping-math"))
    runtime = CpuRuntime(compiled.runtime.outputs)  # rendered and built afresh, without the flag
    assert runtime.library_path != compiled.runtime.library_path
    plain = runtime(feeds)[0]
    assert got.tobytes() == plain.tobytes()
    assert got.shape == spec.shape and got.dtype == spec.dtype
    assert np.array_equal(np.isnan(got), np.isnan(spec))
    np.testing.assert_allclose(got, spec, rtol=1e-6, atol=1e-6)


def _concat_model(axis, shapes, with_views):
    """Concat of three inputs along `axis`: the second read through a Transpose (its trailing
    dims not one run), the third through a Pad (a mask) when `with_views`."""
    nodes, names = [], ["a", "b", "c"]
    if with_views:
        nodes += [oh.make_node("Transpose", ["b"], ["bt"], perm=[0, 1, 3, 2]),
                  oh.make_node("Pad", ["c", "pads"], ["cp"], mode="constant")]
        names = ["a", "bt", "cp"]
    nodes.append(oh.make_node("Concat", names, ["y"], axis=axis))
    inputs = [oh.make_tensor_value_info(k, TP.FLOAT, s) for k, s in zip("abc", shapes)]
    inits = [oh.make_tensor("pads", TP.INT64, [8], [0, 0, 1, 0, 0, 0, 0, 0])] if with_views else []
    graph = oh.make_graph(nodes, "concat", inputs, [oh.make_tensor_value_info("y", TP.FLOAT, ["n", "c", "h", "w"])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


CONCATS = [  # (axis, shapes of a, b, c, Transpose/Pad in front)
    (1, [[2, 3, 5, 7], [2, 4, 5, 7], [2, 2, 5, 7]], False),
    (1, [[2, 3, 6, 6], [2, 4, 6, 6], [2, 2, 5, 6]], True),
    (2, [[2, 3, 6, 6], [2, 3, 6, 6], [2, 3, 4, 6]], True),
    (-1, [[2, 3, 5, 7], [2, 3, 5, 2], [2, 3, 5, 1]], False),
    (0, [[1, 3, 5, 7], [2, 3, 5, 7], [1, 3, 5, 7]], False),
]


@pytest.mark.parametrize("axis,shapes,with_views", CONCATS)
def test_concat_rows_copy_exactly(axis, shapes, with_views):
    """A concat copies: the C backend gives the NumPy runtime's bytes (NaN, -0.0 included)."""
    feeds = {k: RNG.standard_normal(s).astype(np.float32) for k, s in zip("abc", shapes)}
    feeds["a"].reshape(-1)[:3] = [np.nan, -0.0, -np.inf]
    model = _concat_model(axis, shapes, with_views)
    want = lo.compile(model, device="numpy")(feeds)[0]
    got = lo.compile(model, device="cpu")(feeds)[0]
    assert got.shape == want.shape and got.tobytes() == want.tobytes()


WINDOWS = [  # (node, input shape, weight shape): short output rows, computed as one flat run per plane
    (dict(op_type="Conv", group=8, pads=[2, 2, 2, 2]), [2, 8, 14, 14], [8, 1, 5, 5]),
    (dict(op_type="Conv", group=8, pads=[1, 1, 1, 1]), [1, 8, 7, 7], [8, 1, 3, 3]),
    (dict(op_type="Conv", group=4, pads=[0, 1, 0, 1]), [1, 8, 6, 9], [8, 2, 3, 3]),  # 2 channels per group, no row pad
    (dict(op_type="Conv", group=8, pads=[1, 1, 1, 1], strides=[2, 2]), [1, 8, 9, 9], [8, 1, 3, 3]),
    (dict(op_type="MaxPool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]), [1, 3, 13, 13], None),
    (dict(op_type="MaxPool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), [1, 3, 9, 9], None),
    (dict(op_type="AveragePool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0), [1, 3, 10, 10], None),
]


@pytest.mark.parametrize("attrs,shape,wshape", WINDOWS)
def test_short_window_rows_match_the_spec(attrs, shape, wshape):
    """Depthwise convs and pools on planes under 64 wide: each element in the same order of terms
    as the NumPy runtime (bytes equal for max; sums to rounding), NaN and inf included, a dynamic batch."""
    attrs = dict(attrs)
    op = attrs.pop("op_type")
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[[5, 77, 140]] = [np.nan, np.inf, -np.inf]
    names = ["x"] + (["w"] if wshape else [])
    inits = [oh.make_tensor("w", TP.FLOAT, wshape, RNG.standard_normal(wshape).astype(np.float32).ravel())] if wshape else []
    graph = oh.make_graph([oh.make_node(op, names, ["y"], **attrs)], "win",
                          [oh.make_tensor_value_info("x", TP.FLOAT, ["n", *shape[1:]])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, ["n", "c", "h", "w"])], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    want = lo.compile(model, device="numpy")({"x": x})[0]
    cpu = lo.compile(model, device="cpu")
    got = cpu({"x": x})[0]
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if op == "MaxPool":
        assert got.tobytes() == want.tobytes()
    more = np.concatenate([x, x[:1] * 2])  # another batch size: the same compiled graph
    got_more = cpu({"x": more})[0]
    assert got_more[:-1].tobytes() == got.tobytes()
    assert got_more[-1].tobytes() == cpu({"x": more[-1:]})[0][0].tobytes()


PADS = [  # (pads of a 4-d input, dtype): copies of a masked view, split per row into zeros / copy / zeros
    ([0, 0, 1, 1, 0, 0, 1, 1], TP.FLOAT),
    ([0, 0, 0, 2, 0, 0, 0, 3], TP.FLOAT),  # the last dim only
    ([1, 0, 2, 0, 0, 1, 0, 0], TP.FLOAT),  # rows only (batch, channel, height)
    ([0, 0, -1, 2, 0, 0, 1, -2], TP.FLOAT),  # a crop and a pad on the same dims
    ([0, 1, 1, 1, 0, 0, 1, 1], TP.INT64),
    ([0, 0, 1, 1, 0, 0, 1, 1], TP.BOOL),
]


@pytest.mark.parametrize("pads,elem", PADS)
def test_zero_padding_copies_the_spec_bytes(pads, elem):
    np_type = {TP.FLOAT: np.float32, TP.INT64: np.int64, TP.BOOL: np.bool_}[elem]
    x = (RNG.standard_normal([2, 3, 5, 7]) * 5).astype(np_type)
    if elem == TP.FLOAT:
        x.reshape(-1)[[0, 6, 40]] = [np.nan, -0.0, np.inf]
    graph = oh.make_graph([oh.make_node("Pad", ["x", "pads"], ["y"], mode="constant")], "pad",
                          [oh.make_tensor_value_info("x", elem, ["n", 3, 5, 7])],
                          [oh.make_tensor_value_info("y", elem, ["a", "b", "c", "d"])],
                          [oh.make_tensor("pads", TP.INT64, [8], pads)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    cpu = lo.compile(model, device="cpu")
    for feed in (x, x[:1]):  # two batch sizes, one compiled graph
        want = lo.compile(model, device="numpy")({"x": feed})[0]
        got = cpu({"x": feed})[0]
        assert got.shape == want.shape and got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("pads,ceil", [([1, 1, 1, 1], 0), ([0, 0, 0, 0], 1), ([1, 0, 0, 1], 1)])
def test_minus_inf_padding_of_max_pools(pads, ceil):
    """A max pool's -inf padding (a Select of the padded input and -inf under the pad's mask)
    copies row by row: the NumPy runtime's bytes, NaN and -inf in the input included."""
    x = RNG.standard_normal([2, 3, 12, 11]).astype(np.float32)
    x.reshape(-1)[[0, 11, 30, 131]] = [np.nan, -np.inf, -0.0, np.nan]
    node = oh.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=pads, ceil_mode=ceil)
    graph = oh.make_graph([node], "pool", [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 3, 12, 11])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, ["n", "c", "h", "w"])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    cpu = lo.compile(model, device="cpu")
    assert "a row of the padding" in cpu.compiled.runtime.source
    for feed in (x, x[1:]):
        want = lo.compile(model, device="numpy")({"x": feed})[0]
        assert cpu({"x": feed})[0].tobytes() == want.tobytes()


def test_batch_norm_with_constant_statistics_is_two_ops():
    """Inference BatchNormalization with initializer statistics: x * s + t with s and t folded at
    import (no kernels recomputing them per call), as onnxruntime folds them: its values, NaN and
    inf in x included; a negative variance and a zero one with epsilon 0 give NaN channels there
    (the unfolded formula gave +-inf where x != mean)."""
    ch = 6
    x = RNG.standard_normal([2, ch, 5, 7]).astype(np.float32)
    x.reshape(-1)[[0, 9, 50]] = [np.nan, np.inf, -np.inf]
    stats = {"scale": RNG.standard_normal(ch), "bias": RNG.standard_normal(ch), "mean": RNG.standard_normal(ch),
             "var": np.abs(RNG.standard_normal(ch)) + 0.1}
    stats["var"][4] = -1.0  # NaN
    stats["var"][5], stats["mean"][5] = 0.0, 0.0  # with epsilon 0: an infinite scale
    inits = [oh.make_tensor(k, TP.FLOAT, [ch], v.astype(np.float32)) for k, v in stats.items()]
    node = oh.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], epsilon=0.0)
    graph = oh.make_graph([node], "bn", [oh.make_tensor_value_info("x", TP.FLOAT, ["n", ch, 5, 7])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, ["n", ch, 5, 7])], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 15)], ir_version=8)
    cpu = lo.compile(model, device="cpu")
    got = cpu({"x": x})[0]
    assert len(cpu.compiled.runtime.program.steps) == 1  # one elementwise kernel, nothing per call for s and t
    spec = lo.compile(model, device="numpy")({"x": x})[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, spec, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # NaN and inf where onnxruntime has them
    assert np.isnan(got[:, 4]).all() and np.isnan(got[:, 5]).all()  # as onnxruntime: x * inf + (0 - 0 * inf)


def test_grouped_pointwise_conv_is_a_gemm_per_group():
    """ShuffleNet's 1x1 convolutions with 4 groups of 34 channels: a batched GEMM over the groups
    (a free view of the input), not a materialized product summed afterwards (which took 8x
    onnxruntime's time on the ONNX suite's light ShuffleNet); onnxruntime's values."""
    x = RNG.standard_normal([2, 136, 9, 11]).astype(np.float32)
    w = RNG.standard_normal([136, 34, 1, 1]).astype(np.float32)
    b = RNG.standard_normal([136]).astype(np.float32)
    node = oh.make_node("Conv", ["x", "w", "b"], ["y"], group=4)
    graph = oh.make_graph([node], "gconv", [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 136, 9, 11])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, ["n", 136, 9, 11])],
                          [oh.make_tensor("w", TP.FLOAT, w.shape, w), oh.make_tensor("b", TP.FLOAT, b.shape, b)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    cpu = lo.compile(model, device="cpu")
    np.testing.assert_allclose(cpu({"x": x})[0], want, rtol=1e-5, atol=1e-5)
    kinds = [s.name.rsplit("_", 1)[0] for s in cpu.compiled.runtime.program.steps]
    assert "matmul" in kinds and "kahansum" not in kinds and "mul" not in kinds, kinds
    np.testing.assert_allclose(lo.compile(model, device="numpy")({"x": x})[0], want, rtol=1e-5, atol=1e-5)
