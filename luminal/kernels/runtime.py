"""Running a kernel plan on `cuda` (CuPy) or `cuda-emulator` (README: "GPU runtime", "CUDA graphs,
bounded", "Weights once").

- Per binding of the symbolic dims a `LaunchSequence` (grids, dims, argument slots, arena layout) is
  resolved once. Its first call runs eagerly, the second captures a graph over buffers of its own
  (CuPy stream capture, or the emulator's tape, so CI tests capture and replay), later calls copy
  the inputs into its staging buffers and replay.
- CuPy arrays and CUDA torch tensors come in by DLPack without copies, ordered on the caller's
  stream; a replay hands out copies of its outputs, since the next replay overwrites them.
- Threads: an eager call has its own arena and outputs; a graph's replays are serialised by its own
  lock (on CuPy the next replay's stream waits on the previous one's event, no host sync); streams,
  the capture tape and the error flag are per thread. An evicted graph's buffers go back to the
  pool only after its last replay's event.
- The sticky error flag (index out of range, Mod by zero) is read after each call returning host
  arrays (it synchronises anyway); device-resident calls never synchronise, so `synchronize()` or
  the thread's next host call reads it.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from luminal.errors import DeviceError, DivisionByZero, IndexOutOfRange
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Op, toposort
from luminal.hlir.verify import check_views
from luminal.kernels.arena import ArenaLayout, plan_arena
from luminal.kernels.plan import KernelPlan
from luminal.kernels.weights import DEVICE_WEIGHTS
from luminal.runtime.binding import bind_inputs, index_error
from luminal.runtime.protocol import Runtime
from luminal.runtime.torch_arrays import bf16_of_bits, bits_of, numpy_to_torch

GRAPH_CACHE_SIZE = 16  # captured bindings kept (least recently used dropped first); $LUMINAL_CUDA_GRAPHS_MAX
GRAPH_CACHE_MB = 2048  # MiB of buffers the captured graphs may own together; $LUMINAL_CUDA_GRAPH_MB
BINDINGS_KEPT = 256  # resolved launch sequences (and eager-run counts) kept per runtime, likewise


# --- what one binding of the symbolic dims resolves to ------------------------------------------
@dataclass
class Launch:
    name: str
    grid: int
    block: int
    args: tuple  # slots: ("w", i) weight, ("in", i) input, ("tmp", i) arena buffer, ("out", i), ("err",); or np.int64
    extern: object = None  # `cublas.CublasGemm`s: run by the launcher's extern step, not a kernel


@dataclass
class LaunchSequence:
    """Every launch of the plan for one binding, with grids, dims and the arena layout resolved."""

    key: tuple
    launches: list[Launch]
    input_shapes: list[tuple]
    output_shapes: list[tuple]
    tmp_shapes: list[tuple]
    layout: ArenaLayout
    eager: bool = False  # never captured into a graph


@dataclass
class CapturedGraph:
    """A binding's graph and the buffers it was captured over (they live as long as it does)."""

    graph: object  # cupy.cuda.Graph, or the emulator's tape
    staging: list  # input buffers the replay reads: callers' inputs are copied in
    outputs: list  # output buffers the replay writes: copied out to the caller
    arena: object
    err: object  # the graph's own error flag, merged into the caller's after each replay
    nbytes: int = 0  # device bytes it owns (staging, outputs, arena)
    replays: int = 0
    fence: list = field(default_factory=lambda: [None])  # [event after the last replay] (CuPy), else [None]
    lock: threading.Lock = field(default_factory=threading.Lock)  # one replay at a time


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value.strip() else default
    except ValueError:
        raise DeviceError(f"${name} must be an integer, got {value!r}") from None


