"""scikit-learn models through skl2onnx (default options, ZipMap included) and the ai.onnx.ml ops
they use, against onnxruntime: labels exactly, probabilities and scores within 1e-5, on the
NumPy runtime (the spec) and the C backend."""

import math
import warnings

import numpy as np
import onnxruntime as ort
import pytest
import skl2onnx  # a test dependency (pyproject's dev extra), as scikit-learn
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import (
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import MinMaxScaler, Normalizer, OneHotEncoder, StandardScaler
from sklearn.svm import SVC, SVR, LinearSVC
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

import luminal.onnx as lo
from luminal.frontends.onnx.errors import OnnxImportError

ML = "ai.onnx.ml"
RNG = np.random.default_rng(0)
N_FIT, N_RUN = 120, 25


def _data():
    x = RNG.standard_normal((N_FIT, 6)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64) + (x[:, 2] > 0.8)  # three classes
    yr = (x @ RNG.standard_normal(6) + 0.1 * RNG.standard_normal(N_FIT)).astype(np.float32)
    cat = x.copy()
    cat[:, 4], cat[:, 5] = RNG.integers(0, 4, N_FIT), RNG.integers(0, 3, N_FIT)  # categorical columns
    holes = cat.copy()
    holes[:, :4][RNG.random((N_FIT, 4)) < 0.1] = np.nan
    return x, y, yr, holes


X, Y, YR, HOLES = _data()
CLEAN = X[:, :4]
Y2 = np.where(X[:, 1] - X[:, 3] > 0.2, 5, 2)  # two classes, labels other than 0/1: onnxruntime's binary forms

# (name, estimator, training x, target): classifiers get labels, regressors values
MODELS = {
    "logistic": (LogisticRegression(max_iter=500), CLEAN, Y),
    "linear_regression": (LinearRegression(), CLEAN, YR),
    "minmax_ridge": (make_pipeline(MinMaxScaler(), Ridge()), CLEAN, YR),
    "linear_svc": (LinearSVC(), CLEAN, Y),
    "svc_rbf": (SVC(), CLEAN, Y),
    "svc_poly": (SVC(kernel="poly", degree=2), CLEAN, Y),
    "svc_probability": (SVC(probability=True, random_state=0), CLEAN, Y),
    "svr": (SVR(), CLEAN, YR),
    "decision_tree": (DecisionTreeClassifier(max_depth=6, random_state=0), CLEAN, Y),
    "decision_tree_regressor": (DecisionTreeRegressor(max_depth=5, random_state=0), CLEAN, YR),
    "random_forest": (RandomForestClassifier(8, max_depth=5, random_state=0), CLEAN, Y),
    "random_forest_regressor": (RandomForestRegressor(6, max_depth=4, random_state=0), CLEAN, YR),
    "gradient_boosting": (GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0), CLEAN, Y),
    "gradient_boosting_regressor": (GradientBoostingRegressor(n_estimators=10, random_state=0), CLEAN, YR),
    "knn": (KNeighborsClassifier(5), CLEAN, Y),
    "logistic_binary": (LogisticRegression(), CLEAN, Y2),
    "svc_binary": (SVC(), CLEAN, Y2),
    "svc_probability_binary": (SVC(probability=True, random_state=0), CLEAN, Y2),
    "random_forest_binary": (RandomForestClassifier(5, max_depth=4, random_state=0), CLEAN, Y2),
    "gradient_boosting_binary": (GradientBoostingClassifier(n_estimators=8, random_state=0), CLEAN, Y2),
    "impute_scale_normalize_logistic": (
        make_pipeline(SimpleImputer(), StandardScaler(), Normalizer(), LogisticRegression()), HOLES[:, :4], Y),
    "column_transformer_onehot": (Pipeline([
        ("columns", ColumnTransformer([
            ("num", Pipeline([("impute", SimpleImputer(strategy="median")), ("scale", StandardScaler())]), [0, 1, 2, 3]),
            ("cat", OneHotEncoder(handle_unknown="ignore"), [4, 5])])),
        ("logistic", LogisticRegression(max_iter=500))]), HOLES, Y),
}


@pytest.fixture(scope="module")
def converted():
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (est, x, y) in MODELS.items():
            est.fit(x, y)
            out[name] = skl2onnx.to_onnx(est, x[:1])
    return out


