"""The on-disk cache shared by the NVRTC compiler and the emulator build.

Root: `$LUMINAL_CACHE_DIR`, else `~/.cache/luminal`, created 0o700, a subdirectory per tool. What
is in it gets loaded, so a folder another user owns or others may write is refused; it, and one
that cannot be written, warns once (`CacheWarning`) and the process builds in a private temporary
folder instead. `prune` bounds each subdirectory (`$LUMINAL_CACHE_MAX_MB`), least recently used first.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import shutil
import stat
import tempfile
import threading
import time
import warnings
from pathlib import Path

from luminal.errors import CacheWarning

MAX_MB = 1024  # per subdirectory; $LUMINAL_CACHE_MAX_MB overrides
RECENT_S = 300.0  # entries used this recently are never pruned: another process may be reading them


def cache_dir(kind: str) -> Path:
    """`<root>/<kind>`, created (private) on first use; the private temporary folder's `<kind>`
    when the root is refused or cannot be used (see above). OSError only when neither can be made."""
    root = Path(os.environ.get("LUMINAL_CACHE_DIR") or Path.home() / ".cache" / "luminal")
    with _lock:
        given_up = _given_up.get(str(root))
    if given_up is None:
        path = root / kind
        try:
            why = _private_folder(root) or _private_folder(path)
        except OSError as exc:
            why = _why(exc)
        if why is None:
            return path
        given_up = _give_up(root, *why)
    private = given_up / kind
    private.mkdir(mode=0o700, exist_ok=True)
    return private


def in_cache(kind: str, fn):
    """`fn(cache_dir(kind))`, again in the private folder (`unusable`) if that raises an OSError."""
    directory = cache_dir(kind)
    try:
        return fn(directory)
    except OSError as exc:
        return fn(unusable(directory, exc))


def unusable(directory: Path, exc: OSError) -> Path:
    """`directory` (a `cache_dir`) failed a write: warn once and return its counterpart in the
    private folder, used for the rest of the process (`exc` raised if it is that folder already)."""
    root = directory.parent
    if _private.get(os.getpid()) == root:
        raise exc
    private = _give_up(root, *_why(exc)) / directory.name
    private.mkdir(mode=0o700, exist_ok=True)
    return private


_lock = threading.Lock()
_given_up: dict[str, Path] = {}  # a root this process does not use -> the private folder it uses instead
_private: dict[int, Path] = {}  # pid -> that process's private folder (a forked child makes its own)
_warned: set[tuple[str, str]] = set()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a parent's thread may have held it


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _private_folder(path: Path) -> tuple[str, str] | None:
    """Create `path` (mode 0o700) if it is missing; (cause, why) it must not be used, or None.
    OSError when it cannot be created."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    st, link = os.stat(path), os.lstat(path)  # the target of a symbolic link, and the link itself
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    me = os.geteuid()
    for what, s in (("", st), ("the symbolic link ", link)):
        if s.st_uid != me:
            return "owner", f"{what}{path} is owned by uid {s.st_uid}, not by this user (uid {me})"
    if st.st_mode & 0o022:
        who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if st.st_mode & bit)
        return "mode", f"{path} is writable by {who} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _why(exc: OSError) -> tuple[str, str]:
    cause = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    where = f" ({exc.filename})" if exc.filename else ""
    return cause, f"{exc.strerror or exc}{where} [{cause}]"


def _give_up(root: Path, cause: str, why: str) -> Path:
    """Warn (once per root and cause) that `root` is not used; the private folder used instead."""
    with _lock:
        private = _private_root()
        _given_up[str(root)] = private
        first = (str(root), cause) not in _warned
        _warned.add((str(root), cause))
    if first:
        warnings.warn(f"luminal: the cache folder {root} is not used: {why}; building in the private "
                      f"folder {private} instead (removed at exit; set LUMINAL_CACHE_DIR to a folder "
                      "only this user can write)", CacheWarning, stacklevel=4)
    return private


def _private_root() -> Path:
    """This process's private temporary folder (mode 0o700, removed when it exits); under `_lock`."""
    pid = os.getpid()
    if pid not in _private:
        _private[pid] = path = Path(tempfile.mkdtemp(prefix="luminal-cache-"))
        atexit.register(lambda: os.getpid() == pid and shutil.rmtree(path, ignore_errors=True))
    return _private[pid]


def write_atomic(path: Path, data: bytes) -> None:
    """Write via a temporary file and rename: a concurrent reader never sees a half-written entry."""
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
    """The bytes each cache folder may hold: `$LUMINAL_CACHE_MAX_MB` (a non-number ignored), else `MAX_MB`."""
    try:
        return int(float(os.environ.get("LUMINAL_CACHE_MAX_MB", MAX_MB)) * (1 << 20))
    except ValueError:
        return MAX_MB << 20


def prune(directory: Path, max_bytes: int | None = None, recent_s: float = RECENT_S) -> int:
    """Bound `directory` to `max_bytes` by deleting whole entries (files sharing the name before the
    first dot), least recently used first, none used in the last `recent_s` s; the bytes freed."""
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
