"""Graphs with collectives (torch.distributed's functional collectives, one process per rank).

A collective is not an HLIR op: its result is an INPUT leaf named `RESULT_PREFIX<k>` and the
value it sends is one more root of the graph (`Collective`). So the egraph, which optimizes
the graph once, sees the two sides as unrelated values and never moves a computation across
a collective (a barrier by construction, with no rule to keep in sync).

After the egraph the optimized graph is cut into *pieces* by a list schedule (`schedule`):
each collective is started as soon as the value it sends is computed, the work that does not
need its result runs while it is in flight, and it is waited for only when nothing else can
run ("as late as the graph allows"). Each piece is an ordinary graph built by the device's own
runtime (the cpu device: one C library per distinct piece, one native call per piece; numpy:
the reference runtime); values that cross pieces are fed as INPUTs, views are re-applied in the
piece that reads them. The steps between pieces call torch.distributed (the engine the user
launched: Gloo, NCCL) on the pieces' arrays without copies: NumPy arrays (numpy, cpu) through
`torch.from_numpy`, the torch tensors the kernel devices' pieces return (cuda, cuda-emulator)
as they are.

`DistributedRuntime` runs the steps; its `report_lines()` (in `CompiledGraph.report()`) list
every collective, the piece it was started after and the piece it was waited before, with the
work that overlapped it and the time spent in collectives.
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass

import numpy as np
import sympy

from luminal.errors import UnsupportedError
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op, toposort
from luminal.runtime.protocol import Runtime

RESULT_PREFIX = "__collective"
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
_FREE = (Op.INPUT, Op.CONSTANT, Op.VIEW)  # no buffer of their own: re-applied in every piece that reads them
_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class Collective:
    """One functional collective: `result` (an INPUT leaf) is what `kind` makes of `source` on
    every rank of process group `group`; `params` are the op's other arguments, as (name, value)
    pairs (`reduce_op`, `group_size`, `src`, split sizes)."""

    kind: str
    source: Node
    result: Node
    group: str
    params: tuple

    @property
    def name(self) -> str:
        return self.result.arg

    def describe(self) -> str:
        extra = ", ".join(f"{k}={v}" for k, v in self.params if k != "group_size")
        shape = ",".join(str(d) for d in self.source.shape)
        return f"{self.kind}({extra}) {self.source.dtype.short}[{shape}] on group {self.group}"

    def signature(self) -> tuple:
        return (self.kind, self.group, self.params, self.source.dtype.short, tuple(map(str, self.source.shape)))


def new_collective(kind: str, source: Node, shape, group: str, params: tuple = ()) -> Collective:
    """A collective of `source` whose result has `shape` (its dtype is the source's)."""
    if kind not in KINDS:
        raise UnsupportedError(f"collective {kind!r}; luminal runs {', '.join(KINDS)}")
    result = Node(Op.INPUT, source.dtype, tuple(shape), (), f"{RESULT_PREFIX}{next(_ids)}")
    return Collective(kind, source, result, group, tuple(params))


def used(outputs: list[Node], collectives: list[Collective]) -> list[Collective]:
    """The collectives whose results `outputs` read (through other collectives too), in order."""
    by_result = {c.name: c for c in collectives}
    found: dict[str, Collective] = {}
    frontier = list(outputs)
    while frontier:
        reached = []
        for n in toposort(frontier):
            if is_result(n) and n.arg in by_result and n.arg not in found:
                found[n.arg] = by_result[n.arg]
                reached.append(found[n.arg].source)
        frontier = reached
    return [c for c in collectives if c.name in found]


def is_result(node: Node) -> bool:
    return node.op is Op.INPUT and isinstance(node.arg, str) and node.arg.startswith(RESULT_PREFIX)


# --- the schedule -------------------------------------------------------------------------
@dataclass
class Piece:
    """A run of computation between collective steps: `nodes` (of the optimized graph), of which
    `outputs` (named `names`) are read later; `graph`, what the piece's runtime builds: the
    outputs rebuilt over INPUTs `inputs`, and a carrier per dim no other input binds."""

    index: int
    nodes: list[Node]
    outputs: list[Node]
    names: list[str]
    graph: list[Node]
    inputs: list[str]
    carriers: dict[str, str]  # carrier input name -> the symbol it binds (dims no other input binds)
    runtime: object = None


def _rebuilt(roots: list[Node], mine: set[int], name: dict[int, str]) -> list[Node]:
    """`roots` rebuilt with every materialized node outside `mine` read as an INPUT (named by
    `name`, or the collective result itself); views and leaves over them are re-applied."""
    new: dict[int, Node] = {}
    order: list[Node] = []
    seen: set[int] = set()
    stack = [(r, False) for r in reversed(roots)]
    while stack:  # operands first, stopping at what other steps compute
        n, expanded = stack.pop()
        if expanded:
            order.append(n)
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        if _materialized(n) and id(n) not in mine:
            new[id(n)] = n if is_result(n) else Node(Op.INPUT, n.dtype, n.shape, (), name[id(n)])
            continue
        stack.append((n, True))
        stack += [(x, False) for x in reversed(n.src)]
    for n in order:
        new[id(n)] = Node(n.op, n.dtype, n.shape, tuple(new[id(x)] for x in n.src), n.arg) if n.src else n
    return [new[id(r)] for r in roots]


def _materialized(n: Node) -> bool:
    return n.op not in _FREE or is_result(n)


def _deps(order: list[Node]) -> dict[int, tuple[Node, ...]]:
    """Per node of `order` (operands first): the materialized nodes (or collective results) it
    reads, seeing through views."""
    reach: dict[int, tuple[Node, ...]] = {}
    for n in order:
        reach[id(n)] = tuple(dict.fromkeys(x for s in n.src for x in ((s,) if _materialized(s) else reach[id(s)])))
    return reach


def _owned(n: Node) -> Node:
    """`n` as a node with a buffer of its own (a copy of a view, input or constant)."""
    return n if _materialized(n) and not is_result(n) else Node(Op.CONTIGUOUS, n.dtype, n.shape, (n,))


def schedule(outputs: list[Node], collectives: list[Collective]) -> tuple[list[tuple], list[Node], list[Node], dict]:
    """The steps ("run", [nodes]) / ("start", c) / ("wait", c) computing `outputs`: a list
    schedule that starts a collective as soon as its source is computed (nodes feeding a
    collective first), runs what does not need a pending result meanwhile, and waits (oldest
    first) only when nothing else is ready. Also the owned outputs and owned sources."""
    outs = [_owned(n) for n in outputs]
    sources = [_owned(c.source) for c in collectives]
    order = toposort(outs + sources)
    deps = _deps(order)
    mat = [n for n in order if _materialized(n) and not is_result(n)]
    position = {id(n): i for i, n in enumerate(mat)}
    starts: dict[int, list[int]] = {}
    for i, s in enumerate(sources):
        starts.setdefault(id(s), []).append(i)
    feeders: set[int] = set()
    for s in sources:  # everything a collective's source needs: run first, so it starts early
        stack = [s]
        while stack:
            n = stack.pop()
            if id(n) in feeders or is_result(n):
                continue
            feeders.add(id(n))
            stack += deps[id(n)]
    waiting = {id(n): len(deps[id(n)]) for n in mat}
    users: dict[int, list[Node]] = {}
    for n in mat:
        for d in deps[id(n)]:
            users.setdefault(id(d), []).append(n)
    ready = [(0 if id(n) in feeders else 1, position[id(n)], n) for n in mat if not waiting[id(n)]]
    heapq.heapify(ready)
    steps: list[tuple] = []
    run: list[Node] = []
    pending: list[int] = []

    def done(n: Node) -> None:
        for u in users.get(id(n), ()):
            waiting[id(u)] -= 1
            if not waiting[id(u)]:
                heapq.heappush(ready, (0 if id(u) in feeders else 1, position[id(u)], u))

    def cut() -> None:
        nonlocal run
        if run:
            steps.append(("run", run))
            run = []

    started = [False] * len(collectives)
    while ready or pending:
        if ready:
            _, _, n = heapq.heappop(ready)
            run.append(n)
            done(n)
            if id(n) in starts:
                cut()
                for i in starts[id(n)]:
                    steps.append(("start", collectives[i]))
                    started[i] = True
                    pending.append(i)
            continue
        cut()
        c = collectives[pending.pop(0)]
        steps.append(("wait", c))
        done(c.result)
    cut()
    if not all(started) or any(waiting.values()):  # a cycle through a collective: cannot happen in a DAG
        raise UnsupportedError("the graph's collectives could not be scheduled")
    return steps, outs, sources, deps


def pieces(steps: list[tuple], outs: list[Node], sources: list[Node], deps: dict, symbols) -> list[Piece]:
    """Each run of `steps` as a piece graph: its nodes rebuilt over INPUTs for what earlier
    pieces (or collectives) computed, its outputs what later steps read. A symbol of `symbols`
    (the graph's dims) that no input of a piece carries as a dim of its own gets a carrier input."""
    runs = [s[1] for s in steps if s[0] == "run"]
    where: dict[int, int] = {id(n): k for k, r in enumerate(runs) for n in r}
    needed: set[int] = {id(n) for n in outs} | {id(n) for n in sources}
    for k, r in enumerate(runs):
        for n in r:
            for d in deps[id(n)]:
                if where.get(id(d), k) != k:
                    needed.add(id(d))
    name = {}
    for r in runs:
        for n in r:
            if id(n) in needed:
                name[id(n)] = f"__value{len(name)}"
    result = []
    for k, r in enumerate(runs):
        exported = [n for n in r if id(n) in needed]
        graph = _rebuilt(exported, {id(n) for n in r}, name)
        leaves = [n for n in toposort(graph) if n.op is Op.INPUT]
        bound = {d for n in leaves for d in n.shape if isinstance(d, sympy.Symbol)}
        carriers = {}
        for s in sorted(set(symbols) - bound, key=str):  # a dim no input binds: a zero-cost input does
            c = Node(Op.INPUT, DType.BOOL, (s,), (), f"__dim_{s}")
            carriers[c.arg] = str(s)
            graph.append(c)
        result.append(Piece(k, list(r), exported, [name[id(n)] for n in exported], graph,
                            [n.arg for n in leaves] + list(carriers), carriers))
    return result


# --- running the steps ----------------------------------------------------------------------
def _start(c: Collective, array):
    """Start `c` on this rank's `array` (torch.distributed's functional collective: async). A
    NumPy array (numpy, cpu) is shared with torch; a torch tensor (the kernel devices, whose
    pieces take and return them: on "cuda" on the pieces' stream, which the collective follows)
    is used as it is."""
    import torch

    from luminal.runtime.torch_arrays import numpy_to_torch

    ops = torch.ops._c10d_functional
    t = array.contiguous() if isinstance(array, torch.Tensor) else numpy_to_torch(np.ascontiguousarray(array))
    p = dict(c.params)
    if c.kind == "all_reduce":
        return ops.all_reduce(t, p["reduce_op"], c.group)
    if c.kind == "all_gather":
        return ops.all_gather_into_tensor(t, p["group_size"], c.group)
    if c.kind == "reduce_scatter":
        return ops.reduce_scatter_tensor(t, p["reduce_op"], p["group_size"], c.group)
    if c.kind == "broadcast":
        return ops.broadcast(t, p["src"], c.group)
    return ops.all_to_all_single(t, list(p["output_split_sizes"]), list(p["input_split_sizes"]), c.group)


def _wait(handle, as_torch: bool):
    import torch

    from luminal.runtime.torch_arrays import torch_to_numpy

    done = torch.ops._c10d_functional.wait_tensor(handle)
    return done if as_torch else torch_to_numpy(done)


class DistributedRuntime(Runtime):
    """Runs the steps of `schedule`: each piece on its own runtime (the device's), each
    collective through torch.distributed between them. Times per call: `seconds` (total),
    `collective_seconds` (starting collectives and waiting for them), summed over the calls."""

    def __init__(self, steps: list[tuple], pieces_: list[Piece], outs: list[Node], collectives: list[Collective],
                 inputs: list[Node], torch_io: bool = False):
        """`outs`: the nodes whose values a call returns (owned: computed by a piece, or a collective's result)."""
        self.steps, self.pieces, self.collectives = steps, pieces_, collectives
        self.inputs = inputs
        named = {id(n): name for p in pieces_ for n, name in zip(p.outputs, p.names)}
        self.output_names = [named[id(n)] if id(n) in named else n.arg for n in outs]
        self.source_names = {c.name: self.output_names[len(outs) - len(collectives) + i] for i, c in enumerate(collectives)}
        self.calls = 0
        self.seconds = self.collective_seconds = 0.0
        self.placement = _placement(steps)
        self.torch_io = torch_io  # the pieces take and return torch tensors (the kernel devices)

    @property
    def builds_in_background(self) -> bool:
        return any(p.runtime.builds_in_background for p in self.pieces)

    def when_built(self, fn) -> None:
        left = [p.runtime for p in self.pieces]
        seconds = [0.0]

        def one(_built, s):
            seconds[0] = max(seconds[0], s)
            left.pop()
            if not left:
                fn(self, seconds[0])

        for r in list(left):
            r.when_built(one)

    @property
    def build_outcome(self) -> str | None:
        outcomes = {p.runtime.build_outcome for p in self.pieces} - {None}
        return "miss" if "miss" in outcomes else ("hit" if outcomes else None)

    def __call__(self, feeds: dict) -> list:
        from luminal.runtime.binding import bind_inputs

        t0 = time.perf_counter()
        bindings = bind_inputs(self.inputs, feeds)[1] if any(p.carriers for p in self.pieces) else {}
        env = dict(feeds)
        handles = {}
        in_collectives = 0.0
        pieces_ = iter(self.pieces)
        for step in self.steps:
            kind = step[0]
            if kind == "run":
                p = next(pieces_)
                mine = {}
                for n in p.inputs:
                    s = p.carriers.get(n)
                    mine[n] = np.empty(bindings[s], np.bool_) if s is not None else env[n]
                env.update(zip(p.names, p.runtime(mine)))
                continue
            c = step[1]
            t1 = time.perf_counter()
            if kind == "start":
                handles[c.name] = _start(c, env[self.source_names[c.name]])
            else:
                env[c.name] = _wait(handles.pop(c.name), self.torch_io)
            in_collectives += time.perf_counter() - t1
        self.calls += 1
        self.collective_seconds += in_collectives
        self.seconds += time.perf_counter() - t0
        return [env[n] for n in self.output_names]

    def report_lines(self) -> list[str]:
        lines = [f"  collectives: {len(self.collectives)}, in {len(self.pieces)} pieces "
                 f"(started as soon as their source is computed, waited for when nothing else can run)"]
        for i, c in enumerate(self.collectives):
            where = self.placement[c.name]
            lines.append(f"    #{i} {c.describe()}: started after piece {where['started_after']}, waited for before "
                         f"piece {where['waited_before']}; {where['overlap']} node(s) computed meanwhile")
        if self.calls:
            share = self.collective_seconds / self.seconds if self.seconds else 0.0
            lines.append(f"    {self.calls} call(s): {self.seconds * 1e3:.1f} ms, {share:.0%} of it in collectives")
        return lines

    def placements(self) -> list[dict]:
        """Per collective (in the graph's order): its kind, group, params and source shape, the
        piece it is started after (-1: before the first) and the piece it is waited for before
        (the number of pieces: at the end of the call), and `overlap`, the nodes computed while
        it is in flight."""
        return [{"name": c.name, "kind": c.kind, "group": c.group, "params": dict(c.params),
                 "shape": tuple(str(d) for d in c.source.shape), **self.placement[c.name]} for c in self.collectives]


def _placement(steps: list[tuple]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    runs = -1
    flying: set[str] = set()
    for step in steps:
        if step[0] == "run":
            runs += 1
            for name in flying:
                out[name]["overlap"] += len(step[1])
        elif step[0] == "start":
            out[step[1].name] = {"started_after": runs, "waited_before": None, "overlap": 0}
            flying.add(step[1].name)
        else:
            out[step[1].name]["waited_before"] = runs + 1
            flying.discard(step[1].name)
    return out


# --- compiling -------------------------------------------------------------------------------
def compile_outputs(inputs: list[Node], outputs: list[Node], output_names: list[str] | None,
                    collectives: list[Collective], *, device="cpu", optimize: bool | None = None,
                    name: str = "graph", report=None):
    """`compiler.compile_outputs` for a graph with collectives: the compiler's passes on the
    outputs and the collectives' sources (one egraph run), bound to a `DistributedRuntime` that
    builds one runtime of `device` per piece. The compiled graph's outputs are `outputs`, then
    the sources (named `__sent<k>`); `compiled.collectives` lists where each one was placed."""
    import dataclasses

    from luminal import compiler, devices

    entry = devices.resolve(device)
    symbols = {s for n in inputs for d in n.shape for s in getattr(d, "free_symbols", ())}
    built: list[DistributedRuntime] = []

    def factory(*args, **_options):  # (the entry,) the optimized roots; no compile cache artifacts
        optimized = args[-1]
        t0 = time.perf_counter()
        outs = list(optimized[:len(outputs)])
        placed = [Collective(c.kind, s, c.result, c.group, c.params)
                  for c, s in zip(collectives, optimized[len(outputs):])]
        steps, owned, sources, deps = schedule(outs, placed)
        parts = pieces(steps, owned, sources, deps, symbols)
        scheduled = time.perf_counter() - t0
        for p in parts:
            p.runtime = entry.runtime(p.graph)
        leaves = [n for n in toposort(optimized) if n.op is Op.INPUT and not is_result(n)]
        runtime = DistributedRuntime(steps, parts, owned + sources, placed, leaves, torch_io=entry.io != "numpy")
        runtime.schedule_seconds = scheduled
        built.append(runtime)
        return runtime

    pieced = dataclasses.replace(entry, factory=factory)
    names = list(output_names or [f"out{i}" for i in range(len(outputs))]) + [f"__sent{i}" for i in range(len(collectives))]
    roots = list(outputs) + [c.source for c in collectives]
    compiled = compiler.compile_outputs(inputs, roots, names, device=pieced, optimize=optimize, name=name,
                                        report=report)
    runtime = built[-1]
    compiled._report.phases["schedule"] = runtime.schedule_seconds
    compiled._report.notes.append(f"{len(collectives)} collective(s): the graph runs as {len(runtime.pieces)} "
                                  "pieces between them (see the collectives section)")
    compiled.collectives = runtime.placements()
    return compiled
