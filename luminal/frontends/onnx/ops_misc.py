"""Sequences (Python lists of values at compile time) and control flow (If, Loop).

Sequence positions and Loop trip counts must be known at compile time (a model whose graph
inputs decide them is compiled per value of those inputs, or runs the loop on the host:
`staged.py`); Loop and Scan are unrolled. An If on a run-time condition is if-converted where
its branches allow (`if_convert.py`).
"""

from __future__ import annotations

import numpy as np

from luminal.builder import functional as F
from luminal.builder.functional import split_sizes
from luminal.errors import LuminalError
from luminal.frontends.onnx import if_convert
from luminal.frontends.onnx.errors import IfNotConvertible, NeedsValue, OnnxImportError, UnsupportedOpsError
from luminal.frontends.onnx.importer import _value_deps
from luminal.frontends.onnx.registry import onnx_op
from luminal.frontends.onnx.values import Known, Seq, Value
from luminal.hlir import symbolic as sym

MAX_UNROLL = 4096


def _pos(c, seq, pos, insert=False):
    n = len(seq)
    p = int(np.asarray(pos).reshape(-1)[0])
    p = p + n if p < 0 else p
    if not 0 <= p <= (n if insert else n - 1):
        c.fail(f"sequence position {int(np.asarray(pos).reshape(-1)[0])} is out of range for a sequence of {n}")
    return p


def _tensor(c, v):
    return c.importer.tensor(v) if isinstance(v, Value) else v


def _carry(c, v) -> Value:
    """A loop-carried input as a value: a sequence arrives as its list of values, an empty optional as None."""
    return Value() if v is None else Value(seq=v) if isinstance(v, list) else c.importer.wrap(v)


@onnx_op("SequenceEmpty")
def sequence_empty(c, dtype=None):
    return Seq([])


@onnx_op("SequenceConstruct", variadic=True)
def sequence_construct(c, *xs):
    return Seq(xs)


@onnx_op("SequenceInsert", known=(2,))
def sequence_insert(c, seq, x, pos=None):
    p = len(seq) if pos is None else _pos(c, seq, pos, insert=True)
    return Seq(seq[:p] + [x] + seq[p:])


@onnx_op("SequenceErase", known=(1,))
def sequence_erase(c, seq, pos=None):
    p = len(seq) - 1 if pos is None else _pos(c, seq, pos)
    return Seq(seq[:p] + seq[p + 1:])


@onnx_op("SequenceAt", known=(1,))
def sequence_at(c, seq, pos):
    return seq[_pos(c, seq, pos)]


@onnx_op("SequenceLength")
def sequence_length(c, seq):
    return Known(np.array(len(seq), np.int64))


@onnx_op("ConcatFromSequence")
def concat_from_sequence(c, seq, axis, new_axis=0):
    xs = [_tensor(c, v) for v in seq]
    return F.stack(xs, axis) if new_axis else F.concat(xs, axis)


@onnx_op("SplitToSequence", known=(1,))
def split_to_sequence(c, x, split=None, axis=0, keepdims=1):
    a = axis % x.ndim
    n = x.shape[a]
    if split is None:
        parts = F.split(x, 1, a)
        return Seq([p.squeeze(a) for p in parts] if not keepdims else parts)
    sizes = [int(v) for v in np.asarray(split).reshape(-1)]
    if np.asarray(split).ndim == 0:
        size = sizes[0]
        sizes = [min(size, n - i) for i in range(0, n, size)]
    return Seq(split_sizes(x, a, sizes))


@onnx_op("SequenceMap", since=17, variadic=True)
def sequence_map(c, seq, *extra, body):
    """The body once per position of the input sequence (unrolled, as Loop): an additional input
    that is a sequence gives its element at that position (it has the same length), a tensor is
    given whole; each body output makes one output sequence."""
    if not isinstance(seq, list):
        c.fail("the first input is not a sequence")
    for k, x in enumerate(extra):
        if isinstance(x, list) and len(x) != len(seq):
            c.fail(f"additional input {k} is a sequence of {len(x)}, the input sequence has {len(seq)}")
    names = [i.name for i in body.input]
    outs: list[list] = [[] for _ in body.output]
    for i, item in enumerate(seq):
        feeds = {names[0]: item}
        feeds.update((n, x[i] if isinstance(x, list) else c.importer.wrap(x)) for n, x in zip(names[1:], extra))
        try:
            results = c.subgraph(body, feeds)
        except NeedsValue as exc:  # name the node's input the body needs the value (or shape) of
            if isinstance(exc, IfNotConvertible):
                raise
            values, shapes = _value_deps(body.node, set(names), exc.value_name)
            hit = [k for k, n in enumerate(names) if n in values | shapes or n == exc.value_name]
            if not hit:
                raise
            raise type(exc)(str(exc), c.node.input[hit[0]]) from None
        for acc, v in zip(outs, results):
            acc.append(v)
    return [Seq(o) for o in outs]