def _ort(model, feeds):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):  # ZipMap: a list of {label: probability}
            assert isinstance(g, list) and len(g) == len(w)
            for gr, wr in zip(g, w):
                assert list(gr) == list(wr) and all(type(k) is type(j) for k, j in zip(gr, wr))
                np.testing.assert_allclose([gr[k] for k in wr], [wr[k] for k in wr], atol=1e-5, rtol=0)
        elif w.dtype == object:  # string labels: str elements, exactly
            assert g.dtype == object and g.shape == w.shape and g.tolist() == w.tolist()
            assert all(type(v) is str for v in g.reshape(-1).tolist())
        elif w.dtype.kind in "iu":
            assert g.dtype == w.dtype and np.array_equal(g, w)  # labels exactly
        else:
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("name", list(MODELS))
def test_sklearn_model_equals_onnxruntime(converted, name, device):
    model = converted[name]
    x = MODELS[name][1]
    rows = np.concatenate([x[:N_RUN], RNG.standard_normal((5, x.shape[1])).astype(np.float32) * 3])
    if name == "column_transformer_onehot":
        rows[-5:, 4:] = [[0, 0], [3, 2], [7, 1], [1, -1], [2, 9]]  # categories unseen in training give zeros
    feeds = {model.graph.input[0].name: rows}
    want = _ort(model, feeds)
    compiled = lo.compile(model, device=device)
    _same(compiled(feeds), want)
    if device == "numpy" and name != "knn":  # an empty batch (onnxruntime rejects one for k-NN's gather)
        empty = {k: v[:0] for k, v in feeds.items()}
        _same(compiled(empty), _ort(model, empty))
    if any(o.type.WhichOneof("value") == "sequence_type" for o in model.graph.output):
        assert isinstance(want[1], list)  # the sweep covers ZipMap


# --- node level -------------------------------------------------------------------------------
def _model(nodes, inputs, outputs):
    graph = oh.make_graph(nodes, "t", inputs, outputs)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(ML, 3)], ir_version=9)


def _vi(name, elem, shape):
    return oh.make_tensor_value_info(name, elem, shape)


def _check(model, feeds, device="numpy"):
    _same(lo.compile(model, device=device)(feeds), _ort(model, feeds))


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_scaler_normalizer_zero_rows(norm):
    x = np.array([[1.0, -2.0, 3.0], [0.0, 0.0, 0.0], [-1.0, -4.0, -0.5], [2.0, 2.0, -4.0]], np.float32)
    nodes = [oh.make_node("Scaler", ["x"], ["s"], offset=[0.5, 0.0, -1.0], scale=[2.0, 1.0, 0.5], domain=ML),
             oh.make_node("Normalizer", ["x"], ["n"], norm=norm, domain=ML)]
    _check(_model(nodes, [_vi("x", TP.FLOAT, [None, 3])], [_vi("s", TP.FLOAT, [None, None]), _vi("n", TP.FLOAT, [None, None])]),
           {"x": x})


@pytest.mark.parametrize("replaced", [np.nan, -1.0])
def test_imputer_nan_and_value(replaced):
    x = np.array([[np.nan, -1.0, 2.0], [-1.0, np.nan, np.nan], [3.0, 4.0, -1.0]], np.float32)
    node = oh.make_node("Imputer", ["x"], ["y"], imputed_value_floats=[9.0, 8.0, 7.0], replaced_value_float=replaced,
                        domain=ML)
    _check(_model([node], [_vi("x", TP.FLOAT, [None, 3])], [_vi("y", TP.FLOAT, [None, None])]), {"x": x})


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_linear_classifier_ties_and_transforms(post):
    # rows 0 and 1 tie between classes: the first highest wins; row 2 scores a class exactly 0
    x = np.array([[1.0, 1.0], [0.0, 0.0], [1.0, -1.0], [-2.0, 3.0]], np.float32)
    nodes = [oh.make_node("LinearClassifier", ["x"], ["label", "scores"], coefficients=[1.0, 1.0, 2.0, 0.0, 0.0, 2.0],
                          intercepts=[0.0, 0.0, 0.0], classlabels_ints=[7, 3, 5], post_transform=post, domain=ML),
             oh.make_node("LinearRegressor", ["x"], ["r"], coefficients=[0.5, -1.0, 2.0, 1.0], intercepts=[1.0, -2.0],
                          targets=2, domain=ML)]
    outs = [_vi("label", TP.INT64, [None]), _vi("scores", TP.FLOAT, [None, None]), _vi("r", TP.FLOAT, [None, None])]
    _check(_model(nodes, [_vi("x", TP.FLOAT, [None, 2])], outs), {"x": x})


