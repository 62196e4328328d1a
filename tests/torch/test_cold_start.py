"""What the first compile of a process is spared (issue 18): the per-call lowering traces with
torch's Python decompositions only (the same graphs as aot_autograd's full table, without
walking every registered op), traces its distinct calls together, builds no Python code for
its FX graphs, and egglog's Rust bindings load without egglog's Python API."""

import re
import subprocess
import sys
import textwrap

import torch
import torch.nn.functional as F
from torch.fx._lazy_graph_module import _LazyGraphModule

from luminal.frontends.torch import decompose


class Attention(torch.nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, d)
        return x + self.out(F.gelu(y, approximate="tanh")).softmax(-1) * F.silu(x).mean(-1, keepdim=True)


def _lowered(model, x, table):
    graphs = []

    def backend(gm, example_inputs):
        saved = decompose.decompositions
        decompose.decompositions = lambda: table
        try:
            aten = decompose.decompose_graph(gm, example_inputs)
        finally:
            decompose.decompositions = saved
        # no Python code generated for it until someone calls it
        lazy = isinstance(aten, _LazyGraphModule) and aten._needs_recompile()
        graphs.append((str(aten.graph), lazy, aten(*example_inputs), gm(*example_inputs), aten.meta["luminal_lowering"]))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend)(x)
    return graphs


def test_python_decompositions_trace_what_the_full_table_traces():
    from torch._decomp import core_aten_decompositions

    full = core_aten_decompositions()
    model, x = Attention().eval(), torch.randn(2, 5, 16)
    ours, theirs = _lowered(model, x, decompose.decompositions()), _lowered(model, x, {k: full[k] for k in full})
    assert len(ours) == len(theirs) == 1
    (text, lazy, lowered, reference, note), (full_text, *_) = ours[0], theirs[0]
    assert lazy and text == full_text
    torch.testing.assert_close(lowered, reference)  # the lowered graph computes Dynamo's
    # SDPA (whose decomposition lays out its result otherwise than its kernel) traced alone as
    # the walk meets it, every other distinct call in one make_fx after the walk: one walk
    assert note.endswith("(2 traces, 1 walk)"), note


def test_egglog_bindings_load_without_its_python_api():
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import luminal as lm
        g = lm.Graph("g")
        x = g.input("x", (4,))
        g.output((x * 2.0).exp().sum(), "y")
        y = g.compile(device="numpy")(x=np.ones(4, np.float32))[0]
        assert abs(float(y) - 4 * np.exp(2.0)) < 1e-3, y
        print("egglog" in sys.modules, "egglog.bindings" in sys.modules)
        import egglog  # the whole package still imports, reusing the loaded bindings
        from luminal.egraph import compat
        print(sys.modules["egglog.bindings"] is compat._b, callable(egglog.EGraph))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True", "True"]


class Pooled(torch.nn.Module):
    """Repeated blocks plus calls whose import makes tensor constants (adaptive pooling's
    windows): those are imported directly, every call."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Attention() for _ in range(2))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return F.adaptive_avg_pool1d(x, 5) + F.adaptive_avg_pool1d(x.flip(-1), 5)


def _imports(model, x, weights_as_constants=False, **compile_kwargs):
    """The lowered graph's compile-cache key imported with and without the import memo, from
    the core-ATen graph and (where the per-call decomposition applies) call by call; and the
    hits of each import's memo."""
    from luminal import compile_cache
    from luminal.frontends.torch import fx_import
    from luminal.hlir.ops import ConstantArray, Op, toposort

    keys, hits = [], []

    def backend(gm, example_inputs):
        calls = decompose.decompose_calls(gm, example_inputs)
        if calls is None:  # symbolic shapes: aot_autograd's graph, imported the same way
            from torch._decomp import core_aten_decompositions
            from torch._dynamo.backends.common import aot_autograd
            from torch._functorch.aot_autograd import make_boxed_func

            def fw(agm, _):
                keys.append(_all([agm]))
                return make_boxed_func(agm.forward)

            return aot_autograd(fw_compiler=fw, decompositions=core_aten_decompositions())(gm, example_inputs)
        assert calls.by_calls
        constants = {}
        if weights_as_constants:  # as torch.compile imports them: the parameters as CONSTANT nodes
            from luminal.frontends.torch.dynamo import _is_weight

            placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
            constants = {n.name: v for n, v in zip(placeholders, example_inputs) if _is_weight(n, v)}
            assert constants
        keys.append(_all([calls, calls.graph_module()], constants))
        return gm.forward

    def _all(sources, weights=None):
        out = []
        for source in sources:
            for memo in (False, True):
                saved = fx_import.MEMO
                fx_import.MEMO = memo
                try:
                    importer = source.importer("g") if isinstance(source, decompose.Decomposed) else \
                        fx_import.FxImporter(source, "g")
                    imported = importer.build(dict(weights or {}))
                finally:
                    fx_import.MEMO = saved
                constants = sorted(n.arg.name for n in toposort(imported.out_nodes)  # named by the frontend
                                   if n.op is Op.CONSTANT and isinstance(n.arg, ConstantArray)
                                   and not re.fullmatch(r"const\d+", n.arg.name))
                out.append((compile_cache.Key.of(imported.out_nodes, "numpy").digest, tuple(constants)))
            hits.append((getattr(importer, "call_memo", None) or importer.memo).hits)
        return out

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend, **compile_kwargs)(x)
    return keys, hits


