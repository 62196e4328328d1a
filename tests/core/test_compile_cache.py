"""The persistent compile cache (`luminal.compile_cache`): hits skip egglog and give the miss's
bits, bad entries are rebuilt, processes share it safely, its size is bounded, it can be turned
off, and it never serves stale weights. (The rest of the suite runs with it off: conftest.)"""

import json
import logging
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal import compile_cache
from luminal.demo import build_block, make_weights

X = np.random.default_rng(0).standard_normal((2, 5, 64)).astype(np.float32)
EGGLOG_PHASES = ("egglog import", "partition", "encode", "saturate", "extract", "splice", "regions")


def small_graph(hidden: int):
    g = lm.Graph(f"mlp{hidden}")
    x = g.input("x", ("n", hidden))
    w = g.constant(np.ones((hidden, hidden), np.float32))
    g.output((x.matmul(w).sigmoid() * x).softmax(-1).sum(-1), "y")
    return g


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.lum")) if folder.exists() else []


def test_hit_skips_egglog_and_gives_the_miss_bits(cache):
    g = build_block(make_weights())
    miss = g.compile(device="numpy")
    assert miss.report().cache["optimize"] == "miss" and "saturate" in miss.report().phases
    assert len(entries(cache)) == 1
    hit = g.compile(device="numpy")
    rep = hit.report()
    assert rep.cache["optimize"] == "hit"
    assert not set(EGGLOG_PHASES) & set(rep.phases), rep.phases
    assert rep.rules_fired == miss.report().rules_fired and rep.ops_after == miss.report().ops_after
    assert "cache: optimize hit" in str(rep)
    assert hit.outputs == miss.outputs  # node for node (interned), the caller's weights re-bound
    np.testing.assert_array_equal(hit(x=X)[0], miss(x=X)[0])
    np.testing.assert_array_equal(g.compile()(x=X)[0], g.compile()(x=X)[0])  # the default device too


def test_debug_output_names_the_cache(cache, monkeypatch, caplog):
    monkeypatch.setenv("LUMINAL_DEBUG", "1")
    g = build_block(make_weights())
    with caplog.at_level(logging.INFO, logger="luminal"):
        g.compile(device="numpy")
        g.compile(device="numpy")
    text = caplog.text
    assert "cache: optimize miss" in text and "cache: optimize hit" in text


def test_new_weight_values_are_seen_after_a_hit(cache, monkeypatch):
    first = build_block(make_weights(0)).compile(device="numpy")
    w1 = make_weights(1)
    hit = build_block(w1).compile(device="numpy")  # same structure: a hit, with these weights
    assert hit.report().cache["optimize"] == "hit"
    monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "0")
    fresh = build_block(w1).compile(device="numpy")
    monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "1")
    np.testing.assert_array_equal(hit(x=X)[0], fresh(x=X)[0])
    assert not np.array_equal(hit(x=X)[0], first(x=X)[0])
    w2 = make_weights(2)  # a hit whose weights then change in place: the run reads them live
    model = build_block(w2).compile(device="numpy")
    assert model.report().cache["optimize"] == "hit"
    before = model(x=X)[0]
    w2["w_down"] *= 2
    assert not np.array_equal(model(x=X)[0], before)


def test_torch_compile_hit_uses_the_new_model_weights(cache):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch._dynamo")

    def model(seed):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()

    from luminal.compiler import STATS

    x = torch.randn(4, 16)
    reports = []
    with torch.no_grad():
        for seed in (0, 1, 1):
            torch._dynamo.reset()
            m = model(seed)
            fast = torch.compile(m, backend="luminal", options={"device": "numpy"})
            torch.testing.assert_close(fast(x), m(x), rtol=1e-5, atol=1e-5)
            reports.append(STATS.compiled[-1].report())
            if seed == 1 and len(reports) == 3:  # new values in place, after the hit: seen
                m[0].weight.mul_(2)
                torch.testing.assert_close(fast(x), m(x), rtol=1e-5, atol=1e-5)
    assert reports[0].cache == {"optimize": "miss"}
    assert reports[1].cache == reports[2].cache == {"dynamo graph": "hit", "optimize": "hit"}  # lowering skipped too
    assert not {"lower", "import", "saturate"} & set(reports[1].phases)
    # one entry of the lowered HLIR graph; Dynamo's graph's entry links to it (no second copy of the graph)
    assert len(entries(cache)) == 1 and len(list(cache.glob("*.link.json"))) == 1


