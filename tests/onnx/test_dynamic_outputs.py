"""Ops whose output length depends on the data (NonZero, Compress, NonMaxSuppression; see
luminal/frontends/onnx/ops_dynamic.py): as a graph output the compiled graph returns a padded
value and a length and the model cuts it on the host (compiled once, whatever the data); read by
another node, the model compiles per value of the op's inputs. Checked against onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import luminal.onnx as lo

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=22):
    graph = oh.make_graph(nodes, "t", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_nonzero_output_is_cut_on_the_host_and_compiled_once(device):
    model = _model([oh.make_node("NonZero", ["x"], ["y"])], [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 3, 4])],
                   [oh.make_tensor_value_info("y", TP.INT64, [None, None])])
    m = lo.compile(model, device=device)
    compiled = m.compiled
    assert compiled is not None and not m.value_inputs
    for n, density in [(2, 0.3), (5, 0.0), (3, 1.0), (1, 0.5)]:
        x = (RNG.random((n, 3, 4)) < density).astype(np.float32) * RNG.standard_normal((n, 3, 4)).astype(np.float32)
        _same(m(x), [np.stack(np.nonzero(x)).astype(np.int64)])
    assert m.compiled is compiled  # the data never triggered a compile


def test_nonzero_of_a_scalar_and_of_bools():
    model = _model([oh.make_node("NonZero", ["x"], ["y"])], [oh.make_tensor_value_info("x", TP.BOOL, [])],
                   [oh.make_tensor_value_info("y", TP.INT64, [None, None])])
    m = lo.compile(model, device="numpy")
    for v in (True, False):
        _same(m(np.array(v)), _ort(model, {"x": np.array(v)}))


def test_a_node_reading_a_data_dependent_length_compiles_per_value():
    """NonZero -> Transpose -> Mul: the shape downstream depends on the data, so the model
    compiles per value of x (exact, as onnxruntime)."""
    model = _model([oh.make_node("NonZero", ["x"], ["nz"]), oh.make_node("Transpose", ["nz"], ["t"]),
                    oh.make_node("Mul", ["t", "two"], ["y"])],
                   [oh.make_tensor_value_info("x", TP.INT32, [4, 5])], [oh.make_tensor_value_info("y", TP.INT64, [None, None])],
                   inits=[("two", np.array(2, np.int64))])
    m = lo.compile(model, device="numpy")
    for _ in range(3):
        x = RNG.integers(0, 3, (4, 5)).astype(np.int32)
        _same(m(x), _ort(model, {"x": x}))
    assert m.value_inputs == ("x",)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress(axis):
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    n = x.size if axis is None else x.shape[axis]
    attrs = {} if axis is None else {"axis": axis}
    model = _model([oh.make_node("Compress", ["x", "c"], ["y"], **attrs)],
                   [oh.make_tensor_value_info("x", TP.FLOAT, [4, 5]), oh.make_tensor_value_info("c", TP.BOOL, [n - 1])],
                   [oh.make_tensor_value_info("y", TP.FLOAT, [None] if axis is None else [None, None])])
    m = lo.compile(model, device="numpy")
    for density in (0.5, 0.0, 1.0):
        c = RNG.random(n - 1) < density  # one shorter than the axis: selects among the leading slices
        _same(m(x, c), _ort(model, {"x": x, "c": c}))
    assert not m.value_inputs


def _boxes(b, n, center):
    """Clustered boxes (so that many overlap), some with flipped corners, some empty."""
    centers = RNG.random((b, 3, 2)) * 8
    pick = RNG.integers(0, 3, (b, n))
    c = np.take_along_axis(centers, pick[..., None], 1) + RNG.standard_normal((b, n, 2)) * 0.4
    wh = RNG.random((b, n, 2)) * 2 + 0.5
    wh[:, 0] = 0.0  # an empty box
    if center:
        return np.concatenate([c, wh], -1).astype(np.float32)
    lo_, hi_ = c - wh / 2, c + wh / 2
    boxes = np.concatenate([lo_[..., ::-1], hi_[..., ::-1]], -1)  # [y1, x1, y2, x2]
    flip = RNG.random((b, n)) < 0.3
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    return boxes.astype(np.float32)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("limit,iou,score", [(3, 0.5, 0.2), (100, 0.3, None), (1, 0.0, 0.5), (7, 0.7, 0.0)])
def test_non_max_suppression_matches_onnxruntime(center, limit, iou, score):
    """Two batches, three classes, 24 boxes, tied scores (rounded to tenths), every attribute."""
    b, cls, n = 2, 3, 24
    names = ["boxes", "scores", "limit", "iou"] + (["score"] if score is not None else [])
    inits = [("limit", np.array([limit], np.int64)), ("iou", np.array([iou], np.float32))]
    if score is not None:
        inits.append(("score", np.array([score], np.float32)))
    model = _model([oh.make_node("NonMaxSuppression", names, ["sel"], center_point_box=center)],
                   [oh.make_tensor_value_info("boxes", TP.FLOAT, [b, n, 4]),
                    oh.make_tensor_value_info("scores", TP.FLOAT, [b, cls, n])],
                   [oh.make_tensor_value_info("sel", TP.INT64, [None, 3])], inits=inits)
    m = lo.compile(model, device="numpy")
    for _ in range(2):
        boxes = _boxes(b, n, center)
        scores = np.round(RNG.random((b, cls, n)), 1).astype(np.float32)
        _same(m(boxes, scores), _ort(model, {"boxes": boxes, "scores": scores}))
    assert not m.value_inputs


def test_non_max_suppression_on_the_cpu_backend_and_dynamic_thresholds():
    """The C backend, thresholds given as run-time inputs, a symbolic number of boxes."""
    model = _model([oh.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "score"], ["sel"])],
                   [oh.make_tensor_value_info("boxes", TP.FLOAT, [1, "n", 4]),
                    oh.make_tensor_value_info("scores", TP.FLOAT, [1, 2, "n"]),
                    oh.make_tensor_value_info("iou", TP.FLOAT, [1]), oh.make_tensor_value_info("score", TP.FLOAT, [1])],
                   [oh.make_tensor_value_info("sel", TP.INT64, [None, 3])], inits=[("limit", np.array([4], np.int64))])
    m = lo.compile(model, device="cpu")
    for n, iou, score in [(16, 0.4, 0.3), (9, 0.6, 0.0)]:
        feeds = {"boxes": _boxes(1, n, 0), "scores": RNG.random((1, 2, n)).astype(np.float32),
                 "iou": np.array([iou], np.float32), "score": np.array([score], np.float32)}
        _same(m(feeds), _ort(model, feeds))


@pytest.mark.parametrize("axis,is_sorted,device", [(None, 1, "numpy"), (None, 0, "numpy"), (0, 1, "numpy"),
                                                   (1, 1, "numpy"), (-1, 1, "numpy"), (1, 0, "numpy"), (1, 0, "cpu")])
def test_unique_four_ragged_outputs(axis, is_sorted, device):
    """Y, indices, inverse_indices and counts as graph outputs, compiled once."""
    attrs = {"sorted": is_sorted} if axis is None else {"sorted": is_sorted, "axis": axis}
    model = _model([oh.make_node("Unique", ["x"], ["y", "i", "inv", "n"], **attrs)],
                   [oh.make_tensor_value_info("x", TP.FLOAT, [3, 6, 2])],
                   [oh.make_tensor_value_info("y", TP.FLOAT, [None] if axis is None else [None, None, None]),
                    *[oh.make_tensor_value_info(n, TP.INT64, [None]) for n in ("i", "inv", "n")]], opset=11)
    m = lo.compile(model, device=device)
    for _ in range(2):
        x = RNG.integers(0, 2, (3, 6, 2)).astype(np.float32)  # few distinct rows along every axis
        if axis is not None:
            x = np.take(x, RNG.integers(0, x.shape[axis], x.shape[axis]), axis=axis)  # repeated slices
        _same(m(x), _ort(model, {"x": x}))
    assert m.compiled is not None and not m.value_inputs


def test_nonzero_of_a_large_tensor_scans_in_log_steps():
    """262,144 elements: the positions come from a log-step prefix sum (a masked n x n
    triangle would need 2**36 elements)."""
    model = _model([oh.make_node("NonZero", ["x"], ["y"])], [oh.make_tensor_value_info("x", TP.BOOL, [512, 512])],
                   [oh.make_tensor_value_info("y", TP.INT64, [2, None])])
    x = RNG.random((512, 512)) < 0.01
    _same(lo.compile(model, device="numpy")(x), [np.stack(np.nonzero(x)).astype(np.int64)])


def test_a_subgraph_returning_a_data_dependent_length_compiles_per_value():
    """If branches that return NonZero's output: never a padded value, compiled per value."""
    then_g = oh.make_graph([oh.make_node("NonZero", ["x"], ["a"])], "then", [],
                           [oh.make_tensor_value_info("a", TP.INT64, [2, None])])
    else_g = oh.make_graph([oh.make_node("NonZero", ["x"], ["b0"]), oh.make_node("Neg", ["b0"], ["b"])], "else", [],
                           [oh.make_tensor_value_info("b", TP.INT64, [2, None])])
    model = _model([oh.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                   [oh.make_tensor_value_info("c", TP.BOOL, []), oh.make_tensor_value_info("x", TP.FLOAT, [3, 4])],
                   [oh.make_tensor_value_info("y", TP.INT64, [2, None])])
    m = lo.compile(model, device="numpy")
    for i in range(4):
        feeds = {"c": np.array(i % 2 == 0), "x": (RNG.random((3, 4)) < 0.4).astype(np.float32)}
        _same(m(feeds), _ort(model, feeds))
    assert "x" in m.value_inputs
