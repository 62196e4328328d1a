"""The `torch_dynamo_backends` entry point: `torch.compile(model, backend="luminal")`.

Kept tiny and import-light: torch discovers backends by importing this module.
"""

from __future__ import annotations


def luminal_backend(gm, example_inputs, **kwargs):
    """Dynamo backend (see `luminal.frontends.torch.dynamo.backend`)."""
    from luminal.frontends.torch.dynamo import backend

    return backend(gm, example_inputs, **kwargs)
