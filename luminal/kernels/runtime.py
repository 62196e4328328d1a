"""Running a kernel plan: the CPU emulator (`cuda-emulator`) or CuPy (`cuda`).

Everything that does not need a GPU is device-independent and runs in CI on the emulator:

- **binding** — the symbolic dims are bound from the inputs' shapes; per distinct binding the
  runtime builds (once, cached) a `LaunchSequence`: every launch's grid and `long long` dims
  resolved, its arguments as slots (weight, input, arena buffer, output, error flag), and the
  arena layout of the intermediates (`arena.plan_arena`, liveness-planned).
- **graphs** — `GraphCache`, keyed by the binding. A binding's first call runs eagerly (a
  warm-up that loads the kernels); its second call captures the launch sequence over buffers
  fixed for that binding (staging inputs, the arena, outputs) and replays it; later calls copy
  the inputs into the staging buffers and replay. On CuPy the capture is
  `stream.begin_capture()/end_capture()` and a replay is `graph.launch(stream)`; on the
  emulator the capture records the same launches on a tape that a replay runs, so tests can
  assert one capture per binding and replays afterwards.
- **exchange** — NumPy in, NumPy out. On `cuda`, CuPy arrays and CUDA `torch.Tensor`s are
  taken by DLPack without copies and results come back the same way (a torch caller gets torch
  tensors, `torch.from_dlpack`), ordered on the caller's stream (torch's current stream).
  torch is imported only when the caller passed torch tensors. A binding's eager call reads the
  inputs in place; a replay copies them device-to-device into the graph's staging buffers and
  hands out copies of its outputs (the next replay overwrites the graph's own).
- **kernels** — NVRTC through CuPy (cached on disk by CuPy), or, for a saved model that carries
  a cubin for this GPU's arch (`save(archs=("sm_90",))`), that cubin: nothing is compiled.

Weights are uploaded once. Gather/scatter kernels set a sticky error flag for an index out of
range; it is read after each call that returns host arrays (that call synchronises anyway);
device-resident calls never synchronise, so their flag is read by `synchronize()` or by the next
call that returns host arrays.
"""

from __future__ import annotations

import collections
import hashlib
import os
import warnings
from dataclasses import dataclass, field

import numpy as np

from luminal.errors import IndexOutOfRange, LuminalError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.kernels.arena import ArenaLayout, plan_arena
from luminal.kernels.plan import KernelPlan
from luminal.runtime.binding import bind_inputs
from luminal.runtime.torch_arrays import bf16_of_bits, bits_of, numpy_to_torch

GRAPH_CACHE_SIZE = 16  # captured bindings kept (least recently used dropped first)


# --- launchers: the only device-specific code ---------------------------------------------------
class EmulatorLauncher:
    """Buffers are NumPy arrays; kernels run on the CPU through the emulation header."""

    device = "cuda-emulator"

    def __init__(self, source: str, schedule: int | None = None):
        from luminal.kernels.emulator import build

        self.module = build(source)
        self.xp = np
        self.schedule = schedule  # thread order within a block: 0 forward, 1 reverse, 2 shuffled
        self._tape: list | None = None

    def storage(self, dtype: np.dtype) -> np.dtype:
        return np.dtype(dtype)

    def upload(self, array: np.ndarray):
        return np.ascontiguousarray(array).reshape(np.shape(array))  # ascontiguousarray makes 0-d 1-d

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def launch(self, name, grid, block, args):
        if self._tape is not None:  # capturing: recorded, not run (as in CUDA stream capture)
            self._tape.append((name, grid, block, tuple(args)))
            return
        self.module.launch(name, grid=(grid,), block=(block,), args=args, schedule=self.schedule)

    def copy_into(self, dst, src) -> None:
        np.copyto(dst, src)

    def download(self, buf) -> np.ndarray:
        return buf

    def capture(self, record):
        """Run `record()` with launches going to a tape: the emulator's CUDA graph."""
        self._tape = []
        try:
            record()
            return self._tape
        finally:
            self._tape = None

    def replay(self, tape) -> None:
        for name, grid, block, args in tape:
            self.module.launch(name, grid=(grid,), block=(block,), args=args, schedule=self.schedule)

    def read_flag(self, err) -> int:
        return int(err[0])

    def clear_flag(self, err) -> None:
        err[0] = 0


