"""Launchers: the only device-specific code of the kernel runtime, driven by `KernelRuntime`.

Each allocates, uploads, copies, launches, captures and replays for one device: `EmulatorLauncher`
(NumPy buffers, kernels run by the emulator) and `CupyLauncher` (CuPy buffers, NVRTC cubins).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import warnings

import numpy as np

from luminal.errors import DeviceError
from luminal.hlir.dtypes import is_bfloat16
from luminal.kernels.cublas import cupy_gemm, standin_gemm


class EmulatorLauncher:
    """Buffers are NumPy arrays; kernels run on the CPU through the emulation header. An upload
    copies, as onto a device. Launches are synchronous, so events and streams are no-ops."""

    weights_key = "cuda-emulator"
    resident = False  # takes no device arrays: everything is host memory
    # extern steps it runs: none by default (the generated MatMul is what the emulator verifies);
    # LUMINAL_EMULATOR_EXTERNS=gemm runs GEMMs through the cuBLAS stand-in (cublas.standin_gemm)

    def __init__(self, source: str, *, schedule: int | None = None, binaries=None):
        from luminal.kernels.emulator import build

        self.module = build(source)
        self.xp = np
        self.schedule = schedule  # thread order within a block: 0 forward, 1 reverse, 2 shuffled
        self._capturing = threading.local()  # .tape while this thread captures
        self.externs = frozenset(os.environ.get("LUMINAL_EMULATOR_EXTERNS", "").split(",")) & {"gemm"}

    def storage(self, dtype: np.dtype) -> np.dtype:
        return np.dtype(dtype)

    def upload(self, array: np.ndarray):
        return np.array(array, order="C", copy=True)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def prepare(self, names) -> None:
        pass

    def launch(self, name, grid, block, args):
        tape = getattr(self._capturing, "tape", None)
        if tape is not None:  # capturing: recorded, not run (as in CUDA stream capture)
            tape.append((name, grid, block, tuple(args)))
            return
        self.module.launch(name, grid=(grid,), block=(block,), args=args, schedule=self.schedule)

    def extern(self, calls, args) -> None:
        """The "gemm" extern step on the cuBLAS stand-in: args are out, then the kernel's inputs."""
        tape = getattr(self._capturing, "tape", None)
        if tape is not None:
            tape.append((None, calls, None, tuple(args)))
            return
        for call in calls:
            standin_gemm(call, {-1: args[0], **{i: a for i, a in enumerate(args[1:])}})

    def copy_into(self, dst, src) -> None:
        np.copyto(dst, src)

    def copy(self, buf):
        return buf.copy()

    def download(self, buf) -> np.ndarray:
        return buf

    def capture(self, record):
        """Run `record()` with this thread's launches going to a tape: the emulator's CUDA graph."""
        self._capturing.tape = []
        try:
            record()
            return self._capturing.tape
        finally:
            self._capturing.tape = None

    def replay(self, tape) -> None:
        for name, grid, block, args in tape:
            if name is None:  # an extern step: grid holds its call
                self.extern(grid, args)
                continue
            self.module.launch(name, grid=(grid,), block=(block,), args=args, schedule=self.schedule)

    def read_flag(self, err) -> int:
        return int(err[0])

    def clear_flag(self, err) -> None:
        err[0] = 0

    def merge_flag(self, dst, src) -> None:
        np.bitwise_or(dst, src, out=dst)

    def on_stream(self):
        return contextlib.nullcontext()

    def use_stream(self, torch_caller: bool) -> None:
        pass

    def record(self):
        return None

    def wait(self, event) -> None:
        pass

    def synchronize(self) -> None:
        pass


def _cubin_file(cubin: bytes) -> str:
    """A cubin on disk (content-addressed in the cache), for `cupy.RawModule(path=...)`."""
    from luminal.kernels.cache import in_cache, prune, touch, write_atomic

    def written(directory):  # a folder that cannot be written: the private one (`in_cache`)
        path = directory / f"{hashlib.sha1(cubin).hexdigest()}.cubin"
        if not touch(path):  # touched: safe from pruning for a while
            write_atomic(path, cubin)
            prune(directory)
        return path

    return str(in_cache("cubin", written))


