"""Decode-sized MatMuls with the pointwise work after them in one GEMV launch on CUDA: the Add
after one (a residual, a linear layer's bias: `plan.residual_gemvs`, the sum rounded once) and
a pointwise node of two that share A (a SwiGLU's gate and up: `plan.pair_gemvs`, each sum
rounded as its buffer would hold it, so the unfused bits). Against the NumPy runtime, float64
and the unfused launches on the emulator, edge values included; the cases that keep separate
launches; precision "float64"; the roofline's rows; NVRTC compiles them."""

import numpy as np
import pytest

import luminal as lm
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op
from luminal.hlir.shape import ShapeTracker
from luminal.hlir.symbolic import symbol
from luminal.kernels.plan import KernelPlan
from luminal.kernels.runtime import KernelRuntime
from luminal.runtime.numpy_runtime import NumpyRuntime

DTYPES = [DType.F32, DType.F16, DType.BF16, DType.F64]
TOL = {DType.F32: 1e-5, DType.F64: 1e-12, DType.F16: 1e-2, DType.BF16: 2e-2}


def _linear(m, k, n, dtype, tag, batch=(), k_contiguous=True) -> tuple[Node, Node]:
    """(x @ W.T of a Linear's W[n, k] (or x @ B of B[k, n]), x) with x[*batch, m, k]."""
    x = Node(Op.INPUT, dtype, (*batch, m, k), (), f"x{tag}")
    if k_contiguous:
        w = Node(Op.INPUT, dtype, (n, k), (), f"w{tag}")
        b = Node(Op.VIEW, dtype, (*batch, k, n), (w,), ShapeTracker((*batch, k, n), (*(0 for _ in batch), 1, k)))
    else:
        w = Node(Op.INPUT, dtype, (k, n), (), f"w{tag}")
        b = Node(Op.VIEW, dtype, (*batch, k, n), (w,), ShapeTracker((*batch, k, n), (*(0 for _ in batch), n, 1)))
    return Node(Op.MAT_MUL, dtype, (*batch, m, n), (x, b)), x


def _plus(mm: Node, other: Node) -> Node:
    return Node(Op.ADD, mm.dtype, mm.shape, (mm, other))


def _feeds(outputs, bindings=None, seed=0):
    rng = np.random.default_rng(seed)
    nodes = {n.arg: n for o in outputs for n in _leaves(o)}
    return {k: rng.standard_normal(tuple((bindings or {}).get(str(d), d) for d in n.shape)).astype(n.dtype.numpy)
            for k, n in sorted(nodes.items())}


def _leaves(node):
    seen, todo, out = set(), [node], []
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op is Op.INPUT:
            out.append(n)
        todo.extend(n.src)
    return out


def _fused(plan: KernelPlan) -> list:
    """The launches of a MatMul and the Add after it (`residual_gemvs`)."""
    return [k for k in plan.launches if isinstance(getattr(k, "gemm", None), Node)]


