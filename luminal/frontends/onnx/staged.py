"""Control flow that run-time data decides, run on the host between compiled stages.

A Loop whose trip count or condition comes from the model's inputs (or whose condition the
body computes from the loop's state), a Scan over a symbolic length, and an If whose condition
is computed from input *data* cannot be unrolled or chosen once at compile time. Unrolling them
per value (what the importer does for a condition or trip count it can fold) would compile the
model again for every distinct input, and a data-dependent Loop condition could not be unrolled
at all. Instead the model is cut at those nodes ("host nodes"):

    stage 0 (compiled) -> Loop (host: the body compiled once, called per iteration) -> stage 1 ...

Each stage, each Loop/Scan body and each If branch is an ONNX graph of its own, compiled by
`luminal.onnx.compile` with everything it reads from outside as inputs: symbolic dims stay
symbolic where onnx's shape inference names them (one build serves every size), and a dim it
cannot infer is compiled per size. The loop itself is a Python `while` over NumPy arrays, with
ONNX's semantics: the body's condition output is checked after each iteration, scan outputs are
stacked along a new first axis (Loop) or the output axis (Scan). Each iteration calls the body's
compiled runtime bound once per signature (`SubModel.bound`: its per-call checks done once).

Static control flow (a trip count, scan length or condition known when the model is compiled)
stays unrolled or folded by the importer (`ops_misc.py`): a fused unrolled loop runs faster than
a host loop calling a compiled body per iteration.
"""

from __future__ import annotations

import threading

import numpy as np
import onnx
from onnx import helper

from luminal.compiler import CompiledGraph
from luminal.errors import InputError
from luminal.frontends.onnx import boundary, if_convert, staged_rnn, strings
from luminal.frontends.onnx.errors import OnnxError, OnnxImportError, OnnxInputError
from luminal.frontends.onnx.host_step import HostStep
from luminal.frontends.onnx.importer import Importer, _value_deps, attr_value, graph_input_deps, initializer_array
from luminal.frontends.onnx.inferred import Inferred

RECURRENT_OPS = staged_rnn.RECURRENT_OPS
HOSTABLE = ("Loop", "Scan", "If", *RECURRENT_OPS)
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
SIGNATURES_KEPT = 16  # compiled graphs per stage (one per signature: input dtypes, and declared dims that a call contradicts)


def _subgraphs(node: onnx.NodeProto):
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def free_names(nodes, defined=()) -> list[str]:
    """The names `nodes` (and the subgraphs of their attributes) read but do not define, in
    order of first use: what a graph of these nodes takes from outside (inputs or initializers)."""
    defined = set(defined)
    out: dict[str, None] = {}
    for node in nodes:
        for name in node.input:
            if name and name not in defined:
                out.setdefault(name)
        for g in _subgraphs(node):
            inner = {i.name for i in g.input} | {i.name for i in g.initializer}
            for name in free_names(g.node, inner):
                if name not in defined:
                    out.setdefault(name)
        defined.update(o for o in node.output if o)
    return list(out)


