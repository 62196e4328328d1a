"""`device="cpu"`: the graph's C built into one shared library (`build.py`), run by one native
call, `lum_run` over the launch table (`steps.launch_table`) with the GIL released, per call.

- Per binding of the symbolic dims the intermediates' arena layout is resolved once. The arena is
  the calling thread's, shared by every graph it runs (`_ARENA`): an arena holds nothing once its
  call returns, so a training step's forward and backward share one buffer; threads never share one.
- The error flag (1: an index out of range, 2: an integer Mod by zero) is the call's own.
- Large outputs are carved from blocks reused once their arrays are gone (`output_pool.py`).
- A call given donated inputs (a backward's saved activations) writes outputs and intermediates
  into them once they are read for the last time (`donation.py`): the driver takes a pointer per
  intermediate (`tmps`), in the arena or in a donor.
- OpenMP and the BLAS (`blas_libs.py`) get `threads()`; the precision is read per call (README: "The
  compiled CPU backend").
- `artifacts()` (the library's key and the launch table, plain JSON) lets a later process load the
  library without rendering C, checked against the library's kernels and the graph.
"""

from __future__ import annotations

import collections
import ctypes
import os
import threading
import warnings
import weakref
from pathlib import Path

import numpy as np

from luminal.errors import DivisionByZero, UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Op
from luminal.hlir.verify import check_views
from luminal.kernels.arena import plan_arena
from luminal.kernels.cpu import build, concat_in_place, donation, sgemm
from luminal.kernels.cpu.artifacts import ARTIFACTS_FORMAT, code_version, restore
from luminal.kernels.cpu.blas_libs import blas, threads
from luminal.kernels.cpu.choices import DEFAULT, Choices, conv_choice, conv_key, conv_path
from luminal.kernels.cpu.output_pool import POOL
from luminal.kernels.cpu.steps import direct_conv, im2col_scratch, launch_table, written_in_place
from luminal.precision import Arithmetic, C
from luminal.runtime.binding import bind_inputs, index_error, proper_bools
from luminal.runtime.protocol import Runtime
from luminal.threadflags import in_background

_ARENA = threading.local()  # per thread: the intermediates' buffer of whichever graph it runs (see above)
BINDINGS_KEPT = 256  # resolved arena layouts kept per runtime (least recently used dropped first)
_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def make(outputs, artifacts: dict | None = None, arithmetic: Arithmetic = C, choices: Choices = DEFAULT,
         tiered: bool = True, **_options):
    """The runtime of `device="cpu"`: compiled C, or the NumPy runtime (warned once) when the C
    cannot serve the graph. A library still to build builds in the background while the first
    call runs on the NumPy runtime (`tiered.py`; not with `tiered=False`: a search's candidates).
    `choices`: the program's strategy (`choices.py`). (`CpuRuntime` itself raises.)"""
    from luminal.kernels.cpu import tiered as tiered_builds
    from luminal.runtime import NumpyRuntime

    if build.compiler() is None:
        cc = os.environ.get("CC")
        what = f"the C compiler CC={cc!r} was not found" if cc else "no C compiler (cc or gcc) is on PATH"
        _warn_once("compiler", f'device="cpu": {what}; running the NumPy reference runtime instead '
                               "(apt-get install gcc for the compiled backend)")
        return NumpyRuntime(outputs, arithmetic=arithmetic)
    if artifacts is None and tiered and tiered_builds.enabled():
        reference = NumpyRuntime(outputs, arithmetic=arithmetic)
        def background():
            from luminal.kernels.cpu import program

            with in_background():  # its compilers at a lower priority than the first call
                program.prepare()  # the per-machine objects, beside the library
                return _compiled(outputs, None, reference, arithmetic, choices)

        return tiered_builds.TieredRuntime(outputs, background, reference, _warn_once)
    runtime, warning = _compiled(outputs, artifacts, None, arithmetic, choices)
    if warning is not None:
        _warn_once(*warning)
    return runtime