def test_one_hot_encoder_unknown_and_float_input():
    x = np.array([[1.0, 2.9], [5.0, -1.0], [3.0, 1.0]], np.float32)  # 2.9 reads as 2, 5 and -1 are unknown
    node = oh.make_node("OneHotEncoder", ["x"], ["y"], cats_int64s=[1, 2, 3], zeros=1, domain=ML)
    _check(_model([node], [_vi("x", TP.FLOAT, [None, 2])], [_vi("y", TP.FLOAT, [None, None])]), {"x": x})


def _tree_attrs(modes, miss):
    """One tree, root on feature 0 at 1.0, its true child on feature 1 at -0.5: four leaves."""
    return dict(nodes_treeids=[0] * 7, nodes_nodeids=list(range(7)), nodes_featureids=[0, 1, 0, 0, 1, 0, 0],
                nodes_values=[1.0, -0.5, 0, 0, 2.0, 0, 0], nodes_modes=modes,
                nodes_truenodeids=[1, 2, 0, 0, 5, 0, 0], nodes_falsenodeids=[4, 3, 0, 0, 6, 0, 0],
                nodes_missing_value_tracks_true=miss)


X_TREE = np.array([[1.0, -0.5], [0.5, 3.0], [2.0, 2.0], [np.nan, -1.0], [0.0, np.nan], [3.0, np.nan],
                   [1.0, 2.0]], np.float32)  # exact ties at the splits, NaN down both tracks


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("modes", [("BRANCH_LEQ", "BRANCH_LT"), ("BRANCH_GTE", "BRANCH_GT"), ("BRANCH_EQ", "BRANCH_NEQ")])
def test_tree_ensembles_modes_ties_nan(modes, device):
    a, b = modes
    attrs = _tree_attrs([a, b, "LEAF", "LEAF", b, "LEAF", "LEAF"], [1, 0, 0, 0, 0, 0, 0])
    reg = oh.make_node("TreeEnsembleRegressor", ["x"], ["r"], n_targets=2, target_treeids=[0] * 5,
                       target_nodeids=[2, 3, 5, 6, 6], target_ids=[0, 1, 0, 1, 0],
                       target_weights=[1.0, 2.0, 3.0, 4.0, 0.5], base_values=[0.25, -0.25], domain=ML, **attrs)
    cls = oh.make_node("TreeEnsembleClassifier", ["x"], ["label", "p"], classlabels_int64s=[10, 20, 30],
                       class_treeids=[0] * 6, class_nodeids=[2, 3, 3, 5, 6, 6], class_ids=[0, 1, 2, 2, 0, 1],
                       class_weights=[0.6, 0.3, 0.3, 0.9, 0.2, 0.2], post_transform="SOFTMAX", domain=ML, **attrs)
    outs = [_vi("r", TP.FLOAT, [None, None]), _vi("label", TP.INT64, [None]), _vi("p", TP.FLOAT, [None, None])]
    _check(_model([reg, cls], [_vi("x", TP.FLOAT, [None, 2])], outs), {"x": X_TREE}, device)


def test_tree_classifier_unscored_classes_are_no_candidates():
    # a leaf that scores only class 2 negatively: ORT picks it over classes with no score at all
    attrs = _tree_attrs(["BRANCH_LEQ", "BRANCH_LEQ", "LEAF", "LEAF", "BRANCH_LEQ", "LEAF", "LEAF"], [0] * 7)
    cls = oh.make_node("TreeEnsembleClassifier", ["x"], ["label", "p"], classlabels_int64s=[0, 1, 2],
                       class_treeids=[0] * 4, class_nodeids=[2, 3, 5, 6], class_ids=[2, 1, 0, 1],
                       class_weights=[-0.5, 0.0, 1.0, -2.0], domain=ML, **attrs)
    _check(_model([cls], [_vi("x", TP.FLOAT, [None, 2])], [_vi("label", TP.INT64, [None]), _vi("p", TP.FLOAT, [None, None])]),
           {"x": X_TREE})