def host_reason(proto: onnx.ModelProto, node: onnx.NodeProto, inferred: Inferred, recurrence: str = "unroll",
                forced=()) -> str | None:
    """Why `node` (of the model's main graph) runs on the host, or None when the importer can
    unroll, fold or if-convert it at compile time. `forced`: nodes that are or hold an If found
    not to if-convert (`enclosing`)."""
    graph = proto.graph
    if node.output and node.output[0] in forced and node.op_type != "If":
        return "it holds an If on run-time data whose branches' results differ in shape"
    inputs = {vi.name: vi for vi in graph.input}
    inits = {i.name for i in graph.initializer}

    def deps(name):
        values, shape_deps = graph_input_deps(graph, name)
        return (values | shape_deps) - inits

    if node.op_type == "Loop":
        body = next(_subgraphs(node))
        controls = sorted(set().union(*(deps(n) for n in node.input[:2] if n)))
        if controls:
            return f"its trip count or condition is computed from input(s) {controls}"
        if not body.output:
            return None
        # the carried values (not the condition input: a body that passes it on, as exporters of
        # for-loops write, runs a sequence of conditions its constant start decides: unrolled)
        state = {i.name for i in body.input[2:]}
        outer = set(free_names(body.node, {i.name for i in body.input} | {i.name for i in body.initializer}))
        values, shape_deps = _value_deps(body.node, state | outer, body.output[0].name)
        if values & state or any(deps(n) for n in (values | shape_deps) & outer):
            return "its body computes the condition from the loop's state or the inputs"
        for n in body.node:  # an If on the state that cannot be if-converted: the body compiles as a model of its own
            if n.op_type == "If" and _value_deps(body.node, state, n.input[0])[0] and not if_convert.convertible(n, inferred):
                return f"its body holds If node {n.name or '<unnamed>'!r} on the loop's state"
        return None
    if node.op_type == "Scan":
        m = next((a.i for a in node.attribute if a.name == "num_scan_inputs"), 0)
        axes = next((list(a.ints) for a in node.attribute if a.name == "scan_input_axes"), None) or [0] * m
        for name, axis in zip(node.input[len(node.input) - m:], axes):
            dims = inferred.shapes.get(name)
            if dims is not None and -len(dims) <= axis < len(dims) and isinstance(dims[axis], int):
                return None  # a static length: unrolled
        scanned = sorted(set().union(*(deps(n) for n in node.input[len(node.input) - m:] if n)))
        return f"its length comes from input(s) {scanned}" if scanned else None
    if node.op_type in RECURRENT_OPS:
        return staged_rnn.host_reason(node, inferred.shapes, deps, recurrence)
    if node.op_type == "If":
        values, _ = graph_input_deps(graph, node.input[0])
        data = sorted(n for n in values - inits if n in inputs and _is_data(inputs[n]))
        if node.output[0] in forced:
            return f"its condition is computed from input(s) {sorted(values - inits)} and its branches' results differ in shape"
        if not data or if_convert.convertible(node, inferred):
            return None  # a setting: compiled per value; small safe branches: both computed, one selected
        return f"its condition is computed from the data of input(s) {data}"
    return None


def _is_data(vi: onnx.ValueInfoProto) -> bool:
    """An input that carries data (floating point, or more than a scalar) rather than a setting:
    an If on a setting (a sample rate, a flag) is compiled per value of it, one on data on the host."""
    tt = vi.type.tensor_type
    return tt.elem_type in FLOAT_TYPES or not tt.HasField("shape") or len(tt.shape.dim) > 0


def plan(proto: onnx.ModelProto, recurrence: str = "unroll", forced=(), inferred: Inferred | None = None) -> list | None:
    """The main graph cut at its host nodes: [("graph", nodes) | ("host", node, reason), ...], or
    None when no node needs the host (the model compiles as one graph). `inferred`: the model's
    shape inference, shared with the caller (run when a decision needs it)."""
    graph = proto.graph
    text = strings.may_have_strings(proto)
    if not text and not any(n.op_type in HOSTABLE for n in graph.node):
        return None
    inferred = inferred or Inferred(proto)
    string_values = strings.string_values(proto, strings.node_types(proto, inferred)) if text else set()
    steps: list = []
    run: list = []
    for node in graph.node:
        reason = strings.host_reason(node, string_values) if text else None  # string tensors: on the host
        if reason is None and node.op_type in HOSTABLE:
            reason = host_reason(proto, node, inferred, recurrence, forced)
        if reason is None:
            run.append(node)
            continue
        if run:
            steps.append(("graph", run))
            run = []
        steps.append(("host", node, reason))
    if not any(s[0] == "host" for s in steps):
        return None
    if run:
        steps.append(("graph", run))
    return steps


