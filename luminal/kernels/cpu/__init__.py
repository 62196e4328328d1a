"""The compiled CPU backend (`device="cpu"`), in pipeline order:

    render.py   the C dialect: the kernel plan as C loops (OpenMP), MatMul as a BLAS extern step,
                one entry point `lum_run` that runs every step
    build.py    the system C compiler -> one shared library per graph, cached on disk by content hash
    runtime.py  `CpuRuntime`: ctypes, one native call per call; `make` falls back to the NumPy
                runtime (warned once) without a C compiler
"""
