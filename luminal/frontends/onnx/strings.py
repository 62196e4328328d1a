"""String tensors: held on the host as NumPy `object` arrays of `str`, never in the HLIR.

`staged.plan` cuts a model at every node that reads or makes a string tensor (and at the text
ops, TfIdfVectorizer whatever its input): those run here, in Python, between the compiled
numeric stages, as the host-stepped control flow does. So a graph of strings only runs wholly
on the host, and one that maps strings to numbers (LabelEncoder string -> int64,
TfIdfVectorizer -> float, RegexFullMatch -> bool) feeds them to the compiled part that follows.
A Loop, Scan or If that reads strings or computes them inside is a `staged.HostNode`: its
bodies compile as models of their own, staged the same way.

Which values are strings comes from the model's declared and inferred element types (onnx's
shape inference). The string ops are `string_ops.py`; other ops that merely move string
elements (Identity, Reshape, Gather, Concat, Where, Shape, ...) run on onnx's reference
implementation, checked first against the op's schema: a string where the op takes numbers is
an `OnnxImportError` naming the node and the input, at compile time.
"""

from __future__ import annotations

import onnx

from luminal.frontends.onnx.errors import OnnxError, OnnxImportError
from luminal.frontends.onnx.host_step import HostStep
from luminal.frontends.onnx.importer import attr_value
from luminal.frontends.onnx.registry import onnx_op
from luminal.frontends.onnx.string_ops import OPS

TP = onnx.TensorProto
TEXT_OPS = {("", "StringNormalizer"), ("", "StringConcat"), ("", "StringSplit"), ("", "RegexFullMatch"),
            ("", "TfIdfVectorizer"), ("ai.onnx.ml", "CategoryMapper")}
# ops that only move, select or describe elements: run on strings by onnx's reference implementation
MOVES = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Gather", "GatherElements", "GatherND",
         "Concat", "Split", "Slice", "Expand", "Tile", "Where", "Shape", "Size", "Compress", "ReverseSequence",
         "ScatterElements", "ScatterND", "Constant"}
_STRING_ATTRS = ("keys_strings", "values_strings", "classes_strings", "cats_strings", "pool_strings")


def _inlined(c, *args, **attrs):
    c.fail("text ops run on the host between compiled stages; this one is inside a subgraph luminal imports "
           "inline (an If or Loop body), which is not supported")


for _domain_name, _op in TEXT_OPS:  # known to the importer's op check; lowered by `plan` cutting the graph
    onnx_op(_op, domain=_domain_name)(_inlined)

REASONS = ("a text op", "it computes on string tensors", "it maps strings")


def may_have_strings(proto: onnx.ModelProto) -> bool:
    """Whether the main graph may hold a string tensor or a text op (cheap: no shape inference)."""
    g = proto.graph
    if any(i.data_type == TP.STRING for i in g.initializer):
        return True
    if any(vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == TP.STRING
           for vi in list(g.input) + list(g.output) + list(g.value_info)):
        return True
    return any(_makes_strings(node) or host_reason(node, set()) for node in g.node)


def _makes_strings(node: onnx.NodeProto) -> bool:
    """A text op, a cast to strings or a string constant, here or in the node's subgraphs."""
    if (_domain(node), node.op_type) in TEXT_OPS:
        return True
    for a in node.attribute:
        if (a.name == "to" and a.i == TP.STRING) or a.name in ("value_string", "value_strings") or (
                a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TP.STRING):
            return True
        if any(_makes_strings(n) for g in _graphs(a) for n in g.node):
            return True
    return False


def _graphs(a: onnx.AttributeProto) -> list:
    return [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)


def _domain(node: onnx.NodeProto) -> str:
    return "" if node.domain in ("", "ai.onnx") else node.domain


def string_values(proto: onnx.ModelProto, types: dict[str, int]) -> set[str]:
    """The main graph's values that are string tensors: declared or inferred so, and the outputs of
    host string nodes that onnx's inference left untyped (their type follows their string input)."""
    found = {n for n, t in types.items() if t == TP.STRING}
    for node in proto.graph.node:
        if host_reason(node, found) and any(i in found for i in node.input if i):
            found |= {o for o in node.output if o and o not in types}
    return found


def host_reason(node: onnx.NodeProto, strings: set[str]) -> str | None:
    """Why `node` runs on the host as a string op, or None."""
    key = (_domain(node), node.op_type)
    if key in TEXT_OPS:
        return REASONS[0]
    if any(i in strings for i in _reads(node)) or any(o in strings for o in node.output if o):
        return REASONS[1]
    if any(_makes_strings(n) for a in node.attribute for g in _graphs(a) for n in g.node):
        return REASONS[1]  # a Loop / If computing strings inside: on the host, its bodies staged
    if node.op_type in ("LabelEncoder",) and any(a.name in _STRING_ATTRS or (a.type == onnx.AttributeProto.TENSOR and
                                                 a.t.data_type == TP.STRING) for a in node.attribute):
        return REASONS[2]
    return None


