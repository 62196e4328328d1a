"""Shared test setup: tests/ is importable (for the op-case table in op_cases.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
