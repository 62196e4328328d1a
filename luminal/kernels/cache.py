"""The on-disk cache shared by the NVRTC compiler and the emulator build.

Root: `$LUMINAL_CACHE_DIR`, else `~/.cache/luminal`; each tool keeps its own subdirectory.
`prune` bounds a subdirectory's size (`$LUMINAL_CACHE_MAX_MB`, 1024 by default), dropping the
least recently used entries first; the NVRTC binaries and the cubins CuPy loads are pruned.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

MAX_MB = 1024  # per subdirectory; $LUMINAL_CACHE_MAX_MB overrides
RECENT_S = 300.0  # entries used this recently are never pruned: another process may be reading them


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


def touch(path: Path) -> bool:
    """Mark a cache hit (the entry becomes the most recently used); False if it is not there."""
    try:
        os.utime(path)
    except OSError:  # absent, or pruned meanwhile: the caller rebuilds it
        return False
    return True


def size_bound() -> int:
    """The size bound of each cache folder: `$LUMINAL_CACHE_MAX_MB` megabytes (fractions allowed;
    a value that is not a number is ignored), else `MAX_MB`."""
    try:
        return int(float(os.environ.get("LUMINAL_CACHE_MAX_MB", MAX_MB)) * (1 << 20))
    except ValueError:
        return MAX_MB << 20


def prune(directory: Path, max_bytes: int | None = None, recent_s: float = RECENT_S) -> int:
    """Bound `directory` to `max_bytes` by deleting whole entries (the files whose names share
    the part before the first dot: `key.bin` and `key.log` go together), least recently used
    first, never one used in the last `recent_s` seconds. Returns the bytes freed."""
    if max_bytes is None:
        max_bytes = size_bound()
    entries: dict[str, list] = {}  # stem -> [last use, bytes, files]
    total = 0
    for f in directory.iterdir():
        try:
            st = f.stat()
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        entry = entries.setdefault(f.name.split(".")[0], [0.0, 0, []])
        entry[0], entry[1] = max(entry[0], st.st_mtime), entry[1] + st.st_size
        entry[2].append(f)
        total += st.st_size
    freed, now = 0, time.time()
    for used, size, files in sorted(entries.values(), key=lambda e: e[0]):
        if total - freed <= max_bytes or now - used < recent_s:
            break
        for f in files:
            f.unlink(missing_ok=True)
        freed += size
    return freed
