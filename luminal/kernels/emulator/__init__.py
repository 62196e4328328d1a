"""Run generated CUDA C on the CPU: the `cuda-emulator` device, and how CI proves the CUDA path.

    module = build(source)                      # the exact text NVRTC compiles; many kernels per TU
    module.launch("softmax", grid=(rows,), block=(256,), args=[x, y, np.int32(cols)])

g++ compiles the source against `cuda_emu.h` (CUDA threads as fibers, real barriers and warp
shuffles, poisoned shared memory) into a cached `.so`. Modes: "release" (-O2), "debug" (-O0 -g),
"asan" (ASan+UBSan, loaded only under `run_python_under_asan`). CUEMU_SCHEDULE=0/1/2 runs a block's
threads forward / reverse / shuffled between barriers (a result that changes is a race);
CUEMU_STACK_KB sets the fiber stack size (64, 256 under ASan); CXX picks the compiler.
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


def build(sources: str, mode: str = "release", *, cache_path: Path | None = None) -> EmulatedModule:
    """Compile one translation unit holding any number of `extern "C" __global__` kernels; a library
    already loaded is the same module."""
    if mode == "asan" and not asan_runtime_loaded():  # fail before spending a build on it
        raise LuminalError("an ASan emulator build loads only into a process started with "
                           "LD_PRELOAD=libasan.so: use luminal.kernels.emulator.run_python_under_asan()")
    path = compile_shared_library(sources, mode, cache_path=cache_path)
    module = _loaded.get(path)
    if module is None:
        module = _loaded[path] = EmulatedModule(path, find_kernels(sources), mode)
    return module