@dataclass
class GraphCache:
    """Captured graphs by binding key, bounded in number and bytes (LRU), with counts of what happened."""

    capacity: int = field(default_factory=lambda: _env_int("LUMINAL_CUDA_GRAPHS_MAX", GRAPH_CACHE_SIZE))
    max_bytes: int = field(default_factory=lambda: _env_int("LUMINAL_CUDA_GRAPH_MB", GRAPH_CACHE_MB) << 20)
    entries: collections.OrderedDict = field(default_factory=collections.OrderedDict)
    seen: collections.OrderedDict = field(default_factory=collections.OrderedDict)  # key -> eager runs (bounded)
    captures: int = 0
    replays: int = 0
    eager: int = 0
    evictions: int = 0
    too_big: int = 0  # bindings not captured: their buffers alone exceed max_bytes

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries.values())

    def fits(self, nbytes: int) -> bool:
        return self.capacity > 0 and nbytes <= self.max_bytes

    def get(self, key) -> CapturedGraph | None:
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
        return entry

    def put(self, key, entry: CapturedGraph) -> None:
        self.entries[key] = entry
        self.captures += 1
        while len(self.entries) > 1 and (len(self.entries) > self.capacity or self.nbytes > self.max_bytes):
            self.entries.popitem(last=False)
            self.evictions += 1

    def stats(self) -> dict:
        return {"bindings": len(self.seen), "captured": len(self.entries), "captures": self.captures,
                "replays": self.replays, "eager": self.eager, "evictions": self.evictions, "too_big": self.too_big,
                "bytes": self.nbytes, "capacity": self.capacity, "max_bytes": self.max_bytes}

    def held(self) -> list[dict]:
        """What it holds, least recently used first: binding, bytes owned, replays."""
        return [{"binding": dict(k), "bytes": e.nbytes, "replays": e.replays} for k, e in self.entries.items()]


class _DeviceArray:
    """Shape and dtype of a device array, for `bind_inputs` (which must not touch device data)."""

    def __init__(self, array, dtype):
        self.array, self.shape, self.ndim, self.dtype = array, tuple(array.shape), array.ndim, np.dtype(dtype)


def _is_torch(value) -> bool:
    return type(value).__module__.split(".")[0] == "torch"


def _is_device_array(value, xp=None) -> bool:
    """A CuPy array (of the launcher's `xp`) or a CUDA torch tensor, checked without importing either."""
    if _is_torch(value):
        return getattr(getattr(value, "device", None), "type", None) == "cuda"
    if xp is not None and xp is not np and isinstance(value, xp.ndarray):
        return True
    return type(value).__module__.split(".")[0] == "cupy"


def _proper_bools(arr):
    """A bool array with every byte 0 or 1 (`binding.proper_bools`): always a copy, since testing first would sync."""
    return arr.view(np.uint8) != 0 if arr.dtype == np.bool_ else arr


def _release_after(fence: list, _buffers) -> None:
    """Wait for the event in `fence` (a captured graph's last replay); `_buffers` die after."""
    if fence[0] is not None:
        fence[0].synchronize()


