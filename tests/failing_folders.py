"""A cache folder that fails its writes as a full or read-only one does, where this machine
cannot make one real (tests/cpu/test_cpu_cache_folder.py, tests/kernels/test_nvrtc.py)."""

import errno
import os


def failing_under(root, real, code: int = errno.ENOSPC):
    """`real` (open, write_atomic, ...), except that a call on a path under `root` raises the
    OSError `code` gives (ENOSPC: full; EROFS: read-only)."""
    def call(path, *args, **kwargs):
        if str(path).startswith(str(root)):
            raise OSError(code, os.strerror(code), str(path))
        return real(path, *args, **kwargs)

    return call
