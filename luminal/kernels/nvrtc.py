"""Compile CUDA C with NVRTC on any machine: no GPU and no driver needed, only the NVRTC wheel.

    binary = compile_cuda(source, "sm_90")      # cubin; ptxas runs inside NVRTC
    binary.kernels["softmax"].spill_stores      # per-kernel resources parsed from -Xptxas=-v
    compile_cuda(source, "compute_90").binary   # PTX text (no ptxas, so no resources)

Backends: `cuda.bindings.nvrtc` (pip `cuda-bindings` + `nvidia-cuda-nvrtc`), else `cupy.cuda.nvrtc`
(which works without a driver; `cupy.cuda.compiler` does not, it queries the current device).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import glob
import hashlib
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from luminal.errors import LuminalError
from luminal.kernels.cache import cache_dir, in_cache, prune, touch, write_atomic

# What CuPy's RawModule passes on its own (cupy/cuda/compiler.py), so a cubin built here behaves like
# one CuPy builds; plus C++17, which generated code may rely on.
DEFAULT_OPTIONS = ("-ftz=true", "--device-as-default-execution-space", "-std=c++17")
SOURCE_NAME = "kernel.cu"  # the name NVRTC's log uses: "kernel.cu(12): error: ..."


@dataclass(frozen=True)
class KernelResources:
    """One kernel's ptxas report. Spills and stack mean local memory traffic: a register-pressure bug."""

    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack: int = 0
    shared_mem: int = 0  # static shared memory, bytes
    barriers: int = 0


@dataclass(frozen=True)
class CompiledKernelBinary:
    binary: bytes  # cubin for arch "sm_XX", PTX text for "compute_XX"
    arch: str
    log: str
    kernels: dict[str, KernelResources] = field(default_factory=dict)


def number_lines(source: str) -> str:
    """The source with line numbers, to read next to NVRTC's "kernel.cu(12): error" lines."""
    lines = source.splitlines()
    width = max(4, len(str(len(lines))))
    return "\n".join(f"{i:{width}d} | {line}" for i, line in enumerate(lines, 1))


class CompileError(LuminalError):
    """NVRTC rejected the source. The message carries the log and the numbered source."""

    def __init__(self, log: str, source: str, arch: str, options: tuple[str, ...]):
        self.log, self.source, self.arch, self.options = log, source, arch, options
        hint = ""
        if re.search(r"cannot open source file|could not open source file", log) and not cuda_include_dirs():
            hint = "\n(no CUDA headers found: pip install nvidia-cuda-runtime for cuda_fp16.h / cuda_bf16.h)"
        super().__init__(f"NVRTC could not compile {SOURCE_NAME} for {arch}\n{log.strip()}{hint}\n"
                         f"--- {SOURCE_NAME} (options: {' '.join(options)}) ---\n{number_lines(source)}")


# ---------------------------------------------------------------- backends ---
def _preload_wheel_nvrtc() -> None:
    """Older cuda-bindings (no cuda-pathfinder) only dlopen("libnvrtc.so.N") by name. Loading the
    wheel's copy first makes that dlopen find it by soname, with no LD_LIBRARY_PATH needed."""
    import nvidia  # namespace package of the nvidia-* wheels

    for root in nvidia.__path__:
        for lib in sorted(glob.glob(os.path.join(root, "*", "lib", "libnvrtc.so.*"))):
            if re.search(r"libnvrtc\.so\.\d+$", lib):
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                return


