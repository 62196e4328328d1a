"""RNN, GRU and LSTM over a sequence whose length the inputs decide, stepped on the host.

`ops_rnn.py` unrolls a recurrence over the sequence length, so a model whose length is symbolic
would compile once per distinct length. Here the recurrence runs as a Python loop instead
(a host node of `staged.py`): its cell is the very same op on a sequence of one step (forward,
layout 0, the direction's slice of the weights), compiled once, called per step with the state
carried on the host. The host does what ONNX defines around the cell: the reverse direction walks
the sequence backwards (each batch row's own `sequence_lens` prefix), a row past its length keeps
its state and outputs zeros, bidirectional runs both directions and stacks them, layout 1 is
transposed in and out.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from luminal.frontends.onnx.errors import OnnxError, OnnxImportError
from luminal.frontends.onnx.host_step import HostStep
from luminal.frontends.onnx.importer import attr_value, initializer_array
from luminal.frontends.onnx.ops_rnn import MAX_STEPS

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
ACTIVATIONS = {"RNN": 1, "GRU": 2, "LSTM": 3}  # activation functions per direction
RECURRENT_OPS = tuple(GATES)


def host_reason(node: onnx.NodeProto, shapes: dict, deps, recurrence: str = "host") -> str | None:
    """Why a recurrence runs on the host, or None: unrolled by `ops_rnn.py` (per length when
    symbolic). On the host: a static length past MAX_STEPS (under "auto" and "host"), and a
    symbolic one under "host" (under "auto" the model decides per call, `model.py`)."""
    attrs = {a.name: attr_value(a) for a in node.attribute}
    names = list(attrs.get("activations") or [])
    for key in ("activation_alpha", "activation_beta"):  # aligned with the activations: sliced alike
        if attrs.get(key) and len(attrs[key]) != len(names):
            return None
    if node.domain not in ("", "ai.onnx"):
        return None
    dims = shapes.get(node.input[0])
    axis = 1 if attrs.get("layout", 0) else 0
    if dims is not None and len(dims) == 3 and isinstance(dims[axis], int):
        if dims[axis] > MAX_STEPS and recurrence != "unroll":  # unrolling would fail (TooManySteps)
            return f"its {dims[axis]} steps are more than the {MAX_STEPS} luminal unrolls"
        return None  # a static length: unrolled, its input projection one GEMM over all steps
    if recurrence != "host":
        return None
    sources = sorted(deps(node.input[0]))
    return f"its sequence length comes from input(s) {sources}" if sources else None


class HostRecurrence(HostStep):
    """A RNN/GRU/LSTM node stepped on the host (see the module's docstring)."""

    def __init__(self, model, node: onnx.NodeProto, reason: str):
        self.model, self.node, self.reason = model, node, reason
        self.op = node.op_type
        self.label = f"{self.op} node {node.name or '<unnamed>'!r}"
        self.attrs = {a.name: attr_value(a) for a in node.attribute}
        self.direction = self.attrs.get("direction", "forward")
        if self.direction not in ("forward", "reverse", "bidirectional"):
            raise OnnxImportError(f"{self.label}: direction {self.direction!r} is not forward, reverse or bidirectional")
        self.dirs = 2 if self.direction == "bidirectional" else 1
        self.layout = int(self.attrs.get("layout", 0))
        self.n_states = 2 if self.op == "LSTM" else 1
        ins = list(node.input) + [""] * (8 - len(node.input))
        self.x, self.w, self.r, self.b, self.lens, self.h0 = ins[:6]
        self.c0, self.p = (ins[6], ins[7]) if self.op == "LSTM" else ("", "")
        self.cells = []
        for d in range(self.dirs):
            nodes, inputs, inits = self._cell_graph(d)
            outs = ["h_out", "c_out"][:self.n_states]
            # one step of a batch of any size: the cell compiles once for every length and batch
            hidden = self.attrs.get("hidden_size") or self._dim(self.r, -1)
            declared = {"x_t": helper.make_tensor_value_info("x_t", 0, [1, "batch", self._dim(self.w, -1)])}
            for name in ("h_in", "c_in")[:self.n_states]:
                declared[name] = helper.make_tensor_value_info(name, 0, [1, "batch", hidden])
            self.cells.append(model.sub_model(f"{self.label} cell {d}", nodes, inputs, outs, declared=declared,
                                              initializers=inits))

    def _dim(self, name: str, axis: int):
        """A dim of an initializer weight, or None (a symbol) when the weight is computed."""
        init = self.model.initializers.get(name)
        return int(init.dims[axis]) if init is not None and init.dims and name not in self.model.env_names else None

    def _weight(self, name: str, d: int, tag: str, inits: list, inputs: list) -> str:
        """The direction-d slice of a weight: an initializer of its own when the weight is one,
        else an input the host slices per call."""
        if not name:
            return ""
        init = self.model.initializers.get(name)
        sliced = f"{tag}_{d}"
        if init is not None and name not in self.model.env_names:
            inits.append(numpy_helper.from_array(np.ascontiguousarray(initializer_array(init)[d:d + 1]), sliced))
        else:
            inputs.append(sliced)
        return sliced

    def _cell_graph(self, d: int):
        inits: list = []
        inputs = ["x_t", "h_in"] + (["c_in"] if self.op == "LSTM" else [])
        w = self._weight(self.w, d, "W", inits, inputs)
        r = self._weight(self.r, d, "R", inits, inputs)
        b = self._weight(self.b, d, "B", inits, inputs)
        cell_in = [inputs[0], w, r, b, "", "h_in"]
        if self.op == "LSTM":
            cell_in += ["c_in", self._weight(self.p, d, "P", inits, inputs)]
        attrs = {k: v for k, v in self.attrs.items() if k not in ("direction", "layout", "activations",
                                                                 "activation_alpha", "activation_beta")}
        per = ACTIVATIONS[self.op]
        names = list(self.attrs.get("activations") or [])
        if names:
            if len(names) == per:
                names = names * self.dirs
            attrs["activations"] = names[d * per:(d + 1) * per]
            for key in ("activation_alpha", "activation_beta"):
                if self.attrs.get(key):
                    attrs[key] = list(self.attrs[key])[d * per:(d + 1) * per] if len(self.attrs[key]) > per else \
                        list(self.attrs[key])
        outs = ["", "h_out"] + (["c_out"] if self.op == "LSTM" else [])
        while cell_in and not cell_in[-1]:
            cell_in.pop()
        node = helper.make_node(self.op, cell_in, outs, direction="forward", **attrs)
        return [node], inputs, inits

    def _run(self, env) -> list:
        x = self._value(env, self.x)
        if x.ndim != 3:
            raise OnnxError(f"{self.label}: X has shape {x.shape}; it takes 3 dims")
        if self.layout:
            x = x.transpose(1, 0, 2)
        steps, batch = x.shape[:2]
        r = self._value(env, self.r)
        hidden = r.shape[-1]
        lens = None
        if self.lens:
            lens = self._value(env, self.lens).astype(np.int64).reshape(-1)
            if lens.shape != (batch,):
                raise OnnxError(f"{self.label}: sequence_lens has {lens.size} entries for a batch of {batch}")
            if (lens < 0).any() or (lens > steps).any():
                raise OnnxError(f"{self.label}: sequence_lens {lens.tolist()} outside 0..{steps}")
        initial = []
        for name in (self.h0, self.c0)[:self.n_states]:
            s = self._value(env, name) if name else np.zeros((self.dirs, batch, hidden), x.dtype)
            initial.append(s.transpose(1, 0, 2) if self.layout and name else s)
        weights = {"W": self.w, "R": self.r, "B": self.b, "P": self.p}
        y = np.zeros((steps, self.dirs, batch, hidden), x.dtype)
        finals = [np.zeros((self.dirs, batch, hidden), x.dtype) for _ in range(self.n_states)]
        for d, cell in enumerate(self.cells):
            order = self._order(steps, batch, lens, reverse=self.direction == "reverse" or d == 1)
            xd = x if order is None else np.take_along_axis(x, order[:, :, None], 0)
            extra = {n: self._value(env, weights[n.split("_")[0]])[d:d + 1] for n in cell.input_names[self.n_states + 1:]}
            states = [s[d:d + 1] for s in initial]
            for t in range(steps):
                new = cell({"x_t": xd[t:t + 1], **dict(zip(["h_in", "c_in"], states)), **extra})
                if lens is not None:
                    live = (t < lens)[None, :, None]
                    new = [np.where(live, n, s) for n, s in zip(new, states)]
                    y[t, d] = np.where(live[0], new[0][0], 0)
                else:
                    y[t, d] = new[0][0]
                states = new
            if order is not None:  # back to time order (the reordering is its own inverse)
                y[:, d] = np.take_along_axis(y[:, d], order[:, :, None], 0)
            for f, s in zip(finals, states):
                f[d] = s[0]
        if self.layout:
            return [y.transpose(2, 0, 1, 3)] + [f.transpose(1, 0, 2) for f in finals]
        return [y] + finals

    @staticmethod
    def _order(steps: int, batch: int, lens, reverse: bool):
        """(steps, batch) time indices a reverse direction reads: each row's own prefix backwards
        (the rest in place), or None going forward."""
        if not reverse:
            return None
        t = np.arange(steps)[:, None]
        if lens is None:
            return np.broadcast_to(steps - 1 - t, (steps, batch)).copy()
        return np.where(t < lens[None, :], lens[None, :] - 1 - t, t)

    def sub_models(self) -> list:
        return list(self.cells)

    def describe(self) -> str:
        return f"{self.label} stepped on the host ({self.reason})"
