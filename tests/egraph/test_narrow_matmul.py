"""bf16 matmuls read bf16: the builder's narrow matmul (operands widened to f32, summed, rounded
back) becomes one MatMul in the narrow dtype on the narrow operands (`patterns.narrow_matmul_of`),
with no f32 copy of a weight and no product materialized, and every backend computes it:
the NumPy runtime (the spec), the C backend, the CUDA kernels on the emulator (and cuBLAS's
stand-in), against torch eager in bf16. The roofline of a bf16 Llama decode step then moves
little more than its compulsory bytes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Op, toposort
from luminal.kernels.cpu.runtime import CpuRuntime
from luminal.kernels.runtime import KernelRuntime

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.gpu_models import TINY, build_llama, torch_llama, weight_shapes, weight_stats  # noqa: E402


def _bf16(a: np.ndarray) -> np.ndarray:
    return a.astype(lm.bf16.numpy)


def _torch(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16) if a.dtype.name == "bfloat16" \
        else torch.from_numpy(a)


def _f64(a) -> np.ndarray:
    return a.float().numpy().astype(np.float64) if isinstance(a, torch.Tensor) else np.asarray(a).astype(np.float64)


def _no_widened_matmuls(outputs):
    """Every MatMul is bf16 on bf16 operands, and no weight is widened to an f32 copy."""
    nodes = toposort(outputs)
    mms = [n for n in nodes if n.op is Op.MAT_MUL]
    for n in mms:
        assert n.dtype is lm.bf16 and all(s.dtype is lm.bf16 for s in n.src), n
    for n in nodes:
        if n.op is Op.CAST and n.dtype is lm.f32:
            base = n.src[0].src[0] if n.src[0].op is Op.VIEW else n.src[0]
            assert base.op is not Op.CONSTANT or base.shape == (), n
    return nodes, mms


def _assert_close_bf16(got, want, what):
    """Within a few bf16 roundings of the reference (different f32 summation orders can round a
    value to the neighbouring bf16; the tails of long sums differ a little more)."""
    got, want = _f64(got), _f64(want)
    scale = np.abs(want).max() + 1e-30
    assert np.abs(got - want).max() <= 2**-6 * scale, (what, float(np.abs(got - want).max()), float(scale))


def test_bf16_linears_become_narrow_matmuls_on_every_backend():
    """A small bf16 MLP (decode row and a batch of rows, one linear with a bias, one through a
    slice of a weight): MatMuls on bf16 weights; NumPy, C, CUDA emulator and torch agree."""
    rng = np.random.default_rng(0)
    w1, w2 = _bf16(rng.standard_normal((48, 40)) / 6), _bf16(rng.standard_normal((24, 48)) / 7)
    bias = _bf16(rng.standard_normal(24))
    g = lm.Graph("bf16-mlp")
    x = g.input("x", (3, 40), lm.bf16)
    c1, c2, cb = g.constant(w1, name="w1"), g.constant(w2, name="w2"), g.constant(bias, name="b")
    h = x.linear(c1).silu()
    g.output(h.linear(c2, cb), "y")
    g.output(h[:1].matmul(c2[:, :48].T), "row")  # M = 1 (a GEMV) through a slice view
    cg = g.compile(device="numpy")
    _, mms = _no_widened_matmuls(cg.outputs)
    assert len(mms) == 3 and cg.report().rules_fired.get("narrow(sum_k(widen(a)*widen(b))) = MatMul(a,b)", 0) >= 3
    feeds = {"x": _bf16(rng.standard_normal((3, 40)))}
    want = cg(feeds)
    plain = g.run(feeds)  # the unoptimized graph: widen, f32 sums, round
    tx, t1, t2, tb = (_torch(a) for a in (feeds["x"], w1, w2, bias))
    th = torch.nn.functional.silu(torch.nn.functional.linear(tx, t1))  # multithreaded torch, after the C backend
    eager = [torch.nn.functional.linear(th, t2, tb), th[:1] @ t2.T]
    cpu = CpuRuntime(cg.outputs)(feeds)
    emu = KernelRuntime(cg.outputs, lm.devices.get("cuda-emulator"))(feeds)
    for i, name in enumerate(("y", "row")):
        assert want[i].dtype == lm.bf16.numpy and cpu[i].dtype == want[i].dtype and emu[i].dtype == want[i].dtype
        for got, what in ((plain[i], "unoptimized"), (cpu[i], "cpu"), (emu[i], "cuda-emulator"), (eager[i], "torch")):
            _assert_close_bf16(got, want[i], f"{name}: {what}")


def _tiny_weights(seed=0):
    rng = np.random.default_rng(seed)
    stats = weight_stats(TINY)
    return {n: _bf16(rng.standard_normal(s) * stats[n]["std"] + stats[n]["mean"]) for n, s in weight_shapes(TINY).items()}


@pytest.fixture(scope="module")
def tiny_decode():
    weights = _tiny_weights()
    g = build_llama(TINY, "bf16", "decode", weights)
    cg = g.compile(device="numpy")
    rng = np.random.default_rng(1)
    hd, start = TINY["hidden"] // TINY["heads"], TINY["ctx"] - TINY["steps"]
    feeds = {"ids": np.array([[7]], np.int64), "pos": np.array([start], np.int32)}
    for i in range(TINY["layers"]):
        for kv in "kv":
            cache = np.zeros((1, TINY["kv_heads"], TINY["ctx"], hd), np.float32)
            cache[:, :, :start] = rng.standard_normal((1, TINY["kv_heads"], start, hd)) * 0.5
            feeds[f"{kv}{i}"] = _bf16(cache)
    return weights, g, cg, feeds


def test_tiny_bf16_llama_decode_step_has_only_narrow_matmuls(tiny_decode):
    """Per layer 7 linears and one fused attention (131 keys), plus the LM head: all MatMuls on
    bf16, and no reduction (KahanSum, SumReduce) over anything of a linear layer's size."""
    _, _, cg, _ = tiny_decode
    nodes, mms = _no_widened_matmuls(cg.outputs)
    assert len(mms) == TINY["layers"] * 7 + 1
    assert cg.report().ops_after.get("Attention") == TINY["layers"]
    smallest_linear = TINY["hidden"] * TINY["kv_heads"] * (TINY["hidden"] // TINY["heads"])
    for n in nodes:
        if n.op in (Op.KAHAN_SUM, Op.SUM_REDUCE):
            assert sym.product(n.src[0].shape) < smallest_linear, n
    after = cg.report().ops_after
    assert after.get("SumReduce", 0) == 0 and after.get("MatMul") == len(mms)


def test_tiny_bf16_llama_decode_step_matches_on_every_backend(tiny_decode):
    weights, g, cg, feeds = tiny_decode
    want = cg(feeds)
    plain = g.run(feeds)
    model = torch_llama(TINY, {k: _torch(v) for k, v in weights.items()}, "decode")
    with torch.no_grad():
        eager = model(torch.from_numpy(feeds["ids"]), torch.from_numpy(feeds["pos"]),
                      *(_torch(feeds[f"{kv}{i}"]) for i in range(TINY["layers"]) for kv in "kv"))
    cpu = CpuRuntime(cg.outputs)(feeds)
    emu = KernelRuntime(cg.outputs, lm.devices.get("cuda-emulator"))(feeds)
    for i, name in enumerate(cg.output_names):
        for got, what in ((plain[i], "unoptimized"), (cpu[i], "cpu"), (emu[i], "cuda-emulator"), (eager[i], "torch")):
            _assert_close_bf16(got, want[i], f"{name}: {what}")


def test_deep_bf16_llama_keeps_every_linear_a_matmul():
    """At 8 layers, tree costs pass 1e20: every linear must still come out a narrow MatMul (the
    extractor sums costs exactly; in floats, deep layers lost MatMuls to ties)."""
    cg = build_llama(dict(TINY, layers=8), "bf16", "decode").compile(device="numpy")
    _, mms = _no_widened_matmuls(cg.outputs)
    assert len(mms) == 8 * 7 + 1 and cg.report().ops_after.get("Attention") == 8
    assert cg.report().ops_after.get("KahanSum") == 2 * 8 + 1  # the RMS norms' sums only


def test_roofline_of_a_bf16_llama_decode_step_is_near_compulsory():
    """A bf16 Llama decode step whose weights dominate (as in Llama-3.2-1B: the KV cache and the
    activations are small next to them): the plan moves at most 1.3x its compulsory bytes (before
    narrow MatMuls: 5x, every weight widened to an f32 copy and read again), and every GEMM reads
    2 bytes per weight element."""
    cfg = dict(TINY, hidden=256, heads=4, kv_heads=2, ffn=1024, vocab=2048, layers=2, ctx=32)
    cg = build_llama(cfg, "bf16", "decode").compile(device="numpy")
    summary = cg.roofline_summary(gpu="h200", bindings={})
    assert summary["bytes_over_compulsory"] <= 1.3, summary
    rows = cg.roofline(gpu="h200", bindings={})
    weight_bytes = 2 * sum(int(np.prod(s)) for s in weight_shapes(cfg).values())
    gemm_bytes = sum(r["bytes"] for r in rows if r["class"] == "gemm")
    assert weight_bytes <= gemm_bytes <= 1.1 * weight_bytes, (gemm_bytes, weight_bytes)


def test_narrow_matmul_kernels_compile_with_nvrtc(tiny_decode):
    """The CUDA kernels of the tiny bf16 decode step (bf16 GEMV / MatMul loads, f32 accumulation)
    compile for sm_90 without spills."""
    nvrtc = pytest.importorskip("luminal.kernels.nvrtc")
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC wheel not installed")
    from luminal.kernels.plan import KernelPlan

    plan = KernelPlan.build(tiny_decode[2].outputs)
    gemms = [k for k in plan.launches if k.output.op is Op.MAT_MUL]
    assert gemms and all(k.output.dtype is lm.bf16 for k in gemms)
    binary = nvrtc.compile_cuda(plan.source, "sm_90")
    assert {k.name for k in plan.launches} <= set(binary.kernels)
    assert not any(r.spill_stores or r.spill_loads for r in binary.kernels.values())
