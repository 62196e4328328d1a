"""What a C library runs: its steps (`CStep`), the program (`CProgram`: the library's kernels and
the steps in launch order) and the launch table the driver interprets (`launch_table`).

Kept apart from the renderer (`render.py`, `program.py`) so that a process restoring a runtime
from the compile cache's artifacts, which renders nothing, does not import it.
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
    """A graph's C library and the steps its launch table runs (buffers by role).

    The library holds only the graph's distinct kernels (sorted by name: the same set of kernels
    gives the same source, whatever the depth or the model) and the fixed driver `lum_run`; the
    order of launches is data (`launch_table`), so the source and its build time do not grow
    with the number of layers."""

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
