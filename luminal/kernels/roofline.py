"""A roofline prediction for every launch of a kernel plan: what the hardware limit says a call costs.

    rows = compiled.roofline(gpu="h200")          # symbolic dims bound from the last call
    rows = compiled.roofline(gpu="a100", bindings={"seq": 512})

A prediction from the plan, not a measurement (README: "A roofline for every compiled graph"):
per launch the least bytes it must move (each buffer read as far as it is touched), the flops it
must do, and max(bytes / bandwidth, flops / peak) + `launch_us`. A GEMM's peak is the tensor-core
one for f16/bf16, FP32 for f32 (`tf32=True` only for comparisons: luminal never runs TF32).
`summary` adds the rows up against the compulsory bytes.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import numpy as np

from luminal.errors import DeviceError, InputError
from luminal.hlir import symbolic as sym
from luminal.hlir.ops import ELEMENTWISE, FUSED, REDUCE, ConstantArray, Node, Op, toposort
from luminal.kernels.render.attention_decode import is_partials

LAUNCH_US = 2.0  # an assumed per-kernel floor inside a CUDA graph (launch latency, a wave's ramp)


@dataclass(frozen=True)
class GPU:
    """One GPU's limits, dense (no sparsity), as its vendor's spec sheet states them."""

    name: str
    bandwidth: float  # memory bandwidth, bytes/s
    fp32: float  # FP32 on CUDA cores, flop/s
    tf32: float  # TF32 tensor cores, flop/s
    bf16: float  # BF16 (= FP16) tensor cores, f32 accumulation, flop/s
    source: str

    def gemm_peak(self, dtype: str, tf32: bool = False) -> float:
        if dtype in ("bf16", "f16"):
            return self.bf16
        if dtype == "f32":
            return self.tf32 if tf32 else self.fp32
        return self.fp32 / 2 if dtype == "f64" else self.fp32  # f64 on H100/H200 is half of FP32; ints: as FP32


T = 1e12
# NVIDIA spec sheets: dense tensor-core figures (the sheets print 2x "with sparsity")
GPUS: dict[str, GPU] = {g.name: g for g in (
    GPU("h200", 4.8e12, 67 * T, 494.5 * T, 989.5 * T,
        "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): 4.8 TB/s HBM3e, FP32 67 TFLOPS, "
        "TF32 989 / BF16 1,979 TFLOPS with sparsity"),
    GPU("h100", 3.35e12, 67 * T, 494.5 * T, 989.5 * T,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM): 3.35 TB/s HBM3, FP32 67 TFLOPS, "
        "TF32 989 / BF16 1,979 TFLOPS with sparsity"),
    GPU("h100-pcie", 2.0e12, 51 * T, 378 * T, 756 * T,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe): 2 TB/s, FP32 51 TFLOPS, "
        "TF32 756 / BF16 1,513 TFLOPS with sparsity"),
    GPU("a100", 2.039e12, 19.5 * T, 156 * T, 312 * T,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM): 2,039 GB/s HBM2e, FP32 19.5 TFLOPS, "
        "TF32 156 / BF16 312 TFLOPS (dense)"),
    GPU("a100-40gb", 1.555e12, 19.5 * T, 156 * T, 312 * T,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM): 1,555 GB/s HBM2, FP32 19.5 TFLOPS, "
        "TF32 156 / BF16 312 TFLOPS (dense)"),
    GPU("l4", 300e9, 30.3 * T, 60 * T, 121 * T,
        "NVIDIA L4 Tensor Core GPU datasheet: 300 GB/s GDDR6, FP32 30.3 TFLOPS, "
        "TF32 120 / BF16 242 TFLOPS with sparsity"),
)}

CLASSES = ("gemm", "elementwise", "reduction", "other")


def gpu_of(gpu: str | GPU) -> GPU:
    if isinstance(gpu, GPU):
        return gpu
    found = GPUS.get(str(gpu).lower())
    if found is None:
        raise DeviceError(f"no roofline data for GPU {gpu!r}; known: {sorted(GPUS)}")
    return found


def kernel_class(op: Op) -> str:
    if op in (Op.MAT_MUL, Op.ATTENTION, Op.GROUPED_MAT_MUL):
        return "gemm"
    if op in REDUCE or op in (Op.SOFTMAX, Op.KAHAN_SUM):
        return "reduction"
    if op in ELEMENTWISE or op in (Op.FUSED_ELEMENTWISE, Op.EXP, Op.SIGMOID, Op.SELECT):
        return "elementwise"
    return "other"


def _base(node: Node) -> Node:
    return node.src[0] if node.op is Op.VIEW else node


def _numel(shape, bindings) -> int:
    return int(np.prod([int(sym.evaluate(d, bindings)) for d in shape], dtype=np.int64))


def _launch_cost(k, bindings, inlined: dict | None = None) -> tuple[int, int]:
    """(bytes, flops) one launch `k` (a `KernelSpec`) must move and do; `inlined`: the plan's
    producers computed where they are read (their sources are what the launch reads)."""
    inlined = inlined or {}
    node = k.output
    size = node.dtype.itemsize
    out_n = _numel(node.shape, bindings)
    inputs = {id(b) for b in k.inputs}
    read: dict[int, int] = {}  # base id -> bytes read from it (the largest use)

    def reads(src: Node, elements: int) -> None:
        base = _base(src)
        if id(base) in inlined:  # an element of it is an element of each of its sources
            for s in base.src:
                reads(s, elements)
            return
        if id(base) not in inputs:  # an inline scalar, or a source another launch of this op reads
            return
        n = min(_numel(base.shape, bindings), elements)
        read[id(base)] = max(read.get(id(base), 0), n * base.dtype.itemsize)

    written, flops = out_n * size, out_n
    gemm = getattr(k, "gemm", None)  # MatMul(s) computed before the launch's epilogue (never stored)
    if node.op is Op.MAT_MUL or gemm is not None:
        products = gemm if isinstance(gemm, tuple) else (gemm or node,)
        flops = 0
        for mm in products:
            a, b = mm.src
            reads(a, _numel(a.shape, bindings))
            reads(b, _numel(b.shape, bindings))
            flops += 2 * _numel(mm.shape, bindings) * int(sym.evaluate(a.shape[-1], bindings))
        if gemm is not None:  # the epilogue: its other operands (a residual, a bias), an op an element
            for s in node.src:
                reads(s, out_n)
            ops = sum(1 for e in node.arg.toposort() if e.op not in (Op.INPUT, Op.CONSTANT)) if node.op is Op.FUSED_ELEMENTWISE else 1
            flops += ops * out_n
    elif node.op is Op.ATTENTION and k.inputs and is_partials(k.inputs[-1]):  # split-K's second launch:
        reads(k.inputs[-1], _numel(k.inputs[-1].shape, bindings))  # the chunks' partials, rescaled and summed
        flops = 3 * _numel(k.inputs[-1].shape, bindings)
    elif node.op is Op.ATTENTION:  # two products over the (never stored) scores, and their softmax
        for s in node.src:  # (or split-K's first launch, whose output is the partials: `attention_decode`)
            reads(s, _numel(s.shape, bindings))
        q, kt, v = node.src[:3]
        scores = _numel((*q.shape[:-1], kt.shape[-1]), bindings)
        flops = 2 * scores * (int(sym.evaluate(q.shape[-1], bindings)) + int(sym.evaluate(v.shape[-1], bindings))) + 5 * scores
    elif node.op is Op.GATHER:
        data, index = node.src
        reads(data, out_n)  # only the gathered elements
        reads(index, out_n)
    elif node.op is Op.SCATTER:
        data, index, updates = node.src
        if id(_base(data)) in inputs:  # the copy of data into the output
            reads(data, out_n)
        else:  # the scatter itself: the updates, written where the index says
            n = _numel(index.shape, bindings)
            reads(index, n)
            reads(updates, n)
            written, flops = n * size, n
    else:
        for s in node.src:
            reads(s, _numel(s.shape, bindings))
        if node.op in REDUCE or node.op is Op.KAHAN_SUM:
            flops = max((_numel(s.shape, bindings) for s in node.src), default=out_n) * (4 if node.op is Op.KAHAN_SUM else 1)
        elif node.op is Op.SOFTMAX:
            flops = 5 * out_n  # max, subtract, exp, sum, divide
        elif node.op is Op.GROUPED_MAT_MUL:  # every expert's matrix read once, each row one product
            flops = 2 * out_n * int(sym.evaluate(node.src[0].shape[-1], bindings))
        elif node.op is Op.FUSED_ELEMENTWISE:
            ops = sum(1 for e in node.arg.toposort() if e.op not in (Op.INPUT, Op.CONSTANT))
            flops = max(ops, 1) * out_n
        elif node.op not in ELEMENTWISE and node.op not in FUSED:  # copies, iota: data movement only
            flops = 0
    return written + sum(read.values()), flops


def roofline(plan, bindings: dict[str, int], gpu: str | GPU = "h200", *, tf32: bool = False,
             launch_us: float = LAUNCH_US) -> list[dict]:
    """One row per launch of `plan` under `bindings` (see the module docstring)."""
    spec = gpu_of(gpu)
    missing = sorted({s for k in plan.launches for s in k.symbols} - set(bindings))
    if missing:
        raise InputError(f"roofline needs a value for the symbolic dim(s) {missing}: call the model first, "
                         f"or pass bindings={{...}}")
    rows = []
    for k in plan.launches:
        if int(sym.evaluate(k.grid, bindings)) <= 0 or _numel(k.output.shape, bindings) == 0:
            continue  # the runtime skips it too
        nbytes, flops = _launch_cost(k, bindings, getattr(plan, "inlined", None))
        cls = kernel_class(Op.MAT_MUL if getattr(k, "gemm", None) is not None else k.output.op)
        peak = spec.gemm_peak(k.output.dtype.short, tf32) if cls == "gemm" else spec.fp32
        memory_us, compute_us = nbytes / spec.bandwidth * 1e6, flops / peak * 1e6
        rows.append({"kernel": k.name, "class": cls, "bytes": int(nbytes), "flops": int(flops),
                     "memory_us": memory_us, "compute_us": compute_us,
                     "predicted_us": max(memory_us, compute_us) + launch_us})
    return rows


def compulsory_bytes(plan, bindings: dict[str, int]) -> int:
    """Weights, inputs and outputs, each read or written once: no schedule moves less."""
    leaves = [n for n in toposort(plan.outputs) if n.op is Op.INPUT or
              (n.op is Op.CONSTANT and isinstance(n.arg, ConstantArray))]
    return sum(_numel(n.shape, bindings) * n.dtype.itemsize for n in [*leaves, *plan.outputs])


def summary(rows: list[dict], compulsory: int) -> dict:
    """Totals of `roofline` rows: time per call, time and bytes per kernel class, GEMM share."""
    total = sum(r["predicted_us"] for r in rows)
    by_class = collections.defaultdict(lambda: {"launches": 0, "bytes": 0, "flops": 0, "predicted_us": 0.0})
    for r in rows:
        c = by_class[r["class"]]
        c["launches"] += 1
        c["bytes"] += r["bytes"]
        c["flops"] += r["flops"]
        c["predicted_us"] += r["predicted_us"]
    moved = sum(r["bytes"] for r in rows)
    return {"predicted_us": total, "launches": len(rows), "bytes": moved, "compulsory_bytes": compulsory,
            "bytes_over_compulsory": moved / compulsory if compulsory else float("nan"),
            "gemm_share": by_class["gemm"]["predicted_us"] / total if total else 0.0,
            "classes": {c: dict(by_class[c]) for c in CLASSES if c in by_class}}


def format_summary(s: dict, gpu: str) -> str:
    lines = [f"  roofline ({gpu}): {s['predicted_us']:.1f} us per call predicted over {s['launches']} launches; "
             f"GEMMs {s['gemm_share']:.0%} of the time; {s['bytes'] / 1e6:.2f} MB moved, "
             f"{s['bytes_over_compulsory']:.2f}x the compulsory {s['compulsory_bytes'] / 1e6:.2f} MB"]
    for c, v in s["classes"].items():
        lines.append(f"    {c:<12} {v['launches']:>5} launches {v['predicted_us']:>10.1f} us {v['bytes'] / 1e6:>10.2f} MB "
                     f"{v['flops'] / 1e9:>9.3f} GFLOP")
    return "\n".join(lines)


def last_bindings(runtime) -> dict[str, int] | None:
    """The symbolic dims of `runtime`'s most recent call (None before one)."""
    bound = runtime.last_bindings
    return None if bound is None else dict(bound)
