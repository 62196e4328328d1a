"""The decomposer's traces without make_fx's machinery: the core-ATen graph of a function of fake
tensors, as `make_fx(fn, decomposition_table=table)` traces it, in under half its time.

`make_fx` wraps every traced tensor in a proxy, tracks it through pytree maps, snapshots every
result's metadata and keeps per-op bookkeeping the decomposer never reads: the largest part of
lowering a large model. `record` keeps only what decides the graph, the three steps of make_fx's `proxy_call`
(torch/fx/experimental/proxy_tensor.py), in its order, for each op dispatched to it:
1. an op of the decomposition table runs its decomposition, recorded in turn, unless that
   returns NotImplemented;
2. an op autograd would have decomposed (a CompositeImplicitAutograd kernel and no backend
   kernel for its first tensor's device) runs that kernel, recorded in turn, likewise;
3. any other op becomes a node (its tensor arguments the nodes that made them, the rest as
   they are) and runs on the fake tensors; `meta['val']` is its result, and a tuple result gets
   one `getitem` node per element, in order, as make_fx makes them.
The graph is the same, node for node (tests/torch/test_recorder.py compares the two on every
model of the test zoo and the 13 tiny HF families), but for one thing: under this mode (a user
mode, where make_fx's proxy mode is one of torch's own), `torch.full_like` called from
`zeros_like`'s decomposition (in `_safe_softmax`'s) dispatches `detach` twice after the op, calls
make_fx never sees; a `detach` result is therefore bound to its input's node, no node made (make_fx
records a model's own `detach` as `alias`, which imports as the identity either way).

Whatever else make_fx has machinery for, `record` refuses (`Unrecordable`, and the decomposer
traces with make_fx instead): a tensor made outside the trace (a constant: make_fx's
`_tensor_constant` attributes, `lift_fresh`), a tensor subclass, a symbolic size, and
data-dependent ops (`.item()`, `nonzero`).
"""

from __future__ import annotations

import operator

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, autograd_would_have_decomposed

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)
# ops make_fx handles before or instead of the three steps
_REFUSED = {torch.ops.aten.lift_fresh.default, torch.ops.aten.is_nonzero.default, torch.ops.aten.size.default,
            torch.ops.aten.stride.default, torch.ops.aten.storage_offset.default, torch.ops.aten.sym_size.int,
            torch.ops.aten.sym_stride.int, torch.ops.aten.sym_numel.default, torch.ops.aten.sym_storage_offset.default}


class Unrecordable(Exception):
    """The function needs make_fx (the message says what for)."""


def record(fn, fakes: list, table: dict, fake_mode) -> torch.fx.GraphModule:
    """The graph of `fn(*fakes)` (fake tensors of `fake_mode`) with `table`'s decompositions:
    placeholders for `fakes`, the output `fn`'s result with nodes for tensors."""
    graph = torch.fx.Graph()
    recorder = _Recorder(graph, table)
    for i, fake in enumerate(fakes):
        node = graph.placeholder(f"arg{i}_1")
        node.meta["val"] = fake
        recorder.bind(fake, node)
    with fake_mode, recorder:
        out = fn(*fakes)
    graph.output(pytree.tree_map(recorder.node_of_arg, out))
    return _LazyGraphModule({}, graph, class_name="LuminalRecorded")


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: torch.fx.Graph, table: dict):
        super().__init__()
        self.graph, self.table = graph, table
        self.nodes: dict[int, torch.fx.Node] = {}  # id(tensor) -> the node that made it
        self.alive: list = []  # every bound tensor, so that no id is reused meanwhile

    def bind(self, tensor, node) -> None:
        self.nodes[id(tensor)] = node
        self.alive.append(tensor)

    def node_of_arg(self, x):
        if isinstance(x, torch.Tensor):
            node = self.nodes.get(id(x))
            if node is None:
                raise Unrecordable(f"a {type(x).__name__} made outside the trace (a constant)")
            return node
        if isinstance(x, _SYMBOLIC):
            raise Unrecordable("a symbolic size")
        return x

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.prim.device.default:  # as make_fx: run, not recorded
            return func(*args, **kwargs)
        if any(t is not FakeTensor for t in types):
            raise Unrecordable(f"{func} on a tensor subclass ({', '.join(t.__name__ for t in types)})")
        if func in _REFUSED or torch.Tag.data_dependent_output in func.tags:
            raise Unrecordable(str(func))
        if func is torch.ops.aten.detach.default:  # see the module docstring
            out = func(*args, **kwargs)
            self.bind(out, self.node_of_arg(args[0]))
            return out
        decomposition = self.table.get(func)
        if decomposition is not None:
            with self:
                out = decomposition(*args, **kwargs)
            if out is not NotImplemented:
                return out
        if autograd_would_have_decomposed(func, pytree.arg_tree_leaves(*args, **kwargs)):
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        node_args, node_kwargs = pytree.tree_map(self.node_of_arg, (args, kwargs))
        node = self.graph.create_node("call_function", func, node_args, node_kwargs,
                                      name=self.graph._target_to_str(func.overloadpacket.__name__))
        out = func(*args, **kwargs)
        node.meta["val"] = out
        if isinstance(out, torch.Tensor):
            self.bind(out, node)
        elif isinstance(out, (tuple, list)):
            for i, element in enumerate(out):
                item = self.graph.create_node("call_function", operator.getitem, (node, i), {},
                                              name=self.graph._target_to_str("getitem"))
                item.meta["val"] = element
                if isinstance(element, torch.Tensor):
                    self.bind(element, item)
        return out
