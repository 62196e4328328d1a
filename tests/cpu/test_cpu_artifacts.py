"""The cpu backend's library and launch table: the library holds the distinct kernels only (the
same library at every depth), the launch order is data, and a later process rebuilds the runtime
from stored artifacts without rendering C (through the compile cache); bad artifacts only cost
the rendering."""

import json

import numpy as np
import pytest

import luminal as lm
from luminal import compile_cache
from luminal.kernels.cpu import build, program
from luminal.kernels.cpu.runtime import CpuRuntime

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


def _mlp(layers: int) -> lm.Graph:
    """`layers` identical blocks (matmul, bias, gelu, residual, row norm): one kernel set at any depth."""
    rng = np.random.default_rng(0)
    g = lm.Graph(f"mlp{layers}")
    x = g.input("x", ("n", 8))
    for i in range(layers):
        w = g.constant(rng.standard_normal((8, 8)).astype(np.float32) / 3, name=f"w{i}")
        b = g.constant(rng.standard_normal(8).astype(np.float32), name=f"b{i}")
        h = (x @ w + b).gelu() + x
        x = h / (h * h).mean(-1, keepdim=True).sqrt()
    g.output(x.softmax(-1))
    return g


def _feeds(n: int = 5):
    return {"x": np.random.default_rng(1).standard_normal((n, 8)).astype(np.float32)}


def test_one_library_at_every_depth():
    one, four = CpuRuntime(_mlp(1).output_nodes), CpuRuntime(_mlp(4).output_nodes)
    assert one.library_path == four.library_path and one.source == four.source
    assert len(four.program.steps) > len(one.program.steps) and four.program.kernels == one.program.kernels
    g = _mlp(4)
    np.testing.assert_allclose(four(_feeds())[0], g.run(_feeds())[0], rtol=1e-5, atol=1e-6)


def test_the_source_does_not_follow_the_split(monkeypatch, tmp_path):
    """A busy machine compiles a library in fewer units: the same library, and the same source to read."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "units", lambda kernels: 1)
    whole = CpuRuntime(_mlp(2).output_nodes)
    monkeypatch.setattr(build, "units", lambda kernels: 3)
    split = CpuRuntime(_mlp(2).output_nodes)
    assert len(whole.program.sources) == 1 and len(split.program.sources) == 3
    assert split.library_path == whole.library_path and split.source == whole.source
    assert split.source.count("void lum_run(") == 1


def test_a_runtime_from_its_artifacts_renders_nothing(monkeypatch):
    g = _mlp(3)
    first = CpuRuntime(g.output_nodes)
    data = json.loads(json.dumps(first.artifacts()))  # plain JSON
    monkeypatch.setattr(program, "render_program", lambda *_: pytest.fail("rendered"))
    again = CpuRuntime(g.output_nodes, artifacts=data)
    assert again.restored and again.library_path == first.library_path
    assert [s.name for s in again.program.steps] == [s.name for s in first.program.steps]
    for n in (1, 7):  # symbolic dims bound per call
        np.testing.assert_array_equal(again(_feeds(n))[0], first(_feeds(n))[0])
    assert "lum_run" in again.source  # read back from beside the library


@pytest.mark.parametrize("damage", ["code", "kernel", "length", "input", "dims", "library", "type"])
def test_bad_artifacts_are_rendered_afresh(damage):
    g = _mlp(2)
    data = CpuRuntime(g.output_nodes).artifacts()
    steps = data["steps"]
    if damage == "code":
        data["code"] = "another version"
    elif damage == "kernel":
        steps[0] = len(data["kernels"])  # no such kernel
    elif damage == "length":
        steps.pop()
    elif damage == "input":  # a step reading a buffer computed after it
        steps[1:3] = [1, len(steps)]
    elif damage == "dims":
        data["symbols"] = ["nope"]
    elif damage == "library":
        data["library"] = "0" * 32
    else:
        data["steps"] = "steps"
    rt = CpuRuntime(g.output_nodes, artifacts=data)
    assert not rt.restored
    np.testing.assert_allclose(rt(_feeds())[0], g.run(_feeds())[0], rtol=1e-5, atol=1e-6)


def test_a_cache_hit_builds_the_runtime_from_the_stored_artifacts(monkeypatch, tmp_path, one_library):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "1")
    first = _mlp(2).compile(device="cpu")
    assert not first.runtime.restored and first.report().cache["build"] == "miss"
    (sidecar,) = (tmp_path / "graphs").glob("*.cpu.json")
    second = _mlp(2).compile(device="cpu")
    assert second.runtime.restored and second.report().cache == {"optimize": "hit", "build": "hit"}
    np.testing.assert_array_equal(second(_feeds())[0], first(_feeds())[0])
    sidecar.write_text(sidecar.read_text().replace('"steps": [', '"steps": [0, '))  # its sha256 no longer matches
    third = _mlp(2).compile(device="cpu")
    assert not third.runtime.restored and third.report().cache["build"] == "hit"  # rendered; the library cached
    assert compile_cache.device_artifacts(sidecar.name.split(".")[0], "cpu") == first.runtime.artifacts()  # rewritten


def test_the_driver_runs_the_table_in_order():
    """The table's kernel index, pointer codes (buffers >= 0, arena slots < 0) and dim codes."""
    g = _mlp(1)
    rt = CpuRuntime(g.output_nodes)
    table = rt._table.tolist()
    i, steps = 0, 0
    while i < len(table):
        k, n_ptr, n_dim = table[i:i + 3]
        assert rt.program.kernels[k] == rt.program.steps[steps].name
        assert n_ptr == 1 + len(rt.program.steps[steps].inputs) and n_dim == len(rt.program.steps[steps].symbols)
        i, steps = i + 3 + n_ptr + n_dim, steps + 1
    assert steps == len(rt.program.steps) and "lum_kernels[t[0]](p, d, err)" in program.DRIVER


