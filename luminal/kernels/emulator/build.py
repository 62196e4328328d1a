"""Turn CUDA C into one g++ translation unit against cuda_emu.h and build it into a cached `.so`.

The source is the exact text NVRTC gets. Three rewrites that macros cannot do:
- `extern __shared__ T name[];` becomes a reference to the launch's dynamic shared buffer;
- before each kernel, `__shared__` is redefined so its static shared variables land in an ELF
  section of their own: a block start poisons only that kernel's, and its static size is known;
- an exported launcher (`CUEMU_EXPORT`) is appended per kernel.
`#line` directives keep compiler, ASan and UBSan messages pointing at the original lines.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from luminal.errors import LuminalError
from luminal.kernels.cache import in_cache

EMULATOR_DIR = Path(__file__).resolve().parent
INCLUDE_DIR = EMULATOR_DIR / "include"  # cuda_fp16.h / cuda_bf16.h shims
HEADERS = (EMULATOR_DIR / "cuda_emu.h", EMULATOR_DIR / "cuemu_math.h",
           INCLUDE_DIR / "cuda_fp16.h", INCLUDE_DIR / "cuda_bf16.h")

MODE_FLAGS = {
    "release": ("-O2",),
    "debug": ("-O0", "-g"),
    # -O1 keeps ASan reports readable and fast enough; recovering from UB would hide it
    "asan": ("-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
             "-fno-sanitize-recover=undefined"),
}
COMMON_FLAGS = (
    "-std=c++20", "-shared", "-fPIC",
    # each loaded library keeps its own emulator state (no symbol interposition, no STB_GNU_UNIQUE)
    "-fvisibility=hidden", "-fvisibility-inlines-hidden", "-fno-gnu-unique",
    # generated code type-puns (float4 loads of float arrays) as nvcc tolerates
    "-fno-strict-aliasing",
    # no a*b+c -> fma: results must not depend on the host CPU
    "-ffp-contract=off",
)

# `extern "C" __global__ void [__launch_bounds__(...)] name(` (launch bounds may also precede
# `void`): the form kernels must be declared in
_BOUNDS = r"(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?"
KERNEL_RE = re.compile(rf'extern\s+"C"\s+__global__\s+{_BOUNDS}void\s+{_BOUNDS}(\w+)\s*\(')
_ALIGN = r"(?:__align__\s*\(\s*\d+\s*\)\s*)?"
DYN_SMEM_RE = re.compile(
    rf"extern\s+__shared__\s+{_ALIGN}([A-Za-z_][\w:]*(?:\s+[A-Za-z_][\w:]*)*?)\s+{_ALIGN}(\w+)\s*\[\s*\]\s*;")


class EmulatorBuildError(LuminalError):
    """g++ rejected the translation unit; the message carries its diagnostics."""


@dataclass
class BuildStats:
    builds: int = 0  # g++ runs
    cache_hits: int = 0  # .so found on disk


stats = BuildStats()


def find_kernels(source: str) -> list[str]:
    return list(dict.fromkeys(KERNEL_RE.findall(source)))


def translation_unit(source: str, source_name: str = "kernel.cu") -> str:
    """The C++ text g++ compiles: header, rewritten source, exports."""
    # A reference (not a pointer copy) to the buffer pointer, so it also works at file scope,
    # where it is bound before any launch has allocated the buffer.
    body = DYN_SMEM_RE.sub(
        r"\1* const& \2 = *reinterpret_cast<\1* const*>(&::cuemu::ctx().dyn_smem);", source)
    lines = body.split("\n")
    starts = {body.count("\n", 0, m.start()): m.group(1) for m in KERNEL_RE.finditer(body)}
    for index in sorted(starts, reverse=True):
        lines[index:index] = ["#undef __shared__",
                              f"#define __shared__ CUEMU_SHARED_IN(cuemu_smem_{starts[index]})",
                              f'#line {index + 1} "{source_name}"']
    exports = "\n".join(f"CUEMU_EXPORT({k})" for k in find_kernels(source))
    return (f'#include "cuda_emu.h"\n#line 1 "{source_name}"\n' + "\n".join(lines) +
            f'\n#undef __shared__\n#define __shared__ CUEMU_SHARED_IN(cuemu_smem)\n{exports}\n')


@functools.cache
def compiler_version(cxx: str) -> str:
    return subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True).stdout.split("\n")[0]


def compile_shared_library(source: str, mode: str = "release", *, cache_path: Path | None = None) -> Path:
    """Build (or find in the cache) the `.so` for `source`. The key covers the translation unit,
    every emulator header, the flags and the compiler version."""
    if mode not in MODE_FLAGS:
        raise ValueError(f"mode must be one of {sorted(MODE_FLAGS)}, not {mode!r}")
    if not find_kernels(source):
        raise EmulatorBuildError('no kernel found: kernels must be declared `extern "C" __global__ void name(...)`')
    cxx = os.environ.get("CXX", "g++")
    text = translation_unit(source)
    flags = [*COMMON_FLAGS, *MODE_FLAGS[mode], "-DCUEMU_FTZ=1", f"-I{EMULATOR_DIR}", f"-I{INCLUDE_DIR}"]
    digest = hashlib.sha256()
    for part in (text, *(h.read_text() for h in HEADERS), *flags, compiler_version(cxx)):
        digest.update(part.encode() + b"\0")
    key = digest.hexdigest()[:32]

    def build_in(directory: Path) -> Path:
        from luminal.kernels.cpu.build_queue import compiler_slot

        library = directory / f"{mode}_{key}.so"
        if library.exists():
            stats.cache_hits += 1
            return library
        with open(directory / f"{mode}_{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process building the same key (pytest-xdist): wait for it
            if library.exists():
                stats.cache_hits += 1
                return library
            cpp = directory / f"{mode}_{key}.cpp"  # kept next to the .so, for reading what was compiled
            cpp.write_text(text)
            tmp = directory / f"{mode}_{key}.{os.getpid()}.so"
            stats.builds += 1
            with compiler_slot():  # one queue with the cpu device's compilers: at most one per core
                result = subprocess.run([cxx, *flags, str(cpp), "-o", str(tmp)], capture_output=True, text=True)
            if result.returncode:
                tmp.unlink(missing_ok=True)
                raise EmulatorBuildError(f"{cxx} could not build the emulator library ({cpp}):\n{result.stderr.strip()}")
            os.replace(tmp, library)  # atomic: a reader never sees a half-written library
        return library

    # the cache folder, or where it cannot be written (read-only, full) the private one, as the cpu build
    return build_in(cache_path) if cache_path is not None else in_cache("emulator", build_in)
