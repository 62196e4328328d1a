"""Loop, Scan and If that run-time data decides: compiled stages with the control flow on the host
(`luminal/frontends/onnx/staged.py`), compared with onnxruntime, compiled once for every value."""

import numpy as np
import onnx
import pytest
from graph_helpers import hammer, official_recurrence_cases, with_symbolic_length
from onnx import TensorProto as TP
from onnx import helper as oh

import luminal
import luminal.onnx as lonnx
from luminal.frontends.onnx import staged

ort = pytest.importorskip("onnxruntime")

F32, I64, BOOL = TP.FLOAT, TP.INT64, TP.BOOL


def _model(nodes, inputs, outputs, inits=(), opset=17, check=True):
    graph = oh.make_graph(nodes, "m", inputs, outputs, initializer=list(inits))
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 8
    if check:
        onnx.checker.check_model(model)
    return model


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _builds(model) -> int:
    """Graphs compiled so far by a staged model's stages, bodies and branches."""
    return sum(len(sub._models) for step in model.plan.steps for sub in step.sub_models())


def _assert_same(model, feeds, rtol=1e-6):
    want = _ort(model, feeds)
    for device in ("numpy", "cpu"):
        got = lonnx.compile(model, device=device)(feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (device, g.shape, w.shape, g.dtype, w.dtype)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-6)


def _while_doubling():
    """x doubles while sum(x) < limit: the condition is computed in the body from the state;
    a scan output records each step's sum; y = the final x * w (after the loop: a second stage)."""
    body = oh.make_graph(
        [oh.make_node("Mul", ["x_in", "two"], ["x_out"]),
         oh.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0),
         oh.make_node("Less", ["s", "limit"], ["cond_out"]),
         oh.make_node("Identity", ["s"], ["s_scan"])],
        "body",
        [oh.make_tensor_value_info("i", I64, []), oh.make_tensor_value_info("cond_in", BOOL, []),
         oh.make_tensor_value_info("x_in", F32, ["n"])],
        [oh.make_tensor_value_info("cond_out", BOOL, []), oh.make_tensor_value_info("x_out", F32, ["n"]),
         oh.make_tensor_value_info("s_scan", F32, [])],
        initializer=[oh.make_tensor("two", F32, [], [2.0])])
    nodes = [oh.make_node("Constant", [], ["true"], value=oh.make_tensor("t", BOOL, [], [True])),
             oh.make_node("Abs", ["x"], ["ax"]),
             oh.make_node("Loop", ["", "true", "ax"], ["x_final", "sums"], body=body),
             oh.make_node("Mul", ["x_final", "w"], ["y"])]
    return _model(nodes,
                  [oh.make_tensor_value_info("x", F32, ["n"]), oh.make_tensor_value_info("limit", F32, [])],
                  [oh.make_tensor_value_info("y", F32, ["n"]), oh.make_tensor_value_info("sums", F32, [None])],
                  [oh.make_tensor("w", F32, [], [0.5])])


def test_loop_with_a_data_dependent_condition_runs_on_the_host_compiled_once():
    model = _while_doubling()
    assert [s[0] for s in staged.plan(model)] == ["graph", "host", "graph"]
    compiled = lonnx.compile(model)
    for n, limit in [(3, 100.0), (5, 1e4), (3, 0.5), (7, 3e6)]:  # 1, 2 .. many iterations; sizes vary
        x = np.linspace(0.5, 2.0, n).astype(np.float32)
        feeds = {"x": x, "limit": np.array(limit, np.float32)}
        want = _ort(model, feeds)
        got = compiled(feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)
    assert _builds(compiled) == 3  # stage, body, stage: once each, for every length and trip count
    assert "on the host" in str(compiled.report()) and "Loop" in str(compiled.report())


