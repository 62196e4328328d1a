"""Issue 19 on the CPU: weights on the device once per process, a decode step that copies
nothing between host and device but its token ids, a bounded CUDA-graph cache, and the roofline.

The "cuda" launcher runs against the stand-in CuPy of test_gpu_runtime (kernels on the emulator),
here counting every host-to-device and device-to-host copy it is asked for."""

import gc
import sys
import types

import numpy as np
import pytest
from test_gpu_runtime import _fake_cupy, _stand_in_nvrtc

import luminal as lm
from luminal.kernels import weights as kw
from luminal.kernels.runtime import GraphCache, KernelRuntime
from luminal.kernels.weights import DEVICE_WEIGHTS


def _counting_cupy():
    """The stand-in CuPy, counting copies: a CuPy array is device memory, anything else host."""
    cp = _fake_cupy()
    count = cp.copies = {"h2d": 0, "d2h": 0, "dlpack": 0}
    asarray, copyto = cp.asarray, cp.copyto

    def to_device(a):
        if type(a) is not cp.ndarray:
            count["h2d"] += 1
        return asarray(a)

    def to_host(a, stream=None):
        count["d2h"] += 1
        return np.array(a)

    def copy_into(dst, src):
        if type(src) is not cp.ndarray:
            count["h2d"] += 1
        copyto(dst, src)

    def set_(self, arr, stream=None):  # the launcher's host-to-device path (the stand-in's arrays are
        if type(arr) is not cp.ndarray:  # NumPy subclasses, so a device source may come this way too)
            count["h2d"] += 1
        np.copyto(self, arr)

    def from_dlpack(t):
        count["dlpack"] += 1
        return np.from_dlpack(t).view(cp.ndarray)

    cp.asarray, cp.asnumpy, cp.copyto, cp.from_dlpack = to_device, to_host, copy_into, from_dlpack
    cp.ndarray.set = set_
    return cp


def _decode_graph(layers=2, heads=2, ctx=16, hd=8, vocab=32):
    """A decode step over a static KV cache: token ids and position in, logits and the new
    token's k and v out (the caller writes them into its cache, on the device)."""
    rng = np.random.default_rng(0)
    h = heads * hd
    g = lm.Graph("decode")
    ids = g.input("ids", (1, 1), lm.int64)
    pos = g.input("pos", (1,), lm.int32)
    embed = g.constant(rng.standard_normal((vocab, h)).astype(np.float32), name="embed")
    x = embed.index_select(0, ids.flatten()).reshape(1, 1, h)
    mask = g.iota(ctx, lm.int32).reshape(1, 1, 1, ctx) < pos.reshape(1, 1, 1, 1)
    outs = []
    for i in range(layers):
        wq, wk, wv, wo = (g.constant(rng.standard_normal((h, h)).astype(np.float32) / 4, name=f"{i}.{n}")
                          for n in ("wq", "wk", "wv", "wo"))
        kc, vc = g.input(f"k{i}", (1, heads, ctx, hd)), g.input(f"v{i}", (1, heads, ctx, hd))

        def heads_of(t):
            return t.reshape(1, 1, heads, hd).permute(0, 2, 1, 3)

        q, k, v = heads_of(x.linear(wq)), heads_of(x.linear(wk)), heads_of(x.linear(wv))
        scores = lm.where(mask, q.matmul(kc.transpose(-1, -2)), float("-inf"))
        scores = lm.concat([scores, q.matmul(k.transpose(-1, -2))], -1) * (1 / np.sqrt(hd))
        p = scores.softmax(-1)
        attn = p[..., :ctx].matmul(vc) + p[..., ctx:].matmul(v)
        x = x + attn.permute(0, 2, 1, 3).reshape(1, 1, h).linear(wo)
        outs += [(k, f"k{i}_new"), (v, f"v{i}_new")]
    g.output(x.linear(embed), "logits")
    for t, name in outs:
        g.output(t, name)
    return g


