"""Build C source into a shared library with the system C compiler (`$CC`, else cc/gcc), cached on disk.

Flags: `-O2` (-O3 and `-march=native` compile several times slower, for memory-bound loops) plus
the vector extensions /proc/cpuinfo lists. A library, `<cache>/cpu/<key>.so` (key: sha256 of the
text, flags and compiler version), may be split into units compiled in parallel (`units`); it is
written atomically with its sha256 beside it and loaded only when its bytes match. Code every
library needs but no graph shapes (`LINKED`) is an object built once per machine and linked in.
A cache folder that fails a write moves the build to a private folder (`cache.in_cache`). Each
compiler runs in one of the process's slots (`build_queue`) under a `Ticket` its freed graph cancels.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from luminal.errors import LuminalError
from luminal.kernels.cache import cache_dir, in_cache, prune, touch, write_atomic
from luminal.kernels.cpu import build_queue, isa
from luminal.threadflags import background as _background
from luminal.threadflags import in_background

FLAGS = (
    "-O2", "-ftree-partial-pre",  # partial PRE: lets -O2 if-convert (and so vectorize) select chains
    "-fopenmp", "-shared", "-fPIC", "-std=gnu11",
    "-fno-strict-aliasing", "-fwrapv",  # signed integers wrap as torch's (an overflow is not UB to fold on)
    "-ffp-contract=off",  # no a*b+c -> fma: the NumPy runtime's rounding, on every host
    "-fno-math-errno",  # libm calls may vectorize/inline; results are unchanged (errno is never read)
    "-fno-trapping-math",  # compares may be if-converted (max/min/relu/clip vectorize); FP flags are never read
    "-w",
)


AVX512 = frozenset({"avx512f", "avx512bw", "avx512dq", "avx512vl"})  # /proc/cpuinfo names, and GCC's -m options


class CpuBuildError(LuminalError):
    """The C compiler rejected generated code; the message carries its diagnostics."""


@dataclass
class BuildStats:
    builds: int = 0  # compiler runs
    cache_hits: int = 0  # libraries found (and verified) on disk


stats = BuildStats()
_outcome = threading.local()  # this thread's last `build`: "hit" (found in the cache) or "miss" (compiled)


def last_outcome() -> str | None:
    """Whether this thread's last `build` found its library ("hit") or compiled it ("miss")."""
    return getattr(_outcome, "last", None)


def compiler() -> str | None:
    """The C compiler to use: `$CC` when set (None if it is not an executable), else cc or gcc."""
    cc = os.environ.get("CC")
    if cc:
        return shutil.which(cc)
    return shutil.which("cc") or shutil.which("gcc")


def cpu_info() -> tuple[frozenset[str], str]:
    """This CPU's feature flags and vendor from /proc/cpuinfo, less what `LUMINAL_ISA` masks."""
    flags, vendor = _proc_cpuinfo()
    return isa.mask(flags), vendor


@functools.cache
def _proc_cpuinfo() -> tuple[frozenset[str], str]:
    flags, vendor = frozenset(), ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "flags" and not flags:
                    flags = frozenset(value.split())
                elif key == "vendor_id" and not vendor:
                    vendor = value.strip()
                if flags and vendor:
                    break
    except OSError:
        pass
    return flags, vendor


def machine_flags() -> tuple[str, ...]:
    """Vector extensions of this CPU the compiler may use (part of the cache key, via the flags)."""
    return _machine_flags(isa.name())


@functools.cache
def _machine_flags(isa_name: str) -> tuple[str, ...]:
    if platform.machine() not in ("x86_64", "AMD64"):
        return ()
    cpu = cpu_info()[0]
    flags = tuple(f"-m{x}" for x in ("avx2", "f16c") if x in cpu)
    if AVX512 <= cpu:  # explicit 64-byte vector types (attention's tiles) get zmm registers; loops GCC
        # vectorizes itself keep 8 float lanes, so their roundings (a sum's order) are as on an AVX2 machine
        flags += (*(f"-m{x}" for x in sorted(AVX512)), "-mprefer-vector-width=256")
    if "avx2" in cpu and "fma" in cpu:  # a define only: kernels that may contract (attention's tiles) opt in
        flags += ("-DLUM_FMA",)
    libmvec = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib")  # glibc's vector libm, libc6-dev
    if "avx2" in cpu and any(Path(d, "libmvec.so").exists() for d in libmvec):
        flags += ("-DLUM_LIBMVEC", "-lmvec")
    return flags


