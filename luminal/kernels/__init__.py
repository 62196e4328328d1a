"""CUDA C toolchain: compile generated kernels with NVRTC (no GPU needed) and run them on the CPU.

- `luminal.kernels.nvrtc`: `compile_cuda(source, arch)` -> cubin/PTX plus ptxas resource usage, cached.
- `luminal.kernels.emulator`: `build(source)` -> an `EmulatedModule` whose kernels run on the CPU
  through `emulator/cuda_emu.h` (CUDA threads as fibers, real barriers and warp shuffles).
- `luminal.kernels.runtime`: `KernelRuntime`, which the device registry (`luminal.devices`) builds
  for "cuda" (NVRTC + CuPy) and "cuda-emulator".
"""


def render_graph(outputs) -> str:
    """Every kernel of the graph computing `outputs`, as one CUDA C source."""
    from luminal.kernels.plan import graph_source

    return graph_source(outputs)