def test_a_decode_step_copies_only_its_token_ids(monkeypatch):
    """generate() on "cuda" keeps the KV cache and the position on the device: a step uploads its
    token ids and nothing else, and downloads nothing (eager, capture and replay steps alike)."""
    cp = _counting_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    _stand_in_nvrtc(monkeypatch)
    g = _decode_graph()
    rt = KernelRuntime(g.output_nodes, lm.devices.get("cuda"))
    assert cp.copies["h2d"] == len(rt.plan.weights)  # the weights, once, at construction
    rng = np.random.default_rng(1)
    cache = {f"{kv}{i}": cp.asarray(np.zeros((1, 2, 16, 8), np.float32)) for i in range(2) for kv in "kv"}
    pos = cp.asarray(np.array([0], np.int32))
    ids = np.array([[3]], np.int64)
    for step in range(5):
        before = dict(cp.copies)
        outs = rt({"ids": ids, "pos": pos, **cache})  # host token ids, device cache and position
        assert (cp.copies["h2d"] - before["h2d"], cp.copies["d2h"] - before["d2h"]) == (1, 0), f"step {step}"
        assert all(type(o) is cp.ndarray for o in outs)
        for i in range(2):  # the caller's cache update, on the device
            cache[f"k{i}"][:, :, step] = outs[1 + 2 * i][:, :, 0]
            cache[f"v{i}"][:, :, step] = outs[2 + 2 * i][:, :, 0]
        pos[0] += 1
        ids = rng.integers(0, 32, (1, 1))
    assert rt.graph_cache.stats()["captures"] == 1 and rt.graph_cache.stats()["replays"] == 4
    host = {k: np.asarray(v) for k, v in cache.items()}  # the last step against the reference runtime
    want = g.run({"ids": ids, "pos": np.asarray(pos), **host})
    got = rt({"ids": ids, "pos": np.asarray(pos), **host})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_weights_once_across_three_recompiles():
    """Three sequence-length regimes of a tiny Llama through torch.compile on the emulator: three
    graphs, each parameter on the device once, every graph reading the same device copy."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=32, use_cache=False)).eval()
    fast = torch.compile(model, backend="luminal", dynamic=False,
                         options={"device": "cuda-emulator", "optimize": False})
    before, uploads = len(lm.stats()["graphs"]) and lm.stats()["graphs_compiled"], DEVICE_WEIGHTS.uploads
    with torch.no_grad():
        for n in (3, 5, 7):  # static shapes: a recompile per length
            ids = torch.randint(0, 64, (1, n), generator=torch.Generator().manual_seed(n))
            torch.testing.assert_close(fast(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-4)
    from luminal.compiler import STATS

    graphs = [g for i, g in STATS.compiled.numbered() if i >= before and getattr(g.runtime, "plan", None) is not None]
    assert len(graphs) == 3
    params = {p.data_ptr(): name for name, p in model.named_parameters()}
    device_copy: dict[int, list] = {}  # weight address -> the device arrays the graphs read
    for g in graphs:
        for w, dev in zip(g.runtime.plan.weights, g.runtime._weights):
            device_copy.setdefault(w.arg.array.__array_interface__["data"][0], []).append(dev)
    shared = [a for a in params if a in device_copy]
    assert len(shared) == len(params)  # every parameter is a weight of the graphs
    assert all(len(device_copy[a]) == 3 and all(d is device_copy[a][0] for d in device_copy[a]) for a in shared)
    assert DEVICE_WEIGHTS.uploads - uploads == len(device_copy)  # one upload per distinct weight, not per graph
    torch._dynamo.reset()


def test_a_cuda_tensor_crosses_to_the_host_once_and_is_taken_by_dlpack(monkeypatch):
    """A torch CUDA weight: its host copy (what the HLIR constant holds) is made once per process
    and version; on "cuda" the device copy is the tensor itself, by DLPack (no upload)."""
    torch = pytest.importorskip("torch")
    from luminal.runtime import torch_arrays as ta

    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    copies = ta.HOST_COPIES.copies
    host = ta.HOST_COPIES.get(t.detach())
    assert ta.HOST_COPIES.get(t.detach()) is host and ta.HOST_COPIES.copies == copies + 1  # a recompile: no new copy
    assert ta.torch_source(host) is not None and not host.flags.writeable
    t.add_(1)  # changed in place: a new version, a new host copy
    assert ta.HOST_COPIES.get(t.detach()) is not host
    key = ta.HOST_COPIES.key(t.detach())
    gc.collect()
    assert key not in ta.HOST_COPIES.by_key  # dropped with its host copy

    class CudaTensor:  # the CPU tensor posing as a CUDA one (what torch_source returns on a GPU)
        def __init__(self, t):
            self.t, self.device, self.shape, self.dtype = t, types.SimpleNamespace(type="cuda"), t.shape, t.dtype

        def __getattr__(self, name):
            return getattr(self.t, name)

        def detach(self):
            return self.t.detach()

    cp = _counting_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    _stand_in_nvrtc(monkeypatch)
    w = np.ascontiguousarray(t.numpy())
    monkeypatch.setattr(kw, "torch_source", lambda a: CudaTensor(t) if a is w or a.base is w else None)
    g = lm.Graph()
    x = g.input("x", (3, 4))
    g.output(x * g.constant(w, name="w"))
    shared, uploads = DEVICE_WEIGHTS.shared, DEVICE_WEIGHTS.uploads
    rts = [KernelRuntime(g.output_nodes, lm.devices.get("cuda")) for _ in range(2)]
    assert (DEVICE_WEIGHTS.shared - shared, DEVICE_WEIGHTS.uploads - uploads, cp.copies["h2d"]) == (1, 0, 0)
    assert rts[0]._weights[0] is rts[1]._weights[0]
    a = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(np.asarray(rts[1]({"x": a})[0]), a * t.numpy())


def test_graph_cache_is_bounded_in_bytes_and_count(monkeypatch):
    g = lm.Graph()
    x = g.input("x", ("n", 64))
    g.output((x * 2.0).sum(-1))
    rt = KernelRuntime(g.output_nodes, lm.devices.get("cuda-emulator"))
    # a graph holds its staged input and its output (x * 2 is computed inside the sum: no
    # intermediate): n = 2, 3, 4 hold 520, 780 and 1,040 bytes, so the third evicts the first
    rt.graph_cache = GraphCache(capacity=8, max_bytes=2000)
    for n in (2, 3, 4, 40):  # 40 rows: 10 KiB of staging alone, never captured
        for _ in range(3):
            rt({"x": np.ones((n, 64), np.float32)})
    s = rt.graph_cache.stats()
    assert s["too_big"] == 2 and s["bytes"] <= 2000 and s["evictions"] >= 1
    assert [h["binding"]["n"] for h in rt.graph_cache.held()][-1] == 4
    text = "\n".join(rt.report_lines())
    assert "CUDA graphs:" in text and "of at most 8 held" in text
    monkeypatch.setenv("LUMINAL_CUDA_GRAPHS_MAX", "3")
    monkeypatch.setenv("LUMINAL_CUDA_GRAPH_MB", "1")
    assert (GraphCache().capacity, GraphCache().max_bytes) == (3, 1 << 20)
    monkeypatch.setenv("LUMINAL_CUDA_GRAPHS_MAX", "many")
    with pytest.raises(lm.DeviceError, match="LUMINAL_CUDA_GRAPHS_MAX"):
        GraphCache()


def test_roofline_rows_and_summary():
    from luminal.kernels import roofline as rl

    g = lm.Graph()
    x = g.input("x", ("n", 64))
    w = g.constant(np.ones((64, 32), np.float32), name="w")
    g.output(x.matmul(w).softmax(-1))
    c = g.compile(device="cuda-emulator", optimize=False)
    with pytest.raises(lm.InputError, match="call the model first"):
        c.roofline()
    c(x=np.ones((4, 64), np.float32))
    rows = c.roofline(gpu="a100")  # dims from the last call
    assert rows and set(rows[0]) >= {"kernel", "bytes", "flops", "predicted_us"}
    assert rows == c.roofline(gpu="a100", bindings={"n": 4})
    big = c.roofline(gpu="l4", bindings={"n": 4096}, launch_us=0)
    assert sum(r["bytes"] for r in big) >= 4096 * 64 * 4 + 64 * 32 * 4  # at least the input and the weight
    assert all(r["predicted_us"] == max(r["memory_us"], r["compute_us"]) for r in big)
    with pytest.raises(lm.DeviceError, match="known"):
        c.roofline(gpu="tpu")
    assert {"h200", "h100", "a100", "l4"} <= set(rl.GPUS)
    assert rl.GPUS["h200"].bandwidth == 4.8e12 and rl.GPUS["h200"].gemm_peak("bf16") == 989.5e12


def test_profile_times_each_launch_with_events_on_the_stand_in_cupy(monkeypatch):
    """`KernelRuntime.profile` (what the GPU check holds the roofline to): one row per launch of
    the binding, in the roofline's order, timed by CUDA events on "cuda"."""
    import time

    cp = _counting_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    _stand_in_nvrtc(monkeypatch)

    class Event:
        def __init__(self):
            self.t = None

    def record(self, event=None):
        event = event or Event()
        event.t = time.perf_counter()
        return event

    monkeypatch.setattr(cp.cuda.Stream, "record", record)
    cp.cuda.Event = Event
    cp.cuda.get_elapsed_time = lambda a, b: 1e3 * (b.t - a.t)
    cp.ones = lambda shape, dtype: np.ones(shape, dtype).view(cp.ndarray)
    g = _decode_graph(layers=1)
    rt = KernelRuntime(g.output_nodes, lm.devices.get("cuda"))
    feeds = {"ids": np.array([[1]], np.int64), "pos": np.array([3], np.int32),
             **{f"{kv}0": np.zeros((1, 2, 16, 8), np.float32) for kv in "kv"}}
    rows = rt.profile(feeds, repeats=2)
    from luminal.kernels.roofline import roofline

    predicted = roofline(rt.plan, {}, "h200")  # the same launches in the same order (a cuBLAS step is named "gemm")
    assert len(rows) == len(predicted) and all(
        r["kernel"] == p["kernel"] or (r["kernel"] == "gemm" and p["class"] == "gemm") for r, p in zip(rows, predicted))
    assert all(r["seconds"] >= 0 for r in rows) and rt.graph_cache.captures == 0  # eager, outside the graph cache


