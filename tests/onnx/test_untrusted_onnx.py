"""Untrusted ONNX files: external data stays inside the model's folder, opsets newer than onnx
knows are refused, initializers listed as inputs are defaults the caller may override, and
mutated files (truncated, flipped bytes, edited fields, huge dims) raise a `LuminalError`
within a time bound. Deterministic seeds."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_onnx_api import _mlp, _model
from untrusted import byte_mutants, must_fail_cleanly, time_limit

import luminal
import luminal.onnx as lo

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10


def _save_external(tmp_path, location="ext.bin"):
    folder = tmp_path / "model"
    folder.mkdir(parents=True)
    path = folder / "ext.onnx"
    onnx.save(_mlp(), path, save_as_external_data=True, all_tensors_to_one_file=True, location="ext.bin", size_threshold=0)
    if location != "ext.bin":
        proto = onnx.load(path, load_external_data=False)
        for t in proto.graph.initializer:
            for e in t.external_data:
                if e.key == "location":
                    e.value = location
        onnx.save(proto, path)
    return path


def test_external_data_must_exist_inside_the_models_folder(tmp_path):
    missing = _save_external(tmp_path)
    os.remove(missing.parent / "ext.bin")
    with pytest.raises(lo.ExternalDataError, match=r"initializer 'w' of .*'ext.bin' is missing"):
        lo.compile(missing)
    outside = _save_external(tmp_path / "b", "../../etc/passwd")
    with pytest.raises(lo.ExternalDataError, match=r"initializer 'w' .*'../../etc/passwd' is outside the model's folder"):
        lo.compile(outside)
    absolute = _save_external(tmp_path / "c", "/etc/passwd")
    with pytest.raises(lo.ExternalDataError, match="outside the model's folder"):
        lo.compile(absolute)
    linked = _save_external(tmp_path / "d", "link.bin")
    os.symlink("/etc/hostname", linked.parent / "link.bin")
    with pytest.raises(lo.ExternalDataError, match="'link.bin' is outside the model's folder"):
        lo.compile(linked)
    short = _save_external(tmp_path / "e")
    (short.parent / "ext.bin").write_bytes(b"\0" * 8)
    with pytest.raises(lo.ExternalDataError, match="initializer 'w'"):
        lo.compile(short)
    assert issubclass(lo.ExternalDataError, lo.InvalidModelError)


def test_opsets_newer_than_onnx_knows_are_refused():
    proto = _mlp()
    proto.opset_import[0].version = onnx.defs.onnx_opset_version() + 1
    with pytest.raises(lo.UnsupportedOpsetError, match=f"opset {onnx.defs.onnx_opset_version() + 1} of the default"):
        lo.compile(proto)
    proto.opset_import[0].version = onnx.defs.onnx_opset_version()
    lo.compile(proto, optimize=False)


def test_initializers_listed_as_inputs_are_overridable_defaults():
    proto = _mlp()
    proto.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3]))
    model = lo.compile(proto, optimize=False)
    assert model.input_names == ["x"] and [d.name for d in model.defaults] == ["w"]
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    (y, _) = model(x)
    np.testing.assert_allclose(y, np.maximum(x @ W, 0).reshape(2, -1), rtol=1e-6)
    w2 = -W
    for _ in range(2):  # the second call reuses the compiled override
        (y2, _) = model(x, w=w2)
        np.testing.assert_allclose(y2, np.maximum(x @ w2, 0).reshape(2, -1), rtol=1e-6)
    (y3, _) = model({"x": x})  # the default again
    np.testing.assert_array_equal(y3, y)
    with pytest.raises(lo.OnnxInputError, match="dtype"):
        model(x, w=w2.astype(np.float64))
    with pytest.raises(lo.OnnxInputError, match="shape"):
        model(x, w=w2[:2])


def test_compiling_never_allocates_what_only_running_would():
    """Known values (a Range of 10**12, shape arithmetic expanded to 10**10 entries) are left
    to the graph: compiling is quick and small; running raises a LuminalError (or would work)."""
    ints = {k: numpy_helper.from_array(np.array(v, np.int64), k) for k, v in [("s", 0), ("l", 10**12), ("d", 1)]}
    ints["big"] = numpy_helper.from_array(np.array([10**5, 10**5], np.int64), "big")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, None)
    models = {
        "range": [helper.make_node("Range", ["s", "l", "d"], ["y"])],
        "expand shape": [helper.make_node("Shape", ["x"], ["sh"]), helper.make_node("Expand", ["sh", "big"], ["y"])],
    }
    for what, nodes in models.items():
        with time_limit(10, what):
            model = lo.compile(_model(nodes, [x], [y], list(ints.values())), optimize=False, check=False)
        with pytest.raises(luminal.LuminalError):
            model(np.ones(3, np.float32))


# --- fuzzing ------------------------------------------------------------------------------------
def _fuzz_models():
    """Small models covering initializers, shape arithmetic and a few op families."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 1])
    b = numpy_helper.from_array(np.ones((3,), np.float32), "b")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Softmax", ["s"], ["t"], axis=-1),
        helper.make_node("ReduceSum", ["t", "axes"], ["out"], keepdims=1),
    ]
    return [_mlp(), _model(nodes, [a], [out], [b, axes])]


