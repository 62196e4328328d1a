"""`compile()` and the compiled model: NumPy in, NumPy out, symbolic dims bound per call."""

from __future__ import annotations

import collections
import hashlib
import threading

import numpy as np
import onnx

from luminal import devices
from luminal.compiler import Report, compile_outputs
from luminal.errors import InputError, LuminalError
from luminal.frontends.onnx import boundary, first_shape, labels, loader, map_inputs, scan_map, staged, zipmap
from luminal.frontends.onnx.errors import (
    IfNotConvertible,
    NeedsShape,
    NeedsValue,
    OnnxError,
    OnnxInputError,
)
from luminal.frontends.onnx.importer import Importer, graph_input_deps, input_dim_name
from luminal.frontends.onnx.inferred import Inferred
from luminal.frontends.onnx.ops_rnn import TooManySteps
from luminal.frontends.onnx.values import IOInfo, gather_feeds
from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Op, toposort

# calls of one signature that try to bind it (`_arm`): the C still building refuses for a call or
# two; past this, the graph binds none (a ragged output, say) and the call takes the full path
ARM_TRIES = 3
COMPILED_KEPT = 32  # graphs compiled per distinct input value/shape kept by one model (least recently used dropped)
RECURRENCES = ("auto", "unroll", "host")  # luminal.onnx.compile's recurrence policies
SHAPES_NOTED = 8  # distinct shapes a model's notes list per recurrence form


def _spec(info: IOInfo) -> tuple:
    """(name, dtype, rank, [(axis, size) of its static dims], info): an input's checks, once."""
    return info.name, info.dtype, len(info.shape), [(a, d) for a, d in enumerate(info.shape) if isinstance(d, int)], info


def _np_dtype(elem_type: int) -> np.dtype | None:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError):
        return None  # undeclared: whatever the graph computes


