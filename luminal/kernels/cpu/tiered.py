"""`device="cpu"` while its library builds: the first call on the NumPy reference runtime.

A graph whose C library is not in the cache costs its compile a C build (0.5-0.6 s for a
32-layer Llama on two cores, more with the per-machine objects on a fresh cache). `TieredRuntime`
returns at once and builds the library on a background thread that starts after the model's
*first* call (or `FIRST_CALL_WAIT_S` without one), its compilers at a lower priority; that call, if it comes before the library is ready and the NumPy runtime would take it under
`REFERENCE_BUDGET_S` (estimated from the graph at that call's dims: `reference_seconds`; a large
conv net's window products take longer than the build), runs on the NumPy runtime (the executable
specification every device is tested against) at the C's working precision (`like="cpu"`:
f32 elementwise math, sums in double, GEMMs in f32 unless `set_precision("float64")`), and
every later call runs on the compiled C, waiting for the build if it is still going. Like
TorchScript's profiling executor, whose first calls ran unfused: the first call's last bits may
differ from later calls' (a region's ops in another order, a sum in another order), never its
overflows, underflows or NaNs: the reference's own float64 intermediates would turn
`sqrt(x * x)` at 1e30 into 1e30 where the C (and torch) give inf.

Off (every call waits for the C, as before) with `LUMINAL_TIERED=0`, and whenever
`torch.use_deterministic_algorithms(True)` is on: bitwise repeatable calls are then the
contract. The compile report says which runtime the first call ran on and how long the
background build took. A build that fails falls back to the NumPy runtime with the same warning
`make` gives, raised in the calling thread at the next call. The build thread is not a daemon:
a process that exits right after its first call waits for the build, so that the next process
finds the library in the cache. A child forked while a build runs starts the build again itself
(`os.register_at_fork`): the parent's thread is not in the child. The compile cache's writes of
that compile (the optimized graph's entry, torch.compile's link to it) run on the same thread
before the build (`after_first_call`), off the first call's path too. The thread holds the
runtime only weakly: a runtime freed before its build is done cancels it (`build_queue.Ticket`: a
compiler still queued for a slot never starts, a running one is killed), so a suite of small
models leaves no compilers behind; a caller waiting for the build moves its compilers first.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections.abc import Callable

from luminal.runtime.protocol import Runtime

TIERED_ENV = "LUMINAL_TIERED"


def turned_off() -> bool:
    """`LUMINAL_TIERED=0`: everything a compile does happens before it returns (no first call on
    the NumPy runtime, no compile cache write after the first call: `compiler.after_first_call`)."""
    return os.environ.get(TIERED_ENV, "1") == "0"


def enabled() -> bool:
    """Whether a cold build may serve the first call from the NumPy runtime (see above)."""
    if turned_off():
        return False
    torch = sys.modules.get("torch")
    deterministic = getattr(torch, "are_deterministic_algorithms_enabled", None)
    return not (deterministic is not None and deterministic())


# The NumPy runtime's cost, roughly (float64 working precision): ~20 us per op, ~2 ns per element
# an op writes (a FusedElementwise writes one array per level of its expression; a WindowReduce
# sums its window products as einsum goes: twice that per product), and a GEMM's multiply-adds at
# 1/32 of that (BLAS). On the benchmark models (2-core Zen 5): the 32-layer Llama at 16 tokens
# estimates 0.036 s and runs 0.04-0.055 s; resnet-ish 0.06 s against 0.046-0.06 s; mobilenet-ish
# 0.26 s against 0.26-0.45 s. The C build those calls race takes 0.5-1.5 s on a fresh cache: a
# first call the reference would take longer than REFERENCE_BUDGET_S waits for the C (measured on
# mobilenet-ish, cold: 1.32-1.34 s on the reference against 1.48-1.58 s waiting).
OP_SECONDS, ELEMENT_SECONDS, MAC_SECONDS = 20e-6, 2e-9, 2e-9 / 32
PHILOX_ELEMENTS = 32  # a Philox element costs the reference ~70 ns (10 rounds of uint64 products), ~32 elements' worth
REFERENCE_BUDGET_S = 0.3
FIRST_CALL_WAIT_S = 1.0  # the build starts after the first call, or this long after the compile without one


def reference_seconds(order, bindings: dict[str, int]) -> float:
    """A rough estimate of one call of the NumPy runtime running the nodes `order` at dims `bindings`."""
    from luminal.hlir import symbolic as sym
    from luminal.hlir.ops import Op

    def size(shape) -> int:
        total = 1
        for d in shape:
            total *= d if type(d) is int else int(sym.evaluate(d, bindings))
        return total

    ops, elements, macs = 0, 0, 0
    for n in order:
        if n.op in (Op.INPUT, Op.CONSTANT, Op.VIEW):
            continue
        ops += 1
        if n.op is Op.MAT_MUL:
            k = n.src[0].shape[-1]
            macs += size(n.shape) * size((k,))
        elif n.op is Op.WINDOW_REDUCE:
            elements += 2 * size(n.src[0].shape)  # float64 products summed as einsum goes (`_window_sum`)
        elif n.op is Op.FUSED_ELEMENTWISE:
            elements += size(n.shape) * _levels(n.arg)
        else:
            elements += size(n.shape) * (PHILOX_ELEMENTS if n.op is Op.PHILOX else 1)
    return ops * OP_SECONDS + elements * ELEMENT_SECONDS + macs * MAC_SECONDS


def _levels(expr) -> int:
    from luminal.hlir.ops import Op

    seen, stack, philox = set(), [expr], 0
    while stack:
        e = stack.pop()
        if id(e) not in seen:
            seen.add(id(e))
            philox += e.op is Op.PHILOX
            stack.extend(e.src)
    return max(1, len(seen) + philox * (PHILOX_ELEMENTS - 1))


_PENDING: weakref.WeakSet = weakref.WeakSet()  # runtimes whose build has not ended (this process's)


def quietly(fn: Callable) -> None:
    """`fn()`, an exception it raises logged (at debug level), never raised: a task off the first
    call's path (a cache write, a report line) is never a reason to break the model's calls."""
    try:
        fn()
    except Exception:  # noqa: BLE001 - see above
        from luminal.debug import LOG

        LOG.debug("luminal: a task off the first call's path failed", exc_info=True)


def _after_fork_in_child() -> None:
    for runtime in list(_PENDING):
        runtime._restart_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

_OWN = frozenset({"_compiled", "_served", "_ready", "_error", "_warning", "_first_done", "_first_taken", "_lock",
                  "_callbacks", "_reference", "_warn", "_thread", "_build_fn", "_done", "_started", "_early",
                  "_ticket", "_finalizer"})


def _build_thread(ref: weakref.ref, ticket, build_fn: Callable, first_done: threading.Event) -> None:
    """A `TieredRuntime`'s build (`ref`: the runtime, held only while its fields are read or written)."""
    from luminal.kernels.cpu import build_queue

    # after the first call (or FIRST_CALL_WAIT_S without one): its Python and the NumPy
    # runtime get the cores, not the renderer and the compilers (on two cores those slowed
    # the 32-layer Llama's first call by a third)
    first_done.wait(FIRST_CALL_WAIT_S)
    runtime = ref()
    if runtime is None or ticket.cancelled:
        return
    with runtime._lock:
        runtime._started = True
        early, runtime._early = runtime._early, []
    del runtime
    for fn in early:
        quietly(fn)
    early = fn = None  # noqa: F841 - the tasks' closures are not kept alive by this frame
    t0 = time.perf_counter()
    compiled = warning = error = None
    try:
        with build_queue.for_ticket(ticket):
            compiled, warning = build_fn()
    except build_queue.BuildCancelled:
        return
    except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
        error = exc
    runtime = ref()
    if runtime is not None:
        runtime._finish(compiled, warning, error, time.perf_counter() - t0)


