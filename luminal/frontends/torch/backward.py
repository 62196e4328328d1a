"""Gradients through `luminal.compile`: in grad mode the call runs on the compiled joint graph.

A `CompiledModel` called under grad mode, with an input or parameter that requires grad, runs the
model through the Dynamo backend's training path (`dynamo.backend`, strict, on the model's
device): aot_autograd traces the joint forward and backward graph, torch's min-cut partitioner
splits it, and luminal compiles both halves. So the backward is compiled as the forward is (no
eager recomputation), saved tensors are torch's `save_for_backward` (a weight changed in place
between forward and backward raises torch's version-counter error, as eager does), state the
model updates in training mode (batch norm's running statistics) is updated once, and a double
backward raises torch's "does not currently support double backward" error rather than
dropping the model's terms. Calls without grad keep the graph torch.export compiled.
"""

from __future__ import annotations

import torch

from luminal.devices import Device


def needs_grad(flat_inputs, params) -> bool:
    """Whether a call must be differentiable: grad mode on and a tensor that requires grad."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (*flat_inputs, *params))


def training_call(module: torch.nn.Module, device: Device, optimize: bool | None, graphs: list,
                  dynamic: bool = False):
    """`module` compiled for grad mode: forward and backward on luminal (see the module docstring);
    `graphs` collects what luminal compiles for it (`dynamo.LuminalFunction`s, built on first use).
    `dynamic`: the model was compiled with symbolic dims; without them the graph is traced static,
    as the calls are (`CompiledModel._check`): Dynamo's cache belongs to the module's code, so its
    automatic dynamic shapes would give a second compile of the module, for other sizes, symbolic dims."""
    from luminal.frontends.torch.dynamo import backend

    options = {"device": device, "optimize": optimize, "strict": True}
    return torch.compile(module, dynamic=None if dynamic else False,
                         backend=lambda gm, example: backend(gm, example, options=options, graphs=graphs))


def training_reports(graphs: list) -> list[str]:
    """The compile reports of the grad-mode graphs built so far, forward and backward."""
    return [f"grad mode, {f.name}:\n" + str(f.imported.compiled.report()) for f in graphs if f.imported is not None]
