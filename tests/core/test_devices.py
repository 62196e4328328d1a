"""The device registry, configuration errors at compile time, and lifetimes: compiled models and
their weights are freed when dropped, caches are bounded, weights go to a device once."""

import gc
import importlib.util
import shutil
import warnings
import weakref
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal import devices

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the CUDA emulator needs g++")
no_cuda = pytest.mark.skipif(devices.get("cuda").available, reason="this machine can run device 'cuda'")


def _graph(seed: int = 0):
    g = lm.Graph("dev")
    x = g.input("x", ("n", 8))
    w = g.constant(np.random.default_rng(seed).standard_normal((8, 4)).astype(np.float32), name="w")
    g.output((x @ w).relu())
    return g


# --- the registry ----------------------------------------------------------------------------
def test_the_registry_knows_each_device():
    assert set(devices.DEVICES) == {"numpy", "cpu", "cuda", "cuda-emulator"}
    for entry in devices.DEVICES.values():
        assert entry.io in ("numpy", "dlpack") and entry.compiler and entry.doc
        assert entry.available == (entry.missing() is None)
    assert devices.get("numpy").available and devices.get("cpu").available
    assert devices.get("numpy").io == devices.get("cpu").io == "numpy"
    assert devices.get("cuda").runs_kernels and not devices.get("numpy").runs_kernels
    with pytest.raises(lm.DeviceError, match="unknown device 'tpu'.*'numpy', 'cpu', 'cuda', 'cuda-emulator'"):
        devices.get("tpu")
    with pytest.raises(lm.DeviceError, match="unknown device"):
        devices.get(None)


@no_cuda
def test_no_module_but_the_registry_compares_device_names():
    """Code above the runtimes asks the `Device` (its attributes, its arithmetic, its launcher);
    a string compare with a device name lives in `luminal/devices.py` only. torch's device types
    (`t.device.type == "cuda"`) and the I/O protocol (`entry.io == "numpy"`) are no device names."""
    import ast

    names = set(devices.DEVICES)
    package = Path(lm.__file__).parent

    def other_side_allowed(node) -> bool:
        if isinstance(node, ast.Attribute) and node.attr in ("type", "io"):
            return True
        return (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) > 1
                and getattr(node.args[1], "value", None) == "type")

    def device_names(node) -> bool:
        elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return any(isinstance(e, ast.Constant) and e.value in names for e in elts)

    found = []
    for path in sorted(package.rglob("*.py")):
        if path == package / "devices.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(device_names(s) for s in sides) and not any(other_side_allowed(s) for s in sides):
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    assert not found, f"device names compared outside luminal/devices.py: {found}"


def test_a_device_owns_its_launcher_and_precision():
    from luminal.kernels import launchers

    assert not hasattr(launchers, "LAUNCHERS")  # one table: the registry's
    for entry in devices.DEVICES.values():
        assert entry.runs_kernels == (entry.name in ("cuda", "cuda-emulator"))
        assert entry.default_precision == ("float64" if entry.name == "numpy" else "float32")
        fixed = devices.resolve(entry, "float64") if entry.available else entry.at_precision("float64")
        assert fixed.precision == "float64" and fixed.name == entry.name and devices.DEVICES[entry.name] is entry
    assert devices.resolve("cpu") is devices.get("cpu")  # no precision asked: the registry's own entry


def test_cuda_says_what_is_missing():
    why = devices.get("cuda").missing()
    assert ("CuPy" in why and "pip install" in why) or "GPU" in why or "NVRTC" in why
    with pytest.raises(lm.DeviceError, match="device 'cuda' is not available here"):
        devices.require("cuda")


def test_numpy_and_cpu_agree():
    g = _graph()
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    a, b = g.compile(device="numpy")(x=x), g.compile(device="cpu")(x=x)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)
    assert g.compile(device="numpy").device is devices.get("numpy")


# --- configuration errors at compile time, from every entry point -----------------------------
BAD = ["nonsense", pytest.param("cuda", marks=no_cuda)]


@pytest.mark.parametrize("device", BAD)
def test_graph_compile_refuses_a_bad_device(device):
    with pytest.raises(lm.DeviceError, match=repr(device)):
        _graph().compile(device=device)


@pytest.mark.parametrize("device", BAD)
def test_load_refuses_a_bad_device(device, tmp_path):
    path = _graph().compile(optimize=False).save(tmp_path / "m.lum")
    with pytest.raises(lm.DeviceError, match=repr(device)):
        lm.load(path, device=device)


@pytest.mark.parametrize("device", BAD)
def test_onnx_compile_refuses_a_bad_device(device):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    with pytest.raises(lm.DeviceError, match=repr(device)):
        lm.onnx.compile(model, device=device)


