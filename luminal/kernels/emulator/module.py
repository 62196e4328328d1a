"""A built emulator library, loaded with ctypes: launch its kernels on NumPy arrays."""

from __future__ import annotations

import collections
import ctypes
import re
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from luminal.errors import DTypeError, InputError, LuminalError
from luminal.kernels.emulator.asan import asan_runtime_loaded

# C++ type (as g++ spells it in a signature) -> (NumPy dtype names accepted, alignment in bytes).
# bf16 arrays are ml_dtypes.bfloat16 or their raw uint16 bits; NumPy has no bfloat16 of its own.
_VECTOR_BASE = {"float": "float", "int": "int", "uint": "unsigned int", "double": "double",
                "longlong": "long long int", "ulonglong": "long long unsigned int",
                "char": "signed char", "uchar": "unsigned char", "short": "short int", "ushort": "short unsigned int"}
C_TYPES: dict[str, tuple[tuple[str, ...], int]] = {
    "float": (("float32",), 4), "double": (("float64",), 8), "bool": (("bool",), 1),
    "signed char": (("int8",), 1), "char": (("int8",), 1), "unsigned char": (("uint8",), 1),
    "short int": (("int16",), 2), "short unsigned int": (("uint16",), 2),
    "int": (("int32",), 4), "unsigned int": (("uint32",), 4),
    "long int": (("int64",), 8), "long long int": (("int64",), 8),
    "long unsigned int": (("uint64",), 8), "long long unsigned int": (("uint64",), 8),
    "__half": (("float16",), 2), "__nv_bfloat16": (("bfloat16", "uint16"), 2),
}


class EmulatorError(LuminalError):
    """A kernel misbehaved in the emulator (barrier divergence, deadlock, bad warp mask, bad launch)."""

    def __init__(self, kernel: str, message: str):
        self.kernel = kernel
        super().__init__(f"kernel {kernel!r}: {message}")


def _pointer_target(param: str) -> tuple[str, bool] | None:
    """'const float*' -> ('float', True); None for a non-pointer parameter."""
    if not param.endswith("*"):
        return None
    base = param[:-1].strip()
    const = bool(re.search(r"\bconst\b", base))
    return re.sub(r"\b(const|volatile)\b", "", base).strip(), const


def _element_type(base: str) -> tuple[tuple[str, ...], int] | None:
    """Dtypes and alignment for a pointee; vector types (float4, int2, ...) take arrays of their lanes."""
    if base in C_TYPES:
        return C_TYPES[base]
    m = re.fullmatch(r"([a-z]+)([1-4])", base)
    if m and m[1] in _VECTOR_BASE:
        dtypes, size = C_TYPES[_VECTOR_BASE[m[1]]]
        lanes = int(m[2])
        return dtypes, size * lanes if lanes in (2, 4) else size
    return None


@dataclass(frozen=True)
class KernelInfo:
    name: str
    params: tuple[str, ...]  # C++ parameter types, as the library reports them
    static_shared_mem: int   # bytes of the kernel's own __shared__ variables