class SubModel:
    """An ONNX graph built from some nodes of a model, with named inputs, compiled by
    `luminal.onnx.compile` at its first call, and again for a call whose input dtypes differ
    (or whose sizes contradict a declared static dim)."""

    def __init__(self, proto, name: str, nodes, inputs: list[str], outputs: list[str], *, declared=None,
                 shapes=None, initializers=(), opsets=(), options: dict, compile_fn):
        self.proto, self.name, self.nodes = proto, name, list(nodes)
        self.input_names, self.output_names = list(inputs), list(outputs)
        self.declared = declared or {}  # input name -> ValueInfoProto (a body's own inputs)
        self.shapes = shapes or {}  # input name -> inferred dims
        self.initializers = list(initializers)  # TensorProtos the nodes read (embedded)
        self.opsets = list(opsets)  # OperatorSetIdProtos beside the model's (a private domain's ops)
        self.options = options  # luminal.onnx.compile's keyword arguments (device, optimize, recurrence)
        self.compile_fn = compile_fn  # luminal.onnx.compile (passed in: model.py imports this module)
        self._models: dict = {}
        self._bound: dict = {}  # signature (names, shapes, dtypes) -> `bound`'s callable
        self._lock = threading.Lock()
        self._identity = self._passthrough()

    def _dims(self, name: str, arr: np.ndarray) -> list:
        """The dims to declare for input `name`: the declared or inferred ones (an int, or a
        named symbol: equal to every other dim of that name, which the compiled graph checks at
        each call), else an unnamed dim (a symbol of its own: where the graph cannot be
        compiled for every size of it, `luminal.onnx.compile`'s model compiles per size)."""
        vi = self.declared.get(name)
        known = None
        if vi is not None and vi.type.tensor_type.HasField("shape"):
            known = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or None)
                     for d in vi.type.tensor_type.shape.dim]
        elif name in self.shapes:
            known = self.shapes[name]
        if known is None or len(known) != arr.ndim:
            known = [None] * arr.ndim
        # a wrong int: this size; a name that is an expression ("batch*seq"): a symbol of its own
        # (sanitized, two different expressions could meet under one name)
        return [n if isinstance(k, int) and k != n else None if isinstance(k, str) and not k.isidentifier() else k
                for k, n in zip(known, arr.shape)]

    def _passthrough(self) -> list[str] | None:
        """For a graph of Identity nodes only (an If branch that returns a value as it is): the
        input each output is, so the call needs no compiled graph; else None."""
        source: dict[str, str] = {n: n for n in self.input_names}
        for node in self.nodes:
            if node.op_type != "Identity" or node.domain not in ("", "ai.onnx") or node.input[0] not in source:
                return None
            source[node.output[0]] = source[node.input[0]]
        return [source[o] for o in self.output_names] if all(o in source for o in self.output_names) else None

    def __call__(self, feeds: dict) -> list[np.ndarray]:
        if self._identity is not None:
            return [boundary.copy_value(feeds[n]) for n in self._identity]
        return self._model(feeds)({n: feeds[n] for n in self.input_names})

    def _model(self, feeds: dict):
        """The compiled model for the signature of `feeds` (compiled at its first call)."""
        dims = {n: self._dims(n, feeds[n]) for n in self.input_names if not boundary.is_structured(feeds[n])}
        # a sequence or an optional: its model compiles per length and presence itself (boundary.py)
        key = tuple((n, boundary.kind_key(feeds[n])) if n not in dims else (n, feeds[n].dtype.str, tuple(dims[n]))
                    for n in self.input_names)
        with self._lock:
            model = self._models.get(key)
            if model is None:
                model = self._compile(feeds, dims)
                self._models[key] = model
                while len(self._models) > SIGNATURES_KEPT:
                    self._models.pop(next(iter(self._models)))
        return model

    def bound(self, feeds: dict):
        """A callable like this one for many calls whose feeds have the names, dtypes and shapes
        of `feeds` (a recurrence's steps): the compiled graph's runtime called directly, the
        per-call work of SubModel, OnnxModel and CompiledGraph (signature, input checks, dim
        binding) done once per signature; the runtime still checks the arrays it is given. A
        call of another signature goes the whole way (`self`)."""
        if any(boundary.is_structured(feeds[n]) for n in self.input_names):
            return self  # a sequence or an empty optional: the whole way
        signature = tuple((n, feeds[n].shape, feeds[n].dtype.str) for n in self.input_names)
        call = self._bound.get(signature)
        if call is None:
            call = self._bind(feeds)
            with self._lock:
                self._bound[signature] = call
                while len(self._bound) > SIGNATURES_KEPT:
                    self._bound.pop(next(iter(self._bound)))
        return call

    def _bind(self, feeds: dict):
        model = self._model(feeds) if self._identity is None else None
        if model is None or hasattr(model, "plan") or model.value_inputs:
            return self  # an identity, a staged graph, or one compiled per value: the whole way
        if any(feeds[name].shape[axis] == 0 for name, axis in model._dynamic_axes):
            return self  # a size-0 dim: the model compiles that call statically
        arrays = {n: feeds[n] for n in model.input_names}
        if model.shape_inputs:  # compiled per shape (weights that are inputs, say): this signature's graph
            compiled = model._compiled_for(arrays, False, {})
        else:  # the first call's shapes' static graph where these are they (`first_shape.py`)
            compiled = model.graph_for(arrays)
        if (not isinstance(compiled, CompiledGraph) or compiled.assumptions or compiled.ragged
                or getattr(compiled, "boundary_layout", None) is not None  # sequences regrouped per call
                or any(feeds[n.arg].dtype != n.dtype.numpy for n in compiled.inputs)):
            return self  # a model stepping a recurrence of its own, or with checks of its own: the whole way
        names = [n.arg for n in compiled.inputs]
        expected = [(feeds[n].shape, feeds[n].dtype) for n in names]
        casts = [o.dtype for o in model.outputs]
        runtime = compiled.runtime

        def call(step_feeds: dict) -> list[np.ndarray]:
            arrays = {n: step_feeds[n] for n in names}
            if any(type(a) is not np.ndarray or (a.shape, a.dtype) != sig for a, sig in zip(arrays.values(), expected)):
                return self(step_feeds)
            with compiled._calls_lock:  # luminal.stats() counts these calls too
                compiled.calls += 1
            try:
                results = runtime(arrays)
            except InputError as exc:
                raise OnnxInputError(str(exc)) from None
            return [r if dt is None or r.dtype == dt else r.astype(dt) for r, dt in zip(results, casts)]

        return call

    def _compile(self, feeds: dict, dims: dict):
        inputs = []
        for n in self.input_names:
            if boundary.is_structured(feeds[n]):
                inputs.append(boundary.body_input_info(n, feeds[n], self.declared.get(n)))
                continue
            try:
                elem = helper.np_dtype_to_tensor_dtype(feeds[n].dtype)
            except (KeyError, TypeError, ValueError):
                raise OnnxError(f"{self.name}: value {n!r} has dtype {feeds[n].dtype}, which ONNX has no type for") from None
            inputs.append(helper.make_tensor_value_info(n, elem, dims[n]))
        outputs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in self.output_names]
        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[*self.proto.opset_import, *self.opsets],
                                  ir_version=self.proto.ir_version)
        model.functions.extend(self.proto.functions)
        return self.compile_fn(model, check=False, **self.options)

    def reports(self) -> list:
        """The compile reports of the graphs built so far (a staged body's too; a model compiled per
        value has one only once called)."""
        return [m.report() for m in self._models.values() if m.compiled is not None or hasattr(m, "plan")]


