"""The compile pipeline shared by every frontend: named passes from an HLIR graph to a runtime.

    frontend (torch / onnx / builder)  ->  optimize (luminal.egraph)  ->  runtime for `device`

`compile_graph(graph)` returns a `CompiledGraph`: callable with NumPy arrays, with a `report()`
of what each pass did and how long it took. Frontends wrap it (mapping their own inputs and
output structures); `luminal.stats()` counts compilations and the calls each one served.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import weakref
from dataclasses import dataclass, field, replace

import numpy as np

from luminal import devices
from luminal.devices import Device
from luminal.errors import InputError, LuminalError
from luminal.hlir.constants import RNG_SEED_INPUT
from luminal.hlir.ops import Node, Op, count_ops, toposort
from luminal.runtime.rng import draw_seed
from luminal.threadflags import gc_untouched


@dataclass
class Report:
    """What the compiler did: time per phase, op counts before and after, rewrites fired."""

    name: str = "graph"
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds
    ops_before: dict[str, int] = field(default_factory=dict)
    ops_after: dict[str, int] = field(default_factory=dict)
    rules_fired: dict[str, int] = field(default_factory=dict)
    egraph_size: int | None = None
    notes: list[str] = field(default_factory=list)
    cache: dict[str, str] = field(default_factory=dict)  # phase -> "hit" / "miss" (a disk cache's answer)
    background: dict[str, float] = field(default_factory=dict)  # phase -> seconds, run off the first call's path
    sections: list[str] = field(default_factory=list)  # lines about the running model (roofline, CUDA graphs)
    stored_key: object = field(default=None, repr=False, compare=False)  # compile_cache.Key of the entry stored
    search: dict | None = None  # what `luminal.search` measured (or reused) and chose; None: no search

    def __str__(self) -> str:
        lines = [f"luminal compile report: {self.name}"]
        total = sum(self.phases.values())
        lines.append(f"  phases (total {total * 1e3:.1f} ms):")
        lines += [f"    {k:<12} {v * 1e3:9.1f} ms" for k, v in self.phases.items()]
        if self.cache:
            lines.append("  cache: " + ", ".join(f"{k} {v}" for k, v in self.cache.items()))
        if self.background:
            lines.append("  in the background: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.background.items()))
        kinds = sorted(set(self.ops_before) | set(self.ops_after), key=lambda k: -self.ops_before.get(k, 0))
        lines.append(f"  ops: {sum(self.ops_before.values())} before, {sum(self.ops_after.values())} after")
        lines.append(f"    {'op':<18} {'before':>7} {'after':>7}")
        lines += [f"    {k:<18} {self.ops_before.get(k, 0):>7} {self.ops_after.get(k, 0):>7}" for k in kinds]
        if self.egraph_size is not None:
            lines.append(f"  e-graph size: {self.egraph_size} e-nodes")
        if self.rules_fired:
            lines.append("  rules fired:")
            lines += [f"    {k:<40} {v:>6}" for k, v in sorted(self.rules_fired.items(), key=lambda kv: -kv[1])]
        lines += [f"  note: {n}" for n in self.notes]
        if self.search is not None:
            from luminal.search import lines as search_lines

            lines += search_lines(self.search)
        lines += self.sections
        return "\n".join(lines)

    _repr_pretty_ = lambda self, p, cycle: p.text(str(self))  # noqa: E731 - IPython


def op_counts(outputs: list[Node]) -> dict[str, int]:
    """{op title: how many nodes}, most common first, of the graph computing `outputs`."""
    return count_ops(toposort(outputs))


class CompiledLog:
    """The graphs compiled in this process, held weakly: a compiled model its user dropped is
    freed (with its weights) and leaves the log. `len()` counts every graph ever compiled; an
    index or slice selects by compile order and yields the graphs still alive."""

    def __init__(self):
        self.total = 0
        self._live: dict[int, weakref.ref] = {}  # compile number -> graph
        self._lock = threading.Lock()

    def append(self, graph: CompiledGraph) -> None:
        live = self._live
        with self._lock:
            number, self.total = self.total, self.total + 1
            live[number] = weakref.ref(graph, lambda _ref: live.pop(number, None))

    def __len__(self) -> int:
        return self.total

    def __iter__(self):
        return iter(self[:])

    def numbered(self) -> list[tuple[int, CompiledGraph]]:
        """(compile number, graph) of the graphs still alive, in compile order."""
        refs = ((i, self._live.get(i)) for i in range(self.total))  # by key: callbacks may pop meanwhile
        return [(i, g) for i, g in ((i, r() if r is not None else None) for i, r in refs) if g is not None]

    def __getitem__(self, key):
        if isinstance(key, slice):
            graphs = (self._live.get(i) for i in range(self.total)[key])
            return [g for g in (r() if r is not None else None for r in graphs) if g is not None]
        ref = self._live.get(range(self.total)[key])
        return None if ref is None else ref()


class _Stats:
    """Process-wide counters behind `luminal.stats()`."""

    def __init__(self):
        self.compiled = CompiledLog()

    def snapshot(self) -> dict:
        live = self.compiled.numbered()
        return {
            "graphs_compiled": len(self.compiled),
            "calls": [g.calls for _, g in live],
            # "number": the compile order (graphs_compiled before it), so a caller can pick the
            # graphs compiled since an earlier snapshot even after older ones were freed
            "graphs": [{"number": i, "name": g.name, "calls": g.calls} for i, g in live],
        }


STATS = _Stats()


def stats() -> dict:
    """How many graphs luminal compiled in this process; the calls each one still alive served."""
    return STATS.snapshot()


class CompiledGraph:
    """An optimized graph bound to a runtime. Call it with {input name: array} or positionally."""

    def __init__(self, inputs: list[Node], outputs: list[Node], output_names: list[str], runtime, report: Report,
                 unused_inputs: tuple[str, ...] = (), *, device: str | Device = "cpu", frontend_meta: dict | None = None,
                 weight_mode: str = "embed", rng_seed: Node | None = None, assumptions: tuple = (),
                 ragged: tuple = ()):
        self.inputs = inputs
        # the seed input of a graph with random ops (`RNG_SEED_INPUT`, not among `inputs`): drawn
        # at each call the caller does not give it (`runtime/rng.draw_seed`)
        self.rng_seed = rng_seed
        self.unused_inputs = set(unused_inputs)  # declared but not needed: accepted and ignored
        self.outputs = outputs
        self.output_names = output_names
        self.runtime = runtime
        self._report = report
        self.name = report.name
        self.device = devices.get(device)  # the entry the runtime came from, at the compile's precision
        self.frontend_meta = dict(frontend_meta or {})  # a loaded model's frontend metadata (luminal.loading.load)
        self.weight_mode = weight_mode  # "embed", or "seeded" for a model loaded with seeded weights
        # what the caller (the ONNX model) checks and cuts around a call: symbolic pairs (a, b)
        # with a <= b for the input shapes, and (output, axis, length output) of padded outputs
        self.assumptions = list(assumptions)
        self.ragged = list(ragged)
        self.calls = 0
        self._calls_lock = threading.Lock()
        self._after_first: WriteBehind | None = None  # the compile cache's writes, waiting for the first call

    @property
    def input_names(self) -> list[str]:
        return [n.arg for n in self.inputs]

    def __call__(self, *args, **kwargs) -> list[np.ndarray]:
        if len(args) == 1 and not kwargs and type(args[0]) is dict:  # the caller's dict, read, never changed
            feeds = args[0]
        elif args and isinstance(args[0], dict) and len(args) == 1:
            feeds = dict(args[0], **kwargs)
        else:
            if len(args) > len(self.inputs):
                raise InputError(f"{len(args)} positional inputs given, the graph takes {len(self.inputs)}: {self.input_names}")
            feeds = dict(zip(self.input_names, args), **kwargs)
        return self._run(feeds)

    def call_donating(self, feeds: dict, donated: frozenset) -> list:
        """`self(feeds)` where the caller gives up the memory of the inputs named in `donated` (no one
        reads them after the call, nothing else views them): a runtime that takes donations may write
        outputs there (`kernels/cpu/donation.py`); others ignore it."""
        return self._run(feeds, donated)

    def _run(self, feeds: dict, donated: frozenset = frozenset()) -> list:
        if self.unused_inputs:
            feeds = {k: v for k, v in feeds.items() if k not in self.unused_inputs}
        if self.rng_seed is not None:
            if RNG_SEED_INPUT not in feeds:
                feeds = {**feeds, RNG_SEED_INPUT: draw_seed()}
        elif RNG_SEED_INPUT in feeds:  # no random ops: a seed given is ignored
            feeds = {k: v for k, v in feeds.items() if k != RNG_SEED_INPUT}
        self._served()
        gate = self._after_first
        run = functools.partial(self.runtime.call_donating, donated=donated & set(feeds)) if donated else self.runtime
        if gate is None or gate.over():
            return run(feeds)
        try:
            return run(feeds)
        finally:
            gate.first_call_over()

    def _served(self) -> None:
        """Count a call (`calls`), by either path: `__call__` or a `bound_call`'s."""
        with self._calls_lock:
            self.calls += 1

    def bound_call(self, feeds: dict):
        """(input names, call) for calls whose arrays have exactly `feeds`' dtypes and shapes, given
        as a list in the names' order, C-contiguous NumPy arrays (the caller checks each call's):
        the C runtime's binding and layout done once (`CpuRuntime.bound`), not per call. None where
        there is none: another runtime, a C library still building, a graph that draws a seed per
        call or whose first call is not over, `feeds` the runtime would convert."""
        bound = getattr(self.runtime, "bound", None)
        gate = self._after_first
        if bound is None or self.rng_seed is not None or (gate is not None and not gate.over()):
            return None
        got = bound({k: v for k, v in feeds.items() if k not in self.unused_inputs})
        if got is None:
            return None
        names, run = got

        def call(arrays: list) -> list:
            self._served()
            return run(arrays)

        return names, call

    def pack_weights(self) -> None:
        """Let the runtime keep its stored float32 weights that GEMMs read as B (linear layers')
        packed once instead of packing them every call (`CpuRuntime.pack_weights`; a no-op on
        runtimes without it). For frontends that own their weights or see their in-place changes
        and then call `weights_changed()`: ONNX models, `luminal.compile` (torch's version counters),
        loaded `.lum` files."""
        pack = getattr(self.runtime, "pack_weights", None)
        if pack is not None:
            pack()

    def weights_changed(self) -> None:
        """A stored weight changed in place: weights packed once are packed anew at the next call."""
        changed = getattr(self.runtime, "weights_changed", None)
        if changed is not None:
            changed()

    def wait_writes(self) -> None:
        """Until the compile cache's writes that wait for the first call (`WriteBehind`) are done
        (the first call's wait included; at once where there are none)."""
        if self._after_first is not None:
            self._after_first.wait()

    def after_first_call(self, task, report: Report | None = None) -> None:
        """Run `task()` (a compile cache write) once this graph's first call is over (see
        `after_first_call`)."""
        after_first_call(self, task, report or self._report)

    def report(self) -> Report:
        """The compile report, plus the runtime's own lines (kernel devices: the CUDA-graph cache)
        and the roofline summary on an H200 (`roofline`) where the dims are known."""
        from luminal.kernels.roofline import format_summary

        sections = list(self.runtime.report_lines())
        try:
            sections.append(format_summary(self.roofline_summary(), "h200"))
        except Exception as exc:  # noqa: BLE001 - a diagnostic: the report itself must not fail
            sections.append(f"  roofline: not available ({type(exc).__name__}: {exc})")
        return replace(self._report, sections=sections)

    def kernel_plan(self):
        """The kernel plan of this graph (the runtime's own on a kernel device; built once otherwise)."""
        plan = self.runtime.plan
        if plan is None:
            plan = self.__dict__.get("_plan")
            if plan is None:
                from luminal.kernels.plan import KernelPlan

                plan = self._plan = KernelPlan.build(self.outputs)
        return plan

    def roofline(self, gpu: str = "h200", bindings: dict[str, int] | None = None, **options) -> list[dict]:
        """Per launch: `kernel, class, bytes, flops, predicted_us` on `gpu` (`luminal.kernels.roofline`),
        symbolic dims from `bindings` or else from the last call."""
        from luminal.kernels import roofline as rl

        return rl.roofline(self.kernel_plan(), self._bindings(bindings), gpu, **options)

    def roofline_summary(self, gpu: str = "h200", bindings: dict[str, int] | None = None, **options) -> dict:
        """`roofline`'s totals: predicted time per call, GEMM share, bytes against the compulsory bytes."""
        from luminal.kernels import roofline as rl

        bindings = self._bindings(bindings)
        plan = self.kernel_plan()
        return rl.summary(rl.roofline(plan, bindings, gpu, **options), rl.compulsory_bytes(plan, bindings))

    def _bindings(self, bindings: dict[str, int] | None) -> dict[str, int]:
        from luminal.kernels.roofline import last_bindings

        return dict(bindings) if bindings is not None else (last_bindings(self.runtime) or {})

    def __repr__(self) -> str:
        return f"<CompiledGraph {self.name!r}: {len(self.inputs)} inputs, {len(self.outputs)} outputs, {self.calls} calls>"

    def _display_view(self):
        from luminal.builder.display import outputs_view

        return outputs_view(self.name, self.output_names, self.outputs)

    def _repr_svg_(self):
        """The optimized graph (fused ops and all) through graphviz, when `dot` is installed."""
        from luminal.builder.display import graph_svg

        return graph_svg(self._display_view())

    def _repr_html_(self):
        import html

        from luminal.builder.display import graph_html

        return f"<pre>{html.escape(str(self._report))}</pre>" + graph_html(self._display_view())

    def save(self, path, meta: dict | None = None, weights: str = "embed", weight_specs: dict | None = None,
             archs: tuple[str, ...] = ()):
        """Write this compiled graph to a `.lum` file; `luminal.load(path)` reads it back.
        `weights="seeded"` stores weight specs instead of bytes; `archs=("sm_90",)` adds cubins
        (see `luminal.saving`)."""
        from luminal.saving import save_compiled

        return save_compiled(self, path, meta, weights, weight_specs, archs)

    def cuda_source(self) -> str:
        from luminal.kernels import render_graph

        return render_graph(self.outputs)


