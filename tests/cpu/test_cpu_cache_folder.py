"""The cache folder of `device="cpu"` (luminal/kernels/cache.py, luminal/kernels/cpu/build.py):
a folder that cannot be written (read-only, full, a regular file in its path) or that other users
could write warns once (`CacheWarning`) and the model keeps running its C, built in a private
temporary folder; a compiler that does not run warns once and the NumPy runtime serves."""

import builtins
import errno
import os
import shutil
import stat
import subprocess
import warnings

import numpy as np
import pytest
from failing_folders import failing_under

import luminal as lm
from luminal.kernels import cache
from luminal.kernels.cpu import build
from luminal.kernels.cpu import runtime as cpu_runtime
from luminal.kernels.cpu.runtime import CpuRuntime
from luminal.runtime import NumpyRuntime

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


def _graph(scale=2.0):
    g = lm.Graph(f"folder{scale}")
    x = g.input("x", ("n", 8))
    g.output((x * scale).exp().sum(-1) + x.max(-1), "y")
    return g


FEEDS = {"x": np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)}


def _mount_tmpfs(request, path, options: str) -> bool:
    """A real tmpfs at `path`, unmounted after the test (root with mount rights only: containers
    often lack them)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True).returncode:
        return False
    request.addfinalizer(lambda: subprocess.run(["umount", "-l", str(path)], capture_output=True))
    return True


@pytest.fixture
def unusable_root(request, tmp_path, monkeypatch):
    """A cache root in the state `request.param` names, made real where this machine allows
    (chmod for a user, a tmpfs for root), else every write the build opens there fails with the
    errno that state gives."""
    state = request.param
    if state == "a file":
        (tmp_path / "file").write_text("not a folder")
        root = tmp_path / "file" / "cache"
    elif state == "read-only" and os.geteuid() != 0:
        root = tmp_path / "ro"
        (root / "cpu").mkdir(parents=True, mode=0o700)
        for d in (root / "cpu", root):
            d.chmod(0o500)
    elif state == "read-only" and _mount_tmpfs(request, tmp_path / "ro", "ro,size=1m,mode=0700"):
        root = tmp_path / "ro"
    elif state == "full" and _mount_tmpfs(request, tmp_path / "full", "size=64k,mode=0700"):
        root = tmp_path / "full"
        for kind in ("cpu", "graphs"):
            (root / kind).mkdir(mode=0o700)
        fd = os.open(root / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:  # until the file system is full
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)
    else:  # no way to make the state real here: the writes fail as they would
        root = tmp_path / "fake"
        (root / "cpu").mkdir(parents=True, mode=0o700)
        code = errno.EROFS if state == "read-only" else errno.ENOSPC
        monkeypatch.setattr(build, "open", failing_under(root, builtins.open, code), raising=False)
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(root))
    yield root
    if state == "read-only" and os.geteuid() != 0:
        for d in (root, root / "cpu"):
            d.chmod(0o700)


def _cache_warnings(record, root) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, lm.CacheWarning) and str(root) in str(w.message)]


def _private() -> str:
    return str(cache._private[os.getpid()])


@pytest.mark.parametrize("tiered", ["0", "1"])
@pytest.mark.parametrize("unusable_root", ["read-only", "full", "a file"], indirect=True)
def test_a_model_runs_its_c_with_an_unusable_cache_folder(unusable_root, tiered, monkeypatch):
    """Before: the background build's error (OSError, NotADirectoryError) was raised by every
    call after the first; with LUMINAL_TIERED=0 by the compile itself."""
    monkeypatch.setenv("LUMINAL_TIERED", tiered)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        compiled = _graph().compile(device="cpu")
        outs = [compiled(FEEDS)[0] for _ in range(3)]
        rt = compiled.runtime.wait() if tiered == "1" else compiled.runtime
        again = _graph().compile(device="cpu")  # a second model: no second warning
        outs.append(again(FEEDS)[0])
    assert isinstance(rt, CpuRuntime), "the C serves, not the NumPy runtime"
    assert str(rt.library_path).startswith(_private() + os.sep)
    want = NumpyRuntime(compiled.outputs)(FEEDS)[0]
    for out in outs:
        np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-6)
    said = _cache_warnings(record, unusable_root)
    assert len(said) == 1, said
    assert _private() in said[0]


def test_a_compiler_that_cannot_write_in_the_folder_builds_in_the_private_one(tmp_path, monkeypatch):
    """A full disk found by the compiler (its output), not by luminal's own writes: its
    diagnostics name the cause, and the build moves."""
    root = tmp_path / "cache"
    cc = tmp_path / "cc"
    cc.write_text(f"#!/bin/sh\ncase \"$*\" in *{root}*.so*) echo \"cc1: fatal error: cannot write: "
                  f"No space left on device\" >&2; exit 1;; esac\nexec {build.compiler()} \"$@\"\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(root))
    with pytest.warns(lm.CacheWarning, match="No space left on device"):
        compiled = _graph(3.0).compile(device="cpu")
    assert isinstance(compiled.runtime, CpuRuntime)
    assert str(compiled.runtime.library_path).startswith(_private() + os.sep)
    np.testing.assert_allclose(compiled(FEEDS)[0], NumpyRuntime(compiled.outputs)(FEEDS)[0], rtol=2e-6, atol=1e-6)


def test_a_build_that_fails_in_the_private_folder_too_serves_the_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / "file" / "cache"))
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(cache, "_private", {})
    monkeypatch.setattr(__import__("tempfile"), "tempdir", str(tmp_path / "file"))  # nor a private folder
    monkeypatch.setattr(cpu_runtime, "_warned", set())
    with pytest.warns(RuntimeWarning, match="running the NumPy reference runtime"):
        compiled = _graph(4.0).compile(device="cpu")
    assert isinstance(compiled.runtime, NumpyRuntime)
    np.testing.assert_array_equal(compiled(FEEDS)[0], NumpyRuntime(compiled.outputs)(FEEDS)[0])


@pytest.mark.parametrize("tiered", ["0", "1"])
def test_a_compiler_that_does_not_run_warns_once_and_the_reference_serves(tiered, tmp_path, monkeypatch):
    """CC=/bin/false: before, a bare CalledProcessError (from `cc --version`)."""
    monkeypatch.setenv("CC", shutil.which("false"))
    monkeypatch.setenv("LUMINAL_TIERED", tiered)
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_runtime, "_warned", set())
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        compiled = _graph(5.0).compile(device="cpu")
        outs = [compiled(FEEDS)[0] for _ in range(3)]
        outs.append(_graph(5.0).compile(device="cpu")(FEEDS)[0])
    said = [str(w.message) for w in record if "C compiler failed" in str(w.message)]
    assert len(said) == 1 and "false" in said[0] and "does not run" in said[0], said
    want = NumpyRuntime(compiled.outputs)(FEEDS)[0]
    for out in outs:  # (the tiered first call's reference runs in float64: its last bits may differ)
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=0)


# --- a cache root other users could write is refused ---------------------------------------------
def _refused(root, match: str, graph=None):
    """`graph` compiled on the refused `root`: warned, and built in the private folder."""
    before = sorted(root.rglob("*.so"))
    with pytest.warns(lm.CacheWarning, match=match):
        compiled = (graph or _graph(6.0)).compile(device="cpu")
    assert isinstance(compiled.runtime, CpuRuntime)
    assert str(compiled.runtime.library_path).startswith(_private() + os.sep)
    assert sorted(root.rglob("*.so")) == before  # nothing written there
    return compiled


def test_a_cache_root_others_can_write_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(root))
    _refused(root, r"writable by group and others \(mode 777\)")


def _another_users(path, monkeypatch) -> int:
    """`path` (made, 0o700) belongs to another user: given away where this process may (root),
    else this process is someone else (a user cannot give a folder away). Its owner's uid."""
    path.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(path, 54321, 54321)
        return 54321
    owner = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    return owner