def test_loop_trip_count_from_an_input_and_scan_outputs_against_onnxruntime():
    body = oh.make_graph(
        [oh.make_node("Cast", ["i"], ["fi"], to=F32),
         oh.make_node("Add", ["acc_in", "fi"], ["acc_out"]),
         oh.make_node("Mul", ["acc_out", "v"], ["scan"]),  # v: an outer-scope value (computed before the loop)
         oh.make_node("Identity", ["c"], ["c_out"])],
        "body",
        [oh.make_tensor_value_info("i", I64, []), oh.make_tensor_value_info("c", BOOL, []),
         oh.make_tensor_value_info("acc_in", F32, [2])],
        [oh.make_tensor_value_info("c_out", BOOL, []), oh.make_tensor_value_info("acc_out", F32, [2]),
         oh.make_tensor_value_info("scan", F32, [2])])
    model = _model(
        [oh.make_node("Neg", ["x"], ["v"]),
         oh.make_node("Loop", ["trip", "", "x"], ["acc", "scans"], body=body)],
        [oh.make_tensor_value_info("trip", I64, []), oh.make_tensor_value_info("x", F32, [2])],
        [oh.make_tensor_value_info("acc", F32, [2]), oh.make_tensor_value_info("scans", F32, [None, 2])])
    compiled = lonnx.compile(model)
    x = np.array([1.5, -2.0], np.float32)
    for trip in (1, 4, 9):
        feeds = {"trip": np.array(trip, np.int64), "x": x}
        for g, w in zip(compiled(feeds), _ort(model, feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-6)
    assert _builds(compiled) == 2  # not once per trip count
    acc, scans = compiled({"trip": np.array(0, np.int64), "x": x})  # no iteration: the body declares the scan's shape
    np.testing.assert_array_equal(acc, x)
    assert scans.shape == (0, 2) and scans.dtype == np.float32
    _assert_same(model, {"trip": np.array(3, np.int64), "x": x})


def test_scan_over_a_symbolic_length_with_reversed_directions():
    body = oh.make_graph(
        [oh.make_node("Add", ["s_in", "x_t"], ["s_out"]),
         oh.make_node("Mul", ["s_out", "x_t"], ["y_t"])],
        "body",
        [oh.make_tensor_value_info("s_in", F32, [3]), oh.make_tensor_value_info("x_t", F32, [3])],
        [oh.make_tensor_value_info("s_out", F32, [3]), oh.make_tensor_value_info("y_t", F32, [3])])
    model = _model(
        [oh.make_node("Scan", ["s0", "x"], ["s", "y"], body=body, num_scan_inputs=1,
                      scan_input_directions=[1], scan_output_directions=[1], scan_output_axes=[1])],
        [oh.make_tensor_value_info("s0", F32, [3]), oh.make_tensor_value_info("x", F32, ["T", 3])],
        [oh.make_tensor_value_info("s", F32, [3]), oh.make_tensor_value_info("y", F32, [3, "T"])])
    assert staged.plan(model)[0][0] == "host"
    compiled = lonnx.compile(model)
    rng = np.random.default_rng(0)
    for t in (1, 4, 11):
        feeds = {"s0": rng.standard_normal(3).astype(np.float32), "x": rng.standard_normal((t, 3)).astype(np.float32)}
        for g, w in zip(compiled(feeds), _ort(model, feeds)):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert _builds(compiled) == 1


def test_scan_over_a_static_length_stays_unrolled():
    body = oh.make_graph([oh.make_node("Add", ["s_in", "x_t"], ["s_out"])], "body",
                         [oh.make_tensor_value_info("s_in", F32, [2]), oh.make_tensor_value_info("x_t", F32, [2])],
                         [oh.make_tensor_value_info("s_out", F32, [2])])
    model = _model([oh.make_node("Scan", ["s0", "x"], ["s"], body=body, num_scan_inputs=1)],
                   [oh.make_tensor_value_info("s0", F32, [2]), oh.make_tensor_value_info("x", F32, [5, 2])],
                   [oh.make_tensor_value_info("s", F32, [2])])
    assert staged.plan(model) is None
    _assert_same(model, {"s0": np.ones(2, np.float32), "x": np.arange(10, dtype=np.float32).reshape(5, 2)})


def _if_on_data(then_nodes=None, else_nodes=None, out_shape=("n",)):
    then = oh.make_graph(then_nodes or [oh.make_node("Mul", ["x", "two"], ["r"])], "then", [],
                         [oh.make_tensor_value_info("r", F32, list(out_shape))])
    els = oh.make_graph(else_nodes or [oh.make_node("Sub", ["x", "one"], ["r2"])], "else", [],
                        [oh.make_tensor_value_info("r2", F32, list(out_shape))])
    return _model(
        [oh.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         oh.make_node("Greater", ["s", "zero"], ["c"]),
         oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els),
         oh.make_node("Exp", ["y"], ["z"])],
        [oh.make_tensor_value_info("x", F32, ["n"])],
        [oh.make_tensor_value_info("z", F32, [None])],
        [oh.make_tensor("two", F32, [], [2.0]), oh.make_tensor("one", F32, [], [1.0]),
         oh.make_tensor("zero", F32, [], [0.0]), oh.make_tensor("idx", I64, [2], [1, 0]),
         oh.make_tensor("two_rows", I64, [2], [2, -1]), oh.make_tensor("axis0", I64, [1], [0])])