class CupyLauncher:
    """Buffers are CuPy arrays on the current device; kernels compiled by NVRTC through CuPy.

    Work is issued on `self.stream`, which `KernelRuntime` points at the caller's stream before
    each call; CUDA graphs are captured on a private non-blocking stream (capture is not allowed
    on the legacy default stream) and launched on the caller's stream."""

    device = "cuda"

    def __init__(self, source: str, binaries: dict[str, bytes] | None = None):
        try:
            import cupy
        except ImportError:
            raise LuminalError("device 'cuda' needs CuPy: pip install 'luminal[cuda]' (cupy-cuda13x)") from None
        self.xp = cupy
        arch = "sm_" + "".join(map(str, cupy.cuda.Device().compute_capability))
        cubin = (binaries or {}).get(arch)
        if cubin is not None:  # built ahead of time (a saved model's kernels.sm_90.cubin): no NVRTC here
            from luminal.kernels.cache import cache_dir, write_atomic

            path = cache_dir("cubin") / f"{hashlib.sha1(cubin).hexdigest()}.cubin"
            if not path.exists():
                write_atomic(path, cubin)
            self.module = cupy.RawModule(path=str(path))
            self.built = f"cubin {arch}"
        else:
            # CuPy adds -ftz=true and the device's -arch itself; compiled once, cached on disk
            # under ~/.cupy/kernel_cache by source and options
            self.module = cupy.RawModule(code=source, options=("-std=c++17", "--device-as-default-execution-space"))
            self.built = f"nvrtc {arch}"
        self.functions = {}
        self.stream = cupy.cuda.get_current_stream()
        self._capture_stream = cupy.cuda.Stream(non_blocking=True)

    def storage(self, dtype: np.dtype) -> np.dtype:
        """CuPy has no bfloat16: bf16 buffers are uint16 bits (the kernels take them as __nv_bfloat16)."""
        return np.dtype(np.uint16) if np.dtype(dtype) == DType.BF16.numpy else np.dtype(dtype)

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

    def launch(self, name, grid, block, args):
        with self.stream:
            self.function(name)((grid,), (block,), tuple(args))

    def copy_into(self, dst, src) -> None:
        with self.stream:
            if isinstance(src, np.ndarray):
                dst.set(src.view(dst.dtype), stream=self.stream)
            else:
                self.xp.copyto(dst, src.view(dst.dtype) if src.dtype != dst.dtype else src)

    def download(self, buf) -> np.ndarray:
        return self.xp.asnumpy(buf, stream=self.stream)

    def capture(self, record):
        """A CUDA graph of the launches `record()` issues (loaded kernels only: run it eagerly once first)."""
        cs = self._capture_stream
        cs.wait_event(self.stream.record())  # buffers written before the capture are ready
        caller, self.stream = self.stream, cs
        try:
            with cs:
                cs.begin_capture()
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

    def use_stream(self, torch_caller: bool) -> None:
        """Issue work on the caller's current stream: torch's when it passed torch tensors."""
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


# --- what one binding of the symbolic dims resolves to ------------------------------------------
@dataclass
class Launch:
    name: str
    grid: int
    block: int
    args: tuple  # slots: ("w", i) weight, ("in", i) input, ("tmp", i) arena buffer, ("out", i), ("err",); or np.int64


@dataclass
class LaunchSequence:
    """Every launch of the plan for one binding, with grids, dims and the arena layout resolved."""

    key: tuple
    launches: list[Launch]
    input_shapes: list[tuple]
    output_shapes: list[tuple]
    tmp_shapes: list[tuple]
    layout: ArenaLayout


@dataclass
class CapturedGraph:
    """A binding's graph and the buffers it was captured over (they live as long as it does)."""

    graph: object  # cupy.cuda.Graph, or the emulator's tape
    staging: list  # input buffers the replay reads: callers' inputs are copied in
    outputs: list  # output buffers the replay writes: copied out to the caller
    arena: object
    replays: int = 0


