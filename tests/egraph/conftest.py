"""egraph tests: benchmarks/ is importable (the Llama-shaped builder model), and a failure
inside the rewriter raises instead of silently falling back to the unoptimized graph."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


@pytest.fixture(autouse=True)
def strict_egraph(monkeypatch):
    monkeypatch.setenv("LUMINAL_EGRAPH_STRICT", "1")
    monkeypatch.delenv("LUMINAL_OPTIMIZE", raising=False)