def _check_if(model, compiled, sizes=(4, 5, 6)):
    rng = np.random.default_rng(1)
    for i in range(12):
        x = rng.standard_normal(sizes[i % len(sizes)]).astype(np.float32)
        feeds = {"x": x}
        np.testing.assert_allclose(compiled(feeds)[0], _ort(model, feeds)[0], rtol=1e-6)
    for x in ([np.nan, 1.0], [-0.0, 0.0], [np.inf, -np.inf], [1e30, 1e30]):  # NaN > 0 is false: else, as onnxruntime
        feeds = {"x": np.array(x, np.float32)}
        np.testing.assert_allclose(compiled(feeds)[0], _ort(model, feeds)[0], rtol=1e-6)


def test_an_if_on_data_with_small_safe_branches_is_if_converted():
    """Both branches computed in the one compiled graph and selected: no host step, no compile
    per value (the inf/NaN the branch not taken makes is not selected)."""
    model = _if_on_data()
    assert staged.plan(model) is None
    for device in ("numpy", "cpu"):
        compiled = lonnx.compile(model, device=device)
        _check_if(model, compiled)
        assert not compiled._cache and not compiled.value_inputs  # one graph for every input


def test_an_if_on_data_that_cannot_be_converted_runs_on_the_host_compiled_once():
    gather = [oh.make_node("Gather", ["x", "idx"], ["g"]), oh.make_node("Mul", ["g", "two"], ["r"])]  # indices checked
    for model, why in [(_if_on_data(then_nodes=gather, out_shape=(2,)), "Gather"),
                       (_if_on_data(then_nodes=[oh.make_node("Concat", ["x", "x"], ["r"], axis=0)], out_shape=(None,)),
                        "shapes differ")]:
        compiled = lonnx.compile(model)
        assert type(compiled).__name__ == "StagedModel", why
        _check_if(model, compiled, sizes=(2,))
        assert _builds(compiled) == 4, why


def test_an_if_whose_branch_builds_only_for_some_sizes():
    """A Reshape into two rows that the condition guards: an odd length with the else branch
    taken runs (as in onnxruntime), whatever the if-conversion of the other sizes did."""
    model = _if_on_data(then_nodes=[oh.make_node("Reshape", ["x", "two_rows"], ["x2"]),
                                    oh.make_node("ReduceSum", ["x2", "axis0"], ["r"], keepdims=0)], out_shape=(None,))
    compiled = lonnx.compile(model)
    for x in ([1.0, 2.0], [-3.0, 1.0, 1.0], [0.5, -2.0, 1.0, 1.0], [-1.0, -1.0, -1.0]):
        feeds = {"x": np.array(x, np.float32)}
        np.testing.assert_allclose(compiled(feeds)[0], _ort(model, feeds)[0], rtol=1e-6)  # the stages before and after, and each branch: once


def test_if_on_a_setting_still_compiles_per_value():
    """An If on a scalar integer input (a sample rate, a mode) stays one compiled graph per value."""
    then = oh.make_graph([oh.make_node("Neg", ["x"], ["r"])], "then", [], [oh.make_tensor_value_info("r", F32, [2])])
    els = oh.make_graph([oh.make_node("Abs", ["x"], ["r2"])], "else", [], [oh.make_tensor_value_info("r2", F32, [2])])
    model = _model(
        [oh.make_node("Equal", ["mode", "k"], ["c"]), oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els)],
        [oh.make_tensor_value_info("x", F32, [2]), oh.make_tensor_value_info("mode", I64, [])],
        [oh.make_tensor_value_info("y", F32, [2])], [oh.make_tensor("k", I64, [], [16000])])
    assert staged.plan(model) is None
    _assert_same(model, {"x": np.array([1.0, -3.0], np.float32), "mode": np.array(16000, np.int64)})


