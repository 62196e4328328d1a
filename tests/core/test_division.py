"""Division by a constant divides (rounded once, torch's answer bit for bit) on every device,
unless the constant's reciprocal is exact (a power of two), where multiplying is the same.

The primitives spell `x / c` as `x * recip(c)`; folding recip(3) into the constant fl(1/3)
rounded every third quotient the wrong way (f32), and 65504 / 3 in f16 to 21824 (torch: 21840).
"""

import numpy as np
import pytest
import torch

import luminal as lm
from luminal import devices
from luminal.egraph.encode import exact_reciprocal
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Op, toposort

DEVICES = ["numpy", "cpu"] + (["cuda-emulator"] if devices.get("cuda-emulator").available else [])
DTYPES = {"f32": (lm.f32, torch.float32), "f16": (lm.f16, torch.float16), "bf16": (lm.bf16, torch.bfloat16)}


def _inputs(tdt) -> torch.Tensor:
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0)).to(tdt)
    big = torch.finfo(tdt).max
    x[:6] = torch.tensor([big, -big, float("nan"), float("inf"), -0.0, 1.0]).to(tdt)
    return x


def _run(g, x: torch.Tensor, device: str) -> torch.Tensor:
    (out,) = g.compile(device=device)(x)
    if isinstance(out, torch.Tensor):
        return out
    out = np.asarray(out)
    if out.dtype.name == "bfloat16":  # torch reads no ml_dtypes array: the bits
        return torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(out)


def _bitwise(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    bad = (got != want) & ~(got.isnan() & want.isnan())
    assert not bad.any(), f"{int(bad.sum())} of {got.numel()} differ, e.g. {got[bad][:4]} vs torch {want[bad][:4]}"
    number = ~want.isnan()
    assert torch.equal(got[number].signbit(), want[number].signbit())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("divisor", [3.0, 0.1, 7.0, -6.0, 1e-3, 4.0])
def test_division_by_a_scalar_constant_is_torchs_bit_for_bit(device, dtype, divisor):
    dt, tdt = DTYPES[dtype]
    x = _inputs(tdt)
    g = lm.Graph()
    g.output(g.input("x", (1000,), dt) / divisor)
    # the builder's scalar is a constant of x's dtype: torch's 0-d tensor of that dtype
    want = x / torch.tensor(divisor, dtype=tdt)
    _bitwise(_run(g, x, device), want)


@pytest.mark.parametrize("device", DEVICES)
def test_65504_over_3_in_f16_is_21840(device):
    g = lm.Graph()
    g.output(g.input("x", (1,), lm.f16) / 3.0)
    (out,) = g.compile(device=device)(np.array([65504], np.float16))
    assert float(out[0]) == 21840.0 == float(torch.tensor([65504.0], dtype=torch.float16)[0] / 3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_division_by_a_broadcast_constant_array_is_torchs(device, dtype):
    """A per-row divisor (a weight broadcast along the rows, as an ONNX Div by an initializer)."""
    dt, tdt = DTYPES[dtype]
    c = torch.tensor([[3.0], [0.1], [-7.0], [4.0]], dtype=tdt)
    x = _inputs(tdt)[:1000].reshape(4, 250)
    g = lm.Graph()
    g.output(g.input("x", (4, 250), dt) / g.constant(c.numpy()))
    _bitwise(_run(g, x, device), x / c)


def _optimized(divisor: float) -> list:
    g = lm.Graph()
    g.output(g.input("x", (8,)) / divisor)
    return toposort(g.compile(device="numpy").outputs)


def test_a_power_of_two_divisor_folds_to_a_product_and_others_stay_divisions():
    assert Op.RECIP not in {n.op for n in _optimized(4.0)}  # x * 0.25: exact, one multiply
    (fused,) = [n for n in _optimized(3.0) if n.op is Op.FUSED_ELEMENTWISE]
    assert fused.arg.op is Op.MUL and {s.op for s in fused.arg.src} == {Op.INPUT, Op.RECIP}  # renders x / 3


@pytest.mark.parametrize("v,dtype,exact", [
    (4.0, DType.F32, True), (-0.5, DType.F32, True), (3.0, DType.F32, False), (0.1, DType.F32, False),
    (2.0 ** 126, DType.F32, True), (2.0 ** 127, DType.F32, False),  # 2**-127 is subnormal (flushed by -ftz)
    (2.0 ** -127, DType.F32, False), (2.0 ** -14, DType.F16, True), (2.0 ** -15, DType.F16, False),
    (2.0 ** 15, DType.F16, False),  # 2**-15: a subnormal half
    (2.0 ** 16, DType.F16, False), (2.0 ** -126, DType.BF16, True), (2.0 ** 1022, DType.F64, True),
    (float("inf"), DType.F32, False), (0.0, DType.F32, False),
])
def test_exact_reciprocal_is_a_power_of_two_with_a_normal_reciprocal(v, dtype, exact):
    assert exact_reciprocal(v, dtype) is exact


@pytest.mark.parametrize("device", DEVICES)
def test_division_by_a_tiny_power_of_two_keeps_torchs_overflow(device):
    """x / 2**-126 overflows exactly where torch's does (x * 2**126 is the same product)."""
    x = torch.tensor([1.0, 2.0, -3.0, 1e-30, 1e30], dtype=torch.float32)
    g = lm.Graph()
    g.output(g.input("x", (5,)) / 2.0 ** -126)
    _bitwise(_run(g, x, device), x / 2.0 ** -126)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_unoptimized_graphs_keep_the_primitives_product(device):
    """optimize=False runs the primitives as built (README): x / 3 is x * fl(1/3), rounded twice."""
    x = _inputs(torch.float32)
    g = lm.Graph()
    g.output(g.input("x", (1000,)) / 3.0)
    (out,) = g.compile(device=device, optimize=False)(x.numpy())
    np.testing.assert_array_equal(out, x.numpy() * np.reciprocal(np.float32(3.0)))