def optimize_enabled(optimize: bool | None) -> bool:
    if optimize is not None:
        return optimize
    return os.environ.get("LUMINAL_OPTIMIZE", "1") != "0"


def compile_outputs(
    inputs: list[Node], outputs: list[Node], output_names: list[str] | None = None, *,
    device: str | Device = "cpu", optimize: bool | None = None, name: str = "graph", report: Report | None = None,
    assumptions: tuple = (), ragged: tuple = (), search: float | None = None,
) -> CompiledGraph:
    """Run the passes on `outputs` (HLIR nodes) and bind the result to a runtime. `assumptions`
    and `ragged`: a frontend's checks of the inputs and cuts of the outputs (`CompiledGraph`).
    `search`: seconds to measure the device's variants in (`luminal.search`); None: no search."""
    from luminal import search as searching
    from luminal.hlir.ops import sorting_once

    search = searching.budget(search)  # a bad budget fails before any work
    with sorting_once():  # the passes sort the same graphs again and again
        return _compile_outputs(inputs, outputs, output_names, device=device, optimize=optimize, name=name,
                                report=report, assumptions=assumptions, ragged=ragged, search=search)


def _compile_outputs(inputs, outputs, output_names, *, device, optimize, name, report, assumptions,
                     ragged, search) -> CompiledGraph:
    from luminal.debug import Progress

    entry = devices.resolve(device)  # a configuration error, before any work; a Device from an entry point
    report = report or Report(name=name)
    report.ops_before = op_counts(outputs)
    optimized = list(outputs)
    progress = Progress(name, 2)
    digest = None  # of the compile cache's entry: the runtime's artifacts are stored beside it
    store = None  # the compile cache's write of that entry
    if optimize_enabled(optimize):
        optimized, digest, store = _optimize_cached(optimized, entry, report)
    progress.step("optimize")
    report.ops_after = op_counts(optimized)
    leaves = [n for n in toposort(optimized) if n.op is Op.INPUT]
    used = {id(n) for n in leaves}
    seed = next((n for n in leaves if n.arg == RNG_SEED_INPUT), None)
    kept_inputs = [n for n in inputs if id(n) in used and n is not seed]
    unused = tuple(n.arg for n in inputs if id(n) not in used)
    names = output_names or [f"out{i}" for i in range(len(outputs))]
    return bind_runtime(entry, kept_inputs, optimized, names, report, digest, unused=unused, rng_seed=seed,
                        store=store, progress=progress, search=search, assumptions=assumptions, ragged=ragged)