def test_loop_inside_a_host_loop_body_and_two_threads():
    """The body of a host Loop holds an If on data: it is itself a staged model."""
    then = oh.make_graph([oh.make_node("Mul", ["x_in", "half"], ["r"])], "then", [],
                         [oh.make_tensor_value_info("r", F32, [2])])
    els = oh.make_graph([oh.make_node("Add", ["x_in", "half"], ["r2"])], "else", [],
                        [oh.make_tensor_value_info("r2", F32, [2])])
    body = oh.make_graph(
        [oh.make_node("ReduceMax", ["x_in"], ["m"], keepdims=0),
         oh.make_node("Greater", ["m", "one"], ["big"]),
         oh.make_node("If", ["big"], ["x_out"], then_branch=then, else_branch=els),
         oh.make_node("Identity", ["c"], ["c_out"])],
        "body",
        [oh.make_tensor_value_info("i", I64, []), oh.make_tensor_value_info("c", BOOL, []),
         oh.make_tensor_value_info("x_in", F32, [2])],
        [oh.make_tensor_value_info("c_out", BOOL, []), oh.make_tensor_value_info("x_out", F32, [2])])
    model = _model([oh.make_node("Loop", ["trip", "", "x"], ["y"], body=body)],
                   [oh.make_tensor_value_info("trip", I64, []), oh.make_tensor_value_info("x", F32, [2])],
                   [oh.make_tensor_value_info("y", F32, [2])],
                   [oh.make_tensor("half", F32, [], [0.5]), oh.make_tensor("one", F32, [], [1.0])])
    compiled = lonnx.compile(model)
    cases = [{"trip": np.array(t, np.int64), "x": np.array([v, -v], np.float32)} for t, v in [(5, 8.0), (3, 0.25), (6, 3.0)]]
    want = [_ort(model, f)[0] for f in cases]
    got = hammer(lambda f: compiled(f)[0], [cases * 3, cases * 3])  # two threads, each every case 3 times
    for outs in got:
        assert len(outs) == 3 * len(cases)
        for i, out in enumerate(outs):
            np.testing.assert_allclose(out, want[i % len(cases)], rtol=1e-6)


def test_host_control_flow_errors_are_named():
    body = oh.make_graph([oh.make_node("Identity", ["c"], ["c_out"]), oh.make_node("Neg", ["x_in"], ["x_out"])], "body",
                         [oh.make_tensor_value_info("i", I64, []), oh.make_tensor_value_info("c", BOOL, []),
                          oh.make_tensor_value_info("x_in", F32, [1])],
                         [oh.make_tensor_value_info("c_out", BOOL, []), oh.make_tensor_value_info("x_out", F32, [1])])
    forever = _model([oh.make_node("Loop", ["", "", "x"], ["y"], body=body, name="spin")],
                     [oh.make_tensor_value_info("x", F32, [1])], [oh.make_tensor_value_info("y", F32, [1])])
    # no trip count and no condition: nothing depends on an input, so it is not hosted; the
    # importer refuses it by name rather than unrolling without end
    with pytest.raises(lonnx.OnnxImportError, match="Loop"):
        lonnx.compile(forever)(np.ones(1, np.float32))
    # an unsupported op in a later stage fails the compile, not a later call
    model = _if_on_data(then_nodes=[oh.make_node("Gather", ["x", "idx"], ["g"]), oh.make_node("Mul", ["g", "two"], ["r"])],
                        out_shape=(2,))
    model.graph.node[3].op_type = "NoSuchOp"
    with pytest.raises(lonnx.UnsupportedOpsError, match="NoSuchOp"):
        lonnx.compile(model, check=False)
    # a Loop without iterations whose scan output has no declared shape
    body2 = oh.make_graph(
        [oh.make_node("Identity", ["c"], ["c_out"]), oh.make_node("Identity", ["x_in"], ["x_out"]),
         oh.make_node("Identity", ["x_in"], ["sc"])], "body",
        [oh.make_tensor_value_info("i", I64, []), oh.make_tensor_value_info("c", BOOL, []),
         oh.make_tensor_value_info("x_in", F32, None)],
        [oh.make_tensor_value_info("c_out", BOOL, []), oh.make_tensor_value_info("x_out", F32, None),
         oh.make_tensor_value_info("sc", F32, None)])
    model2 = _model([oh.make_node("Loop", ["trip", "", "x"], ["y", "scans"], body=body2, name="empty")],
                    [oh.make_tensor_value_info("trip", I64, []), oh.make_tensor_value_info("x", F32, [2])],
                    [oh.make_tensor_value_info("y", F32, [2]), oh.make_tensor_value_info("scans", F32, None)],
                    check=False)  # the checker wants declared shapes: exactly what this case leaves out
    compiled = lonnx.compile(model2, check=False)
    np.testing.assert_array_equal(compiled(np.array(2, np.int64), np.ones(2, np.float32))[1], np.ones((2, 2), np.float32))
    with pytest.raises(lonnx.OnnxError, match="'empty' ran no iteration"):
        compiled(np.array(0, np.int64), np.ones(2, np.float32))
    with pytest.raises(lonnx.OnnxInputError, match="trip"):
        compiled(np.array(2, np.float32), np.ones(2, np.float32))  # the wrong dtype for the trip count
    with pytest.raises(lonnx.OnnxInputError, match="'trip' has shape"):
        compiled(np.array([2, 3], np.int64), np.ones(2, np.float32))  # not one element