def test_a_link_whose_graph_entry_is_gone_is_a_miss(cache):
    """Dynamo's graph's entry names the lowered graph's entry; with that one pruned (or
    corrupt), the link is a miss: compiled afresh, right, and both stored again."""
    torch = pytest.importorskip("torch")
    from luminal.compiler import STATS

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(3, 8)
    caches = []
    with torch.no_grad():
        for step in range(3):
            if step == 1:
                (graph,) = entries(cache)
                graph.write_bytes(b"not a zip")
            torch._dynamo.reset()
            torch.testing.assert_close(torch.compile(m, backend="luminal", options={"device": "numpy"})(x), m(x))
            caches.append(STATS.compiled[-1].report().cache)
    assert caches[0] == caches[1] == {"optimize": "miss"}
    assert caches[2] == {"dynamo graph": "hit", "optimize": "hit"}
    assert len(entries(cache)) == 1 and len(list(cache.glob("*.link.json"))) == 1


def corrupt(path: Path, how: str, other: Path) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flipped":
        b = bytearray(data)
        for i in range(40, len(b), max(1, len(b) // 25)):
            b[i] ^= 0xFF
        path.write_bytes(bytes(b))
    elif how == "foreign entry":  # a whole, valid entry of another graph under this key
        path.write_bytes(other.read_bytes())
    elif how == "junk":
        path.write_bytes(b"PK\x03\x04 not really a zip" * 10)
    elif how == "saved model":  # a valid .lum, but not a cache entry
        build_block(make_weights()).compile(optimize=False).save(path)
    elif how == "inflated":  # its weights member deflated from 256 MB of zeros: refused unread
        from test_untrusted_files import inflated

        tmp = inflated(path, path.with_suffix(".tmp"), "weights.safetensors")
        os.replace(tmp, path)
    elif how == "rewritten":  # graph.json re-spelled (same graph) by a tool that does not know the block
        rewrite_member(path, "graph.json", lambda d: json.dumps(json.loads(d), indent=1).encode())
    elif how == "fifo":  # opened for reading, it would wait for a writer forever
        path.unlink()
        os.mkfifo(path)


def rewrite_member(path: Path, member: str, edit) -> None:
    with zipfile.ZipFile(path) as zin:
        members = {name: zin.read(name) for name in zin.namelist()}
    members[member] = edit(members[member])
    with zipfile.ZipFile(path, "w") as zout:
        for name, data in members.items():
            zout.writestr(name, data)


@pytest.mark.parametrize("how", ["truncated", "flipped", "foreign entry", "junk", "saved model", "inflated", "rewritten",
                                 "fifo"])
def test_a_bad_entry_is_ignored_and_rebuilt(cache, how, caplog):
    from untrusted import time_limit  # here: child processes import this module without tests/ on their path

    g = build_block(make_weights())
    good = g.compile(device="numpy")
    (path,) = entries(cache)
    small_graph(8).compile(device="numpy")
    (other,) = [p for p in entries(cache) if p != path]
    corrupt(path, how, other)
    with caplog.at_level(logging.DEBUG, logger="luminal"), time_limit(60, f"a compile over a {how} entry"):
        rebuilt = g.compile(device="numpy")
    assert rebuilt.report().cache["optimize"] == "miss"
    assert "compile cache: ignoring" in caplog.text
    np.testing.assert_array_equal(rebuilt(x=X)[0], good(x=X)[0])
    assert g.compile(device="numpy").report().cache["optimize"] == "hit"  # the entry was replaced


def test_an_entry_edited_after_it_was_written_warns_and_is_recompiled(cache):
    """`x*5` written into the entry of `x*2` (graph.json edited, the zip rewritten whole): the
    entry's sha256 of its graph.json no longer matches, so it is refused with a
    CacheEntryWarning naming it, compiled afresh (x*2) and replaced."""
    g = lm.Graph("double")
    x = g.input("x", (4,))
    g.output(x * 2.0)
    a = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(g.compile(device="numpy")(x=a)[0], a * 2)
    (path,) = entries(cache)
    two, five = json.dumps({"f": (2.0).hex()}), json.dumps({"f": (5.0).hex()})
    with zipfile.ZipFile(path) as zf:
        assert two in zf.read("graph.json").decode()
    rewrite_member(path, "graph.json", lambda d: d.decode().replace(two, five).encode())
    with pytest.warns(compile_cache.CacheEntryWarning, match=rf"entry {path} was changed after it was written "
                                                               r"\(graph.json does not match its sha256\)"):
        again = g.compile(device="numpy")
    assert again.report().cache["optimize"] == "miss"
    np.testing.assert_array_equal(again(x=a)[0], a * 2)
    hit = g.compile(device="numpy")
    assert hit.report().cache["optimize"] == "hit"
    np.testing.assert_array_equal(hit(x=a)[0], a * 2)


def test_an_edited_link_is_refused(cache, caplog):
    """A link's JSON carries the sha256 of its own text: an edited binding (which of the caller's
    weights each of the entry's references is) is a miss, not the graph over the wrong weights."""
    g = small_graph(8)
    compiled = g.compile(device="numpy")
    key = compiled.report().stored_key
    digest, text = "c" * 64, "a frontend's key"
    weights = {f"p{i}": w for i, w in enumerate(key.weights)}
    path = compile_cache.write_link(digest, text, key, {f"w{i}": f"p{i}" for i in range(len(key.weights))},
                                    compiled.report(), {})
    assert compile_cache.read(digest, text, weights) is not None
    data = json.loads(path.read_text())
    data["bind"] = {"w0": "p0", "w1": "p0"}  # a reference the caller binds, but not the one stored
    path.write_text(json.dumps(data))
    with caplog.at_level(logging.DEBUG, logger="luminal"):
        assert compile_cache.read(digest, text, weights) is None
    assert "its sha256 does not match" in caplog.text


def test_disabled(cache, monkeypatch):
    monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "0")
    g = build_block(make_weights())
    for _ in range(2):
        rep = g.compile(device="numpy").report()
        assert "optimize" not in rep.cache and "saturate" in rep.phases
    assert entries(cache) == []


def test_size_bound_holds(cache, monkeypatch):
    small_graph(8).compile(device="numpy")
    (first,) = entries(cache)
    bound_mb = 2.5 * first.stat().st_size / (1 << 20)  # room for two entries of about this size
    monkeypatch.setenv("LUMINAL_CACHE_MAX_MB", str(bound_mb))
    names = [8]
    for hidden in (16, 24, 32, 40, 48):
        small_graph(hidden).compile(device="numpy")
        names.append(hidden)
        total = sum(p.stat().st_size for p in cache.iterdir())
        assert total <= bound_mb * (1 << 20), (hidden, total)
    assert 0 < len(entries(cache)) < len(names)  # the least recently used ones went


CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from luminal.demo import build_block, make_weights
    compiled = build_block(make_weights()).compile(device="numpy")
    x = np.random.default_rng(0).standard_normal((2, 5, 64)).astype(np.float32)
    np.save(sys.argv[2], compiled(x=x)[0])
    print(compiled.report().cache["optimize"], "egglog" in sys.modules)
""")


def test_processes_fill_the_cache_at_once(cache, tmp_path):
    env = dict(os.environ, LUMINAL_CACHE_DIR=str(cache.parent), LUMINAL_COMPILE_CACHE="1")
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, "cold", str(tmp_path / f"out{i}.npy")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert out.split()[0] in ("miss", "hit")  # the slower one may already find the faster one's entry
    assert len(entries(cache)) == 1 and not list(cache.glob("*.tmp"))
    warm = subprocess.run([sys.executable, "-c", CHILD, "warm", str(tmp_path / "out2.npy")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.split() == ["hit", "False"]  # a hit in a new process never imports egglog
    outs = [np.load(tmp_path / f"out{i}.npy") for i in range(3)]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


def test_an_unwritable_cache_folder_only_costs_the_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(blocker))  # <file>/graphs cannot be made
    monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "1")
    g = build_block(make_weights())
    np.testing.assert_array_equal(g.compile(device="numpy")(x=X)[0], g.compile(device="numpy")(x=X)[0])


def test_torch_compile_of_a_batch_norm_model_hits_at_dynamo_level(cache):
    """Eval-mode batch norm lowers per call (as `_native_batch_norm_legit_no_training`, what
    aot_autograd gives), so a conv net's second compile skips the lowering, the import and
    egglog: its Dynamo graph is found in the cache."""
    torch = pytest.importorskip("torch")
    from luminal.compiler import STATS

    def model():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
                                torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1), torch.nn.BatchNorm2d(4)).eval()
        with torch.no_grad():
            for bn in (m[1], m[4]):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 1.5)
        return m

    x = torch.randn(2, 3, 6, 6)
    reports = []
    with torch.no_grad():
        for _ in range(2):
            torch._dynamo.reset()
            m = model()
            torch.testing.assert_close(torch.compile(m, backend="luminal", options={"device": "numpy"})(x), m(x),
                                       rtol=1e-5, atol=1e-5)
            reports.append(STATS.compiled[-1].report())
    assert reports[0].cache == {"optimize": "miss"}
    assert any(n.startswith("lowered to core ATen by decomposing") for n in reports[0].notes), reports[0].notes
    assert reports[1].cache == {"dynamo graph": "hit", "optimize": "hit"}
    assert not set(reports[1].phases) & {"lower", "import", *EGGLOG_PHASES}, reports[1].phases


def test_dynamo_graphs_that_differ_in_a_constant_do_not_share_an_entry(cache):
    """fx_cache spells Dynamo's graph node by node (no generated code): a scalar argument is
    part of the key, so a model that differs only in it is a miss and computes its own result."""
    torch = pytest.importorskip("torch")
    from luminal.compiler import STATS

    class Scaled(torch.nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k = k
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.nn.functional.gelu(self.lin(x)) * self.k

    x = torch.randn(3, 8)
    caches = []
    with torch.no_grad():
        for k in (2.0, 2.5, 2.5):
            torch._dynamo.reset()
            torch.manual_seed(0)
            m = Scaled(k).eval()
            torch.testing.assert_close(torch.compile(m, backend="luminal", options={"device": "numpy"})(x), m(x))
            caches.append(STATS.compiled[-1].report().cache)
    assert caches[0]["optimize"] == caches[1]["optimize"] == "miss"
    assert "dynamo graph" not in caches[1] and caches[2]["dynamo graph"] == "hit"


def test_device_artifacts_of_other_kernel_code_are_refused(cache):
    import json

    digest = "d" * 64
    compile_cache.store_device_artifacts(digest, "cpu", {"library": "k", "launches": [[0, 1]]})
    assert compile_cache.device_artifacts(digest, "cpu") == {"library": "k", "launches": [[0, 1]]}
    path = cache / f"{digest}.cpu.json"
    data = json.loads(path.read_text())
    data["code"] = "another version of luminal/kernels"
    path.write_text(json.dumps(compile_cache._sealed(data)))  # sealed again: refused for the code alone
    assert compile_cache.device_artifacts(digest, "cpu") is None
    assert compile_cache.device_artifacts("e" * 64, "cpu") is None  # absent


def test_gc_paused_ages_what_it_allocated_and_keeps_it_collectable():
    """`gc_paused` hands its allocations to the oldest generation (no young collection walks
    them on resuming), cyclic garbage made inside is still collected, and a process's own frozen
    objects stay frozen. In a fresh process: the collector's counts are process-wide, and a
    thread an earlier test in this worker left running (a background build leaving its own pause)
    would move them under the assertions."""
    code = textwrap.dedent("""
        import gc
        from luminal.threadflags import gc_paused

        class Cycle:
            pass

        def cycles(n):
            made = []
            for _ in range(n):
                a, b = Cycle(), Cycle()
                a.other, b.other = b, a
                made.append(a)
            return made

        assert gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
            kept = cycles(5000)
            garbage = cycles(5000)
            del garbage
        assert gc.isenabled()
        assert gc.get_count()[0] < 5000, gc.get_count()  # not left to the next young collection
        collected = gc.collect()
        assert collected >= 10000, collected  # the dropped cycles (4 objects each, dicts included) still go
        del kept
        gc.collect()
        frozen = cycles(10)
        gc.freeze()
        before = gc.get_freeze_count()
        with gc_paused():
            cycles(100)
        assert gc.get_freeze_count() == before, (gc.get_freeze_count(), before)  # not thawed
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_background_writes_leave_the_collector_to_the_users_threads():
    """The compile cache's writes on a background build thread run beside the user's threads:
    there `gc_paused` does not touch the process-wide collector, so a thread that turns it off
    meanwhile is not overruled when the write ends. In a fresh process, as above."""
    code = textwrap.dedent("""
        import gc
        from luminal import threadflags

        assert gc.isenabled()
        with threadflags.gc_untouched(), threadflags.gc_paused():
            assert gc.isenabled()
            gc.disable()  # a user's thread, meanwhile
        assert not gc.isenabled()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_numpy_writes_the_cache_after_the_first_call(tmp_path):
    """On a runtime without a build thread of its own (the NumPy runtime), the compile cache's
    entries are written on a thread once the first call is over, off its path (the writes are
    held until the first call has returned and its state is printed); a process that exits right
    after leaves them, and the next process's compile hits at Dynamo's level."""
    # imported here: child processes import this module without tests/ on their path
    from processes import run_in_processes, write_behind_script

    first, second = run_in_processes(write_behind_script("numpy"), tmp_path)
    assert "PATH [('optimize', 'miss')] [] True" in first.stdout, first.stdout  # only the key and lookup on the path
    assert "AFTER ['cache'] True" in first.stdout and "STARTED True" in first.stdout, first.stdout
    assert "('dynamo graph', 'hit')" in second.stdout and "('optimize', 'hit')" in second.stdout, second.stdout


def test_numpy_writes_the_cache_in_the_compile_when_not_tiered(tmp_path):
    """`LUMINAL_TIERED=0`: the writes happen inside the compile, before it returns."""
    # imported here: child processes import this module without tests/ on their path
    from processes import run_in_processes, write_behind_script

    first, second = run_in_processes(write_behind_script("numpy"), tmp_path, tiered="0")
    assert "PATH [('optimize', 'miss')] [] True" in first.stdout, first.stdout
    assert "AFTER [] True" in first.stdout, first.stdout
    assert "('dynamo graph', 'hit')" in second.stdout, second.stdout


def test_a_compile_without_a_call_still_writes_the_cache(tmp_path):
    """A process that only compiles (to fill the cache) writes the entry `FIRST_CALL_WAIT_S` after
    the compile, before it exits: the next process's compile hits."""
    # imported here: child processes import this module without tests/ on their path
    from processes import run_in_processes

    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_compile_cache import small_graph
        compiled = small_graph(8).compile(device="numpy")
        print("CACHE", sorted(compiled._report.cache.items()))
    """)
    first, second = run_in_processes(script, tmp_path)
    assert "('optimize', 'miss')" in first.stdout and "('optimize', 'hit')" in second.stdout, (first.stdout, second.stdout)
