"""The GPU runtime's device-independent parts, with the CPU emulator as the launcher: launch
sequences per binding, CUDA-graph bookkeeping (one capture per binding, replays after), torch
tensors in and out, the error flag under replay; and seeded-weight saving."""

import gc
import json
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.kernels.runtime import GraphCache, KernelRuntime
from luminal.saving import SaveFormatError, seeded_weight, weight_spec


def _graph():
    g = lm.Graph("rt")
    x = g.input("x", ("n", 32))
    i = g.input("i", ("m",), lm.int64)
    w = g.constant(np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32), name="w")
    h = (x @ w).silu()
    g.output(h.softmax(-1), "p")
    g.output(h.index_select(0, i).sum(-1), "picked")
    return g


@pytest.fixture(scope="module")
def graph():
    return _graph()


@pytest.fixture(scope="module")
def runtime(graph):
    """One emulator build for the whole module (the source is the same for every runtime here)."""
    return KernelRuntime(graph.output_nodes, lm.devices.get("cuda-emulator"))


def _feeds(n, m, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 32)).astype(np.float32), "i": rng.integers(0, n, m).astype(np.int64)}


def _check(rt, graph, feeds):
    for got, want in zip(rt(feeds), graph.run(feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_one_capture_per_binding_then_replays(graph):
    rt = KernelRuntime(graph.output_nodes, lm.devices.get("cuda-emulator"))
    for seed in range(4):  # same binding, new data each call: the replay reads the staging buffers
        _check(rt, graph, _feeds(5, 3, seed))
    s = rt.graph_cache.stats()
    assert {k: s[k] for k in ("bindings", "captured", "captures", "replays", "eager", "evictions", "too_big")} == {
        "bindings": 1, "captured": 1, "captures": 1, "replays": 3, "eager": 1, "evictions": 0, "too_big": 0}
    assert s["bytes"] == rt.graph_cache.held()[0]["bytes"] > 0 and s["capacity"] == 16
    for seed in range(3):  # a second binding: its own warm-up, capture, replay
        _check(rt, graph, _feeds(9, 2, seed))
    _check(rt, graph, _feeds(5, 3, 7))  # back to the first: still captured
    s = rt.graph_cache.stats()
    assert (s["bindings"], s["captures"], s["replays"], s["eager"]) == (2, 2, 6, 2)
    assert len(rt.sequences) == 2 and len(rt.layouts) == 2


def test_released_fiber_stacks_come_back(runtime, graph):
    _check(runtime, graph, _feeds(3, 1))
    runtime.launcher.module.release()  # gpu_check does this after each of its 130 models
    _check(runtime, graph, _feeds(3, 1))


def test_launch_sequence_is_resolved_once_per_binding(runtime):
    seq = runtime.sequence({"n": 4, "m": 2})
    assert runtime.sequence({"m": 2, "n": 4}) is seq  # the key ignores dict order
    assert all(isinstance(ln.grid, int) and ln.grid > 0 for ln in seq.launches)
    dims = [a for ln in seq.launches for a in ln.args if isinstance(a, np.int64)]
    assert set(int(d) for d in dims) <= {4, 2}
    assert seq.output_shapes == [(4, 16), (2,)]
    assert any(a == ("err",) for ln in seq.launches for a in ln.args)  # the gather checks its indices


def test_replayed_outputs_are_the_callers_own(runtime, graph):
    feeds = _feeds(6, 2, 1)
    first = [runtime(feeds) for _ in range(3)]
    first[1][0][:] = 123.0  # mutating one call's result changes no other
    np.testing.assert_array_equal(first[0][1], first[2][1])
    np.testing.assert_allclose(first[2][0], graph.run(feeds)[0], rtol=1e-5, atol=1e-5)


def test_graphs_off_and_lru_eviction(graph, monkeypatch):
    off = KernelRuntime(graph.output_nodes, lm.devices.get("cuda-emulator"), graphs=False)
    for _ in range(3):
        _check(off, graph, _feeds(4, 1))
    assert off.graph_cache.captures == 0 and off.graph_cache.eager == 3
    monkeypatch.setenv("LUMINAL_CUDA_GRAPHS", "0")
    assert not KernelRuntime(graph.output_nodes, lm.devices.get("cuda-emulator")).graphs_enabled
    monkeypatch.delenv("LUMINAL_CUDA_GRAPHS")
    rt = KernelRuntime(graph.output_nodes, lm.devices.get("cuda-emulator"))
    rt.graph_cache = GraphCache(capacity=2)
    for n in (2, 3, 4):
        for _ in range(2):
            _check(rt, graph, _feeds(n, 1))
    assert rt.graph_cache.stats()["evictions"] == 1 and list(rt.graph_cache.entries) == [(("m", 1), ("n", 3)), (("m", 1), ("n", 4))]


def test_bindings_kept_per_runtime_are_bounded(graph, monkeypatch):
    from luminal.kernels import runtime as kr

    monkeypatch.setattr(kr, "BINDINGS_KEPT", 2)
    rt = KernelRuntime(graph.output_nodes, lm.devices.get("cuda-emulator"), graphs=False)
    for n in (2, 3, 4, 3):  # a generate loop sees a new sequence length every step
        _check(rt, graph, _feeds(n, 1))
    assert list(rt.sequences) == [(("m", 1), ("n", 4)), (("m", 1), ("n", 3))]  # least recently used dropped
    assert rt.graph_cache.stats()["bindings"] == 2


def test_index_error_is_raised_under_replay_and_cleared(runtime, graph):
    good, bad = _feeds(3, 2), _feeds(3, 2)
    bad["i"] = np.array([0, 7], np.int64)
    for _ in range(3):
        _check(runtime, graph, good)  # captured and replaying for this binding
    replays = runtime.graph_cache.replays
    with pytest.raises(lm.IndexOutOfRange):
        runtime(bad)
    assert runtime.graph_cache.replays == replays + 1  # the error came from a replay
    _check(runtime, graph, good)  # the sticky flag was cleared


def test_torch_tensors_in_torch_tensors_out(runtime, graph):
    torch = pytest.importorskip("torch")
    feeds = _feeds(4, 3, 2)
    for _ in range(3):
        out = runtime({k: torch.from_numpy(v) for k, v in feeds.items()})
        assert all(isinstance(o, torch.Tensor) for o in out)
        np.testing.assert_allclose(out[0].numpy(), graph.run(feeds)[0], rtol=1e-5, atol=1e-5)


def test_bf16_through_the_graph_path():
    torch = pytest.importorskip("torch")
    g = lm.Graph()
    x = g.input("x", ("n", 8), lm.bf16)
    g.output((x * x).sum(-1).cast(lm.bf16) + x[:, 0])
    rt = KernelRuntime(g.output_nodes, lm.devices.get("cuda-emulator"))
    a = np.random.default_rng(0).standard_normal((3, 8)).astype(ml_dtypes.bfloat16)
    want = g.run(x=a)[0]
    for _ in range(3):
        got = rt({"x": torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)})[0]
        assert got.dtype == torch.bfloat16
        np.testing.assert_array_equal(got.view(torch.int16).numpy().view(ml_dtypes.bfloat16), want)


# --- seeded weights --------------------------------------------------------------------------
def test_seeded_weights_are_deterministic_with_the_stated_statistics():
    spec = weight_spec("layer.w", np.zeros((256, 128), np.float32), {"mean": 0.5, "std": 0.25})
    a, b = seeded_weight(spec), seeded_weight(spec)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (256, 128) and a.dtype == np.float32
    assert abs(a.mean() - 0.5) < 0.01 and abs(a.std() - 0.25) < 0.01
    assert seeded_weight(dict(spec, dtype="bf16")).dtype == ml_dtypes.bfloat16
    assert not np.array_equal(seeded_weight(weight_spec("other", np.zeros((4, 4), np.float32), {"mean": 0, "std": 1})),
                              seeded_weight(weight_spec("layer.w", np.zeros((4, 4), np.float32), {"mean": 0, "std": 1})))
    # the bits are fixed by PCG64: a file saved on one machine loads the same weights on another
    assert seeded_weight(weight_spec("w", np.zeros(3, np.float32), {"mean": 0, "std": 1})).tolist() == pytest.approx(
        [0.579827, -0.611877, 1.586305], abs=1e-5)


def test_seeded_save_stores_no_weight_bytes(tmp_path):
    g = lm.Graph()
    x = g.input("x", ("n", 64))
    big = g.constant(np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32), name="big")
    small = g.constant(np.linspace(0, 1, 256, dtype=np.float32), name="small")
    g.output((x @ big) * small)
    compiled = g.compile(optimize=False)
    embedded = compiled.save(tmp_path / "e.lum")
    seeded = compiled.save(tmp_path / "s.lum", weights="seeded")
    assert seeded.stat().st_size < embedded.stat().st_size - 60_000
    meta = json.loads(zipfile.ZipFile(seeded).read("meta.json"))
    assert meta["version"] == 2 and set(meta["weight_specs"]) == {"big"}  # small constants stay exact
    loaded = lm.load(seeded)
    assert loaded.weight_mode == "seeded"
    xs = np.ones((2, 64), np.float32)
    np.testing.assert_array_equal(loaded(x=xs)[0], lm.load(seeded)(x=xs)[0])  # reproducible
    assert np.isfinite(loaded(x=xs)[0]).all()
    explicit = compiled.save(tmp_path / "x.lum", weights="seeded", weight_specs={"big": {"mean": 0.0, "std": 0.01}})
    assert set(json.loads(zipfile.ZipFile(explicit).read("meta.json"))["weight_specs"]) == {"big"}
    with pytest.raises(lm.LuminalError, match="does not have"):
        compiled.save(tmp_path / "y.lum", weights="seeded", weight_specs={"nope": {"mean": 0, "std": 1}})
    with pytest.raises(lm.LuminalError, match="choose one of"):
        compiled.save(tmp_path / "z.lum", weights="zip")
    broken = tmp_path / "broken.lum"
    with zipfile.ZipFile(seeded) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.namelist():
            data = src.read(item)
            if item == "meta.json":
                m = json.loads(data)
                del m["weight_specs"]["big"]["seed"]
                data = json.dumps(m)
            dst.writestr(item, data)
    with pytest.raises(SaveFormatError, match="seeded weight spec of 'big' is malformed"):
        lm.load(broken)


