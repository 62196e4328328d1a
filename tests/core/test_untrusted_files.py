"""Untrusted `.lum` files: loading one never runs code from it, never trusts its numbers, and
never allocates more than the file justifies; every bad file is a named `SaveFormatError`.
The fuzz tests mutate real files (truncations, flipped bytes, edited JSON, deleted members)
with fixed seeds: each case loads, or raises a `LuminalError`, within a time bound."""

import hashlib
import json
import zipfile

import numpy as np
import pytest
from untrusted import byte_mutants, must_fail_cleanly

import luminal as lm
from luminal import archive, saving
from luminal.hlir import symbolic as sym
from luminal.saving import SaveFormatError

PWN = "(__import__('os').system('touch pwned'), batch)[1]"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A small model with weights (f32 and bf16), symbolic dims, views and a reduce."""
    g = lm.Graph()
    x = g.input("x", ("batch", 8))
    w = g.constant(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), name="w")
    b = g.constant(np.arange(4, dtype=np.float32).astype(lm.bf16.numpy), name="b")
    h = (x @ w + b.cast(lm.f32)).relu()
    g.output(h[:, 1:].sum(-1) + h.permute(1, 0)[0], "y")
    path = tmp_path_factory.mktemp("good") / "good.lum"
    g.compile(optimize=False).save(path)
    return path


def rewrite(src, dst, edits: dict, drop=()):
    """Copy the archive `src` to `dst`, member `name` replaced by `edits[name](data)`."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            if name in drop:
                continue
            data = zin.read(name)
            if name in edits:
                data = edits[name](data)
            zout.writestr(name, data)
    return dst


def edit_json(fn):
    def edit(data):
        doc = json.loads(data)
        fn(doc)
        return json.dumps(doc)
    return edit


def nodes_of(path, op):
    with zipfile.ZipFile(path) as zf:
        nodes = json.loads(zf.read("graph.json"))["nodes"]
    return [i for i, n in enumerate(nodes) if n["op"] == op]