def _outer(proto, env_names, nodes, defined=()) -> tuple[list[str], list]:
    """What a graph of `nodes` reads from outside: (names it takes as inputs, initializers it embeds)."""
    inits = {i.name: i for i in proto.graph.initializer}
    names, embedded = [], []
    for n in free_names(nodes, defined):
        if n in env_names or n not in inits:
            names.append(n)
        else:
            embedded.append(inits[n])
    return names, embedded


class Stage:
    """A run of nodes compiled as one graph."""

    def __init__(self, model, index: int, nodes, later_reads: set[str]):
        proto = model.proto
        self.nodes = nodes
        produced = [o for n in nodes for o in n.output if o]
        self.outputs = [o for o in produced if o in later_reads]
        self.model = model
        self.index = index
        self._sub: dict = {}  # frozenset of overridden defaults -> SubModel
        self.proto = proto

    def sub(self, env) -> SubModel:
        overridden = frozenset(n for n in self.model.default_names if n in env)
        sub = self._sub.get(overridden)
        if sub is None:
            names, embedded = _outer(self.proto, self.model.env_names | overridden, self.nodes)
            sub = self.model.sub_model(f"{self.proto.graph.name or 'onnx'}_stage{self.index}", self.nodes, names,
                                       self.outputs, shapes=self.model.shapes, initializers=embedded)
            self._sub[overridden] = sub
        return sub

    def run(self, env: dict) -> None:
        sub = self.sub(env)
        missing = [n for n in sub.input_names if n not in env]
        if missing:
            raise OnnxImportError(f"stage {self.index}: value(s) {missing} are neither computed, inputs nor initializers")
        env.update(zip(self.outputs, sub({n: env[n] for n in sub.input_names})))

    def sub_models(self) -> list[SubModel]:
        return list(self._sub.values())

    def describe(self) -> str:
        ops = sorted({n.op_type for n in self.nodes})
        return f"compiled stage of {len(self.nodes)} node(s) ({', '.join(ops[:8])}{', ...' if len(ops) > 8 else ''})"