class CupyLauncher:
    """CuPy buffers on the current device; kernels compiled by NVRTC (or prebuilt), loaded as a cubin.
    Work goes on `self.stream`, the calling thread's (the caller's stream); graphs are captured on a
    private non-blocking stream (the legacy default stream cannot capture)."""

    resident = True  # takes CuPy arrays and CUDA torch tensors as they are
    # MatMuls go to cuBLAS (the plan's "gemm" extern step); LUMINAL_CUBLAS=0 keeps the generated kernels
    externs = frozenset() if os.environ.get("LUMINAL_CUBLAS", "1") == "0" else frozenset({"gemm"})

    def __init__(self, source: str, *, schedule: int | None = None, binaries: dict[str, bytes] | None = None):
        try:
            import cupy
        except ImportError:
            raise DeviceError("device 'cuda' needs CuPy: pip install 'luminal[cuda]' (cupy-cuda13x)") from None
        self.xp = cupy
        device = cupy.cuda.Device()
        arch = "sm_" + "".join(map(str, device.compute_capability))
        cubin = (binaries or {}).get(arch)
        if cubin is not None:  # built ahead of time (a saved model's kernels.sm_90.cubin): no NVRTC here
            self.built = f"cubin {arch}"
        else:  # the same NVRTC wrapper and options as CI; cached in memory and on disk
            from luminal.kernels.nvrtc import compile_cuda

            cubin = compile_cuda(source, arch).binary
            self.built = f"nvrtc {arch}"
        self.module = cupy.RawModule(path=_cubin_file(cubin))
        self.weights_key = ("cuda", getattr(device, "id", 0))
        self.functions = {}
        self._local = threading.local()  # .stream: this thread's
        self._capture_stream = cupy.cuda.Stream(non_blocking=True)

    @property
    def stream(self):
        stream = getattr(self._local, "stream", None)
        return stream if stream is not None else self.xp.cuda.get_current_stream()

    @stream.setter
    def stream(self, value) -> None:
        self._local.stream = value

    def storage(self, dtype: np.dtype) -> np.dtype:
        """CuPy has no bfloat16: bf16 buffers are uint16 bits (the kernels take them as __nv_bfloat16)."""
        return np.dtype(np.uint16) if is_bfloat16(np.dtype(dtype)) else np.dtype(dtype)

    def upload(self, array):
        array = np.ascontiguousarray(array).reshape(np.shape(array))
        with self.stream:
            return self.xp.asarray(array.view(self.storage(array.dtype)))

    def empty(self, shape, dtype):
        with self.stream:
            return self.xp.empty(shape, self.storage(dtype))

    def function(self, name):
        fn = self.functions.get(name)
        if fn is None:
            fn = self.functions[name] = self.module.get_function(name)
        return fn

    def prepare(self, names) -> None:
        """Load the kernels before a capture (module loading is no stream operation)."""
        for name in names:
            self.function(name)

    def launch(self, name, grid, block, args):
        with self.stream:
            self.function(name)((grid,), (block,), tuple(args))

    def extern(self, calls, args) -> None:
        """The "gemm" extern step: cuBLAS calls on this thread's stream (captured in graphs)."""
        for call in calls:
            cupy_gemm(call, {-1: args[0], **{i: a for i, a in enumerate(args[1:])}}, self.stream)

    def copy_into(self, dst, src) -> None:
        with self.stream:
            if isinstance(src, np.ndarray):
                dst.set(src.view(dst.dtype), stream=self.stream)
            else:
                self.xp.copyto(dst, src.view(dst.dtype) if src.dtype != dst.dtype else src)

    def copy(self, buf):
        with self.stream:
            return buf.copy()

    def download(self, buf) -> np.ndarray:
        return self.xp.asnumpy(buf, stream=self.stream)

    def capture(self, record):
        """A CUDA graph of the launches `record()` issues (loaded kernels only: `prepare` first)."""
        cs = self._capture_stream
        cs.wait_event(self.stream.record())  # buffers written before the capture are ready
        caller, self.stream = self.stream, cs
        try:
            with cs:
                cs.begin_capture()  # CuPy's default mode is relaxed: other threads may keep working
                try:
                    record()
                finally:
                    graph = cs.end_capture()
        finally:
            self.stream = caller
        return graph

    def replay(self, graph) -> None:
        graph.launch(stream=self.stream)

    def read_flag(self, err) -> int:
        """Synchronises the caller's stream (used when the results go to the host anyway)."""
        return int(self.xp.asnumpy(err, stream=self.stream)[0])

    def clear_flag(self, err) -> None:
        with self.stream:
            err.fill(0)

    def merge_flag(self, dst, src) -> None:
        with self.stream:
            self.xp.bitwise_or(dst, src, out=dst)

    def on_stream(self):
        return self.stream

    def record(self):
        """An event after the work issued so far on this thread's stream."""
        return self.stream.record()

    def wait(self, event) -> None:
        if event is not None:
            self.stream.wait_event(event)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def use_stream(self, torch_caller: bool) -> None:
        """Issue this thread's work on the caller's current stream: torch's when it passed torch tensors."""
        cupy = self.xp
        if torch_caller:
            import torch

            ts = torch.cuda.current_stream()
            if hasattr(cupy.cuda.Stream, "from_external") and hasattr(ts, "__cuda_stream__"):
                self.stream = cupy.cuda.Stream.from_external(ts)
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    self.stream = cupy.cuda.ExternalStream(ts.cuda_stream, ts.device.index or 0)
        else:
            self.stream = cupy.cuda.get_current_stream()
