"""The builder's min, -max(-x, -y) (a clamp's upper bound, ReLU6's 6, `minimum`), renders in C
and CUDA as one `lum_min_nan(x, y)` (`render/cstyle._negated_max`): -lum_max_nan(p, q) is
lum_min_nan(-p, -q) for every value, so the outputs keep the NumPy runtime's values, NaN
positions and signed zeros (a NaN's own sign bit is the hardware's either way). The NumPy
runtime runs the same optimized graph (`device="numpy"` at precision "float32": each operation
rounded to f32, as C's)."""

import numpy as np
import pytest

from luminal import devices
from luminal.builder import Graph
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Expr, Op
from luminal.kernels.render.cstyle import expression

DEVICES = ["cpu"] + (["cuda-emulator"] if devices.get("cuda-emulator").available else [])


def _values(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    special = [np.nan, np.inf, -np.inf, -0.0, 0.0, 6.0, -6.0, 1.5, -1.5, 1e30, -1e30]
    v = (rng.standard_normal(n) * 5).astype(np.float32)
    v[: len(special)] = special
    v[len(special):] = np.where(rng.random(n - len(special)) < 0.2, rng.choice(np.array(special, np.float32), n - len(special)),
                                v[len(special):])
    return v


def _same(got: np.ndarray, want: np.ndarray) -> None:
    got = np.asarray(got)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    keep = ~np.isnan(want)
    assert got[keep].tobytes() == want[keep].tobytes()  # values and the signs of zeros


@pytest.mark.parametrize("device", DEVICES)
def test_min_clamp_and_relu6_keep_the_reference_bits(device):
    n = 203
    x, y = _values(n, 0), _values(n, 1)
    x[:11] = [-0.0, 0.0, -0.0, 0.0, np.nan, 1.0, np.nan, 6.0, -0.0, 7.0, -7.0]
    y[:11] = [0.0, -0.0, -0.0, 0.0, 1.0, np.nan, np.nan, 6.0, 6.0, -0.0, 0.0]
    g = Graph()
    a, b = g.input("x", (n,)), g.input("y", (n,))
    g.output(a.clamp(0.0, 6.0), "relu6")
    g.output(a.minimum(b), "minimum")
    g.output(a.clamp(None, -0.0).mul(b.add(1.0)), "clamp_max_in_region")
    g.output(a.mul(2.0).clamp(-3.0, 3.0).add(b), "clamp_in_region")
    feeds = {"x": x, "y": y}
    want = g.compile(device="numpy", precision="float32")(feeds)
    got = g.compile(device=device)(feeds)
    for w, o in zip(want, got):
        _same(o, w)


def test_a_negated_max_of_negations_renders_as_one_min():
    x = Expr(Op.INPUT, DType.F32, (), 0)
    neg = Expr(Op.MUL, DType.F32, (x, Expr(Op.CONSTANT, DType.F32, (), -1.0)))
    relu6 = Expr(Op.MUL, DType.F32, (Expr(Op.MAXIMUM, DType.F32, (neg, Expr(Op.CONSTANT, DType.F32, (), -6.0))),
                                    Expr(Op.CONSTANT, DType.F32, (), -1.0)))
    c = expression(relu6, lambda i: f"in{i}")
    assert c.startswith("lum_min_nan(") and "lum_max_nan" not in c and "-0x1" not in c
    # a max not of negations keeps its own form
    plain = Expr(Op.MUL, DType.F32, (Expr(Op.MAXIMUM, DType.F32, (x, x)), Expr(Op.CONSTANT, DType.F32, (), -1.0)))
    assert "lum_max_nan" in expression(plain, lambda i: f"in{i}")