def test_svm_regressor_one_class_and_linear():
    x = RNG.standard_normal((6, 3)).astype(np.float32)
    sv = RNG.standard_normal((4, 3)).round(2).tolist()
    nodes = [oh.make_node("SVMRegressor", ["x"], ["a"], coefficients=[0.5, -1.0, 0.25, 1.0], n_supports=4,
                          support_vectors=sum(sv, []), kernel_type="RBF", kernel_params=[0.3, 0.0, 3.0], rho=[0.1],
                          one_class=1, domain=ML),
             oh.make_node("SVMRegressor", ["x"], ["b"], coefficients=[0.5, -1.0, 2.0], rho=[-0.3], n_supports=0,
                          kernel_type="LINEAR", kernel_params=[0.0, 0.0, 0.0], domain=ML)]
    _check(_model(nodes, [_vi("x", TP.FLOAT, [None, 3])], [_vi("a", TP.FLOAT, [None, None]), _vi("b", TP.FLOAT, [None, None])]),
           {"x": x})


def test_zipmap_string_labels_returns_dicts():
    x = np.array([[0.1, 0.9], [0.7, 0.3], [0.5, 0.5]], np.float32)
    node = oh.make_node("ZipMap", ["x"], ["m"], classlabels_strings=["no", "yes"], domain=ML)
    out = oh.make_value_info("m", oh.make_sequence_type_proto(oh.make_map_type_proto(TP.STRING, oh.make_tensor_type_proto(TP.FLOAT, []))))
    model = _model([node], [_vi("x", TP.FLOAT, [None, 2])], [out])
    compiled = lo.compile(model, device="numpy")
    got = compiled({"x": x})
    assert got[0][1] == {"no": pytest.approx(0.7), "yes": pytest.approx(0.3)}
    assert compiled.output_names == ["m"] and compiled.outputs[0].dtype == np.dtype(object)
    assert "maps" in repr(compiled) and compiled.input_names == ["x"]
    _same(got, _ort(model, {"x": x}))


@pytest.mark.parametrize("labels", [
    ["it's", 'say "no"', "a\\b", "{r0}", "line\nbreak", "ünï", ""],  # written into the generated maker as reprs
    [-(2**62), 0, 7, 2**62],
    ["same", "other", "same"],  # a duplicate keeps the last column, as dict(zip()) does
])
def test_zipmap_labels_any_text_and_duplicates(labels):
    from luminal.frontends.onnx.zipmap import MapOutput, to_maps

    x = RNG.standard_normal((5, len(labels))).astype(np.float32)
    x[0, 0], x[1, 0], x[2, -1] = np.nan, -np.inf, -0.0  # the last column always keeps its key
    got = to_maps(x, MapOutput(0, "m", tuple(labels)))
    want = [dict(zip(labels, row)) for row in x.tolist()]
    assert repr(got) == repr(want)  # keys, their order and values, NaN and -0.0 included
    assert math.copysign(1.0, got[2][labels[-1]]) == -1.0 and all(type(v) is float for g in got for v in g.values())


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_knn_distance_scan_is_batched(p, device):
    # skl2onnx computes k-NN's distances by a Scan over the training points (Sub, Abs, Pow,
    # ReduceSum[SumSquare]); `scan_map` turns it into one broadcast block, NaN rows included
    from luminal.frontends.onnx import scan_map

    model = skl2onnx.to_onnx(KNeighborsRegressor(4, p=p).fit(CLEAN, YR), CLEAN[:1])
    assert [n.op_type for n in model.graph.node].count("Scan") == 1
    assert "Scan" not in [n.op_type for n in scan_map.rewrite(model).graph.node]
    rows = np.concatenate([CLEAN[:N_RUN], RNG.standard_normal((5, 4)).astype(np.float32) * 3])
    rows[3, 1] = np.nan
    feeds = {model.graph.input[0].name: rows}
    _same(lo.compile(model, device=device)(feeds), _ort(model, feeds))


def test_scan_with_a_changing_state_is_not_batched():
    from luminal.frontends.onnx import scan_map

    body = oh.make_graph([oh.make_node("Add", ["s", "r"], ["s2"]), oh.make_node("ReduceSum", ["s2"], ["o"], keepdims=0)], "b",
                         [_vi("s", TP.FLOAT, [2, 3]), _vi("r", TP.FLOAT, [3])], [_vi("s2", TP.FLOAT, [2, 3]), _vi("o", TP.FLOAT, [])])
    node = oh.make_node("Scan", ["x", "m"], ["last", "outs"], body=body, num_scan_inputs=1)
    model = _model([node], [_vi("x", TP.FLOAT, [2, 3]), _vi("m", TP.FLOAT, [4, 3])],
                   [_vi("last", TP.FLOAT, [2, 3]), _vi("outs", TP.FLOAT, [4])])
    assert scan_map.rewrite(model) is model  # a running sum: the importer unrolls it
    feeds = {"x": RNG.standard_normal((2, 3)).astype(np.float32), "m": RNG.standard_normal((4, 3)).astype(np.float32)}
    _check(model, feeds)