def _cases(dtype):
    """Residuals and biases over the GEMV's forms: a Linear's k-contiguous weight (short K: a warp
    per column; long: a block) and a k-major B (column lanes), 1 to 8 rows, a batch dim."""
    t = dtype.short
    out = []
    for m, k, n, kc in ((1, 136, 45, True), (5, 1040, 40, True), (8, 101, 48, False), (3, 64, 33, False)):
        mm, _ = _linear(m, k, n, dtype, f"{t}{m}{k}")
        out.append(_plus(mm, Node(Op.INPUT, dtype, (m, n), (), f"r{t}{m}{k}")))  # a residual
        mm, _ = _linear(m, k, n, dtype, f"{t}{m}{k}b", k_contiguous=kc)
        bias = Node(Op.INPUT, dtype, (n,), (), f"b{t}{m}{k}")
        out.append(_plus(mm, Node(Op.VIEW, dtype, (m, n), (bias,), ShapeTracker((m, n), (0, 1)))))  # a bias
    mm, _ = _linear(2, 96, 24, dtype, f"{t}batch", batch=(3,))
    out.append(_plus(mm, Node(Op.INPUT, dtype, (3, 2, 24), (), f"r{t}batch")))
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
def test_one_launch_each_and_numpy_runtimes_values(dtype):
    outputs = _cases(dtype)
    rt = KernelRuntime(outputs, lm.devices.get("cuda-emulator"))
    assert len(rt.plan.launches) == len(outputs) == len(_fused(rt.plan))  # no MatMul launch of its own
    assert not [k for k in rt.plan.launches if k.output.op is Op.MAT_MUL]
    feeds = _feeds(outputs)
    rng = np.random.default_rng(3)
    for key in ("r" + dtype.short + "1136", "b" + dtype.short + "51040", "x" + dtype.short + "8101"):
        flat = feeds[key].reshape(-1)  # NaN, ±inf and -0.0 in a residual, a bias and an activation
        flat[rng.choice(flat.size, 4, replace=False)] = [np.nan, np.inf, -np.inf, -0.0]
    got, want = rt(feeds), NumpyRuntime(outputs)(feeds)
    for node, out, ref in zip(outputs, got, want):
        out, ref = out.astype(np.float64), ref.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
        np.testing.assert_array_equal(np.isinf(out), np.isinf(ref))
        finite = np.isfinite(ref)
        np.testing.assert_allclose(out[finite], ref[finite], rtol=TOL[dtype], atol=TOL[dtype])
        # against float64: the accumulation's bound, plus one rounding of the sum to the dtype
        x = feeds[node.src[0].src[0].arg].astype(np.float64)
        b = node.src[0].src[1]
        w = feeds[b.src[0].arg].astype(np.float64)
        w = w.T if b.arg.strides[-1] != 1 else w
        other = node.src[1]
        r = feeds[(other.src[0] if other.op is Op.VIEW else other).arg].astype(np.float64)
        exact = x @ w + r
        bound = np.abs(x) @ np.abs(w)
        eps_acc = np.finfo(np.float64 if dtype is DType.F64 else np.float32).eps
        eps_out = 2.0**-8 if dtype is DType.BF16 else float(np.finfo(dtype.numpy).eps) / 2
        ok = np.isfinite(exact)
        err = np.abs(out - exact)[ok]
        assert np.all(err <= x.shape[-1] * eps_acc * bound[ok] + eps_out * np.abs(exact[ok]) + 1e-300), float(err.max())


def test_f32_sum_has_the_unfused_bits():
    """In f32 the product is a float before the add either way: fused and unfused (the Add a
    launch of its own, `plan.residual_gemvs` off) give the same bits."""
    outputs = _cases(DType.F32)
    feeds = _feeds(outputs, seed=5)
    fused = KernelRuntime(outputs, lm.devices.get("cuda-emulator"))(feeds)
    import luminal.kernels.plan as plan_module

    real = plan_module.residual_gemvs
    plan_module.residual_gemvs = lambda *a: {}
    try:
        rt = KernelRuntime(outputs, lm.devices.get("cuda-emulator"))
    finally:
        plan_module.residual_gemvs = real
    assert len(rt.plan.launches) == 2 * len(outputs)
    for a, b in zip(fused, rt(feeds)):
        np.testing.assert_array_equal(a, b)


