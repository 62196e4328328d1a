"""The PyTorch frontend: `torch.compile(model, backend="luminal")` and `luminal.compile(model, args)`.

Both lower to core ATen (Dynamo through aot_autograd, `luminal.compile` through torch.export and
`run_decompositions()`), and one ATen op table (`aten_ops` and the `aten_*` families) turns the
graph into HLIR (`fx_import`).
"""

from __future__ import annotations

from luminal.frontends.torch.dynamo import backend
from luminal.frontends.torch.export import CompiledModel, compile  # noqa: A004


def compile_forward(model, **options):
    """`model.forward = torch.compile(model.forward, backend="luminal")`, returns `model`.

    `torch.compile(model).generate()` never reaches the backend (generate is not forward);
    compiling the bound forward makes every step of `model.generate(...)` run on luminal.
    """
    import torch

    model.forward = torch.compile(model.forward, backend="luminal", options=options or None)
    return model


__all__ = ["backend", "compile", "compile_forward", "CompiledModel"]