Y_STR = np.array(["cat", "dog", "emu"])[Y]  # string class labels: classlabels_strings, ZipMap keyed by str
Y2_STR = np.where(Y2 == 5, "yes", "no")
STRING_MODELS = {
    "logistic": (LogisticRegression(max_iter=500), Y_STR),
    "logistic_binary": (LogisticRegression(), Y2_STR),
    "linear_svc": (LinearSVC(), Y_STR),
    "svc_probability_binary": (SVC(probability=True, random_state=0), Y2_STR),
    "svc": (SVC(), Y_STR),
    "decision_tree": (DecisionTreeClassifier(max_depth=6, random_state=0), Y_STR),
    "random_forest_binary": (RandomForestClassifier(5, max_depth=4, random_state=0), Y2_STR),
    "gradient_boosting": (GradientBoostingClassifier(n_estimators=8, random_state=0), Y_STR),
    "gradient_boosting_binary": (GradientBoostingClassifier(n_estimators=8, random_state=0), Y2_STR),
    "knn": (KNeighborsClassifier(5), Y_STR),
    "scale_logistic_binary": (make_pipeline(StandardScaler(), LogisticRegression()), Y2_STR),
}


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("name", list(STRING_MODELS))
def test_string_class_labels_equal_onnxruntime(name, device):
    est, y = STRING_MODELS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = skl2onnx.to_onnx(est.fit(CLEAN, y), CLEAN[:1])
    assert any(a.name == "classlabels_strings" for n in model.graph.node for a in n.attribute)
    rows = np.concatenate([CLEAN[:N_RUN], RNG.standard_normal((5, 4)).astype(np.float32) * 3])
    feeds = {model.graph.input[0].name: rows}
    want = _ort(model, feeds)
    got = lo.compile(model, device=device)(feeds)
    assert want[0].dtype == object and set(want[0].tolist()) <= set(y.tolist())
    _same(got, want)


def test_string_class_labels_node_level():
    # a tie between classes 0 and 2 picks the first, as the int64 labels do
    x = np.array([[1.0], [0.0], [-1.0], [0.5]], np.float32)
    node = oh.make_node("LinearClassifier", ["x"], ["label", "scores"], coefficients=[1.0, -1.0, 1.0], intercepts=[0.0, 0.0, 0.0],
                        classlabels_strings=["a", "b", "c"], domain=ML)
    model = _model([node], [_vi("x", TP.FLOAT, [None, 1])], [_vi("label", TP.STRING, [None]), _vi("scores", TP.FLOAT, [None, None])])
    compiled = lo.compile(model, device="numpy")
    assert compiled.output_names == ["label", "scores"]
    _same(compiled({"x": x}), _ort(model, {"x": x}))


@pytest.mark.parametrize("opset", [2, 4])
def test_label_encoder_numeric_nan_duplicates_default(opset):
    x = np.array([[1.0, np.nan, 2.5], [7.0, -0.0, 2.5]], np.float32)
    if opset == 2:
        attrs = dict(keys_floats=[2.5, 1.0, float("nan"), 0.0, 2.5], values_int64s=[10, 11, 12, 13, 14], default_int64=-5)
    else:
        attrs = dict(keys_tensor=numpy_helper.from_array(np.array([2.5, 1.0, np.nan, 0.0, 2.5], np.float32)),
                     values_tensor=numpy_helper.from_array(np.array([10, 11, 12, 13, 14], np.int64)),
                     default_tensor=numpy_helper.from_array(np.array([-5], np.int64)))
    node = oh.make_node("LabelEncoder", ["x"], ["y"], domain=ML, **attrs)
    model = oh.make_model(oh.make_graph([node], "t", [_vi("x", TP.FLOAT, [None, 3])], [_vi("y", TP.INT64, [None, 3])]),
                          opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(ML, opset)], ir_version=9)
    _check(model, {"x": x})


