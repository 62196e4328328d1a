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