def test_seeded_model_loads_on_the_emulator_without_torch_or_egglog(tmp_path, graph):
    path = graph.compile(optimize=False).save(tmp_path / "rt.lum", weights="seeded")
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'egglog', 'onnx', 'transformers'):
            raise ImportError('blocked ' + name)
sys.meta_path.insert(0, Block())
import numpy as np, luminal
cpu = luminal.load({str(path)!r})
emu = luminal.load({str(path)!r}, device="cuda-emulator")
x = np.ones((3, 32), np.float32); i = np.array([2, 0], np.int64)
for _ in range(3):
    a, b = cpu(x=x, i=i), emu(x=x, i=i)
    assert all(np.allclose(p, q, rtol=1e-5, atol=1e-5) for p, q in zip(a, b))
print(emu.runtime.graph_cache.stats())
print(sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'pandas', 'matplotlib', 'cupy', 'torch')))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "'captures': 1, 'replays': 2" in out.stdout
    assert out.stdout.strip().endswith("[]")  # nothing heavy came in on the import path


# --- the CuPy launcher's plumbing, against a stand-in CuPy that runs kernels on the emulator ---
def _fake_cupy():
    """Enough of CuPy's API for `CupyLauncher`: arrays are an ndarray subclass, kernels run on the
    emulator, streams record what they launch while capturing, graphs replay the recording."""
    import types

    from luminal.kernels import emulator

    cp = types.ModuleType("cupy")
    log = {"launches": 0, "captured": 0, "graph_launches": 0, "streams": []}

    class ndarray(np.ndarray):
        def set(self, arr, stream=None):
            np.copyto(self, arr)

    ndarray.__module__ = "cupy"

    local = threading.local()  # each thread's stack of entered streams, as CuPy keeps it

    def current():
        stack = getattr(local, "stack", None)
        return stack[-1] if stack else None

    class Stream:
        def __init__(self, non_blocking=False):
            self.tape = None

        def __enter__(self):
            local.__dict__.setdefault("stack", []).append(self)
            log["streams"].append(self)
            return self

        def __exit__(self, *exc):
            local.stack.pop()

        def record(self, event=None):
            log["events"] = log.get("events", 0) + 1
            return Event()

        def wait_event(self, event):
            assert event is not None

        def begin_capture(self):
            self.tape = []

        def end_capture(self):
            tape, self.tape = self.tape, None
            log["captured"] += len(tape)
            return Graph(tape)

        def synchronize(self):
            pass

    class Event:
        def synchronize(self):
            log["event_syncs"] = log.get("event_syncs", 0) + 1

    class Graph:
        def __init__(self, tape):
            self.tape = tape

        def launch(self, stream=None):
            log["graph_launches"] += 1
            for f in self.tape:
                f()

    class RawModule:
        def __init__(self, code=None, options=(), path=None):
            assert code is None and path is not None, "kernels come compiled by luminal.kernels.nvrtc"
            log["cubin"] = binary = Path(path).read_bytes()
            # the stand-in runs the source the binary was built from (see `_stand_in_nvrtc`)
            code = binary[len(b"SOURCE:"):].decode() if binary.startswith(b"SOURCE:") else cp.source_of_cubin
            self.module = emulator.build(code)

        def get_function(self, name):
            def launch(grid, block, args):
                run = lambda: self.module.launch(name, grid=grid, block=block, args=list(args))  # noqa: E731
                stream = current()
                assert stream is not None, "a launch outside any stream context"
                if stream.tape is not None:
                    stream.tape.append(run)
                else:
                    log["launches"] += 1
                    run()
            return launch

    default = Stream()
    cp.ndarray, cp.RawModule, cp.log = ndarray, RawModule, log
    cp.cuda = types.SimpleNamespace(Device=lambda: types.SimpleNamespace(compute_capability="90", id=0),
                                    Stream=Stream, get_current_stream=lambda: current() or default,
                                    runtime=types.SimpleNamespace(getDeviceCount=lambda: 1))
    cp.bitwise_or = np.bitwise_or
    cp.asarray = lambda a: np.array(a).view(ndarray)
    cp.empty = lambda shape, dtype: np.empty(shape, dtype).view(ndarray)
    cp.zeros = lambda shape, dtype: np.zeros(shape, dtype).view(ndarray)
    cp.asnumpy = lambda a, stream=None: np.array(a)
    cp.copyto = np.copyto
    cp.ascontiguousarray = lambda a: np.ascontiguousarray(a).view(ndarray)
    return cp


