"""The direct convolution (`luminal/kernels/cpu/conv_direct.py`, `steps.DirectConv`).

A convolution's fused im2col GEMM may skip its im2col matrix: the input is rewritten as phase
planes and the micro-kernel reads B's rows in place from them. Forced on (`LUMINAL_CONV=direct`)
so it runs on any machine, it is checked against torch and against the im2col path over strides,
dilations, asymmetric and absent padding, 1-D convolutions, batches, channel counts that fill no
micro-tile, every team size (the bits must not depend on it), NaN and inf in the input, its
epilogue regions, and precision "float64" (which keeps the im2col path's widened GEMM).
"""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

import luminal as lm
from luminal.builder import nn
from luminal.frontends.torch.aten_backward import _weight_grad
from luminal.hlir.ops import Node, Op
from luminal.hlir.shape import ShapeTracker
from luminal.kernels.cpu import build as cpu_build
from luminal.kernels.cpu import choices, conv_direct
from luminal.kernels.cpu import runtime as cpu_runtime
from luminal.kernels.cpu import steps as cpu_steps

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not lm.devices.get("cpu").available, reason="no C compiler")

# (x shape, weight shape, stride, padding, dilation)
CASES = [
    ((1, 32, 28, 28), (32, 32, 3, 3), 1, 1, 1),  # a ResNet stage: 4 x 24 micro-tiles, tiles per team (`lum_dc_per`)
    ((1, 3, 64, 64), (8, 3, 7, 7), 2, 3, 1),  # a stem: stride 2, phase planes
    ((2, 5, 13, 11), (7, 5, 3, 3), 1, 1, 1),  # a batch of 2; 7 channels out fill no micro-tile
    ((1, 8, 15, 17), (9, 8, 3, 5), 2, (1, 2), 1),  # a rectangular kernel, different paddings
    ((1, 4, 20, 20), (6, 4, 3, 3), 1, 2, 2),  # dilation 2
    ((1, 6, 9, 9), (13, 6, 3, 3), 1, 0, 1),  # no padding: X is the input itself
    ((1, 16, 7, 7), (40, 16, 3, 3), 1, 1, 1),  # a small image: 6 x 16 micro-tiles, channels in blocks of 6
    ((1, 24, 7, 7), (100, 24, 3, 3), 1, 1, 1),  # blocks of 12 channels, the last of 4
    ((2, 16, 14, 14), (64, 16, 3, 3), 2, 1, 1),  # a stride-2 downsample of a small image, a batch of 2
    ((1, 72, 10, 10), (20, 72, 3, 3), 1, 1, 1),  # depth 648: two of the micro-kernel's depth blocks and part of one
    ((1, 6, 11, 12), (5, 6, 2, 3), 3, ((1, 0), (2, 1)), 1),  # stride 3, ONNX-style asymmetric pads
    ((1, 4, 30), (5, 4, 3), 1, 1, 1),  # 1-D: one output row
    ((2, 3, 40), (4, 3, 5), 2, 2, 1),
]


def _graph(xs, ws, stride, padding, dilation, epilogue: bool):
    g = lm.Graph("direct")
    x, w = g.input("x", xs), g.input("w", ws)
    b = g.input("b", (ws[0],)) if epilogue else None
    y = nn.conv(x, w, b, stride, padding, dilation)
    g.output(y.relu() if epilogue else y, "y")
    return g


