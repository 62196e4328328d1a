"""Walking an ONNX graph into an HLIR graph.

Every ONNX value name maps to a `Value`: a luminal `Tensor`, a value `Known` at compile time,
or a sequence (a Python list of Values). Initializers, `Constant`s and everything computed
from them only are known; `Shape` of a tensor is known too, as an `object` array whose
entries are ints or sympy dims ("seq", "seq + 1"). Nodes whose inputs are all known are
evaluated here: concretely by running the op's HLIR on the NumPy runtime (so folding uses the
very same semantics), symbolically by `shape_eval` for the shape arithmetic of exported
models (Shape -> Gather -> Concat -> Reshape). Consumers that need a value at compile time
(Reshape's shape, Slice's starts, ...) receive it; one that depends on run-time data is an
`OnnxImportError` naming the node.
"""

from __future__ import annotations

import functools
import keyword
import re

import numpy as np
import onnx
import sympy
from onnx import numpy_helper

from luminal.builder import Graph, Tensor
from luminal.builder import functional as F
from luminal.errors import LuminalError, ShapeError
from luminal.frontends.onnx import registry
from luminal.frontends.onnx.errors import (
    IfNotConvertible,
    InvalidModelError,
    NeedsShape,
    NeedsValue,
    OnnxError,
    OnnxImportError,
    UnsupportedOpsError,
)
from luminal.frontends.onnx.inferred import Inferred
from luminal.frontends.onnx.shape_eval import evaluate as evaluate_symbolic
from luminal.frontends.onnx.values import Known, Seq, Value, hlir_dtype
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Op
from luminal.runtime import NumpyRuntime

# A node whose inputs are all known is evaluated at import (folded), as onnxruntime folds constant
# subgraphs: weights a model computes (ConstantOfShape, DequantizeLinear of an initializer, a
# transposed or cast weight) then take the paths stored weights take. A result that is a
# broadcast (ConstantOfShape, Expand) is kept as its small source and a stride-0 view, so a
# 4096 x 4096 mask costs no memory; dense results are folded up to FOLD_LIMIT elements.
FOLD_LIMIT = 1 << 26
NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


def materialize(g: Graph, known: Known) -> Tensor:
    arr = known.array
    if not known.symbolic:
        if arr.ndim == 0:
            return g.scalar(arr.item(), known.dtype)
        if _is_broadcast(arr):  # a folded ConstantOfShape / Expand: its source, broadcast as before
            src, shape = _compact(arr)
            base = g.scalar(src.item(), known.dtype).reshape((1,) * len(shape)) if src.size == 1 else g.constant(src, known.dtype)
            return base.expand(shape)
        return g.constant(arr, known.dtype)
    items = [g.scalar(sym.norm(v) if not isinstance(v, (int, np.integer)) else int(v), known.dtype) for v in arr.reshape(-1)]
    if arr.ndim == 0:
        return items[0]
    if not items:
        return g.constant(np.zeros(arr.shape, known.dtype.numpy))
    return F.stack(items, 0).reshape(arr.shape)


class NodeContext:
    """What an op function may ask about the node it lowers."""

    def __init__(self, importer: Importer, node: onnx.NodeProto, opset: int):
        self.importer, self.node, self.opset = importer, node, opset
        self.g = importer.g
        self.n_outputs = len(node.output)
        self.outputs_wanted = [bool(n) for n in node.output]

    @property
    def name(self) -> str:
        return self.node.name or f"<{self.node.op_type} #{self.importer.node_index}>"

    def fail(self, msg: str):
        raise OnnxImportError(f"{self.node.op_type} node {self.name!r}: {msg}")

    def dtype(self, elem_type: int) -> DType:
        return hlir_dtype(elem_type, f"{self.node.op_type} node {self.name!r}: ")

    def dense(self, i: int, t):
        """Input `i` as a weight: when it is known and a broadcast (a ConstantOfShape weight), a
        dense constant, as an initializer would be, so GEMMs and convolutions take their weight
        paths; `t` (the input as given) otherwise."""
        arr = self.known(i)
        if arr is None or arr.dtype == object or not _is_broadcast(arr):
            return t
        return self.g.constant(np.ascontiguousarray(arr), t.dtype)

    def known(self, i: int):
        """The compile-time value of input `i` (a NumPy array), or None if it is not known."""
        if i >= len(self.node.input) or not self.node.input[i]:
            return None
        v = self.importer.values[self.node.input[i]]
        return None if v.known is None else v.known.array

    def elem_type(self, i: int) -> int | None:
        """The declared ONNX element type of input `i` (graph inputs, initializers, value_info)."""
        if i >= len(self.node.input) or not self.node.input[i]:
            return None
        return self.importer.elem_types.get(self.node.input[i])

    def subgraph(self, graph: onnx.GraphProto, feeds: dict[str, Value]) -> list[Value]:
        return self.importer.run_subgraph(graph, feeds)


