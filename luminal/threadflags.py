"""Per-thread settings that hold for the extent of a `with` block, and the garbage-collector pause
the compile path uses. One helper for what several modules need: a build running in the
background, the build a thread works for, the working precision of a reference call, a thread
whose work must leave the process-wide collector alone."""

from __future__ import annotations

import contextlib
import gc
import threading


class ThreadValue:
    """A value per thread: `default` until a `with value.set(x):` block on that thread, restored
    when the block ends (blocks nest)."""

    def __init__(self, default=None):
        self._local = threading.local()
        self._default = default

    def get(self):
        return getattr(self._local, "value", self._default)

    @contextlib.contextmanager
    def set(self, value):
        outer = self.get()
        self._local.value = value
        try:
            yield
        finally:
            self._local.value = outer


background = ThreadValue(False)  # this thread's C compilers run at a lower priority (`kernels/cpu/build.py`)


def in_background():
    """Inside, the C compilers this thread starts run at `build.BACKGROUND_NICE`: a build beside
    work a caller waits for takes the cores that work leaves idle, not its own."""
    return background.set(True)


_untouched = ThreadValue(False)


def gc_untouched():
    """Inside, on this thread, `gc_paused` leaves the collector alone: for work that runs beside
    the user's threads (the compile cache's writes on a background build thread), where a pause
    of the process-wide collector could turn back on one that a user's thread turned off."""
    return _untouched.set(True)


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic garbage collector (as `egraph.pipeline.optimize` does): decoding and
    spelling graphs allocate many small objects, none in cycles, and inside torch.compile every
    collection walks Dynamo's whole heap (seconds at 32 layers).

    On resuming, what the pause allocated goes straight to the oldest generation (`gc.freeze`
    then `gc.unfreeze`): left in the youngest, it is all walked by the collection the next
    allocation starts, to promote objects that mostly live as long as the compiled model.
    Cycles among them wait for the next full collection instead. Where the process has frozen
    objects of its own (a server that froze its heap before forking workers), `unfreeze` would
    thaw them too: then the young collection is paid as before."""
    if _untouched.get():
        yield
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()