def _feeds(xs, ws, special: bool, seed: int = 0, epilogue: bool = True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    if special:
        flat = x.reshape(-1)
        flat[[3, flat.size // 2, flat.size - 1]] = [np.nan, np.inf, -np.inf]
    feeds = {"x": x, "w": (rng.standard_normal(ws) * 0.3).astype(np.float32),
             "b": rng.standard_normal(ws[0]).astype(np.float32)}
    if not epilogue:
        del feeds["b"]
    return feeds


def _torch(feeds, stride, padding, dilation, epilogue: bool):
    x, w = (torch.from_numpy(feeds[k]) for k in ("x", "w"))
    b = torch.from_numpy(feeds["b"]) if epilogue else None
    conv = {3: torch.nn.functional.conv1d, 4: torch.nn.functional.conv2d}[x.dim()]
    if isinstance(padding, tuple) and isinstance(padding[0], tuple):  # (before, after) per dim: pad first
        x = torch.nn.functional.pad(x, [v for pair in reversed(padding) for v in pair])
        padding = 0
    y = conv(x, w, b, stride, padding, dilation)
    return (y.relu() if epilogue else y).numpy()


def _compile(monkeypatch, g, mode: str):
    monkeypatch.setenv("LUMINAL_CONV", mode)
    compiled = g.compile(device="cpu")
    source = "\n".join(compiled.runtime.program.sources)
    assert ("lum_dconv_" in source) == (mode == "direct"), mode
    return compiled


def _same_on_any_team(monkeypatch, direct, im2col, feeds, want, tol):
    """The direct program's output on teams of 1 to 3 threads: torch's and the im2col path's within
    `tol`, and the same bits on every team (one chain per output, whoever computes it)."""
    results = []
    for team in (1, 2, 3):
        monkeypatch.setattr(cpu_runtime, "threads", lambda team=team: team)
        got = direct(feeds)[0]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)
        np.testing.assert_allclose(got, im2col(feeds)[0], rtol=tol, atol=tol, equal_nan=True)
        results.append(got)
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])
    return results[0]


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize("epilogue", [False, True], ids=["bare", "bias-relu"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}s{c[2]}p{c[3]}d{c[4]}".replace(" ", ""))
def test_direct_path_matches_torch_and_the_im2col_path_on_any_team(monkeypatch, case, epilogue, special):
    xs, ws, stride, padding, dilation = case
    g = _graph(xs, ws, stride, padding, dilation, epilogue)
    feeds = _feeds(xs, ws, special, epilogue=epilogue)
    want = _torch(feeds, stride, padding, dilation, epilogue)
    direct = _compile(monkeypatch, g, "direct")
    im2col = _compile(monkeypatch, g, "im2col")
    got = _same_on_any_team(monkeypatch, direct, im2col, feeds, want, 1e-4)
    if special:  # the positions past each output row (computed, then dropped) never leak a NaN
        assert np.isfinite(want).sum() == np.isfinite(got).sum() > 0


def test_float64_precision_keeps_the_widened_gemm(monkeypatch):
    xs, ws = (1, 16, 20, 20), (24, 16, 3, 3)
    g = _graph(xs, ws, 1, 1, 1, False)
    feeds = _feeds(xs, ws, False, seed=3, epilogue=False)
    direct, im2col = _compile(monkeypatch, g, "direct"), _compile(monkeypatch, g, "im2col")
    previous = lm.set_precision("float64")
    try:
        a, b = direct(feeds)[0], im2col(feeds)[0]
    finally:
        lm.set_precision(previous)
    np.testing.assert_array_equal(a, b)  # the same path: float64 products rounded once
    x, w = (torch.from_numpy(feeds[k]).double() for k in ("x", "w"))
    exact = torch.nn.functional.conv2d(x, w, None, 1, 1).float().numpy()
    np.testing.assert_array_equal(a, exact)


def test_a_resnet_block_through_torch_matches_eager(monkeypatch):
    monkeypatch.setenv("LUMINAL_CONV", "direct")
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, 2, 1, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 32, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(32)).eval()
    for m in block.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 16, 33, 30)
    compiled = lm.compile(block, (x,), device="cpu")
    source = "\n".join(compiled.compiled.runtime.program.sources)
    assert source.count("lum_dconv_") >= 2 + 2  # the micro-kernels' definitions, and two calls
    with torch.no_grad():
        np.testing.assert_allclose(compiled(x).numpy(), block(x).numpy(), rtol=1e-4, atol=1e-4)


