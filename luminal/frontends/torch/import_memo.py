"""The FX import, once per distinct call: a repeated layer's ATen nodes are built as HLIR once
and re-instantiated on each layer's own inputs.

Importing an ATen node runs its op function (`aten_*`) and the builder's shape logic (views,
broadcasts, symbolic dims): most of the import's time, the same work for each of 32 identical
layers. What that work builds depends only on
- the call: target, every non-tensor argument (by type and repr, as `decompose` spells them),
  the torch metadata (shape, strides, storage offset, dtype, device) of the node's result and of
  every FX node it reads (op functions may read `cx.node.args[i].meta`);
- the *form* of each HLIR tensor argument, which is all the builder inspects of it: its dtype
  and shape, and whether it is a VIEW (then its shape tracker and its base's dtype and shape,
  since views compose); and which arguments share a node or a base.

So the first time a form is met, the op runs on stand-ins of exactly that form (fresh INPUT
nodes as the roots, the same VIEW nodes over them), and the nodes it builds that depend on a
stand-in are kept, in topological order, as a template; every later call of that form rebuilds
them over its own roots (`Node` interning makes the result the very node a direct import
builds). Calls whose template holds a tensor constant (index tables of pooling or
interpolation: a new `ConstantArray` per call when imported directly), whose arguments have no
exact spelling, or whose op raised on the stand-ins are imported directly, as before.

Two levels use this. `ImportMemo` works on any FX graph of ATen ops, one node at a time (a
node's key spells its arguments). `CallImporter` works on a Dynamo graph as `decompose` leaves
it (`Decomposed`: each distinct call traced once, and the steps that use it), one *call* at a
time: the distinct call fixes every ATen node's target, arguments and metadata, so a call's
key is the distinct call and the forms of its tensor arguments, and the core-ATen graph (a copy
of every call's nodes) is never made.
"""

from __future__ import annotations

import torch

from luminal.builder import Tensor
from luminal.frontends.torch.dims import to_dim
from luminal.hlir.ops import ConstantArray, Node, Op, toposort

_DIRECT = object()  # a form that is always imported directly


class _Unspellable(Exception):
    pass


class ImportMemo:
    """Templates of one import (one graph, one set of symbol hints)."""

    def __init__(self):
        self.templates: dict = {}
        self.metas: dict = {}  # FX node -> `_meta` of its value (read once per node, not per reader)
        self.hits = self.misses = 0

    def _meta_of(self, node):
        m = self.metas.get(node)
        if m is None:
            m = self.metas[node] = _meta(node.meta.get("val"))
        return m

    def call(self, importer, g, node, env):
        """`importer._call(g, node, env)`, from a template where one applies."""
        roots: list[Node] = []  # distinct HLIR nodes the arguments stand on (a leaf, or a view's base)
        leaves: dict[int, tuple] = {}  # id(Tensor) -> (stand-in recipe)
        try:
            key = (node.target, self._spell(node.args, env, roots, leaves), self._spell(node.kwargs, env, roots, leaves),
                   self._meta_of(node))
        except _Unspellable:
            return importer._call(g, node, env)
        template = self.templates.get(key)
        if template is None:
            template = self.templates[key] = self._make(importer, g, node, env, roots, leaves)
        if template is _DIRECT:
            return importer._call(g, node, env)
        self.hits += 1
        return template.instantiate(g, roots)

    def _spell(self, a, env, roots, leaves):
        if isinstance(a, torch.fx.Node):
            return ("node", self._meta_of(a), self._value(env[a], roots, leaves))
        if isinstance(a, (tuple, list)):
            return (type(a).__name__, tuple(self._spell(x, env, roots, leaves) for x in a))
        if isinstance(a, dict):
            return ("dict", tuple((k, self._spell(v, env, roots, leaves)) for k, v in sorted(a.items())))
        return _plain(a)

    def _value(self, v, roots, leaves):
        """An env value (an HLIR tensor, a dim, a Python value, a tuple of them) by its form."""
        if isinstance(v, Tensor):
            n = v.node
            if n.op is Op.VIEW:
                base = n.src[0]
                form = ("V", n.dtype, n.shape, n.arg, _root(base, roots), base.dtype, base.shape)
            else:
                form = ("P", _root(n, roots), n.dtype, n.shape)
            leaves.setdefault(id(v), form)
            return form
        if isinstance(v, (tuple, list)):
            return (type(v).__name__, tuple(self._value(x, roots, leaves) for x in v))
        return _plain(v)

    def _make(self, importer, g, node, env, roots, leaves):
        self.misses += 1
        stand = _stand_ins(roots)
        sub_env = {n: _stand_in(g, env[n], leaves, stand) for n in node.all_input_nodes}
        try:
            out = importer._call(g, node, sub_env)
        except Exception:  # noqa: BLE001 - the direct import raises it again, with the real arguments
            return _DIRECT
        return _Template.of(out, stand)


