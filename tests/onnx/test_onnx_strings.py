"""String tensors (NumPy object arrays on the host) and FLOAT8E8M0, beyond the node suite:
empty and 0-d tensors, unicode, RE2 syntax, strings feeding compiled numeric ops, compared with
onnxruntime on the NumPy runtime and the compiled C backend."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import luminal.onnx as lo
from luminal.frontends.onnx.errors import OnnxImportError
from luminal.frontends.onnx.re2 import RegexSyntaxError

DEVICES = ["numpy", "cpu"]


def _model(nodes, inputs, outputs, inits=(), opset=21, ml=False):
    graph = oh.make_graph(nodes, "t", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits])
    imports = [oh.make_opsetid("", opset)] + ([oh.make_opsetid("ai.onnx.ml", 4)] if ml else [])
    return oh.make_model(graph, opset_imports=imports, ir_version=10)


def _vi(name, elem, shape=None):
    return oh.make_tensor_value_info(name, elem, shape)


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _check(model, feeds, device="numpy", rtol=0.0):
    """Equal to onnxruntime: exactly, or floats within rtol (arithmetic rounded in another order)."""
    want = _ort(model, feeds)
    got = lo.compile(model, device=device, optimize=False, check=False)(feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if rtol and w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol)
        else:
            np.testing.assert_array_equal(g, w)
    return got


def _strings(*values, shape=None):
    a = np.empty(len(values), object)
    a[:] = list(values)
    return a.reshape(shape if shape is not None else (len(values),))


def _dyn(x):
    return [None] * np.ndim(x)  # every dim dynamic, the rank of x


def _one(op, x, out_elem=TP.STRING, n_out=1, out_types=None, **attrs):
    outs = [f"y{i}" for i in range(n_out)]
    node = oh.make_node(op, ["x"], outs, **attrs)
    types = out_types or [out_elem] * n_out
    return _model([node], [_vi("x", TP.STRING, _dyn(x))], [_vi(o, t) for o, t in zip(outs, types)])


UNICODE = _strings("", "héllo wörld", "中文 字符", "straße", "ǆ", "ΣΑΣ", "İstanbul", "a\u00a0b", " x  y ", "e\u0301")


@pytest.mark.parametrize("x", [UNICODE, _strings(shape=(0,)), _strings("a", "b", "c", shape=(1, 3, 1)),
                               np.array("solo", object), UNICODE.reshape(2, 5)])
def test_concat_equal_split_unicode_and_empty(x):
    y = _strings("!") if x.ndim else np.array("é", object)
    concat = _model([oh.make_node("StringConcat", ["x", "y"], ["z"])],
                    [_vi("x", TP.STRING, _dyn(x)), _vi("y", TP.STRING, _dyn(y))], [_vi("z", TP.STRING)])
    _check(concat, {"x": x, "y": y})
    equal = _model([oh.make_node("Equal", ["x", "x2"], ["z"])],
                   [_vi("x", TP.STRING, _dyn(x)), _vi("x2", TP.STRING, _dyn(x))], [_vi("z", TP.BOOL)])
    _check(equal, {"x": x, "x2": np.flip(x) if x.ndim else x})
    for attrs in ({}, {"delimiter": " "}, {"maxsplit": 1}, {"delimiter": "l", "maxsplit": 1}, {"delimiter": "ö"}):
        _check(_one("StringSplit", x, n_out=2, out_types=[TP.STRING, TP.INT64], **attrs), {"x": x})


@pytest.mark.parametrize("pattern", [
    r"\w+", r"[\w.-]+@[a-z]+\.com", r"\s", r"\S+", r"a$", r"(?i)héllo wörld", r"a(?i)B|c", r"(?P<n>\d+)x",
    r"[[:alpha:]]+\z", r"\x{e9}.*", r".*\b(com|net)\b.*", r"[^\d\s]*", r"(?s).*", r"(?m:^a$)", r"x{0,3}", "",
    r"a{,2}", r"[a-c[]+", r"(?i)STRASSE|Σ+",
])
def test_regex_full_match_like_re2(pattern):
    x = _strings("abc", "a_1", "é", "\v", "\t", "a", "a\n", "HÉLLO WÖRLD", "aB", "ab", "c", "12x", "ab", "é!",
                 "x@y.com", "www.a.com", "xx", "", "a\nb", "٣", "a{,2}", "ab[c", "straße", "σς")
    _check(_one("RegexFullMatch", x, TP.BOOL, pattern=pattern), {"x": x})
    empty = x.reshape(4, 6)[:, :0].copy()
    _check(_one("RegexFullMatch", empty, TP.BOOL, pattern=pattern), {"x": empty})


@pytest.mark.parametrize("pattern,construct", [
    (r"(a)\1", "backreference"), (r"a(?=b)", "lookahead"), (r"(?<!a)b", "lookbehind"), (r"a*+", "possessive"),
    (r"\pL+", "Unicode classes"), (r"(?U)a+", "ungreedy"), (r"a\Z", r"\Z"), (r"a{1001}", "over 1000"),
])
def test_regex_constructs_one_engine_lacks_are_named(pattern, construct):
    model = _one("RegexFullMatch", _strings("a"), TP.BOOL, pattern=pattern)
    with pytest.raises(RegexSyntaxError, match=construct.replace("\\", "\\\\")):
        lo.compile(model, device="numpy", check=False)(_strings("a"))


def _normalizer(x, **attrs):
    node = oh.make_node("StringNormalizer", ["x"], ["y"], locale="C.UTF-8", **attrs)  # en_US.UTF-8 may be missing
    return _model([node], [_vi("x", TP.STRING, list(np.shape(x)))], [_vi("y", TP.STRING)])


@pytest.mark.parametrize("attrs", [
    {"case_change_action": "UPPER"}, {"case_change_action": "LOWER"}, {},
    {"stopwords": ["héllo wörld", "STRASSE", "σ"], "case_change_action": "UPPER"},
    {"stopwords": ["HÉLLO WÖRLD", "ǅ"], "case_change_action": "LOWER"},
    {"stopwords": ["héllo wörld", "", "straße"], "is_case_sensitive": 1},
])
@pytest.mark.parametrize("rows", [False, True])
def test_string_normalizer_case_rules_and_stopwords(attrs, rows):
    x = UNICODE.reshape(1, -1) if rows else UNICODE
    try:
        want = _ort(_normalizer(x, **attrs), {"x": x})
    except Exception as exc:  # noqa: BLE001 - onnxruntime needs the locale installed
        pytest.skip(f"onnxruntime cannot run StringNormalizer here: {exc}")
    got = lo.compile(_normalizer(x, **attrs), device="numpy", check=False)({"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    assert got[0].shape == want[0].shape


@pytest.mark.parametrize("x", [_strings("monday", "MONDAY"), _strings("monday", shape=(1, 1)), _strings(shape=(0,))])
def test_string_normalizer_everything_removed_gives_one_empty_string(x):
    got = lo.compile(_normalizer(x, stopwords=["Monday"]), device="numpy", check=False)({"x": x})[0]
    assert got.tolist() == ([[""]] if x.ndim == 2 else [""])


def test_string_normalizer_refuses_what_it_cannot_do():
    with pytest.raises(OnnxImportError, match="case rules of its own"):
        lo.compile(_one("StringNormalizer", _strings("i"), locale="tr_TR", case_change_action="UPPER"),
                   device="numpy", check=False)(_strings("i"))
    with pytest.raises(lo.OnnxError, match=r"takes \[C\] or \[1, C\]"):
        lo.compile(_normalizer(np.array("x", object)), device="numpy", check=False)(np.array("x", object))


@pytest.mark.parametrize("device", DEVICES)
def test_label_encoder_strings_feed_compiled_gather_and_add(device):
    """string -> int64 on the host, then a Gather and an Add that run compiled; back to strings."""
    enc = oh.make_node("LabelEncoder", ["x"], ["ids"], domain="ai.onnx.ml", keys_strings=["a", "é", "中", ""],
                       values_int64s=[0, 1, 2, 3], default_int64=3)
    gather = oh.make_node("Gather", ["table", "ids"], ["rows"], axis=0)
    add = oh.make_node("Add", ["ids", "ids"], ["twice"])
    back = oh.make_node("LabelEncoder", ["twice"], ["names"], domain="ai.onnx.ml", keys_int64s=[0, 2, 4],
                        values_strings=["zero", "two", "four"])
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    model = _model([enc, gather, add, back], [_vi("x", TP.STRING, ["n"])],
                   [_vi("rows", TP.FLOAT), _vi("twice", TP.INT64), _vi("names", TP.STRING)], inits=[("table", table)],
                   ml=True)
    for x in (_strings("a", "zz", "中", "é", ""), _strings(shape=(0,))):
        _check(model, {"x": x}, device)


@pytest.mark.parametrize("device", DEVICES)
def test_numbers_to_strings_and_back_around_compiled_ops(device):
    """float -> Mul (compiled) -> Cast to string -> StringConcat -> RegexFullMatch -> Cast to float
    -> Add (compiled): stages and host steps interleaved."""
    nodes = [oh.make_node("Mul", ["v", "v"], ["sq"]), oh.make_node("Cast", ["sq"], ["s"], to=TP.STRING),
             oh.make_node("StringConcat", ["s", "suffix"], ["t"]),
             oh.make_node("RegexFullMatch", ["t"], ["ok"], pattern=r"\d+(\.\d+)?!"),
             oh.make_node("Cast", ["ok"], ["okf"], to=TP.FLOAT), oh.make_node("Add", ["okf", "v"], ["out"])]
    suffix = _strings("!")
    model = _model(nodes, [_vi("v", TP.FLOAT, [5])], [_vi("t", TP.STRING), _vi("out", TP.FLOAT)],
                   inits=[("suffix", suffix)])
    _check(model, {"v": np.array([1.5, 3, -2, 0.1, np.inf], np.float32)}, device)


@pytest.mark.parametrize("device", DEVICES)
def test_tfidf_strings_feed_compiled_matmul(device):
    pool = ["a", "b", "c", "a", "b", "b", "c", "é", "中"]  # unigrams a b c, then bigrams ab bc é中
    counts, indexes = [0, 3], [0, 1, 2, 3, 4, 5]
    tfidf = oh.make_node("TfIdfVectorizer", ["x"], ["f"], mode="TFIDF", min_gram_length=1, max_gram_length=2,
                         max_skip_count=2, ngram_counts=counts, ngram_indexes=indexes, pool_strings=pool,
                         weights=[0.5, 1.0, 2.0, 3.0, 0.25, 4.0])
    mm = oh.make_node("MatMul", ["f", "w"], ["y"])
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(6, 2)
    model = _model([tfidf, mm], [_vi("x", TP.STRING, [2, 6])], [_vi("f", TP.FLOAT), _vi("y", TP.FLOAT)],
                   inits=[("w", w)], opset=9)
    x = _strings("a", "b", "c", "a", "é", "中", "b", "x", "c", "a", "b", "c", shape=(2, 6))
    _check(model, {"x": x}, device, rtol=1e-6)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
def test_tfidf_integers(mode):
    node = oh.make_node("TfIdfVectorizer", ["x"], ["f"], mode=mode, min_gram_length=2, max_gram_length=3,
                        max_skip_count=1, ngram_counts=[0, 2, 6], ngram_indexes=[3, 2, 1, 0, 4, 5],
                        pool_int64s=[1, 2, 3, 1, 2, 2, 3, 1, 2, 2, 3, 1], weights=[1.0, 0.5, 2.0, 3.0, 1.5, 0.25])
    model = _model([node], [_vi("x", TP.INT64, [8])], [_vi("f", TP.FLOAT)], opset=9)
    _check(model, {"x": np.array([1, 2, 3, 1, 2, 2, 3, 1], np.int64)})


def test_category_mapper_both_ways():
    to_int = oh.make_node("CategoryMapper", ["x"], ["i"], domain="ai.onnx.ml", cats_strings=["x", "ÿ"],
                          cats_int64s=[7, 9], default_int64=-5)
    to_str = oh.make_node("CategoryMapper", ["i"], ["s"], domain="ai.onnx.ml", cats_strings=["seven", "ÿ"],
                          cats_int64s=[7, 9], default_string="?")
    model = _model([to_int, to_str], [_vi("x", TP.STRING, [2, 2])], [_vi("i", TP.INT64), _vi("s", TP.STRING)],
                   ml=True)
    _check(model, {"x": _strings("x", "ÿ", "", "z", shape=(2, 2))})


def test_string_inputs_accept_numpy_str_arrays():
    model = _model([oh.make_node("StringConcat", ["x", "x"], ["z"])], [_vi("x", TP.STRING, [2])], [_vi("z", TP.STRING)])
    got = lo.compile(model, device="numpy", check=False)({"x": np.array(["ab", "ç"])})[0]
    assert got.dtype == object and got.tolist() == ["abab", "çç"]


def test_a_string_where_a_number_is_expected_names_the_node_and_input():
    model = _model([oh.make_node("Add", ["x", "x"], ["z"], name="adder")], [_vi("x", TP.STRING, [2])],
                   [_vi("z", TP.STRING)])
    with pytest.raises(OnnxImportError, match=r"Add node 'adder': input 0 \('x'\) is a string tensor"):
        lo.compile(model, device="numpy", check=False)


def test_moves_of_string_tensors_run_on_the_host():
    nodes = [oh.make_node("Reshape", ["x", "shape"], ["r"]), oh.make_node("Transpose", ["r"], ["t"]),
             oh.make_node("Gather", ["t", "idx"], ["g"], axis=1), oh.make_node("Shape", ["g"], ["s"])]
    model = _model(nodes, [_vi("x", TP.STRING, [6])], [_vi("g", TP.STRING), _vi("s", TP.INT64)],
                   inits=[("shape", np.array([2, 3], np.int64)), ("idx", np.array([1, 1, 0], np.int64))])
    _check(model, {"x": UNICODE[:6].copy()})


# --- FLOAT8E8M0 ------------------------------------------------------------------------------------
E8M0_VALUES = [0.0, -0.0, 1.0, 1.5, 1.4, 1.75, -3.0, np.inf, -np.inf, np.nan, 2.0**127, 1.5 * 2.0**127, 3e38,
               2.0**-127, 1.5 * 2.0**-127, 0.75 * 2.0**-127, 2.0**-128, 1e-45, 6e-8, 65504.0, 3e-5, 0.124, 1.1,
               2.0**-126, 2.0**-126 * 1.5, 1 - 2.0**-24, 1 + 2.0**-23, 1e10, 0.3]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("src", [TP.FLOAT, TP.FLOAT16, TP.DOUBLE])
def test_cast_to_e8m0_every_rounding_like_onnxruntime(device, src):
    np_src = {TP.FLOAT: np.float32, TP.FLOAT16: np.float16, TP.DOUBLE: np.float64}[src]
    with np.errstate(over="ignore"):
        x = np.array(E8M0_VALUES, np.float64).astype(np_src)
    for round_mode in ("up", "down", "nearest"):
        for saturate in (1, 0):
            nodes = [oh.make_node("Cast", ["x"], ["e"], to=TP.FLOAT8E8M0, round_mode=round_mode, saturate=saturate),
                     oh.make_node("Cast", ["e"], ["y"], to=TP.FLOAT)]
            model = _model(nodes, [_vi("x", src, [len(E8M0_VALUES)])], [_vi("y", TP.FLOAT)], opset=25)
            model.ir_version = 11
            _check(model, {"x": x}, device)


def test_e8m0_values_at_the_boundary():
    """An e8m0 graph output comes back as ml_dtypes' float8_e8m0fnu with the exact bits."""
    import ml_dtypes

    model = _model([oh.make_node("Cast", ["x"], ["e"], to=TP.FLOAT8E8M0, round_mode="nearest")],
                   [_vi("x", TP.FLOAT, [5])], [_vi("e", TP.FLOAT8E8M0)], opset=25)
    got = lo.compile(model, device="cpu", optimize=False, check=False)(np.array([0, 1, 3, np.nan, 2.0**127], np.float32))[0]
    assert got.dtype == ml_dtypes.float8_e8m0fnu
    assert got.view(np.uint8).tolist() == [0, 127, 129, 255, 254]


