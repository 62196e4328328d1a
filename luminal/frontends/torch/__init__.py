"""The PyTorch frontend: `torch.compile(model, backend="luminal")` and `luminal.compile(model, args)`.

Both lower to core ATen (Dynamo through aot_autograd, `luminal.compile` through torch.export and
`run_decompositions()`), and one ATen op table (`aten_ops` and the `aten_*` families, with the
symbolic-dim helpers in `dims`) turns the graph into HLIR (`fx_import`). `saved` calls a loaded
`.lum` like the model it came from, without torch: so this package imports torch lazily.
"""

from __future__ import annotations


def compile_forward(model, **options):
    """`model.forward = torch.compile(model.forward, backend="luminal")`, returns `model`.

    `torch.compile(model).generate()` never reaches the backend (generate is not forward);
    compiling the bound forward makes every step of `model.generate(...)` run on luminal.
    """
    import torch

    model.forward = torch.compile(model.forward, backend="luminal", options=options or None)
    return model


def __getattr__(name):
    if name == "backend":
        from luminal.frontends.torch.dynamo import backend

        return backend
    if name in ("compile", "CompiledModel"):
        from luminal.frontends.torch import export

        return getattr(export, name)
    raise AttributeError(f"module 'luminal.frontends.torch' has no attribute {name!r}")


__all__ = ["backend", "compile", "compile_forward", "CompiledModel"]