def _stand_in_nvrtc(monkeypatch) -> list:
    """`luminal.kernels.nvrtc.compile_cuda` replaced by one whose "cubin" is the source itself
    (the stand-in CuPy runs it on the emulator); returns the archs it was asked for."""
    from luminal.kernels import nvrtc

    archs = []

    def compile_cuda(source, arch="sm_90", options=()):
        archs.append(arch)
        return nvrtc.CompiledKernelBinary(b"SOURCE:" + source.encode(), arch, "")

    monkeypatch.setattr(nvrtc, "compile_cuda", compile_cuda)
    return archs


def test_cupy_launcher_plumbing_on_a_stand_in_cupy(graph, monkeypatch):
    cp = _fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    assert _stand_in_nvrtc(monkeypatch) is not None
    rt = KernelRuntime(graph.output_nodes, lm.devices.get("cuda"))
    assert rt.launcher.built == "nvrtc sm_90"  # compiled by luminal's NVRTC wrapper, loaded as a binary
    feeds = _feeds(5, 3, 4)
    for _ in range(3):  # host arrays in: warm-up, capture + replay, replay
        _check(rt, graph, feeds)
    assert cp.log["captured"] == len(rt.sequence({"n": 5, "m": 3}).launches) and cp.log["graph_launches"] == 2
    launched = cp.log["launches"]
    for _ in range(2):  # device arrays in: device arrays out, no host round trip, same graph
        out = rt({k: cp.asarray(v) for k, v in feeds.items()})
        assert all(type(o) is cp.ndarray for o in out)
        np.testing.assert_allclose(np.asarray(out[0]), graph.run(feeds)[0], rtol=1e-5, atol=1e-5)
    assert cp.log["launches"] == launched and cp.log["graph_launches"] == 4
    bad = dict(feeds, i=np.array([0, 1, 9], np.int64))
    rt({k: cp.asarray(v) for k, v in bad.items()})  # device-resident: the flag is not read yet
    with pytest.raises(lm.IndexOutOfRange):
        rt.synchronize()
    rt.synchronize()  # cleared
    del rt
    gc.collect()  # a dropped graph's buffers are freed only after its last replay's event
    assert cp.log["event_syncs"] == 1


