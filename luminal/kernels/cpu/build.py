"""Build C source into a shared library with the system C compiler, cached on disk.

    path = build(source)      # CpuBuildError with the compiler's diagnostics if it fails
    compiler()                # the compiler's path, or None (then device="cpu" runs the NumPy runtime)

The compiler is `$CC`, else `cc`/`gcc` on PATH. Flags: `-O2` (gcc 12's -O2 vectorizes; -O3 and
`-march=native` made a 668-kernel build 5x and 2x slower to compile for loops that are memory-bound
anyway) plus the vector extensions this CPU has (`-mavx2 -mf16c` on x86-64 when /proc/cpuinfo lists
them). Libraries live in `<cache>/cpu/<key>.so`, key = sha256 of the source, the flags and the
compiler's version (of the library's text as one unit, however it is split into translation
units compiled in parallel: `units`). A library is written atomically (built to a temporary name, then
renamed) with its own sha256 beside it; a cached library is loaded only from our cache folder and
only when its bytes match that sha256 — anything else is deleted and rebuilt. The folder is pruned
to `$LUMINAL_CACHE_MAX_MB` after each build (`cache.prune`, least recently used first).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from luminal.errors import LuminalError
from luminal.kernels.cache import cache_dir, prune, touch, write_atomic

FLAGS = (
    "-O2", "-ftree-partial-pre",  # partial PRE: lets -O2 if-convert (and so vectorize) select chains
    "-fopenmp", "-shared", "-fPIC", "-std=gnu11",
    "-fno-strict-aliasing",
    "-ffp-contract=off",  # no a*b+c -> fma: the NumPy runtime's rounding, on every host
    "-fno-math-errno",  # libm calls may vectorize/inline; results are unchanged (errno is never read)
    "-fno-trapping-math",  # compares may be if-converted (max/min/relu/clip vectorize); FP flags are never read
    "-w",
)


class CpuBuildError(LuminalError):
    """The C compiler rejected generated code; the message carries its diagnostics."""


@dataclass
class BuildStats:
    builds: int = 0  # compiler runs
    cache_hits: int = 0  # libraries found (and verified) on disk


stats = BuildStats()


def compiler() -> str | None:
    """The C compiler to use: `$CC` when set (None if it is not an executable), else cc or gcc."""
    cc = os.environ.get("CC")
    if cc:
        return shutil.which(cc)
    return shutil.which("cc") or shutil.which("gcc")


@functools.cache
def machine_flags() -> tuple[str, ...]:
    """Vector extensions of this CPU the compiler may use (part of the cache key, via the flags)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return ()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split() for line in f if line.startswith("flags")), [])
    except OSError:
        return ()
    flags = tuple(f"-m{x}" for x in ("avx2", "f16c") if x in cpu)
    if "avx2" in cpu and _has_libmvec():
        flags += ("-DLUM_LIBMVEC", "-lmvec")
    return flags