def test_moves_constants_and_selection_of_strings():
    const = oh.make_node("Constant", [], ["c"], value=oh.make_tensor("c", TP.STRING, [2], [b"\xc3\xa9", b"z"]))
    nodes = [const, oh.make_node("Concat", ["x", "c"], ["cat"], axis=0),
             oh.make_node("Slice", ["cat", "starts", "ends"], ["sl"]), oh.make_node("Unsqueeze", ["sl", "ax"], ["u"]),
             oh.make_node("Expand", ["u", "shape"], ["ex"]), oh.make_node("Squeeze", ["ex", "ax"], ["sq"]),
             oh.make_node("Equal", ["sl", "c0"], ["m"]), oh.make_node("Where", ["m", "sl", "c0"], ["w"])]
    model = _model(nodes, [_vi("x", TP.STRING, [3])], [_vi("ex", TP.STRING), _vi("sq", TP.STRING), _vi("w", TP.STRING)],
                   inits=[("starts", np.array([1])), ("ends", np.array([5])), ("ax", np.array([0])),
                          ("shape", np.array([2, 1])), ("c0", _strings("é"))])
    with pytest.raises(lo.OnnxError):  # Squeeze of a dim of 2: onnxruntime refuses it as well
        lo.compile(model, device="numpy", check=False)({"x": _strings("a", "b", "é")})
    nodes[5] = oh.make_node("Squeeze", ["u", "ax"], ["sq"])
    model = _model(nodes, [_vi("x", TP.STRING, [3])], [_vi("ex", TP.STRING), _vi("sq", TP.STRING), _vi("w", TP.STRING)],
                   inits=[("starts", np.array([1])), ("ends", np.array([5])), ("ax", np.array([0])),
                          ("shape", np.array([2, 1])), ("c0", _strings("é"))])
    _check(model, {"x": _strings("a", "b", "é")})