def _compiled(outputs, artifacts: dict | None, reference, arithmetic: Arithmetic,
              choices: Choices = DEFAULT) -> tuple[object, tuple[str, str] | None]:
    """`CpuRuntime(outputs)`, or the NumPy runtime (`reference` if made) and the warning to give once."""
    from luminal.runtime import NumpyRuntime

    try:
        return CpuRuntime(outputs, artifacts=artifacts, arithmetic=arithmetic, choices=choices), None
    except UnsupportedError as exc:
        warning = (f"unsupported:{exc}", f'device="cpu": {exc}; this graph runs on the NumPy reference runtime')
    except build.CpuBuildError as exc:  # a compiler that rejects our flags (no OpenMP, say): correct, slower
        first = str(exc).splitlines()[:6]
        warning = (f"build:{build.compiler()}", 'device="cpu": the C compiler failed; running the NumPy reference '
                                                "runtime instead:\n" + "\n".join(first))
    return (reference if reference is not None else NumpyRuntime(outputs, arithmetic=arithmetic)), warning


def _address(a: np.ndarray) -> int:
    """The data address of a C-contiguous array: a ctypes view is several times cheaper than
    `a.ctypes.data`, which serves the read-only and empty arrays ctypes cannot view."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


def _copy_of(library: Path, tag: str) -> Path:
    """A copy of `library` beside it (written atomically, once): dlopen shares one loaded object,
    with its globals, per file (by its inode too, so not a hard link)."""
    import shutil
    import tempfile

    copy = library.with_name(f"{library.stem}.{tag}{library.suffix}")
    if not copy.exists():
        fd, tmp = tempfile.mkstemp(prefix=copy.name, suffix=".tmp", dir=library.parent)
        try:
            with os.fdopen(fd, "wb") as f, open(library, "rb") as src:
                shutil.copyfileobj(src, f)
            os.replace(tmp, copy)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return copy



# --- the runtime ----------------------------------------------------------------------------------
class CpuRuntime(Runtime):
    """Runs a graph as compiled C; thread-safe (each thread has its own arena, each call its outputs
    and flag). `artifacts`: what `artifacts()` returned in an earlier process, used if it checks out.
    A call may be given inputs whose memory the caller gives up (`donated`): outputs written after
    their last read go there (`donation.py`)."""

    def __init__(self, outputs, profile: bool = False, artifacts: dict | None = None, arithmetic: Arithmetic = C,
                 choices: Choices = DEFAULT):
        self._declared = list(outputs)  # the graph's outputs: their shapes are the arrays returned
        outputs = written_in_place(self._declared)
        self.arithmetic = arithmetic
        self.choices = choices
        self.conv = conv_path(choices.conv)  # the path its convolutions render with
        self._conv_choice = conv_choice(choices.conv)  # None: auto's rules per convolution
        if artifacts is not None and artifacts.get("conv") != conv_key(choices.conv):  # rendered otherwise: built anew
            artifacts = None
        restored = restore(outputs, artifacts) if artifacts is not None else None
        if restored is None:
            from luminal.kernels.cpu.program import render_program  # not imported by a restored runtime

            program = render_program(outputs, self._conv_choice)
            library = build.build(program.sources, identity=program.identity)
            self.build_outcome = build.last_outcome()
        else:
            program, library = restored
            self.build_outcome = "hit"
        self.program = program
        sched = program.schedule
        self.inputs = sched.inputs
        self.outputs = sched.outputs
        views: dict[int, object] = {}  # every View the kernels read (each chain from a step's operand), checked per binding
        for n in sched.nodes:
            for v in n.src:
                while v.op is Op.VIEW and id(v) not in views:
                    views[id(v)] = v
                    v = v.src[0]
        self._views = list(views.values())
        slot: dict[int, tuple[str, int]] = {}
        bufs = [*sched.weights, *sched.inputs, *sched.outputs]
        for i, n in enumerate(bufs):
            slot.setdefault(id(n), ("buf", i))
        self.intermediates, first, last = [], {}, {}
        for i, st in enumerate(program.steps):
            if id(st.output) not in slot:
                slot[id(st.output)] = ("tmp", len(self.intermediates))
                first[id(st.output)] = i
                self.intermediates.append(st.output)
            for b in st.inputs:
                last[id(b)] = i
        self.intervals = [(first[id(n)], last.get(id(n), first[id(n)])) for n in self.intermediates]
        # CONCATs done in place (`concat_in_place`): (operand, outermost result, byte offset) by
        # intermediate index; the result's buffer alive over its operands' lifetimes
        self._aliases = concat_in_place.placements(sched, {id(st.output) for st in program.steps if st.absorbed},
                                                   self.intermediates)
        self.intervals = concat_in_place.merged_intervals(self.intervals, self._aliases)
        # per intermediate, None, or for an absorbed node the (K, N, M, batch) of the fused GEMM whose tile
        # scratch its buffer is (`steps.im2col_scratch`): the MatMul reading it as its B operand,
        # whichever step runs that GEMM (its own, or its epilogue region's); or () when it is no
        # GEMM's B (a padded copy, a GEMM absorbed by its epilogue)
        gemm_of = {id(b.src[0] if b.op is Op.VIEW else b): n for n in sched.nodes if n.op is Op.MAT_MUL for b in n.src[1:2]}
        absorbed = {id(st.output) for st in program.steps if st.absorbed}
        self._tile_scratch = [None if id(n) not in absorbed else () if id(n) not in gemm_of else
                         (gemm_of[id(n)].src[0].shape[-1], gemm_of[id(n)].shape[-1], gemm_of[id(n)].shape[-2],
                          sym.product(gemm_of[id(n)].shape[:-2]))
                         for n in self.intermediates]
        self.library_path = library
        self.restored = restored is not None  # built from stored artifacts (no C rendered)
        # the GEMM pointers are the library's globals, shared by every runtime that loads its file:
        # another GEMM binds a copy of its own
        lib = ctypes.CDLL(str(self.library_path if choices.gemm is None else _copy_of(self.library_path, choices.gemm)))
        self.blas = blas()
        self.blas.bind(lib, choices.gemm)
        self.gemm = f"luminal-{sgemm.isa()}" if self.blas.front_for(choices.gemm) is not None else "blas"
        self._threads = choices.threads  # None: `threads()` at each call
        # `lum_call`: `lum_run` with its arguments in one array (`_launch`): ctypes converts one
        # argument instead of 11 (README, "ONNX")
        self._run = lib.lum_call
        self._run.restype = None
        self._run.argtypes = [ctypes.c_void_p]
        self._pack = None  # the table of weights packed once (`pack_weights`): (array, its address, entries)
        self._lib = lib
        self._table = np.array(launch_table(program, lambda n: slot[id(n)]) or [0], np.int64)
        self._table_at = self._table.ctypes.data
        self._out_dtypes = [n.dtype.numpy for n in sched.outputs]
        self._n_steps = len(program.steps)
        self._seconds = np.zeros(max(1, self._n_steps)) if profile else None
        self._weights = [np.ascontiguousarray(w.arg.array) for w in sched.weights]
        self._n_weights, self._n_inputs = len(sched.weights), len(sched.inputs)
        self._template = (ctypes.c_void_p * len(bufs))(*(w.ctypes.data for w in self._weights))
        self._layouts: collections.OrderedDict[tuple, tuple] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.arena_bytes = 0
        self._scratch = threading.local()  # per calling thread: its pointer table (`run`)
        # static shapes: the first call's layout serves every call (worked out then, so a broken
        # file's sizes fail as a call)
        self._fixed = all(sym.is_static(d) for n in [*self.inputs, *self.outputs, *self.intermediates] for d in n.shape)
        self._static = None
        self._last_layout = None  # symbolic dims: (the last call's dims, team and precision; its layout)
        self._liveness = donation.Liveness.of(program.steps, sched.inputs, sched.outputs)
        self._donation_plans: dict[tuple, donation.Placement] = {}
        self.donated_outputs = 0  # outputs written into donated inputs, over all calls
        self.donated_intermediates = 0  # intermediates likewise
        self.donation_arena_bytes = 0  # the arena's largest need in a call with donations

    @property
    def source(self) -> str:
        """The library's C source as one unit, whatever split it was compiled in (the split follows the
        machine's load; this text does not). Restored: read back from beside the library (its units, if
        it was built split), else rendered."""
        if self.program.identity is not None:
            return self.program.identity
        if self.program.sources is None:
            try:
                self.program.sources = [f.read_text() for f in build.c_files(self.library_path)] or None
            except OSError:
                pass
            if self.program.sources is None:
                from luminal.kernels.cpu.program import render_program

                self.program.sources = render_program(self.outputs, self._conv_choice).sources
        return "\n".join(self.program.sources)

    def artifacts(self) -> dict:
        """Plain JSON for a later process to rebuild this runtime without rendering C: the library's
        key, its kernels, the dims, and per step its kernel, input positions and dims."""
        sched = self.program.schedule
        pos = {id(n): i for i, n in enumerate([*sched.weights, *sched.inputs, *sched.nodes])}
        kernel = {k: i for i, k in enumerate(self.program.kernels)}
        dim = {s: i for i, s in enumerate(self.program.symbols)}
        steps: list[int] = []
        for st in self.program.steps:
            steps += [kernel[st.name], len(st.inputs), *(pos[id(b)] for b in st.inputs),
                      len(st.symbols), *(dim[s] for s in st.symbols)]
        return {"format": ARTIFACTS_FORMAT, "code": code_version(), "library": self.library_path.stem,
                "conv": conv_key(self.choices.conv),
                "kernels": list(self.program.kernels), "symbols": list(self.program.symbols), "steps": steps}

    @property
    def last_bindings(self) -> dict[str, int] | None:
        """The dims of its latest call (its layouts are LRU-ordered); None before a symbolic one."""
        with self._lock:
            return dict(next(reversed(self._layouts))[:-2]) if self._layouts else None

    def _layout(self, bindings: dict[str, int], team: int, f64: bool):
        """The arena's layout for these dims and a call on at most `team` threads at precision
        float64 or not (the fused im2col GEMMs' scratch depends on both)."""
        key = (*sorted(bindings.items()), team, f64)
        with self._lock:
            hit = self._layouts.get(key)
            if hit is not None:
                self._layouts.move_to_end(key)
                return hit

        check_views(self._views, bindings)  # the C reads views unchecked: a bad file stops here

        def shape(n):
            return tuple(int(sym.evaluate(d, bindings)) for d in n.shape)

        def nbytes(n, scratch):  # a tile scratch's need may exceed the copy's size (depth tiles' partials)
            if scratch is None:
                return int(np.prod(shape(n), dtype=np.int64)) * n.dtype.itemsize
            k, m_cols, m_rows, batch = (int(sym.evaluate(d, bindings)) for d in scratch) if scratch else (0, 0, 0, 0)
            floats = im2col_scratch(k, m_cols, m_rows, team, f64)
            direct = direct_conv(n, m_cols, m_rows, batch) if scratch and not f64 else None  # the kernel's direct path, if any
            return max(floats, direct.scratch(m_rows, team) if direct is not None else 0) * n.dtype.itemsize

        sizes = [nbytes(n, s) for n, s in zip(self.intermediates, self._tile_scratch)]
        for k, _, _ in self._aliases:  # inside a CONCAT's buffer: no room of its own
            sizes[k] = 0
        layout = plan_arena(sizes, self.intervals)
        offsets = self._aliased(np.array(layout.offsets or (0,), np.int64))
        dims = np.array([bindings[s] for s in self.program.symbols] or [0], np.int64)
        out_shapes = [shape(n) for n in self._declared]
        # a call without donors: some intermediates in outputs not yet written, if that saves arena
        hosted = donation.hosted(self._liveness, self._out_bytes(out_shapes), sizes, self.intervals,
                                 self._movable(), layout.total)
        if hosted is not None:
            self._aliased(hosted.offsets)
        # arrays kept: addresses stay valid; `key` names the layout in a donation's plan
        hit = (max(layout.total, 1), offsets, dims, out_shapes, sizes, key, dims.ctypes.data, hosted)
        with self._lock:
            self._layouts[key] = hit
            while len(self._layouts) > BINDINGS_KEPT:
                self._layouts.popitem(last=False)
            self.arena_bytes = max(self.arena_bytes, hit[0] if hosted is None else hosted.total)
        return hit

    def _out_bytes(self, out_shapes: list[tuple[int, ...]]) -> list[int]:
        return [int(np.prod(s, dtype=np.int64)) * np.dtype(dt).itemsize for s, dt in zip(out_shapes, self._out_dtypes)]

    def _movable(self) -> list[int]:
        """The intermediates a placement may move out of the arena: not a CONCAT done in place or
        its operands, not a fused GEMM's scratch."""
        pinned = {k for a in self._aliases for k in a[:2]}
        return [k for k, scratch in enumerate(self._tile_scratch) if scratch is None and k not in pinned]

    def __call__(self, feeds: dict) -> list[np.ndarray]:
        return self.call_donating(feeds, frozenset())

    def call_donating(self, feeds: dict, donated: frozenset) -> list[np.ndarray]:
        arrays, bindings = bind_inputs(self.inputs, feeds)
        given = [i for i, n in enumerate(self.inputs) if n.arg in donated] if donated else ()
        return self.run([arrays[n.arg] for n in self.inputs], bindings, given)

    def _placement(self, ins: list, addresses: list[int], hit, donated) -> donation.Placement | None:
        """Where this call's outputs and intermediates go given the donated inputs (`donation.place`,
        cached per donors' sizes and layout); without a donor, the layout's own (`hit[7]`, None:
        all in the arena)."""
        donors = donation.safe_donors(ins, donated, addresses)
        if not donors:
            return hit[7]
        out_shapes, sizes, key = hit[3], hit[4], hit[5]
        plan_key = (tuple((j, ins[j].nbytes) for j in donors), key)
        placed = self._donation_plans.get(plan_key)
        if placed is None:
            placed = donation.place(self._liveness, {j: ins[j].nbytes for j in donors}, self._out_bytes(out_shapes),
                                    sizes, self.intervals, self._movable())
            self._aliased(placed.offsets)
            with self._lock:
                if len(self._donation_plans) >= BINDINGS_KEPT:
                    self._donation_plans.clear()
                self._donation_plans[plan_key] = placed
        if not placed.outputs and not placed.intermediates:
            return hit[7]
        with self._lock:
            self.donated_outputs += len(placed.outputs)
            self.donated_intermediates += sum(1 for j, _ in placed.intermediates.values() if j >= 0)
            self.donation_arena_bytes = max(self.donation_arena_bytes, placed.total)
        return placed

    def _aliased(self, offsets: np.ndarray) -> np.ndarray:
        """`offsets` (in place) with each in-place CONCAT's operands inside its buffer."""
        for k, holder, at in self._aliases:
            offsets[k] = offsets[holder] + at
        return offsets

    def _team_and_f64(self) -> tuple[int, bool]:
        """A call starting now: its team (the choice's, else `threads()`) and whether it computes at float64."""
        return self._threads or threads(), self.arithmetic.precision == "float64"

    def run(self, ins: list, bindings: dict, donated=()) -> list[np.ndarray]:
        team, f64 = self._team_and_f64()
        hit = self._hit(bindings, team, f64)
        ins = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in ins]
        return self._launch(ins, bindings, hit, team, f64, donated)

    def bound(self, feeds: dict):
        """(input names, call) for calls whose arrays have exactly `feeds`' dtypes and shapes and are
        C-contiguous NumPy arrays, given as a list in the names' order: the binding and the layout
        worked out here, once, not per call; the caller checks each call's arrays against
        `feeds`'. A bool input's bytes are still checked at every call (`proper_bools`: a 0/255
        mask is copied as 0/1). None where that does not hold for `feeds` itself (an input
        converted or copied on binding: not an array, not C-contiguous, 0-d, a bool mask of other
        bytes)."""
        arrays, bindings = bind_inputs(self.inputs, feeds)
        names = [n.arg for n in self.inputs]
        if any(arrays[k] is not feeds[k] for k in names):
            return None
        bools = [i for i, k in enumerate(names) if arrays[k].dtype == np.bool_]
        team, f64 = key = self._team_and_f64()
        hit = self._hit(bindings, team, f64)

        def call(ins: list) -> list[np.ndarray]:
            if bools:
                ins = list(ins)
                for i in bools:
                    ins[i] = proper_bools(ins[i])
            if self._team_and_f64() != key:
                return self.run(ins, bindings)  # torch's thread count or the precision changed since
            return self._launch(ins, bindings, hit, team, f64)

        return names, call

    def _hit(self, bindings: dict, team: int, f64: bool) -> tuple:
        """The layout of a call with these dims (`_layout`), the last call's kept."""
        layout = self._static
        if layout is None or layout[0] != (team, f64):
            if self._fixed:
                layout = self._static = ((team, f64), self._layout(bindings, team, f64))
            else:  # the last call's dims again (one read: another thread may store its own meanwhile)
                key = (*bindings.items(), team, f64)
                layout = self._last_layout
                if layout is None or layout[0] != key:
                    layout = self._last_layout = (key, self._layout(bindings, team, f64))
        return layout[1]

    def _launch(self, ins: list, bindings: dict, hit: tuple, team: int, f64: bool, donated=()) -> list[np.ndarray]:
        """Run the C on C-contiguous `ins` (their dims `bindings`) with layout `hit`."""
        total, offsets, _, out_shapes, _, _, dims_at, _ = hit
        addresses = [_address(a) for a in ins]
        placed = self._placement(ins, addresses, hit, donated) if donated else hit[7]
        if placed is not None:
            total, offsets = placed.total, placed.offsets
            outs = [donation.carve(ins[placed.outputs[i][0]], placed.outputs[i][1], s, dt) if i in placed.outputs
                    else POOL.empty(s, dt) for i, (s, dt) in enumerate(zip(out_shapes, self._out_dtypes))]
        else:
            outs = [POOL.empty(s, dt) for s, dt in zip(out_shapes, self._out_dtypes)]  # large ones: reused blocks
        # this thread's arena and pointer tables, kept between calls: a thread runs one call at a time
        shared = _ARENA.__dict__
        arena = shared.get("arena")
        if arena is None or arena.nbytes < total:
            shared["arena"] = None  # the old one freed before the larger is allocated
            arena = shared["arena"] = np.empty(total, np.uint8)
            shared["arena_at"] = _address(arena)
        mine = self._scratch.__dict__
        out_at = [_address(o) for o in outs]
        if placed is not None:  # the intermediates' pointers: this call's own
            tmps = offsets.astype(np.uint64) + np.uint64(shared["arena_at"])
            for k, (j, off) in placed.intermediates.items():  # j < 0: output -1 - j, not yet written there
                tmps[k] = (addresses[j] if j >= 0 else out_at[-1 - j]) + off
        else:  # in the arena: kept while the layout and the arena are the same
            tmps = mine.get("tmps")
            if tmps is None or mine["tmps_of"] is not offsets or mine["tmps_at"] != shared["arena_at"]:
                tmps = mine["tmps"] = offsets.astype(np.uint64) + np.uint64(shared["arena_at"])
                mine["tmps_of"], mine["tmps_at"] = offsets, shared["arena_at"]  # held: never another layout's
                mine["tmps_ptr"] = tmps.ctypes.data  # (read once: `.ctypes` is slow beside a small call)
        bufs = mine.get("bufs")
        if bufs is None:
            bufs = mine["bufs"] = (ctypes.c_void_p * len(self._template)).from_buffer_copy(self._template)
            mine["err"] = err = ctypes.c_int(0)
            # lum_run's arguments (`lum_call`): those fixed for this thread's calls set here, the rest
            # when they change (`key` below)
            args = mine["args"] = (ctypes.c_void_p * 11)(
                self._table_at, self._n_steps, ctypes.addressof(bufs), 0, 0, ctypes.addressof(err), 0,
                None if self._seconds is None else self._seconds.ctypes.data, 0, None, 0)
            mine["args_at"], mine["args_key"] = ctypes.addressof(args), None
        k = self._n_weights
        for i, a in enumerate(addresses):
            bufs[k + i] = a
        k += self._n_inputs
        for i, a in enumerate(out_at):
            bufs[k + i] = a
        err = mine["err"]  # this thread's flag, cleared for the call
        err.value = 0
        pack = self._pack  # held to the call's end: a table `weights_changed` replaced is freed after it
        key = (dims_at, tmps.ctypes.data if placed is not None else mine["tmps_ptr"], team, f64,
               None if pack is None else pack[1])
        if key != mine["args_key"]:
            args = mine["args"]
            args[3], args[4], args[6], args[8] = key[0], key[1], team, int(f64)
            args[9], args[10] = (pack[1], pack[2]) if pack is not None else (None, 0)
            mine["args_key"] = key
        self._run(mine["args_at"])
        if err.value:
            if err.value & 2 and not err.value & 1:
                raise DivisionByZero("integer division or remainder by zero (flagged by the compiled C)")
            raise index_error(self.outputs, bindings, "the compiled C")
        return outs

    def pack_weights(self) -> bool:
        """From the next call on, the GEMMs whose B is a stored float32 weight (a linear layer's) read
        it from panels packed on its first use and kept (the prelude's `lum_gemm_fw`) instead of
        packing it every call: the same bits, one more copy of those weights in memory. Only with
        luminal's SGEMM (`self.gemm`) and not with LUMINAL_PACK_WEIGHTS=0. For a frontend
        that owns its weights or sees their in-place changes, and calls `weights_changed()` after
        one (packed panels would not see it). Whether packing is on."""
        packing = sgemm.packing()
        if not self.gemm.startswith("luminal") or packing is None or os.environ.get("LUMINAL_PACK_WEIGHTS", "1") == "0":
            return False
        entries = 8 * self._n_weights + 64  # a weight's views and batch slices each take one
        table = np.zeros(8 * entries + 1, np.int64)  # and the count of entries claimed (`packed_generation`)
        weakref.finalize(table, _free_packed, packing[2], table.ctypes.data, entries)
        self._pack = (table, table.ctypes.data, entries)
        return True

    def weights_changed(self) -> None:
        """A stored weight changed in place: the next call packs anew (a fresh table; calls under
        way finish on theirs, freed after them)."""
        if self._pack is not None:
            self.pack_weights()

    def packed_generation(self):
        """What weights may have packed copies now: None where none can (packing off), else (the
        table's address, its entries claimed so far), which changes when a weight is packed for
        the first time or the table is replaced."""
        pack = self._pack
        return None if pack is None else (pack[1], int(pack[0][-1]))

    def packed_addresses(self) -> list[int]:
        """The addresses of the weights (or views of them) with packed copies, or being packed."""
        pack = self._pack
        if pack is None:
            return []
        keys = pack[0][:-1].reshape(-1, 8)[:, 0]
        return keys[keys != 0].tolist()

    def profile(self, top: int = 15) -> list[tuple[str, float, int]]:
        """(kernel, seconds, steps) summed over the calls so far, slowest first (`profile=True` only)."""
        if self._seconds is None:
            raise ValueError("built without profile=True")
        times = self._seconds.tolist()
        by: dict[str, list] = {}
        for st, t in zip(self.program.steps, times):
            entry = by.setdefault(st.name, [0.0, 0])
            entry[0] += t
            entry[1] += 1
        return sorted(((k, v[0], v[1]) for k, v in by.items()), key=lambda r: -r[1])[:top]

    def report_lines(self) -> list[str]:
        """The arena, and what donated inputs took (`donation.py`), over the calls so far."""
        lines = [f"  cpu: largest arena {self.arena_bytes / 2**20:.2f} MiB"]
        hosted = [h[7] for h in list(self._layouts.values()) if h[7] is not None]
        if hosted:
            lines.append(f"  cpu: {max(len(p.intermediates) for p in hosted)} intermediate(s) held in outputs before "
                         f"their step writes them (without them the arena would be "
                         f"{max(h[0] for h in list(self._layouts.values())) / 2**20:.2f} MiB)")
        if self.donated_outputs or self.donated_intermediates:
            lines.append(f"  cpu: donated inputs took {self.donated_outputs} output(s) and {self.donated_intermediates} "
                         f"intermediate(s) over the calls so far; the arena in those calls "
                         f"{self.donation_arena_bytes / 2**20:.2f} MiB")
        return lines

    def stats(self) -> dict:
        return {"device": "cpu", "kernels": len({s.name for s in self.program.steps}),
                "steps": len(self.program.steps), "arena_bytes": int(self.arena_bytes),
                "donated_outputs": self.donated_outputs, "donated_intermediates": self.donated_intermediates,
                "donation_arena_bytes": int(self.donation_arena_bytes),
                "library": str(self.library_path)}


def _free_packed(free: int, table: int, entries: int) -> None:
    """Free a dropped table's packed weights (`CpuRuntime.pack_weights`; its array's finalizer)."""
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_longlong)(free)(table, entries)