def _recurrence(op, direction="forward", seq_lens=False, initial=True, layout=0, seq="T", clip=None,
                activations=None):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    dirs, hidden, size, batch = 2 if direction == "bidirectional" else 1, 5, 3, 2
    rng = np.random.default_rng(7)

    def init(name, shape):
        return oh.make_tensor(name, F32, shape, (rng.standard_normal(shape) * 0.5).astype(np.float32).ravel())

    inits = [init("W", [dirs, gates * hidden, size]), init("R", [dirs, gates * hidden, hidden]),
             init("B", [dirs, 2 * gates * hidden])]
    x_shape = [batch, seq, size] if layout else [seq, batch, size]
    state_shape = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    inputs = [oh.make_tensor_value_info("x", F32, x_shape)]
    names = ["x", "W", "R", "B", "lens" if seq_lens else ""]
    if seq_lens:
        inputs.append(oh.make_tensor_value_info("lens", TP.INT32, [batch]))
    if initial:
        names.append("h0")
        inputs.append(oh.make_tensor_value_info("h0", F32, state_shape))
        if op == "LSTM":
            names.append("c0")
            inputs.append(oh.make_tensor_value_info("c0", F32, state_shape))
    if op == "LSTM":
        if not initial:
            names += ["", ""]
        names.append("P")
        inits.append(init("P", [dirs, 3 * hidden]))
    outs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    attrs = {"hidden_size": hidden, "direction": direction}
    if layout:
        attrs["layout"] = 1
    if clip:
        attrs["clip"] = clip
    if activations:
        attrs["activations"] = activations
    node = oh.make_node(op, names, outs, **attrs)
    y_shape = [batch, seq, dirs, hidden] if layout else [seq, dirs, batch, hidden]
    outputs = [oh.make_tensor_value_info("y", F32, y_shape)] + [
        oh.make_tensor_value_info(o, F32, state_shape) for o in outs[1:]]
    return _model([node], inputs, outputs, inits, opset=14)


