"""The compiled CPU backend (`device="cpu"`), in pipeline order:

    render.py   the C dialect's own kernels (MatMul as a BLAS extern step, flat convolutions, padded copies)
    prelude.py  the C every library starts with, assembled from the C files in c/, as is sgemm.py's
    program.py  the library (the distinct kernels once, the driver `lum_run`) and its launch table
    steps.py    steps, program and launch table: what a restored runtime needs, without the renderer
    build.py    the system C compiler -> one shared library, cached on disk by content hash
    runtime.py  `CpuRuntime`: ctypes, one native call per call; `make` falls back to the NumPy runtime
    donation.py a call's outputs and intermediates in inputs the caller gives up (a backward's saved activations)
    artifacts.py  a later process's runtime from `artifacts()`, checked against the graph and the library
    tiered.py   a cold library builds in the background while the first call runs on the NumPy runtime
    build_queue.py  every compiler in one of the process's slots (one per core); a freed graph's build cancelled
    isa.py      LUMINAL_ISA: this CPU's instruction set, or AVX2 (as a CPU without AVX-512)
"""


def prepare() -> None:
    """A compile is starting: build the per-machine objects in the background, unless the library
    will (`tiered`), which then also takes importing the renderer off the first call's path."""
    from luminal.kernels.cpu import tiered

    if tiered.enabled():
        return
    from luminal.kernels.cpu import program

    program.prepare()