@functools.cache
def _backend():
    """cuda.bindings.nvrtc or cupy.cuda.nvrtc, whichever loads; raises ImportError if neither."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        from cupy.cuda import nvrtc  # noqa: F401  (raises ImportError when CuPy is absent too)

        return "cupy", nvrtc
    try:
        nvrtc.nvrtcVersion()
    except Exception:  # the library itself was not found: try the wheel's copy once
        _preload_wheel_nvrtc()
        nvrtc.nvrtcVersion()
    return "cuda-bindings", nvrtc


def _compile(source: str, options: list[str], want_cubin: bool) -> tuple[bool, str, bytes]:
    """Run NVRTC once: (success, log, cubin or PTX)."""
    kind, nvrtc = _backend()
    if kind == "cupy":
        prog = nvrtc.createProgram(source, SOURCE_NAME, (), ())
        try:
            try:
                nvrtc.compileProgram(prog, tuple(options))
            except nvrtc.NVRTCError:
                return False, nvrtc.getProgramLog(prog), b""
            out = nvrtc.getCUBIN(prog) if want_cubin else nvrtc.getPTX(prog)
            return True, nvrtc.getProgramLog(prog).rstrip("\x00"), bytes(out)
        finally:
            nvrtc.destroyProgram(prog)
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), SOURCE_NAME.encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"nvrtcCreateProgram: {err}")
    try:
        opts = [o.encode() for o in options]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log = log.rstrip(b"\x00").decode(errors="replace")
        if res != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False, log, b""
        get_size, get = ((nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if want_cubin
                         else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX))
        _, size = get_size(prog)
        out = b" " * size
        get(prog, out)
        return True, log, out if want_cubin else out.rstrip(b"\x00")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@functools.cache
def nvrtc_available() -> bool:
    try:
        nvrtc_version()
    except Exception:
        return False
    return True


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    kind, nvrtc = _backend()
    if kind == "cupy":
        return tuple(nvrtc.getVersion())
    _, major, minor = nvrtc.nvrtcVersion()
    return major, minor


@functools.cache
def cuda_include_dirs() -> tuple[str, ...]:
    """Where cuda_fp16.h / cuda_bf16.h live. NVRTC builds them in no more (13.x); the
    nvidia-cuda-runtime wheel or a CUDA toolkit ships them."""
    candidates = []
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        candidates.append(find_nvidia_header_directory("cudart"))
    except Exception:  # no pathfinder, or it found nothing
        pass
    try:
        import nvidia

        for root in nvidia.__path__:  # cu13/include (13.x wheels), cuda_runtime/include (12.x)
            candidates += glob.glob(os.path.join(root, "*", "include"))
    except ImportError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "include"))
    found = [d for d in candidates if d and os.path.isfile(os.path.join(d, "cuda_fp16.h"))]
    return tuple(found[:1])  # one directory: never mix the headers of two CUDA versions


# ------------------------------------------------------------ ptxas report ---
_ENTRY_RE = re.compile(r"Compiling entry function '(\w+)' for")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


def parse_ptxas_log(log: str) -> dict[str, KernelResources]:
    """Per-kernel resources from `-Xptxas=-v` output (one "Compiling entry function" block each)."""
    found: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        if m := _ENTRY_RE.search(line):
            current = found.setdefault(m.group(1), {})
        elif current is not None and (m := _FRAME_RE.search(line)):
            current.update(stack=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        elif current is not None and (m := _USED_RE.search(line)):
            current.update(registers=int(m[1]), barriers=int(m[2] or 0), shared_mem=int(m[3] or 0))
    return {name: KernelResources(**fields) for name, fields in found.items()}


# -------------------------------------------------------------- the cache ---
class NVRTCCompiler:
    """NVRTC behind a cache keyed by (source, arch, options, NVRTC version), in memory (the last
    `memory_size`) and on disk; `compiles`, `memory_hits`, `disk_hits` count. Thread-safe."""

    def __init__(self, cache_path: Path | None = None, memory_size: int = 64):
        self.cache_path = Path(cache_path) if cache_path else None
        self.memory_size = memory_size
        self.compiles = self.memory_hits = self.disk_hits = 0
        self._memory: collections.OrderedDict[str, CompiledKernelBinary] = collections.OrderedDict()
        self._lock = threading.Lock()

    def compile(self, source: str, arch: str = "sm_90", options=()) -> CompiledKernelBinary:
        if not re.fullmatch(r"(sm|compute)_\d+[a-z]?", arch):
            raise ValueError(f"arch must look like 'sm_90' (cubin) or 'compute_90' (PTX), not {arch!r}")
        want_cubin = arch.startswith("sm_")
        full = (f"-arch={arch}", *DEFAULT_OPTIONS, *options,
                *(f"-I{d}" for d in cuda_include_dirs()), *(("-Xptxas=-v",) if want_cubin else ()))
        key = hashlib.sha256("\0".join([source, *full, repr(nvrtc_version())]).encode()).hexdigest()[:32]
        with self._lock:
            if (hit := self._memory.get(key)) is not None:
                self._memory.move_to_end(key)
                self.memory_hits += 1
                return hit
        directory = self.cache_path or cache_dir("nvrtc")
        result = self._load(directory, key, arch)
        if result is None:
            self.compiles += 1
            ok, log, binary = _compile(source, list(full), want_cubin)
            if not ok:
                raise CompileError(log, source, arch, full)
            result = CompiledKernelBinary(binary, arch, log, parse_ptxas_log(log))
            self._store(directory, key, log, binary)
        else:
            self.disk_hits += 1
        with self._lock:
            self._memory[key] = result
            while len(self._memory) > self.memory_size:
                self._memory.popitem(last=False)
        return result

    def _store(self, directory: Path, key: str, log: str, binary: bytes) -> None:
        """The disk cache's entry (log first: a .bin without its .log is never read); a folder that
        cannot be written gives way to the private one, or, if the caller chose it, is skipped."""
        def write(d: Path) -> None:
            write_atomic(d / f"{key}.log", log.encode())
            write_atomic(d / f"{key}.bin", binary)
            prune(d)

        with contextlib.suppress(OSError):
            if self.cache_path is not None:
                write(directory)
            else:
                in_cache("nvrtc", write)

    @staticmethod
    def _load(directory: Path, key: str, arch: str) -> CompiledKernelBinary | None:
        if not (directory / f"{key}.bin").exists():
            return None
        try:
            log = (directory / f"{key}.log").read_text()
            binary = (directory / f"{key}.bin").read_bytes()
        except OSError:  # pruned by another process meanwhile: compile again
            return None
        touch(directory / f"{key}.bin")
        return CompiledKernelBinary(binary, arch, log, parse_ptxas_log(log))


@functools.cache
def default_compiler() -> NVRTCCompiler:
    return NVRTCCompiler()


def compile_cuda(source: str, arch: str = "sm_90", options=()) -> CompiledKernelBinary:
    """Compile with the process-wide cached compiler. Raises CompileError with the numbered source."""
    return default_compiler().compile(source, arch, tuple(options))