def _rnn_feeds(model, steps, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        dims = [d.dim_value or steps for d in vi.type.tensor_type.shape.dim]
        if vi.name == "lens":
            feeds["lens"] = np.array([steps, max(1, steps - 2)], np.int32)
        else:
            feeds[vi.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


@pytest.mark.parametrize("op,direction,seq_lens,initial", [
    ("LSTM", "forward", False, True), ("LSTM", "bidirectional", True, True), ("LSTM", "reverse", False, False),
    ("GRU", "bidirectional", False, True), ("GRU", "reverse", True, True), ("RNN", "forward", True, False),
    ("RNN", "bidirectional", False, True),
])
def test_recurrence_over_a_symbolic_length_is_stepped_on_the_host(op, direction, seq_lens, initial):
    model = _recurrence(op, direction, seq_lens, initial)
    assert staged.plan(model) is None  # by default unrolled per length
    assert staged.plan(model, "host")[0][0] == "host"
    compiled = lonnx.compile(model, recurrence="host")
    for steps in (1, 4, 9):
        feeds = _rnn_feeds(model, steps, seed=steps)
        for g, w in zip(compiled(feeds), _ort(model, feeds)):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert _builds(compiled) == 1  # one cell for every direction, compiled once
    assert compiled.plan.steps[0].w_t is not None  # W an initializer: every step's X @ W^T one GEMM on the host


def test_recurrence_on_the_host_matches_the_unrolled_one():
    """layout 1 (which onnxruntime's CPU kernels refuse), clip and other activations: the host's
    stepping against the same op unrolled over a static length."""
    for op, acts in (("LSTM", ["HardSigmoid", "Tanh", "Relu"] * 2), ("GRU", None)):
        hosted = _recurrence(op, "bidirectional", True, True, layout=1, clip=1.5, activations=acts)
        unrolled = _recurrence(op, "bidirectional", True, True, layout=1, seq=6, clip=1.5, activations=acts)
        assert staged.plan(unrolled) is None
        feeds = _rnn_feeds(hosted, 6)
        for device in ("numpy", "cpu"):
            got = lonnx.compile(hosted, device=device, recurrence="host")(feeds)
            assert type(lonnx.compile(hosted, recurrence="host")).__name__ == "StagedModel"
            for g, w in zip(got, lonnx.compile(unrolled, device=device)(feeds)):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", [0, 1])
def test_a_recurrence_of_no_step_returns_the_initial_states(layout):
    """A sequence of length 0, stepped and unrolled: Y is empty, Y_h and Y_c the initial states,
    as for a batch row whose sequence_lens is 0 (the state is kept past a row's length). The
    ONNX reference implementation fails on it and onnxruntime returns zeros (for such a row too):
    luminal keeps its one rule."""
    model = _recurrence("LSTM", "bidirectional", False, True, layout=layout)
    feeds = _rnn_feeds(model, 3)
    feeds["x"] = feeds["x"][:, :0] if layout else feeds["x"][:0]
    feeds["h0"][0, 0, 0], feeds["c0"][-1, -1, -1] = -0.0, np.nan
    for device in ("numpy", "cpu"):
        for recurrence in ("host", "unroll"):
            y, y_h, y_c = lonnx.compile(model, device=device, recurrence=recurrence)(feeds)
            assert y.shape == ((2, 0, 2, 5) if layout else (0, 2, 2, 5))
            np.testing.assert_array_equal(y_h, feeds["h0"])
            np.testing.assert_array_equal(y_c, feeds["c0"])
            assert np.signbit(y_h.reshape(-1)[0])


def test_a_bound_cell_takes_another_signature_the_whole_way():
    """`SubModel.bound`: the runtime called directly for the signature it was bound to; feeds of
    another batch size go through the model (compiled for every batch), both right."""
    model = _recurrence("GRU")
    compiled = lonnx.compile(model, device="cpu", recurrence="host")
    compiled(_rnn_feeds(model, 3))
    cell = compiled.plan.steps[0].cell
    rng = np.random.default_rng(1)
    width = 15  # X @ W^T, projected on the host: 3 gates of 5
    feeds = {"x_t0": rng.standard_normal((1, 2, width), np.float32), "h_in0": rng.standard_normal((1, 2, 5), np.float32)}
    step = cell.bound(feeds)
    assert step is not cell and cell.bound(feeds) is step  # bound once per signature
    calls = sum(g["calls"] for g in luminal.stats()["graphs"])
    np.testing.assert_array_equal(step(feeds)[0], cell(feeds)[0])
    assert sum(g["calls"] for g in luminal.stats()["graphs"]) == calls + 2  # luminal.stats() counts both
    other = {"x_t0": rng.standard_normal((1, 4, width), np.float32), "h_in0": rng.standard_normal((1, 4, 5), np.float32)}
    np.testing.assert_array_equal(step(other)[0], cell(other)[0])
    with pytest.raises(lonnx.OnnxError, match="dtype"):  # the whole way: a cell for f64 inputs, which the f32 weights refuse
        step({"x_t0": feeds["x_t0"].astype(np.float64), "h_in0": feeds["h_in0"]})


def test_a_host_loop_calls_its_bound_body_and_a_size_0_state_goes_the_whole_way():
    """A Loop on the host calls its body's runtime bound once per signature (`SubModel.bound`);
    a carried value of size 0 goes through the model, which compiles it statically, as a call
    of the model would. Against onnxruntime, NaN, inf and -0.0 included."""
    body = oh.make_graph(
        [oh.make_node("Cast", ["i"], ["fi"], to=F32), oh.make_node("Add", ["acc_in", "fi"], ["acc_out"]),
         oh.make_node("ReduceSum", ["acc_out"], ["scan"], keepdims=1), oh.make_node("Identity", ["c"], ["c_out"])],
        "body", [oh.make_tensor_value_info("i", I64, []), oh.make_tensor_value_info("c", BOOL, []),
                 oh.make_tensor_value_info("acc_in", F32, ["n"])],
        [oh.make_tensor_value_info("c_out", BOOL, []), oh.make_tensor_value_info("acc_out", F32, ["n"]),
         oh.make_tensor_value_info("scan", F32, [1])])
    model = _model([oh.make_node("Loop", ["trip", "", "x"], ["acc", "scans"], body=body)],
                   [oh.make_tensor_value_info("trip", I64, []), oh.make_tensor_value_info("x", F32, ["n"])],
                   [oh.make_tensor_value_info("acc", F32, ["n"]), oh.make_tensor_value_info("scans", F32, [None, 1])])
    compiled = lonnx.compile(model)
    for x in ([1.5, -2.0], [], [-0.0, np.nan, np.inf]):
        feeds = {"trip": np.array(3, np.int64), "x": np.array(x, np.float32)}
        for g, w in zip(compiled(feeds), _ort(model, feeds), strict=True):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g, w)
    sub = compiled.plan.steps[0].subs["body"]
    feeds = {"i": np.array(0, np.int64), "c": np.array(True), "acc_in": np.zeros(0, np.float32)}
    assert sub.bound(feeds) is sub  # size 0: the whole way
    feeds["acc_in"] = np.ones(2, np.float32)
    assert sub.bound(feeds) is not sub


def test_recurrence_host_errors_are_named():
    model = _recurrence("GRU", "forward", True, True)
    with pytest.raises(lonnx.OnnxError, match="recurrence='loop'"):
        lonnx.compile(model, recurrence="loop")
    compiled = lonnx.compile(model, recurrence="host")
    feeds = _rnn_feeds(model, 3)
    feeds["lens"] = np.array([3, 4], np.int32)  # longer than the sequence
    with pytest.raises(lonnx.OnnxError, match="sequence_lens"):
        compiled(feeds)


def test_an_identity_branch_needs_no_compiled_graph():
    """An If on data hosted (a branch with a Gather) whose other branch returns a value as it
    is (as openWakeWord's wake-word model does): the Identity branch is a copy on the host."""
    then = oh.make_graph([oh.make_node("Gather", ["p", "idx"], ["g"]), oh.make_node("Mul", ["g", "two"], ["r"])], "then",
                         [], [oh.make_tensor_value_info("r", F32, [2])])
    els = oh.make_graph([oh.make_node("Identity", ["p"], ["r2"])], "else", [], [oh.make_tensor_value_info("r2", F32, [2])])
    model = _model(
        [oh.make_node("Sigmoid", ["x"], ["p"]), oh.make_node("ReduceMax", ["p"], ["m"], keepdims=0),
         oh.make_node("GreaterOrEqual", ["m", "half"], ["c"]),
         oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els)],
        [oh.make_tensor_value_info("x", F32, [2])], [oh.make_tensor_value_info("y", F32, [2])],
        [oh.make_tensor("two", F32, [], [2.0]), oh.make_tensor("half", F32, [], [0.75]),
         oh.make_tensor("idx", I64, [2], [1, 0])])
    compiled = lonnx.compile(model)
    for x in ([-1.0, 0.5], [3.0, -2.0], [-0.0, np.nan]):
        feeds = {"x": np.array(x, np.float32)}
        np.testing.assert_allclose(compiled(feeds)[0], _ort(model, feeds)[0], rtol=1e-6)  # sigmoid: an ulp apart
    branch = compiled.plan.steps[1].subs["else_branch"]
    assert branch._identity == ["p"] and not branch._models


