"""Strided rows of the C dialect's WindowReduce kernels (`conv._row_body`): a stride-s window
along the output row reads every s-th element per term, a strided load that does not vectorize
well; each output row's operand row is split first into s phase rows (phase p: its elements
s*j + p), so every term is a contiguous vector load. `strided_phases` for an operand read as it is,
`phases_side_by_side` the rows of one read through its padded copy (`conv_padded`). The terms, their
order and their values are unchanged, so are the bits.
"""

from __future__ import annotations

import functools
import itertools

from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Node
from luminal.kernels.render.cexpr import compute_type
from luminal.kernels.render.conv import UNROLL
from luminal.kernels.render.cstyle import is_inline_scalar, pointer_of, read, view_of

PHASE_MAX = 8192  # elements of one output row's phase buffers (on the stack)


def strided_phases(node: Node, inputs: list[Node], rows: list[str], inner: str) -> tuple[str, object] | None:
    """A strided window along the output row (a stride-2 depthwise conv or max pool): the operand
    that moves along the row reads element s*u*i + u*k of its row at output i and window position
    k (u the window axis's stride), a strided load per term that does not vectorize well. Split
    per output row into s phase rows, phase p holding the elements u*(s*j + p): position k is
    then phase k % s at j = i + k // s, a contiguous vector load. (the C filling the phase rows,
    one per phase and value of the other window axes, before the row's loop; the `term_read` of
    `hoisted_element` reading them), or None. The terms and their order are unchanged, so are
    the bits."""
    kind, r = node.arg
    nd = len(node.shape)
    kernel = node.src[0].shape[nd:]
    if not all(sym.is_static(d) for d in (*kernel, node.shape[-1])) or sym.product(kernel) > UNROLL:
        return None
    kernel, width = [int(d) for d in kernel], int(node.shape[-1])
    moving = [p for p, s in enumerate(node.src) if not sym.equal(view_of(s)[1].strides[nd - 1], 0)]
    if len(moving) != 1:
        return None
    src = node.src[moving[0]]
    base, st = view_of(src)
    strides = st.strides[nd - 1:]
    if st.mask is not None or is_inline_scalar(base) or not all(sym.is_static(w) for w in strides):
        return None
    step, window = int(strides[0]), [int(w) for w in strides[1:]]
    axis = next((a for a, u in enumerate(window) if u > 0 and step % u == 0 and step // u >= 2 and kernel[a] > 1), None)
    if axis is None:
        return None
    s, t = step // window[axis], compute_type(node.dtype)
    others = [a for a in range(r) if a != axis]
    groups = list(itertools.product(*(range(kernel[a]) for a in others)))
    length = {p: width + max(k // s for k in range(p, kernel[axis], s)) for p in range(min(s, kernel[axis]))}
    if len(groups) * sum(length.values()) > PHASE_MAX:
        return None
    common = min(length.values())
    fills = [f"{t} ph{g}_{p}[{n}];" for g in range(len(groups)) for p, n in length.items()]

    def fill(g: int, p: int) -> str:
        k = dict(zip(others, groups[g])) | {axis: p}
        return f"ph{g}_{p}[j] = (({t}){read(src, rows + ['j'] + [f'{k[a]}LL' for a in range(r)], pointer_of(src, inputs))});"

    for g in range(len(groups)):
        # the phases side by side (an interleaved load the compiler vectorizes), then their tails
        fills.append(f"#pragma omp simd\n        for (long long j = 0; j < {common}LL; ++j) {{ {' '.join(fill(g, p) for p in length)} }}")
        fills += [f"for (long long j = {common}LL; j < {n}LL; ++j) {fill(g, p)}" for p, n in length.items() if n > common]

    def term_read(p: int, k: list[int]) -> str | None:
        if p != moving[0]:
            return None
        g = groups.index(tuple(k[a] for a in others))
        return f"ph{g}_{k[axis] % s}[{inner} + {k[axis] // s}LL]"

    return "\n        ".join(fills), term_read


def phases_side_by_side(g: int, length: dict, s: int, lo_w: int, hi_w: int, t: str, fill: str, conds: list[str],
                        value: str, declare: bool = True) -> str:
    """`conv_padded.padded_rows`' phase buffers of one window row (`length`: phase -> its length; one
    phase at stride 1): the copy's elements s*j + p of the unpadded input row, the fill where the
    pad's mask is false. Every phase is filled in one vector loop over the range of j all of them
    read from the input, as `strided_phases` fills its rows (an interleaved load the compiler
    vectorizes, where a loop per phase loaded the whole input row for each), each phase's ends
    before and after it by itself. Every element is the copy's value. `declare`: the buffers
    `pd{g}_{p}` declared here (else pointers the caller declared: `conv_padded.plane_rows`)."""
    phases, sep = list(length), "\n          "
    bounds, before, after, copies = [], [], [], []
    for p, n in length.items():
        buf = f"pd{g}_{p}"
        bounds.append(f"""const long long lo{p} = in_rows ? lum_min(lum_max({lo_w - p + s - 1}LL, 0) / {s}, {n}LL) : {n}LL;
          const long long hi{p} = in_rows ? lum_max(lo{p}, lum_min(lum_max({hi_w - p + s - 1}LL, 0) / {s}, {n}LL)) : {n}LL;""")
        copy = f"{{ const long long x = {s}LL * j + {p}LL; {buf}[j] = (({t}){value}); }}"
        copies.append(copy)
        before.append(f"for (long long j = 0; j < lo{p}; ++j) {buf}[j] = {fill};")
        after.append(f"for (long long j = hi{p}; j < {n}LL; ++j) {buf}[j] = {fill};")
        if len(phases) > 1:  # the phase's inputs outside the common range (one phase: none)
            before.append(f"for (long long j = lo{p}; j < lum_min(hi{p}, c_lo); ++j) {copy}")
            after.insert(-1, f"for (long long j = lum_max(c_hi, lum_min(hi{p}, c_lo)); j < hi{p}; ++j) {copy}")
    c_lo = functools.reduce(lambda a, b: f"lum_max({a}, {b})", (f"lo{p}" for p in phases))
    c_hi = functools.reduce(lambda a, b: f"lum_min({a}, {b})", (f"hi{p}" for p in phases))
    return f"""{" ".join(f"{t} pd{g}_{p}[{n}];" for p, n in length.items()) if declare else ""}
        {{
          const int in_rows = {' && '.join(conds) or '1'};
          {sep.join(bounds)}
          /* the range of j every phase reads from the input */
          const long long c_lo = {c_lo};
          const long long c_hi = lum_max(c_lo, {c_hi});
          {sep.join(before)}
          #pragma omp simd
          for (long long j = c_lo; j < c_hi; ++j) {{ {" ".join(copies)} }}
          {sep.join(after)}
        }}"""