@pytest.mark.parametrize("device", DEVICES)
def test_if_on_a_string_condition_with_string_branches(device):
    """Equal on strings decides an If whose branches read an outer string tensor: the If runs on the
    host, each branch a staged model of its own."""
    then = oh.make_graph([oh.make_node("StringConcat", ["x", "bang"], ["t"])], "then", [], [_vi("t", TP.STRING)],
                         [numpy_helper.from_array(_strings("!"), "bang")])
    other = oh.make_graph([oh.make_node("Identity", ["x"], ["e"])], "else", [], [_vi("e", TP.STRING)])
    nodes = [oh.make_node("Equal", ["flag", "yes"], ["eq"]), oh.make_node("Squeeze", ["eq"], ["cond"]),
             oh.make_node("If", ["cond"], ["out"], then_branch=then, else_branch=other),
             oh.make_node("StringSplit", ["out"], ["parts", "n"], delimiter="!"),
             oh.make_node("Mul", ["n", "n"], ["n2"])]
    model = _model(nodes, [_vi("flag", TP.STRING, [1]), _vi("x", TP.STRING, [2])],
                   [_vi("out", TP.STRING), _vi("n2", TP.INT64)], inits=[("yes", _strings("yes"))])
    for flag in ("yes", "no"):
        _check(model, {"flag": _strings(flag), "x": _strings("a!b", "")}, device)