def test_bf16_lives_as_uint16_bits_on_cupy(monkeypatch):
    cp = _fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    _stand_in_nvrtc(monkeypatch)
    g = lm.Graph()
    x = g.input("x", ("n", 8), lm.bf16)
    w = g.constant(np.linspace(-1, 1, 8).astype(ml_dtypes.bfloat16), name="w")
    g.output((x * w).sum(-1).cast(lm.bf16))
    rt = KernelRuntime(g.output_nodes, lm.devices.get("cuda"))
    assert rt._weights[0].dtype == np.uint16
    a = np.random.default_rng(0).standard_normal((3, 8)).astype(ml_dtypes.bfloat16)
    for _ in range(3):
        np.testing.assert_array_equal(rt({"x": a})[0], g.run(x=a)[0])
    dev = rt({"x": cp.asarray(a.view(np.uint16))})  # CuPy has no bfloat16: bits in, bits out
    assert dev[0].dtype == np.uint16
    np.testing.assert_array_equal(np.asarray(dev[0]).view(ml_dtypes.bfloat16), g.run(x=a)[0])


def test_device_resident_bool_inputs_with_bytes_other_than_0_and_1(monkeypatch):
    """A CuPy bool array whose bytes are 0/255 (a mask viewed as bool) is read as torch reads it:
    every non-zero byte True, the straight-through output a proper bool (bytes 0/1)."""
    cp = _fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    _stand_in_nvrtc(monkeypatch)
    g = lm.Graph()
    x = g.input("x", (2, 4), lm.bool_)
    for out in (x, x.cast(lm.f32), x.cast(lm.int64).sum(-1), x.logical_not()):
        g.output(out)
    rt = KernelRuntime(g.output_nodes, lm.devices.get("cuda"))
    raw = np.array([[0, 255, 2, 1], [1, 0, 128, 0]], np.uint8)
    got = [np.asarray(o) for o in rt({"x": cp.asarray(raw).view(np.bool_)})]
    want = raw != 0
    np.testing.assert_array_equal(got[0].view(np.uint8), want.astype(np.uint8))
    np.testing.assert_array_equal(got[1], want.astype(np.float32))
    np.testing.assert_array_equal(got[2], want.sum(-1))
    np.testing.assert_array_equal(got[3].view(np.uint8), (~want).astype(np.uint8))


