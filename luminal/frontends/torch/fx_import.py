"""FX graphs of ATen ops (from aot_autograd or torch.export) -> HLIR, and running the result.

`FxImporter(gm).build(...)` walks the graph once (a Dynamo graph that `decompose` lowered is
imported call by call instead, without its core-ATen graph: `Decomposed.importer`, which makes
`FxImporter(None, calls=...)`). Every node's `meta['val']` (the fake tensor,
or SymInt, that torch computed while tracing) is the authority on dtypes and shapes:
- tensor results are cast to the reported dtype (this is where torch's type promotion lands;
  the op functions cast their operands to the computation dtype, see `aten_ops`);
- shapes are checked against the reported ones; a symbolic dim luminal spells differently
  (`Max(0, s0 - 1)` for torch's `s0 - 1`) is relabelled after checking both agree on the
  traced sizes;
- SymInt-valued nodes (`sym_size`, `operator.mul` on sizes, ...) take their value straight
  from the reported expression, translated to luminal's symbolic dims (`dims`).

Dims are bound at call time from the input shapes; a symbol that only a SymInt placeholder carries gets a zero-cost "carrier"
input of that length, so the runtime can bind it like any other.
"""

from __future__ import annotations

import time

import numpy as np
import sympy
import torch

from luminal.builder import Graph, Tensor
from luminal.compiler import Report, compile_outputs
from luminal.devices import Device
from luminal.errors import ShapeError, UnsupportedError
from luminal.frontends.torch import aten_complex
from luminal.frontends.torch.aten_complex import Complex
from luminal.frontends.torch.aten_ops import TORCH_OF, Ctx, ldtype, op_key, op_name, promote
from luminal.frontends.torch.aten_table import table
from luminal.frontends.torch.dims import SYM_TYPES, conform, hints_of, shape_of, to_dim
from luminal.frontends.torch.import_memo import ImportMemo
from luminal.hlir.dtypes import DType
from luminal.runtime.torch_arrays import borrow, numpy_to_torch, torch_to_numpy

MEMO = True  # import each distinct call once (`import_memo`); off: every node directly (tests compare)
NO_OPS = {"_assert_tensor_metadata.default", "_assert_scalar.default", "sym_constrain_range_for_size.default",
          "sym_constrain_range.default", "_assert_async.msg", "_assert_async.default", "_functional_assert_async.msg"}


