"""Sequences and optionals at the graph boundary (luminal/frontends/onnx/boundary.py): a sequence
in and out as a list of arrays, an optional as None or its value, as onnxruntime's Python API
takes and returns them; compared with onnxruntime on devices numpy and cpu."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import luminal.onnx as lo
from luminal.frontends.onnx import OnnxInputError

DEVICES = ["numpy", "cpu"]
RNG = np.random.default_rng(0)


def _seq(elem=TP.FLOAT, dims=None):
    return h.make_sequence_type_proto(h.make_tensor_type_proto(elem, dims))


def _opt(inner):
    return h.make_optional_type_proto(inner)


def _model(nodes, inputs, outputs, opset=18):
    graph = h.make_graph(nodes, "g", inputs, outputs)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _ort(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _same(got, want):
    """Exactly the structure onnxruntime returns (lists, None), arrays equal in dtype, shape, values."""
    if want is None:
        assert got is None, got
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape, (got, want)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _check(model, sess, feeds):
    got = model(feeds)
    want = sess.run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _same(g, w)


def _vecs(*sizes, dtype=np.float32):
    return [RNG.standard_normal(n).astype(dtype) for n in sizes]


def _insert_concat_model():
    """seq -> (seq with t appended, the concatenation of that, its length)."""
    return _model(
        [h.make_node("SequenceInsert", ["x", "t"], ["s"]),
         h.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0),
         h.make_node("SequenceLength", ["s"], ["n"])],
        [h.make_value_info("x", _seq(TP.FLOAT, ["k"])), h.make_tensor_value_info("t", TP.FLOAT, ["m"])],
        [h.make_value_info("s", _seq(TP.FLOAT, None)), h.make_tensor_value_info("cat", TP.FLOAT, ["c"]),
         h.make_tensor_value_info("n", TP.INT64, [])])


@pytest.mark.parametrize("device", DEVICES)
def test_lengths_change_between_calls(device):
    """One compiled model, called with sequences of different lengths and element sizes (an empty
    one too), and again with a length it saw before."""
    proto = _insert_concat_model()
    model, sess = lo.compile(proto, device=device), _ort(proto)
    for sizes in [(3,), (2, 5, 1), (), (4, 4), (2, 5, 1), (7,)]:
        _check(model, sess, {"x": _vecs(*sizes), "t": _vecs(3)[0]})


@pytest.mark.parametrize("device", DEVICES)
def test_empty_sequence_in_and_out(device):
    """An empty list in, an empty list out (SequenceErase of a one-element sequence), its length 0."""
    proto = _model(
        [h.make_node("SequenceErase", ["x"], ["y"]), h.make_node("SequenceLength", ["y"], ["n"])],
        [h.make_value_info("x", _seq(TP.FLOAT, [2]))],
        [h.make_value_info("y", _seq(TP.FLOAT, [2])), h.make_tensor_value_info("n", TP.INT64, [])])
    model, sess = lo.compile(proto, device=device), _ort(proto)
    _check(model, sess, {"x": _vecs(2)})  # -> []
    _check(model, sess, {"x": _vecs(2, 2, 2)})
    ident = _model([h.make_node("Identity", ["x"], ["y"])], [h.make_value_info("x", _seq(TP.INT64, None))],
                   [h.make_value_info("y", _seq(TP.INT64, None))])
    _check(lo.compile(ident, device=device), _ort(ident), {"x": []})


@pytest.mark.parametrize("device", DEVICES)
def test_optional_tensor_none_and_present(device):
    """One compiled model: an optional tensor given as None, then present, then None again."""
    opt = _opt(h.make_tensor_type_proto(TP.FLOAT, ["n"]))
    proto = _model(
        [h.make_node("Identity", ["o"], ["same"]), h.make_node("OptionalHasElement", ["o"], ["has"])],
        [h.make_value_info("o", opt)],
        [h.make_value_info("same", opt), h.make_tensor_value_info("has", TP.BOOL, [])])
    model, sess = lo.compile(proto, device=device), _ort(proto)
    for value in [None, _vecs(4)[0], None, _vecs(2)[0]]:
        _check(model, sess, {"o": value})


@pytest.mark.parametrize("device", DEVICES)
def test_optional_sequence_none_and_present(device):
    """An optional holding a sequence: None, an empty list and a list on one model; the output is
    the sequence when present (an If on OptionalHasElement picks a default otherwise)."""
    opt = _opt(_seq(TP.FLOAT, ["k"]))
    then_g = h.make_graph([h.make_node("OptionalGetElement", ["o"], ["got"])], "then", [],
                          [h.make_value_info("got", _seq(TP.FLOAT, None))])
    default = h.make_tensor("d", TP.FLOAT, [2], [7.0, 8.0])
    else_g = h.make_graph([h.make_node("Constant", [], ["c"], value=default),
                           h.make_node("SequenceConstruct", ["c"], ["dflt"])], "else", [],
                          [h.make_value_info("dflt", _seq(TP.FLOAT, None))])
    proto = _model(
        [h.make_node("OptionalHasElement", ["o"], ["has"]),
         h.make_node("If", ["has"], ["y"], then_branch=then_g, else_branch=else_g),
         h.make_node("SequenceLength", ["y"], ["n"])],
        [h.make_value_info("o", opt)],
        [h.make_value_info("y", _seq(TP.FLOAT, None)), h.make_tensor_value_info("n", TP.INT64, [])])
    model, sess = lo.compile(proto, device=device), _ort(proto)
    for value in [None, _vecs(3, 1), [], None, _vecs(5)]:
        _check(model, sess, {"o": value})


@pytest.mark.parametrize("device", DEVICES)
def test_sequence_with_tensor_math(device):
    """Sequence elements feed numeric work that compiles with them: SequenceAt by a position input
    (compiled per value of it), SequenceMap with a body, elements of a narrow dtype returned as such."""
    body = h.make_graph([h.make_node("Mul", ["a", "b"], ["ab"]), h.make_node("ReduceSum", ["ab"], ["s"], keepdims=0)],
                        "body", [h.make_tensor_value_info("a", TP.FLOAT, ["n"]), h.make_tensor_value_info("b", TP.FLOAT, ["n"])],
                        [h.make_tensor_value_info("s", TP.FLOAT, [])])
    proto = _model(
        [h.make_node("SequenceAt", ["x", "pos"], ["at"]),
         h.make_node("Exp", ["at"], ["e"]),
         h.make_node("SequenceMap", ["x", "w"], ["dots"], body=body)],
        [h.make_value_info("x", _seq(TP.FLOAT, ["n"])), h.make_value_info("w", _seq(TP.FLOAT, ["n"])),
         h.make_tensor_value_info("pos", TP.INT64, [])],
        [h.make_tensor_value_info("e", TP.FLOAT, ["e"]), h.make_value_info("dots", _seq(TP.FLOAT, []))])
    model, sess = lo.compile(proto, device=device), _ort(proto)
    for sizes, pos in [((3, 2), 1), ((3, 2), -2), ((4, 4, 1), 2)]:
        _check(model, sess, {"x": _vecs(*sizes), "w": _vecs(*sizes), "pos": np.array(pos, np.int64)})
    narrow = _model([h.make_node("SequenceInsert", ["x", "t"], ["y"])],
                    [h.make_value_info("x", _seq(TP.UINT8, None)), h.make_tensor_value_info("t", TP.UINT8, [2])],
                    [h.make_value_info("y", _seq(TP.UINT8, None))])
    feeds = {"x": [np.array([1, 250], np.uint8)], "t": np.array([3, 255], np.uint8)}
    _check(lo.compile(narrow, device=device), _ort(narrow), feeds)


@pytest.mark.parametrize("device", DEVICES)
def test_split_lengths_per_value(device):
    """A sequence output whose length depends on an input's value (SplitToSequence's split): one
    model, each call's own length."""
    proto = _model([h.make_node("SplitToSequence", ["x", "split"], ["parts"], axis=1)],
                   [h.make_tensor_value_info("x", TP.FLOAT, [2, 6]), h.make_tensor_value_info("split", TP.INT64, [])],
                   [h.make_value_info("parts", _seq(TP.FLOAT, None))])
    model, sess = lo.compile(proto, device=device), _ort(proto)
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    for k in (1, 4, 6, 2):
        _check(model, sess, {"x": x, "split": np.array(k, np.int64)})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("where", ["unrolled", "host"])
