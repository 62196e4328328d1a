"""Import cost over dynamic image dims: a stride-2 conv stack makes each dim a nested floor()
(PaddleOCR's and YOLO's height and width), and every view of such a tensor (an unsqueeze inside
Clip's maximum, a reshape) divides those dims. sympy cancels equal factors as it builds the
quotient; `exact_div` used to `simplify` it anyway, which took minutes over PaddleOCR's graphs.
A quotient that is not an integer (YOLO's nearest 2x upsampling reshapes H into 2H) is refused
at a sample binding before sympy is asked."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import sympy
from onnx import TensorProto, helper, numpy_helper

import luminal.onnx as lo
from luminal.hlir import symbolic as sym


@pytest.fixture
def no_simplify(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("sympy.simplify called on a quotient sympy had already cancelled")

    monkeypatch.setattr(sympy, "simplify", refuse)


def _nested(d, depth: int):
    for _ in range(depth):
        d = sym.norm(sympy.floor((sym.as_expr(d) - 1) / 2) + 1)
    return d


def test_exact_div_of_nested_floor_dims_cancels_without_simplify(no_simplify):
    h, w, c = _nested(sym.symbol("height"), 5), _nested(sym.symbol("width"), 5), sym.symbol("c")
    assert sym.equal(sym.exact_div(sym.product([c, h, w]), h), sym.product([c, w]))
    assert sym.equal(sym.exact_div(sym.product([4, h, w]), 2), sym.product([2, h, w]))


def test_exact_div_that_is_a_fraction_somewhere_is_refused_without_simplify(no_simplify):
    h = _nested(sym.symbol("height"), 5)
    assert sym.exact_div(h, sym.norm(2 * h)) is None
    assert sym.exact_div(sym.product([h, sym.symbol("width")]), sym.norm(h + 1)) is None


def test_exact_div_that_needs_simplify_still_decides():
    h = sym.symbol("height")
    assert sym.equal(sym.exact_div(sym.norm(2 * h + 2), 2), sym.norm(h + 1))
    assert sym.exact_div(h, 2) is None
    assert sym.exact_div(sym.norm(3 * h), sym.norm(2 * h)) is None


def _lcnet_like() -> onnx.ModelProto:
    """Five stride-2 convs on a dynamic (N, 3, H, W) image, each followed by Clip(0, 6) (relu6)
    and HardSwish, then global pooling and a flatten: PP-LCNet's pattern at the dims it makes."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    inits += [numpy_helper.from_array(np.array(0.0, np.float32), "lo"), numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    cin = 3
    for i in range(5):
        w = numpy_helper.from_array((rng.standard_normal((8, cin, 3, 3)) * 0.3).astype(np.float32), f"w{i}")
        inits.append(w)
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], strides=[2, 2], pads=[1, 1, 1, 1]),
                  helper.make_node("Clip", [f"c{i}", "lo", "hi"], [f"r{i}"]),
                  helper.make_node("HardSwish", [f"r{i}"], [f"h{i}"])]
        x, cin = f"h{i}", 8
    nodes += [helper.make_node("GlobalAveragePool", [x], ["g"]), helper.make_node("Flatten", ["g"], ["y"])]
    graph = helper.make_graph(nodes, "lcnet_like",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_conv_stack_with_clip_over_dynamic_dims_matches_onnxruntime(no_simplify):
    proto = _lcnet_like()
    model = lo.compile(proto, device="numpy")
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for shape in [(1, 3, 48, 96), (2, 3, 37, 64)]:
        x = rng.uniform(0, 1, shape).astype(np.float32)
        (got,), (want,) = model(x), sess.run(None, {"x": x})
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


def _fpn_like() -> onnx.ModelProto:
    """YOLOv8's neck at small scale: three stride-2 convs on a dynamic image, the deepest map
    upsampled 2x (nearest Resize) and concatenated with the one above it."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    nodes, x, cin = [], "x", 3
    for i in range(3):
        inits.append(numpy_helper.from_array((rng.standard_normal((4, cin, 3, 3)) * 0.3).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], strides=[2, 2], pads=[1, 1, 1, 1]))
        x, cin = f"c{i}", 4
    nodes += [helper.make_node("Resize", ["c2", "", "scales"], ["up"], mode="nearest"),
              helper.make_node("Concat", ["up", "c1"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "fpn_like",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8, None, None])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_nearest_upsampling_over_dynamic_dims_matches_onnxruntime(no_simplify):
    proto = _fpn_like()
    model = lo.compile(proto, device="numpy")
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for shape in [(1, 3, 64, 96), (2, 3, 32, 64)]:  # sizes where the 2x map lines up with the one above
        x = rng.uniform(0, 1, shape).astype(np.float32)
        (got,), (want,) = model(x), sess.run(None, {"x": x})
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


def test_sppf_max_pools_build_on_the_c_backend():
    """YOLOv8's SPPF: three chained 5x5 max pools (stride 1, pad 2). The unrolled window used to
    nest 25 type-generic max macros, which the C compiler could not expand (out of memory), so
    the cpu device fell back to the reference runtime."""
    import warnings

    nodes = [helper.make_node("MaxPool", [a], [b], kernel_shape=[5, 5], pads=[2, 2, 2, 2])
             for a, b in (("x", "p1"), ("p1", "p2"), ("p2", "p3"))]
    nodes.append(helper.make_node("Concat", ["x", "p1", "p2", "p3"], ["y"], axis=1))
    graph = helper.make_graph(nodes, "sppf", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 10, 12])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((1, 4, 10, 12)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the fallback to the reference runtime warns
        (got,) = lo.compile(proto, device="cpu")(x)
    (want,) = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got, want)


def test_an_input_read_only_through_its_shape_binds_its_dims():
    """Shape(x) -> Cast -> Mul: x itself drops out of the compiled graph, and with it the binding
    of its symbolic dim; the model compiles per shape of x instead (was: ShapeError 'n' not bound)."""
    from onnx import TensorProto as T
    from onnx import helper as h

    g = h.make_graph([h.make_node("Shape", ["x"], ["s"]), h.make_node("Cast", ["s"], ["sf"], to=T.FLOAT),
                      h.make_node("Mul", ["sf", "sf"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, ["n", 3])], [h.make_tensor_value_info("y", T.FLOAT, [2])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    compiled = lo.compile(model, device="numpy")
    for n in (5, 7, 5):
        np.testing.assert_array_equal(compiled({"x": np.zeros((n, 3), np.float32)})[0], np.array([n * n, 9], np.float32))
