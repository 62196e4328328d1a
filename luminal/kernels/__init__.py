"""Kernels: rendered (`render/`), planned (`plan.py`), compiled (`nvrtc.py`, `emulator/`, `cpu/`)
and run (`runtime.py` for "cuda" and "cuda-emulator", `cpu/runtime.py` for "cpu")."""


def render_graph(outputs) -> str:
    """Every kernel of the graph computing `outputs`, as one CUDA C source."""
    from luminal.kernels.plan import KernelPlan

    return KernelPlan.build(outputs).source

