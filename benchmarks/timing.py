"""How every benchmark times a call (torch-free, so the ONNX benchmarks can measure a process
without torch loaded): medians, and medians in alternating rounds so that a change in the
machine's load during a run falls on all the measured functions alike."""

from __future__ import annotations

import importlib.metadata
import os
import statistics
import sys
import time


def median_latency(fn, budget_s: float = 1.5, min_runs: int = 5, max_runs: int = 30) -> float:
    fn()  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or (time.perf_counter() - start < budget_s and len(times) < max_runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved_medians(fns: dict, rounds: int = 3, budget_s: float = 0.6) -> dict:
    """The median latency of each function (name -> callable), measured in alternating rounds."""
    times: dict = {k: [] for k in fns}
    for fn in fns.values():
        fn()  # warm-up
    for _ in range(rounds):
        for k, fn in fns.items():
            start = time.perf_counter()
            while len(times[k]) < 2 or time.perf_counter() - start < budget_s:
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def peak_memory_mb(fn) -> float:
    """How far one call of `fn` raises the process's resident memory above what it held before
    (MiB): the peak (VmHWM, reset through /proc/self/clear_refs) less the resident size at the
    start, with freed heap returned to the system first (malloc_trim) so a call cannot hide in
    memory an earlier call freed. NaN where Linux's /proc or glibc is not there."""
    import ctypes
    import gc

    def status(key: str) -> float:
        with open("/proc/self/status") as f:
            return next(float(line.split()[1]) for line in f if line.startswith(key + ":"))

    try:
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = status("VmRSS")
        fn()
        return (status("VmHWM") - base) / 1024
    except (OSError, StopIteration, AttributeError):
        return float("nan")


def wait_for_builds() -> float:
    """Wait for every C library still building in the background (`device="cpu"` builds a cold
    library while the first call runs on the NumPy runtime: luminal/kernels/cpu/tiered.py), so
    that what is timed or compared next is the compiled C; the seconds waited."""
    from luminal.compiler import STATS

    t0 = time.perf_counter()
    for graph in STATS.compiled:
        wait = getattr(graph.runtime, "wait", None)
        if callable(wait):
            wait()
    return time.perf_counter() - t0


def cpu_environment() -> dict:
    """What decides the CPU rows besides the code: the CPU's model, the BLAS behind luminal's
    GEMMs and who serves its SGEMM, an OpenBLAS kernel pinned by OPENBLAS_CORETYPE, the ISA
    luminal builds for, onnxruntime's version."""
    from benchmarks import ort_isa
    from luminal.kernels.cpu import blas_libs, isa

    model = None
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        pass
    try:
        ort = importlib.metadata.version("onnxruntime")
    except importlib.metadata.PackageNotFoundError:
        ort = None
    blas = blas_libs.blas()
    ort_kernels = ort_isa.state()
    return {"cpu_model": model, "isa": isa.name(), "blas": blas.kind, "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
            "openblas_core": blas.core, "sgemm": blas.gemm, "onnxruntime": ort, "onnxruntime_isa": ort_kernels["isa"],
            "onnxruntime_isa_how": ort_kernels["why"], "torch_cpu_capability": _torch_capability()}


def _torch_capability() -> str | None:
    """The kernels torch's ATen dispatches to, where torch is loaded (not loaded here for it)."""
    torch = sys.modules.get("torch")
    return torch.backends.cpu.get_cpu_capability() if torch is not None else None


def describe_isa(env: dict) -> str:
    """'avx2 (torch's AVX2, onnxruntime's avx2: CPUID masked ...)': the ISA each library ran with, for
    a results header (`benchmarks/ort_isa.py`)."""
    parts = [f"torch's {env['torch_cpu_capability']}"] if env.get("torch_cpu_capability") else []
    if env.get("onnxruntime_isa"):
        parts.append(f"onnxruntime's {env['onnxruntime_isa']}" + (f": {env['onnxruntime_isa_how']}" if env["isa"] != "native" else ""))
    return env["isa"] + (f" ({', '.join(parts)})" if parts else "")


def describe_blas(env: dict) -> str:
    """'BLAS mkl', or OpenBLAS with its kernel and what pins it, and luminal's SGEMM in front: for
    a results header."""
    text = f"BLAS {env['blas']}"
    if env["blas"] == "openblas":
        text += f" (kernel {env.get('openblas_core')}" + (f", OPENBLAS_CORETYPE={env['openblas_coretype']}"
                                                          if env.get("openblas_coretype") else "") + ")"
    kernel = {"luminal-avx512": "AVX-512", "luminal-avx2": "AVX2"}.get(env.get("sgemm"))
    return text + (f", SGEMM luminal's {kernel} kernel" if kernel else "")