class CallImporter:
    """A `decompose.Decomposed` -> HLIR: each distinct call's traced nodes imported once per
    form of its tensor arguments (as `ImportMemo` does per ATen node: stand-ins of that form,
    kept as a template) and re-instantiated on every call of that form, without the core-ATen
    graph ever being made. The distinct call fixes everything else its nodes' import reads
    (targets, plain arguments, every node's metadata); the metadata of its placeholders is that
    of its arguments up to the storage offset, which only `as_strided` reads
    (`decompose.READS_ARGUMENT_META`: such graphs are imported from their FX graph). Constants
    are named as the replayed graph names them (`_const{i}`, in step order). Unlike the replayed
    graph, nothing unused is dropped first: Dynamo's graph holds no unused call, and what a
    call computes that nothing reads (an unused second output) is never reached from the
    outputs, so it costs its import only."""

    def __init__(self, importer, g, memo: ImportMemo | None, value_type: type):
        """`value_type`: what the steps hold a computed value as (`decompose._Value`)."""
        self.importer, self.g, self.memo, self.value_type = importer, g, memo, value_type
        self.templates: dict = {}
        self.consts = 0  # constants named so far
        self.hits = self.misses = 0

    def run(self, steps: list[tuple], env: dict):
        """Import every step (`env`: the placeholders' values); the graph's outputs."""
        values: dict[int, object] = {}  # id(_Value) -> its value
        for step in steps:
            if step[0] == "attr":
                _, value, tensor = step
                values[id(value)] = self.importer.constant(self.g, tensor, self._name())
            elif step[0] == "call":
                _, d, leaves, out = step
                args = [env[v] if isinstance(v, torch.fx.Node) else values[id(v)] for v in leaves]
                _bind(out, self._call(d, args), values, self.value_type)
            else:
                _, args, walk_env = step
                return _resolve(torch.fx.node.map_arg(args, walk_env.__getitem__), env, values, self.value_type)
        return None

    def _name(self) -> str:
        self.consts += 1
        return f"_const{self.consts - 1}"

    def _call(self, d, args: list):
        if self.memo is None:
            return self._import(d, args)
        roots: list[Node] = []
        leaves: dict[int, tuple] = {}
        try:
            key = (d, tuple(self.memo._value(a, roots, leaves) for a in args))
        except _Unspellable:
            return self._import(d, args)
        template = self.templates.get(key)
        if template is None:
            template = self.templates[key] = self._make(d, args, roots, leaves)
        if template is _DIRECT:
            return self._import(d, args)
        self.hits += 1
        self.consts += _consts(d)
        return template.instantiate(self.g, roots)

    def _import(self, d, args: list):
        """`d`'s nodes imported on `args` (its placeholders' values)."""
        env = dict(zip(d.placeholders, args))
        for n in d.nodes:
            if n.op == "get_attr":
                env[n] = self.importer.get_attr(self.g, d.module, n, self._name())
            else:
                env[n] = self.importer.node(self.g, n, env)
        return torch.fx.node.map_arg(d.outputs, env.__getitem__)

    def _make(self, d, args, roots, leaves):
        self.misses += 1
        stand = _stand_ins(roots)
        consts = self.consts
        try:
            out = self._import(d, [_stand_in(self.g, a, leaves, stand) for a in args])
        except Exception:  # noqa: BLE001 - the direct import raises it again, with the real arguments
            return _DIRECT
        finally:
            self.consts = consts  # the template's constants are named where it is instantiated
        if _holds_complex(out):  # complex planes (`aten_complex.Complex`) are not templated
            return _DIRECT
        return _Template.of(out, stand)


def _holds_complex(out) -> bool:
    from luminal.frontends.torch.aten_complex import Complex

    if isinstance(out, (tuple, list)):
        return any(_holds_complex(o) for o in out)
    return isinstance(out, Complex)


def _consts(d) -> int:
    """How many constants a distinct call's nodes make (one per get_attr, per call)."""
    n = getattr(d, "consts", None)
    if n is None:
        n = d.consts = sum(1 for x in d.nodes if x.op == "get_attr")
    return n