def test_saved_cubins_are_loaded_instead_of_compiling(graph, tmp_path, monkeypatch):
    nvrtc = pytest.importorskip("luminal.kernels.nvrtc")
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC is not installed")
    path = graph.compile(optimize=False).save(tmp_path / "g.lum", archs=("sm_90",))
    with zipfile.ZipFile(path) as zf:
        cubin, source = zf.read("kernels.sm_90.cubin"), zf.read("kernels.cu").decode()
        assert json.loads(zf.read("meta.json"))["cubins"] == ["sm_90"]
    assert cubin[:4] == b"\x7fELF"
    cp = _fake_cupy()
    cp.source_of_cubin = source
    monkeypatch.setitem(sys.modules, "cupy", cp)
    loaded = lm.load(path, device="cuda", trust_binaries=True)  # cubins are code: run only when trusted
    assert loaded.runtime.launcher.built == "cubin sm_90" and cp.log["cubin"] == cubin
    for _ in range(3):
        _check(loaded.runtime, graph, _feeds(4, 2))


def test_narrowing_casts_round_inside_fused_regions():
    """x.half().float() inside a FusedElementwise region rounds to f16 (it was rendered as a
    float-to-float cast: no rounding, and no fp16 header for the region's kernel)."""
    pytest.importorskip("egglog")
    g = lm.Graph()
    x = g.input("x", ("n",))
    g.output(x.cast(lm.f16).cast(lm.f32) * 3.0 + x.cast(lm.bf16).cast(lm.f32))
    compiled = g.compile(device="cuda-emulator")
    assert "FusedElementwise" in compiled.report().ops_after
    a = np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 10
    want = a.astype(np.float16).astype(np.float32) * 3 + a.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(compiled(x=a)[0], want)


