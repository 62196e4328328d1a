"""torchvision, imported for its model code only, and tiny random-weight vision models.

torchvision 0.28 (the release that matches torch 2.13) lies in `.venv/torchvision`, off
sys.path (see the Makefile): PyPI ships only its CUDA build, whose C ops (nms, roi_align, ...)
cannot load against the CPU torch, and its `_meta_registrations` then fails at import (fake
kernels for ops that do not exist). `import_torchvision()` imports the package without that one
module: the models, which need no C op, work; torchvision.ops.nms and friends do not.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import torch

TORCHVISION_DIR = Path(__file__).resolve().parents[2] / ".venv" / "torchvision"


def import_torchvision():
    """The torchvision package, or None where it is not installed (pytest.skip on None)."""
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    if not (TORCHVISION_DIR / "torchvision").is_dir():
        return None
    try:
        torch.ops.load_library(str(next(TORCHVISION_DIR.glob("torchvision/_C*.so"))))
        has_ops = True
    except (OSError, StopIteration):
        has_ops = False
    if not has_ops:  # fake kernels of C ops that did not load: skip that one module
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
    sys.path.append(str(TORCHVISION_DIR))
    import torchvision

    return torchvision