def test_loop_grows_a_sequence(device, where):
    """A Loop carrying a sequence it appends to, started from a sequence input: unrolled at import
    (a constant trip count) or on the host (the trip count an input, several on one model)."""
    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]),
         h.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT),
         h.make_node("Add", ["t", "fi"], ["v"]),
         h.make_node("SequenceInsert", ["s_in", "v"], ["s_out"])],
        "body", [h.make_tensor_value_info("i", TP.INT64, []), h.make_tensor_value_info("c_in", TP.BOOL, []),
                 h.make_value_info("s_in", _seq(TP.FLOAT, None))],
        [h.make_tensor_value_info("c_out", TP.BOOL, []), h.make_value_info("s_out", _seq(TP.FLOAT, None))])
    nodes = [h.make_node("Loop", ["trips", "", "start"], ["out"], body=body)]
    inputs = [h.make_tensor_value_info("t", TP.FLOAT, [3]), h.make_value_info("start", _seq(TP.FLOAT, [3]))]
    if where == "host":
        inputs.append(h.make_tensor_value_info("trips", TP.INT64, []))
    else:
        nodes.insert(0, h.make_node("Constant", [], ["trips"], value=h.make_tensor("n", TP.INT64, [], [2])))
    proto = _model(nodes, inputs, [h.make_value_info("out", _seq(TP.FLOAT, None))])
    model, sess = lo.compile(proto, device=device), _ort(proto)
    t = _vecs(3)[0]
    for trips, start in [(3, []), (0, _vecs(3)), (2, _vecs(3, 3))]:
        feeds = {"t": t, "start": start}
        if where == "host":
            feeds["trips"] = np.array(trips, np.int64)
        _check(model, sess, feeds)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("where", ["unrolled", "host"])
