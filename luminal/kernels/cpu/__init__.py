"""The compiled CPU backend (`device="cpu"`), in pipeline order:

    render.py   the C dialect: each kernel of the plan as C loops (OpenMP), MatMul as a BLAS extern step
    prelude.py  the C every library starts with (half types, error flags, the GEMM entry points),
                assembled from the C files in c/ (package data), as is gemm_avx512.py's SGEMM
    program.py  the library (the distinct kernels once, sorted, and the fixed driver `lum_run`) and
                the launch table it interprets: a library that does not grow with depth
    steps.py    a library's steps, program and launch table (what a restored runtime needs, without the renderer)
    build.py    the system C compiler -> one shared library, cached on disk by content hash
    runtime.py  `CpuRuntime`: ctypes, one native call per call, rebuilt without rendering from the
                artifacts the compile cache stores; `make` falls back to the NumPy runtime
                (warned once) without a C compiler
    tiered.py   a cold library builds in the background while the first call runs on the NumPy runtime
    build_queue.py  every compiler in one of the process's slots (one per core); a freed graph's build cancelled
    isa.py      LUMINAL_ISA: this CPU's instruction set, or AVX2 (as a CPU without AVX-512)
"""


def prepare() -> None:
    """A compile is starting: start building the per-machine objects in the background
    (`program.prepare`), unless the library itself will build in the background (`tiered`),
    which builds them then. Checked before `program` is imported: its renderer is 40 ms of a
    process's first compile, paid off the first call's path by the background build."""
    from luminal.kernels.cpu import tiered

    if tiered.enabled():
        return
    from luminal.kernels.cpu import program

    program.prepare()
