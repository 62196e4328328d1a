"""Hugging Face's KV-cache objects as pytrees, so that torch.export (and `luminal.compile` on it)
traces a model that returns one.

A causal LM called with its config's default `use_cache=True` returns its keys and values in a
`transformers.DynamicCache`; an encoder-decoder (T5, BART, Whisper) in an `EncoderDecoderCache`.
torch.export rejects both ("Found <class '...DynamicCache'> in output, which is not a known
type") unless they are registered pytree nodes. transformers ships the registration for
`DynamicCache` (`integrations.executorch.register_dynamic_cache_export_support`, what its own
export helpers call) but not for `EncoderDecoderCache`: that one is registered here, as its two
`DynamicCache`s. The compiled model then returns the cache as eager does, its tensors luminal's.

Registration is process-wide in torch's pytree table, as transformers' own is, and is done only
when transformers is already imported (a model from it is being compiled): never an import of
transformers for a model that does not come from it.
"""

from __future__ import annotations

import re
import sys

from torch.utils import _pytree as pytree

from luminal.errors import UnsupportedError


def register() -> None:
    """Register transformers' `DynamicCache` and `EncoderDecoderCache` as pytree nodes where
    transformers is imported and they are not registered yet (idempotent, thread-safe as torch's
    table is: a second registration of a type is caught)."""
    if "transformers" not in sys.modules:
        return
    try:
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache
    except ImportError:  # a transformers too old for these classes: nothing of theirs to trace
        return
    if DynamicCache not in pytree.SUPPORTED_NODES:
        try:
            from transformers.integrations.executorch import register_dynamic_cache_export_support
        except ImportError:  # a transformers without the helper: `unknown_output` explains the error
            return
        register_dynamic_cache_export_support()
    if EncoderDecoderCache not in pytree.SUPPORTED_NODES and DynamicCache in pytree.SUPPORTED_NODES:
        _register(EncoderDecoderCache, lambda c: ([c.self_attention_cache, c.cross_attention_cache], None),
                  lambda caches, _context: EncoderDecoderCache(*caches))


def _register(cls, flatten, unflatten) -> None:
    try:
        pytree.register_pytree_node(cls, flatten, unflatten, serialized_type_name=f"{cls.__module__}.{cls.__qualname__}")
    except ValueError as exc:  # registered meanwhile by another thread or by transformers itself
        if "already registered" not in str(exc):
            raise


_UNKNOWN = re.compile(r"Found <class '([^']+)'> in (input|output), which is not a known type")


def unknown_type_error(exc: BaseException, model) -> UnsupportedError | None:
    """torch.export's error for an input or output of a type that is not a pytree, as a luminal
    error naming the type and what to do; None for any other error."""
    found = _UNKNOWN.search(str(exc))
    if found is None:
        return None
    type_name, where = found.groups()
    hint = ("Call it with use_cache=False (or set model.config.use_cache = False) to leave the cache out, "
            "use luminal.compile_forward(model) for generate() with the cache, or torch.compile(model, "
            "backend=\"luminal\"), whose Dynamo frontend handles it" if "Cache" in type_name else
            "Register it with torch.utils._pytree.register_pytree_node, or use torch.compile(model, "
            "backend=\"luminal\"), whose Dynamo frontend handles it")
    return UnsupportedError(f"{type(model).__name__} has an {where} of type {type_name}, which torch.export "
                            f"cannot trace (not a registered pytree node, and luminal has no registration "
                            f"for it). {hint}.")
