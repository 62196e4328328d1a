"""The op table of the ONNX frontend: one small function per op, versioned by opset.

    @onnx_op("Split", since=13, known=(1,))
    def split(c, x, split=None, *, axis=0, num_outputs=None): ...

An op function gets a `NodeContext` first, then one positional argument per node input: a
luminal `Tensor` (None for an absent optional input), except for the positions named in
`known`, which receive the value computed at compile time (a NumPy array, `object` dtype when
it holds symbolic dims) -- shapes, axes, pads, split sizes. Attributes arrive as keyword
arguments (ONNX spelling). It returns a Tensor, a `Known` value, or a list of them.
`lookup(op, opset)` picks the newest version whose `since` is <= the model's opset.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class OpImpl:
    fn: Callable
    since: int
    known: tuple[int, ...]
    variadic: bool


REGISTRY: dict[tuple[str, str], list[OpImpl]] = {}


def onnx_op(*names: str, since: int = 1, known=(), domain: str = "", variadic: bool = False):
    """Register `fn` as the implementation of op(s) `names` from opset `since` on."""

    def register(fn: Callable) -> Callable:
        for name in names:
            impls = REGISTRY.setdefault((domain, name), [])
            impls.append(OpImpl(fn, since, tuple(known), variadic))
            impls.sort(key=lambda i: i.since)
        return fn

    return register


def lookup(op_type: str, domain: str, opset: int) -> OpImpl | None:
    impls = REGISTRY.get((_domain(domain), op_type))
    if not impls:
        return None
    i = bisect.bisect_right([x.since for x in impls], opset)
    return impls[i - 1] if i else None


def _domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


PRIVATE_DOMAINS = "ai.luminal."  # luminal's own ops (e.g. a host-stepped cell's projected form), not for models


def supported_ops() -> list[str]:
    return sorted(name if not dom else f"{dom}.{name}" for dom, name in REGISTRY if not dom.startswith(PRIVATE_DOMAINS))