def test_dim_text_is_never_evaluated(good, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def plant(graph):
        graph["nodes"][nodes_of(good, "Input")[0]]["shape"][0] = PWN

    bad = rewrite(good, tmp_path / "bad.lum", {"graph.json": edit_json(plant)})
    with pytest.raises(SaveFormatError, match=r"graph.json node \d+ \(Input\).*not part of the dim grammar"):
        lm.load(bad)
    assert not (tmp_path / "pwned").exists()
    for text in ["__import__('os')", "x.__class__", "lambda: 0", "[1][0]", "'a'", "1.5", "f(x)"]:
        with pytest.raises(lm.LuminalError):
            sym.parse(text)


def test_a_weight_must_match_its_node(good, tmp_path):
    from safetensors.numpy import load, save

    def weights(fn):
        def edit(blob):
            arrays = load(blob)
            fn(arrays)
            return save(arrays)
        return edit

    bigger = rewrite(good, tmp_path / "bigger.lum", {"weights.safetensors": weights(
        lambda a: a.update(w=np.zeros((9, 4), np.float32)))})
    with pytest.raises(SaveFormatError, match=r"weight 'w' is f32\[9, 4\], its node f32\[8, 4\]"):
        lm.load(bigger)
    smaller = rewrite(good, tmp_path / "smaller.lum", {"weights.safetensors": weights(
        lambda a: a.update(w=np.zeros((8, 3), np.float32)))})
    with pytest.raises(SaveFormatError, match=r"weight 'w' is f32\[8, 3\]"):
        lm.load(smaller)
    retyped = rewrite(good, tmp_path / "retyped.lum", {"meta.json": edit_json(
        lambda m: m["weight_dtypes"].update(w="i32"))})
    with pytest.raises(SaveFormatError, match="weight 'w' is stored as float32, meta.json says 'i32'"):
        lm.load(retyped)
    as_bf16 = rewrite(good, tmp_path / "as_bf16.lum", {"meta.json": edit_json(
        lambda m: m["weight_dtypes"].update(w="bf16"))})
    with pytest.raises(SaveFormatError, match="weight 'w'"):
        lm.load(as_bf16)
    missing = rewrite(good, tmp_path / "missing.lum", {"weights.safetensors": weights(lambda a: a.pop("w"))})
    with pytest.raises(SaveFormatError, match="'w'"):
        lm.load(missing)


def test_nodes_are_held_to_their_ops_rules(good, tmp_path):
    def node_edit(op, fn):
        def plant(graph):
            fn(graph["nodes"][nodes_of(good, op)[0]], graph)
        return rewrite(good, tmp_path / f"{op}.lum", {"graph.json": edit_json(plant)})

    cases = [
        ("SumReduce", lambda n, g: n.update(shape=["batch", "3"]), r"\(SumReduce\).*has shape \(batch, 3\)"),
        ("SumReduce", lambda n, g: n.update(arg={"i": 7}), r"\(SumReduce\).*axis 7 is out of range"),
        ("Add", lambda n, g: n.update(dtype="f64"), r"\(Add\).*Add of f32 and f32 gives f64"),
        ("Add", lambda n, g: n.update(src=n["src"][:1]), r"\(Add\).*takes 2 source"),
        ("Add", lambda n, g: n.update(src=[-1, 0]), r"\(Add\).*earlier nodes"),
        ("Add", lambda n, g: n.update(src=[0, 10**6]), r"\(Add\).*earlier nodes"),
        ("View", lambda n, g: n["arg"]["view"].update(offset="1000"), r"\(View\).*reads elements"),
        ("View", lambda n, g: n["arg"]["view"].update(offset="batch*8"), r"\(View\).*reads elements"),
        ("Input", lambda n, g: n.update(shape=["batch", "99999999999999999999999"]), r"\(Input\).*beyond 2\*\*63"),
        ("Input", lambda n, g: n.update(dtype="f99"), r"\(Input\).*f99"),
        ("Constant", lambda n, g: n.update(arg={"weight": "nope"}), r"weight 'nope' is missing"),
        ("Cast", lambda n, g: n.update(op="Exp2"), r"\(Exp2\).*dtype"),
        ("Cast", lambda n, g: g.update(outputs=[len(g["nodes"])]), r"graph.json outputs"),
        ("Cast", lambda n, g: n.update(op="Nope"), r"unknown op 'Nope'"),
        ("Constant", lambda n, g: [e.update(op="Input", arg={"s": "x"}) for e in g["nodes"] if e["arg"] == {"weight": "w"}],
         "input name twice"),
    ]
    for op, fn, message in cases:
        with pytest.raises(SaveFormatError, match=message):
            lm.load(node_edit(op, fn))


def test_huge_static_shapes_and_seeded_weights_are_refused(good, tmp_path):
    def plant(graph):
        for i in nodes_of(good, "Input"):
            graph["nodes"][i]["shape"][0] = str(10**12)

    huge = rewrite(good, tmp_path / "huge.lum", {"graph.json": edit_json(plant)})
    with pytest.raises(SaveFormatError, match=r"graph.json node \d+ \(Input\).*more than \d+ elements"):
        lm.load(huge)
    g = lm.Graph()
    x = g.input("x", (4,))
    g.output(x + g.constant(np.ones(4, np.float32), name="w"))
    seeded = g.compile(optimize=False).save(tmp_path / "seeded.lum", weights="seeded", weight_specs={"w": {"mean": 0, "std": 1}})
    spec_edits = {
        "shape": ([10**7, 10**7], r"seeded weights up to 'w' hold 100000000000000 elements"),
        "seed": (-1, r"spec of 'w' is malformed: seed -1"),
        "std": (float("nan"), r"spec of 'w' is malformed: mean and std"),
        "dtype": ("i64", r"spec of 'w' is malformed: dtype 'i64'"),
    }
    spec_edits_graph = {"shape": ([2 * 10**7], r"the seeded weight 'w' is f32\[20000000\], its node f32\['4'\]"),
                        "dtype": ("f64", r"the seeded weight 'w' is f64\[4\], its node f32")}
    for key, (value, message) in [*spec_edits.items(), *spec_edits_graph.items()]:
        bad = rewrite(seeded, tmp_path / f"spec_{key}.lum", {"meta.json": edit_json(lambda m, k=key, v=value: m["weight_specs"]["w"].update({k: v}))})
        with pytest.raises(SaveFormatError, match=message):
            lm.load(bad)
    np.testing.assert_array_equal(lm.load(seeded)(x=np.zeros(4, np.float32))[0].shape, (4,))


def test_json_bombs_and_deep_nesting(good, tmp_path, monkeypatch):
    deep = rewrite(good, tmp_path / "deep.lum", {"graph.json": lambda d: b"[" * 100_000 + b"]" * 100_000})
    with pytest.raises(SaveFormatError, match="corrupt header"):
        lm.load(deep)
    nested = {"t": []}
    for _ in range(300):  # 600 levels: parses as JSON
        nested = {"t": [nested]}

    def plant(graph):
        graph["nodes"][nodes_of(good, "SumReduce")[0]]["arg"] = nested

    monkeypatch.setattr(saving, "MAX_ARG_DEPTH", 100)
    with pytest.raises(SaveFormatError, match="nested more than 100 deep"):
        lm.load(rewrite(good, tmp_path / "nested.lum", {"graph.json": lambda d: _dumps_deep(d, plant)}))
    bomb = tmp_path / "bomb.lum"  # 1 MB of spaces deflate to 1 kB: refused by the size it claims
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zout:
        for name in zin.namelist():
            zout.writestr(name, zin.read(name) + (b" " * 2**20 if name == "graph.json" else b""))
    monkeypatch.setattr(archive, "MAX_JSON_BYTES", 2**20)
    with pytest.raises(SaveFormatError, match=r"graph.json claims \d+ bytes \(at most 1048576\)"):
        lm.load(bomb)


def _dumps_deep(data, plant):
    import sys

    doc = json.loads(data)
    plant(doc)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(50_000)
    try:
        return json.dumps(doc)
    finally:
        sys.setrecursionlimit(limit)


def test_output_spec_may_not_import_modules(good, tmp_path):
    spec = json.dumps([1, {"type": "collections.defaultdict", "context": json.dumps(
        {"default_factory_module": "os", "default_factory_name": "system", "dict_context": []}), "children_spec": []}])
    bad = rewrite(good, tmp_path / "spec.lum", {"meta.json": edit_json(lambda m: m["frontend"].update(out_spec=spec))})
    with pytest.raises(SaveFormatError, match="defaultdict"):
        lm.load(bad)
    escaped = json.dumps([1, {"type": "builtins.tuple", "context": json.dumps(
        {"x": {"__enum__": True, "fqn": "os:system", "name": "x"}}).replace("_", "\\u005f"), "children_spec": []}])
    assert "__enum__" not in escaped  # hidden from a text search, not from the walk over the parsed JSON
    bad = rewrite(good, tmp_path / "enum.lum", {"meta.json": edit_json(lambda m: m["frontend"].update(out_spec=escaped))})
    with pytest.raises(SaveFormatError, match="an enum"):
        lm.load(bad)


def test_cubins_are_bound_to_their_bytes(tmp_path):
    source = "extern \"C\" __global__ void k() {}"
    cubin = b"\x7fELF fake cubin"
    meta = {"cubins": ["sm_90"], "kernels_sha256": hashlib.sha256(source.encode()).hexdigest(),
            "cubins_sha256": {"sm_90": hashlib.sha256(cubin).hexdigest()}}
    path = tmp_path / "k.lum"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("kernels.sm_90.cubin", cubin)
    assert archive.saved_cubins(path, meta, source) == {"sm_90": cubin}
    assert archive.saved_cubins(path, meta, source + " ") is None  # another source: compile it
    assert archive.saved_cubins(path, {k: v for k, v in meta.items() if k != "cubins_sha256"}, source) is None
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("kernels.sm_90.cubin", cubin + b"!")
    with pytest.raises(SaveFormatError, match="kernels.sm_90.cubin does not match its sha256"):
        archive.saved_cubins(path, meta, source)


# --- fuzzing ------------------------------------------------------------------------------------
def _json_mutants(graph: dict, rng: np.random.Generator):
    values = ["0", "-1", str(2**40), "batch*batch*batch", "floor(batch/0)", "Mod(batch, 0)", PWN, 10**30, None, [], {}, -5, "x"]
    nodes = graph["nodes"]
    for k in range(60):
        doc = json.loads(json.dumps(graph))
        node = doc["nodes"][int(rng.integers(0, len(nodes)))]
        field = ["shape", "src", "dtype", "op", "arg"][k % 5]
        value = values[int(rng.integers(0, len(values)))]
        if field == "shape" and node["shape"]:
            node["shape"][int(rng.integers(0, len(node["shape"])))] = value
        elif field == "src":
            node["src"] = [value] if not isinstance(value, str) else node["src"][::-1]
        elif field == "arg" and node["arg"] and "view" in node["arg"]:
            view = node["arg"]["view"]
            key = ["shape", "strides", "offset"][k % 3]
            if key == "offset":
                view[key] = value if isinstance(value, str) else str(value)
            elif view[key]:
                view[key][0] = value if isinstance(value, str) else str(value)
        else:
            node[field] = value
        yield f"graph.json {field} := {value!r}", doc


def test_fuzz_load(good, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(1234)
    data = good.read_bytes()
    x = np.ones((2, 8), np.float32)
    loaded = 0
    for what, mutant in byte_mutants(data, rng):
        path = tmp_path / "m.lum"
        path.write_bytes(mutant)
        loaded += must_fail_cleanly(lm.load, path, what, x)
    with zipfile.ZipFile(good) as zf:
        graph = json.loads(zf.read("graph.json"))
        names = zf.namelist()
    for what, doc in _json_mutants(graph, rng):
        path = rewrite(good, tmp_path / "j.lum", {"graph.json": lambda _, d=doc: json.dumps(d)})
        loaded += must_fail_cleanly(lm.load, path, what, x)
    for name in names:
        path = rewrite(good, tmp_path / "d.lum", {}, drop=(name,))
        assert not must_fail_cleanly(lm.load, path, f"without {name}") or name == "kernels.cu"
        path = inflated(good, tmp_path / "i.lum", name, 128 << 20)
        assert not must_fail_cleanly(lm.load, path, f"{name} inflating to 128 MB") or name == "kernels.cu"
    import os

    os.mkfifo(tmp_path / "fifo.lum")
    (tmp_path / "zero.lum").symlink_to("/dev/zero")
    for special in ("fifo.lum", "zero.lum"):
        assert not must_fail_cleanly(lm.load, tmp_path / special, special)
    assert not (tmp_path / "pwned").exists()
    assert loaded < 40  # most mutants are refused


@pytest.mark.parametrize("device", ["cpu", "cuda-emulator"])
def test_a_view_that_leaves_its_buffer_only_at_some_sizes_stops_the_kernel_runtime(device):
    """`check_node` probes symbolic views at a few sizes; generated kernels read views without
    bounds checks, so the kernel runtime checks every view once per binding before launching."""
    from luminal.devices import get
    from luminal.hlir.ops import Node, Op
    from luminal.hlir.shape import ShapeTracker
    from luminal.hlir.verify import check_views

    x = Node(Op.INPUT, lm.f32, (sym.parse("2*n"),), (), "x")
    offset = sym.parse("max(0, n*n - 9*n)")  # 0 up to n = 9: in bounds wherever check_node probes
    view = Node(Op.VIEW, lm.f32, (2,), (x,), ShapeTracker((2,), (1,), offset))
    out = Node(Op.CONTIGUOUS, lm.f32, (2,), (view,))
    check_views([view], {"n": 3})
    runtime = get(device).runtime([out])
    np.testing.assert_array_equal(runtime({"x": np.arange(6, dtype=np.float32)})[0], [0, 1])
    with pytest.raises(lm.ShapeError, match="reads elements"):
        runtime({"x": np.arange(40, dtype=np.float32)})  # n = 20: offset 220 in a buffer of 40


# --- what a file may make `load` allocate, and what `load` opens ---------------------------------
def inflated(src, dst, member: str, size: int = 256 << 20):
    """`src` with `member` replaced by `size` zero bytes, deflated (a few hundred kB on disk)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compresslevel=9) as zout:
        for name in zin.namelist():
            if name != member:
                zout.writestr(name, zin.read(name))
        info = zipfile.ZipInfo(member)
        info.compress_type = zipfile.ZIP_DEFLATED
        with zout.open(info, "w", force_zip64=True) as f:
            chunk = bytes(1 << 20)
            for _ in range(size >> 20):
                f.write(chunk)
    return dst


@pytest.mark.parametrize("member", ["weights.safetensors", "graph.json", "meta.json"])
def test_a_member_that_inflates_is_refused_before_it_is_read(good, tmp_path, member):
    """A 256 MB member deflated to ~250 kB: refused by the size it claims against what the
    metadata (or, for JSON, the member's own bytes) justifies, before a byte of it is held."""
    import tracemalloc

    bomb = inflated(good, tmp_path / "bomb.lum", member)
    assert bomb.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(SaveFormatError, match=rf"bomb.lum: {member} claims 268435456 bytes \(at most \d+"):
            lm.load(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"loading allocated {peak} bytes"


def test_weights_are_read_once_into_views_of_the_member(good):
    """The stored weights are read-only views of the one buffer the member was read into (the
    safetensors reader copied each tensor again), equal to what was saved."""
    _, outputs, _ = archive.read_archive(good)
    arrays = {n.arg.name: n.arg.array for n in saving.toposort(outputs) if isinstance(n.arg, saving.ConstantArray)}
    np.testing.assert_array_equal(arrays["w"], np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32))
    assert arrays["b"].dtype == lm.bf16.numpy and not arrays["w"].flags.writeable
    assert arrays["w"].base is not None and arrays["w"].ctypes.data % 4 == 0


@pytest.mark.parametrize("kind", ["fifo", "symlink to /dev/zero", "directory", "character device"])
def test_load_opens_only_regular_files(tmp_path, kind):
    import os

    from untrusted import time_limit

    path = tmp_path / "model.lum"
    if kind == "fifo":
        os.mkfifo(path)  # opened for reading, it would wait for a writer forever
    elif kind == "symlink to /dev/zero":
        path.symlink_to("/dev/zero")  # read whole, it never ends
    elif kind == "directory":
        path.mkdir()
    else:
        path = "/dev/null"
    what = {"fifo": "a FIFO", "directory": "a directory"}.get(kind, "a character device")
    with time_limit(5, f"load of {kind}"), pytest.raises(SaveFormatError, match=rf"{path} is not a regular file \(it is {what}\)"):
        lm.load(path)


def test_cubins_are_run_only_when_the_caller_trusts_them(tmp_path, monkeypatch):
    """A .lum with cubins carries machine code: by default load compiles the source rendered from
    the verified graph and ignores them; trust_binaries=True hands them (hash-checked) to the device."""
    import dataclasses

    from luminal import devices
    from luminal.kernels.plan import KernelPlan

    g = lm.Graph()
    x = g.input("x", (4,))
    g.output(x * 2.0)
    compiled = g.compile(optimize=False)
    source, cubin = KernelPlan.build(compiled.outputs).source, b"\x7fELF not really"
    plain = compiled.save(tmp_path / "plain.lum")
    path = rewrite(plain, tmp_path / "cubins.lum", {"meta.json": edit_json(lambda m: m.update(
        cubins=["sm_90"], cubins_sha256={"sm_90": hashlib.sha256(cubin).hexdigest()},
        kernels_sha256=hashlib.sha256(source.encode()).hexdigest()))})
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("kernels.sm_90.cubin", cubin)
    seen = []
    entry = devices.get("cuda-emulator")

    def factory(device, outputs, **options):
        seen.append(options.get("binaries"))
        return entry.factory(device, outputs, **{k: v for k, v in options.items() if k != "binaries"})

    monkeypatch.setitem(devices.DEVICES, "cuda-emulator", dataclasses.replace(entry, factory=factory))
    default = lm.load(path, device="cuda-emulator")
    assert seen == [None] and any("trust_binaries=True" in n for n in default.report().notes)
    trusted = lm.load(path, device="cuda-emulator", trust_binaries=True)
    assert seen == [None, {"sm_90": cubin}]
    a = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(default(x=a)[0], a * 2)
    np.testing.assert_array_equal(trusted(x=a)[0], a * 2)


@pytest.mark.parametrize("dtype", [lm.int32, lm.bool_])
def test_a_region_is_held_to_its_ops_rules(tmp_path, dtype):
    """A FusedElementwise expression's levels obey their ops' rules as nodes do: an integer Recip
    (in C a division by zero traps) is refused on load, before any kernel is built."""
    from luminal.hlir.ops import Expr, Node, Op

    x = Node(Op.INPUT, dtype, (4,), (), "x")
    expr = Expr(Op.RECIP, dtype, (Expr(Op.INPUT, dtype, (), 0),))
    g = lm.Graph("hostile")
    g.output(lm.Tensor(g, Node(Op.FUSED_ELEMENTWISE, dtype, (4,), (x,), expr)))
    path = tmp_path / "hostile.lum"
    g.compile(device="numpy", optimize=False).save(path)
    with pytest.raises(SaveFormatError, match=r"FusedElementwise Recip needs a float operand"):
        lm.load(path)