def test_import_memo_builds_the_graph_a_direct_import_builds():
    torch.manual_seed(0)
    model = Pooled().eval()
    for x, kwargs in ((torch.randn(2, 5, 16), {}), (torch.randn(3, 7, 16), {"dynamic": True})):
        keys, hits = _imports(model, x, **kwargs)
        # static: call by call and from the graph, each with and without the memo; dynamic: the graph
        assert [len(k) for k in keys] == ([4] if not kwargs else [2]), keys
        assert all(len(set(k)) == 1 for k in keys), keys
        assert all(h > 0 for h in hits), hits  # the repeated blocks came from templates


class Forms(torch.nn.Module):
    """One distinct call on arguments of two HLIR forms (exp of a contiguous 4x4: a view of the
    (16,) input, then a computed tensor), a call whose second output nothing reads, and a
    decomposition that makes a tensor constant."""

    def forward(self, x):
        a = torch.exp(x.view(4, 4))
        b = torch.exp(x.view(4, 4) * 2)
        values, _indices = torch.max(a + b, dim=0)
        return values + F.adaptive_avg_pool1d(b.unsqueeze(0), 3).sum()


def test_the_imports_agree_with_the_weights_as_constants():
    """As torch.compile imports a graph (its parameters CONSTANT nodes, not inputs): the four
    imports still build one graph (a template made on INPUT stand-ins re-instantiated over a
    weight)."""
    torch.manual_seed(0)
    keys, hits = _imports(Pooled().eval(), torch.randn(2, 5, 16), weights_as_constants=True)
    assert [len(k) for k in keys] == [4] and len(set(keys[0])) == 1, keys
    assert hits[0] > 0, hits


def test_call_by_call_import_keys_on_the_arguments_form():
    keys, hits = _imports(Forms().eval(), torch.randn(16))
    assert [len(k) for k in keys] == [4] and len(set(keys[0])) == 1, keys
    assert hits[0] > 0, hits


class Strided(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x[3:].as_strided((2, 3), (1, 2), 4)) + torch.sin(x[:6].view(2, 3))


def test_an_op_that_reads_its_arguments_metadata_is_imported_from_the_graph():
    """`as_strided` on a slice reads the slice's storage offset from its argument's metadata:
    such a graph is imported from its core-ATen graph, and gives eager's values."""
    seen = []

    def backend(gm, example_inputs):
        calls = decompose.decompose_calls(gm, example_inputs)
        seen.append(calls is not None and calls.by_calls)
        return gm.forward

    x = torch.randn(12)
    torch._dynamo.reset()
    torch.compile(Strided(), backend=backend)(x)
    assert seen == [False]
    torch._dynamo.reset()
    out = torch.compile(Strided(), backend="luminal", options={"device": "numpy", "strict": True})(x)
    torch.testing.assert_close(out, Strided()(x))


def test_ml_dtypes_is_imported_only_for_bf16():
    """ml_dtypes' extension is most of `import luminal` on a slow machine (0.55-0.8 s): an f32
    model compiles and runs without it, and bf16 still finds it."""
    code = textwrap.dedent("""
        import sys
        import torch
        import luminal
        m, x = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()), torch.randn(2, 4)
        with torch.no_grad():
            y = torch.compile(m, backend="luminal", options={"device": "numpy"})(x)
            torch.testing.assert_close(y, m(x))
        print("ml_dtypes" in sys.modules)
        from luminal.hlir.dtypes import DType
        print(DType.of("bfloat16") is DType.BF16, DType.BF16.numpy.name, DType.BF16.itemsize)
        import ml_dtypes
        import numpy as np
        print(DType.of(np.zeros(1, ml_dtypes.bfloat16).dtype) is DType.BF16)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "bfloat16", "2", "True"]