@pytest.mark.parametrize("device", BAD)
def test_luminal_compile_refuses_a_bad_device(device, monkeypatch):
    torch = pytest.importorskip("torch")

    def export(*args, **kwargs):
        raise AssertionError("torch.export ran before the device was checked")

    monkeypatch.setattr(torch.export, "export", export)
    with pytest.raises(lm.DeviceError, match=repr(device)):
        lm.compile(torch.nn.Linear(4, 2).eval(), (torch.randn(2, 4),), device=device)


@pytest.mark.parametrize("device", BAD)
def test_torch_compile_raises_instead_of_falling_back(device):
    torch = pytest.importorskip("torch")
    from luminal.frontends.torch import dynamo

    torch._dynamo.reset()
    fallbacks = len(dynamo.EAGER_FALLBACKS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "running graph eagerly" warning either
        with pytest.raises(Exception) as info:
            torch.compile(torch.nn.Linear(4, 2), backend="luminal", options={"device": device})(torch.randn(2, 4))
    inner = getattr(info.value, "inner_exception", info.value)  # Dynamo wraps backend errors
    assert isinstance(inner, lm.DeviceError) and repr(device) in str(inner)
    assert len(dynamo.EAGER_FALLBACKS) == fallbacks
    torch._dynamo.reset()


# --- lifetimes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["numpy", "cpu", pytest.param("cuda-emulator", marks=needs_gxx)])
def test_a_dropped_compiled_model_is_freed(device):
    g = _graph(seed=7)
    compiled = g.compile(device=device)
    x = np.ones((2, 8), np.float32)
    for _ in range(3):
        compiled(x=x)
    weight = next(n.arg.array for n in lm.hlir.ops.toposort(compiled.outputs) if isinstance(n.arg, lm.hlir.ops.ConstantArray))
    gc.collect()  # what earlier tests left in cycles goes now, not in the count below
    before = lm.stats()
    number = next(s["number"] for s in before["graphs"] if s["name"] == "dev")
    refs = weakref.ref(compiled), weakref.ref(weight)
    del compiled, weight, g
    gc.collect()
    assert refs[0]() is None, "the CompiledGraph is still referenced"
    assert refs[1]() is None, "its weight array is still referenced"
    after = lm.stats()
    assert after["graphs_compiled"] == before["graphs_compiled"]  # a count of all, not of the living
    assert number not in {s["number"] for s in after["graphs"]}


def test_the_compile_log_counts_all_and_holds_the_living():
    from luminal.compiler import STATS

    since = len(STATS.compiled)
    kept = _graph().compile(optimize=False)
    _graph().compile(optimize=False)  # dropped at once
    gc.collect()
    assert len(STATS.compiled) == since + 2
    assert STATS.compiled[since:] == [kept]
    assert STATS.compiled[since] is kept and STATS.compiled[since + 1] is None


@needs_gxx
def test_weights_go_to_the_device_once_per_process():
    from luminal.kernels.weights import DEVICE_WEIGHTS

    g = _graph(seed=11)
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)
    want = g.run(x=x)[0]
    uploads = DEVICE_WEIGHTS.uploads
    models = [g.compile(device="cuda-emulator", optimize=opt) for opt in (False, True, False)]  # three recompiles
    assert DEVICE_WEIGHTS.uploads == uploads + 1
    for m in models:
        np.testing.assert_allclose(m(x=x)[0], want, rtol=1e-5, atol=1e-5)
    assert models[0].runtime._weights[0] is models[2].runtime._weights[0]
    entries = len(DEVICE_WEIGHTS)
    del models, m, g
    gc.collect()
    assert len(DEVICE_WEIGHTS) == entries - 1  # dropped with the last array viewing the weight


@needs_gxx
def test_dynamo_recompiles_share_the_device_weights():
    torch = pytest.importorskip("torch")
    from luminal.kernels.weights import DEVICE_WEIGHTS

    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    fast = torch.compile(model, backend="luminal", dynamic=False, options={"device": "cuda-emulator"})
    uploads = DEVICE_WEIGHTS.uploads
    with torch.no_grad():
        for n in (2, 3, 4):  # a static recompile per shape
            x = torch.randn(n, 8)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-5, atol=1e-5)
    assert DEVICE_WEIGHTS.uploads - uploads == 2  # weight and bias, once
    torch._dynamo.reset()


def test_eager_fallbacks_are_bounded():
    pytest.importorskip("torch")
    from luminal.frontends.torch.dynamo import RecentLog

    log = RecentLog(maxlen=4)
    for i in range(10):
        log.append(f"g{i}: why")
    assert len(log) == 10 and list(log) == ["g6: why", "g7: why", "g8: why", "g9: why"]


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None and importlib.util.find_spec("cupy") is None,
                    reason="NVRTC is not installed")