def test_the_micro_tile_is_the_one_wasting_least():
    def geometry(m, oh, ow, kernels=cpu_steps.DC_KERNELS):  # a 3x3 stride-1 convolution with padding 1 on (C, oh, ow)
        x = Node(Op.INPUT, lm.DType.F32, (1, 8, oh + 2, ow + 2), (), "x")
        window = ShapeTracker((1, 8, 3, 3, oh, ow), ((oh + 2) * (ow + 2) * 8, (oh + 2) * (ow + 2), ow + 2, 1, ow + 2, 1), 0)
        copy = Node(Op.CONTIGUOUS, lm.DType.F32, window.shape, (Node(Op.VIEW, lm.DType.F32, window.shape, (x,), window),))
        return cpu_steps.direct_conv(copy, oh * ow, m, kernels=kernels)

    # AVX2's micro-tiles (8-float vectors), whatever this machine has
    assert geometry(32, 56, 56).nr == 24  # 32 rows: 8 tiles of 4, none wasted
    assert geometry(256, 7, 7).nr == 16  # 61 positions: 64 in micro-tiles of 16, 72 of 24
    # AVX-512's (16-float vectors): 8 x 48 runs faster per multiply-add, 12 x 32 where it wastes less
    wide = cpu_steps.DC_KERNELS_AVX512
    assert geometry(32, 56, 56, wide).nr == 48  # 32 rows: 4 tiles of 8; 12 x 32 would compute 36
    assert geometry(256, 7, 7, wide).nr == 32  # 61 positions: 64 in tiles of 32, 96 of 48
    assert geometry(256, 7, 7, wide).mr == 12
    # the library's own table follows its build's vector width (LUMINAL_ISA=avx2: AVX2's anywhere)
    assert cpu_steps.dc_kernels() == (wide if "-mavx512f" in cpu_build.machine_flags() else cpu_steps.DC_KERNELS)
    g = geometry(64, 28, 28)
    assert (g.wq, g.ext, g.planes_floats) == (30, 27 * 30 + 28, 8 * 30 * 30)
    # the scratch never depends on more threads than there are units of work
    # (tiles of positions: as narrow as half of `tile_chunks`, the narrowest `lum_dc_per` takes per call)
    assert g.block_rows(64) == 64 and g.work(64) == -(-g.chunks // -(-g.tile_chunks(64) // 2)) > 1
    assert g.scratch(64, 1000) == g.scratch(64, g.work(64)) > g.scratch(64, 1)
    # a small image, a deep weight: all positions per unit, the channels split (43 micro-tiles of
    # rows in blocks of 3), so the weight passes once, not once per tile of positions
    small = geometry(256, 7, 7)
    assert (small.block_rows(256), small.tile_chunks(256), small.work(256)) == (18, small.chunks, 15)
    assert small.scratch(256, 2) == small.planes_floats + cpu_steps.DC_SLACK + 2 * 18 * small.chunks * 16


def test_shapes_it_does_not_describe_stay_on_the_im2col_path():
    x = Node(Op.INPUT, lm.DType.F32, (1, 4, 10, 10), (), "x")
    st = ShapeTracker((1, 4, 3, 3, 8, 8), (400, 100, 10, 1, 10, 1), 0)
    copy = Node(Op.CONTIGUOUS, lm.DType.F32, st.shape, (Node(Op.VIEW, lm.DType.F32, st.shape, (x,), st),))
    assert cpu_steps.direct_conv(copy, 64, 5) is not None
    f64 = Node(Op.CONTIGUOUS, lm.DType.F64, st.shape, (Node(Op.VIEW, lm.DType.F64, st.shape, (x,), st),))
    assert cpu_steps.direct_conv(f64, 64, 5) is None  # f32 only
    # columns (kh, kw, oh, ow): two dims move one of X's; the rows' channel dim alone moves one (as a
    # weight gradient's positions would): X's channels become the planes' contiguous dim
    assert cpu_steps.direct_conv(copy, 9 * 64, 5).columns is False
    both = ShapeTracker((1, 4, 3, 3, 8, 8), (400, 100, 10, 1, 11, 1), 0)  # oh moves rows and columns of X
    mixed = Node(Op.CONTIGUOUS, lm.DType.F32, both.shape, (Node(Op.VIEW, lm.DType.F32, both.shape, (x,), both),))
    assert cpu_steps.direct_conv(mixed, 64, 5) is None


# weight gradients: (x shape, weight shape, stride, padding, dilation)
WGRAD_CASES = [
    ((4, 3, 40, 40), (8, 3, 7, 7), 2, 3, 1),  # a stem: 20 positions a row
    ((2, 16, 19, 19), (32, 16, 3, 3), 1, 1, 1),  # 19: two vectors and a masked one
    ((3, 8, 12, 12), (24, 8, 3, 3), 2, 1, 1),  # 6 positions a row: one masked vector
    ((2, 4, 17, 15), (5, 4, 3, 3), 1, 2, 2),  # dilation 2; 5 rows: a partial 4 x 3 tile
    ((2, 4, 5, 5), (6, 4, 3, 3), 2, 0, 1),  # 2 positions a row: a vector spans more than the next row
    ((2, 6, 33), (7, 6, 5), 1, 2, 1),  # 1-D
    ((2, 5, 24, 24), (100, 5, 3, 3), 1, 1, 1),  # 100 channels: a partial tile of them; 1,152 positions: 3 chunks
]


def _wgrad_graph(xs, ws, stride, padding, dilation):
    g = lm.Graph("wgrad")
    nsp = len(xs) - 2
    outs = [(n + 2 * padding - dilation * (k - 1) - 1) // stride + 1 for n, k in zip(xs[2:], ws[2:])]
    x, go = g.input("x", xs), g.input("go", (xs[0], ws[0], *outs))
    g.output(_weight_grad(x, go, ws[2:], [stride] * nsp, [padding] * nsp, [dilation] * nsp, 1), "gw")
    return g, (xs[0], ws[0], *outs)


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize("case", WGRAD_CASES, ids=lambda c: f"{c[0]}x{c[1]}s{c[2]}p{c[3]}d{c[4]}".replace(" ", ""))
def test_weight_gradient_matches_torch_and_the_im2col_path_on_any_team(monkeypatch, case, special):
    xs, ws, stride, padding, dilation = case
    g, gos = _wgrad_graph(xs, ws, stride, padding, dilation)
    rng = np.random.default_rng(11)
    feeds = {"x": rng.standard_normal(xs).astype(np.float32), "go": rng.standard_normal(gos).astype(np.float32)}
    if special:  # an inf in the padding's neighbourhood and a NaN in the gradient: torch's NaNs, no others
        feeds["x"].reshape(-1)[[0, feeds["x"].size // 3]] = [np.inf, -np.inf]
        feeds["go"].reshape(-1)[7] = np.nan
    x, go = (torch.from_numpy(feeds[k]).double() for k in ("x", "go"))
    weight = {3: torch.nn.grad.conv1d_weight, 4: torch.nn.grad.conv2d_weight}[len(xs)]
    want = weight(x, ws, go, stride, padding, dilation).float().numpy()
    monkeypatch.setenv("LUMINAL_CONV", "direct")
    direct = g.compile(device="cpu")
    source = "\n".join(direct.runtime.program.sources)
    # (1-D: the copy's columns (c, kw) move one dim of X each, so the convolution's form serves)
    assert "lum_dwgrad_op_" in source if len(xs) == 4 else "lum_dconv_" in source
    monkeypatch.setenv("LUMINAL_CONV", "im2col")
    im2col = g.compile(device="cpu")
    _same_on_any_team(monkeypatch, direct, im2col, feeds, want, 2e-4)


def test_a_weight_gradient_of_many_channels_stays_on_the_im2col_path():
    g, _ = _wgrad_graph((2, 8, 10, 10), (cpu_steps.DC_WGRAD_MAX_ROWS + 1, 8, 3, 3), 1, 1, 1)
    steps = g.compile(device="cpu").runtime.program.steps
    copy = next(s.output for s in steps if s.absorbed and s.output.op is Op.CONTIGUOUS and len(s.output.shape) == 7)
    assert cpu_steps.direct_conv(copy, 72, cpu_steps.DC_WGRAD_MAX_ROWS + 1) is None
    assert cpu_steps.direct_conv(copy, 72, cpu_steps.DC_WGRAD_MAX_ROWS).columns is False


def test_an_unknown_mode_warns_and_means_auto(monkeypatch, caplog):
    monkeypatch.setenv("LUMINAL_CONV", "winograd")
    with caplog.at_level(logging.WARNING, logger="luminal.cpu"):
        assert choices.conv_mode() == "auto"
    assert "LUMINAL_CONV='winograd'" in caplog.text
    monkeypatch.setenv("LUMINAL_CONV", "im2col")
    assert not conv_direct.wanted()


# (x shape, stored weight shape, stride, padding, the builds whose lanes path takes it): small
# images whose rows the lanes path cuts into whole units (AVX-512: `conv_direct.lanes`), or any
# image in units of 6 positions anywhere on the grid (AVX2: `conv_direct.GATHER`)
LANES_CASES = [
    ((1, 64, 7, 7), (256, 64, 3, 3), 1, 1, "avx512 avx2"),  # ResNet's last stage: rows of 7, eight panels
    ((1, 32, 7, 7), (40, 32, 3, 3), 1, 1, "avx512"),  # 40 channels: the second panel's last 24 lanes zeros
    ((1, 16, 7, 7), (56, 16, 3, 3), 1, 1, "avx2"),  # 56 channels: the fourth panel's last 8 lanes zeros
    ((1, 32, 14, 14), (64, 32, 3, 3), 2, 1, "avx512 avx2"),  # stride 2 onto 7x7: phase planes
    ((1, 16, 9, 11), (64, 16, 3, 3), 1, 1, "avx512 avx2"),  # rows of 11 in units of 12: a position computed, never stored
    ((1, 24, 6, 20), (32, 24, 3, 3), 1, 1, "avx512 avx2"),  # rows of 20: units of 12 and 8
    ((1, 16, 4, 2), (32, 16, 3, 3), 1, 1, "avx2"),  # rows of 2: a unit of 6 spans three output rows
    # AVX2: 320 channels' planes and a panel of depth 2880 past L2 (`GATHER_CACHE_FLOATS`): the grid
    ((1, 320, 14, 14), (32, 320, 3, 3), 1, 1, "avx512"),
]


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize("case", LANES_CASES, ids=lambda c: f"{c[0]}x{c[1]}s{c[2]}".replace(" ", ""))
def test_the_lanes_path_of_a_stored_weight_gives_the_grids_bits(monkeypatch, case, special):
    """A convolution whose weight is stored in the graph, in a runtime that packs its weights, puts
    the output channels in the vector lanes where that computes less than the grid: each output is the
    same chain of multiply-adds as the extended grid's, so the bits equal the unpacked runtime's
    (the grid's) on every team, through the region (bias, residual, ReLU) on the way out."""
    from luminal.kernels.cpu import sgemm
    from luminal.kernels.cpu.runtime import CpuRuntime

    monkeypatch.setenv("LUMINAL_CONV", "direct")
    xs, ws, stride, padding, builds = case
    rng = np.random.default_rng(7)
    w = (rng.standard_normal(ws) * 0.2).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    x = rng.standard_normal(xs).astype(np.float32)
    if special:
        x.reshape(-1)[[0, x.size // 3, x.size - 1]] = [np.nan, np.inf, -np.inf]
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride, padding)
    res = rng.standard_normal(tuple(want.shape)).astype(np.float32)
    want = (want + torch.from_numpy(res)).relu().numpy()
    g = lm.Graph("lanes")
    y = nn.conv(g.input("x", xs), g.constant(w), g.constant(b), stride, padding, 1)
    g.output((y + g.input("res", res.shape)).relu(), "y")
    outputs = g.compile(device="numpy").outputs
    plain, packed = CpuRuntime(outputs), CpuRuntime(outputs)
    packs = packed.pack_weights()
    calls = re.findall(r"lum_dconv_(?:lanes|gather)_\d+\(K,", "\n".join(packed.program.sources))
    build = "avx512" if cpu_steps.dc_kernels() is cpu_steps.DC_KERNELS_AVX512 else "avx2"
    assert bool(calls) == (sgemm.isa() == build and build in builds.split())
    feeds = {"x": x, "res": res}
    for team in (1, 2, 3):
        monkeypatch.setattr(cpu_runtime, "threads", lambda team=team: team)
        got, grid = packed(feeds)[0], plain(feeds)[0]
        np.testing.assert_array_equal(got.view(np.uint32), grid.view(np.uint32))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert np.isfinite(got).sum() == np.isfinite(want).sum() > 0
    if calls and packs and sgemm.isa() is not None:  # the panels were packed, and read
        assert int((packed._pack[0][:-1].reshape(-1, 8)[:, 6] == 2).sum()) >= 1
