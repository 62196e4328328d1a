"""Gradients through `luminal.compile`: luminal runs the forward, torch recomputes it for the backward.

A `CompiledModel` called under grad mode, with an input or parameter that requires grad, runs
through `LuminalForward` (a `torch.autograd.Function`): the outputs are luminal's and join the
autograd graph; their backward re-runs the eager model (the `nn.Module` given, or the
`ExportedProgram`'s module) on the saved inputs and takes its vector-Jacobian product, as
activation checkpointing does. Gradients are eager torch's; nothing is saved but the inputs.
A model that mutates its state (buffers, inputs) is refused: the recomputation would update it
a second time.
"""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree


def needs_grad(flat_inputs, params) -> bool:
    """Whether a call must be differentiable: grad mode on and a tensor that requires grad."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (*flat_inputs, *params))


class LuminalForward(torch.autograd.Function):
    """apply(run, eager, args, kwargs, positions, *inputs_then_params) -> luminal's flat tensor
    outputs; `positions`: where the differentiable inputs sit among the flat arguments."""

    @staticmethod
    def forward(ctx, run, eager, args, kwargs, positions, *tensors):
        ctx.eager, ctx.call, ctx.positions = eager, (args, kwargs), positions
        ctx.save_for_backward(*tensors[: len(positions)])  # torch checks they are not modified in place
        ctx.params = tensors[len(positions):]
        outs = tuple(t for t in run() if isinstance(t, torch.Tensor))
        ctx.mark_non_differentiable(*(t for t in outs if not (t.is_floating_point() or t.is_complex())))
        return outs

    @staticmethod
    def backward(ctx, *grads):
        inputs = [t.detach().requires_grad_() for t in ctx.saved_tensors]
        flat, spec = pytree.tree_flatten(ctx.call)
        for i, t in zip(ctx.positions, inputs):
            flat[i] = t
        args, kwargs = pytree.tree_unflatten(flat, spec)
        with torch.enable_grad():
            outs = [o for o in pytree.tree_leaves(ctx.eager(*args, **kwargs)) if isinstance(o, torch.Tensor)]
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        wrt = [*inputs, *ctx.params]
        got = torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True) if pairs else [None] * len(wrt)
        return (None, None, None, None, None, *got)


def differentiable_call(run, eager, args, kwargs, params, out_spec):
    """`run()` (luminal's flat user outputs) joined to the autograd graph, in the model's structure."""
    flat_in = pytree.tree_leaves((args, kwargs))
    positions = [i for i, t in enumerate(flat_in) if isinstance(t, torch.Tensor) and t.requires_grad]
    params = [p for p in params if p.requires_grad]
    values = []

    def run_and_keep():
        values.extend(run())
        return values

    outs = iter(LuminalForward.apply(run_and_keep, eager, args, kwargs, positions,
                                     *(flat_in[i] for i in positions), *params))
    return pytree.tree_unflatten([next(outs) if isinstance(v, torch.Tensor) else v for v in values], out_spec)