class OnnxModel:
    """A compiled ONNX model. `model(x, y)`, `model({"x": x})` or `model(x=x)` -> list of arrays.

    When a node needs a graph input's *value* at compile time (a Reshape whose target shape is
    an input, say), the model is specialized on those inputs: it compiles once per distinct
    value of them, at the first call that brings it, and caches the result.

    An initializer that is also listed as a graph input is a default (ONNX semantics): `defaults`
    lists them; the caller may override one by name (`model(x, w=new_w)`), and the model is
    then compiled with that value in its place, once per distinct value.

    `host_form` (recurrence="auto", a recurrence over a symbolic length): builds the model with
    its recurrences stepped on the host. The first distinct shape compiles unrolled (the fastest
    per call); the second, or one the unroll refuses (past `ops_rnn.MAX_STEPS`, or out of memory),
    builds the host form once, and it serves every later new shape. A shape compiled unrolled
    stays unrolled (never evicted): one input always gets the same graph, so the same numbers.
    """

    def __init__(self, proto, inputs: list[IOInfo], outputs: list[IOInfo], notes: list[str], *,
                 device: devices.Device, optimize, compiled=None, value_inputs=(), shape_inputs=(), defaults=(),
                 host_form=None, specialize: bool = False, search: float | None = None):
        self.proto = proto
        self.inputs = inputs
        self.defaults = list(defaults)  # overridable initializers (IOInfo)
        self.outputs = outputs
        self.notes = notes
        self.device, self.optimize = device, optimize
        self.value_inputs = tuple(value_inputs)  # inputs compiled in by value
        self.shape_inputs = tuple(shape_inputs)  # inputs whose shapes are compiled in (static dims)
        self.compiled = compiled
        self._cache: collections.OrderedDict = collections.OrderedDict()  # LRU, at most COMPILED_KEPT graphs
        # (input, axis) of every dynamic dim: a call with one of them 0 compiles statically
        self._dynamic_axes = [(i.name, axis) for i in inputs for axis, d in enumerate(i.shape) if not isinstance(d, int)]
        self._specs = [_spec(i) for i in inputs]  # what checking a call's arrays needs, worked out once
        self._bound: _Bound | None = None  # the fast call of one signature (`_arm`)
        self._last_sig = None  # the input dtypes and shapes of the last call that could arm it
        self._arm_tries = 0  # calls of `_last_sig` that tried to bind it (`_arm`)
        self._casts: tuple = (None,)  # (the graph last called, [(input, dtype)] it takes, the outputs' dtypes, its
        # boundary layout): `__call__`
        self._host_form = host_form  # callable -> the host-stepped model (None: no such form, or it failed)
        self._host = None  # that model, once built
        self._unrolled: dict = {}  # key -> graph compiled unrolled under "auto" (kept: see the docstring)
        self._host_shapes: list[str] = []  # the first SHAPES_NOTED shapes the host form served
        self._lock = threading.Lock()  # the caches
        self._build_lock = threading.Lock()  # one compile at a time: a second caller of a new key waits for it
        self._search = search  # the search budget the graphs compiled at calls get too
        # one symbolic graph for every shape: the first call's shapes compile static (`first_shape.py`)
        plain = compiled is not None and not value_inputs and not shape_inputs
        self._first = (first_shape.FirstShape(self._build_static) if specialize and plain and self._dynamic_axes
                       and first_shape.reads_windows(compiled.outputs) else None)

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    def report(self):
        if self._host is not None:  # recurrence="auto" after a second shape: both forms
            reports = [g.report() for g in self._unrolled.values()] + [self._host.report()]
            return RecurrenceReport(self.proto.graph.name or "onnx", self._forms(), reports)
        if self.compiled is None:
            raise OnnxInputError(f"this model compiles per value of {list(self.value_inputs)} and per shape of "
                                 f"{list(self.shape_inputs)}; call it first")
        if self._first is not None:
            return self._first.report(self.compiled)
        return self.compiled.report()

    def _forms(self) -> list[str]:
        """Which form served which shapes (recurrence="auto")."""
        unrolled = "; ".join(_fmt_key(k) for k in self._unrolled) or "none"
        shown = list(self._host_shapes)
        more = ", ..." if len(shown) >= SHAPES_NOTED else ""
        return [f"unrolled (a graph per shape): {unrolled}",
                f"stepped on the host (one build for every other shape): {'; '.join(shown) or 'none yet'}{more}"]

    def __repr__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.outputs))
        return f"<luminal.onnx model ({ins}) -> ({outs})>"

    def _feeds(self, args, kwargs) -> dict:
        feeds = gather_feeds(self.input_names, args, kwargs)
        specs = self._specs
        if self.defaults or len(feeds) != len(specs) or any(spec[0] not in feeds for spec in specs):
            names, default_names = self.input_names, self._default_names  # (lists built per access)
            unknown = [k for k in feeds if k not in names and k not in default_names]
            if unknown:
                extra = f" (and defaults that may be overridden: {default_names})" if self.defaults else ""
                raise OnnxInputError(f"unknown input name(s) {unknown}; the model's inputs are {names}{extra}")
            missing = [n for n in names if n not in feeds]
            if missing:
                raise OnnxInputError(f"missing input(s) {missing}; the model's inputs are {names}")
            specs = specs + [_spec(d) for d in self.defaults if d.name in feeds]
        arrays = {}
        for name, dtype, ndim, static, info in specs:
            arr = feeds[name]
            if type(arr) is not np.ndarray:
                arr = np.asarray(arr)
            if dtype is not None and dtype.kind == "O" and arr.dtype.kind in "US":  # str / bytes for strings, as ort
                arr = arr.astype(object)
            if dtype is not None and arr.dtype != dtype:
                raise OnnxInputError(f"input {name!r} has dtype {arr.dtype}, the model declares {dtype}")
            shape = arr.shape
            if len(shape) != ndim:
                raise OnnxInputError(
                    f"input {name!r} has shape {shape} ({len(shape)} dims), the model declares {_fmt(info.shape)}"
                )
            for axis, want in static:
                if shape[axis] != want:
                    raise OnnxInputError(
                        f"input {name!r} has shape {shape}, the model declares {_fmt(info.shape)} (dim {axis} must be {want})"
                    )
            arrays[name] = arr
        return arrays

    @property
    def _default_names(self) -> list[str]:
        return [d.name for d in self.defaults]

    def __call__(self, *args, **kwargs) -> list[np.ndarray]:
        bound = self._bound
        if bound is not None and not kwargs:  # the arrays of the signature last called twice running
            results = bound(args)
            if results is not None:
                return results
        arrays = self._feeds(args, kwargs)
        overrides = {n: arrays.pop(n) for n in self._default_names if n in arrays} if self.defaults else {}
        compiled = self.compiled
        zero_dim = bool(self._dynamic_axes) and any(arrays[name].shape[axis] == 0 for name, axis in self._dynamic_axes)
        if self.value_inputs or self.shape_inputs or zero_dim or overrides:
            compiled = self._compiled_for(arrays, zero_dim, overrides)
            if isinstance(compiled, OnnxModel):  # the host-stepped form (recurrence="auto")
                return compiled(arrays)
            if not overrides and not zero_dim:  # a graph static for a size-0 call would reject the next, dynamic one
                self.compiled = compiled
        elif self._first is not None:
            compiled = self.graph_for(arrays)
        self._check_assumptions(compiled, arrays)
        casts = self._casts  # one read: another thread may store its own graph's meanwhile
        if casts[0] is not compiled:
            casts = self._casts = (compiled, [(n.arg, n.dtype.numpy) for n in compiled.inputs],
                                   [o.dtype for o in self.outputs], getattr(compiled, "boundary_layout", None))
        feeds = {}
        for name, dtype in casts[1]:
            arr = arrays[name]
            feeds[name] = arr if arr.dtype == dtype else arr.astype(dtype)
        results = _running(compiled, feeds)
        if not (self.value_inputs or zero_dim or overrides):
            # (compiled per shape: a signature's shapes decide its graph, so it binds as well)
            self._arm(compiled, arrays, feeds, results, casts)
        if compiled.ragged:
            results = list(results)
            for i, axis, j in compiled.ragged:  # data-dependent lengths: cut the padding
                results[i] = results[i][(slice(None),) * axis + (slice(0, int(results[j])),)]
        if casts[3] is not None:  # sequences as lists, empty optionals as None
            return boundary.regroup(list(results), casts[3])
        return [r if dtype is None or r.dtype == dtype else r.astype(dtype, copy=False)
                for r, dtype in zip(results, casts[2])]

    run = __call__

    def _arm(self, compiled, arrays: dict, feeds: dict, results: list, casts: tuple) -> None:
        """After a plain call (one graph for every value, or one per shape; no overrides): the second
        call running with the same input dtypes and shapes binds the graph's C for them (`_Bound`), when its
        inputs went in uncast and its outputs come out as they are."""
        names = self.input_names
        sig = tuple((arrays[n].dtype, arrays[n].shape) for n in names)
        if sig != self._last_sig:
            self._last_sig, self._arm_tries = sig, 0
            return
        if self._arm_tries >= ARM_TRIES:  # this signature's graph binds none: not asked again at every call
            return
        self._arm_tries += 1
        if (compiled.ragged or casts[3] is not None or any(feeds[k] is not arrays[k] for k in feeds)
                or any(dt.kind == "O" for dt, _ in sig)
                or any(dt is not None and r.dtype != dt for r, dt in zip(results, casts[2]))):
            return
        got = compiled.bound_call(feeds)
        if got is not None:
            order, call = got
            self._bound = _Bound(names, sig, [names.index(k) for k in order], call)

    def _check_assumptions(self, compiled, arrays):
        if not compiled.assumptions:
            return
        bindings = {}
        for info in self.inputs:
            for d, n in zip(info.shape, arrays[info.name].shape):
                if isinstance(d, str) and d.isidentifier():
                    bindings[d] = n
        for a, b in compiled.assumptions:
            try:
                va, vb = sym.evaluate(a, bindings), sym.evaluate(b, bindings)
            except LuminalError:
                continue
            if va > vb:
                raise OnnxInputError(
                    f"input shapes {({k: v for k, v in bindings.items()})} break what the model needs: {a} <= {b} "
                    f"(here {va} > {vb}), e.g. a sequence longer than a table the model slices"
                )

    def _compiled_for(self, arrays, zero_dim: bool, overrides: dict):
        """The graph for this call's values and shapes (compiled at the first call that brings
        them), or the host-stepped model that serves them (recurrence="auto")."""
        # a dynamic dim of size 0 breaks the symbols' assumption (>= 1): compile this call's shapes statically
        key = self._key(arrays, self.input_names if zero_dim else self.shape_inputs), _value_key(overrides)
        compiled = self._lookup(key)
        if compiled is not None:
            return compiled
        # overridden weights and size-0 calls compile per key as before: the host form embeds the
        # weights its cells read, and a static size-0 graph is cheap
        auto = not zero_dim and not overrides
        host = self._host
        if auto and host is not None:
            self._note_host(key)
            return host
        with self._build_lock:
            compiled = self._lookup(key)  # another thread may have compiled it meanwhile
            if compiled is not None:
                return compiled
            auto = auto and self._host_form is not None
            if auto and (self._host is not None or self._unrolled):
                host = self._host_model(key, "a second distinct shape")
                if host is not None:
                    return host
                auto = False
            try:
                compiled = self._build_retrying(arrays, zero_dim, overrides)
            except (TooManySteps, MemoryError) as exc:
                host = self._host_model(key, f"the unroll failed ({type(exc).__name__}: {exc})") if auto else None
                if host is None:
                    raise
                return host
            # the build may have added inputs to value_inputs/shape_inputs: stored under the key
            # the next call computes (under the old one, the next call compiled it again)
            key = self._key(arrays, self.input_names if zero_dim else self.shape_inputs), key[1]
            with self._lock:
                if auto:
                    self._unrolled[key] = compiled
                    self.notes.append(f"recurrence='auto': {_fmt_key(key)} compiled unrolled")
                else:
                    self._cache[key] = compiled
                    while len(self._cache) > COMPILED_KEPT:  # each holds its own optimized graph and runtime
                        self._cache.popitem(last=False)
            return compiled

    def graph_for(self, arrays: dict):
        """The graph a plain call (no overrides, no size-0 dim) of these arrays runs, of a model
        compiled once for every value (no `value_inputs` or `shape_inputs`). The symbolic graph's
        assumptions hold for the shapes the static one is built for (OnnxInputError otherwise)."""
        if self._first is None:
            return self.compiled
        self._check_assumptions(self.compiled, arrays)
        return self._first.graph_for(self, arrays) or self.compiled

    def _build_static(self, arrays: dict):
        """The graph compiled with every input's shape static, as `arrays` have them."""
        shapes = {n: arrays[n].shape for n in self.input_names}
        return _build(self.proto, {}, self.device, self.optimize, shapes, notes=self.notes, search=self._search)[0]

    def _lookup(self, key):
        with self._lock:
            compiled = self._unrolled.get(key)
            if compiled is None:
                compiled = self._cache.get(key)
                if compiled is not None:
                    self._cache.move_to_end(key)
            return compiled

    def _host_model(self, key, why: str):
        """The host-stepped form, built at its first need (under the build lock); None, noted,
        when it cannot be built (the model then unrolls every length, as recurrence="unroll")."""
        if self._host is None:
            try:
                host = self._host_form()
            except OnnxError as exc:
                self._host_form = None
                self.notes.append(f"recurrence='auto': the host-stepped form failed ({exc}); every shape compiles unrolled")
                return None
            self.notes.append(f"recurrence='auto': {why} at {_fmt_key(key)}: the recurrence is stepped on the host "
                              "for this and every later new shape (one build)")
            self._host = host
        self._note_host(key)
        return self._host

    def _note_host(self, key) -> None:
        if len(self._host_shapes) < SHAPES_NOTED:
            shown = _fmt_key(key)
            with self._lock:
                if shown not in self._host_shapes and len(self._host_shapes) < SHAPES_NOTED:
                    self._host_shapes.append(shown)

    def _key(self, arrays, shape_names) -> tuple:
        values = tuple((n, arrays[n].dtype.str, arrays[n].shape, arrays[n].tobytes()) for n in self.value_inputs)
        return values, tuple((n, arrays[n].shape) for n in shape_names)

    def _build_retrying(self, arrays, all_static: bool, overrides: dict):
        """Compile for this call's values of `value_inputs` and shapes of `shape_inputs`; a node
        that needs yet another input's value or shape adds it to the sets and retries."""
        while True:
            shape_names = self.input_names if all_static else self.shape_inputs
            try:
                compiled, *_ = _build(self.proto, {**{n: arrays[n] for n in self.value_inputs}, **overrides}, self.device,
                                      self.optimize, {n: arrays[n].shape for n in shape_names})
                return compiled
            except NeedsValue as exc:
                values, shapes = _deps(self.proto.graph, exc)
                values, shapes = values - set(self.value_inputs), shapes - set(shape_names)
                if not values and not shapes:
                    raise
                self.value_inputs = tuple(sorted(set(self.value_inputs) | values))
                self.shape_inputs = tuple(sorted(set(self.shape_inputs) | shapes))


