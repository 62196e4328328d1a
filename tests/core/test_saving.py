"""Compiled graphs round-trip through `.lum` files; bad files get clear errors."""

import json
import subprocess
import sys
import zipfile

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.saving import SaveFormatError


def _model():
    from luminal.demo import build_block, make_weights

    return build_block(make_weights())


def test_round_trip_matches(tmp_path):
    g = _model()
    compiled = g.compile(optimize=False)
    path = compiled.save(tmp_path / "block.lum")
    loaded = lm.load(path)
    x = np.random.default_rng(0).standard_normal((2, 7, 64)).astype(np.float32)
    np.testing.assert_array_equal(loaded(x=x)[0], compiled(x=x)[0])
    assert loaded.output_names == ["y"]
    x2 = np.random.default_rng(1).standard_normal((1, 3, 64)).astype(np.float32)  # symbolic dims survive
    np.testing.assert_array_equal(loaded(x=x2)[0], compiled(x=x2)[0])


def test_all_dtypes_and_args_round_trip(tmp_path):
    g = lm.Graph()
    x = g.input("x", (4, 3))
    s = g.input("s", ("n",), lm.int64)
    w16 = g.constant(np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16))
    idx = g.constant(np.array([1, 0], np.int64))
    y = (x.cast(lm.bf16)[:2].pad([(0, 0), (1, 0)])[:, 1:] + w16.index_select(0, idx)).cast(lm.f64)
    g.output(y.sum(0) + x[:, ::-1].cast(lm.f64).mean(0) + s.cast(lm.f64).mean())
    compiled = g.compile(optimize=False)
    loaded = lm.load(compiled.save(tmp_path / "m.lum"))
    a = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    for n in (1, 5):
        ints = np.arange(n, dtype=np.int64)
        np.testing.assert_array_equal(loaded(x=a, s=ints)[0], compiled(x=a, s=ints)[0])


def test_load_needs_neither_torch_nor_egglog(tmp_path):
    path = _model().compile(optimize=False).save(tmp_path / "block.lum")
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'egglog', 'onnx'):
            raise ImportError('blocked ' + name)
sys.meta_path.insert(0, Block())
import numpy as np, luminal
m = luminal.load({str(path)!r})
print(m(x=np.ones((1, 4, 64), np.float32))[0].shape)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "(1, 4, 64)" in out.stdout


def test_bad_files_get_clear_errors(tmp_path):
    with pytest.raises(SaveFormatError, match="no such file"):
        lm.load(tmp_path / "missing.lum")
    junk = tmp_path / "junk.lum"
    junk.write_bytes(b"not a zip at all")
    with pytest.raises(SaveFormatError, match="not a zip archive, or truncated"):
        lm.load(junk)
    good = _model().compile(optimize=False).save(tmp_path / "good.lum")
    truncated = tmp_path / "truncated.lum"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(SaveFormatError):
        lm.load(truncated)
    future = tmp_path / "future.lum"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(future, "w") as dst:
        for item in src.namelist():
            data = src.read(item)
            if item == "meta.json":
                meta = json.loads(data)
                meta["version"] = 99
                data = json.dumps(meta)
            dst.writestr(item, data)
    with pytest.raises(SaveFormatError, match="format version 99; this luminal reads version 2"):
        lm.load(future)