def test_cases_that_keep_two_launches():
    """The product read twice (or returned), more rows than the GEMV takes, a symbolic M, an
    integer MatMul: the MatMul launches on its own and the Add after it."""
    f32 = DType.F32
    mm, _ = _linear(2, 64, 16, f32, "twice")
    r = Node(Op.INPUT, f32, (2, 16), (), "r_twice")
    twice = [_plus(mm, r), Node(Op.MUL, f32, (2, 16), (mm, r))]
    mm2, _ = _linear(2, 64, 16, f32, "returned")
    returned = [mm2, _plus(mm2, Node(Op.INPUT, f32, (2, 16), (), "r_returned"))]
    mm3, _ = _linear(16, 64, 16, f32, "tall")
    tall = [_plus(mm3, Node(Op.INPUT, f32, (16, 16), (), "r_tall"))]
    mm4, _ = _linear(symbol("m"), 64, 16, f32, "sym")
    sym_m = [_plus(mm4, Node(Op.INPUT, f32, (symbol("m"), 16), (), "r_sym"))]
    i32 = DType.I32
    mm5, _ = _linear(2, 8, 4, i32, "int")
    ints = [_plus(mm5, Node(Op.INPUT, i32, (2, 4), (), "r_int"))]
    for outputs in (twice, returned, tall, sym_m, ints):
        plan = KernelPlan.build(outputs)
        assert not _fused(plan) and any(k.output.op is Op.MAT_MUL for k in plan.launches), outputs
    outputs = twice + returned + tall
    rt = KernelRuntime(outputs, lm.devices.get("cuda-emulator"))
    feeds = _feeds(outputs, seed=2)
    for out, ref in zip(rt(feeds), NumpyRuntime(outputs)(feeds)):
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_precision_float64_accumulates_in_double():
    """precision "float64": the launch's build accumulating in double, the sum rounded once:
    within an f32 rounding of float64 NumPy's x @ W.T + r."""
    mm, x = _linear(4, 3000, 20, DType.F32, "wide")
    outputs = [_plus(mm, Node(Op.INPUT, DType.F32, (4, 20), (), "r_wide"))]
    rt = KernelRuntime(outputs, lm.devices.resolve("cuda-emulator", "float64"))
    (k,) = rt.plan.launches
    assert k.gemm is mm and k.wide is not None and k.wide.gemm is mm and "double acc" in k.wide.source
    feeds = _feeds(outputs, seed=4)
    (got,) = rt(feeds)
    want = feeds["xwide"].astype(np.float64) @ feeds["wwide"].astype(np.float64).T + feeds["r_wide"]
    np.testing.assert_allclose(got, want, rtol=2 * 2.0**-24, atol=1e-6)


def test_roofline_counts_the_product_and_the_residual():
    mm, _ = _linear(1, 2048, 512, DType.BF16, "roof")
    outputs = [_plus(mm, Node(Op.INPUT, DType.BF16, (1, 512), (), "r_roof"))]
    plan = KernelPlan.build(outputs)
    from luminal.kernels.roofline import roofline

    (row,) = roofline(plan, {})
    assert row["class"] == "gemm"
    assert row["bytes"] == 2 * (2048 + 2048 * 512 + 512 + 512)  # x, the weight, r and the output
    assert row["flops"] == 2 * 512 * 2048 + 512


def test_gpu_check_llama_decode_adds_its_residuals_in_the_gemvs():
    """The 1B-shaped decode step (`benchmarks/gpu_models`): every layer's residual adds in their
    GEMV launches, but the last one, which the final norm's region computes where it reads it."""
    from benchmarks.gpu_models import TINY, build_llama

    plan = KernelPlan.build(build_llama(TINY, "bf16", "decode").compile(device="numpy").outputs)
    fused = _fused(plan)
    assert len(fused) == 2 * TINY["layers"] - 1, [k.name for k in fused]
    assert not [k for k in plan.launches if k.output.op is Op.ADD and getattr(k, "gemm", None) is None
                and len(k.output.shape) == 3 and k.output.shape[-1] == TINY["hidden"]]


def test_nvrtc_compiles_the_fused_kernels():
    nvrtc = pytest.importorskip("luminal.kernels.nvrtc")
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC wheel not installed")
    outputs = [o for dt in DTYPES for o in _cases(dt)]
    sources = [KernelPlan.build(outputs).source]
    for dt in (DType.BF16, DType.F64):  # the pairs: a warp per column and a block per column
        for m, k in ((1, 136), (5, 1040)):
            plan = _swiglu(m, k, 40, dt, f"nv{m}").compile(device="cuda-emulator").runtime.plan
            assert any(isinstance(getattr(x, "gemm", None), tuple) for x in plan.launches)
            sources.append(plan.source)
    for arch in ("sm_80", "sm_90"):
        for source in sources:
            binary = nvrtc.compile_cuda(source, arch)
            assert not [k for k, r in binary.kernels.items() if r.spill_stores or r.spill_loads]
        assert sum(k.startswith("add_") for k in nvrtc.compile_cuda(sources[0], arch).kernels) >= len(outputs) // 2


