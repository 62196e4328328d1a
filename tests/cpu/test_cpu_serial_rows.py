"""Row loops of small work run outside any OpenMP region (`render._rows`: `omp parallel if (0)`
still builds a team of one in libgomp, ~0.4 us a launch), large ones across the team; both
give the NumPy runtime's values, at sizes on either side of PAR_MIN and with dynamic dims."""

import numpy as np
import pytest

import luminal as lm
from luminal.kernels.cpu import build
from luminal.kernels.render.dialect import PAR_MIN

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


def test_small_and_large_row_loops_match_numpy():
    g = lm.Graph("rows")
    x, y = g.input("x", ("n", 301)), g.input("y", ("n", 301))
    g.output((x * 2.0 + y).exp().maximum(y), "fused")
    g.output(x.permute(1, 0).contiguous(), "copy")
    cpu, ref = g.compile(device="cpu"), g.compile(device="numpy")
    src = cpu.runtime.source
    assert "#pragma omp parallel if" not in src.split("lum_run")[0].split("static void", 1)[1]  # kernels only
    rng = np.random.default_rng(0)
    for n in (1, 3, PAR_MIN // 301 + 7):  # serial, serial, across the team
        feeds = {"x": rng.standard_normal((n, 301)).astype(np.float32),
                 "y": rng.standard_normal((n, 301)).astype(np.float32)}
        feeds["x"][0, :4] = [np.nan, np.inf, -np.inf, -0.0]
        for (name, _), got, want in zip(g.outputs, cpu(feeds), ref(feeds)):
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"{name} n={n}")