def _has_libmvec() -> bool:
    """glibc's vector math library (libmvec.so, in libc6-dev) is there to link."""
    return any(Path(d, "libmvec.so").exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib"))


def flags() -> tuple[str, ...]:
    return (*FLAGS, *machine_flags())


@functools.cache
def _version(cc: str) -> str:
    return subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verified(library: Path) -> bool:
    """The cached library is ours and whole: its bytes match the sha256 written beside it."""
    digest = library.with_suffix(".sha256")
    try:
        ok = library.is_file() and digest.read_text().strip() == _sha256(library)
    except OSError:
        ok = False
    if not ok:
        library.unlink(missing_ok=True)
        digest.unlink(missing_ok=True)
    return ok


def cached(key: str) -> Path | None:
    """The library of cache key `key` (the stem of a path `build` returned) when it is in the
    cache and verified, else None: how a warm process loads a library without its source."""
    if not (len(key) == 32 and all(c in "0123456789abcdef" for c in key)):
        return None
    library = cache_dir("cpu") / f"{key}.so"
    if library.exists() and _verified(library):
        stats.cache_hits += 1
        touch(library)  # most recently used: the last to be pruned
        return library
    return None


def units(kernels: int) -> int:
    """How many translation units a library of `kernels` kernels is split into, to compile in
    parallel: one per core the machine's load leaves free, at most one per `KERNELS_PER_UNIT`
    kernels (each unit parses the prelude again: on a busy machine one unit is faster)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        cores = min(cores, int(os.cpu_count() or 1) - int(os.getloadavg()[0] + 0.5) + 1)
    except OSError:
        pass
    return max(1, min(cores, kernels // KERNELS_PER_UNIT))


KERNELS_PER_UNIT = 6


def build(sources: str | list[str], cc: str | None = None, identity: str | None = None) -> Path:
    """The shared library of `sources` (one C translation unit, or several compiled in parallel
    and linked; built, or found in the cache and verified). `identity`: the text the cache key
    hashes when not the sources themselves (the same library however it is split into units)."""
    sources = [sources] if isinstance(sources, str) else list(sources)
    cc = cc or compiler()
    if cc is None:
        raise CpuBuildError("no C compiler found (set CC, or apt-get install gcc)")
    options = flags()
    text = identity if identity is not None else "\0".join(sources)
    key = hashlib.sha256("\0".join((text, *options, _version(cc))).encode()).hexdigest()[:32]
    found = cached(key)
    if found is not None:
        return found
    directory = cache_dir("cpu")
    library = directory / f"{key}.so"
    with open(directory / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building the same key: wait for it
        if library.exists() and _verified(library):
            stats.cache_hits += 1
            return library
        tmp = directory / f"{key}.{os.getpid()}.so"
        stats.builds += 1
        try:
            _compile(cc, options, sources, directory, key, tmp)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        write_atomic(library.with_suffix(".sha256"), _sha256(tmp).encode())
        os.replace(tmp, library)  # atomic: a reader never sees a half-written library
    prune(directory)  # the folder stays under $LUMINAL_CACHE_MAX_MB (least recently used go first)
    return library


def c_files(library: Path) -> list[Path]:
    """The C files a library was built from (kept next to it, for reading what was compiled)."""
    key = library.stem
    return [library.with_suffix(".c")] if library.with_suffix(".c").exists() else \
        sorted(library.parent.glob(f"{key}.*.c"), key=lambda p: int(p.suffixes[0][1:]))


def _compile(cc: str, options, sources: list[str], directory: Path, key: str, out: Path) -> None:
    """`sources` into the shared library `out`: one compiler run for one unit, else the units
    compiled to objects in parallel and linked."""
    libs = [f for f in options if f.startswith("-l")]  # after the objects: the linker reads left to right
    compile_flags = [f for f in options if not f.startswith("-l")]
    names = [f"{key}.c"] if len(sources) == 1 else [f"{key}.{i}.c" for i in range(len(sources))]
    files = [directory / n for n in names]
    for f, text in zip(files, sources):
        write_atomic(f, text.encode())
    if len(files) == 1:
        _run([cc, *compile_flags, str(files[0]), "-o", str(out), *libs, "-lm"], cc, files[0])
        return
    objects = [f.with_name(f"{f.stem}.{os.getpid()}.o") for f in files]
    try:
        jobs = [(f, subprocess.Popen([cc, *compile_flags, "-c", str(f), "-o", str(o)], stderr=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, text=True)) for f, o in zip(files, objects)]
        failed = None
        for f, job in jobs:
            _, err = job.communicate()
            if job.returncode and failed is None:
                failed = (f, err)
        if failed is not None:
            raise CpuBuildError(f"{cc} could not build {failed[0]}:\n{failed[1].strip()[-4000:]}")
        _run([cc, *compile_flags, *map(str, objects), "-o", str(out), *libs, "-lm"], cc, files[0])
    finally:
        for o in objects:
            o.unlink(missing_ok=True)


def _run(command: list[str], cc: str, c_file: Path) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise CpuBuildError(f"{cc} could not build {c_file}:\n{result.stderr.strip()[-4000:]}")