def _proto_mutants(proto: onnx.ModelProto, rng):
    def edit(fn):
        p = onnx.ModelProto()
        p.CopyFrom(proto)
        fn(p)
        return p.SerializeToString()

    def huge_dims(p):
        p.graph.initializer[0].dims[:] = [10**7, 10**7]

    def bad_dims(p):
        p.graph.initializer[0].dims[:] = [-3]

    def huge_input(p):
        p.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2**62

    def symbolic_name(p):
        p.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "__import__('os').system('touch pwned')"

    def keyword_name(p):
        p.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "lambda"

    def drop_node(p):
        del p.graph.node[int(rng.integers(0, len(p.graph.node)))]

    def bad_attribute(p):
        p.graph.node[-1].attribute.add().CopyFrom(helper.make_attribute("axis", 10**9))

    def bad_type(p):
        p.graph.initializer[0].data_type = 99

    def external(p):
        t = p.graph.initializer[0]
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value="../../../../etc/passwd")

    for fn in (huge_dims, bad_dims, huge_input, symbolic_name, keyword_name, drop_node, bad_attribute, bad_type, external):
        yield fn.__name__, edit(fn)


def test_fuzz_onnx_compile(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(7)
    compiled = 0
    for proto in _fuzz_models():
        data = proto.SerializeToString()
        cases = list(byte_mutants(data, rng, cuts=16, flips=40)) + list(_proto_mutants(proto, rng))
        for what, mutant in cases:
            path = tmp_path / "m.onnx"
            path.write_bytes(mutant)

            def load(p, check=True):
                model = lo.compile(p, optimize=False, check=check)

                def run(**_):
                    shapes = [tuple(d if isinstance(d, int) else 2 for d in i.shape) for i in model.inputs]
                    if any(np.prod(s, dtype=float) > 1e6 for s in shapes):
                        return None  # a huge declared input: nothing a caller could pass
                    return model(*[np.ones(s, i.dtype or np.float32) for s, i in zip(shapes, model.inputs)])
                return run

            compiled += must_fail_cleanly(load, path, what, x=np.zeros(1))
            compiled += must_fail_cleanly(lambda p: load(p, check=False), path, what + " unchecked", x=np.zeros(1))
    assert not (tmp_path / "pwned").exists()
    assert compiled > 0  # some flips land in names or unused fields: those models still compile and run


def test_luminal_errors_all_derive_from_luminal_error():
    for name in ("ExternalDataError", "UnsupportedOpsetError", "InvalidModelError", "OnnxImportError"):
        assert issubclass(getattr(lo, name), luminal.LuminalError)


def test_graphs_compiled_per_value_are_bounded(monkeypatch):
    """One graph per distinct override value: a caller feeding many values keeps the newest few."""
    from luminal.frontends.onnx import model as onnx_model

    monkeypatch.setattr(onnx_model, "COMPILED_KEPT", 2)
    proto = _mlp()
    proto.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3]))
    model = lo.compile(proto, optimize=False)
    x = np.ones((2, 3, 4), np.float32)
    for k in range(4):
        (y, _) = model(x, w=W * k)
        np.testing.assert_allclose(y, np.maximum(x @ (W * k), 0).reshape(2, -1), rtol=1e-6)
    assert len(model._cache) == 2
