"""What attention's C and CUDA kernels share (`attention.py`, `attention_gemm.py`): the operands
and their reader, a score's C (scaled, masked, rounded as the unfused ops round), where the mask
varies, exp's slow-path floor, and the store of a task's finished rows."""

from __future__ import annotations

from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, attention_arg
from luminal.kernels.render.cexpr import c_dim, c_literal
from luminal.kernels.render.cstyle import cast_value, current, expression, pointer_of, read, store_value, view_of


def _operands(node: Node):
    """(q, kt, v, mask, at): `at(x, *index)` reads operand x; `mask(batch index, i, j)` is the
    mask's value at a score (its buffer, or its expression over its inputs), None without one."""
    q, kt, v, *srcs = node.src
    inputs = current()[1]
    at = lambda x, *idx: read(x, list(idx), pointer_of(x, inputs))  # noqa: E731
    expr = attention_arg(node.arg)[2]
    if not srcs:
        mask = None
    elif expr is None:
        mask = lambda z, i, j: at(srcs[0], *z, i, j)  # noqa: E731
    else:
        mask = lambda z, i, j: expression(expr, lambda k: at(srcs[k], *z, i, j))  # noqa: E731
    return q, kt, v, mask, at


def _score(node: Node, t: str, mask_code: str | None) -> str:
    """The C of score `x` (q . k accumulated in t) after the scale and the mask, each step
    rounded as the unfused op rounds: to the f16/bf16 of a half node (MatMul, Mul and Add
    round there), in t otherwise. `mask_code`: the mask's value at this score (None: no mask);
    a select mask keeps the score where it is (non)zero and gives the fill elsewhere."""
    scale, _, _, select, half, transform = attention_arg(node.arg)
    lit = DType.F32 if half is not None else node.dtype  # the scale and fill are exact in it
    rnd = (lambda e: cast_value(DType.F32, half, e)) if half is not None else (lambda e: e)  # noqa: E731
    score = rnd("x")
    if scale is not None:
        score = rnd(f"({t})({score} * ({t}){c_literal(scale, lit)})")
    if transform is not None:  # a pointwise function of the scores (a soft cap), in the node's dtype as its region
        scaled = score
        score = f"({t})({expression(transform, lambda k: f'(({node.dtype.ctype})({scaled}))')})"
    if mask_code is not None and select is None:
        score = rnd(f"({t})({score} + ({t})({mask_code}))")
    elif mask_code is not None:
        fill, keep = select
        score = f"(({mask_code}) {'!=' if keep else '=='} 0 ? {score} : ({t}){c_literal(fill, lit)})"
    return score


def _exp_floor(t: str) -> str:
    """C declaring LUM_LO, below which exp's vector form takes a slow path (-inf included)."""
    lo = "-708.0" if t == "double" else "-87.0f"
    return f"""{t} LUM_LO = {lo};  /* exp's vector form takes a slow path below this (-inf included); exp of it is normal */
#if defined(__GNUC__) && defined(__x86_64__)
    __asm__("" : "+x"(LUM_LO));  /* opaque: GCC would fold exp(LUM_LO) and, threading the clamp, pass the raw exponent */
#endif"""


def _literals(t: str) -> tuple[str, str, str]:
    """C literals of -inf, +inf and NaN in compute type `t`."""
    wide = DType.F64 if t == "double" else DType.F32
    return tuple(c_literal(float(x), wide) for x in ("-inf", "inf", "nan"))


def _empty_row(node: Node, acc: str, nan: str) -> str:
    """C of an output of a row whose scores are all -inf (or that has no keys): `acc` (0 @ v,
    NaN where v is) under the safe softmax or without keys, else NaN."""
    return acc if node.arg[1] else f"(N == 0 ? {acc} : {nan})"


def _store_rows(node: Node, t: str) -> str:
    """C storing a task's nq rows of acc (DV apart) as outputs: NaN for a row with a NaN or +inf
    score, an all -inf row as the (safe) softmax gives it, else acc / the row's sum."""
    ninf, _, nan = _literals(t)
    empty = _empty_row(node, "o[c]", nan)
    return f"""for (int i = 0; i < nq; ++i) {{
        const {t}* o = acc + (long long)i * DV;
        const long long dst = (bz * M + i0 + i) * DV;
        if (badrow[i]) for (long long c = 0; c < DV; ++c) out[dst + c] = {store_value(node.dtype, nan)};
        else if (mrow[i] == {ninf}) for (long long c = 0; c < DV; ++c) out[dst + c] = {store_value(node.dtype, empty)};
        else for (long long c = 0; c < DV; ++c) out[dst + c] = {store_value(node.dtype, "o[c] / lrow[i]")};
      }}"""


def _mask_varies(node: Node) -> tuple[bool, bool]:
    """(along the queries, along the keys): whether the mask's value may change there (a view
    steps, or its padding mask bounds, along that axis)."""
    varies = [False, False]
    for x in node.src[3:]:
        _, st = view_of(x)
        for k, axis in enumerate((-2, -1)):
            bounded = st.mask is not None and not (sym.equal(st.mask[axis][0], 0) and sym.equal(st.mask[axis][1], st.shape[axis]))
            varies[k] |= not sym.equal(st.strides[axis], 0) or bounded
    return varies[0], varies[1]


def _v_rows(v: Node, z: list[str], t: str, at) -> tuple[str, str, bool, str]:
    """(the C pointer to row j0 + j of v, the C staging the block's nk rows into vb (DV apart),
    whether v is read in place, the C distance between rows): in place where its view is plain
    rows of the compute type."""
    vbase, vst = view_of(v)
    if vst.mask is None and sym.equal(vst.strides[-1], 1) and vbase.dtype.ctype == t:
        terms = [c_dim(vst.offset)] + [f"{i} * {c_dim(st)}" for i, st in zip(z, vst.strides[:-2])]
        step = c_dim(vst.strides[-2])
        return f"({pointer_of(v, current()[1])} + {' + '.join(terms + [f'(j0 + j) * {step}'])})", "", True, step
    stage = f"for (int j = 0; j < nk; ++j) for (long long c = 0; c < DV; ++c) vb[j * DV + c] = ({t})({at(v, *z, '(j0 + j)', 'c')});"
    return "(vb + j * DV)", stage, False, "DV"


def _k_rows(kt: Node, z: list[str], t: str, at) -> tuple[str, str, str]:
    """(the C pointer to key j0 + j's D values, the C staging the block's nk keys into kb as
    rows, D apart, the C distance between keys): read in place where kᵀ is a transposed view
    of plain rows of the compute type (its head axis steps by 1), else staged key by key."""
    kbase, kst = view_of(kt)
    if kst.mask is None and sym.equal(kst.strides[-2], 1) and kbase.dtype.ctype == t:
        terms = [c_dim(kst.offset)] + [f"{i} * {c_dim(st)}" for i, st in zip(z, kst.strides[:-2])]
        step = c_dim(kst.strides[-1])
        return f"({pointer_of(kt, current()[1])} + {' + '.join(terms + [f'(j0 + j) * {step}'])})", "", step
    stage = f"for (int j = 0; j < nk; ++j) for (long long c = 0; c < D; ++c) kb[j * D + c] = ({t})({at(kt, *z, 'c', '(j0 + j)')});"
    return "(kb + j * D)", stage, "D"
