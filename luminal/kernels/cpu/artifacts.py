"""A `cpu` runtime of a later process without rendering C: `CpuRuntime.artifacts()` (the library's
key, its kernels, the dims, per step its kernel and input positions) checked against the graph and
the library (`restore`), whose steps are rebuilt from the graph's nodes, never from the table's
pointers (an edited table could hand a kernel a smaller buffer than it reads).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
from pathlib import Path

from luminal.kernels.cpu import build
from luminal.kernels.cpu.steps import CProgram, CStep

LOG = logging.getLogger("luminal")
ARTIFACTS_FORMAT = 1
_code: list[str] = []


def code_version() -> str:
    """A hash of what decides a graph's C and its build (renderers, plan, flags, compiler)."""
    if not _code:
        root = Path(__file__).parent.parent
        h = hashlib.sha256()
        # (the C headers too: a kernel's contract, a micro-kernel's overread, say, may live there)
        for f in sorted([*root.glob("cpu/*.py"), *root.glob("cpu/c/*"), *root.glob("render/*.py"), root / "plan.py"]):
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
        h.update("\0".join(build.flags()).encode())
        _code.append(h.hexdigest()[:16])
    cc = build.compiler()
    try:  # the compiler by its file (no `cc --version` process on the warm path)
        st = os.stat(os.path.realpath(cc)) if cc else None
    except OSError:
        st = None
    return f"{_code[0]} {cc} {st.st_size}:{st.st_mtime_ns}" if st else f"{_code[0]} none"


class ArtifactMismatch(Exception):
    pass


def restore(outputs: list, data) -> tuple[CProgram, Path] | None:
    """(the program without source, the library) that `data` (an `artifacts()` dict) describes
    for the graph `outputs`, or None (debug-logged) when anything fails to check out."""
    try:
        return _restored(outputs, data)
    except (ArtifactMismatch, AttributeError, KeyError, TypeError, ValueError, IndexError, OSError) as exc:
        LOG.debug("cpu runtime: stored artifacts not used: %s: %s", type(exc).__name__, exc)
        return None


def _restored(outputs, data) -> tuple[CProgram, Path] | None:
    if not isinstance(data, dict) or data.get("format") != ARTIFACTS_FORMAT or data.get("code") != code_version():
        raise ArtifactMismatch("another format or code version")
    kernels, symbols, table = data["kernels"], data["symbols"], data["steps"]
    if not (isinstance(kernels, list) and isinstance(symbols, list) and isinstance(table, list)
            and all(type(x) is str for x in kernels + symbols) and all(type(x) is int for x in table)):
        raise ArtifactMismatch("malformed")
    library = build.cached(str(data["library"]))
    if library is None:
        raise ArtifactMismatch("the library is no longer in the cache")
    lib = ctypes.CDLL(str(library))
    count = ctypes.c_int.in_dll(lib, "lum_kernel_count").value
    names = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(lib, "lum_kernel_names"))).decode().split()
    arity = list((ctypes.c_int * (3 * max(count, 1))).in_dll(lib, "lum_kernel_arity"))
    if names != kernels or count != len(kernels):
        raise ArtifactMismatch("the library holds other kernels")
    from luminal.kernels.plan import Schedule  # the renderer's modules: not on a cold first call's path (`tiered`)

    sched = Schedule.build(outputs)
    known = {str(s) for n in sched.inputs for d in n.shape for s in getattr(d, "free_symbols", ())}
    if not set(symbols) <= known:
        raise ArtifactMismatch("dims the inputs do not bind")
    if any(x < 0 for x in table):
        raise ArtifactMismatch("a negative entry")
    from luminal.kernels.render.cstyle import buffer_sources, symbols_of

    buffers = [*sched.weights, *sched.inputs, *sched.nodes]
    steps, i, prefix, fused = [], 0, {}, None
    for s, node in enumerate(sched.nodes):  # a step: kernel, n_in, input positions, n_sym, dim indices
        k, n_in = table[i], table[i + 1]
        where = table[i + 2:i + 2 + n_in]
        i += 3 + n_in + table[i + 2 + n_in]
        name, absorbed = kernels[k], False
        # The operands are the graph's, not the table's (an edited table could hand a kernel a smaller
        # buffer than it reads, or another dim): the table only picks the kernel, and must agree.
        inputs, syms = buffer_sources(node), symbols_of(node, extra=[x.shape for x in node.src])
        stored = [buffers[j] for j in where]
        if len(stored) != len(inputs) or any(a is not b for a, b in zip(stored, inputs)):
            fused = _fused_steps(sched, data["conv"]) if fused is None else fused  # a convolution's fused GEMM and its copies
            step = fused.get(id(node))
            if step is None or step.name != name or len(stored) != len(step.inputs) or any(
                    a is not b for a, b in zip(stored, step.inputs)):
                raise ArtifactMismatch(f"step {s} ({node.op.title}) reads other buffers than its node")
            inputs, syms, absorbed = step.inputs, step.symbols, step.absorbed
        if (arity[3 * k] != 1 + len(inputs) or arity[3 * k + 1] != len(syms) or not set(syms) <= set(symbols)
                or not name.startswith(prefix.get(node.op) or prefix.setdefault(node.op, node.op.title.lower() + "_"))):
            raise ArtifactMismatch(f"step {s} does not fit its node ({node.op.title}) or its kernel ({name})")
        steps.append(CStep(name, node, inputs, syms, bool(arity[3 * k + 2]), absorbed))
    if i != len(table):
        raise ArtifactMismatch("a table of another length")
    return CProgram(None, None, steps, sched, symbols, kernels), library


def _fused_steps(sched, conv) -> dict[int, CStep]:
    """The steps `program.render_program` fuses (a convolution's im2col GEMM), by id of their node,
    named as it names them, rendered as the library's were (`conv`: `choices.conv_key`'s record)."""
    from luminal.kernels.cpu import conv_direct
    from luminal.kernels.cpu.program import _fused_step, _fusions, in_place_concats, step_of

    if not isinstance(conv, str):
        raise ArtifactMismatch("no record of the convolutions' rendering")
    plans, absorbed = _fusions(sched)
    in_place = in_place_concats(sched, absorbed)
    steps = {}
    with conv_direct.chosen(None if conv.startswith("auto:") else conv):
        for node in sched.nodes:
            found = _fused_step(node, plans, absorbed, in_place)
            if found is not None:
                steps[id(node)] = step_of(found, node, id(node) in absorbed)[1]
    return steps