def bind_runtime(entry, inputs: list[Node], optimized: list[Node], output_names: list[str], report: Report,
                 digest: str | None, *, unused: tuple[str, ...] = (), rng_seed: Node | None = None, store=None,
                 progress=None, search: float | None = None, **attrs) -> CompiledGraph:
    """The tail of every compile, a compile cache hit of the Dynamo backend's included: build
    `entry`'s runtime for `optimized` (its artifacts beside the compile cache's entry `digest`),
    time it in `report`, bind it into a `CompiledGraph` (`attrs`: its other keyword arguments)
    and log it. `store`: the compile cache's write, run once the first call is over. `search`:
    seconds to choose among the device's variants in (`luminal.search`), None: the default's."""
    from luminal import compile_cache
    from luminal.debug import emit

    options = {}
    if search is not None:
        from luminal.search import choose

        chosen = choose(entry, optimized, report, search)
        if chosen is not None:  # its library is built (and cached): no NumPy first call
            options.update(choices=chosen, tiered=False)
    t0 = time.perf_counter()
    builds = _build_counts()
    runtime = compile_cache.build_runtime(entry, optimized, digest, **options)
    report.phases[entry.phase] = time.perf_counter() - t0
    note_build(report, entry.phase, runtime, builds)
    if progress is not None:
        progress.step("runtime")
        progress.close()
    compiled = CompiledGraph(inputs, optimized, output_names, runtime, report, unused, device=entry,
                             rng_seed=rng_seed, **attrs)
    if store is not None:
        compiled.after_first_call(store)
    STATS.compiled.append(compiled)
    emit(compiled)
    return compiled


