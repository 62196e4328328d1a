"""The build queue: every compiler of this process runs in one of `slots`, one per core, those a
caller waits for first. A build belongs to a `Ticket` its freed graph cancels: a compiler waiting
for a slot never starts, a running one is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading

from luminal.threadflags import ThreadValue


class BuildCancelled(Exception):
    """The graph this build was for is gone (`Ticket.cancel`)."""


class Ticket:
    """A build's handle, held by the thread running it (`for_ticket`)."""

    def __init__(self):
        self.cancelled = False
        self.urgent = False  # a caller waits for it: its compilers go before background ones
        self._jobs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def running(self, job: subprocess.Popen) -> None:
        with self._lock:
            self._jobs.add(job)
            cancelled = self.cancelled
        if cancelled:
            _kill(job)

    def done(self, job: subprocess.Popen) -> None:
        with self._lock:
            self._jobs.discard(job)

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            jobs = list(self._jobs)
        for job in jobs:
            _kill(job)
        slots.wake()

    def hurry(self) -> None:
        self.urgent = True
        slots.wake()


def _kill(job: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        os.killpg(job.pid, signal.SIGTERM)


current = ThreadValue(None)  # the build (Ticket) this thread runs, if any


def for_ticket(ticket: Ticket):
    """The compilers this thread (and the unit threads it starts) runs inside the block belong to `ticket`."""
    return current.set(ticket)


def ticket() -> Ticket | None:
    """The build this thread runs (`for_ticket`), if any."""
    return current.get()


def check_cancelled() -> None:
    held = ticket()
    if held is not None and held.cancelled:
        raise BuildCancelled


class _Slots:
    """At most `n` compilers at once; one a caller waits for (not `background`, or of an
    urgent ticket) goes before any background one."""

    def __init__(self, n: int):
        self.n, self.running, self.peak, self.front = n, 0, 0, 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def slot(self, ticket: Ticket | None, background: bool = False):
        counted = False
        with self._cond:
            try:
                while True:
                    if ticket is not None and ticket.cancelled:
                        raise BuildCancelled
                    front = not background or (ticket is not None and ticket.urgent)
                    if front != counted:
                        self.front += 1 if front else -1
                        counted = front
                    if self.running < self.n and (front or not self.front):
                        break
                    self._cond.wait()
            finally:
                if counted:
                    self.front -= 1
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            yield
        finally:
            with self._cond:
                self.running -= 1
                self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


slots = _Slots(_cores())
if hasattr(os, "register_at_fork"):  # a child runs none of the parent's compilers, and its lock may be held
    os.register_at_fork(after_in_child=lambda: slots.__init__(slots.n))


def compiler_slot():
    """Hold one of the process's compiler slots (`with compiler_slot(): subprocess.run(...)`): for
    compilers run outside build.py (the CUDA emulator's g++)."""
    return slots.slot(ticket())