def test_cuda_kernels_are_compiled_by_luminals_nvrtc(graph, monkeypatch):
    nvrtc = pytest.importorskip("luminal.kernels.nvrtc")
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC is not installed")
    from luminal.kernels.launchers import CupyLauncher
    from luminal.kernels.plan import KernelPlan

    cp = _fake_cupy()
    cp.source_of_cubin = KernelPlan.build(graph.output_nodes).source
    monkeypatch.setitem(sys.modules, "cupy", cp)
    rt = KernelRuntime(graph.output_nodes, lm.devices.get("cuda"))
    assert rt.launcher.built == "nvrtc sm_90" and cp.log["cubin"][:4] == b"\x7fELF"  # a cubin, loaded by path
    for _ in range(3):
        _check(rt, graph, _feeds(4, 2))
    broken = 'extern "C" __global__ void k(float* x) {\n  x[0] = not_declared;\n}\n'
    with pytest.raises(nvrtc.CompileError, match=r"(?s)not_declared.*   2 \|   x\[0\] = not_declared;"):
        CupyLauncher(broken)


def test_concurrent_calls_on_the_cupy_launcher(graph, monkeypatch):
    """Threads with their own streams share one runtime, host and device arrays mixed: the
    replay lock, per-thread streams and flags keep every answer the caller's own."""
    cp = _fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    _stand_in_nvrtc(monkeypatch)
    rt = KernelRuntime(graph.output_nodes, lm.devices.get("cuda"))
    jobs = [[_feeds(5, 3, 10 * t + c) for c in range(6)] for t in range(4)]
    barrier, got, errors = threading.Barrier(4), [[] for _ in jobs], []

    def work(t):
        try:
            barrier.wait()
            for f in jobs[t]:
                out = rt({k: cp.asarray(v) for k, v in f.items()} if t % 2 else f)
                got[t].append([np.asarray(o) for o in out])
            rt.synchronize()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for fs, outs in zip(jobs, got):
        for f, out in zip(fs, outs):
            for a, b in zip(out, graph.run(f)):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert rt.graph_cache.captures == 1 and rt.graph_cache.replays + rt.graph_cache.eager == 24