# --- the runtime -------------------------------------------------------------------------------
class KernelRuntime(Runtime):
    """Runs a kernel plan on `device` (a `luminal.devices.Device` with a launcher; its precision is
    read per call). `graphs`: capture a graph per binding (`LUMINAL_CUDA_GRAPHS=0`: off).
    `binaries`: {"sm_90": cubin} of exactly `plan.source`, used instead of NVRTC on that arch."""

    def __init__(self, outputs, device, schedule: int | None = None, graphs: bool | None = None,
                 plan: KernelPlan | None = None, binaries: dict[str, bytes] | None = None):
        if getattr(device, "launcher", None) is None:
            raise DeviceError(f"KernelRuntime runs on a device that launches kernels (luminal.devices), not {device!r}")
        self.plan = plan or KernelPlan.build(outputs)
        self._views = [n for n in toposort(self.plan.outputs) if n.op is Op.VIEW]  # checked per binding
        self.device = device
        self.launcher = device.launcher(self.plan.source, schedule=schedule, binaries=binaries)
        self.graphs_enabled = graphs if graphs is not None else os.environ.get("LUMINAL_CUDA_GRAPHS", "1") != "0"
        self.inputs = self.plan.inputs
        self._weights = [DEVICE_WEIGHTS.get(self.launcher, w.arg) for w in self.plan.weights]
        self.launcher.synchronize()  # uploads done before any other stream reads them
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
        self.sequences: collections.OrderedDict[tuple, LaunchSequence] = collections.OrderedDict()  # bounded LRU
        self._sequences_lock = threading.Lock()
        self.graph_cache = GraphCache()
        self.arena_bytes = 0  # the largest arena allocated
        self._lock = threading.Lock()  # the graph cache and captures
        self._local = threading.local()  # .err: this thread's sticky error flag
        read = {id(b) for k in self.plan.launches for b in k.inputs}
        self._unread = {i for i, n in enumerate(self.inputs) if id(n) not in read}  # dim carriers: never uploaded
        self.last_bindings: dict[str, int] | None = None  # the latest call's (roofline() reads it)

    # -- binding -> launch sequence (cached) --
    def sequence(self, bindings: dict[str, int]) -> LaunchSequence:
        key = tuple(sorted(bindings.items()))
        widen = self.device.precision == "float64"
        if widen:  # other launches (widened GEMMs): their own sequence and graph ("@": no symbol's name)
            key += (("@precision", "float64"),)
        with self._sequences_lock:
            seq = self.sequences.get(key)
            if seq is not None:
                self.sequences.move_to_end(key)
                return seq
        seq = self._resolve(key, bindings, widen)  # two threads may resolve one key: equal results, either is kept
        with self._sequences_lock:
            seq = self.sequences.setdefault(key, seq)
            while len(self.sequences) > BINDINGS_KEPT:
                self.sequences.popitem(last=False)
        return seq

    def _resolve(self, key, bindings, widen: bool = False) -> LaunchSequence:
        """`widen` (precision "float64"): an f32 GEMM runs as a widened extern step where it can,
        else its kernel's build accumulating in double (`KernelSpec.wide`)."""
        check_views(self._views, bindings)  # kernels read views unchecked: a bad file stops here
        precision = "float64" if widen else "float32"
        def shape(n):
            return tuple(int(sym.evaluate(d, bindings)) for d in n.shape)

        tmp_shapes = [shape(n) for n in self.intermediates]
        sizes = [int(np.prod(s, dtype=np.int64)) * n.dtype.itemsize for s, n in zip(tmp_shapes, self.intermediates)]
        out_shapes = [shape(n) for n in self.plan.outputs]
        all_shapes = {id(n): s for n, s in zip(self.intermediates, tmp_shapes)}
        all_shapes.update({id(n): s for n, s in zip(self.plan.outputs, out_shapes)})
        launches = []
        for k in self.plan.launches:
            k = k.pick(bindings)  # the variant for this binding (index width, GEMV)
            grid = int(sym.evaluate(k.grid, bindings))
            if grid <= 0 or int(np.prod(all_shapes[id(k.output)], dtype=np.int64)) == 0:
                continue
            args = [self._slot[id(k.output)], *(self._slot[id(b)] for b in k.inputs)]
            call = None
            if k.extern and k.extern.kind in self.launcher.externs:
                call = k.extern.bind(bindings, precision=precision)
            elif k.extern and widen:  # the launcher's kernel runs it unless it widens (an f32 GEMM)
                call = k.extern.bind(bindings, precision=precision)
                call = call if call and call[0].widened else None
            if call is not None:  # the plan's extern step (cuBLAS), args: out, inputs
                launches.append(Launch(k.extern.kind, 0, 0, tuple(args), call))
                continue
            if widen and k.wide is not None:  # no GEMM call for this layout: the kernel accumulating in double
                k = k.wide
                grid = int(sym.evaluate(k.grid, bindings))
            if k.uses_error_flag:
                args.append(("err",))
            args += [np.int64(bindings[s]) for s in k.symbols]
            launches.append(Launch(k.name, grid, k.block, tuple(args)))
        # a widened GEMM allocates its f64 copies from CuPy's pool: a captured graph would keep
        # writing memory the pool hands out again, so such a sequence runs eagerly
        eager = self.launcher.resident and any(ln.extern is not None and ln.extern[0].widened for ln in launches)
        return LaunchSequence(key, launches, [shape(n) for n in self.inputs], out_shapes, tmp_shapes,
                              plan_arena(sizes, self.intervals), eager)

    @property
    def layouts(self) -> dict[tuple, tuple]:
        """binding key -> (arena layout, intermediate shapes)."""
        return {k: (s.layout, s.tmp_shapes) for k, s in self.sequences.items()}

    # -- buffers --
    def _new_arena(self, seq: LaunchSequence):
        """An arena of the call's own (on CuPy from its stream-ordered memory pool)."""
        need = max(seq.layout.total, 1)
        self.arena_bytes = max(self.arena_bytes, need)
        return self.launcher.empty((need,), np.uint8)

    def _tmp_views(self, seq: LaunchSequence, arena) -> list:
        views = []
        for n, offset, shape in zip(self.intermediates, seq.layout.offsets, seq.tmp_shapes):
            nbytes = int(np.prod(shape, dtype=np.int64)) * n.dtype.itemsize
            views.append(arena[offset: offset + nbytes].view(self.launcher.storage(n.dtype.numpy)).reshape(shape))
        return views

    def _issue(self, seq: LaunchSequence, ins: list, outs: list, tmps: list, err, between=None) -> None:
        """Issue every launch of `seq`; `between(i)` (profiling) is called before launch i and at the end."""
        table = {"w": self._weights, "in": ins, "out": outs, "tmp": tmps}
        for i, ln in enumerate(seq.launches):
            if between is not None:
                between(i)
            args = [a if isinstance(a, np.generic) else (err if a[0] == "err" else table[a[0]][a[1]])
                    for a in ln.args]
            if ln.extern is not None:
                self.launcher.extern(ln.extern, args)
            else:
                self.launcher.launch(ln.name, ln.grid, ln.block, args)
        if between is not None:
            between(len(seq.launches))

    def _new_outputs(self, seq: LaunchSequence) -> list:
        return [self.launcher.empty(s, n.dtype.numpy) for n, s in zip(self.plan.outputs, seq.output_shapes)]

    def _new_flag(self):
        err = self.launcher.empty((1,), np.int32)
        self.launcher.clear_flag(err)
        return err

    def _flag(self):
        """This thread's sticky error flag."""
        err = getattr(self._local, "err", None)
        if err is None:
            err = self._local.err = self._new_flag()
        return err

    # -- calls --
    def profile(self, feeds: dict, repeats: int = 3) -> list[dict]:
        """Each launch of the binding of `feeds` timed eagerly, best of `repeats` (CUDA events on
        CuPy, the clock on the emulator): rows {`kernel`, `seconds`} in launch order."""
        ins, bindings, device_io, _ = self._bind(feeds)
        seq = self.sequence(bindings)
        self.last_bindings = bindings
        launcher = self.launcher
        ins = [None if i in self._unread else (launcher.upload(a) if self._on_host(a) else a) for i, a in enumerate(ins)]
        outs, tmps, err = self._new_outputs(seq), self._tmp_views(seq, self._new_arena(seq)), self._new_flag()
        events = getattr(getattr(launcher.xp, "cuda", None), "Event", None) if launcher.resident else None
        best, marks = [float("inf")] * len(seq.launches), []

        def mark(_i):
            marks.append(launcher.stream.record(events()) if events is not None else time.perf_counter())

        for _ in range(repeats):
            marks.clear()
            if events is not None:  # the GPU busy while Python enqueues: spans time kernels, not issue rate
                busy = launcher.xp.ones((4096, 4096), np.float32)
                with launcher.stream:
                    for _ in range(1 + len(seq.launches) // 100):
                        busy @ busy
            self._issue(seq, ins, outs, tmps, err, between=mark)
            launcher.synchronize()
            if events is not None:
                spans = [launcher.xp.cuda.get_elapsed_time(a, b) / 1e3 for a, b in zip(marks, marks[1:])]
            else:
                spans = [b - a for a, b in zip(marks, marks[1:])]
            best = [min(x, y) for x, y in zip(best, spans)]
        self._check_flag(err, bindings)
        return [{"kernel": ln.name, "seconds": t} for ln, t in zip(seq.launches, best)]

    def _bind(self, feeds: dict):
        """(input arrays in `self.inputs` order, bindings, device-resident, torch caller) for `feeds`."""
        torch_io = any(_is_torch(v) for v in feeds.values())
        # device-resident exchange: CuPy arrays or CUDA torch tensors on "cuda"; on the emulator,
        # and for host data, torch tensors are NumPy arrays (`.numpy()`, no copy)
        device_io = self.launcher.resident and any(_is_device_array(v, self.launcher.xp) for v in feeds.values())
        self.launcher.use_stream(torch_io)
        if device_io:
            with self.launcher.on_stream():  # DLPack producers order their work before this stream
                feeds = {k: self._to_device(v) for k, v in feeds.items()}
            for n in self.inputs:  # CuPy has no bfloat16: uint16 arrays are taken as bf16 bits
                v = feeds.get(n.arg)
                if isinstance(v, _DeviceArray) and n.dtype is DType.BF16 and v.dtype == np.uint16:
                    v.dtype = np.dtype(DType.BF16.numpy)
        arrays, bindings = bind_inputs(self.inputs, feeds, convert=not device_io)
        ins = [arrays[n.arg] for n in self.inputs]
        return [a.array if isinstance(a, _DeviceArray) else a for a in ins], bindings, device_io, torch_io

    def __call__(self, feeds: dict):
        ins, bindings, device_io, torch_io = self._bind(feeds)
        results = self.run(ins, bindings, host=not device_io)
        if torch_io:
            with self.launcher.on_stream():  # torch reads them on this very stream: no extra sync
                return [self._to_torch(r) for r in results]
        return results

    def run(self, ins: list, bindings: dict, host: bool = True) -> list:
        """Run on `ins` (one array per input, in `self.inputs` order) under `bindings`."""
        seq = self.sequence(bindings)
        self.last_bindings = bindings
        ins = [None if i in self._unread else a for i, a in enumerate(ins)]  # read by no kernel: not uploaded
        if not host:
            ins = [a if a is None or isinstance(a, self.launcher.xp.ndarray) else self.launcher.upload(a) for a in ins]
        err = self._flag()
        entry = self._graph_for(seq)
        if entry is not None:
            outs = self._replay(entry, ins, err)
        else:
            dev_ins = [self.launcher.upload(a) if self._on_host(a) else a for a in ins]
            outs = self._new_outputs(seq)
            self._issue(seq, dev_ins, outs, self._tmp_views(seq, self._new_arena(seq)), err)
        if host:
            self._check_flag(err, bindings)
            return [self._to_host(o, n) for o, n in zip(outs, self.plan.outputs)]
        return outs  # device arrays: bf16 stays as uint16 bits on CuPy (torch callers get bfloat16)

    def _on_host(self, a) -> bool:
        """Whether `a` is host data the kernels cannot read in place (a NumPy array on "cuda")."""
        xp = self.launcher.xp
        return isinstance(a, np.ndarray) and (xp is np or not isinstance(a, xp.ndarray))

    def _graph_for(self, seq: LaunchSequence) -> CapturedGraph | None:
        """The binding's captured graph (captured at its second call), or None: run eagerly."""
        cache = self.graph_cache
        with self._lock:
            graphs = self.graphs_enabled and not seq.eager
            entry = cache.get(seq.key) if graphs else None
            if entry is None and graphs and cache.seen.get(seq.key, 0) >= 1 and seq.launches:
                if cache.fits(self._graph_bytes(seq)):
                    entry = self._capture(seq)
                else:
                    cache.too_big += 1
            if entry is None:
                cache.seen[seq.key] = cache.seen.pop(seq.key, 0) + 1
                while len(cache.seen) > BINDINGS_KEPT:
                    cache.seen.popitem(last=False)
                cache.eager += 1
            else:
                entry.replays += 1
                cache.replays += 1
            return entry

    def _graph_bytes(self, seq: LaunchSequence) -> int:
        """Device bytes a captured graph of `seq` owns: staging inputs, outputs, arena."""
        shapes = [(s, n) for i, (n, s) in enumerate(zip(self.inputs, seq.input_shapes)) if i not in self._unread]
        shapes += list(zip(seq.output_shapes, self.plan.outputs))
        return max(seq.layout.total, 1) + sum(int(np.prod(s, dtype=np.int64)) * n.dtype.itemsize for s, n in shapes)

    def _capture(self, seq: LaunchSequence) -> CapturedGraph:
        staging = [None if i in self._unread else self.launcher.empty(s, n.dtype.numpy)
                   for i, (n, s) in enumerate(zip(self.inputs, seq.input_shapes))]
        outputs = self._new_outputs(seq)
        arena = self._new_arena(seq)  # owned by the graph: eager calls never touch it
        tmps, err = self._tmp_views(seq, arena), self._new_flag()
        self.launcher.prepare({ln.name for ln in seq.launches if ln.extern is None})
        graph = self.launcher.capture(lambda: self._issue(seq, staging, outputs, tmps, err))
        entry = CapturedGraph(graph, staging, outputs, arena, err, self._graph_bytes(seq))
        # an evicted graph's buffers return to the pool only once its last replay (any stream) is over
        weakref.finalize(entry, _release_after, entry.fence, (graph, staging, outputs, arena, err))
        self.graph_cache.put(seq.key, entry)
        return entry

    def _replay(self, entry: CapturedGraph, ins: list, err) -> list:
        """Replay `entry` on `ins`: the caller's own output copies; its flag merged into `err`."""
        launcher = self.launcher
        with entry.lock:
            launcher.wait(entry.fence[0])  # the previous replay (maybe another thread's stream) is over
            for buf, a in zip(entry.staging, ins):
                if buf is not None:
                    launcher.copy_into(buf, a)
            launcher.replay(entry.graph)
            outs = [launcher.copy(o) for o in entry.outputs]  # the next replay overwrites entry.outputs
            launcher.merge_flag(err, entry.err)
            launcher.clear_flag(entry.err)
            entry.fence[0] = launcher.record()
        return outs

    def synchronize(self) -> None:
        """Wait for this thread's work on the caller's stream; raise if a kernel flagged an index."""
        self.launcher.synchronize()
        self._check_flag(self._flag())

    def _check_flag(self, err, bindings: dict | None = None) -> None:
        flag = self.launcher.read_flag(err)
        if flag:
            self.launcher.clear_flag(err)
            if flag & 2 and not flag & 1:  # 2: an integer Mod by zero (cstyle.lum_imod)
                raise DivisionByZero("integer division or remainder by zero (flagged by a kernel)")
            if bindings is not None:  # the binding known: an empty indexed axis is named
                raise index_error(self.plan.outputs, bindings, "a kernel")
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
            return _DeviceArray(arr.view(np.uint16) if bf16 else _proper_bools(arr), DType.BF16.numpy if bf16 else arr.dtype)
        if isinstance(value, cupy.ndarray):
            return _DeviceArray(_proper_bools(cupy.ascontiguousarray(value).reshape(value.shape)), value.dtype)
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

    def report_lines(self) -> list[str]:
        """`report()`'s lines on this runtime: device weights and the CUDA-graph cache."""
        c = self.graph_cache
        lines = [f"  {self.device.name}: {len(self.plan.weights)} weights on the device "
                 f"({sum(int(w.nbytes) for w in self._weights) / 2**20:.1f} MiB, shared by every graph using them); "
                 f"largest arena {self.arena_bytes / 2**20:.2f} MiB"]
        if self.device.precision == "float64":
            lines.append("  precision float64: f32 MatMuls as widened GEMMs (f64 copies, a DGEMM, rounded once; "
                         "cuBLAS has no f32 GEMM accumulating in double)" + (", run eagerly" if self.launcher.resident else ""))
        if not self.graphs_enabled:
            return lines + ["  CUDA graphs: off (LUMINAL_CUDA_GRAPHS=0)"]
        lines.append(f"  CUDA graphs: {len(c.entries)} of at most {c.capacity} held, {c.nbytes / 2**20:.2f} MiB of at most "
                     f"{c.max_bytes / 2**20:.0f} MiB (LUMINAL_CUDA_GRAPHS_MAX, LUMINAL_CUDA_GRAPH_MB); "
                     f"{c.captures} captures, {c.replays} replays, {c.eager} eager calls, {c.evictions} evicted, "
                     f"{c.too_big} too big")
        lines += [f"    {h['binding'] or 'static shapes'}: {h['bytes'] / 2**20:.2f} MiB, {h['replays']} replays"
                  for h in c.held()[-8:]]
        return lines

    def stats(self) -> dict:
        return {"device": self.device.name, "kernels": len({k.name for k in self.plan.launches}),
                "launches": len(self.plan.launches), "arena_bytes": int(self.arena_bytes),
                **self.graph_cache.stats()}