def _bind(out, value, values: dict, value_type: type) -> None:
    """Each `_Value` of a call's `out` gets the value in the same place of what the call built."""
    if isinstance(out, (tuple, list)):
        for o, v in zip(out, value):
            _bind(o, v, values, value_type)
    elif isinstance(out, value_type):
        values[id(out)] = value


def _resolve(v, env: dict, values: dict, value_type: type):
    """A walk value (a `_Value`, a placeholder, a structure of them) as its imported value."""
    if isinstance(v, torch.fx.Node):
        return env[v]
    if isinstance(v, (tuple, list)):
        return type(v)(_resolve(x, env, values, value_type) for x in v)
    if isinstance(v, dict):
        return {k: _resolve(x, env, values, value_type) for k, x in v.items()}
    return values[id(v)] if isinstance(v, value_type) else v


def _stand_ins(roots: list[Node]) -> list[Node]:
    return [Node(Op.INPUT, r.dtype, r.shape, (), ("luminal import stand-in", i)) for i, r in enumerate(roots)]


def _stand_in(g, v, leaves: dict, stand: list[Node]):
    """A value of the same form as `v` (`ImportMemo._value`) over the stand-ins `stand`."""
    if isinstance(v, Tensor):
        form = leaves[id(v)]
        if form[0] == "P":
            return Tensor(g, stand[form[1]])
        return Tensor(g, Node(Op.VIEW, form[1], form[2], (stand[form[4]],), form[3]))
    if isinstance(v, (tuple, list)):
        return type(v)(_stand_in(g, x, leaves, stand) for x in v)
    return v


class _Template:
    def __init__(self, out, order, stand_ids):
        self.out, self.order, self.stand_ids = out, order, stand_ids

    @staticmethod
    def of(out, stand: list[Node]):
        tensors: list[Node] = []
        _collect(out, tensors)
        stand_ids = {id(s): i for i, s in enumerate(stand)}
        order, depends = [], set(stand_ids)
        for n in toposort(tensors):
            if id(n) in stand_ids:
                continue
            if n.op is Op.CONSTANT and isinstance(n.arg, ConstantArray):
                return _DIRECT  # a new tensor constant per call when imported directly
            if n.op is Op.INPUT:
                return _DIRECT
            if any(id(s) in depends for s in n.src):
                depends.add(id(n))
                order.append(n)
        return _Template(out, order, stand_ids)

    def instantiate(self, g, roots: list[Node]):
        m = {sid: roots[i] for sid, i in self.stand_ids.items()}
        get = m.get
        for n in self.order:
            m[id(n)] = Node(n.op, n.dtype, n.shape, tuple([get(id(s), s) for s in n.src]), n.arg)
        return _rebuild(self.out, g, m)


def _collect(out, acc: list) -> None:
    if isinstance(out, Tensor):
        acc.append(out.node)
    elif isinstance(out, (tuple, list)):
        for o in out:
            _collect(o, acc)


def _rebuild(out, g, m):
    if isinstance(out, Tensor):
        n = m.get(id(out.node), out.node)
        return Tensor(g, n)
    if isinstance(out, (tuple, list)):
        return type(out)(_rebuild(o, g, m) for o in out)
    return out


def _root(n: Node, roots: list[Node]) -> int:
    for i, r in enumerate(roots):
        if r is n:
            return i
    roots.append(n)
    return len(roots) - 1


def _plain(a):
    """A non-tensor value, spelled exactly (1, 1.0, True, -0.0 and NaN kept apart)."""
    if a is None or a is Ellipsis or isinstance(a, (bool, int, float, complex, str)):
        return (type(a).__name__, repr(a))
    if isinstance(a, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return (type(a).__name__, str(a))
    if hasattr(a, "free_symbols"):  # a symbolic dim
        return (type(a).__name__, str(a))
    if isinstance(a, slice):
        return ("slice", _plain(a.start), _plain(a.stop), _plain(a.step))
    if isinstance(a, (tuple, list)):
        return (type(a).__name__, tuple(_plain(x) for x in a))
    raise _Unspellable


def _meta(v):
    """torch's metadata of an FX value, as op functions may read it."""
    if isinstance(v, torch.Tensor):
        shape, stride, offset = tuple(v.shape), v.stride(), v.storage_offset()
        if not all(type(d) is int for d in (*shape, *stride, offset)):
            shape, stride, offset = tuple(map(_dim, shape)), tuple(map(_dim, stride)), _dim(offset)
        return ("T", shape, stride, offset, v.dtype, v.device)
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(_meta(x) for x in v))
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("sym", str(to_dim(v)))
    return _plain(v)


def _dim(d):
    return d if type(d) is int else ("sym", str(to_dim(d)))
