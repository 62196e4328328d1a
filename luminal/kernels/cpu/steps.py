"""What a C library runs: its steps (`CStep`), the program (`CProgram`) and the launch table the
driver interprets. Apart from the renderer, which a runtime restored from artifacts never imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from luminal.hlir.ops import Node

if TYPE_CHECKING:
    from luminal.kernels.plan import Schedule


@dataclass
class CStep:
    """One step of the entry point: `name(out, inputs..., [err], dims...)`."""

    name: str
    output: Node
    inputs: list[Node]
    symbols: list[str]
    err: bool


@dataclass
class CProgram:
    """A graph's C library (its distinct kernels and the driver `lum_run`) and the steps its launch
    table runs, in order."""

    sources: list[str] | None  # its translation units (None: restored from artifacts, not rendered)
    identity: str | None  # the library as one unit: what its cache key hashes
    steps: list[CStep]
    schedule: Schedule
    symbols: list[str]  # the order of the `dims` argument
    kernels: list[str]  # the library's kernels, in the order of its `lum_kernels` table


def launch_table(program: CProgram, slot_of) -> list[int]:
    """The launch table `lum_run` interprets: per step its kernel (index into `program.kernels`),
    pointer codes and dim codes. `slot_of(node)` is ("buf", i) for weights, inputs and outputs
    (`bufs[i]`) or ("tmp", j) (`arena + offsets[j]`)."""
    index = {name: i for i, name in enumerate(program.kernels)}
    dim = {s: i for i, s in enumerate(program.symbols)}
    table: list[int] = []
    for st in program.steps:
        ptrs = []
        for n in (st.output, *st.inputs):
            kind, i = slot_of(n)
            ptrs.append(i if kind == "buf" else -1 - i)
        table += [index[st.name], len(ptrs), len(st.symbols), *ptrs, *(dim[s] for s in st.symbols)]
    return table