@dataclass
class GraphCache:
    """Captured graphs by binding key; counts what happened (tests and `stats()` read it)."""

    capacity: int = GRAPH_CACHE_SIZE
    entries: collections.OrderedDict = field(default_factory=collections.OrderedDict)
    seen: dict = field(default_factory=dict)  # key -> eager runs so far
    captures: int = 0
    replays: int = 0
    eager: int = 0
    evictions: int = 0

    def get(self, key) -> CapturedGraph | None:
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
        return entry

    def put(self, key, entry: CapturedGraph) -> None:
        self.entries[key] = entry
        self.captures += 1
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)
            self.evictions += 1

    def stats(self) -> dict:
        return {"bindings": len(self.seen), "captured": len(self.entries), "captures": self.captures,
                "replays": self.replays, "eager": self.eager, "evictions": self.evictions}


class _DeviceArray:
    """Shape and dtype of a device array, for `bind_inputs` (which must not touch device data)."""

    def __init__(self, array, dtype):
        self.array, self.shape, self.ndim, self.dtype = array, tuple(array.shape), array.ndim, np.dtype(dtype)


def _is_torch(value) -> bool:
    return type(value).__module__.split(".")[0] == "torch"


def _is_device_array(value) -> bool:
    """A CuPy array or a CUDA torch tensor (checked without importing either)."""
    if _is_torch(value):
        return getattr(getattr(value, "device", None), "type", None) == "cuda"
    return type(value).__module__.split(".")[0] == "cupy"