def after_first_call(compiled: CompiledGraph, task, report: Report) -> None:
    """Run `task()` (a compile cache write) off the first call's path: on the build thread of a
    runtime that has one (`after_first_call`: the cpu device's cold build, which starts once the
    first call is over), else on a thread of its own once `compiled`'s first call is over
    (`WriteBehind`); its time goes to the report's `background`. Now, in this thread (its time
    in the report's `cache` phase), with `LUMINAL_TIERED=0` (what the test suite runs with: a
    second compile in the same process then finds the entry) or once the first call is over."""
    from luminal.kernels.cpu import tiered

    later = compiled.runtime.after_first_call if compiled.runtime.builds_in_background else None
    if later is None and not tiered.turned_off() and compiled.calls == 0:
        if compiled._after_first is None:
            compiled._after_first = WriteBehind()
        later = compiled._after_first.add
    deferred = later is not None
    times = report.background if deferred else report.phases

    def timed():
        t0 = time.perf_counter()
        # beside the user's threads, pausing the (process-wide) collector is not the writes' to do
        with gc_untouched() if deferred else contextlib.nullcontext():
            task()
        times["cache"] = times.get("cache", 0.0) + time.perf_counter() - t0

    if deferred:
        later(timed)
    else:
        timed()


def _quietly(fn) -> None:
    from luminal.kernels.cpu.tiered import quietly

    quietly(fn)