def test_feature_vectorizer_pads_and_cuts():
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    b = np.array([[5, 6, 7], [8, 9, 10]], np.float32)
    node = oh.make_node("FeatureVectorizer", ["a", "b"], ["y"], inputdimensions=[3, 2], domain=ML)
    model = _model([node], [_vi("a", TP.FLOAT, [None, 2]), _vi("b", TP.FLOAT, [None, 3])], [_vi("y", TP.FLOAT, [None, 5])])
    _check(model, {"a": a, "b": b})
    ints = {"a": a.astype(np.int64), "b": b.astype(np.int64)}  # one integer type for all: read as float
    model = _model([node], [_vi("a", TP.INT64, [None, 2]), _vi("b", TP.INT64, [None, 3])], [_vi("y", TP.FLOAT, [None, 5])])
    _check(model, ints)


def test_double_and_int_inputs_give_float32():
    x = np.array([[1.0, -0.5], [0.5, 3.0], [2.0, 2.0], [np.nan, -1.0]])
    attrs = _tree_attrs(["BRANCH_LEQ", "BRANCH_LT", "LEAF", "LEAF", "BRANCH_LT", "LEAF", "LEAF"], [1, 0, 0, 0, 0, 0, 0])
    nodes = [oh.make_node("TreeEnsembleRegressor", ["x"], ["r"], n_targets=1, target_treeids=[0] * 4,
                          target_nodeids=[2, 3, 5, 6], target_ids=[0] * 4, target_weights=[1.0, 2.0, 3.0, 4.0],
                          domain=ML, **attrs),
             oh.make_node("Scaler", ["x"], ["s"], offset=[0.5], scale=[3.0], domain=ML),
             oh.make_node("LinearClassifier", ["x"], ["label", "p"], coefficients=[1.0, -1.0], intercepts=[0.1],
                          classlabels_ints=[0, 1], post_transform="LOGISTIC", domain=ML)]
    outs = [_vi("r", TP.FLOAT, [None, 1]), _vi("s", TP.FLOAT, [None, 2]), _vi("label", TP.INT64, [None]),
            _vi("p", TP.FLOAT, [None, 2])]
    _check(_model(nodes, [_vi("x", TP.DOUBLE, [None, 2])], outs), {"x": x})
    xi = np.array([[1, -2], [0, 3]], np.int64)
    _check(_model(nodes[1:], [_vi("x", TP.INT64, [None, 2])], outs[1:]), {"x": xi})


def test_unsupported_forms_are_named_errors():
    attrs = _tree_attrs(["BRANCH_LEQ", "BRANCH_LEQ", "LEAF", "LEAF", "BRANCH_LEQ", "LEAF", "LEAF"], [0] * 7)
    probit = oh.make_node("TreeEnsembleClassifier", ["x"], ["label", "p"], classlabels_int64s=[0, 1],
                          class_treeids=[0] * 4, class_nodeids=[2, 3, 5, 6], class_ids=[0] * 4,
                          class_weights=[0.5, 0.2, 1.0, 0.3], post_transform="PROBIT", domain=ML, **attrs)
    svc = oh.make_node("SVMClassifier", ["x"], ["label", "p"], classlabels_ints=[0, 1, 2], coefficients=[1.0] * 6,
                       rho=[0.0], prob_a=[1.0] * 3, prob_b=[0.0] * 3, kernel_type="LINEAR", domain=ML)
    outs = [_vi("label", TP.INT64, [None]), _vi("p", TP.FLOAT, [None, 3])]
    for node, what in ((probit, "TreeEnsembleClassifier.*two classes.*PROBIT"), (svc, "SVMClassifier.*prob_a.*support vectors")):
        with pytest.raises(OnnxImportError, match=what):
            lo.compile(_model([node], [_vi("x", TP.FLOAT, [None, 2])], outs), device="numpy")


