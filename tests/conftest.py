"""Shared test setup: tests/ is importable (for the op-case table in op_cases.py), and a failure
inside the rewriter raises (LUMINAL_EGRAPH_STRICT=1) instead of silently falling back to the
unoptimized graph, everywhere: set at import, so module-scoped fixtures and subprocesses see it."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("LUMINAL_EGRAPH_STRICT", "1")
os.environ.setdefault("LUMINAL_COMPILE_CACHE", "0")  # off: compiles stay independent (its tests turn it on)
# off: every call of a cpu-compiled graph runs the C, so the tests that compare it with the NumPy
# runtime compare the C from the first call on (tests/cpu/test_cpu_tiered.py turns it on)
os.environ.setdefault("LUMINAL_TIERED", "0")


# LUMINAL_ISA=avx2 (`make test-avx2`): the whole suite as on a CPU without AVX-512, torch's and the
# BLAS's kernels included. `import luminal` sets their variables (isa.py); they read them when they
# load, so a library loaded before it would give this CPU's answers: an error here.
_late, _env = sorted(m for m in ("numpy", "torch") if m in sys.modules), dict(os.environ)
import luminal.kernels.cpu.isa as _isa  # noqa: E402 - after the snapshot above

if _late and (_unset := [k for k in _isa.library_environment() if k not in _env]):
    raise RuntimeError(f"LUMINAL_ISA={_isa.name()}: {', '.join(_late)} was imported before tests/conftest.py; "
                       f"set {', '.join(_unset)} in the environment instead")


import pytest  # noqa: E402


@pytest.fixture
def one_library(monkeypatch):
    """Whether a library links the GEMM object is the machine's load's choice while the object is
    not built (a fresh cache folder; `kernels/cpu/program.py`): held one way, so two renders of one
    graph are one library whatever the load between them."""
    from luminal.kernels.cpu import build

    monkeypatch.setattr(build, "spare_core", lambda: True)