@pytest.mark.parametrize("case", official_recurrence_cases(), ids=lambda c: c.name)
def test_official_recurrence_node_tests_stepped_on_the_host(case):
    """onnx's RNN/GRU/LSTM node tests (peepholes, biases, sequence_lens, batchwise layout,
    reverse, bidirectional) with the sequence dim made symbolic, stepped on the host
    (recurrence="host"), against the suite's expected outputs."""
    model, layout = with_symbolic_length(case)
    compiled = lonnx.compile(model, device="numpy", optimize=False, recurrence="host", check=False)
    assert type(compiled).__name__ == "StagedModel"
    assert compiled.plan.steps[0].w_t is None  # W an input here: the cell projects each step itself
    (inputs, outputs), = case.data_sets[:1]
    for got, want in zip(compiled(*inputs), outputs):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)  # the suite's own tolerance


def _official_scan_cases():
    from onnx.backend.test.loader import load_node_model_tests

    return [c for c in load_node_model_tests() if c.name.startswith("test_scan9")]


@pytest.mark.parametrize("case", _official_scan_cases(), ids=lambda c: c.name)
def test_official_scan_node_tests_over_a_symbolic_length_on_the_host(case):
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    node = model.graph.node[0]
    m = next(a.i for a in node.attribute if a.name == "num_scan_inputs")
    axes = next((list(a.ints) for a in node.attribute if a.name == "scan_input_axes"), [0] * m)
    scanned = list(node.input[len(node.input) - m:])
    for vi in model.graph.input:
        if vi.name in scanned:
            vi.type.tensor_type.shape.dim[axes[scanned.index(vi.name)]].dim_param = "T"
    for vi in model.graph.output:
        vi.type.tensor_type.ClearField("shape")
    compiled = lonnx.compile(model, device="numpy", optimize=False, check=False)
    assert type(compiled).__name__ == "StagedModel"
    (inputs, outputs), = case.data_sets[:1]
    for got, want in zip(compiled(*inputs), outputs):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6)