def test_loop_carries_an_optional_sequence(device, where):
    """A Loop carrying an optional sequence from the inputs (None, empty or not), starting from a
    default when it is empty: unrolled (a constant trip count) and on the host (an input's), and
    zero iterations on the host returning the optional as it came (None included)."""
    opt = _opt(_seq(TP.FLOAT, None))
    zero = h.make_tensor("z", TP.FLOAT, [1], [0.0])
    then_g = h.make_graph([h.make_node("Constant", [], ["z"], value=zero), h.make_node("SequenceConstruct", ["z"], ["d"])],
                          "then", [], [h.make_value_info("d", _seq(TP.FLOAT, None))])
    else_g = h.make_graph([h.make_node("OptionalGetElement", ["o_in"], ["got"])], "else", [],
                          [h.make_value_info("got", _seq(TP.FLOAT, None))])
    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]),
         h.make_node("OptionalHasElement", ["o_in"], ["has"]), h.make_node("Not", ["has"], ["none"]),
         h.make_node("If", ["none"], ["s"], then_branch=then_g, else_branch=else_g),
         h.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT), h.make_node("Add", ["t", "fi"], ["v"]),
         h.make_node("SequenceInsert", ["s", "v"], ["s2"]), h.make_node("Optional", ["s2"], ["o_out"])],
        "body", [h.make_tensor_value_info("i", TP.INT64, []), h.make_tensor_value_info("c_in", TP.BOOL, []),
                 h.make_value_info("o_in", opt)],
        [h.make_tensor_value_info("c_out", TP.BOOL, []), h.make_value_info("o_out", opt)])
    inputs = [h.make_tensor_value_info("t", TP.FLOAT, [1]), h.make_value_info("o", opt)]
    nodes = [h.make_node("Loop", ["trips", "", "o"], ["out"], body=body)]
    if where == "host":
        inputs.append(h.make_tensor_value_info("trips", TP.INT64, []))
    else:
        nodes.insert(0, h.make_node("Constant", [], ["trips"], value=h.make_tensor("n", TP.INT64, [], [3])))
    proto = _model(nodes, inputs, [h.make_value_info("out", opt)])
    model, sess = lo.compile(proto, device=device), _ort(proto)
    t = np.array([0.5], np.float32)
    runs = [None, _vecs(1, 1), [], None]
    for k, o in enumerate(runs):
        feeds = {"t": t, "o": o}
        if where == "host":
            feeds["trips"] = np.array(k % 3, np.int64)  # 0, 1, 2, 0: zero iterations return o itself
        _check(model, sess, feeds)