class EmulatedModule:
    """Kernels of one emulator build. `launch` returns once every block has run.

    One launch at a time per library: the emulator state is a global of the `.so` (a lock
    serialises Python threads; use processes, e.g. pytest-xdist, for parallelism)."""

    _locks: dict[str, threading.Lock] = {}
    # libraries keeping their fiber stacks between launches (two maps per CUDA thread: 512 for a
    # block of 256), most recently launched last: the rest are unmapped, so a process that loads
    # hundreds of libraries (a test run) stays under vm.max_map_count (65,530 maps)
    FIBER_LIBRARIES = 16
    _holding: collections.OrderedDict[str, weakref.ref] = collections.OrderedDict()
    _holding_lock = threading.Lock()

    def __init__(self, path: Path, kernels: list[str], mode: str = "release"):
        if mode == "asan" and not asan_runtime_loaded():
            # dlopen of an ASan library into a process without the ASan runtime aborts the process
            raise LuminalError("an ASan emulator build loads only into a process started with "
                               "LD_PRELOAD=libasan.so: use luminal.kernels.emulator.run_python_under_asan()")
        self.path, self.mode = Path(path), mode
        self._lib = ctypes.CDLL(str(self.path))
        self._lib.cuemu_last_error.restype = ctypes.c_char_p
        self._lib.cuemu_set_schedule.argtypes = [ctypes.c_int]
        self._lock = self._locks.setdefault(str(self.path), threading.Lock())
        self.kernels: dict[str, KernelInfo] = {}
        self._launchers = {}
        for name in kernels:
            launcher = getattr(self._lib, f"cuemu_launch_{name}")
            launcher.restype = ctypes.c_int
            launcher.argtypes = [ctypes.c_uint] * 6 + [ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
            signature = getattr(self._lib, f"cuemu_signature_{name}")
            signature.restype = ctypes.c_char_p
            static_smem = getattr(self._lib, f"cuemu_static_smem_{name}")
            static_smem.restype = ctypes.c_size_t
            m = re.search(r"A = \{(.*)\}", signature().decode())  # "...[with A = {const float*, int}]"
            params = tuple(p.strip() for p in m[1].split(",")) if m and m[1].strip() else ()
            self.kernels[name] = KernelInfo(name, params, static_smem())
            self._launchers[name] = launcher
        # a dropped module's library stays loaded (ctypes never unloads one): its stacks go with it
        weakref.finalize(self, _release, self._lib, self._lock)

    def release(self) -> None:
        """Unmap this library's fiber stacks (two maps per CUDA thread, kept between launches), lest
        a process loading hundreds of libraries exhaust vm.max_map_count."""
        with self._lock:
            self._lib.cuemu_release_fibers()

    def launch(self, kernel: str, grid, block, args, shared_mem_bytes: int = 0,
               schedule: int | None = None) -> None:
        """Run `kernel` like cuLaunchKernel. Arrays are passed by pointer and checked against the
        parameter's element type (const-ness too); scalars must be NumPy scalars of the exact type.
        `schedule` 0/1/2 (forward/reverse/shuffled) overrides $CUEMU_SCHEDULE for this launch."""
        info = self.kernels.get(kernel)
        if info is None:
            raise InputError(f"no kernel {kernel!r} in this module; it has {sorted(self.kernels)}")
        args = list(args)
        if len(args) != len(info.params):
            raise InputError(f"kernel {kernel!r} takes {len(info.params)} arguments {list(info.params)}, got {len(args)}")
        storage = [self._marshal(kernel, i, param, arg) for i, (param, arg) in enumerate(zip(info.params, args))]
        argv = (ctypes.c_void_p * max(1, len(storage)))(*[ctypes.addressof(s) for s in storage])
        g, b = _dims(grid, "grid"), _dims(block, "block")
        with self._lock:
            self._lib.cuemu_set_schedule(-1 if schedule is None else int(schedule))
            rc = self._launchers[kernel](*g, *b, int(shared_mem_bytes), argv)
            message = self._lib.cuemu_last_error().decode(errors="replace") if rc else ""
        self._hold()
        if rc:
            raise EmulatorError(kernel, f"{message} (grid {g}, block {b}, {shared_mem_bytes} B dynamic shared)")

    def _hold(self) -> None:
        """Mark this library's fibers most recently used; unmap those of the least recently used
        beyond `FIBER_LIBRARIES` (after this launch's lock is released: one library lock at a time)."""
        evicted = []
        with self._holding_lock:
            self._holding[str(self.path)] = weakref.ref(self)
            self._holding.move_to_end(str(self.path))
            while len(self._holding) > self.FIBER_LIBRARIES:
                module = self._holding.popitem(last=False)[1]()
                if module is not None:
                    evicted.append(module)
        for module in evicted:
            module.release()

    @staticmethod
    def _marshal(kernel: str, index: int, param: str, arg):
        """The bytes the kernel's `void** args[index]` points at."""
        where = f"kernel {kernel!r} argument {index} ({param})"
        target = _pointer_target(param)
        if target is not None:
            base, const = target
            if arg is None:
                return ctypes.c_void_p(0)
            if isinstance(arg, int):  # a raw address, e.g. into an arena: the caller vouches for it
                return ctypes.c_void_p(arg)
            if not isinstance(arg, np.ndarray):
                raise DTypeError(f"{where}: expected a NumPy array, got {type(arg).__name__}")
            element = _element_type(base)
            if base != "void" and element is None:
                raise DTypeError(f"{where}: unsupported pointee type {base!r}")
            if element is not None:
                dtypes, align = element
                if arg.dtype.name not in dtypes:
                    raise DTypeError(f"{where}: array dtype {arg.dtype} does not match {param}")
                if arg.ctypes.data % align:
                    raise DTypeError(f"{where}: array data is not {align}-byte aligned")
            if not const and not arg.flags.writeable:
                raise DTypeError(f"{where}: read-only array for a non-const pointer")
            return ctypes.c_void_p(arg.ctypes.data)
        element = C_TYPES.get(re.sub(r"\b(const|volatile)\b", "", param).strip())
        if element is None:
            raise DTypeError(f"{where}: unsupported parameter type")
        if not isinstance(arg, np.generic) or arg.dtype.name not in element[0]:
            got = f"np.{arg.dtype.name}" if isinstance(arg, np.generic) else type(arg).__name__
            raise DTypeError(f"{where}: expected a NumPy scalar of dtype {element[0][0]}, got {got}")
        raw = np.asarray(arg).tobytes()
        return (ctypes.c_char * len(raw)).from_buffer_copy(raw)


def _dims(value, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(int(v) for v in value)
    if not 1 <= len(dims) <= 3 or min(dims) < 0:
        raise InputError(f"{what} must be 1 to 3 non-negative ints, got {value!r}")
    return dims + (1,) * (3 - len(dims))


def _release(lib, lock) -> None:
    with lock:
        lib.cuemu_release_fibers()