def _running(compiled, feeds):
    """`compiled(feeds)`, its failures as ONNX errors."""
    try:
        return compiled(feeds)
    except InputError as exc:
        raise OnnxInputError(str(exc)) from None
    except LuminalError:
        raise
    except Exception as exc:  # noqa: BLE001 - report, never crash
        raise OnnxError(f"running the model failed: {type(exc).__name__}: {exc}") from exc


class _Bound:
    """An `OnnxModel` call for one signature (each input's dtype and shape): a dict of exactly the
    inputs, or the inputs in order, each a C-contiguous NumPy array of that signature, goes straight
    to the graph's C bound for it (`CompiledGraph.bound_call`: no checks, binding or layout per
    call); anything else returns None, and the full path takes it (its checks, casts and errors).
    For a model of a few microseconds a call, those were most of the call (README, "ONNX")."""

    __slots__ = ("names", "sig", "pick", "call")

    def __init__(self, names: list[str], sig: tuple, pick: list[int], call):
        self.names, self.sig, self.pick, self.call = names, sig, pick, call

    def __call__(self, args: tuple) -> list | None:
        names = self.names
        if len(args) == 1 and type(args[0]) is dict:
            feeds = args[0]
            if len(feeds) != len(names):
                return None
            try:
                arrays = [feeds[n] for n in names]
            except KeyError:
                return None
        elif len(args) == len(names):
            arrays = args
        else:
            return None
        for a, (dtype, shape) in zip(arrays, self.sig):
            if type(a) is not np.ndarray or a.dtype != dtype or a.shape != shape or not a.flags.c_contiguous:
                return None
        return _running(self.call, [arrays[i] for i in self.pick])