@pytest.mark.parametrize("device", DEVICES)
def test_if_on_data_returns_sequences(device):
    """An If on input data whose branches return sequences of different lengths runs on the host
    (a sequence cannot be selected element by element): each call gets its branch's list."""
    x_vi = h.make_tensor_value_info("x", TP.FLOAT, [3])
    then_g = h.make_graph([h.make_node("SequenceConstruct", ["x", "x"], ["two"])], "then", [],
                          [h.make_value_info("two", _seq(TP.FLOAT, None))])
    else_g = h.make_graph([h.make_node("Neg", ["x"], ["nx"]), h.make_node("SequenceConstruct", ["nx"], ["one"])],
                          "else", [], [h.make_value_info("one", _seq(TP.FLOAT, None))])
    proto = _model(
        [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         h.make_node("Greater", ["s", "zero"], ["pos"]),
         h.make_node("If", ["pos"], ["y"], then_branch=then_g, else_branch=else_g)],
        [x_vi, h.make_tensor_value_info("zero", TP.FLOAT, [])],
        [h.make_value_info("y", _seq(TP.FLOAT, None))])
    model, sess = lo.compile(proto, device=device), _ort(proto)
    zero = np.array(0, np.float32)
    for x in [np.array([1, 2, 3], np.float32), np.array([-1, -2, 0.5], np.float32), np.array([4, 0, 0], np.float32)]:
        _check(model, sess, {"x": x, "zero": zero})


def test_wrong_kinds_are_named_errors():
    """A tensor where a sequence is declared, None for a sequence, a list for an optional tensor,
    an element of the wrong dtype or rank, mixed dtypes: OnnxInputError naming the input."""
    proto = _insert_concat_model()
    model = lo.compile(proto, device="numpy")
    t = _vecs(2)[0]
    cases = [
        ({"x": np.ones((2, 3), np.float32), "t": t}, "'x' is a sequence of tensors"),
        ({"x": None, "t": t}, "'x' is a sequence of tensors; None"),
        ({"x": [np.ones(2, np.float64)], "t": t}, "'x': element 0 has dtype float64"),
        ({"x": [np.ones(2, np.float32), np.ones((2, 2), np.float32)], "t": t}, "'x': element 1 has shape (2, 2)"),
        ({"t": t}, "missing input(s) ['x']"),
        ({"x": [], "t": t, "z": t}, "unknown input name(s) ['z']"),
    ]
    for feeds, msg in cases:
        with pytest.raises(OnnxInputError) as err:
            model(feeds)
        assert msg in str(err.value), str(err.value)
    opt = _model([h.make_node("OptionalHasElement", ["o"], ["has"])],
                 [h.make_value_info("o", _opt(h.make_tensor_type_proto(TP.FLOAT, [2])))],
                 [h.make_tensor_value_info("has", TP.BOOL, [])])
    m = lo.compile(opt, device="numpy")
    with pytest.raises(OnnxInputError, match="'o' is an optional tensor"):
        m({"o": [np.ones(2, np.float32)]})
    with pytest.raises(OnnxInputError, match="'o': the array has shape"):
        m({"o": np.ones(3, np.float32)})
    assert m({"o": None})[0] == np.array(False) and m({"o": np.ones(2, np.float32)})[0] == np.array(True)


def test_map_inputs_are_refused_but_into_dictvectorizer_or_castmap():
    """A map-typed input read by anything but DictVectorizer or CastMap (`map_inputs.py`,
    tests/onnx/test_sklearn_maps.py) is an OnnxImportError naming it and the node at compile time."""
    mp = h.make_map_type_proto(TP.INT64, h.make_tensor_type_proto(TP.FLOAT, []))
    proto = h.make_model(h.make_graph([h.make_node("Identity", ["m"], ["y"])], "g", [h.make_value_info("m", mp)],
                                      [h.make_value_info("y", mp)]), opset_imports=[h.make_opsetid("", 18)])
    with pytest.raises(lo.OnnxImportError, match="Identity node .* reads map input 'm'.* only into DictVectorizer or CastMap"):
        lo.compile(proto, device="numpy", check=False)
