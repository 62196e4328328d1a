"""Build C source into a shared library with the system C compiler, cached on disk.

    path = build(source)      # CpuBuildError with the compiler's diagnostics if it fails
    compiler()                # the compiler's path, or None (then device="cpu" runs the NumPy runtime)

The compiler is `$CC`, else `cc`/`gcc` on PATH. Flags: `-O2` (gcc 12's -O2 vectorizes; -O3 and
`-march=native` made a 668-kernel build 5x and 2x slower to compile for loops that are memory-bound
anyway) plus the vector extensions this CPU has (`-mavx2 -mf16c` on x86-64 when /proc/cpuinfo lists
them). Libraries live in `<cache>/cpu/<key>.so`, key = sha256 of the source, the flags and the
compiler's version. A library is written atomically (built to a temporary name, then
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


def build(source: str, cc: str | None = None) -> Path:
    """The shared library of `source` (built, or found in the cache and verified)."""
    cc = cc or compiler()
    if cc is None:
        raise CpuBuildError("no C compiler found (set CC, or apt-get install gcc)")
    options = flags()
    key = hashlib.sha256("\0".join((source, *options, _version(cc))).encode()).hexdigest()[:32]
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
        c_file = directory / f"{key}.c"  # kept next to the library, for reading what was compiled
        write_atomic(c_file, source.encode())
        tmp = directory / f"{key}.{os.getpid()}.so"
        stats.builds += 1
        libs = [f for f in options if f.startswith("-l")]  # after the source: the linker reads left to right
        command = [cc, *(f for f in options if not f.startswith("-l")), str(c_file), "-o", str(tmp), *libs, "-lm"]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode:
            tmp.unlink(missing_ok=True)
            raise CpuBuildError(f"{cc} could not build {c_file}:\n{result.stderr.strip()[-4000:]}")
        write_atomic(library.with_suffix(".sha256"), _sha256(tmp).encode())
        os.replace(tmp, library)  # atomic: a reader never sees a half-written library
    prune(directory)  # the folder stays under $LUMINAL_CACHE_MAX_MB (least recently used go first)
    return library