def _cancel(ticket, first_done: threading.Event) -> None:
    """The runtime was freed: its build stops (or never starts: the thread wakes at once)."""
    ticket.cancel()
    first_done.set()


class TieredRuntime(Runtime):
    """The NumPy runtime for the first call, the compiled one (`build()`'s) for every later call.
    Other attributes (`source`, `program`, `stats()`, `profile()`, ...) are the compiled runtime's,
    waited for."""

    restored = False  # not rebuilt from stored artifacts (the compile cache asks)
    builds_in_background = True  # after_first_call, when_built: its own

    def __init__(self, outputs, build: Callable[[], tuple], reference, warn: Callable[[str, str], None]):
        """`build()`, run on the background thread: `(runtime, warning)`, the compiled runtime (or a
        fallback) and None (or the `(key, message)` of a warning to give once, through `warn`, in
        the thread that next calls); `reference`: the NumPy runtime."""
        self.outputs = list(outputs)
        self._warn = warn
        self._reference = reference
        self._compiled = None
        self._served = None  # the compiled runtime once a caller has seen it built (the fast path of a call)
        self._error: BaseException | None = None
        self._warning: tuple[str, str] | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._first_taken = False
        self._first_done = threading.Event()  # the first call is over, or waits for the build
        self._callbacks: list[Callable] = []
        self.reference_calls = 0  # calls the NumPy runtime served
        self.build_seconds: float | None = None  # the background build's wall time, once done
        self.reference_estimate: float | None = None  # `reference_seconds` of the first call, if it came early
        self._build_fn = build
        self._done = False  # the build has ended (its callbacks taken): set under `_lock`
        self._started = False  # the thread is past the first call (its early tasks taken): set under `_lock`
        self._early: list[Callable] = []  # `after_first_call` tasks, run before the build
        _PENDING.add(self)
        self._start()

    def _start(self) -> None:
        """The build thread, which holds this runtime only weakly: a runtime whose graph is freed
        cancels its build (`build_queue.Ticket`: not started yet, it never starts; its compilers are
        killed), so that dropped models leave no compilers behind."""
        from luminal.kernels.cpu import build_queue

        self._ticket = build_queue.Ticket()
        self._finalizer = weakref.finalize(self, _cancel, self._ticket, self._first_done)
        self._finalizer.atexit = False  # at exit the process waits for the build (the next process finds it)
        self._thread = threading.Thread(target=_build_thread, name="luminal-build",
                                        args=(weakref.ref(self), self._ticket, self._build_fn, self._first_done))
        self._thread.start()

    def _restart_after_fork(self) -> None:
        """In a forked child: the parent's build thread is not there (its events and locks may be
        held forever): fresh ones, and the build started again here, so that no call waits on
        a build only the parent runs (a server forking workers after the compile)."""
        first_done = self._first_done.is_set()
        self._ready, self._lock, self._first_done = threading.Event(), threading.Lock(), threading.Event()
        if first_done:
            self._first_done.set()
        self._finalizer.detach()
        self._start()

    def _finish(self, compiled, warning, error, seconds: float) -> None:
        self._compiled, self._warning, self._error, self.build_seconds = compiled, warning, error, seconds
        _PENDING.discard(self)
        with self._lock:
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:  # before any caller goes on: the report and the stored artifacts are whole
            self._notify(fn)
        self._ready.set()

    def _notify(self, fn) -> None:
        if self._compiled is not None:
            quietly(lambda: fn(self._compiled, self.build_seconds))

    def after_first_call(self, fn: Callable) -> None:
        """Run `fn()` on the build thread once the first call is over, before the build (now, in
        this thread, if the thread is past that): the compile cache's writes, off the first
        call's path. An exception `fn` raises is logged, never raised."""
        with self._lock:
            if not self._started:
                self._early.append(fn)
                return
        quietly(fn)

    def when_built(self, fn: Callable) -> None:
        """Call `fn(compiled_runtime, seconds)` once the build is done (now, if it is)."""
        with self._lock:
            if not self._done:
                self._callbacks.append(fn)
                return
        self._notify(fn)

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def wait(self):
        """The compiled runtime, once built (the build's error raised here, in the caller's thread)."""
        self._first_done.set()  # someone waits for the build: it starts now
        self._ticket.hurry()  # its compilers before the background builds of other graphs
        self._ready.wait()
        if self._error is not None:
            raise self._error
        if self._warning is not None:
            warning, self._warning = self._warning, None
            self._warn(*warning)
        self._served = self._compiled
        return self._compiled

    def __call__(self, feeds: dict):
        compiled = self._served
        if compiled is not None:  # built, and nothing left to raise or warn: the C, directly
            return compiled(feeds)
        if not self._ready.is_set():
            with self._lock:
                first, self._first_taken = not self._first_taken, True
            if first:
                from luminal.runtime import bind_inputs

                try:
                    reference = self._reference
                    arrays, bindings = bind_inputs(reference.inputs, feeds)  # a bad input: the reference's error
                    self.reference_estimate = reference_seconds(reference.order, bindings)
                    if self.reference_estimate <= REFERENCE_BUDGET_S and not self._ready.is_set():
                        self.reference_calls += 1
                        return reference.run(arrays, bindings, like="cpu")
                finally:
                    self._first_done.set()  # the build may start
        return self.wait()(feeds)

    def run(self, ins: list, bindings: dict):
        return self.wait().run(ins, bindings)

    def report_lines(self) -> list[str]:
        if not self._ready.is_set():
            return ["  cpu: the C library is building in the background; "
                    f"{self.reference_calls} call(s) ran on the NumPy runtime so far"]
        inner = getattr(self._compiled, "report_lines", None)
        lines = list(inner()) if callable(inner) else []
        return lines + [f"  cpu: the C library built in the background in {self.build_seconds:.2f} s; "
                        f"{self.reference_calls} call(s) ran on the NumPy runtime meanwhile"]

    @property
    def last_bindings(self) -> dict | None:
        """The dims of the compiled runtime's last call (the roofline's), without waiting: {} before."""
        if not self._ready.is_set() or self._compiled is None:
            return {}
        from luminal.kernels.roofline import last_bindings

        return last_bindings(self._compiled) or {}

    def __getattr__(self, name: str):
        if name.startswith("__") or name in _OWN:  # not set yet (a copy, a half-made object): no recursion
            raise AttributeError(name)
        return getattr(self.wait(), name)