def _deps(graph, exc: NeedsValue) -> tuple[set[str], set[str]]:
    """The graph inputs to compile in by value, and by shape, for what `exc` needs."""
    values, shapes = graph_input_deps(graph, exc.value_name)
    if isinstance(exc, NeedsShape):
        return set(), values | shapes
    return values, shapes


def _value_key(arrays: dict) -> tuple:
    """A cache key for the values of `arrays` (name -> array): dtype, shape and a digest of the bytes."""
    return tuple((n, a.dtype.str, a.shape, hashlib.sha256(np.ascontiguousarray(a).view(np.uint8)).hexdigest())
                 for n, a in sorted(arrays.items()))


def _fmt(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _fmt_key(key) -> str:
    """A compile key as its shapes ("x (7, 2, 3)") and the names of the values compiled in."""
    (values, shapes), _ = key
    parts = [f"{n} {_fmt(s)}" for n, s in shapes] + [f"{n} (by value)" for n, *_ in values]
    return ", ".join(parts) or "no shapes"


class RecurrenceReport:
    """`report()` of a recurrence="auto" model that runs both forms: which served which shapes,
    then the compile reports (the unrolled graphs', the host-stepped model's)."""

    def __init__(self, name: str, forms: list[str], reports: list):
        self.name, self.forms, self.reports = name, forms, reports

    def __str__(self) -> str:
        lines = [f"luminal model: {self.name} (recurrence='auto')"] + [f"  {f}" for f in self.forms]
        return "\n".join(lines + [str(r) for r in self.reports])


def _declared_shape(vi) -> tuple:
    """The declared shape, dynamic dims named as the importer names their symbols."""
    dims = vi.type.tensor_type.shape.dim
    return tuple(
        d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else input_dim_name(vi.name, axis, d.dim_param)
        for axis, d in enumerate(dims)
    )


def _declared_infos(value_infos) -> list[IOInfo]:
    """IOInfo of graph inputs or outputs as the model declares them (before a build says more)."""
    return [IOInfo(vi.name, _np_dtype(vi.type.tensor_type.elem_type), _declared_shape(vi)) for vi in value_infos]


def _build(proto, specialize, device, optimize, shapes=None, notes=(), search=None):
    """Import and compile `proto` with the inputs in `specialize` compiled in by value; `notes`
    go to its compile report; `search`: `compile_outputs`'s."""
    name = proto.graph.name or "onnx"
    importer = Importer(proto, name, specialize, shapes)
    inputs, outputs = importer.import_graph()
    # a sequence output is returned as its elements (regrouped per call), an empty optional not at all
    flat, out_names, layout = boundary.flatten(importer, outputs, {vi.name: vi.type for vi in proto.graph.output})
    first = boundary.positions(layout) if layout else range(len(outputs))
    out_tensors = [flat[first[i]] if not layout or layout[i][0] == "tensor" else None for i in range(len(outputs))]
    hlir_inputs = [importer.g.inputs[n] for n, _, _ in inputs if n in importer.g.inputs]
    ragged = [(first[i], o) for i, (o, _, _) in enumerate(outputs) if o in importer.ragged]  # padded; lengths appended
    lengths = [importer.ragged[o][1].node for _, o in ragged]
    _shape_only_inputs_compile_per_shape(hlir_inputs, [t.node for t in flat] + lengths)
    compiled = compile_outputs(
        hlir_inputs, [t.node for t in flat] + lengths, out_names + [f"{o}:length" for _, o in ragged],
        device=device, optimize=optimize, name=name, report=Report(name=name, notes=list(notes)),
        assumptions=importer.assumptions,
        ragged=[(i, importer.ragged[o][0], len(flat) + k) for k, (i, o) in enumerate(ragged)], search=search,
    )
    compiled.boundary_layout = layout  # None: every output a tensor
    compiled.pack_weights()  # the initializers are the importer's copies: never changed, packed once
    return compiled, inputs, outputs, out_tensors  # out_tensors: None for a sequence or an empty optional


def _shape_only_inputs_compile_per_shape(hlir_inputs, outputs) -> None:
    """An input the outputs read only through its shape (Shape -> ...) drops out of the compiled
    graph, and with it the binding of its symbolic dims: such an input compiles per shape."""
    reached = {id(n) for n in toposort(outputs) if n.op is Op.INPUT}

    def dims(node):
        return {str(s) for d in node.shape for s in getattr(d, "free_symbols", ())}

    bound = set().union(*(dims(n) for n in hlir_inputs if id(n) in reached))
    for n in hlir_inputs:
        if id(n) not in reached and dims(n) - bound:
            raise NeedsShape(f"input {n.arg!r} is read only through its shape", n.arg)


def compile(model, *, device: str | devices.Device = "cpu", optimize: bool | None = None,  # noqa: A001
            check: bool = True, recurrence: str = "auto", precision: str | None = None,
            options: dict | None = None) -> OnnxModel:
    """Compile an ONNX model (a path, bytes or `onnx.ModelProto`) for `device` (a `luminal.devices`
    entry: an unknown one, or one this machine cannot run, raises DeviceError before any work).
    `precision` ("float64" or "float32"): the model's, fixed (OptionError for another value); None:
    `luminal.set_precision`'s at each call, else the device's default (`luminal.precision`).

    `recurrence`: how RNN/GRU/LSTM over a symbolic sequence length run, as torch.compile's
    automatic dynamic shapes do. "auto" (the default): the first distinct length compiles
    unrolled (the fastest per call: the input projection is one GEMM over all steps); a second
    distinct length, or one past `ops_rnn.MAX_STEPS`, builds the host-stepped form once, and it
    serves every later new length (a length compiled unrolled stays so). "unroll": every
    distinct length compiles unrolled (up to COMPILED_KEPT kept; past MAX_STEPS it raises
    `TooManySteps`). "host": the cell is stepped on the host, compiled once for every length
    (each step a call of the compiled cell). Loop, Scan and If that run-time data decides always
    run on the host (`staged.py`).

    `options`: {"search": seconds} measures the device's variants within that budget and keeps
    the fastest that matches the reference (`luminal.search`; the graph compiled whole, not the
    staged models of host control flow)."""
    from luminal.search import options as search_options

    specialize, rest = first_shape.option(options)
    search = search_options(rest, "luminal.onnx.compile", more=(first_shape.OPTION,))
    device = devices.resolve(device, precision)  # the Device, at this precision, below here
    specialize = specialize and device.runs_compiled_code
    if recurrence not in RECURRENCES:
        raise OnnxError(f"recurrence={recurrence!r}: it is one of {', '.join(map(repr, RECURRENCES))}")
    proto, _ = loader.load_model(model, check=check)
    proto, note = loader.upgrade(proto)
    proto = labels.rewrite(proto)  # string class labels: the class index compiled, the strings picked on the host
    proto = scan_map.rewrite(proto)  # a Scan mapping rows against a fixed matrix (k-NN's distances): one broadcast block
    proto, maps = zipmap.split(proto)
    if maps:  # sequences of maps are made on the host from the compiled probabilities
        inner = compile(proto, device=device, optimize=optimize, check=False, recurrence=recurrence, options=options)
        return zipmap.MapModel(inner, maps)
    tensors, steps = map_inputs.split(proto)
    if steps:  # map inputs (dicts) run through their DictVectorizer / CastMap on the host
        inner = compile(tensors, device=device, optimize=optimize, check=False, recurrence=recurrence,
                        options=options)
        return map_inputs.MapInputModel(inner, steps, proto)
    notes = [note] if note else []
    graph = proto.graph
    boundary.check_types(graph)
    if boundary.structured_inputs(proto):  # sequence / optional inputs: a model per their signature
        return boundary.StructuredModel(proto, lambda p: compile(p, device=device, optimize=optimize, check=False,
                                                                 recurrence=recurrence), notes)
    inits = {i.name: i for i in graph.initializer}
    declared = [vi for vi in graph.input if vi.name not in inits]
    defaults = [IOInfo(vi.name, _np_dtype(inits[vi.name].data_type),
                       _declared_shape(vi) if vi.type.tensor_type.HasField("shape") else tuple(inits[vi.name].dims))
                for vi in graph.input if vi.name in inits]
    value_inputs: set[str] = set()
    shape_inputs: set[str] = set()
    forced: set[str] = set()  # nodes holding an If on run-time data that did not if-convert: on the host
    inferred = Inferred(proto)  # onnx's shape inference, run once if a decision needs it
    while True:
        steps = staged.plan(proto, recurrence, forced, inferred)
        if steps is not None:  # Loop/Scan/If that run-time data decides: compiled stages, control flow on the host
            staged.check_supported(proto)
            in_infos, out_infos = _declared_infos(declared), _declared_infos(graph.output)
            notes += [f"on the host: {s[1].op_type} node {s[1].name or '<unnamed>'!r}, {s[2]}" for s in steps if s[0] == "host"]
            return staged.staged_model(proto, steps, in_infos, out_infos, notes, defaults=defaults, base=OnnxModel,
                                       compile_fn=compile, inferred=inferred,
                                       options={"device": device, "optimize": optimize, "recurrence": recurrence})
        try:
            compiled, inputs, outputs, out_tensors = _build(proto, {}, device, optimize, notes=notes, search=search)
        except NeedsValue as exc:
            host = staged.enclosing(proto, exc.node_key) if isinstance(exc, IfNotConvertible) else None
            if host is not None and host not in forced:
                forced.add(host)
                continue
            value_inputs, shape_inputs = _deps(graph, exc)
            if not value_inputs and not shape_inputs:
                raise
            compiled = None
        break
    if compiled is not None:
        in_infos = [
            IOInfo(n, _np_dtype(t), tuple(d if isinstance(d, int) else str(sym.parse(d)) for d in shape))
            for n, t, shape in inputs
        ]
        out_infos = []
        ragged = {i: axis for i, axis, _ in compiled.ragged}
        layout = compiled.boundary_layout
        first = boundary.positions(layout) if layout else range(len(outputs))
        for i, ((out_name, _, elem), t) in enumerate(zip(outputs, out_tensors)):
            if t is None:  # a sequence, or an empty optional
                out_infos.append(IOInfo(out_name, *boundary.info(out_name, layout[i])))
                continue
            dtype = _np_dtype(elem) if elem else t.dtype.numpy
            shape = [d if sym.is_static(d) else str(d) for d in t.shape]
            if first[i] in ragged:  # a data-dependent length: at most the padded bound
                shape[ragged[first[i]]] = f"<={shape[ragged[first[i]]]}"
            out_infos.append(IOInfo(out_name, dtype, tuple(shape)))
    else:
        in_infos, out_infos = _declared_infos(declared), _declared_infos(graph.output)
        notes.append(f"compiled per value of input(s) {sorted(value_inputs)} and per shape of {sorted(shape_inputs)}: "
                     "nodes need them at compile time")
    host_form = None
    if compiled is None and recurrence == "auto" and _steps_recurrence(proto, forced, inferred):
        def host_form():
            return compile(proto, device=device, optimize=optimize, check=False, recurrence="host")
    return OnnxModel(proto, in_infos, out_infos, notes, device=device, optimize=optimize, compiled=compiled,
                     value_inputs=sorted(value_inputs), shape_inputs=sorted(shape_inputs), defaults=defaults,
                     host_form=host_form, specialize=specialize, search=search)


def _steps_recurrence(proto, forced, inferred) -> bool:
    """Whether recurrence="host" would step a recurrence of `proto` on the host."""
    steps = staged.plan(proto, "host", forced, inferred)
    return any(s[0] == "host" and s[1].op_type in staged.RECURRENT_OPS for s in steps or ())