class HostNode(HostStep):
    """A Loop, Scan or If run by Python around compiled subgraphs."""

    def __init__(self, model, node: onnx.NodeProto, reason: str):
        self.model, self.node, self.reason = model, node, reason
        self.label = f"{node.op_type} node {node.name or '<unnamed>'!r}"
        self.attrs = {a.name: attr_value(a) for a in node.attribute if a.type not in (
            onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)}
        graphs = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
        self.subs = {k: self._body(g, k) for k, g in graphs.items()}
        if node.op_type == "Loop" and not (node.input[:1] and node.input[0]) and not (node.input[1:2] and node.input[1]):
            raise OnnxImportError(f"{self.label}: a Loop with neither a trip count nor a condition never ends")

    def _body(self, g: onnx.GraphProto, key: str) -> SubModel:
        own = [i.name for i in g.input]
        names, embedded = _outer(self.model.proto, self.model.env_names, g.node, set(own) | {i.name for i in g.initializer})
        declared = {i.name: i for i in g.input}
        return self.model.sub_model(f"{self.label} {key}", g.node, own + names, [o.name for o in g.output],
                                    declared=declared, shapes=self.model.shapes,
                                    initializers=list(g.initializer) + embedded)

    def _outer_feeds(self, sub: SubModel, env, skip: int) -> dict:
        return {n: self._value(env, n) for n in sub.input_names[skip:]}

    def _run(self, env) -> list:
        return getattr(self, f"_run_{self.node.op_type.lower()}")(env)

    def _scalar(self, env, name: str, what: str):
        value = self._value(env, name)
        if value.size != 1:
            raise OnnxError(f"{self.label}: the {what} {name!r} has shape {value.shape}; it takes one element")
        return value.reshape(-1)[0]

    def _scalar_like(self, vi: onnx.ValueInfoProto, value, dtype) -> np.ndarray:
        """A Loop body's iteration number or condition, with the rank the body declares."""
        arr = np.array(value, dtype)
        tt = vi.type.tensor_type
        return arr.reshape((1,) * len(tt.shape.dim)) if tt.HasField("shape") and len(tt.shape.dim) else arr

    def _run_loop(self, env) -> list:
        node, body = self.node, self.subs["body"]
        graph = next(_subgraphs(node))
        trip = int(self._scalar(env, node.input[0], "trip count")) if node.input[0] else None
        has_cond = len(node.input) > 1 and node.input[1]
        go = bool(self._scalar(env, node.input[1], "condition")) if has_cond else True
        carried = [self._value(env, n) for n in node.input[2:]]
        k = len(carried)
        outer = self._outer_feeds(body, env, 2 + k)
        names = body.input_names
        scans: list[list] = []
        i = 0
        while go and (trip is None or i < trip):
            feeds = {names[0]: self._scalar_like(graph.input[0], i, np.int64),
                     names[1]: self._scalar_like(graph.input[1], go, np.bool_), **outer}
            feeds.update(zip(names[2:2 + k], carried))
            outs = body.bound(feeds)(feeds)  # the runtime bound once per signature (carried shapes may change)
            cond_out = np.asarray(outs[0])
            if cond_out.size != 1:
                raise OnnxError(f"{self.label}: the body's condition output has shape {cond_out.shape}; it takes one element")
            go = bool(cond_out.reshape(-1)[0])
            carried = list(outs[1:1 + k])
            scans.append(outs[1 + k:])
            i += 1
        stacked = [np.stack([s[j] for s in scans], 0) if scans else self._empty_scan(graph.output[1 + k + j])
                   for j in range(len(graph.output) - 1 - k)]
        return carried + stacked

    def _empty_scan(self, vi: onnx.ValueInfoProto) -> np.ndarray:
        """A scan output of a Loop that ran no iteration: empty along the new axis, when the body
        declares the per-iteration shape and type."""
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] if tt.HasField("shape") else None
        try:
            dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        except (KeyError, TypeError):
            dtype = None
        if dims is None or None in dims or dtype is None:
            raise OnnxError(f"{self.label} ran no iteration: its scan output {vi.name!r} has no shape the body "
                            "declares, so its empty value is undefined")
        return np.zeros((0, *dims), dtype)

    def _run_scan(self, env) -> list:
        node, body = self.node, self.subs["body"]
        m = int(self.attrs["num_scan_inputs"])
        n_state = len(node.input) - m
        states = [self._value(env, n) for n in node.input[:n_state]]
        xs = [self._value(env, n) for n in node.input[n_state:]]
        in_dirs = list(self.attrs.get("scan_input_directions") or [0] * m)
        in_axes = [a % x.ndim for a, x in zip(self.attrs.get("scan_input_axes") or [0] * m, xs)]
        lengths = {x.shape[a] for x, a in zip(xs, in_axes)}
        if len(lengths) != 1:
            raise OnnxError(f"{self.label}: scan inputs have different lengths {sorted(lengths)}")
        (n,) = lengths
        graph = next(_subgraphs(node))
        k = len(graph.output) - n_state
        if n == 0 and k:
            raise OnnxError(f"{self.label}: a Scan of length 0 has scan outputs of undefined shape")
        outer = self._outer_feeds(body, env, n_state + m)
        names = body.input_names
        steps = []
        for t in range(n):
            feeds = dict(zip(names, states), **outer)
            for j, (x, a, d) in enumerate(zip(xs, in_axes, in_dirs)):
                feeds[names[n_state + j]] = np.take(x, n - 1 - t if d else t, axis=a)
            outs = body.bound(feeds)(feeds)
            states = list(outs[:n_state])
            steps.append(outs[n_state:])
        out_dirs = list(self.attrs.get("scan_output_directions") or [0] * k)
        out_axes = list(self.attrs.get("scan_output_axes") or [0] * k)
        results = list(states)
        for j in range(k):
            parts = [s[j] for s in steps][::-1 if out_dirs[j] else 1]
            results.append(np.stack(parts, out_axes[j] % (parts[0].ndim + 1)))
        return results

    def _run_if(self, env) -> list:
        cond = self._scalar(env, self.node.input[0], "condition")
        branch = self.subs["then_branch" if bool(cond) else "else_branch"]
        return branch(self._outer_feeds(branch, env, 0))

    def sub_models(self) -> list[SubModel]:
        return list(self.subs.values())

    def describe(self) -> str:
        return f"{self.label} on the host ({self.reason})"


