"""fmod by a constant power of two (floor's fmod(x, 1), round's fmod(x, 2)) renders as
copysign(x - c * trunc(x / c), x) in C and CUDA (`render/cstyle.fmod_by_power_of_two`): the same
bytes as C's fmod (NumPy's np.fmod) for every value, signed zeros, subnormals, infinities and
NaN included, and the floor / round / remainder built on it unchanged; other divisors keep fmod."""

import numpy as np
import pytest

from luminal import devices
from luminal.builder import Graph

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered")  # NumPy's fmod of inf
DEVICES = ["numpy", "cpu"] + (["cuda-emulator"] if devices.get("cuda-emulator").available else [])


def _values(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    special = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.0, -2.0, 2.5, -2.5, 3.0, -3.0, 7.75, -7.75,
               np.inf, -np.inf, np.nan, info.tiny, -info.tiny, info.smallest_subnormal, -info.smallest_subnormal,
               info.max, -info.max, 2.0 ** (info.nmant + 1) - 1, -(2.0 ** (info.nmant + 1)) + 1, 2.0 ** info.nmant + 0.5,
               np.nextafter(dtype(1), dtype(0)), np.nextafter(dtype(2), dtype(3)), 1e30, -1e30]
    rng = np.random.default_rng(0)
    spread = rng.standard_normal(400) * np.exp(rng.uniform(-20, 40, 400))
    return np.concatenate([np.array(special, dtype), spread.astype(dtype)])


def _flushed(x: np.ndarray, device: str) -> np.ndarray:
    """Without subnormals on the CUDA emulator: GPUs flush them (-ftz), as the README says."""
    if device != "cuda-emulator":
        return x
    return np.where(np.abs(x) < np.finfo(x.dtype).tiny, np.copysign(0, x), x).astype(x.dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("divisor", [1.0, 2.0, 4.0, -2.0, 1024.0, 0.5, 3.0])
def test_fmod_by_a_constant_is_c_fmod_bit_for_bit(device, dtype, divisor):
    x = _values(dtype)
    g = Graph()
    t = g.input("x", x.shape, dtype)
    g.output(t.fmod(divisor), "alone")  # a MOD kernel of its own
    g.output(t.fmod(divisor).mul(2.0), "in_region")  # inside a fused region (x 2 is exact here)
    x = _flushed(x, device)
    alone, in_region = g.compile(device=device)({"x": x})
    want = np.fmod(x, dtype(divisor))
    assert alone.tobytes() == want.tobytes()
    assert in_region.tobytes() == (want * dtype(2)).tobytes()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_floor_round_remainder_are_numpys(device, dtype):
    x = _values(dtype)
    g = Graph()
    t = g.input("x", x.shape, dtype)
    g.output(t.floor(), "floor")
    g.output(t.round(), "round")
    g.output(t.remainder(2.0), "remainder")
    x = _flushed(x, device)
    floor, rnd, rem = g.compile(device=device)({"x": x})
    assert floor.tobytes() == np.floor(x).tobytes()
    assert rnd.tobytes() == np.round(x).tobytes()
    np.testing.assert_array_equal(rem, np.remainder(x, dtype(2.0)))