# --- the importer ------------------------------------------------------------------------
class FxImporter:
    """One FX graph of ATen ops -> one luminal Graph."""

    def __init__(self, gm: torch.fx.GraphModule | None, name: str = "graph", calls=None):
        """`gm`, or `calls` (a `decompose.Decomposed`: its `placeholders`, and `import_into`
        building the rest call by call, without a core-ATen graph: `Decomposed.importer`)."""
        self.gm, self.calls, self.name = gm, calls, name

    def unsupported(self) -> list[tuple[str, str]]:
        """(node name, op) of every node luminal cannot import."""
        if self.calls is not None:  # every traced node was checked against the table (`decompose._trace`)
            return []
        ops = table()
        bad = []
        for node in self.gm.graph.nodes:
            if node.op != "call_function" or _is_sym_node(node):
                continue
            key = op_key(node.target)
            if key not in ops and key not in NO_OPS:
                bad.append((node.name, op_name(node.target)))
        return bad

    def check(self):
        bad = self.unsupported()
        if bad:
            ops = sorted({op for _, op in bad})
            where = ", ".join(f"{n} ({op})" for n, op in bad)
            raise UnsupportedError(f"luminal does not support {len(ops)} ATen op(s): {', '.join(ops)}; at nodes: {where}")

    def build(self, constants: dict[str, torch.Tensor] | None = None, values: dict | None = None) -> Imported:
        """Import the graph. Placeholders named in `constants` become weights (no copy), in
        `values` Python values baked in; the others become luminal inputs of the same name.
        The cyclic collector is paused meanwhile (as in the egraph pipeline: the import makes many
        small acyclic objects, and inside torch.compile a collection walks Dynamo's whole heap)."""
        from luminal.threadflags import gc_paused

        with gc_paused():
            return self._build(constants, values)

    def _build(self, constants, values) -> Imported:
        start = time.perf_counter()
        constants, values = constants or {}, values or {}
        self.check()
        g = Graph(self.name)
        env: dict = {}
        if self.calls is not None:
            placeholders = self.calls.placeholders
        else:
            placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        vals = [n.meta.get("val") for n in placeholders]
        self.hints = hints_of(vals)
        bound: set[str] = set()
        feeds: list = []  # per placeholder: ("tensor", input name) | ("dim", carrier name) | None
        weight_arrays = {}  # placeholder position -> the ConstantArray of that weight (the compile cache's references)
        for i, (node, val) in enumerate(zip(placeholders, vals)):
            if node.name in constants:
                env[node] = _constant(g, constants[node.name], node.name)
                if hasattr(env[node], "node"):
                    weight_arrays[i] = env[node].node.arg
                feeds.append(None)
            elif node.name in values:
                env[node] = values[node.name]
                feeds.append(None)
            elif isinstance(val, torch.Tensor):
                shape = shape_of(val)
                if aten_complex.is_complex(val):  # bound as its view_as_real planes
                    env[node] = Complex(g.input(node.name, (*shape, 2), aten_complex.COMPLEX_DTYPES[val.dtype]))
                    feeds.append(("complex", node.name))
                else:
                    env[node] = g.input(node.name, shape, ldtype(val.dtype))
                    feeds.append(("tensor", node.name))
                bound |= {s.name for d in shape if isinstance(d, sympy.Symbol) for s in [d]}
            elif isinstance(val, str):  # a string argument (guarded by the caller): baked in
                env[node] = val
                feeds.append(None)
            elif isinstance(val, SYM_TYPES) or isinstance(val, (int, float, bool)):
                env[node] = to_dim(val)
                feeds.append(("dim", node.name))
            elif val is None and node.name not in values:
                env[node] = None
                feeds.append(None)
            elif not node.users:  # an opaque value no node reads (DTensor's graphs pass a process group)
                env[node] = None
                feeds.append(None)
            else:
                raise UnsupportedError(f"placeholder {node.name} of type {type(val).__name__}")
        carriers = {}
        for i, (node, f) in enumerate(zip(placeholders, feeds)):  # dims only a SymInt carries
            if f and f[0] == "dim":
                d = env[node]
                if isinstance(d, sympy.Symbol) and d.name not in bound:
                    carriers[node.name] = g.input(f"_dim_{node.name}", (d,), DType.BOOL)
                    bound.add(d.name)
                    feeds[i] = ("dim", f"_dim_{node.name}")
                else:
                    feeds[i] = None
        self.memo = ImportMemo() if MEMO else None
        if self.calls is not None:  # repeated layers: each distinct call built once (`import_memo`)
            outputs = self.calls.import_into(self, g, env)
        else:
            outputs = self._nodes(g, self.gm, self.gm.graph.nodes, env)
        imported = Imported(g, placeholders, feeds, outputs, list(carriers.values()))
        imported.import_s = time.perf_counter() - start
        imported.weight_arrays = weight_arrays
        return imported

    def _nodes(self, g: Graph, module, nodes, env):
        """Import `nodes` (of `module`'s graph) into `env`; what its output node returns, if any."""
        for node in nodes:
            if node.op == "call_function":
                env[node] = self.node(g, node, env)
            elif node.op == "get_attr":
                env[node] = self.get_attr(g, module, node, node.name)
            elif node.op == "output":
                return torch.fx.node.map_arg(node.args[0], lambda n: env[n])
        return None

    @staticmethod
    def get_attr(g: Graph, module, node, name: str):
        """A get_attr node's value: a tensor becomes a constant named `name`."""
        return _constant(g, fetch_attr(module, node.target), name)

    @staticmethod
    def constant(g: Graph, value, name: str):
        return _constant(g, value, name)

    def node(self, g: Graph, node, env):
        """One call_function node's value, from the import memo's templates where one applies."""
        if self.memo is None or _is_sym_node(node) or aten_complex.touches_complex(node):
            return self._call(g, node, env)
        return self.memo.call(self, g, node, env)  # repeated layers: each distinct call's nodes built once

    def _call(self, g: Graph, node, env):
        val = node.meta.get("val")
        if _is_sym_node(node):
            return to_dim(val)
        key = op_key(node.target)
        if key in NO_OPS:
            return None
        args = torch.fx.node.map_arg(node.args, lambda n: env[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
        first = val[0] if isinstance(val, (tuple, list)) and val and isinstance(val[0], torch.Tensor) else val
        is_t = isinstance(first, torch.Tensor)
        fn = table().get(key)
        if aten_complex.touches_complex(node):  # complex tensors: planes (`aten_complex`)
            fn = aten_complex.COMPLEX.get(key)
            if fn is None:
                raise UnsupportedError(f"{node.name} ({op_name(node.target)}): luminal does not support this op on "
                                       f"complex tensors (complex ops: {', '.join(sorted(aten_complex.COMPLEX))})")
        dtype = (aten_complex.COMPLEX_DTYPES.get(first.dtype) or ldtype(first.dtype)) if is_t else None
        shape = shape_of(first) if is_t else None
        cx = Ctx(g, node, dtype, shape, val, self.hints)
        try:
            out = fn(cx, *args, **kwargs)
            return self._fix(g, node, out, val, (first, dtype, shape))
        except (UnsupportedError, ShapeError) as exc:
            raise type(exc)(f"{node.name} ({op_name(node.target)}): {exc}") from exc
        except TypeError as exc:  # sympy's, where an op needs a static value and Dynamo made it a symbol
            if "Cannot convert symbols to int" not in str(exc):  # (an int, padding or a kernel size changed between calls)
                raise
            raise UnsupportedError(f"{node.name} ({op_name(node.target)}): an argument luminal needs static is "
                                   f"symbolic (Dynamo's dynamic shapes)") from exc

    def _fix(self, g, node, out, val, known=(None, None, None)):
        """Cast to the dtype torch reports and reconcile the shape (see the module docstring);
        `known`: a value whose luminal dtype and shape were already read (value, dtype, shape)."""
        if isinstance(val, (tuple, list)) and isinstance(out, (tuple, list)):
            return type(out)(self._fix(g, node, o, v, known) for o, v in zip(out, val))
        if not isinstance(val, torch.Tensor):
            return out
        if aten_complex.is_complex(val):
            if not isinstance(out, Complex):
                raise UnsupportedError(f"{node.name} ({op_name(node.target)}): a complex result was lowered as real")
            planes = conform(out.planes.cast(aten_complex.COMPLEX_DTYPES[val.dtype]), (*shape_of(val), 2), self.hints)
            return Complex(planes)
        want_dtype, want = known[1:] if val is known[0] else (ldtype(val.dtype), shape_of(val))
        if not isinstance(out, Tensor):  # a Python scalar where torch has a tensor
            out = g.scalar(out, promote(out)).expand(want)
        return conform(out.cast(want_dtype), want, self.hints)


def _is_sym_node(node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, SYM_TYPES) or (
        isinstance(val, (int, float, bool)) and not isinstance(node.target, torch._ops.OpOverload)
    )


def fetch_attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _constant(g: Graph, t, name: str):
    if not isinstance(t, torch.Tensor):
        return t
    t = t.detach()
    if t.dtype not in TORCH_OF.values():
        t = t.to(TORCH_OF[ldtype(t.dtype)])
    if not t.is_contiguous():
        t = t.contiguous()
    return g.constant(t, name=name)  # a NumPy view of the tensor's memory: no copy


REBIND_AFTER = 63  # calls before a signature the C could not be bound to is tried again (`Imported._bound_run`)

# --- the imported graph, compiled and called ---------------------------------------------
class Imported:
    """A built luminal graph plus how to feed it from FX placeholders and read its outputs."""

    def __init__(self, g: Graph, placeholders, feeds, outputs, carriers):
        self.g, self.placeholders, self.feeds, self.outputs, self.carriers = g, placeholders, feeds, outputs, carriers
        flat, self.spec = torch.utils._pytree.tree_flatten(outputs)
        self.flat_kinds = []
        nodes, names = [], []
        for i, v in enumerate(flat):
            if isinstance(v, (Tensor, Complex)):  # a complex result leaves as its planes, viewed back
                self.flat_kinds.append(("complex" if isinstance(v, Complex) else "tensor", len(nodes)))
                nodes.append(v.planes.node if isinstance(v, Complex) else v.node)
                names.append(f"out{i}")
            elif isinstance(v, sympy.Basic):
                self.flat_kinds.append(("tensor_dim", len(nodes)))
                nodes.append(g.scalar(v, DType.I64).node)
                names.append(f"out{i}")
            else:
                self.flat_kinds.append(("value", v))
        for c in carriers:  # an output, so the runtime keeps the input that binds the symbol
            nodes.append(c.node)
            names.append(c.node.arg)
        self.out_nodes, self.out_names = nodes, names
        for node, name in zip(nodes, names):  # so `g` displays and runs like a builder graph
            g.output(Tensor(g, node), name)

    @classmethod
    def restored(cls, compiled, feeds, flat_kinds, spec) -> Imported:
        """An imported graph from the compile cache (`fx_cache`): compiled, no builder graph."""
        self = cls.__new__(cls)
        self.g, self.placeholders, self.carriers, self.weight_arrays = None, None, [], {}
        self.feeds, self.flat_kinds, self.spec = feeds, flat_kinds, spec
        self.out_nodes, self.out_names = compiled.outputs, compiled.output_names
        self.compiled, self.device, self.used = compiled, compiled.device, set(compiled.input_names)
        return self

    def compile(self, *, device: str | Device = "cpu", optimize: bool | None = None, name: str = "graph",
                phases: dict[str, float] | None = None, notes: list[str] | None = None, search: float | None = None):
        """Compile the graph; `phases` and `notes` of the frontend's own steps lead the report;
        `search`: `compile_outputs`'s (seconds to measure the device's variants in)."""
        inputs = list(self.g.inputs.values())
        self.device = device
        report = Report(name=name, phases={**(phases or {}), "import": self.import_s}, notes=list(notes or []))
        from luminal.runtime import collectives
        from luminal.threadflags import gc_paused

        sent = collectives.used(self.out_nodes, self.g.__dict__.get("collectives", []))
        with gc_paused():  # see `build`
            if sent:  # torch.distributed collectives: the graph runs in pieces between them
                self.compiled = collectives.compile_outputs(inputs, self.out_nodes, self.out_names, sent, device=device,
                                                            optimize=optimize, name=name, report=report)
            else:
                self.compiled = compile_outputs(inputs, self.out_nodes, self.out_names, device=device,
                                                optimize=optimize, name=name, report=report, search=search)
        self.used = set(self.compiled.input_names)
        return self

    def fed(self) -> list[tuple[int, tuple]]:
        """(position, feed) of the placeholders the compiled graph reads (the weights it holds are
        not among them): a call walks these, not every placeholder."""
        got = self.__dict__.get("_fed")
        if got is None or got[0] is not self.used:
            got = self._fed = (self.used, [(k, f) for k, f in enumerate(self.feeds) if f is not None and f[1] in self.used])
        return got[1]

    def __call__(self, args, donated: frozenset = frozenset()) -> list:
        """Run on the flat placeholder values `args` (torch tensors, ints; at the positions `fed`
        names, the rest unread); flat outputs. `donated`: positions of tensors whose memory the
        caller gives up (`CompiledGraph.call_donating`)."""
        feeds = {}
        given = set()
        host = self.compiled.device.io == "numpy"
        for k, f in self.fed():
            a = args[k]
            if k in donated and f[0] == "tensor":
                given.add(f[1])
            if f[0] in ("tensor", "complex"):  # the kernel runtimes take torch tensors (DLPack, zero-copy)
                if f[0] == "complex":
                    a = torch.view_as_real(a.detach().resolve_conj())
                feeds[f[1]] = to_numpy(a, borrowed=True) if host else a.detach()
            else:
                feeds[f[1]] = np.empty(int(a), np.bool_)
        if not self.out_nodes:
            results = []
        elif given:
            results = self.compiled.call_donating(feeds, frozenset(given))
        else:
            results = self._bound_run(feeds) if host else self.compiled(feeds)
        flat = []
        for kind, v in self.flat_kinds:
            if kind in ("tensor", "complex"):
                r = results[v]
                r = r if isinstance(r, torch.Tensor) else numpy_to_torch(np.asarray(r))
                flat.append(_complex_of(r) if kind == "complex" else r)
            elif kind == "tensor_dim":
                flat.append(int(results[v]))
            else:
                flat.append(v)
        return flat

    def _bound_run(self, feeds: dict) -> list:
        """`self.compiled(feeds)`, through the C bound to the feeds' dtypes and shapes
        (`CompiledGraph.bound_call`: no binding or layout per call) from the second call of a
        signature on: the call of a small model is mostly this Python, and it runs after the
        kernels have taken the caches."""
        sig = (tuple(feeds), tuple((a.dtype, a.shape, a.flags.c_contiguous) for a in feeds.values()))
        bound = self.__dict__.get("_bound")  # (signature, calls to go before binding, names, call)
        if bound is not None and bound[0] == sig and bound[3] is not None:
            return bound[3]([feeds[n] for n in bound[2]])
        results = self.compiled(feeds)
        if bound is None or bound[0] != sig:
            self._bound = (sig, 0, None, None)  # bound at the signature's next call
        elif bound[1] > 0:
            self._bound = (sig, bound[1] - 1, None, None)
        elif all(c for *_, c in sig[1]):
            got = self.compiled.bound_call(feeds)  # None while a library builds, or for inputs it cannot take:
            self._bound = (sig, REBIND_AFTER, None, None) if got is None else (sig, 0, got[0], got[1])  # later again
        return results


def _complex_of(planes: torch.Tensor) -> torch.Tensor:
    """A complex result from its (..., 2) planes (view_as_complex refuses an empty tensor's)."""
    if planes.numel() == 0:
        return torch.empty(planes.shape[:-1], dtype=torch.complex64 if planes.dtype == torch.float32 else torch.complex128)
    return torch.view_as_complex(planes.contiguous())


def to_numpy(t, borrowed: bool = False) -> np.ndarray:
    """A torch tensor (or any array-like) as a NumPy array in a luminal dtype, no copy where it can
    (`borrowed`: for the length of a call, leaving the tensor's storage resizable: `borrow`)."""
    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    if t.dtype not in TORCH_OF.values():
        t = t.to(TORCH_OF[ldtype(t.dtype)])
    return borrow(t) if borrowed else torch_to_numpy(t)