def test_a_cache_root_another_user_owns_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "theirs"
    other = _another_users(root, monkeypatch)
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(root))
    _refused(root, f"owned by uid {other}, not by this user")


def test_a_cache_root_linking_to_another_users_folder_is_refused(tmp_path, monkeypatch):
    target = tmp_path / "theirs"
    _another_users(target, monkeypatch)
    (tmp_path / "link").symlink_to(target)
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / "link"))
    _refused(target, "owned by uid")


def test_a_replaced_library_in_a_folder_others_can_write_is_not_loaded(tmp_path, monkeypatch):
    """The attack: another user replaces a cached library and rewrites its sha256 beside it."""
    root = tmp_path / "cache"
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(root))
    honest = _graph(7.0).compile(device="cpu").runtime.library_path
    other = _graph(8.0).compile(device="cpu").runtime.library_path
    # replaced by a rename, as a writer would: writing over the file in place would also change
    # the pages of the library this process has loaded (a crash at exit, not the attack)
    shutil.copyfile(other, honest.with_suffix(".new"))
    os.replace(honest.with_suffix(".new"), honest)
    shutil.copyfile(other.with_suffix(".sha256"), honest.with_suffix(".sha256"))
    root.chmod(0o777)
    compiled = _refused(root, "writable by group and others", _graph(7.0))
    np.testing.assert_allclose(compiled(FEEDS)[0], NumpyRuntime(compiled.outputs)(FEEDS)[0], rtol=2e-6, atol=1e-6)


def test_the_cache_root_is_created_private(tmp_path, monkeypatch):
    root = tmp_path / "new" / "luminal"
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(root))
    monkeypatch.setattr(os, "umask", os.umask)  # restored whatever happens
    old = os.umask(0)  # the most permissive umask: the mode is luminal's own
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", lm.CacheWarning)
            compiled = _graph(9.0).compile(device="cpu")
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "cpu").stat().st_mode) == 0o700
    assert str(compiled.runtime.library_path).startswith(str(root) + os.sep)


def test_a_cubin_file_goes_to_the_private_folder_when_the_cache_cannot_be_written(tmp_path, monkeypatch):
    """`cuda` loads a cubin from a file (cupy.RawModule(path=...)): a full cache folder must not
    stop it; the file is written in the private folder, warned once."""
    from luminal.kernels import cache, launchers

    root = tmp_path / "cache"
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(root))
    monkeypatch.setattr(cache, "write_atomic", failing_under(root, cache.write_atomic))
    with pytest.warns(lm.CacheWarning, match="ENOSPC"):
        path = launchers._cubin_file(b"\x7fELF not really a cubin")
    assert not path.startswith(str(root)) and open(path, "rb").read() == b"\x7fELF not really a cubin"