# --- the runtime -------------------------------------------------------------------------------
class KernelRuntime:
    """Runs a kernel plan. Intermediates live in one arena laid out by liveness (per binding of
    the symbolic dims, cached); outputs get buffers of their own; weights are uploaded once.

    `graphs`: capture a CUDA graph per binding (default on; `LUMINAL_CUDA_GRAPHS=0` turns it off).
    `binaries`: {"sm_90": cubin} of exactly `plan.source`, used instead of NVRTC when the arch matches.
    """

    def __init__(self, outputs, device: str, schedule: int | None = None, graphs: bool | None = None,
                 plan: KernelPlan | None = None, binaries: dict[str, bytes] | None = None):
        self.plan = plan or KernelPlan.build(outputs)
        self.device = device
        if device == "cuda":
            self.launcher = CupyLauncher(self.plan.source, binaries)
        elif device == "cuda-emulator":
            self.launcher = EmulatorLauncher(self.plan.source, schedule)
        else:
            raise LuminalError(f"KernelRuntime runs on 'cuda' or 'cuda-emulator', not {device!r}")
        self.graphs_enabled = graphs if graphs is not None else os.environ.get("LUMINAL_CUDA_GRAPHS", "1") != "0"
        self.inputs = self.plan.inputs
        self._weights = [self.launcher.upload(w.arg.array) for w in self.plan.weights]  # once
        slot = {id(w): ("w", i) for i, w in enumerate(self.plan.weights)}
        slot.update({id(n): ("in", i) for i, n in enumerate(self.inputs)})
        slot.update({id(n): ("out", i) for i, n in enumerate(self.plan.outputs)})
        self.intermediates, first = [], {}
        for i, k in enumerate(self.plan.launches):
            if id(k.output) not in slot:
                slot[id(k.output)] = ("tmp", len(self.intermediates))
                first[id(k.output)] = i
                self.intermediates.append(k.output)
        self._slot = slot
        self.intervals = [(first[id(n)], self.plan.last_use.get(id(n), first[id(n)])) for n in self.intermediates]
        self.sequences: dict[tuple, LaunchSequence] = {}
        self.graph_cache = GraphCache()
        self.arena = None
        self.err = self.launcher.empty((1,), np.int32)
        self.launcher.clear_flag(self.err)

    # -- binding -> launch sequence (cached) --
    def sequence(self, bindings: dict[str, int]) -> LaunchSequence:
        key = tuple(sorted(bindings.items()))
        seq = self.sequences.get(key)
        if seq is None:
            seq = self.sequences[key] = self._resolve(key, bindings)
        return seq

    def _resolve(self, key, bindings) -> LaunchSequence:
        def shape(n):
            return tuple(int(sym.evaluate(d, bindings)) for d in n.shape)

        tmp_shapes = [shape(n) for n in self.intermediates]
        sizes = [int(np.prod(s, dtype=np.int64)) * n.dtype.itemsize for s, n in zip(tmp_shapes, self.intermediates)]
        out_shapes = [shape(n) for n in self.plan.outputs]
        all_shapes = {id(n): s for n, s in zip(self.intermediates, tmp_shapes)}
        all_shapes.update({id(n): s for n, s in zip(self.plan.outputs, out_shapes)})
        launches = []
        for k in self.plan.launches:
            grid = int(sym.evaluate(k.grid, bindings))
            if grid <= 0 or int(np.prod(all_shapes[id(k.output)], dtype=np.int64)) == 0:
                continue
            args = [self._slot[id(k.output)], *(self._slot[id(b)] for b in k.inputs)]
            if k.uses_error_flag:
                args.append(("err",))
            args += [np.int64(bindings[s]) for s in k.symbols]
            launches.append(Launch(k.name, grid, k.block, tuple(args)))
        return LaunchSequence(key, launches, [shape(n) for n in self.inputs], out_shapes, tmp_shapes,
                              plan_arena(sizes, self.intervals))

    @property
    def layouts(self) -> dict[tuple, tuple]:
        """binding key -> (arena layout, intermediate shapes)."""
        return {k: (s.layout, s.tmp_shapes) for k, s in self.sequences.items()}

    # -- buffers --
    def _arena_for(self, seq: LaunchSequence, fresh: bool = False):
        need = max(seq.layout.total, 1)
        if fresh:
            return self.launcher.empty((need,), np.uint8)
        if self.arena is None or self.arena.size < need:
            self.arena = self.launcher.empty((need,), np.uint8)
        return self.arena

    def _tmp_views(self, seq: LaunchSequence, arena) -> list:
        views = []
        for n, offset, shape in zip(self.intermediates, seq.layout.offsets, seq.tmp_shapes):
            nbytes = int(np.prod(shape, dtype=np.int64)) * n.dtype.itemsize
            views.append(arena[offset: offset + nbytes].view(self.launcher.storage(n.dtype.numpy)).reshape(shape))
        return views

    def _issue(self, seq: LaunchSequence, ins: list, outs: list, tmps: list) -> None:
        table = {"w": self._weights, "in": ins, "out": outs, "tmp": tmps}
        for ln in seq.launches:
            args = [a if isinstance(a, np.generic) else (self.err if a[0] == "err" else table[a[0]][a[1]])
                    for a in ln.args]
            self.launcher.launch(ln.name, ln.grid, ln.block, args)

    def _new_outputs(self, seq: LaunchSequence) -> list:
        return [self.launcher.empty(s, n.dtype.numpy) for n, s in zip(self.plan.outputs, seq.output_shapes)]

    # -- calls --
    def __call__(self, feeds: dict):
        torch_io = any(_is_torch(v) for v in feeds.values())
        # device-resident exchange: CuPy arrays or CUDA torch tensors on "cuda"; on the emulator,
        # and for host data, torch tensors are NumPy arrays (`.numpy()`, no copy)
        device_io = self.device == "cuda" and any(_is_device_array(v) for v in feeds.values())
        if self.device == "cuda":
            self.launcher.use_stream(torch_io)
            if device_io:
                with self.launcher.stream:  # DLPack producers order their work before this stream
                    feeds = {k: self._to_device(v) for k, v in feeds.items()}
                for n in self.inputs:  # CuPy has no bfloat16: uint16 arrays are taken as bf16 bits
                    v = feeds.get(n.arg)
                    if isinstance(v, _DeviceArray) and n.dtype is DType.BF16 and v.dtype == np.uint16:
                        v.dtype = np.dtype(DType.BF16.numpy)
        arrays, bindings = bind_inputs(self.inputs, feeds, convert=not device_io)
        ins = [arrays[n.arg] for n in self.inputs]
        ins = [a.array if isinstance(a, _DeviceArray) else a for a in ins]
        results = self.run(ins, bindings, host=not device_io)
        if torch_io:
            if self.device == "cuda":
                with self.launcher.stream:  # torch reads them on this very stream: no extra sync
                    return [self._to_torch(r) for r in results]
            return [self._to_torch(r) for r in results]
        return results

    def run(self, ins: list, bindings: dict, host: bool = True) -> list:
        """Run on `ins` (one array per input, in `self.inputs` order) under `bindings`."""
        seq = self.sequence(bindings)
        if self.device == "cuda" and not host:
            ins = [a if isinstance(a, self.launcher.xp.ndarray) else self.launcher.upload(a) for a in ins]
        cache = self.graph_cache
        entry = cache.get(seq.key) if self.graphs_enabled else None
        if entry is None and self.graphs_enabled and cache.seen.get(seq.key, 0) >= 1 and seq.launches:
            entry = self._capture(seq)
        if entry is not None:
            for buf, a in zip(entry.staging, ins):
                self.launcher.copy_into(buf, a)
            self.launcher.replay(entry.graph)
            entry.replays += 1
            cache.replays += 1
            outs = [self._copy(o) for o in entry.outputs]  # the next replay overwrites entry.outputs
        else:
            cache.seen[seq.key] = cache.seen.get(seq.key, 0) + 1
            cache.eager += 1
            dev_ins = [self.launcher.upload(a) if isinstance(a, np.ndarray) else a for a in ins]
            outs = self._new_outputs(seq)
            self._issue(seq, dev_ins, outs, self._tmp_views(seq, self._arena_for(seq)))
        if host:
            self._check_flag()
            return [self._to_host(o, n) for o, n in zip(outs, self.plan.outputs)]
        return outs  # device arrays: bf16 stays as uint16 bits on CuPy (torch callers get bfloat16)

    def _capture(self, seq: LaunchSequence) -> CapturedGraph:
        staging = [self.launcher.empty(s, n.dtype.numpy) for n, s in zip(self.inputs, seq.input_shapes)]
        outputs = self._new_outputs(seq)
        arena = self._arena_for(seq, fresh=True)  # owned by the graph: eager calls never touch it
        tmps = self._tmp_views(seq, arena)
        graph = self.launcher.capture(lambda: self._issue(seq, staging, outputs, tmps))
        entry = CapturedGraph(graph, staging, outputs, arena)
        self.graph_cache.put(seq.key, entry)
        return entry

    def _copy(self, buf):
        if self.device == "cuda":
            with self.launcher.stream:
                return buf.copy()
        return buf.copy()

    def synchronize(self) -> None:
        """Wait for this runtime's work on the caller's stream; raise if a kernel flagged an index."""
        if self.device == "cuda":
            self.launcher.stream.synchronize()
        self._check_flag()

    def _check_flag(self) -> None:
        if self.launcher.read_flag(self.err):
            self.launcher.clear_flag(self.err)
            raise IndexOutOfRange("a Gather/Scatter index was out of range (flagged by a kernel)")

    # -- conversions --
    def _to_device(self, value):
        """A device array (no copy) for a CuPy array, a CUDA torch tensor (DLPack) or host data."""
        cupy = self.launcher.xp
        if _is_torch(value):
            t, bf16 = bits_of(value.detach())
            if t.device.type == "cuda":
                arr = cupy.from_dlpack(t.contiguous())
            else:
                arr = self.launcher.upload(t.numpy())
            return _DeviceArray(arr.view(np.uint16) if bf16 else arr, DType.BF16.numpy if bf16 else arr.dtype)
        if isinstance(value, cupy.ndarray):
            return _DeviceArray(cupy.ascontiguousarray(value).reshape(value.shape), value.dtype)
        return np.asarray(value)  # host data: uploaded by `run`

    def _to_host(self, buf, node) -> np.ndarray:
        host = np.array(self.launcher.download(buf))
        return host.view(node.dtype.numpy) if host.dtype != node.dtype.numpy else host

    def _to_torch(self, buf):
        import torch

        if isinstance(buf, np.ndarray):
            return numpy_to_torch(buf)
        if buf.dtype == np.uint16:  # bf16 bits on CuPy (luminal has no uint16 dtype)
            return bf16_of_bits(torch.from_dlpack(buf.view(np.int16)))
        return torch.from_dlpack(buf)

    def stats(self) -> dict:
        return {"device": self.device, "kernels": len({k.name for k in self.plan.launches}),
                "launches": len(self.plan.launches), "arena_bytes": 0 if self.arena is None else int(self.arena.size),
                **self.graph_cache.stats()}


def make_runtime(outputs, device: str) -> KernelRuntime:
    return KernelRuntime(outputs, device)