@pytest.mark.parametrize("agg, post", [("SUM", "NONE"), ("AVERAGE", "SOFTMAX"), ("MIN", "LOGISTIC"), ("MAX", "NONE")])
def test_tree_regressor_aggregates_over_two_trees(agg, post):
    one = _tree_attrs(["BRANCH_LEQ", "BRANCH_LT", "LEAF", "LEAF", "BRANCH_GT", "LEAF", "LEAF"], [1, 0, 0, 0, 1, 0, 0])
    two = {k: v + v for k, v in one.items()}
    two["nodes_treeids"] = [0] * 7 + [1] * 7
    two["nodes_featureids"] = one["nodes_featureids"] + [1, 0, 0, 0, 0, 0, 0]  # the second tree splits on x1 first
    # tree 1 scores target 1 nowhere on leaf 3 and twice on leaf 5 (onnxruntime keeps the extreme / the sum)
    node = oh.make_node("TreeEnsembleRegressor", ["x"], ["r"], n_targets=2, aggregate_function=agg, post_transform=post,
                        target_treeids=[0] * 5 + [1] * 5, target_nodeids=[2, 3, 5, 6, 6, 2, 3, 5, 5, 6],
                        target_ids=[0, 1, 0, 1, 0, 1, 0, 1, 1, 0],
                        target_weights=[1.0, 2.0, 3.0, 4.0, 0.5, -1.0, 6.0, 2.5, -3.0, 0.25],
                        base_values=[0.5, -0.5], domain=ML, **two)
    _check(_model([node], [_vi("x", TP.FLOAT, [None, 2])], [_vi("r", TP.FLOAT, [None, 2])]), {"x": X_TREE})


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("lone_only", [False, True])
def test_a_forest_with_a_lone_leaf_tree_every_leaf_scored(device, lone_only):
    """Every leaf scores the one target (scikit-learn's forests: no per-leaf 'scored' table is
    read) and a tree is a lone leaf: the first level's nodes are each tree's root for every
    sample (constants, not gathers), and with only lone leaves there is no level at all."""
    tree = _tree_attrs(["BRANCH_LEQ", "BRANCH_LT", "LEAF", "LEAF", "BRANCH_GT", "LEAF", "LEAF"], [1, 0, 0, 0, 1, 0, 0])
    lone = dict(nodes_treeids=[1], nodes_nodeids=[0], nodes_featureids=[0], nodes_values=[0.0], nodes_modes=["LEAF"],
                nodes_truenodeids=[0], nodes_falsenodeids=[0], nodes_missing_value_tracks_true=[0])
    attrs = lone if lone_only else {k: tree[k] + lone[k] for k in tree}
    leaves = ([], []) if lone_only else ([2, 3, 5, 6], [1.0, -2.0, 3.5, 0.25])
    node = oh.make_node("TreeEnsembleRegressor", ["x"], ["r"], n_targets=1, aggregate_function="SUM",
                        target_treeids=[0] * len(leaves[0]) + [1], target_nodeids=leaves[0] + [0],
                        target_ids=[0] * (len(leaves[0]) + 1), target_weights=leaves[1] + [10.0], base_values=[0.5],
                        domain=ML, **attrs)
    _check(_model([node], [_vi("x", TP.FLOAT, [None, 2])], [_vi("r", TP.FLOAT, [None, 1])]), {"x": X_TREE}, device)


def test_probit_post_transform():
    # onnxruntime evaluates the approximation in float32, whose root cancels near 0.5 (0.505 is off
    # by 1.1e-5 there); the reference runtime's float64 keeps it, hence 2e-5 here
    x = np.array([[0.2, 0.1], [0.0, 0.5], [0.45, 0.05], [0.9, 0.0], [0.01, 0.0], [0.97, 0.02]], np.float32)
    nodes = [oh.make_node("LinearRegressor", ["x"], ["y"], coefficients=[1.0, 1.0, 0.5, -1.0], intercepts=[0.0, 0.5],
                          targets=2, post_transform="PROBIT", domain=ML),
             oh.make_node("LinearClassifier", ["x"], ["label", "s"], coefficients=[1.0, 1.0, 0.5, -1.0, 0.2, 0.3],
                          intercepts=[0.0, 0.5, 0.1], classlabels_ints=[1, 2, 3], post_transform="PROBIT", domain=ML)]
    outs = [_vi("y", TP.FLOAT, [None, 2]), _vi("label", TP.INT64, [None]), _vi("s", TP.FLOAT, [None, 3])]
    model = _model(nodes, [_vi("x", TP.FLOAT, [None, 2])], outs)
    got, want = lo.compile(model, device="numpy")({"x": x}), _ort(model, {"x": x})
    assert np.array_equal(got[1], want[1])
    for g, w in ((got[0], want[0]), (got[2], want[2])):
        np.testing.assert_allclose(g, w, atol=2e-5, rtol=1e-5)  # -inf where s = 0, as onnxruntime
