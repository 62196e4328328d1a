"""What every device's runtime offers the compiled graph (`compiler.py`) and the compile cache:
one base class whose defaults are what a runtime without the hook means, so that callers read
attributes instead of probing with getattr. `NumpyRuntime`, `CpuRuntime`, `TieredRuntime` (the
cpu device while its C builds) and `KernelRuntime` (cuda, cuda-emulator) derive from it."""

from __future__ import annotations

from collections.abc import Callable


class Runtime:
    """Executes one optimized graph: `runtime(feeds) -> outputs`."""

    restored: bool = False  # rebuilt from the compile cache's stored artifacts, nothing rendered
    plan = None  # the kernel plan it launches (kernel devices), else None
    build_outcome: str | None = None  # its build's cache answer ("hit"/"miss"), when it built code
    builds_in_background: bool = False  # its code is still building: the two hooks below wait for it
    last_bindings: dict[str, int] | None = None  # the symbolic dims of its latest call (the roofline's)

    def __call__(self, feeds: dict) -> list:
        raise NotImplementedError

    def call_donating(self, feeds: dict, donated: frozenset) -> list:
        """`self(feeds)` where the caller gives up the memory of the inputs named in `donated`; a
        runtime that can write into it overrides this (the C runtime: `kernels/cpu/donation.py`)."""
        return self(feeds)

    def report_lines(self) -> list[str]:
        """Its own lines for the compile report (the kernel devices' CUDA-graph cache, ...)."""
        return []

    def artifacts(self) -> dict | None:
        """What the compile cache stores to rebuild it without rendering (None: nothing)."""
        return None

    def after_first_call(self, fn: Callable[[], None]) -> None:
        """Run `fn()` off the first call's path: a runtime that builds in the background runs it
        on its build thread once the first call is over; here, now."""
        fn()

    def when_built(self, fn: Callable[[Runtime, float], None]) -> None:
        """Call `fn(built_runtime, seconds)` once its code is built: here, built already, now."""
        fn(self, 0.0)
