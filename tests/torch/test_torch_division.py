"""`x / c` for a constant c through the torch frontends gives torch's quotient bit for bit:
`luminal.compile` (torch.export) and `torch.compile(backend="luminal")`, `aten.div.Tensor` with
a Python scalar or a 0-d tensor, `torch.true_divide`, f32, f16 and bf16 (a half tensor over a
Python scalar divides in float by the scalar's float value, as torch's opmath scalar does)."""

import pytest
import torch
import torch._dynamo

import luminal
from luminal import devices

DEVICES = ["numpy", "cpu"] + (["cuda-emulator"] if devices.get("cuda-emulator").available else [])


class Divide(torch.nn.Module):
    def __init__(self, divisor, how):
        super().__init__()
        self.divisor, self.how = divisor, how

    def forward(self, x):
        if self.how == "operator":
            return x / self.divisor
        if self.how == "true_divide":
            return torch.true_divide(x, self.divisor)
        if self.how == "div":
            return torch.div(x, self.divisor)
        return x / torch.full((), self.divisor, dtype=x.dtype)  # a 0-d tensor of x's dtype


def _x(dtype) -> torch.Tensor:
    x = torch.randn(1000, generator=torch.Generator().manual_seed(1)).to(dtype)
    x[:4] = torch.tensor([torch.finfo(dtype).max, float("nan"), float("-inf"), -0.0]).to(dtype)
    return x


def _bitwise(got, want):
    assert got.dtype == want.dtype
    bad = (got != want) & ~(got.isnan() & want.isnan())
    assert not bad.any(), f"{int(bad.sum())} differ: {got[bad][:4]} vs torch {want[bad][:4]}"
    assert torch.equal(got.signbit()[~want.isnan()], want.signbit()[~want.isnan()])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("how", ["operator", "true_divide", "div", "tensor"])
@pytest.mark.parametrize("divisor", [3.0, 0.1])
def test_division_by_a_constant_is_torchs_bit_for_bit(device, dtype, how, divisor):
    model, x = Divide(divisor, how), _x(dtype)
    want = model(x)
    _bitwise(luminal.compile(model, (x,), device=device)(x), want)
    torch._dynamo.reset()
    _bitwise(torch.compile(model, backend="luminal", options={"device": device})(x), want)


@pytest.mark.parametrize("device", DEVICES)
def test_65504_over_3_in_f16_is_21840(device):
    x = torch.tensor([65504.0, -65504.0], dtype=torch.float16)
    got = luminal.compile(Divide(3.0, "operator"), (x,), device=device)(x)
    assert got.tolist() == [21840.0, -21840.0] == (x / 3.0).tolist()


class ScalarArithmetic(torch.nn.Module):
    """A half tensor with a scalar operand: torch's CPU `mul`/`div` compute in float with the
    scalar's own value (x * 0.1 is fl16(x * 0.1f)); `add`/`sub` round the scalar to half first."""

    def __init__(self, how, scalar):
        super().__init__()
        self.how, self.scalar = how, scalar

    def forward(self, x):
        c = self.scalar
        return {"mul": lambda: x * c, "rmul": lambda: c * x, "mul 0-d f32": lambda: x * torch.tensor(c),
                "add": lambda: x + c, "sub": lambda: x - c}[self.how]()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("how", ["mul", "rmul", "mul 0-d f32", "add", "sub"])
def test_arithmetic_with_a_scalar_is_torchs_bit_for_bit(device, dtype, how):
    x = (_x(torch.float32) * 100).to(dtype)  # a third of f16 products by fl16(0.1) differ from torch's
    model = ScalarArithmetic(how, 0.1)
    _bitwise(luminal.compile(model, (x,), device=device)(x), model(x))


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_division_by_a_runtime_scalar_tensor_is_torchs_bit_for_bit(device, dtype):
    """x / s with s a 0-d tensor computed or passed at run time: torch divides (rounds once)."""
    x = torch.randn(32, 50, dtype=dtype) * 1000
    s = torch.tensor(0.0371, dtype=dtype)

    class Div(torch.nn.Module):
        def forward(self, x, s):
            return x / s, x / (s * 3 + 1)

    want = Div()(x, s)
    got = luminal.compile(Div(), (x, s), device=device)(x, s)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
