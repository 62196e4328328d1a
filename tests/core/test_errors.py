"""Bad input gets a clear error that names the thing at fault."""

import numpy as np
import pytest

import luminal as lm


def test_dtype_mismatch_between_operands():
    g = lm.Graph()
    x, i = g.input("x", (3,)), g.input("i", (3,), lm.int32)
    with pytest.raises(lm.DTypeError, match=r"Add: dtype mismatch between operands \(luminal.f32 and luminal.i32\)"):
        x + i


def test_non_integer_constant_for_int_tensor():
    g = lm.Graph()
    i = g.input("i", (3,), lm.int32)
    with pytest.raises(lm.DTypeError, match="0.5 is not an integer"):
        i * 0.5


def test_float_op_on_int_tensor():
    g = lm.Graph()
    i = g.input("i", (3,), lm.int64)
    with pytest.raises(lm.DTypeError, match="exp needs a float tensor, got luminal.i64"):
        i.exp()


def test_shapes_that_do_not_broadcast():
    g = lm.Graph()
    x, y = g.input("x", (3, 4)), g.input("y", (5,))
    with pytest.raises(lm.ShapeError, match=r"shapes \(3, 4\) and \(5\) do not broadcast"):
        x + y
    s = g.input("s", ("seq", 4))
    with pytest.raises(lm.ShapeError, match="do not broadcast"):
        s + g.input("t", ("other", 4))  # two different symbols are not known to be equal


def test_bad_reshape_and_axis():
    g = lm.Graph()
    x = g.input("x", (3, 4))
    with pytest.raises(lm.ShapeError, match=r"cannot reshape \(3, 4\) into \(5, 2\)"):
        x.reshape(5, 2)
    with pytest.raises(lm.ShapeError, match="axis 2 is out of range for a tensor with 2 dims"):
        x.sum(2)
    with pytest.raises(lm.ShapeError, match="matmul"):
        x @ x


def test_unknown_op():
    with pytest.raises(lm.UnknownOpError, match="unknown op 'Conv'.*the HLIR ops are: .*Exp2"):
        lm.Op.from_name("Conv")


def _graph():
    g = lm.Graph()
    x = g.input("x", ("batch", 4))
    y = g.input("y", ("batch", 4))
    g.output(x + y)
    return g


def test_missing_input():
    with pytest.raises(lm.InputError, match=r"missing input\(s\) \['y'\]"):
        _graph().run(x=np.zeros((2, 4), np.float32))


def test_unknown_input():
    with pytest.raises(lm.InputError, match=r"unknown input\(s\) \['z'\]"):
        _graph().run(x=np.zeros((2, 4), np.float32), y=np.zeros((2, 4), np.float32), z=1)


def test_wrongly_shaped_input():
    with pytest.raises(lm.InputError, match=r"input 'x' has shape \(2, 5\), expected \(batch, 4\) \(dim 1 must be 4\)"):
        _graph().run(x=np.zeros((2, 5), np.float32), y=np.zeros((2, 4), np.float32))
    with pytest.raises(lm.InputError, match="input 'x' has shape .* \\(1 dims\\)"):
        _graph().run(x=np.zeros(4, np.float32), y=np.zeros((2, 4), np.float32))


def test_inconsistent_symbol_binding():
    with pytest.raises(lm.InputError, match="symbol 'batch' is already bound to 2"):
        _graph().run(x=np.zeros((2, 4), np.float32), y=np.zeros((3, 4), np.float32))


def test_wrong_input_dtype():
    with pytest.raises(lm.InputError, match="input 'x' has dtype float64, expected float32"):
        _graph().run(x=np.zeros((2, 4)), y=np.zeros((2, 4), np.float32))


def test_run_without_outputs():
    g = lm.Graph()
    g.input("x", (2,))
    with pytest.raises(lm.LuminalError, match="no outputs"):
        g.run(x=np.zeros(2, np.float32))


def test_where_needs_bool_condition():
    g = lm.Graph()
    x = g.input("x", (2,))
    with pytest.raises(lm.DTypeError, match="condition must be a bool tensor"):
        lm.where(x, x, x)


def test_torch_tensors_are_accepted_as_inputs():
    import torch

    out = _graph().run(x=torch.ones(2, 4), y=torch.ones(2, 4))[0]
    np.testing.assert_array_equal(out, np.full((2, 4), 2, np.float32))


def test_outputs_do_not_alias_inputs():
    g = lm.Graph()
    x = g.input("x", (3,))
    g.output(x)
    g.output(x)
    a = np.ones(3, np.float32)
    o1, o2 = g.run(x=a)
    o1[0] = 5
    assert a[0] == 1 and o2[0] == 1


def test_graph_displays_itself():
    g = _graph()
    text = repr(g)
    assert "Add" in text and "output 'out0'" in text
    assert "<table>" in g._repr_html_()
    assert g.to_dot().startswith("digraph")


def test_unknown_precision_names_raise_listing_the_valid_ones():
    from luminal.devices import DEVICES

    assert {d.name: d.default_precision for d in DEVICES.values()} == {
        "numpy": "float64", "cpu": "float32", "cuda": "float32", "cuda-emulator": "float32"}
    with pytest.raises(lm.DeviceError, match=r"unknown device 'nonsense'; luminal knows 'numpy', 'cpu'"):
        lm.get_precision("nonsense")
    with pytest.raises(ValueError, match=r"precision 'tf32': expected one of \('float64', 'float32'\)") as info:
        lm.set_precision("tf32")
    assert isinstance(info.value, lm.OptionError) and isinstance(info.value, lm.LuminalError)
    assert lm.get_precision() == "float64" and lm.get_precision("cpu") == lm.get_precision("cuda") == "float32"
