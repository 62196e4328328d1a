"""recurrence="auto" (the default of `luminal.onnx.compile`): a RNN/GRU/LSTM over a symbolic
length compiles its first distinct length unrolled and serves every later new length with the
host-stepped form, built once (`model.py`, `staged_rnn.py`); checked against onnxruntime."""

import numpy as np
import onnx
import pytest
from graph_helpers import hammer, official_recurrence_cases, with_symbolic_length
from onnx import TensorProto as TP
from onnx import helper as oh

import luminal
import luminal.onnx as lonnx
from luminal.frontends.onnx import ops_rnn

ort = pytest.importorskip("onnxruntime")

F32 = TP.FLOAT
BATCH, SIZE, HIDDEN = 2, 3, 4


def _recurrence(op, direction="forward", seq_lens=False, seq="T"):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(3)

    def init(name, shape):
        return oh.make_tensor(name, F32, shape, (rng.standard_normal(shape) * 0.5).astype(np.float32).ravel())

    inits = [init("W", [dirs, gates * HIDDEN, SIZE]), init("R", [dirs, gates * HIDDEN, HIDDEN]),
             init("B", [dirs, 2 * gates * HIDDEN])]
    inputs = [oh.make_tensor_value_info("x", F32, [seq, BATCH, SIZE])]
    names = ["x", "W", "R", "B"]
    if seq_lens:
        names.append("lens")
        inputs.append(oh.make_tensor_value_info("lens", TP.INT32, [BATCH]))
    outs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    node = oh.make_node(op, names, outs, hidden_size=HIDDEN, direction=direction)
    outputs = [oh.make_tensor_value_info("y", F32, [seq, dirs, BATCH, HIDDEN])] + [
        oh.make_tensor_value_info(o, F32, [dirs, BATCH, HIDDEN]) for o in outs[1:]]
    graph = oh.make_graph([node], "rec", inputs, outputs, initializer=inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feeds(model, steps, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((steps, BATCH, SIZE)).astype(np.float32)}
    if any(i.name == "lens" for i in model.graph.input):
        feeds["lens"] = np.array([steps, max(1, steps - 2)], np.int32)
    return feeds


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _compiled() -> int:
    return luminal.stats()["graphs_compiled"]


@pytest.mark.parametrize("op,direction,seq_lens,device", [
    ("LSTM", "bidirectional", True, "numpy"), ("GRU", "reverse", False, "numpy"), ("RNN", "forward", True, "numpy"),
    ("GRU", "bidirectional", True, "cpu"),
])
def test_auto_unrolls_the_first_length_and_steps_the_others(op, direction, seq_lens, device):
    model = _recurrence(op, direction, seq_lens)
    compiled = lonnx.compile(model, device=device)  # recurrence="auto" by default
    first = _feeds(model, 5, seed=1)
    got_first = compiled(first)
    _check(got_first, _ort(model, first))
    assert len(compiled._unrolled) == 1 and compiled._host is None  # the fast path: one unrolled graph
    before = _compiled()
    second = _feeds(model, 3, seed=2)
    _check(compiled(second), _ort(model, second))
    assert type(compiled._host).__name__ == "StagedModel"
    built = _compiled() - before
    assert built == 1  # the host form: one cell for every direction, nothing unrolled for length 3
    for steps in (8, 1, 3):  # later new lengths, and the second again: no compile
        feeds = _feeds(model, steps, seed=steps)
        _check(compiled(feeds), _ort(model, feeds))
    assert _compiled() - before == built and len(compiled._unrolled) == 1
    # NaN propagates through the host form as through the unrolled one (onnxruntime's LSTM and GRU
    # kernels clamp their gates' inputs, so a NaN comes out finite there: not the reference here)
    nan = _feeds(model, 6, seed=6)
    nan["x"][2, 0, 1] = np.nan
    nan["x"][4, 1, 0] = -0.0
    reference = lonnx.compile(model, device="numpy", optimize=False, recurrence="unroll")(nan)
    assert np.isnan(reference[0]).any()
    _check(compiled(nan), reference)
    again = compiled(first)  # the first length keeps its unrolled graph: the same numbers, bit for bit
    for g, w in zip(again, got_first):
        np.testing.assert_array_equal(g, w)
    report = str(compiled.report())
    assert "unrolled (a graph per shape): x (5, 2, 3)" in report
    assert "x (3, 2, 3); x (8, 2, 3); x (1, 2, 3); x (6, 2, 3)" in report
    assert any("compiled unrolled" in n for n in compiled.notes)
    assert any("a second distinct shape at x (3, 2, 3)" in n for n in compiled.notes)


def test_explicit_policies_keep_their_forms():
    model = _recurrence("GRU")
    unrolled = lonnx.compile(model, device="numpy", recurrence="unroll")
    hosted = lonnx.compile(model, device="numpy", recurrence="host")
    assert type(hosted).__name__ == "StagedModel"
    for steps in (2, 4, 6):
        feeds = _feeds(model, steps, seed=steps)
        want = _ort(model, feeds)
        _check(unrolled(feeds), want)
        _check(hosted(feeds), want)
    assert len(unrolled._cache) == 3 and unrolled._host is None  # one unrolled graph per length
    with pytest.raises(lonnx.OnnxError, match="'auto', 'unroll', 'host'"):
        lonnx.compile(model, recurrence="loop")


def test_a_length_past_max_steps_is_stepped_under_auto_and_named_under_unroll():
    steps = ops_rnn.MAX_STEPS + 1
    model = _recurrence("RNN")
    feeds = _feeds(model, steps)
    want = _ort(model, feeds)
    auto = lonnx.compile(model, device="numpy", optimize=False)
    _check(auto(feeds), want)  # the first call: the unroll refuses, the host form serves it
    assert not auto._unrolled and auto._host is not None
    assert any("TooManySteps" in n for n in auto.notes)
    short = _feeds(model, 3)
    _check(auto(short), _ort(model, short))  # the host form serves every later length too
    with pytest.raises(lonnx.TooManySteps, match=f"unrolls at most {lonnx.MAX_STEPS}"):
        lonnx.compile(model, device="numpy", recurrence="unroll")(feeds)
    static = _recurrence("RNN", seq=steps)  # a static length past the limit: on the host from the start
    assert type(lonnx.compile(static, device="numpy", optimize=False)).__name__ == "StagedModel"
    with pytest.raises(ops_rnn.TooManySteps):
        lonnx.compile(static, device="numpy", recurrence="unroll")


def test_a_host_form_that_fails_falls_back_to_unrolling():
    model = _recurrence("LSTM")
    compiled = lonnx.compile(model, device="numpy")

    def broken():
        raise lonnx.OnnxError("no host form here")

    compiled._host_form = broken
    for steps in (2, 3, 4):
        feeds = _feeds(model, steps, seed=steps)
        _check(compiled(feeds), _ort(model, feeds))
    assert compiled._host is None and len(compiled._unrolled) + len(compiled._cache) == 3
    assert any("no host form here" in n for n in compiled.notes)


def test_an_empty_length_under_auto():
    """A sequence of no step (a size-0 call compiles statically, as before: not a second length):
    Y is empty and the final state the initial one, zeros here, as onnxruntime says."""
    model = _recurrence("GRU", "bidirectional", True)
    compiled = lonnx.compile(model, device="numpy")
    _check(compiled(_feeds(model, 4)), _ort(model, _feeds(model, 4)))
    empty = {"x": np.zeros((0, BATCH, SIZE), np.float32), "lens": np.zeros(BATCH, np.int32)}
    _check(compiled(empty), _ort(model, empty))
    assert compiled._host is None


def test_two_threads_with_new_lengths_at_once():
    model = _recurrence("GRU", "bidirectional", True)
    compiled = lonnx.compile(model, device="numpy")
    jobs = [[3, 6, 4, 3], [5, 6, 7, 5]]
    want = {n: _ort(model, _feeds(model, n, seed=n)) for n in {n for job in jobs for n in job}}
    results = hammer(lambda n: (n, compiled(_feeds(model, n, seed=n))), jobs)
    for thread in results:
        for n, got in thread:
            _check(got, want[n])
    assert len(compiled._unrolled) == 1 and compiled._host is not None


@pytest.mark.parametrize("case", official_recurrence_cases(), ids=lambda c: c.name)
def test_official_recurrence_node_tests_under_auto(case):
    """onnx's RNN/GRU/LSTM node tests with the sequence dim symbolic: a first call of another
    length compiles unrolled, then the suite's own input runs the host-stepped form, against
    the suite's expected outputs."""
    model, layout = with_symbolic_length(case)
    compiled = lonnx.compile(model, device="numpy", optimize=False, check=False)
    (inputs, outputs), = case.data_sets[:1]
    longer = list(inputs)
    longer[0] = np.concatenate([inputs[0], inputs[0]], axis=layout)  # twice the steps (sequence_lens still fit)
    compiled(*longer)
    assert len(compiled._unrolled) == 1
    for got, want in zip(compiled(*inputs), outputs, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)  # the suite's own tolerance
    assert compiled._host is not None
