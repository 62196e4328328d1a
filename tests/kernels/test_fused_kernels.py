"""The CUDA kernels of the fused ops against the NumPy runtime's fused ops (whose agreement with
the primitive reference definitions tests/egraph checks): odd shapes, size-1 dims, broadcast and
permuted views, long rows (> 4096), f16/bf16 with f32 accumulation, symbolic dims."""

import functools

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.hlir.ops import Expr, Node, Op
from luminal.kernels.runtime import KernelRuntime

RNG = np.random.default_rng(7)


def _fused(t, op, dtype, shape, src, arg=None):
    return lm.Tensor(t.graph, Node(op, dtype, tuple(shape), tuple(s.node for s in src), arg))


def _cases():
    """(name, graph, feeds, tolerance): every fused-op kernel form in one list."""
    cases = []

    def add(name, build, feeds, tol=1e-5):
        g = lm.Graph(name)
        prefix = f"c{len(cases)}_"  # unique input names: all cases share one kernel build
        tensors = {k: g.input(prefix + k, v.shape, lm.DType.of(v.dtype)) for k, v in feeds.items()}
        g.output(build(g, **tensors))
        cases.append((name, g, {prefix + k: v for k, v in feeds.items()}, tol))

    f32 = lambda *s: RNG.standard_normal(s).astype(np.float32)  # noqa: E731
    for shape, axis in [((3, 7), -1), ((2, 5, 33), 1), ((1, 4100), 1), ((4, 1), 0)]:
        ax = axis % len(shape)
        add(f"softmax{shape}", lambda g, x, ax=ax: _fused(x, Op.SOFTMAX, lm.f32, x.shape, [x], ax), {"x": f32(*shape) * 3})
        add(f"kahan{shape}", lambda g, x, ax=ax: _fused(x, Op.KAHAN_SUM, lm.f32, x.shape[:ax] + x.shape[ax + 1 :], [x], ax),
            {"x": f32(*shape)})
    add("softmax_masked_row", lambda g, x: _fused(x, Op.SOFTMAX, lm.f32, x.shape, [x], 1),
        {"x": np.where(RNG.random((3, 9)) < 0.5, -np.inf, f32(3, 9)).astype(np.float32)})
    add("softmax_permuted_view", lambda g, x: (lambda v: _fused(v, Op.SOFTMAX, lm.f32, v.shape, [v], 1))(x.permute(1, 0)),
        {"x": f32(6, 5)})
    add("softmax_f16", lambda g, x: _fused(x, Op.SOFTMAX, lm.f16, x.shape, [x], 1), {"x": f32(3, 40).astype(np.float16)}, 2e-3)
    for (m, k, n) in [(1, 64, 17), (5, 7, 3), (33, 40, 31), (64, 16, 64), (1, 4097, 2)]:
        add(f"matmul_{m}x{k}x{n}", lambda g, a, b: _fused(a, Op.MAT_MUL, lm.f32, (a.shape[0], b.shape[1]), [a, b]),
            {"a": f32(m, k), "b": f32(k, n)}, 1e-4 if k > 1000 else 1e-5)
    add("matmul_batched_transposed_b", lambda g, a, b: (lambda bt: _fused(a, Op.MAT_MUL, lm.f32, (2, 9, 6), [a, bt]))(
        b.transpose(-1, -2)), {"a": f32(2, 9, 12), "b": f32(2, 6, 12)})
    add("matmul_broadcast_a", lambda g, a, b: _fused(a, Op.MAT_MUL, lm.f32, (3, 4, 5), [a.expand(3, 4, 8), b]),
        {"a": f32(4, 8), "b": f32(3, 8, 5)})
    add("matmul_bf16", lambda g, a, b: _fused(a, Op.MAT_MUL, lm.bf16, (7, 9), [a, b]),
        {"a": f32(7, 33).astype(ml_dtypes.bfloat16), "b": f32(33, 9).astype(ml_dtypes.bfloat16)}, 2e-2)
    add("matmul_int", lambda g, a, b: _fused(a, Op.MAT_MUL, lm.int64, (3, 2), [a, b]),
        {"a": RNG.integers(-5, 5, (3, 4)), "b": RNG.integers(-5, 5, (4, 2))}, 0)
    add("exp_sigmoid", lambda g, x: _fused(_fused(x, Op.EXP, lm.f32, x.shape, [x]), Op.SIGMOID, lm.f32, x.shape,
                                           [_fused(x, Op.EXP, lm.f32, x.shape, [x])]), {"x": f32(3, 5)})
    x0, x1, half = Expr(Op.INPUT, lm.f32, (), 0), Expr(Op.INPUT, lm.f32, (), 1), Expr(Op.CONSTANT, lm.f32, (), 0.5)
    expr = Expr(Op.ADD, lm.f32, (Expr(Op.MUL, lm.f32, (x0, Expr(Op.SIGMOID, lm.f32, (x0,)))),
                                 Expr(Op.CAST, lm.f32, (Expr(Op.LESS_THAN, lm.bool_, (x1, half)),))))
    add("fused_silu_plus_mask", lambda g, x, y: _fused(x, Op.FUSED_ELEMENTWISE, lm.f32, (4, 6), [x, y.expand(4, 6)], expr),
        {"x": f32(4, 6), "y": f32(6)})
    # 0-d values through every fused op (Softmax/KahanSum: 0-d rows and results)
    for op in (Op.EXP, Op.SIGMOID):
        add(f"{op.title}_0d", lambda g, x, op=op: _fused(x, op, lm.f32, (), [x]), {"x": f32()})
    i1 = Expr(Op.INPUT, lm.int32, (), 1)
    terms = [Expr(op, lm.f32, (x0,)) for op in (Op.EXP2, Op.LOG2, Op.SIN, Op.SQRT, Op.RECIP, Op.EXP, Op.SIGMOID)]
    terms += [Expr(Op.MOD, lm.f32, (x0, half)), Expr(Op.CAST, lm.f32, (Expr(Op.LESS_THAN, lm.bool_, (x0, half)),)),
              Expr(Op.CAST, lm.f32, (Expr(Op.MOD, lm.int32, (i1, Expr(Op.CONSTANT, lm.int32, (), 3))),))]
    every_op = functools.reduce(lambda a, b: Expr(Op.ADD, lm.f32, (a, b)), terms)
    add("every_pointwise_op_0d", lambda g, x, i: _fused(x, Op.FUSED_ELEMENTWISE, lm.f32, (), [x, i], every_op),
        {"x": np.abs(f32()) + np.float32(0.1), "i": np.array(-7, np.int32)})
    add("softmax_1d", lambda g, x: _fused(x, Op.SOFTMAX, lm.f32, (5,), [x], 0), {"x": f32(5)})
    add("kahan_to_0d", lambda g, x: _fused(x, Op.KAHAN_SUM, lm.f32, (), [x], 0), {"x": f32(7)})
    add("matmul_1x1x1", lambda g, a, b: _fused(a, Op.MAT_MUL, lm.f32, (1, 1), [a, b]), {"a": f32(1, 1), "b": f32(1, 1)})
    special = np.array([[np.nan, np.inf, -np.inf, -0.0, 1.5]], np.float32)
    add("select_broadcast_specials", lambda g, c, a, b: _fused(a, Op.SELECT, lm.f32, (3, 5), [c, a, b.expand(3, 5)]),
        {"c": RNG.random((3, 5)) < 0.5, "a": f32(3, 5), "b": special}, 0)
    add("select_bf16_0d", lambda g, c, a, b: _fused(a, Op.SELECT, lm.bf16, (), [c, a, b]),
        {"c": np.array(True), "a": np.array(-0.0, ml_dtypes.bfloat16), "b": np.array(2, ml_dtypes.bfloat16)}, 0)
    x0, c1 = Expr(Op.INPUT, lm.f32, (), 0), Expr(Op.INPUT, lm.bool_, (), 1)
    masked = Expr(Op.SIN, lm.f32, (Expr(Op.SELECT, lm.f32, (c1, x0, Expr(Op.CONSTANT, lm.f32, (), float("-inf")))),))
    add("fused_select_mask", lambda g, x, c: _fused(x, Op.FUSED_ELEMENTWISE, lm.f32, (4, 6), [x, c.expand(4, 6)], masked),
        {"x": f32(4, 6), "c": RNG.random((1, 6)) < 0.5})
    add("concat_axis1_permuted", lambda g, a, b: _fused(a, Op.CONCAT, lm.f32, (3, 7), [a, b.permute(1, 0)], 1),
        {"a": f32(3, 2), "b": f32(5, 3)}, 0)
    add("concat_int_axis0", lambda g, a, b: _fused(a, Op.CONCAT, lm.int32, (5, 2), [a, b], 0),
        {"a": RNG.integers(-9, 9, (1, 2)).astype(np.int32), "b": RNG.integers(-9, 9, (4, 2)).astype(np.int32)}, 0)
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def emulated():
    """Every case's output from one runtime (one g++ build of all the kernels)."""
    outputs = [g.output_nodes[0] for _, g, _, _ in CASES]
    feeds = {k: v for _, _, f, _ in CASES for k, v in f.items()}
    return dict(zip([c[0] for c in CASES], KernelRuntime(outputs, lm.devices.get("cuda-emulator"))(feeds)))


@pytest.mark.parametrize("name,g,feeds,tol", CASES, ids=[c[0] for c in CASES])
def test_fused_kernel_matches_numpy(emulated, name, g, feeds, tol):
    want = g.run(feeds)[0]
    got = emulated[name]
    assert got.dtype == want.dtype and got.shape == want.shape
    if tol == 0:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


def test_fused_kernels_compile_with_nvrtc():
    nvrtc = pytest.importorskip("luminal.kernels.nvrtc")
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC wheel not installed")
    from luminal.kernels.plan import KernelPlan

    outputs = [n for _, g, _, _ in CASES for n in g.output_nodes]
    source = KernelPlan.build(outputs).source
    for arch in ("sm_80", "sm_90"):
        binary = nvrtc.compile_cuda(source, arch)
        assert not [k for k, r in binary.kernels.items() if r.spill_stores or r.spill_loads]