def flags() -> tuple[str, ...]:
    return (*FLAGS, *machine_flags())


@functools.cache
def _version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:  # CC=/bin/false, say: the NumPy runtime serves
        raise CpuBuildError(f"the C compiler {cc} does not run: `{cc} --version` failed ({exc})") from None


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
    """The verified library of cache key `key` (a `build` path's stem), else None."""
    if not (len(key) == 32 and all(c in "0123456789abcdef" for c in key)):
        return None
    try:
        library = cache_dir("cpu") / f"{key}.so"
        if library.exists() and _verified(library):
            stats.cache_hits += 1
            touch(library)  # most recently used: the last to be pruned
            return library
    except OSError:  # a folder that cannot be read or cleaned: `build` builds elsewhere
        pass
    return None


def units(kernels: int) -> int:
    """Translation units to compile a library of `kernels` kernels in: one per free core, at most one
    per `KERNELS_PER_UNIT` kernels (each parses the prelude again: on a busy machine one is faster)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    cores = min(cores, (os.cpu_count() or 1) - int(busy_elsewhere(own_builds=False) + 0.5))
    return max(1, min(cores, kernels // KERNELS_PER_UNIT))


KERNELS_PER_UNIT = 6


# A name the generated C may call -> the source of the object defining it, linked where it is named
LINKED: dict[str, str] = {}


def build(sources: str | list[str], cc: str | None = None, identity: str | None = None) -> Path:
    """The shared library of `sources` (translation units, linked with the `LINKED` objects they call).
    `identity`: the text the key hashes, if not the sources (one library however it is split)."""
    sources = [sources] if isinstance(sources, str) else list(sources)
    cc = _compiler(cc)
    options = flags()
    text = identity if identity is not None else "\0".join(sources)
    linked = [source for name, source in LINKED.items() if any(name in s for s in sources)]
    key = hashlib.sha256("\0".join((text, *options, _version(cc), *linked)).encode()).hexdigest()[:32]
    build_queue.check_cancelled()
    found = cached(key)
    if found is not None:
        _outcome.last = "hit"
        return found

    def build_in(directory: Path) -> Path:
        library = directory / f"{key}.so"
        with open(directory / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process building the same key: wait for it
            if library.exists() and _verified(library):  # another process built it meanwhile
                stats.cache_hits += 1
                _outcome.last = "hit"
                return library
            tmp = directory / f"{key}.{os.getpid()}.so"
            stats.builds += 1
            _outcome.last = "miss"
            try:
                for source in linked:  # built beside the units when it is not built yet
                    prepare_object(source, spare_core_only=False)
                _compile(cc, options, sources, directory, key, tmp,
                         [functools.partial(compiled_object, s, cc) for s in linked])
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            write_atomic(library.with_suffix(".sha256"), _sha256(tmp).encode())
            os.replace(tmp, library)  # atomic: a reader never sees a half-written library
        with contextlib.suppress(OSError):  # the library is there: a folder that cannot be pruned only grows
            prune(directory)
        return library

    return _in_cache(build_in, "the library")


def _in_cache(fn, what: str):
    """`cache.in_cache("cpu", fn)`; a CpuBuildError naming the folder if the private one fails too."""
    try:
        return in_cache("cpu", fn)
    except OSError as again:
        raise CpuBuildError(f"could not write {what} in {again.filename or 'the cache folder'}: {again}") from again


def _compiler(cc: str | None) -> str:
    cc = cc or compiler()
    if cc is None:
        raise CpuBuildError("no C compiler found (set CC, or apt-get install gcc)")
    return cc


def compiled_object(source: str, cc: str | None = None) -> Path:
    """`source` compiled to `<cache>/cpu/<key>.o` for libraries to link, cached and verified as they
    are; a build `prepare_object` started is waited for."""
    cc = _compiler(cc)
    options, key = _object_key(source, cc)
    with _objects_lock:
        pending = _objects.get(key)
    if pending is not None and pending is not threading.current_thread():
        pending.join()

    def build_in(directory: Path) -> Path:
        obj = directory / f"{key}.o"
        if obj.exists() and _verified(obj):
            touch(obj)
            return obj
        with open(directory / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if obj.exists() and _verified(obj):
                return obj
            c_file, tmp = directory / f"{key}.c", directory / f"{key}.{os.getpid()}.{threading.get_ident()}.o"
            write_atomic(c_file, source.encode())
            try:
                _run([cc, *options, "-c", str(c_file), "-o", str(tmp)], cc, c_file)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            write_atomic(obj.with_suffix(".sha256"), _sha256(tmp).encode())
            os.replace(tmp, obj)
        return obj

    return _in_cache(build_in, "an object")


def object_available(source: str) -> bool:
    """`compiled_object(source)` is in the cache (verified when linked) or being built by this process."""
    cc = compiler()
    if cc is None:
        return False
    try:
        _, key = _object_key(source, cc)
        with _objects_lock:
            if key in _objects:
                return True
        return (cache_dir("cpu") / f"{key}.o").exists()
    except (CpuBuildError, OSError):  # the library's build says why
        return False


def spare_core() -> bool:
    """The machine has a core to spare beside this process's Python and what else runs."""
    return (os.cpu_count() or 1) - 1 - busy_elsewhere() >= 0.5