def test_the_nvrtc_memory_cache_is_bounded(tmp_path):
    from luminal.kernels import nvrtc

    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC is not installed")
    compiler = nvrtc.NVRTCCompiler(tmp_path, memory_size=2)
    sources = [f'extern "C" __global__ void k{i}(float* x) {{ x[0] = {i}.0f; }}' for i in range(3)]
    for s in sources:
        compiler.compile(s, "compute_80")
    assert len(compiler._memory) == 2
    compiler.compile(sources[0], "compute_80")  # evicted from memory: back from disk
    assert compiler.disk_hits == 1 and compiler.compiles == 3


def test_the_disk_cache_is_bounded_least_recently_used_first(tmp_path):
    import os
    import time

    from luminal.kernels.cache import prune, touch

    now = time.time()
    for i, stem in enumerate(["old", "mid", "new"]):
        for ext in ("bin", "log"):
            (tmp_path / f"{stem}.{ext}").write_bytes(b"x" * 100)
            os.utime(tmp_path / f"{stem}.{ext}", (now - 3600 * (3 - i),) * 2)
    assert touch(tmp_path / "old.bin") and not touch(tmp_path / "gone.bin")  # a hit: now the most recent
    os.utime(tmp_path / "old.log", (now - 7200,) * 2)
    assert prune(tmp_path, max_bytes=450) == 200  # one whole entry (bin and log) goes: "mid"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.bin", "new.log", "old.bin", "old.log"]
    assert prune(tmp_path, max_bytes=0) == 200  # "new"; "old" was used within RECENT_S: kept
    assert prune(tmp_path, max_bytes=0, recent_s=0) == 200


def test_one_reading_of_the_cache_size_bound(monkeypatch, tmp_path):
    """Every cache folder (C libraries, NVRTC binaries, compile-cache entries) reads
    $LUMINAL_CACHE_MAX_MB the same way: megabytes, fractions allowed, a non-number ignored."""
    from luminal.kernels.cache import MAX_MB, prune, size_bound

    monkeypatch.setenv("LUMINAL_CACHE_MAX_MB", "0.5")
    assert size_bound() == 1 << 19
    (tmp_path / "a.bin").write_bytes(b"x" * 10)
    assert prune(tmp_path) == 0  # was a ValueError from int("0.5")
    monkeypatch.setenv("LUMINAL_CACHE_MAX_MB", "lots")
    assert size_bound() == MAX_MB << 20


@pytest.mark.parametrize("device", ["numpy", "cpu", pytest.param("cuda-emulator", marks=needs_gxx)])
def test_every_runtime_follows_the_one_protocol(device, monkeypatch):
    """Each device's runtime derives from `Runtime`: the hooks the compiler and the compile cache
    use are there with their defaults, so neither probes with getattr (the tiered cpu runtime too)."""
    from luminal.runtime.protocol import Runtime

    for tiered in (["0", "1"] if device == "cpu" else ["0"]):
        monkeypatch.setenv("LUMINAL_TIERED", tiered)
        compiled = _graph(seed=3).compile(device=device)
        rt = compiled.runtime
        assert isinstance(rt, Runtime)
        assert rt.builds_in_background == (tiered == "1") and isinstance(rt.report_lines(), list)
        ran = []
        rt.after_first_call(lambda ran=ran: ran.append("task"))
        rt.when_built(lambda built, seconds, ran=ran: ran.append((isinstance(built, Runtime), seconds >= 0)))
        compiled(x=np.ones((2, 8), np.float32))
        if rt.builds_in_background:
            rt.wait()
        assert sorted(map(str, ran)) == sorted(map(str, ["task", (True, True)]))
    package = Path(lm.__file__).parent
    source = "".join((package / f"{m}.py").read_text() for m in ("compiler", "compile_cache"))
    assert not any(f'getattr(runtime, "{h}"' in source or f'getattr(self.runtime, "{h}"' in source
                   for h in ("when_built", "after_first_call", "artifacts", "restored", "report_lines", "plan"))


@pytest.mark.parametrize("device,tiered", [("cpu", "0"), ("cpu", "1"), pytest.param("cuda-emulator", "0", marks=needs_gxx)])
def test_the_roofline_reads_the_dims_of_the_runtimes_last_call(device, tiered, monkeypatch):
    """`Runtime.last_bindings` (the dims of the latest call) is what `roofline()` defaults to."""
    monkeypatch.setenv("LUMINAL_TIERED", tiered)
    compiled = _graph(seed=4).compile(device=device)
    assert not compiled.runtime.last_bindings  # no call yet
    compiled(x=np.ones((5, 8), np.float32))
    if compiled.runtime.builds_in_background:
        compiled.runtime.wait()
        compiled(x=np.ones((5, 8), np.float32))  # on the C now
    compiled(x=np.ones((3, 8), np.float32))
    assert compiled.runtime.last_bindings == {"n": 3}
    assert compiled.roofline() == compiled.roofline(bindings={"n": 3}) != compiled.roofline(bindings={"n": 5})
