"""`device="cpu"` while its library builds: the first call on the NumPy reference runtime.

A graph whose C library is not in the cache costs its compile a C build (0.5-0.6 s for a
32-layer Llama on two cores, once per machine and graph). `TieredRuntime` starts that build on
a background thread as soon as the graph is optimized and returns at once; the model's *first*
call, if it comes before the library is ready, runs on the NumPy runtime (the executable
specification every device is tested against: in float64 working precision by default, so that
answer is, if anything, the more precise one), and every later call runs on the compiled C,
waiting for the build if it is still going. Like TorchScript's profiling executor, whose first
calls ran unfused: the first call's last bits may differ from later calls' (the reference
rounds once from float64, the C from float32, as PyTorch's kernels do), never more than the
two runtimes differ everywhere.

Off (every call waits for the C, as before) with `LUMINAL_TIERED=0`, and whenever
`torch.use_deterministic_algorithms(True)` is on: bitwise repeatable calls are then the
contract. The compile report says which runtime the first call ran on and how long the
background build took. A build that fails falls back to the NumPy runtime with the same warning
`make` gives, raised in the calling thread at the next call. The build thread is not a daemon:
a process that exits right after its first call waits for the build, so that the next process
finds the library in the cache.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

TIERED_ENV = "LUMINAL_TIERED"


def enabled() -> bool:
    """Whether a cold build may serve the first call from the NumPy runtime (see above)."""
    if os.environ.get(TIERED_ENV, "1") == "0":
        return False
    torch = sys.modules.get("torch")
    deterministic = getattr(torch, "are_deterministic_algorithms_enabled", None)
    return not (deterministic is not None and deterministic())


class TieredRuntime:
    """The NumPy runtime for the first call, the compiled one (`build()`'s) for every later call.
    Other attributes (`source`, `program`, `stats()`, `profile()`, ...) are the compiled runtime's,
    waited for."""

    restored = False  # not rebuilt from stored artifacts (the compile cache asks)

    def __init__(self, outputs, build: Callable[[], tuple], reference):
        """`build()`, run on the background thread: `(runtime, warning)`, the compiled runtime (or a
        fallback) and None (or the `(key, message)` of a warning to give once); `reference`: the
        NumPy runtime."""
        self.outputs = list(outputs)
        self._reference = reference
        self._compiled = None
        self._error: BaseException | None = None
        self._warning: tuple[str, str] | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._first_taken = False
        self._callbacks: list[Callable] = []
        self.reference_calls = 0  # calls the NumPy runtime served
        self.build_seconds: float | None = None  # the background build's wall time, once done
        self._thread = threading.Thread(target=self._build, args=(build,), name="luminal-build")
        self._thread.start()

    def _build(self, build) -> None:
        t0 = time.perf_counter()
        try:
            self._compiled, self._warning = build()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            self._error = exc
        self.build_seconds = time.perf_counter() - t0
        with self._lock:
            self._ready.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            self._notify(fn)

    def _notify(self, fn) -> None:
        if self._compiled is not None:
            try:
                fn(self._compiled, self.build_seconds)
            except Exception:  # noqa: BLE001 - a callback (storing artifacts, a report line) must not break calls
                pass

    def when_built(self, fn: Callable) -> None:
        """Call `fn(compiled_runtime, seconds)` once the build is done (now, if it is)."""
        with self._lock:
            if not self._ready.is_set():
                self._callbacks.append(fn)
                return
        self._notify(fn)

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def wait(self):
        """The compiled runtime, once built (the build's error raised here, in the caller's thread)."""
        self._ready.wait()
        if self._error is not None:
            raise self._error
        if self._warning is not None:
            from luminal.kernels.cpu.runtime import _warn_once

            warning, self._warning = self._warning, None
            _warn_once(*warning)
        return self._compiled

    def __call__(self, feeds: dict):
        if not self._ready.is_set():
            with self._lock:
                first, self._first_taken = not self._first_taken, True
            if first:
                self.reference_calls += 1
                return self._reference(feeds)
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
        if name.startswith("__") or name in ("_compiled", "_ready", "_error", "_warning"):
            raise AttributeError(name)
        return getattr(self.wait(), name)
