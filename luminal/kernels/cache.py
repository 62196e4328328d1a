"""The on-disk cache shared by the NVRTC compiler and the emulator build.

Root: `$LUMINAL_CACHE_DIR`, else `~/.cache/luminal`; each tool keeps its own subdirectory.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(kind: str) -> Path:
    """`<root>/<kind>`, created on first use."""
    root = os.environ.get("LUMINAL_CACHE_DIR") or Path.home() / ".cache" / "luminal"
    path = Path(root) / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_atomic(path: Path, data: bytes) -> None:
    """Write via a temporary file and rename, so a concurrent reader (pytest-xdist worker,
    another process) never sees a half-written entry."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