def test_a_cuda_weight_never_crosses_to_the_host_on_cuda(monkeypatch):
    """A weight built from a torch CUDA tensor (`g.constant(tensor)`, as the torch frontends do)
    holds the tensor: the "cuda" runtime takes it by DLPack with no host copy at all; the NumPy
    runtime, which reads values on the host, copies it then (once), and computes the same."""
    torch = pytest.importorskip("torch")
    from luminal.runtime import torch_arrays as ta

    class CudaTensor:  # a CPU tensor posing as a CUDA one
        def __init__(self, t):
            self.t, self.device, self.shape, self.dtype = t, types.SimpleNamespace(type="cuda"), t.shape, t.dtype

        def __getattr__(self, name):
            return getattr(self.t, name)

        def detach(self):
            return self

    t = torch.linspace(-1, 1, 12).reshape(3, 4)
    cp = _counting_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    _stand_in_nvrtc(monkeypatch)
    monkeypatch.setattr(ta.HOST_COPIES, "get", lambda tensor, real=ta.HOST_COPIES.get: real(tensor.t))
    g = lm.Graph()
    x = g.input("x", (3, 4))
    w = g.constant(CudaTensor(t), name="w")
    assert w.node.arg.source is not None and w.node.arg._array is None  # shape and dtype known, no values yet
    g.output(x * w)
    copies, shared = ta.HOST_COPIES.copies, DEVICE_WEIGHTS.shared
    rt = KernelRuntime(g.output_nodes, lm.devices.get("cuda"))
    a = np.full((3, 4), 2.0, np.float32)
    got = np.asarray(rt({"x": a})[0])
    assert (ta.HOST_COPIES.copies - copies, DEVICE_WEIGHTS.shared - shared, cp.copies["h2d"]) == (0, 1, 1)  # x only
    np.testing.assert_array_equal(got, a * t.numpy())
    np.testing.assert_array_equal(g.run(x=a)[0], got)  # the host reads it: copied now, once
    assert ta.HOST_COPIES.copies - copies == 1 and w.node.arg._array is not None
