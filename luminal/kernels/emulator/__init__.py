"""Run generated CUDA C on the CPU: the `cuda-emulator` device, and how CI proves the CUDA path.

    module = build(source)                      # the exact text NVRTC compiles; many kernels per TU
    module.launch("softmax", grid=(rows,), block=(256,), args=[x, y, np.int32(cols)])

g++ compiles the source against `cuda_emu.h` (CUDA threads as fibers, real barriers and warp
shuffles, poisoned shared memory; see the header's comment) into a `.so` cached under
`$LUMINAL_CACHE_DIR/emulator` (default `~/.cache/luminal/emulator`). Modes:

- "release" (-O2), the default; "debug" (-O0 -g) for gdb;
- "asan": -fsanitize=address,undefined. Loads only into a process started with libasan preloaded;
  `run_python_under_asan(code)` runs a snippet that way (see `asan.py`).

Environment: CUEMU_SCHEDULE=0/1/2 runs a block's threads forward / reverse / shuffled between
barriers (a result that changes is a race; `launch(..., schedule=)` overrides it), CUEMU_STACK_KB
sets the fiber stack size (64, 256 under ASan), CXX picks the compiler.
"""

from __future__ import annotations

import weakref
from pathlib import Path

from luminal.errors import LuminalError
from luminal.kernels.emulator.asan import (
    asan_environment,
    asan_runtime_loaded,
    libasan_path,
    run_python_under_asan,
)
from luminal.kernels.emulator.build import (
    HEADERS,
    EmulatorBuildError,
    compile_shared_library,
    find_kernels,
    stats,
    translation_unit,
)
from luminal.kernels.emulator.module import EmulatedModule, EmulatorError, KernelInfo

__all__ = [
    "HEADERS", "EmulatedModule", "EmulatorBuildError", "EmulatorError", "KernelInfo", "asan_environment",
    "asan_runtime_loaded", "build", "find_kernels", "libasan_path", "run_python_under_asan", "stats",
    "translation_unit",
]

# built libraries loaded in this process, while a runtime holds them (the .so stays cached on disk)
_loaded: weakref.WeakValueDictionary[Path, EmulatedModule] = weakref.WeakValueDictionary()


def build(sources: str, mode: str = "release", *, ftz: bool = True, extra_flags: tuple[str, ...] = (),
          cache_path: Path | None = None) -> EmulatedModule:
    """Compile one translation unit holding any number of `extern "C" __global__` kernels.

    `ftz` flushes f32 denormals like NVRTC's `-ftz=true`. A cached library is reused, and a
    library already loaded in this process is returned as the same module."""
    if mode == "asan" and not asan_runtime_loaded():  # fail before spending a build on it
        raise LuminalError("an ASan emulator build loads only into a process started with "
                           "LD_PRELOAD=libasan.so: use luminal.kernels.emulator.run_python_under_asan()")
    path = compile_shared_library(sources, mode, ftz=ftz, extra_flags=tuple(extra_flags), cache_path=cache_path)
    module = _loaded.get(path)
    if module is None:
        module = _loaded[path] = EmulatedModule(path, find_kernels(sources), mode)
    return module
