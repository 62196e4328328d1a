"""Map inputs (a Python dict per call, as onnxruntime's Python API takes one) into DictVectorizer
and CastMap, against onnxruntime: a skl2onnx DictVectorizer + LogisticRegression pipeline on
numpy and cpu, the ops node by node, and the errors for inputs of the wrong kind."""

import warnings

import numpy as np
import pytest
import skl2onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
from sklearn.feature_extraction import DictVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from test_sklearn import _ort

import luminal.onnx as lo
from luminal.frontends.onnx.errors import OnnxImportError, OnnxInputError

ML = "ai.onnx.ml"
RNG = np.random.default_rng(3)


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):  # ZipMap
            assert [list(r) for r in g] == [list(r) for r in w]
            np.testing.assert_allclose([list(r.values()) for r in g], [list(r.values()) for r in w], atol=1e-5, rtol=0)
        elif w.dtype == object or w.dtype.kind in "iu":
            assert g.dtype == w.dtype and g.shape == w.shape and g.tolist() == w.tolist()
        else:
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)


def _records(n):
    return [{k: float(RNG.standard_normal()) for k in RNG.choice(list("abcdefg"), RNG.integers(1, 5), replace=False)}
            for _ in range(n)]


@pytest.fixture(scope="module")
def pipeline():
    train = _records(80)
    y = [int(d.get("a", 0) + d.get("b", 0) - d.get("c", 0) > 0) + int(d.get("d", 0) > 1) for d in train]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = make_pipeline(DictVectorizer(sparse=False), LogisticRegression(max_iter=500)).fit(train, y)
        return skl2onnx.convert_sklearn(est, initial_types=[("input", DictionaryType(StringTensorType([1]), FloatTensorType([1])))])


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_dict_vectorizer_pipeline_equals_onnxruntime(pipeline, device):
    assert [n.op_type for n in pipeline.graph.node][0] == "DictVectorizer"
    compiled = lo.compile(pipeline, device=device)
    assert compiled.input_names == ["input"]
    rows = _records(12) + [{"a": 2.0, "unseen": 5.0}, {"zz": 1.0}]  # keys outside the vocabulary are dropped
    for row in rows:
        _same(compiled({"input": row}), _ort(pipeline, {"input": row}))
    _same(compiled(rows[0]), _ort(pipeline, {"input": rows[0]}))  # the dict positionally


def _map_model(node, key, value, out_elem):
    inp = oh.make_value_info("m", oh.make_map_type_proto(key, oh.make_tensor_type_proto(value, [1])))
    graph = oh.make_graph([node], "t", [inp], [oh.make_tensor_value_info("y", out_elem, [1, None])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(ML, 1)], ir_version=9)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_dict_vectorizer_int64_keys(device):
    node = oh.make_node("DictVectorizer", ["m"], ["y"], int64_vocabulary=[3, 1, 7, 1], domain=ML)
    model = _map_model(node, TP.INT64, TP.FLOAT, TP.FLOAT)
    compiled = lo.compile(model, device=device)
    for m in ({1: 1.5, 9: 2.0}, {3: -1.0, 7: 0.25, 1: 4.0}, {np.int64(7): 2}):
        _same(compiled({"m": m}), _ort(model, {"m": m}))


def test_dict_vectorizer_string_values():
    # map(int64, string): onnxruntime's Python API cannot feed one; the missing entries are ""
    node = oh.make_node("DictVectorizer", ["m"], ["y"], int64_vocabulary=[3, 1, 7], domain=ML)
    got = lo.compile(_map_model(node, TP.INT64, TP.STRING, TP.STRING), device="numpy")({"m": {1: "x", 7: "y", 4: "z"}})
    assert got[0].dtype == object and got[0].tolist() == [["", "x", "y"]]


@pytest.mark.parametrize("form", ["DENSE", "SPARSE"])
@pytest.mark.parametrize("cast_to, elem", [("TO_FLOAT", TP.FLOAT), ("TO_STRING", TP.STRING), ("TO_INT64", TP.INT64)])
def test_cast_map_equals_onnxruntime(form, cast_to, elem):
    node = oh.make_node("CastMap", ["m"], ["y"], cast_to=cast_to, map_form=form, max_map=6, domain=ML)
    model = _map_model(node, TP.INT64, TP.FLOAT, elem)
    m = {4: 2.5, 1: -1.75, 2: 3.0, 0: 1e-7}
    _same(lo.compile(model, device="numpy")({"m": m}), _ort(model, {"m": m}))


def test_map_inputs_of_the_wrong_kind_are_named_errors(pipeline):
    compiled = lo.compile(pipeline, device="numpy")
    for bad, what in (([{"a": 1.0}], "map: it takes one dict, not a list"), (np.ones(3, np.float32), "takes a dict"),
                      ({1: 2.0}, "key 1 is a int; the map's keys are strings"), ({"a": "x"}, "value of key 'a'")):
        with pytest.raises(OnnxInputError, match=what):
            compiled({"input": bad})
    ident = oh.make_node("Identity", ["m"], ["y"])
    with pytest.raises(OnnxImportError, match="Identity.*reads map input 'm'"):
        lo.compile(_map_model(ident, TP.STRING, TP.FLOAT, TP.FLOAT), device="numpy", check=False)
    seq = oh.make_value_info("s", oh.make_sequence_type_proto(
        oh.make_map_type_proto(TP.STRING, oh.make_tensor_type_proto(TP.FLOAT, [1]))))
    node = oh.make_node("DictVectorizer", ["s"], ["y"], string_vocabulary=["a"], domain=ML)
    model = oh.make_model(oh.make_graph([node], "t", [seq], [oh.make_tensor_value_info("y", TP.FLOAT, None)]),
                          opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(ML, 1)], ir_version=9)
    with pytest.raises(OnnxImportError, match="'s' is a sequence of maps"):
        lo.compile(model, device="numpy", check=False)