@onnx_op("If")
def if_(c, cond, then_branch, else_branch):
    """The branch the condition picks when it is known at compile time; else both branches and
    a select, where they are small and cannot fail (`if_convert`); else the model compiles per
    value of the condition (an If on input data runs on the host instead: `staged.py`)."""
    known = c.known(0)
    if known is not None:
        return c.subgraph(then_branch if bool(np.asarray(known).reshape(-1)[0]) else else_branch, {})
    if not if_convert.convertible(c.node, c.importer.inferred):
        raise NeedsValue(f"If node {c.name!r}: its condition depends on run-time data", c.node.input[0])
    if not all(sym.equal(d, 1) for d in cond.shape):
        c.fail(f"the condition has shape {cond.shape}; If takes one element")
    flag = cond.reshape(()) if cond.ndim else cond
    try:  # a branch that cannot be built for every input (a Reshape the condition guards) is not computed always
        branches = c.subgraph(then_branch, {}), c.subgraph(else_branch, {})
    except (UnsupportedOpsError, NeedsValue):  # unsupported anyway; per value or shape as any node
        raise
    except (OnnxImportError, LuminalError) as exc:
        raise IfNotConvertible(f"If node {c.name!r}: a branch does not build for every input ({exc})", c.node.input[0],
                               c.node.output[0]) from exc
    outs = []
    for t, e in zip(*branches):
        if t.seq is not None or e.seq is not None:
            raise IfNotConvertible(f"If node {c.name!r}: a branch returns a sequence", c.node.input[0], c.node.output[0])
        t, e = c.importer.tensor(t), c.importer.tensor(e)
        if t.dtype != e.dtype or len(t.shape) != len(e.shape) or not all(sym.equal(a, b) for a, b in zip(t.shape, e.shape)):
            raise IfNotConvertible(f"If node {c.name!r}: the branches give {t.dtype}{t.shape} and {e.dtype}{e.shape}",
                                   c.node.input[0], c.node.output[0])
        outs.append(F.where(flag, t, e))
    return outs


@onnx_op("Loop", known=(0, 1), variadic=True)
def loop(c, trip, cond, *carried, body):
    n = MAX_UNROLL + 1 if trip is None else int(np.asarray(trip).reshape(-1)[0])
    go = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    if n > MAX_UNROLL:
        c.fail(f"Loop with {n if trip is not None else 'no'} trip count: luminal unrolls at most {MAX_UNROLL} iterations")
    names = [i.name for i in body.input]
    state = [_carry(c, v) for v in carried]
    scans: list[list] = []
    it = 0
    while go and it < n:
        feeds = {names[0]: Value(known=Known(np.array(it, np.int64))),
                 names[1]: Value(known=Known(np.array(go, np.bool_)))}
        feeds.update(zip(names[2:], state))
        outs = c.subgraph(body, feeds)
        cond_v = outs[0]
        if cond_v.known is None:
            c.fail("the Loop condition depends on run-time data")
        go = bool(np.asarray(cond_v.known.array).reshape(-1)[0])
        state = outs[1:1 + len(carried)]
        scans.append(outs[1 + len(carried):])
        it += 1
    results = list(state)
    n_scan = len(body.output) - 1 - len(carried)
    for j in range(n_scan):
        parts = [_tensor(c, s[j]) for s in scans]
        if not parts:
            c.fail("a Loop that runs zero iterations has scan outputs of unknown shape")
        results.append(F.stack(parts, 0))
    return results



@onnx_op("Scan", since=9, variadic=True)
def scan(c, *inputs, body, num_scan_inputs, scan_input_directions=None, scan_output_directions=None,
         scan_input_axes=None, scan_output_axes=None):
    """Unrolled over the scan length, which must be static (a model with a symbolic one is
    compiled per length, like a Loop per trip count)."""
    m = num_scan_inputs
    states, xs = list(inputs[:len(inputs) - m]), [_tensor(c, v) for v in inputs[len(inputs) - m:]]
    in_dirs = list(scan_input_directions or [0] * m)
    in_axes = [a % x.ndim for a, x in zip(scan_input_axes or [0] * m, xs)]
    lengths = {x.shape[a] for x, a in zip(xs, in_axes)}
    if len(lengths) != 1:
        c.fail(f"scan inputs have different lengths {sorted(map(str, lengths))}")
    (n,) = lengths
    if not isinstance(n, int):
        c.fail(f"Scan over a symbolic length {n}: luminal unrolls Scan and needs it static")
    if n > MAX_UNROLL:
        c.fail(f"Scan of length {n}: luminal unrolls at most {MAX_UNROLL} iterations")
    names = [i.name for i in body.input]
    state = [_carry(c, v) for v in states]
    steps: list[list] = []
    for t in range(n):
        feeds = dict(zip(names, state))
        for j, (x, a, d) in enumerate(zip(xs, in_axes, in_dirs)):
            i = n - 1 - t if d else t
            feeds[names[len(state) + j]] = Value(tensor=x.slice(a, i, i + 1).squeeze(a))
        outs = c.subgraph(body, feeds)
        state = outs[:len(state)]
        steps.append(outs[len(state):])
    k = len(body.output) - len(states)
    out_dirs = list(scan_output_directions or [0] * k)
    out_axes = list(scan_output_axes or [0] * k)
    results = list(state)
    for j in range(k):
        parts = [_tensor(c, s[j]) for s in steps]
        if not parts:
            c.fail("a Scan of length 0 has scan outputs of unknown shape")
        if out_dirs[j]:
            parts = parts[::-1]
        results.append(F.stack(parts, out_axes[j] % (parts[0].ndim + 1)))
    return results