def _loop_with_an_if(then_nodes, then_shape=(2,)):
    """A for-loop as exporters write it (the condition passed on unchanged, a static trip count)
    whose body holds an If on the loop's state."""
    then = oh.make_graph(then_nodes, "then", [], [oh.make_tensor_value_info("r", F32, list(then_shape))])
    els = oh.make_graph([oh.make_node("Neg", ["x_in"], ["r2"])], "else", [], [oh.make_tensor_value_info("r2", F32, [2])])
    body = oh.make_graph(
        [oh.make_node("ReduceSum", ["x_in"], ["s"], keepdims=0), oh.make_node("Greater", ["s", "zero"], ["big"]),
         oh.make_node("If", ["big"], ["y"], then_branch=then, else_branch=els),
         oh.make_node("ReduceSum", ["y"], ["t"], keepdims=1), oh.make_node("Add", ["x_in", "t"], ["x_out"]),
         oh.make_node("Identity", ["c"], ["c_out"])],
        "body", [oh.make_tensor_value_info("i", I64, []), oh.make_tensor_value_info("c", BOOL, []),
                 oh.make_tensor_value_info("x_in", F32, [2])],
        [oh.make_tensor_value_info("c_out", BOOL, []), oh.make_tensor_value_info("x_out", F32, [2])])
    return _model([oh.make_node("Loop", ["three", "", "x"], ["y"], body=body)],
                  [oh.make_tensor_value_info("x", F32, [2])], [oh.make_tensor_value_info("y", F32, [2])],
                  [oh.make_tensor("three", I64, [], [3]), oh.make_tensor("zero", F32, [], [0.0]),
                   oh.make_tensor("idx", I64, [2], [1, 0])], check=False)


@pytest.mark.parametrize("then_nodes,then_shape,hosted", [
    ([oh.make_node("Mul", ["x_in", "x_in"], ["r"])], (2,), False),  # if-converted inside the unrolled loop
    ([oh.make_node("Gather", ["x_in", "idx"], ["r"])], (2,), True),  # a branch that can fail: the loop on the host
    ([oh.make_node("Concat", ["x_in", "x_in"], ["r"], axis=0)], (4,), True),  # branches of different shapes
])
def test_a_for_loop_is_unrolled_unless_its_body_holds_an_if_that_cannot_convert(then_nodes, then_shape, hosted):
    model = _loop_with_an_if(then_nodes, then_shape)
    compiled = lonnx.compile(model, check=False)
    assert (type(compiled).__name__ == "StagedModel") == hosted
    for x in ([1.0, -3.0], [2.0, 5.0], [np.nan, 1.0]):
        feeds = {"x": np.array(x, np.float32)}
        np.testing.assert_allclose(compiled(feeds)[0], _ort(model, feeds)[0], rtol=1e-6)
