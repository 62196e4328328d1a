"""RNN, GRU and LSTM over a sequence whose length the inputs decide, stepped on the host.

`ops_rnn.py` unrolls a recurrence over the sequence length, so a model whose length is symbolic
would compile once per distinct length. Here the recurrence runs as a Python loop instead
(a host node of `staged.py`): its cell is the very same op on a sequence of one step (forward,
layout 0, the direction's slice of the weights), one such node per direction in one graph,
compiled once and called once per step with the states carried on the host; the loop calls the
compiled runtime bound once per call's shapes (`SubModel.bound`: the per-call checks and
bindings of the layers above it done once). When
W is an initializer, X @ W^T of every step and direction is one GEMM on the host before the loop
and the cell is the op of `ops_rnn.PROJECTED`, which takes it (`_projection`). The
host does what ONNX defines around the cell: the reverse direction walks the sequence backwards
(each batch row's own `sequence_lens` prefix), a row past its length keeps its state and outputs
zeros, bidirectional runs both directions and stacks them, layout 1 is transposed in and out,
and a sequence of no step returns the initial states.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from luminal.frontends.onnx.errors import OnnxError, OnnxImportError
from luminal.frontends.onnx.host_step import HostStep
from luminal.frontends.onnx.importer import attr_value, initializer_array
from luminal.frontends.onnx.ops_rnn import MAX_STEPS, PROJECTED

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
        # one step of every direction in one graph (a call per step, not per step and direction),
        # for a batch of any size: the cell compiles once for every length and batch
        self.hidden = self.attrs.get("hidden_size") or self._dim(self.r, -1)
        self.w_t = self._projection()
        nodes, inputs, inits, declared = [], [], [], {}
        self.weight_inputs: list[tuple[str, str, int]] = []  # (cell input, model value, direction) sliced per call
        for d in range(self.dirs):
            nodes.append(self._cell_node(d, inits))
            for name in self._step_names(d):
                inputs.append(name)
                width = self.hidden
                if name.startswith("x_t"):
                    width = self._dim(self.w, -1) if self.w_t is None else self.w_t.shape[1] // self.dirs
                declared[name] = helper.make_tensor_value_info(name, 0, [1, "batch", width])
        inputs += [name for name, _, _ in self.weight_inputs]
        outs = [o for d in range(self.dirs) for o in (f"h_out{d}", f"c_out{d}")[:self.n_states]]
        self.cell = model.sub_model(f"{self.label} cell", nodes, inputs, outs, declared=declared, initializers=inits,
                                    opsets=[helper.make_opsetid(PROJECTED, 1)] if self.w_t is not None else [])

    def _projection(self) -> np.ndarray | None:
        """W^T of every direction, (input, dirs * gates * hidden), when W is a float32/float64
        initializer: the host projects every step's input with one GEMM before stepping, and the
        cell (the op of `ops_rnn.PROJECTED`) takes X @ W^T: a small GEMM per step less, which
        pays from a few steps on (the host GEMM is one call more). None: the cell projects each
        step itself."""
        init = self.model.initializers.get(self.w)
        if init is None or self.w in self.model.env_names:
            return None
        w = initializer_array(init)
        if w.ndim != 3 or w.dtype not in (np.float32, np.float64):
            return None
        return np.ascontiguousarray(w.reshape(-1, w.shape[-1]).T)

    def _step_names(self, d: int) -> list[str]:
        """The cell's per-step inputs of direction d: x_t, h_in (and c_in)."""
        return [f"x_t{d}", f"h_in{d}", f"c_in{d}"][:1 + self.n_states]

    def _dim(self, name: str, axis: int):
        """A dim of an initializer weight, or None (a symbol) when the weight is computed."""
        init = self.model.initializers.get(name)
        return int(init.dims[axis]) if init is not None and init.dims and name not in self.model.env_names else None

    def _weight(self, name: str, d: int, tag: str, inits: list) -> str:
        """The direction-d slice of a weight: an initializer of its own when the weight is one,
        else an input the host slices per call."""
        if not name:
            return ""
        init = self.model.initializers.get(name)
        sliced = f"{tag}_{d}"
        if init is not None and name not in self.model.env_names:
            inits.append(numpy_helper.from_array(np.ascontiguousarray(initializer_array(init)[d:d + 1]), sliced))
        else:
            self.weight_inputs.append((sliced, name, d))
        return sliced

    def _cell_node(self, d: int, inits: list) -> onnx.NodeProto:
        """The op on a one-step sequence, forward, with direction d's weights and activations."""
        x_t, h_in, *c_in = self._step_names(d)
        w = self._weight(self.w, d, "W", inits) if self.w_t is None else ""
        r = self._weight(self.r, d, "R", inits)
        b = self._weight(self.b, d, "B", inits)
        cell_in = [x_t, w, r, b, "", h_in]
        if self.op == "LSTM":
            cell_in += [c_in[0], self._weight(self.p, d, "P", inits)]
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
        outs = ["", f"h_out{d}"] + ([f"c_out{d}"] if self.op == "LSTM" else [])
        while cell_in and not cell_in[-1]:
            cell_in.pop()
        return helper.make_node(self.op, cell_in, outs, name=f"cell{d}", direction="forward",
                                domain=PROJECTED if self.w_t is not None else "", **attrs)

    def _run(self, env) -> list:
        x = self._value(env, self.x)
        if x.ndim != 3:
            raise OnnxError(f"{self.label}: X has shape {x.shape}; it takes 3 dims")
        if self.layout:
            x = x.transpose(1, 0, 2)
        steps, batch = x.shape[:2]
        if self.w_t is not None:  # every step's X @ W^T, both directions, as one GEMM
            if x.dtype != self.w_t.dtype or x.shape[-1] != self.w_t.shape[0]:
                raise OnnxError(f"{self.label}: X is {x.dtype}{list(x.shape)} and W^T {self.w_t.dtype}{list(self.w_t.shape)}")
            x = (x.reshape(-1, x.shape[-1]) @ self.w_t).reshape(steps, batch, self.w_t.shape[1])
        hidden = self.hidden or self._value(env, self.r).shape[-1]
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
        y = np.zeros((steps, self.dirs, batch, hidden), x.dtype)
        xs, orders = [], []
        for d in range(self.dirs):
            order = self._order(steps, batch, lens, reverse=self.direction == "reverse" or d == 1)
            xd = x if self.dirs == 1 or self.w_t is None else x[:, :, d * x.shape[-1] // 2:(d + 1) * x.shape[-1] // 2]
            xs.append(xd if order is None else np.take_along_axis(xd, order[:, :, None], 0))
            orders.append(order)
        states = [[s[d:d + 1] for s in initial] for d in range(self.dirs)]  # per direction: h (and c)
        feeds = {name: self._value(env, value)[d:d + 1] for name, value, d in self.weight_inputs}
        live = None
        step = None  # the compiled cell's runtime, bound once for this call's shapes (`SubModel.bound`)
        for t in range(steps):
            for d in range(self.dirs):
                feeds.update(zip(self._step_names(d), [xs[d][t:t + 1], *states[d]]))
            if step is None:
                step = self.cell.bound(feeds)
            outs = step(feeds)
            if lens is not None:
                live = (t < lens)[None, :, None]
            for d in range(self.dirs):
                new = outs[d * self.n_states:(d + 1) * self.n_states]
                if live is not None:
                    new = [np.where(live, n, s) for n, s in zip(new, states[d])]
                    y[t, d] = np.where(live[0], new[0][0], 0)
                else:
                    y[t, d] = new[0][0]
                states[d] = new
        for d, order in enumerate(orders):
            if order is not None:  # back to time order (the reordering is its own inverse)
                y[:, d] = np.take_along_axis(y[:, d], order[:, :, None], 0)
        finals = [np.concatenate([states[d][k] for d in range(self.dirs)], 0) if steps else initial[k].copy()
                  for k in range(self.n_states)]
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
        return [self.cell]

    def describe(self) -> str:
        return f"{self.label} stepped on the host ({self.reason})"