class WriteBehind:
    """Tasks (the compile cache's writes) for after a compiled graph's first call, on a thread of
    their own: it starts them once that call is over (`first_call_over`), or `FIRST_CALL_WAIT_S`
    after the compile without one (a process that compiles only to fill the cache). Not a
    daemon: a process that exits right after its first call still leaves the entries for the
    next process. An exception a task raises is logged, never raised. In a child forked before
    they ran, the tasks stay the parent's (this thread is not in the child)."""

    def __init__(self):
        from luminal.kernels.cpu.tiered import FIRST_CALL_WAIT_S

        self._wait_s = FIRST_CALL_WAIT_S
        self._over = threading.Event()
        self._lock = threading.Lock()
        self._tasks: list = []
        self._started = False
        self._thread = threading.Thread(target=self._run, name="luminal-cache-write")
        self._thread.start()

    def add(self, fn) -> None:
        """Run `fn()` after the first call (after the thread's tasks, if it is past that)."""
        with self._lock:
            if not self._started:
                self._tasks.append(fn)
                return
        self._thread.join()
        _quietly(fn)

    def first_call_over(self) -> None:
        self._over.set()

    def over(self) -> bool:
        return self._over.is_set()

    def wait(self) -> None:
        """Until every task added so far has run (the first call's wait included)."""
        self._thread.join()

    def _run(self) -> None:
        self._over.wait(self._wait_s)
        with self._lock:
            self._started = True
            tasks, self._tasks = self._tasks, []
        for fn in tasks:
            _quietly(fn)