def attr_value(attr: onnx.AttributeProto):
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, onnx.TensorProto):
        return initializer_array(value)
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8") for v in value]
    return value


_SANE = re.compile(r"[^0-9A-Za-z_]")


def dim_symbol_name(name: str) -> str:
    clean = _SANE.sub("_", name)
    ok = clean and not clean[0].isdigit() and not keyword.iskeyword(clean) and clean not in sym.FUNCS
    return clean if ok else f"d_{clean}"


def input_dim_name(input_name: str, axis: int, dim_param: str) -> str:
    """The symbol of a dynamic input dim: its dim_param, or (unnamed, or a name with no letter
    or digit such as "?") one of its own, `<input>_dim<axis>`."""
    if dim_param and re.search(r"[0-9A-Za-z]", dim_param):
        return dim_symbol_name(dim_param)
    return dim_symbol_name(f"{input_name}_dim{axis}")


def positive_dim(name: str):
    """The symbol of a dynamic dim: a positive integer, so that min(1, seq) folds to 1 and the
    shape arithmetic of exported models stays simple. A call that binds one to 0 is compiled
    with static shapes instead (see OnnxModel)."""
    return sympy.Symbol(name, integer=True, positive=True)


class Importer:
    def __init__(self, proto: onnx.ModelProto, name: str = "onnx", specialize: dict | None = None,
                 shapes: dict | None = None):
        self.proto = proto
        self.specialize = specialize or {}  # graph inputs whose values are compiled in
        self.shapes = shapes or {}  # graph inputs whose shapes are compiled in (static)
        self.g = Graph(name)
        self.opsets = {("" if imp.domain == "ai.onnx" else imp.domain): imp.version for imp in proto.opset_import}
        self.values: dict[str, Value] = {}
        self.node_index = 0
        self.inputs: list[tuple[str, int, tuple]] = []  # (name, onnx elem type, shape spec)
        self.functions = {(f.domain, f.name): f for f in proto.functions}
        self.assumptions: list[tuple] = []  # (a, b): dims with a <= b, checked at every call
        # value name -> (axis, length Tensor, input names): values of data-dependent length along
        # axis, padded to a static bound (ops_dynamic); sliced on the host when a graph output
        self.ragged: dict[str, tuple] = {}
        g = proto.graph
        self.elem_types = {i.name: i.data_type for i in g.initializer}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                self.elem_types.setdefault(vi.name, vi.type.tensor_type.elem_type)

    @functools.cached_property
    def inferred(self) -> Inferred:
        """onnx's shape inference of the model, run once if a node asks (If-conversion)."""
        return Inferred(self.proto)

    def assume(self, a, b) -> None:
        if (a, b) not in self.assumptions:
            self.assumptions.append((a, b))

    # --- the graph -------------------------------------------------------------------------
    def check_supported(self, graph: onnx.GraphProto) -> None:
        missing = []
        for node in _all_nodes(graph):
            domain = "" if node.domain == "ai.onnx" else node.domain
            if (domain, node.op_type) in self.functions:
                continue
            opset = self.opsets.get(domain, 0)
            if registry.lookup(node.op_type, domain, opset) is None and _schema(node, opset) is None:
                missing.append((node.op_type, domain, node.name or "<unnamed>", opset))
        if missing:
            raise UnsupportedOpsError(missing)

    def import_graph(self) -> tuple[list, list[tuple[str, Value, int]]]:
        graph = self.proto.graph
        self.check_supported(graph)
        for init in graph.initializer:  # one also listed as an input is a default the caller may override
            dtype = hlir_dtype(init.data_type, f"initializer {init.name!r}: ")
            arr = self.specialize[init.name] if init.name in self.specialize else initializer_array(init)
            self.values[init.name] = Value(known=Known(arr, dtype))
        for init in graph.sparse_initializer:
            raise OnnxImportError(f"sparse initializer {init.values.name!r} is not supported")
        for vi in graph.input:
            if vi.name in self.values:
                continue  # an initializer listed as an input (IR < 4): a constant here
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type"):
                raise OnnxImportError(f"input {vi.name!r}: only tensor inputs are supported")
            if not tt.HasField("shape"):
                raise OnnxImportError(f"input {vi.name!r} has no declared rank; luminal needs the rank of every input")
            dims = []
            for axis, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value") and d.dim_value >= 0:  # -1 (some exporters): dynamic
                    dims.append(int(d.dim_value))
                else:
                    dims.append(input_dim_name(vi.name, axis, d.dim_param))
            dtype = hlir_dtype(tt.elem_type, f"input {vi.name!r}: ")
            self.inputs.append((vi.name, tt.elem_type, tuple(dims)))
            if vi.name in self.shapes:
                dims = list(self.shapes[vi.name])
            dims = [positive_dim(d) if isinstance(d, str) else d for d in dims]
            if vi.name in self.specialize:
                self.values[vi.name] = Value(known=Known(self.specialize[vi.name], dtype))
            else:
                self.values[vi.name] = Value(tensor=self.g.input(vi.name, tuple(dims), dtype))
        self.run_nodes(graph.node)
        outputs = []
        for vi in graph.output:
            if vi.name not in self.values:
                raise OnnxImportError(f"graph output {vi.name!r} is not produced by any node")
            outputs.append((vi.name, self.values[vi.name], vi.type.tensor_type.elem_type))
        return self.inputs, outputs

    def run_nodes(self, nodes) -> None:
        for node in nodes:
            self.node_index += 1
            try:
                self.run_node(node)
            except OnnxError:
                raise
            except RecursionError:
                raise OnnxImportError(f"{node.op_type} node {node.name or self.node_index!r}: graph too deep") from None
            except LuminalError as exc:
                symbolic = self._symbolic_input(node) if isinstance(exc, ShapeError) else None
                if symbolic is not None:  # shapes sympy cannot reconcile for every binding: resolve per call
                    raise NeedsShape(f"{node.op_type} node {node.name or self.node_index!r}: {exc}; compiled per "
                                     "input shape", symbolic) from exc
                raise OnnxImportError(f"{node.op_type} node {node.name or self.node_index!r}: {exc}") from exc
            except Exception as exc:  # noqa: BLE001 - a malformed node must not crash the import
                raise OnnxImportError(
                    f"{node.op_type} node {node.name or self.node_index!r} cannot be lowered: {type(exc).__name__}: {exc}"
                ) from exc

    def _symbolic_input(self, node: onnx.NodeProto) -> str | None:
        """An input of `node` that is a tensor with a symbolic dim (preferring one computed from
        graph inputs, whose shapes the model can then compile in), or None."""
        names = [n for n in node.input if n and self.values.get(n) is not None and self.values[n].tensor is not None
                 and not all(sym.is_static(d) for d in self.values[n].tensor.shape)]
        traced = [n for n in names if any(graph_input_deps(self.proto.graph, n))]
        return (traced or names or [None])[0]

    def run_subgraph(self, graph: onnx.GraphProto, feeds: dict[str, Value]) -> list[Value]:
        """Import a subgraph (If/Loop body) in a scope seeing the outer values; its outputs."""
        saved = dict(self.values)
        try:
            self.values.update(feeds)
            for init in graph.initializer:
                self.values[init.name] = Value(known=Known(initializer_array(init), hlir_dtype(init.data_type)))
            self.run_nodes(graph.node)
            self.check_ragged([o.name for o in graph.output], "a subgraph output")
            return [self.values[o.name] for o in graph.output]
        except NeedsValue as exc:  # name the outer-scope value the needed one comes from
            inner = {o for n in graph.node for o in n.output} | set(feeds) | {i.name for i in graph.initializer}
            outer = {i for n in graph.node for i in n.input if i and i not in inner}
            values, shapes = _value_deps(graph.node, outer, exc.value_name)
            names = sorted(values) + sorted(shapes)
            if not names or exc.value_name in saved:
                raise
            traced = [n for n in names if any(graph_input_deps(self.proto.graph, n))]
            if isinstance(exc, IfNotConvertible):  # keeps naming its If: the model hosts what holds it
                raise IfNotConvertible(str(exc), (traced or names)[0], exc.node_key) from None
            raise type(exc)(str(exc), (traced or names)[0]) from None
        finally:
            self.values = saved

    # --- one node --------------------------------------------------------------------------
    def run_node(self, node: onnx.NodeProto) -> None:
        self.check_ragged(node.input, f"{node.op_type} node {node.name or self.node_index!r}")
        domain = "" if node.domain == "ai.onnx" else node.domain
        if (domain, node.op_type) in self.functions:
            return self.run_function(node, self.functions[(domain, node.op_type)])
        opset = self.opsets.get(domain, 0)
        impl = registry.lookup(node.op_type, domain, opset)
        if impl is None:
            schema = _schema(node, opset)
            if schema is None:  # an op inside a function body (check_supported sees the top level)
                raise UnsupportedOpsError([(node.op_type, domain, node.name or "<unnamed>", opset)])
            return self.run_function(node, self.schema_function(node, opset), schema)
        c = NodeContext(self, node, opset)
        attrs = {a.name: attr_value(a) for a in node.attribute}
        ins = []
        for name in node.input:
            if not name:
                ins.append(None)
            elif name not in self.values:
                c.fail(f"input {name!r} is not defined before this node")
            else:
                ins.append(self.values[name])
        outs = None
        present = [v for v in ins if v is not None]
        all_known = node.op_type not in NO_FOLD and all(v.known is not None for v in present)
        if all_known and any(v.known.symbolic for v in present):
            outs = evaluate_symbolic(c, [None if v is None else v.known for v in ins], attrs)
        if outs is None:
            args = []
            for i, v in enumerate(ins):
                if i in impl.known or (impl.variadic and -1 in impl.known):
                    if v is not None and v.known is None:
                        raise NeedsValue(
                            f"{node.op_type} node {c.name!r}: input {i} ({node.input[i]!r}) must be known at compile "
                            "time, but it depends on run-time data", node.input[i])
                    args.append(None if v is None else v.known.array)
                elif v is None or v.empty:  # an omitted input, or an empty optional
                    args.append(None)
                elif v.seq is not None:
                    args.append(v.seq)
                else:
                    args.append(self.tensor(v))
            result = impl.fn(c, *args, **attrs)
            outs = list(result) if isinstance(result, (list, tuple)) else [result]
            if all_known and present and not any(v.known.symbolic for v in present):
                outs = self.fold(outs, present)
        for name, out in zip(node.output, outs):
            if not name:
                continue
            if out is None:
                c.fail(f"output {name!r} is not produced")
            self.values[name] = self.wrap(out)

    def check_ragged(self, names, user: str) -> None:
        """A value of data-dependent length read by a node (or returned by a subgraph): compiled per
        value of what the length depends on (NeedsValue), where the op computes it at compile time."""
        for name in names:
            if name in self.ragged:
                sources = self.ragged[name][2]
                unknown = [n for n in sources if n in self.values and self.values[n].known is None]
                raise NeedsValue(f"{user} reads {name!r}, whose length depends on run-time data; compiled per value",
                                 (unknown or sources)[0])

    def schema_function(self, node: onnx.NodeProto, opset: int) -> onnx.FunctionProto:
        """The function body onnx defines for an op luminal has no lowering of (SwiGLU,
        CenterCropPad, the window functions, ...): context-dependent ones are built for the
        node's input types."""
        schema = _schema(node, opset)
        if schema.has_function:
            body = schema.get_function_with_opset_version(opset) or schema.function_body
            return onnx.FunctionProto.FromString(body) if isinstance(body, bytes) else body
        types = []
        for name in node.input:
            v = self.values.get(name) if name else None
            if v is None or v.seq is not None:
                types.append(onnx.TypeProto().SerializeToString())
                continue
            dtype = v.tensor.dtype if v.tensor is not None else v.known.dtype
            shape = v.tensor.shape if v.tensor is not None else v.known.array.shape
            dims = [int(d) if sym.is_static(d) else None for d in shape]
            elem = self.elem_types.get(name) or _ELEM[dtype]
            types.append(onnx.helper.make_tensor_type_proto(elem, dims).SerializeToString())
        body = onnx.FunctionProto.FromString(
            schema.get_context_dependent_function_with_opset_version(opset, node.SerializeToString(), types))
        if not body.node:  # onnx builds no body for these types (Bernoulli's): the op is not lowered
            domain = "" if node.domain == "ai.onnx" else node.domain
            raise UnsupportedOpsError([(node.op_type, domain, node.name or "<unnamed>", opset)])
        return body

    def run_function(self, node: onnx.NodeProto, fn: onnx.FunctionProto, schema=None) -> None:
        """A function (model-local, or an op's onnx-defined body): inline its body with inputs,
        outputs and attributes bound (the schema's attribute defaults where the node omits one)."""
        feeds = {formal: self.values[actual] for formal, actual in zip(fn.input, node.input) if actual}
        attrs = {a.name: a for a in node.attribute}
        for name, spec in (schema.attributes.items() if schema is not None else ()):
            if name not in attrs and spec.default_value.type:
                attrs[name] = spec.default_value
        body = []
        for n in fn.node:
            n2 = onnx.NodeProto()
            n2.CopyFrom(n)
            del n2.attribute[:]
            for a in n.attribute:
                if a.ref_attr_name:
                    if a.ref_attr_name in attrs:
                        a2 = onnx.AttributeProto()
                        a2.CopyFrom(attrs[a.ref_attr_name])
                        a2.name = a.name
                        n2.attribute.append(a2)
                else:
                    n2.attribute.append(a)
            body.append(n2)
        saved_opsets = dict(self.opsets)
        self.opsets.update({imp.domain: imp.version for imp in fn.opset_import})
        saved = dict(self.values)
        try:
            self.values.update(feeds)
            self.run_nodes(body)
            outs = [self.values[o] for o in fn.output]
        except NeedsValue as exc:  # name the node's own input the body needs the value of
            formal, _ = _value_deps(body, set(feeds), exc.value_name)
            actual = [a for f, a in zip(fn.input, node.input) if f in formal and a]
            if not actual:
                raise
            raise NeedsValue(str(exc), actual[0]) from None
        finally:
            self.values, self.opsets = saved, saved_opsets
        for name, formal, v in zip(node.output, fn.output, outs):
            if name:
                self.values[name] = v
                if formal in self.ragged:
                    self.ragged[name] = self.ragged[formal]

    def wrap(self, out) -> Value:
        if isinstance(out, Value):
            return out
        if isinstance(out, Known):
            return Value(known=out)
        if isinstance(out, Tensor):
            return Value(tensor=out)
        if isinstance(out, Seq):
            return Value(seq=[self.wrap(o) for o in out.items])
        raise OnnxImportError(f"internal: an op returned {type(out).__name__}")

    def tensor(self, v: Value) -> Tensor:
        if v.tensor is None:
            if v.known is None:
                raise OnnxImportError("a sequence was given where a tensor is expected")
            v.tensor = materialize(self.g, v.known)
        return v.tensor

    def fold(self, outs: list, ins: list[Value]) -> list:
        """Evaluate the outputs of a node whose inputs are all known now (see FOLD_LIMIT)."""
        if sum(v.known.array.size for v in ins if not _is_broadcast(v.known.array)) > FOLD_LIMIT:
            return outs
        tensors = [o for o in outs if isinstance(o, Tensor)]
        if not tensors or any(not all(sym.is_static(d) for d in t.shape) for t in tensors):
            return outs
        if any(n.op is Op.INPUT for t in tensors for n in _nodes(t)):
            return outs
        views = [_broadcast_view(t.node) for t in tensors]
        roots = [t.node if st is None else t.node.src[0] for t, st in zip(tensors, views)]
        if sum(int(np.prod(n.shape)) for n in roots) > FOLD_LIMIT:
            return outs
        arrays = [_strided(a, st) for a, st in zip(NumpyRuntime(roots)({}), views)]
        it = iter(arrays)
        return [Known(next(it), o.dtype) if isinstance(o, Tensor) else o for o in outs]


