"""Running ASan/UBSan emulator builds (`build(..., mode="asan")`).

An ASan-instrumented `.so` loads only into a process whose first library is the ASan runtime, so
`run_python_under_asan(code)` runs a snippet under `LD_PRELOAD=$(g++ -print-file-name=libasan.so)`;
a memory error or UB aborts it with a report naming `kernel.cu:LINE`. NumPy serves small arrays
from its own cache: give arrays a few KiB for reliable detection.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]  # the directory that holds the `luminal` package


@functools.cache
def libasan_path() -> str | None:
    """The compiler's libasan.so, or None if it has none."""
    cxx = os.environ.get("CXX", "g++")
    try:
        path = subprocess.run([cxx, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return None
    return path if os.path.isabs(path) and os.path.exists(path) else None  # bare name: not found


def asan_runtime_loaded() -> bool:
    try:
        with open("/proc/self/maps") as maps:
            return "libasan" in maps.read()
    except OSError:
        return False


def asan_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for a child process that can load ASan emulator builds."""
    lib = libasan_path()
    if lib is None:
        raise RuntimeError("the compiler has no libasan.so (install libasan for your g++)")
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = lib
    # Python itself "leaks" at exit; stop at the first error with a stack trace
    env.setdefault("ASAN_OPTIONS", "detect_leaks=0:halt_on_error=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p)
    return env


def run_python_under_asan(code: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    """Run `python -c code` under ASan+UBSan; extra keyword arguments become environment variables.
    Returns the completed process (check `returncode`, read `stdout`/`stderr`)."""
    return subprocess.run([sys.executable, "-c", code], env={**asan_environment(), **env},
                          capture_output=True, text=True, timeout=timeout)
