"""A loop's parallel threshold follows its element's arithmetic (`dialect.element_work`): an exact
GELU's loop, alone or as a GEMM's epilogue, runs on the team from a tenth of PAR_MIN elements,
a cheap one from PAR_MIN. Split or not, every element is computed alone, so the values are the
NumPy runtime's and the bits the same on any team."""

import numpy as np
import pytest

import luminal as lm
from luminal.hlir.ops import Op, toposort
from luminal.kernels.cpu import build
from luminal.kernels.cpu import runtime as cpu_runtime
from luminal.kernels.render.dialect import PAR_MIN, element_work, par_min

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


def _regions(compiled):
    return [n for n in toposort(compiled.outputs) if n.op is Op.FUSED_ELEMENTWISE]


def test_element_work_weighs_libm_calls_not_cheap_levels():
    g = lm.Graph("work")
    x, s = g.input("x", (8, 300)), g.input("s", (300,))
    g.output(((x * s + 1.0).maximum(0.0) * 6.0).minimum(6.0), "cheap")
    g.output(x.gelu(), "gelu")
    regions = _regions(g.compile(device="numpy", optimize=True))
    works = sorted(element_work(r) for r in regions)
    assert works[0] == 1, works  # BatchNorm + ReLU6's handful of levels: PAR_MIN as before
    assert works[-1] >= 8, works  # erf's polynomial and an exp
    gelu = max(regions, key=element_work)
    assert par_min(gelu) == PAR_MIN // element_work(gelu) < PAR_MIN // 8


@pytest.mark.parametrize("rows", [1, 24, 3 * PAR_MIN // 512])  # serial, split only for GELU's cost, split
def test_gelu_loops_split_by_their_cost_and_keep_their_bits(monkeypatch, rows):
    g = lm.Graph("gelu")
    x, w, b = g.input("x", ("n", 256)), g.input("w", (512, 256)), g.input("b", (512,))
    g.output(x.linear(w, b).gelu(), "epilogue")  # the GEMM's epilogue region
    g.output((x * 1.5).gelu(), "alone")  # a FusedElementwise kernel of its own
    ref = g.compile(device="numpy")
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((rows, 256)).astype(np.float32),
             "w": (rng.standard_normal((512, 256)) / 16).astype(np.float32),
             "b": rng.standard_normal(512).astype(np.float32)}
    feeds["x"][0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    want = ref(feeds)
    runs = []
    for team in (1, 2, 3):
        monkeypatch.setattr(cpu_runtime, "threads", lambda team=team: team)
        cpu = g.compile(device="cpu")
        gelu = max(_regions(cpu), key=element_work)
        assert element_work(gelu) >= 8
        assert f">= {par_min(gelu)}" in cpu.runtime.source  # the cost-scaled threshold is what runs
        got = cpu(feeds)
        for (name, _), a, e in zip(g.outputs, got, want):
            np.testing.assert_array_equal(np.isnan(a), np.isnan(e), err_msg=name)
            np.testing.assert_allclose(a, e, rtol=2e-5, atol=2e-5, err_msg=f"{name} rows={rows} team={team}")
        runs.append(got)
    for got in runs[1:]:
        for a, e in zip(got, runs[0]):
            np.testing.assert_array_equal(a, e)