def test_a_library_split_into_units_compiled_in_parallel(monkeypatch, tmp_path):
    """Several translation units (shared BLAS state and precision defined once, in the driver's)
    build the library the one-unit text names: the same cache entry however it was split."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "units", lambda kernels: 3)
    g = _mlp(2)
    split = CpuRuntime(g.output_nodes)
    assert len(split.program.sources) == 3 and len(build.c_files(split.library_path)) == 3
    for precision in ("float32", "float64"):
        lm.set_precision(precision)
        try:
            np.testing.assert_allclose(split(_feeds())[0], g.run(_feeds())[0], rtol=1e-5, atol=1e-6)
        finally:
            lm.set_precision(None)
    monkeypatch.setattr(build, "units", lambda kernels: 1)
    builds = build.stats.builds
    one = CpuRuntime(g.output_nodes)
    assert one.library_path == split.library_path and build.stats.builds == builds  # a cache hit


def test_a_dynamo_graph_cache_hit_restores_the_runtime(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    from luminal.compiler import STATS

    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "1")
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    x = torch.randn(4, 16)
    runs = []
    with torch.no_grad():
        for _ in range(2):
            torch._dynamo.reset()  # a new process, as far as Dynamo is concerned
            out = torch.compile(model, backend="luminal")(x)
            runs.append((STATS.compiled[-1], out))
    (first, a), (second, b) = runs
    assert not first.runtime.restored and second.runtime.restored
    assert second.report().cache == {"dynamo graph": "hit", "optimize": "hit", "build": "hit"}
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(b, model(x), rtol=1e-5, atol=1e-5)


def test_a_table_pointing_a_kernel_at_a_smaller_buffer_is_not_followed():
    """Stored artifacts only pick each step's kernel: its buffers are the graph's. A table
    edited to hand the first GEMM the 8-element bias for its 8x8 weight (the kernel would read
    past it) does not fit the graph, and the runtime is rendered afresh and right."""
    from luminal.kernels.plan import Schedule

    g = _mlp(2)
    data = CpuRuntime(g.output_nodes).artifacts()
    sched = Schedule.build(g.output_nodes)
    position = {id(n): i for i, n in enumerate([*sched.weights, *sched.inputs])}
    weight, bias = (position[id(n)] for n in sched.weights if n.arg.name in ("w0", "b0"))
    steps, i = data["steps"], 0
    while weight not in steps[i + 2:i + 2 + steps[i + 1]]:
        i += 3 + steps[i + 1] + steps[i + 2 + steps[i + 1]]
    steps[i + 2 + steps[i + 2:i + 2 + steps[i + 1]].index(weight)] = bias
    rt = CpuRuntime(g.output_nodes, artifacts=data)
    assert not rt.restored
    np.testing.assert_allclose(rt(_feeds())[0], g.run(_feeds())[0], rtol=1e-5, atol=1e-6)