def _reads(node: onnx.NodeProto) -> list[str]:
    """The names a node reads: its inputs, and what its subgraphs read from outside them."""
    names = [i for i in node.input if i]
    for a in node.attribute:
        for g in _graphs(a):
            inner = {i.name for i in g.input} | {i.name for i in g.initializer} | {o for n in g.node for o in n.output}
            names += [i for n in g.node for i in _reads(n) if i not in inner]
    return names


class HostString(HostStep):
    """A node computed on the host on NumPy arrays (string tensors among its inputs or outputs)."""

    def __init__(self, model, node: onnx.NodeProto, reason: str, strings: set[str]):
        self.model, self.node, self.reason = model, node, reason
        self.label = f"{node.op_type} node {node.name or '<unnamed>'!r}"
        domain = _domain(node)
        self.opset = next((o.version for o in model.proto.opset_import
                           if (o.domain if o.domain != "ai.onnx" else "") == domain), 1)
        self.attrs = {a.name: attr_value(a) for a in node.attribute}
        self._cache: dict = {}
        self.fn = OPS.get((domain, node.op_type))
        if self.fn is not None:
            return
        if node.op_type in ("Loop", "Scan", "If") or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                                          for a in node.attribute):
            raise OnnxImportError(f"{self.label}: control flow over string tensors is not supported")
        _check_schema(node, self.label, domain, self.opset, strings)
        if domain or node.op_type not in MOVES:
            names = [f"{'input' if k == 0 else 'output'} {n!r}" for k, side in enumerate((node.input, node.output))
                     for n in side if n in strings]
            attrs = [a.name for a in node.attribute if a.type == onnx.AttributeProto.STRINGS or (
                a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TP.STRING)]
            raise OnnxImportError(f"{self.label}: {', '.join(names) or 'a value'} holds strings"
                                  f"{' (from ' + ', '.join(attrs) + ')' if attrs else ''}; luminal computes on strings "
                                  f"only in {', '.join(sorted(op for _, op in OPS))} and the ops that move elements")
        self._reference = None

    def cache(self, key: str, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def _run(self, env) -> list:
        ins = [self._value(env, n) if n else None for n in self.node.input]
        try:
            if self.fn is not None:
                return self.fn(self, *ins, **self.attrs)
            if self._reference is None:  # onnx's reference implementation of a data-movement op
                from onnx.reference import ReferenceEvaluator

                opsets = {o.domain: o.version for o in self.model.proto.opset_import}
                self._reference = ReferenceEvaluator(self.node, opsets=opsets)
            feeds = {n: v for n, v in zip(self.node.input, ins) if n}
            return list(self._reference.run(None, feeds))
        except (OnnxError, ValueError, IndexError):
            raise  # HostStep names the node
        except Exception as exc:  # noqa: BLE001 - inputs the model did not promise (a number among strings)
            raise OnnxError(f"{self.label}: {type(exc).__name__}: {exc}") from exc

    def describe(self) -> str:
        return f"{self.label} on the host ({self.reason})"

    def sub_models(self) -> list:
        return []


def _check_schema(node, label: str, domain: str, opset: int, strings: set[str]) -> None:
    """A string input where the op's schema takes no strings: an error naming the node and input."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, domain)
    except onnx.defs.SchemaError:
        raise OnnxImportError(f"{label}: unknown op at opset {opset}; it reads string tensors") from None
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    formal = list(schema.inputs)
    for i, name in enumerate(node.input):
        if not name or name not in strings or not formal:
            continue
        spec = formal[min(i, len(formal) - 1)]
        types = allowed.get(spec.type_str, {spec.type_str})
        if "tensor(string)" not in types:
            raise OnnxImportError(f"{label}: input {i} ({name!r}) is a string tensor, and {node.op_type} takes "
                                  f"{', '.join(sorted(types))}")


def node_types(proto: onnx.ModelProto, inferred) -> dict[str, int]:
    """Element types of the main graph's values: declared (inputs, outputs, value_info,
    initializers) and inferred."""
    types = dict(inferred.elem_types)
    for vi in list(proto.graph.input) + list(proto.graph.output) + list(proto.graph.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types.setdefault(vi.name, vi.type.tensor_type.elem_type)
    return types