def _broadcast_view(node):
    """The tracker of `node` when it is a view that repeats its source (a zero stride on a dim
    longer than 1) with plain non-negative strides, no mask and no offset; else None."""
    if node.op is not Op.VIEW:
        return None
    st = node.arg
    if st.mask is not None or not all(isinstance(d, (int, np.integer)) for d in st.dims):
        return None
    if st.offset != 0 or any(s < 0 for s in st.strides):
        return None
    return st if any(s == 0 and d > 1 for d, s in zip(st.shape, st.strides)) else None


def _strided(arr: np.ndarray, st) -> np.ndarray:
    """`arr` read through the view `st` (a read-only strided view, no copy); `arr` if st is None."""
    if st is None:
        return arr
    flat = np.ascontiguousarray(arr).reshape(-1)
    strides = tuple(int(s) * flat.itemsize for s in st.strides)
    return np.lib.stride_tricks.as_strided(flat, tuple(int(d) for d in st.shape), strides, writeable=False)


def _is_broadcast(arr: np.ndarray) -> bool:
    return arr.size > 1 and any(s == 0 and d > 1 for d, s in zip(arr.shape, arr.strides))


def _compact(arr: np.ndarray) -> tuple[np.ndarray, tuple]:
    """A broadcast array as its source (the first entry along every zero-stride dim, contiguous)."""
    index = tuple(slice(0, 1) if s == 0 else slice(None) for s in arr.strides)
    return np.ascontiguousarray(arr[index]), arr.shape