class Plan:
    """The steps of a staged model and what they share (see `StagedModel`)."""

    def __init__(self, proto, steps, *, options: dict, default_names, compile_fn, inferred: Inferred):
        self.proto, self.options, self.compile_fn = proto, options, compile_fn
        graph = proto.graph
        self.default_names = set(default_names)
        self.initializers = {i.name: i for i in graph.initializer}
        self.env_names = {vi.name for vi in graph.input if vi.name not in self.initializers}
        self.shapes = inferred.shapes
        self.steps = []
        self.host_reads: set[str] = set()  # what host nodes and their bodies read from the model
        outputs = {o.name for o in graph.output}
        string_values = strings.string_values(proto, strings.node_types(proto, inferred)) if any(
            s[0] == "host" and s[2] in strings.REASONS for s in steps) else set()
        for i, step in enumerate(steps):
            if step[0] == "graph":
                later = outputs | set(free_names([n for s in steps[i + 1:] for n in (s[1] if s[0] == "graph" else [s[1]])]))
                stage = Stage(self, i, step[1], later)
                self.env_names |= set(stage.outputs)
                self.steps.append(stage)
            elif step[2] in strings.REASONS and step[1].op_type not in ("Loop", "Scan", "If"):  # no host_reads:
                # it reads the run's values first (control flow on strings is a HostNode, its bodies staged)
                self.steps.append(strings.HostString(self, step[1], step[2], string_values))
                self.env_names |= {o for o in step[1].output if o}
            else:
                kind = staged_rnn.HostRecurrence if step[1].op_type in RECURRENT_OPS else HostNode
                host = kind(self, step[1], step[2])
                self.host_reads |= set(free_names([step[1]]))
                self.env_names |= {o for o in step[1].output if o}
                self.steps.append(host)

    def sub_model(self, name: str, nodes, inputs, outputs, **kw) -> SubModel:
        return SubModel(self.proto, name, nodes, inputs, outputs, options=self.options, compile_fn=self.compile_fn, **kw)

    def run(self, env: dict) -> None:
        fixed = sorted(n for n in self.default_names & self.host_reads if n in env)
        if fixed:  # a host node's body embeds the initializers it reads
            raise OnnxInputError(f"initializer(s) {fixed} are read inside control flow that runs on the host; "
                                 "this model cannot take them as inputs")
        for step in self.steps:
            step.run(env)

    def describe(self) -> list[str]:
        return [s.describe() for s in self.steps]


