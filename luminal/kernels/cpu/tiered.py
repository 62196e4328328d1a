"""`device="cpu"` while its library builds (README: "A cold `cpu` build runs in the background").

The library builds on a thread that starts after the first call (or `FIRST_CALL_WAIT_S`); that
call, if the NumPy runtime would take it under `REFERENCE_BUDGET_S`, runs on the reference
computing as the C does (`precision.C`), so its last bits may differ, never its overflows or NaNs.
Later calls wait for the C. The thread is not a daemon (the next process finds the library), holds
the runtime only weakly (a freed runtime cancels its build), and is started again in a forked child.
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
    """`LUMINAL_TIERED=0`: everything a compile does (cache writes included) happens before it returns."""
    return os.environ.get(TIERED_ENV, "1") == "0"


def enabled() -> bool:
    """Whether a cold build may serve the first call from the NumPy runtime (not in deterministic mode)."""
    deterministic = getattr(sys.modules.get("torch"), "are_deterministic_algorithms_enabled", None)
    return not turned_off() and not (deterministic is not None and deterministic())


# The NumPy runtime's cost, roughly: per op, per element an op writes (a FusedElementwise one array
# per node of its expression), per GEMM multiply-add (README's Decisions compare it to runs).
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
        if n.op in (Op.MAT_MUL, Op.GROUPED_MAT_MUL):
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
    """`fn()`, an exception it raises debug-logged, never raised: a task off the first call's path
    (a cache write, a report line) must not break the model's calls."""
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

    # after the first call: it gets the cores, not the renderer and the compilers
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
    """The NumPy runtime for the first call, the compiled one for every later call; other attributes
    are the compiled runtime's, waited for."""

    restored = False  # not rebuilt from stored artifacts (the compile cache asks)
    builds_in_background = True  # after_first_call, when_built: its own

    def __init__(self, outputs, build: Callable[[], tuple], reference, warn: Callable[[str, str], None]):
        """`build()`, run on the background thread, returns `(runtime, warning)`: the compiled runtime
        (or a fallback) and None or the `(key, message)` to `warn` once in the next caller's thread."""
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
        """The build thread, holding this runtime only weakly: a freed runtime cancels its build, so
        dropped models leave no compilers behind."""
        from luminal.kernels.cpu import build_queue

        self._ticket = build_queue.Ticket()
        self._finalizer = weakref.finalize(self, _cancel, self._ticket, self._first_done)
        self._finalizer.atexit = False  # at exit the process waits for the build (the next process finds it)
        self._thread = threading.Thread(target=_build_thread, name="luminal-build",
                                        args=(weakref.ref(self), self._ticket, self._build_fn, self._first_done))
        self._thread.start()

    def _restart_after_fork(self) -> None:
        """In a forked child the parent's build thread is gone (its events and locks may stay held):
        fresh ones, and the build started again here."""
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
        """Run `fn()` (the compile cache's writes) on the build thread after the first call, before
        the build (now, if the thread is past that); its exceptions are logged, never raised."""
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
        return self.call_donating(feeds, frozenset())

    def call_donating(self, feeds: dict, donated: frozenset):
        """Donations pass on to the C runtime; the NumPy runtime's calls keep their inputs."""
        compiled = self._served
        if compiled is not None:  # built, and nothing left to raise or warn: the C, directly
            return compiled.call_donating(feeds, donated)
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
                        return reference.run(arrays, bindings)
                finally:
                    self._first_done.set()  # the build may start
        return self.wait().call_donating(feeds, donated)

    def run(self, ins: list, bindings: dict):
        return self.wait().run(ins, bindings)

    def bound(self, feeds: dict):
        """The C runtime's `bound` once it serves calls directly; None before."""
        compiled = self._served
        return None if compiled is None else compiled.bound(feeds)

    def pack_weights(self) -> None:
        """`CpuRuntime.pack_weights` on the C runtime once built (now, if it is); the NumPy runtime
        serving meanwhile packs nothing."""
        def pack(runtime, _seconds):
            if hasattr(runtime, "pack_weights"):  # not the NumPy runtime a failed build leaves
                runtime.pack_weights()

        self.when_built(pack)

    def weights_changed(self) -> None:
        compiled = self._compiled
        if compiled is not None and hasattr(compiled, "weights_changed"):
            compiled.weights_changed()

    def packed_generation(self):
        """`CpuRuntime.packed_generation` of the C runtime once built; None before (the NumPy
        runtime reads every weight in place)."""
        compiled = self._compiled
        return compiled.packed_generation() if compiled is not None and hasattr(compiled, "packed_generation") else None

    def packed_addresses(self) -> list[int]:
        compiled = self._compiled
        return compiled.packed_addresses() if compiled is not None and hasattr(compiled, "packed_addresses") else []

    def report_lines(self) -> list[str]:
        if not self._ready.is_set():
            return ["  cpu: the C library is building in the background; "
                    f"{self.reference_calls} call(s) ran on the NumPy runtime so far"]
        lines = [] if self._compiled is None else list(self._compiled.report_lines())  # None: the build failed
        return lines + [f"  cpu: the C library built in the background in {self.build_seconds:.2f} s; "
                        f"{self.reference_calls} call(s) ran on the NumPy runtime meanwhile"]

    @property
    def last_bindings(self) -> dict | None:
        """The dims of the compiled runtime's last call (the roofline's), without waiting: {} before."""
        if not self._ready.is_set() or self._compiled is None:
            return {}
        return self._compiled.last_bindings or {}

    def __getattr__(self, name: str):
        if name.startswith("__") or name in _OWN:  # not set yet (a copy, a half-made object): no recursion
            raise AttributeError(name)
        return getattr(self.wait(), name)