# Cores busy outside this process: /proc/stat's busy time less our own since the last look, else the
# runnable tasks not ours. Not the load average: it counts our own last minute.
_looked: tuple | None = None  # (monotonic, busy seconds or None, process CPU seconds) of the last look
_looked_lock = threading.Lock()


def _busy_seconds() -> float | None:
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
        return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _running_elsewhere() -> float:
    """Runnable tasks right now that are not this process's threads (0 when /proc is unreadable)."""
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
        ours = 0
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    ours += f.read().rpartition(")")[2].split()[0] == "R"
            except OSError:
                continue
        return float(max(0, running - max(ours, 1)))
    except (OSError, ValueError, IndexError):
        return 0.0


def busy_elsewhere(own_builds: bool = True) -> float:
    """Cores other processes keep busy; `own_builds=False`: less the compilers this process runs now
    (they end soon: a library's units should share the cores rather than build as one unit)."""
    global _looked
    now, busy, own = time.monotonic(), _busy_seconds(), _own_seconds()
    with _looked_lock:
        last, _looked = _looked, (now, busy, own)
    if last is not None and busy is not None and last[1] is not None and 0.05 <= now - last[0] <= 5.0:
        seen = max(0.0, (busy - last[1] - (own - last[2])) / (now - last[0]))
    else:
        seen = _running_elsewhere()
    return seen if own_builds else max(0.0, seen - _compiling)