def _swiglu(m, k, n, dtype, tag, gate_k_major=False, other_a=False, third=False):
    """silu(x @ Wg.T) * (x @ Wu.T), through the builder (its regions make the pointwise node)."""
    g = lm.Graph(f"swiglu{tag}")
    x = g.input("x", (m, k), dtype)
    wg = g.input("wg", (k, n) if gate_k_major else (n, k), dtype)
    wu = g.input("wu", (n, k), dtype)
    gate = x @ (wg if gate_k_major else wg.T)
    up = (g.input("x2", (m, k), dtype) if other_a else x) @ wu.T
    y = gate.silu() * up
    if third:
        y = y * g.input("s", (m, n), dtype)
    g.output(y)
    return g


def _pairs(compiled):
    return [k for k in compiled.runtime.plan.launches if isinstance(getattr(k, "gemm", None), tuple)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
@pytest.mark.parametrize("m,k", [(1, 136), (5, 1040)], ids=["warp_per_column", "block_per_column"])
def test_swiglu_pair_is_one_launch_with_the_unfused_bits(m, k, dtype, monkeypatch):
    g = _swiglu(m, k, 40, dtype, f"{m}{k}")
    compiled = g.compile(device="cuda-emulator")
    (launch,) = _pairs(compiled)
    assert not [x for x in compiled.runtime.plan.launches if x.output.op is Op.MAT_MUL]
    rng = np.random.default_rng(m)
    feeds = {n.arg: rng.standard_normal(n.shape).astype(n.dtype.numpy) for n in compiled.inputs}
    feeds["x"].reshape(-1)[:3] = [np.nan, np.inf, -0.0]
    (got,) = compiled(feeds)
    import luminal.kernels.plan as plan_module

    monkeypatch.setattr(plan_module, "pair_gemvs", lambda *a: {})
    unfused = g.compile(device="cuda-emulator")
    assert not _pairs(unfused) and sum(x.output.op is Op.MAT_MUL for x in unfused.runtime.plan.launches) == 2
    np.testing.assert_array_equal(got, unfused(feeds)[0])  # each sum rounded as its buffer would hold it
    want = g.compile(device="numpy")(feeds)[0]
    np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64)))
    finite = np.isfinite(want.astype(np.float64))
    np.testing.assert_allclose(got.astype(np.float64)[finite], want.astype(np.float64)[finite], rtol=TOL[dtype], atol=TOL[dtype])


def test_pairs_need_one_a_k_contiguous_weights_and_nothing_else():
    """Two GEMVs of different activations, a gate weight stored k-major (column lanes), a third
    buffer in the pointwise node, more rows than the GEMV takes: separate launches, right values."""
    f32 = DType.F32
    for g in (_swiglu(2, 64, 16, f32, "a", other_a=True), _swiglu(2, 64, 16, f32, "b", gate_k_major=True),
              _swiglu(2, 64, 16, f32, "c", third=True), _swiglu(16, 64, 16, f32, "d")):
        compiled = g.compile(device="cuda-emulator")
        assert not _pairs(compiled), g.name
        rng = np.random.default_rng(0)
        feeds = {n.arg: rng.standard_normal(n.shape).astype(np.float32) for n in compiled.inputs}
        np.testing.assert_allclose(compiled(feeds)[0], g.compile(device="numpy")(feeds)[0], rtol=1e-5, atol=1e-5)


def test_pair_roofline_and_the_1b_decode_step():
    g = _swiglu(1, 2048, 8192, DType.BF16, "roof")
    plan = g.compile(device="cuda-emulator").runtime.plan
    from luminal.kernels.roofline import roofline

    (row,) = [r for r, k in zip(roofline(plan, {}), plan.launches) if isinstance(getattr(k, "gemm", None), tuple)]
    assert row["class"] == "gemm" and row["bytes"] == 2 * (2048 + 2 * 2048 * 8192 + 8192)  # x once, both weights, out
    assert row["flops"] >= 2 * 2 * 2048 * 8192
    from benchmarks.gpu_models import TINY, build_llama

    plan = KernelPlan.build(build_llama(TINY, "bf16", "decode").compile(device="numpy").outputs)
    assert sum(isinstance(getattr(k, "gemm", None), tuple) for k in plan.launches) == TINY["layers"]