def initializer_array(init: onnx.TensorProto) -> np.ndarray:
    """The value of an initializer; InvalidModelError naming it if its data does not fit its dims."""
    n = 1
    for d in init.dims:
        n *= d
    if any(d < 0 for d in init.dims) or n > 2 * init.ByteSize() + 64:  # every element takes at least 4 bits
        raise InvalidModelError(f"initializer {init.name!r}: dims {list(init.dims)} hold more elements than its data")
    try:
        return numpy_helper.to_array(init)
    except Exception as exc:  # noqa: BLE001 - onnx raises ValueError, TypeError, ...
        raise InvalidModelError(f"initializer {init.name!r} is malformed: {type(exc).__name__}: {exc}") from None


def graph_input_deps(graph: onnx.GraphProto, value_name: str) -> tuple[set[str], set[str]]:
    """The graph inputs whose values, and those whose shapes only (through Shape / Size), the
    value `value_name` is computed from."""
    inputs = {vi.name for vi in graph.input} - {i.name for i in graph.initializer}
    return _value_deps(graph.node, inputs, value_name)


def _value_deps(nodes, inputs: set[str], value_name: str) -> tuple[set[str], set[str]]:
    producer = {o: n for n in nodes for o in n.output}
    values: set[str] = set()
    shapes: set[str] = set()
    seen, stack = set(), [(value_name, False)]
    while stack:
        name, shape_only = stack.pop()
        if (name, shape_only) in seen or not name:
            continue
        seen.add((name, shape_only))
        if name in inputs:
            (shapes if shape_only else values).add(name)
        elif name in producer:
            node = producer[name]
            through_shape = shape_only or node.op_type in ("Shape", "Size")
            stack.extend((i, through_shape) for i in node.input)
            for attr in node.attribute:  # outer-scope names used by subgraphs
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.extend((i, through_shape) for n in attr.g.node for i in n.input)
    return values, shapes - values


_ELEM = {DType.F32: onnx.TensorProto.FLOAT, DType.F64: onnx.TensorProto.DOUBLE, DType.F16: onnx.TensorProto.FLOAT16,
         DType.BF16: onnx.TensorProto.BFLOAT16, DType.I32: onnx.TensorProto.INT32, DType.I64: onnx.TensorProto.INT64,
         DType.BOOL: onnx.TensorProto.BOOL}


def _schema(node: onnx.NodeProto, opset: int):
    """onnx's schema of `node` at `opset` when it defines the op as a function, else None."""
    try:
        schema = onnx.defs.get_schema(node.op_type, max(opset, 1), node.domain)
    except (onnx.defs.SchemaError, TypeError, ValueError):  # unknown op, or a malformed name / domain
        return None
    if schema.has_function or schema.has_context_dependent_function:
        return schema
    return None


def _nodes(t: Tensor):
    from luminal.hlir.ops import toposort

    return toposort([t.node])


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _all_nodes(sub)