def _own_seconds() -> float:
    """CPU seconds of this process and its reaped children: the compilers it ran are its own work
    (counted as another's, they read as a busy core and the next library built as one unit)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


_compiling = 0  # compiler runs of this process under way (`_run`)


def _object_key(source: str, cc: str) -> tuple[tuple[str, ...], str]:
    options = tuple(f for f in flags() if not f.startswith("-l") and f != "-shared")
    return options, hashlib.sha256("\0".join((source, *options, _version(cc), "object")).encode()).hexdigest()[:32]


_objects: dict[str, threading.Thread] = {}  # key -> the thread building it (this process)
_objects_lock = threading.Lock()


def prepare_object(source: str, spare_core_only: bool = True) -> None:
    """Start building `compiled_object(source)` on a background thread (once per process; with
    `spare_core_only`, only on a core left idle). Errors surface when a library links it."""
    cc = compiler()
    if cc is None or (spare_core_only and not spare_core()):
        return
    try:
        _, key = _object_key(source, cc)
    except CpuBuildError:  # a compiler that does not run: the library's build says so
        return

    def run():
        try:
            with in_background():
                compiled_object(source, cc)
        except Exception:  # noqa: BLE001 - compiled_object raises it again in the library's build
            pass

    with _objects_lock:
        if key in _objects:
            return
        _objects[key] = thread = threading.Thread(target=run, name="luminal-cc", daemon=True)
    thread.start()


def c_files(library: Path) -> list[Path]:
    """The C files a library was built from (kept next to it, for reading what was compiled)."""
    key = library.stem
    return [library.with_suffix(".c")] if library.with_suffix(".c").exists() else \
        sorted(library.parent.glob(f"{key}.*.c"), key=lambda p: int(p.suffixes[0][1:]))


def _compile(cc: str, options, sources: list[str], directory: Path, key: str, out: Path, extra=()) -> None:
    """`sources` into the shared library `out`: one compiler run, or the units compiled in parallel
    and linked with `extra` (functions returning object paths, called once the units are built)."""
    libs = [f for f in options if f.startswith("-l")]  # after the objects: the linker reads left to right
    compile_flags = [f for f in options if not f.startswith("-l")]
    names = [f"{key}.c"] if len(sources) == 1 else [f"{key}.{i}.c" for i in range(len(sources))]
    files = [directory / n for n in names]
    for f, text in zip(files, sources):
        write_atomic(f, text.encode())
    if len(files) == 1 and not extra:
        _run([cc, *compile_flags, str(files[0]), "-o", str(out), *libs, "-lm"], cc, files[0])
        return
    objects = [f.with_name(f"{f.stem}.{os.getpid()}.o") for f in files]
    try:
        # a thread per unit, holding a `build_queue` slot only while its compiler runs
        failed: list[BaseException | None] = [None] * len(files)

        def unit(i: int) -> None:
            try:
                _run([cc, *compile_flags, "-c", str(files[i]), "-o", str(objects[i])], cc, files[i])
            except BaseException as exc:  # noqa: BLE001 - raised below, in the build's thread
                failed[i] = exc

        threads = [threading.Thread(target=_inheriting(unit), args=(i,), name="luminal-cc-unit", daemon=True)
                   for i in range(1, len(files))]
        for t in threads:
            t.start()
        unit(0)
        for t in threads:
            t.join()
        for exc in failed:
            if exc is not None:
                raise exc
        linked = [str(path()) for path in extra]
        _run([cc, *compile_flags, *map(str, objects), *linked, "-o", str(out), *libs, "-lm"], cc, files[0])
    finally:
        for o in objects:
            o.unlink(missing_ok=True)


# Compilers of a background build (`threadflags.in_background`) run niced: on the cores Python leaves idle
BACKGROUND_NICE = 10


def _command(command: list[str]) -> list[str]:
    if _background.get() and _NICE is not None:
        return [_NICE, "-n", str(BACKGROUND_NICE), *command]
    return command


_NICE = shutil.which("nice")


def _run(command: list[str], cc: str, c_file: Path) -> None:
    """One compiler run, once the build queue has room for it (`build_queue`; a cancelled build: `BuildCancelled`)."""
    global _compiling
    ticket = build_queue.ticket()
    with build_queue.slots.slot(ticket, _background.get()):
        with _looked_lock:
            _compiling += 1
        try:
            try:  # a process group of its own: cancelling kills cc1 and as too, not only the driver
                job = subprocess.Popen(_command(command), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                       process_group=0)
            except OSError as exc:  # the compiler vanished or is not executable: not the cache's fault
                raise CpuBuildError(f"{cc} could not be run: {exc}") from None
            if ticket is not None:
                ticket.running(job)
            try:
                _, err = job.communicate()
            finally:
                if ticket is not None:
                    ticket.done(job)
        finally:
            with _looked_lock:
                _compiling -= 1
    if job.returncode:
        build_queue.check_cancelled()
        for code in _FOLDER_ERRORS:  # the compiler could not write its output: the folder's fault (`_in_cache`)
            if os.strerror(code) in err:
                raise OSError(code, os.strerror(code), str(c_file.parent))
        raise CpuBuildError(f"{cc} could not build {c_file}:\n{err.strip()[-4000:]}")


_FOLDER_ERRORS = (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG, errno.EACCES)


def _inheriting(fn):
    """`fn` for another thread, run at this thread's priority and for its ticket."""
    background, ticket = _background.get(), build_queue.ticket()

    def run(*args):
        with _background.set(background), build_queue.for_ticket(ticket):
            return fn(*args)

    return run