def _optimize_cached(outputs: list[Node], device: Device, report: Report):
    """egglog's optimized graph, from the persistent compile cache when it holds it
    (`luminal.compile_cache`: a hit skips egglog entirely), else computed; the digest of its
    cache entry (None: not cached); and, on a miss, the write of that entry (for `after_first_call`)."""
    from luminal import compile_cache

    t0 = time.perf_counter()
    key = None
    if compile_cache.enabled():
        try:
            key = compile_cache.Key.of(outputs, device.name)
        except compile_cache.Uncacheable as exc:
            report.notes.append(f"compile cache skipped: {exc}")
        found = key and compile_cache.lookup(key, outputs)
        report.phases["cache"] = time.perf_counter() - t0
        if found:
            optimized, fields = found
            report.cache["optimize"] = "hit"
            report.rules_fired = dict(fields.get("rules_fired", {}))
            report.egraph_size = fields.get("egraph_size")
            report.notes += [f"compile cache hit ({key.digest[:12]}): egglog skipped; the miss said:"]
            report.notes += [str(n) for n in fields.get("notes", [])]
            return optimized, key.digest, None
        report.cache["optimize"] = "miss" if key else "off"
    device.prepare()  # the cpu backend's C GEMM object builds while egglog runs
    t0 = time.perf_counter()
    from luminal import egraph

    optimized = egraph.optimize(outputs, report)
    if "saturate" not in report.phases:  # luminal.egraph reports its own sub-phases
        report.phases.setdefault("optimize", time.perf_counter() - t0)
    if key and compile_cache.storable(report):
        def store():
            path = compile_cache.store(key, outputs, optimized, report)
            report.notes.append(f"compile cache miss ({key.digest[:12]}): " + ("stored" if path else "not stored"))

        return optimized, key.digest, store
    if key:
        report.notes.append(f"compile cache miss ({key.digest[:12]}): not stored")
    return optimized, None, None


def note_build(report: Report, phase: str, runtime, before: tuple[int, int]) -> None:
    """The build's cache answer in `report` ("hit" if only the caches' hits grew since `before`);
    for a runtime building in the background (`when_built`: the cpu device's cold build, see
    `luminal.kernels.cpu.tiered`), "background", and its time and answer once it is done."""
    if runtime.builds_in_background:
        report.cache[phase] = "background"

        def built(compiled, seconds):
            from luminal.debug import LOG

            report.background[phase] = seconds
            report.cache[phase] = compiled.build_outcome or "miss"
            LOG.debug("built %r in the background: %.1f ms (%s %s)", report.name, seconds * 1e3, phase,
                      report.cache[phase])

        runtime.when_built(built)
        return
    after = _build_counts()
    if after[0] > before[0]:
        report.cache[phase] = "miss"
    elif after[1] > before[1]:
        report.cache[phase] = "hit"


def _build_counts() -> tuple[int, int]:
    """(native builds, disk-cache hits) so far of the code builders already imported (the C
    compiler, the emulator's g++, NVRTC): a runtime's build phase hit its cache if only hits grew."""
    import sys

    builds = hits = 0
    for name in ("luminal.kernels.cpu.build", "luminal.kernels.emulator.build"):
        stats = getattr(sys.modules.get(name), "stats", None)
        builds += getattr(stats, "builds", 0)
        hits += getattr(stats, "cache_hits", 0)
    nvrtc = sys.modules.get("luminal.kernels.nvrtc")
    if nvrtc is not None and nvrtc.default_compiler.cache_info().currsize:
        compiler = nvrtc.default_compiler()
        builds += compiler.compiles
        hits += compiler.disk_hits + compiler.memory_hits
    return builds, hits


def compile_graph(graph, *, device: str | Device = "cpu", optimize: bool | None = None,
                  precision: str | None = None, search: float | None = None) -> CompiledGraph:
    """Compile a builder `Graph` for `device`; `precision` ("float64" or "float32"): its calls', fixed
    (None: `luminal.set_precision`'s at each call, else the device's default; `luminal.precision`)."""
    device = devices.resolve(device, precision)
    if not graph.outputs:
        raise LuminalError("the graph has no outputs; call g.output(tensor) first")
    names = [n for n, _ in graph.outputs]
    return compile_outputs(list(graph.inputs.values()), graph.output_nodes, names, device=device,
                           optimize=optimize, name=graph.name, search=search)
