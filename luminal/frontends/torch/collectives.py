"""torch.distributed's functional collectives in an ATen graph (what Dynamo hands the backend
for DTensor / `parallelize_module` models and for `torch.distributed._functional_collectives`).

Each collective op becomes a `luminal.runtime.collectives.Collective` of the graph being built
(its result an INPUT leaf, its source one more root of the graph: see that module), and
`wait_tensor` is the identity: where the wait goes is decided after the egraph, from the
optimized graph (as late as it allows), not where torch traced it.

Ranks agree before they run a compiled graph with collectives (`agree`): every rank of each
process group the graph communicates on exchanges whether its compile succeeded and the list
of its collectives, so a rank whose compile fails, or whose collectives differ, makes every
rank raise `CollectiveError` (naming the rank and why) instead of leaving the others hanging
in their first collective.
"""

from __future__ import annotations

import hashlib

import torch

from luminal.errors import CollectiveError, LuminalError, UnsupportedError
from luminal.frontends.torch.aten_ops import aten
from luminal.runtime.collectives import Collective, new_collective

NAMESPACES = ("_c10d_functional", "_c10d_functional_autograd")


def _record(cx, kind: str, x, group, params: tuple = ()):
    """The result of a collective of tensor `x` (the shape torch reports), recorded on the graph."""
    from luminal.builder import Tensor

    if not isinstance(x, Tensor):
        raise UnsupportedError(f"{kind} of a {type(x).__name__}")
    if not isinstance(group, str):
        raise UnsupportedError(f"{kind} on a process group given as {type(group).__name__}, not by its name")
    c = new_collective(kind, x.node, cx.shape, group, params)
    graph_collectives(cx.g).append(c)
    return Tensor(cx.g, c.result)


def graph_collectives(g) -> list[Collective]:
    """The collectives recorded on the builder graph `g` so far (some of them unused: the
    import memo tries an op on stand-ins first; only those its outputs reach are compiled)."""
    return g.__dict__.setdefault("collectives", [])


def _both(name: str, *, autograd: bool = True):
    names = [f"_c10d_functional::{name}"]
    if autograd:
        names.append(f"_c10d_functional_autograd::{name}")
    return aten(*names)


@aten("_c10d_functional::all_reduce.default")
def all_reduce(cx, x, reduce_op, group_name):
    return _record(cx, "all_reduce", x, group_name, (("reduce_op", str(reduce_op)),))


@_both("all_gather_into_tensor.default")
def all_gather_into_tensor(cx, x, group_size, group_name):
    return _record(cx, "all_gather", x, group_name, (("group_size", int(group_size)),))


@_both("reduce_scatter_tensor.default")
def reduce_scatter_tensor(cx, x, reduce_op, group_size, group_name):
    return _record(cx, "reduce_scatter", x, group_name, (("reduce_op", str(reduce_op)), ("group_size", int(group_size))))


@aten("_c10d_functional::broadcast.default")
def broadcast(cx, x, src, group_name):
    return _record(cx, "broadcast", x, group_name, (("src", int(src)),))


@_both("all_to_all_single.default")
def all_to_all_single(cx, x, output_split_sizes, input_split_sizes, group_name):
    try:
        splits = (("output_split_sizes", tuple(int(s) for s in output_split_sizes)),
                  ("input_split_sizes", tuple(int(s) for s in input_split_sizes)))
    except TypeError as exc:
        raise UnsupportedError(f"all_to_all_single with symbolic split sizes ({exc})") from exc
    return _record(cx, "all_to_all", x, group_name, splits)


@aten("_c10d_functional::wait_tensor.default")
def wait_tensor(cx, x):
    return x


# --- what a graph communicates, and the ranks' agreement ------------------------------------
def fx_collectives(gm) -> list[torch.fx.Node]:
    """The collective nodes of an FX graph (functional collectives, not their waits): ATen
    overloads in aot_autograd's graphs, overload packets in Dynamo's."""
    if not isinstance(gm, torch.fx.GraphModule):
        return []
    return [n for n in gm.graph.nodes if n.op == "call_function" and _collective(n.target)]


def _collective(target) -> str | None:
    """The functional collective `target` runs ("all_reduce", ...), or None (waits included)."""
    packet = getattr(target, "_overloadpacket", target)
    namespace, _, op = str(getattr(packet, "_qualified_op_name", "")).partition("::")
    return op if namespace in NAMESPACES and op != "wait_tensor" else None


def signature(nodes: list[torch.fx.Node]) -> tuple[set[str], str, list[str]]:
    """(the process groups, a digest of the collectives in order, their descriptions) of the
    collective FX nodes `nodes`: what every rank of a group must agree on."""
    groups, lines = set(), []
    for n in nodes:
        meta = n.args[0].meta if isinstance(n.args[0], torch.fx.Node) else {}
        val = meta.get("val", meta.get("example_value"))  # aot_autograd's graphs, Dynamo's
        shape = tuple(str(d) for d in val.shape) if isinstance(val, torch.Tensor) else "?"
        dtype = str(val.dtype) if isinstance(val, torch.Tensor) else "?"
        group = n.kwargs.get("group_name", n.args[-1])  # the last argument of every functional collective
        if isinstance(group, str):
            groups.add(group)
        lines.append(f"{_collective(n.target)}{list(map(str, n.args[1:]))} {dtype}{list(shape)}")
    return groups, hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16], lines


def agree(name: str, groups: set[str], digest: str, error: BaseException | None) -> None:
    """Exchange (this rank's compile error, its collectives' digest) with every rank of each of
    `groups`; raise `CollectiveError` on every rank if one failed or the digests differ."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    if not dist.is_initialized():
        return
    mine = {"rank": dist.get_rank(), "digest": digest,
            "error": None if error is None else f"{type(error).__name__}: {error}"}
    for g in sorted(groups):
        group = _resolve_process_group(g)
        everyone: list = [None] * dist.get_world_size(group)
        dist.all_gather_object(everyone, mine, group=group)
        failed = [o for o in everyone if o["error"] is not None]
        if failed and error is None:
            raise CollectiveError(f"graph {name}: rank {failed[0]['rank']} of process group {g} failed to compile "
                                  f"it, so no rank runs it: {failed[0]['error']}")
        digests = {o["digest"] for o in everyone}
        if len(digests) > 1:
            by = ", ".join(f"rank {o['rank']}: {o['digest']}" for o in everyone)
            raise CollectiveError(f"graph {name}: the ranks of process group {g} compiled different collectives "
                                  f"(digests {by}); running it would hang or mix up tensors")


def distributed_function(base, gm):
    """A `LuminalFunction` subclass whose build every rank agrees on (see `agree`); `gm`: the FX
    graph whose collectives the ranks compare."""
    groups, digest, _ = signature(fx_collectives(gm))

    class DistributedFunction(base):
        def _build(self, args):
            try:
                super()._build(args)
            except Exception as exc:
                agree(self.name, groups, digest, exc)
                if isinstance(exc, LuminalError):
                    raise
                raise CollectiveError(f"graph {self.name}: failed to compile it: {type(exc).__name__}: {exc}") from exc
            agree(self.name, groups, digest, None)

    return DistributedFunction