def test_string_inputs_to_ops_without_string_kernels_are_named():
    node = oh.make_node("ArgMax", ["x"], ["y"], name="am")
    model = _model([node], [_vi("x", TP.STRING, [2])], [_vi("y", TP.INT64)])
    with pytest.raises(OnnxImportError, match=r"ArgMax node 'am': input 0 \('x'\) is a string tensor"):
        lo.compile(model, device="numpy", check=False)


def test_loop_carrying_strings_runs_on_the_host():
    body = oh.make_graph(
        [oh.make_node("StringConcat", ["s_in", "piece"], ["s_out"]), oh.make_node("Identity", ["cond_in"], ["cond_out"]),
         oh.make_node("Cast", ["i"], ["i_s"], to=TP.STRING), oh.make_node("StringConcat", ["s_out", "i_s"], ["scan"])],
        "body", [_vi("i", TP.INT64, []), _vi("cond_in", TP.BOOL, []), _vi("s_in", TP.STRING, [2])],
        [_vi("cond_out", TP.BOOL, []), _vi("s_out", TP.STRING, [2]), _vi("scan", TP.STRING, [2])])
    loop = oh.make_node("Loop", ["n", "", "s0"], ["s", "all"], body=body)
    model = _model([loop], [_vi("n", TP.INT64, []), _vi("s0", TP.STRING, [2]), _vi("piece", TP.STRING, [2])],
                   [_vi("s", TP.STRING), _vi("all", TP.STRING)])
    _check(model, {"n": np.array(3, np.int64), "s0": _strings("x", "é"), "piece": _strings("-", "中")})


@pytest.mark.parametrize("device", DEVICES)
def test_if_branch_computing_on_strings_inside(device):
    """No string at the If's boundary, strings inside a branch: the If runs on the host."""
    then = oh.make_graph([oh.make_node("Cast", ["v"], ["s"], to=TP.STRING),
                          oh.make_node("StringConcat", ["s", "s"], ["ss"]),
                          oh.make_node("Cast", ["ss"], ["t"], to=TP.FLOAT)], "then", [], [_vi("t", TP.FLOAT, [3])])
    other = oh.make_graph([oh.make_node("Neg", ["v"], ["e"])], "else", [], [_vi("e", TP.FLOAT, [3])])
    nodes = [oh.make_node("ReduceSum", ["v"], ["total"], keepdims=0), oh.make_node("Greater", ["total", "zero"], ["c"]),
             oh.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other)]
    model = _model(nodes, [_vi("v", TP.FLOAT, [3])], [_vi("out", TP.FLOAT)], inits=[("zero", np.array(0, np.float32))])
    for v in ([1, 2, 3], [-1, 2, -3]):
        _check(model, {"v": np.array(v, np.float32)}, device)