def enclosing(proto: onnx.ModelProto, key: str) -> str | None:
    """The first output of the main graph's Loop, Scan or If that is the If whose first output is
    `key`, or holds it in a subgraph (the node `plan` can host); None if there is none."""

    def holds(node) -> bool:
        return (node.op_type == "If" and node.output[:1] == [key]) or any(holds(n) for g in _subgraphs(node) for n in g.node)

    return next((n.output[0] for n in proto.graph.node if n.op_type in ("Loop", "Scan", "If") and n.output
                 and holds(n)), None)


def check_supported(proto: onnx.ModelProto) -> None:
    """Every op of the model (subgraphs included) is one luminal lowers: checked once, up front,
    so that a staged model fails at compile time as a whole one does, not at a later stage's
    first call."""
    Importer(proto).check_supported(proto.graph)


class StagedReport:
    """`report()` of a staged model: its steps, then the compile report of each graph built so far."""

    def __init__(self, name: str, steps: list[str], reports: list):
        self.name, self.steps, self.reports = name, steps, reports

    def __str__(self) -> str:
        lines = [f"luminal staged model: {self.name} (control flow on the host)"]
        lines += [f"  step {i}: {s}" for i, s in enumerate(self.steps)]
        return "\n".join(lines + [str(r) for r in self.reports])


def staged_model(proto, steps, inputs, outputs, notes, *, options: dict, defaults, base: type, compile_fn,
                 inferred: Inferred):
    """The model (a subclass of `base`, model.py's OnnxModel) of `proto` cut at host nodes (`plan`);
    `compile_fn` (luminal.onnx.compile) compiles its stages, bodies and branches."""

    class StagedModel(base):
        """A model run as compiled stages with Loop/Scan/If nodes on the host between them
        (`luminal.frontends.onnx.staged`); same interface as any `OnnxModel`."""

        def __init__(self):
            super().__init__(proto, inputs, outputs, notes, device=options["device"], optimize=options["optimize"],
                             defaults=defaults)
            self.plan = Plan(proto, steps, options=options, default_names=[d.name for d in defaults],
                             compile_fn=compile_fn, inferred=inferred)

        def report(self):
            subs = [s.sub_models() for s in self.plan.steps]
            return StagedReport(proto.graph.name or "onnx", self.plan.describe(),
                                [r for group in subs for sub in group for r in sub.reports()])

        def __call__(self, *args, **kwargs) -> list[np.ndarray]:
            env = dict(self._feeds(args, kwargs))
            self.plan.run(env)
            results = []
            for o in self.outputs:
                value = env[o.name] if o.name in env else initializer_array(self.plan.initializers[o.name])
                if value is None or isinstance(value, list):  # a sequence, or an empty optional
                    results.append(value)
                    continue
                value = np.asarray(value)
                results.append(value.astype(o.dtype, copy=False) if o.dtype is not None else value)
            return results

        run = __call__

    return StagedModel()
