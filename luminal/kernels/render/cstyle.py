"""What every kernel generator shares, in every dialect: `code_for_op` (each pointwise op's C by
compute type, as tinygrad's `renderer/cstyle.py`), reads through views, signatures, `KernelSpec`
and CUDA's index variants. Values are loaded in their compute type (f16/bf16 widen to float) and
narrowed only when stored.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass, field

from luminal.errors import UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import ConstantArray, Expr, Node, Op
from luminal.hlir.shape import ShapeTracker
from luminal.kernels.render import inline
from luminal.kernels.render.cexpr import active, c_dim, c_literal, compute_type, dims_symbols, index_math, index_type
from luminal.kernels.render.inline import view_of

LIBM = {"float": "f", "double": ""}  # libm suffix per compute type
INT_MOD = "lum_imod"  # a kernel whose C calls it takes the error flag
UNSIGNED = {"int": "unsigned int", "long long": "unsigned long long"}


def wrapping(t: str, a: str, op: str, b: str) -> str:
    """`a op b` (+ or *) in compute type `t`, wrapping on integers as torch's: signed overflow is UB
    that compilers act on, so integers compute in the unsigned type of their width and convert back."""
    u = UNSIGNED.get(t)
    return f"({a} {op} {b})" if u is None else f"(({t})(({u})({a}) {op} ({u})({b})))"


code_for_op = {
    Op.EXP2: lambda t, x: f"exp2{LIBM[t]}({x})",
    Op.LOG2: lambda t, x: f"log2{LIBM[t]}({x})",
    Op.SIN: lambda t, x: f"sin{LIBM[t]}({x})",
    Op.SQRT: lambda t, x: f"sqrt{LIBM[t]}({x})",
    Op.RECIP: lambda t, x: f"(({t})1 / {x})",
    # bool or/and without short circuit (operands have no side effects, and both are 0 or 1): no
    # branch, so GCC if-converts and vectorizes the loop (`&&`/`||` left some fused loops scalar)
    Op.ADD: lambda t, a, b: f"({a} | {b})" if t == "bool" else wrapping(t, a, "+", b),
    Op.MUL: lambda t, a, b: f"({a} & {b})" if t == "bool" else wrapping(t, a, "*", b),
    # C fmod for floats; integer % truncates like fmod, and x % 0 sets the error flag (2)
    Op.MOD: lambda t, a, b: f"fmod{LIBM[t]}({a}, {b})" if t in LIBM else f"{INT_MOD}({a}, {b}, err)",
    Op.LESS_THAN: lambda t, a, b: f"({a} < {b})",
    Op.PHILOX: lambda t, s, c: f"lum_philox((unsigned long long)({s}), (unsigned long long)({c}))",  # PHILOX_C
    Op.MAXIMUM: lambda t, a, b: f"lum_max_nan(({t})({a}), ({t})({b}))",  # NaN if either is NaN, as MaxReduce
    Op.EXP: lambda t, x: f"exp{LIBM[t]}({x})",
    Op.SIGMOID: lambda t, x: f"(({t})1 / (({t})1 + exp{LIBM[t]}(-({x}))))",
    Op.SELECT: lambda t, c, a, b: select(c, a, b),  # t is the condition's (bool): the value moves
}


def select(c: str, a: str, b: str, both: str | None = None) -> str:
    """`c ? a : b`; where the dialect speculates, both values computed first: GCC vectorizes a
    loop calling expf unconditionally (glibc's vector expf), not under a branch. (No value can
    trap: Recip is float only, and an integer remainder by 0 sets the error flag.) `both` (the
    values' compute type): a value holds an integer remainder, which the unfused graph computes
    everywhere (a remainder by 0 raises, as torch's), so every dialect computes both values
    (CUDA: as arguments)."""
    if not active().speculate_select:
        return f"({c} ? {a} : {b})" if both is None else f"lum_pick<{both}>({c}, {a}, {b})"
    return f"({{ __auto_type lum_s1 = {a}; __auto_type lum_s2 = {b}; ({c}) ? lum_s1 : lum_s2; }})"


def fmod_by_power_of_two(t: str, a: str, divisor) -> str | None:
    """fmod(a, c) for a constant c = +-2**k >= 1 (floor's fmod(x, 1), round's fmod(x, 2)) as
    r = a - c * trunc(a / c), a zero r given the sign of a: exact (a / c and c * t are exact, and a - c * t is by
    Sterbenz; 0 when |a| < c leaves a itself), inf -> NaN and NaN as fmod, the sign of a on a
    zero result, and a loop the compiler vectorizes where libm's fmod is a call per element.
    None for any other divisor (fmod itself)."""
    if t not in LIBM or isinstance(divisor, bool) or not isinstance(divisor, (int, float)):
        return None
    c = abs(float(divisor))
    if not (math.isfinite(c) and c >= 1 and math.frexp(c)[0] == 0.5):
        return None
    lit, f = c_literal(c, DType.F64 if t == "double" else DType.F32), LIBM[t]
    r = f"(({a}) - {lit} * trunc{f}(({a}) / {lit}))"  # nonzero: already the sign of a; inf: the default NaN, as fmod's
    return f"({r} != 0 ? {r} : copysign{f}(({t})0, ({a})))"


def _scalar_value(node: Node):
    """The value of a scalar constant read directly or through a broadcast view, else None."""
    if node.op is Op.VIEW and all(sym.equal(st, 0) for st in node.arg.strides) and node.arg.mask is None:
        node = node.src[0]
    return node.arg if node.op is Op.CONSTANT and node.shape == () and not isinstance(node.arg, ConstantArray) else None


def expression(e: Expr, leaf) -> str:
    """C for a FusedElementwise expression in its compute type; `leaf(i)` reads input slot i.
    `x * recip(y)` on floats is `x / y`: rounded once, and finite where `1 / subnormal` overflows."""
    if e.op is Op.INPUT:
        return leaf(e.arg)
    if e.op is Op.CONSTANT:
        return c_literal(e.arg, e.dtype)
    if e.op is Op.MUL and e.dtype.is_float:
        for num, den in (e.src, e.src[::-1]):
            if den.op is Op.RECIP:
                return f"({expression(num, leaf)} / {expression(den.src[0], leaf)})"
        low = _negated_max(e)
        if low is not None:
            t = compute_type(e.dtype)
            return f"lum_min_nan(({t})({expression(low[0], leaf)}), ({t})({expression(low[1], leaf)}))"
    args = [expression(c, leaf) for c in e.src]
    if e.op is Op.CAST:
        return cast_value(e.src[0].dtype, e.dtype, args[0])
    if e.op is Op.MOD and e.src[1].op is Op.CONSTANT:
        fast = fmod_by_power_of_two(compute_type(e.dtype), args[0], e.src[1].arg)
        if fast is not None:
            return fast
    if e.op not in code_for_op:
        raise UnsupportedError(f"FusedElementwise: no C for {e.op.title}")
    if e.op is Op.SELECT:  # an integer remainder in a value: both computed, in every dialect (Recip is float only)
        int_mod = any(x.op is Op.MOD and not x.dtype.is_float for b in e.src[1:] for x in b.toposort())
        return select(*args, compute_type(e.dtype) if int_mod else None)
    return code_for_op[e.op](compute_type(e.src[0].dtype), *args)


def _negative_one(e: Expr) -> bool:
    return e.op is Op.CONSTANT and isinstance(e.arg, (int, float)) and not isinstance(e.arg, bool) and e.arg == -1


def _negated(e: Expr) -> Expr | None:
    """-e as an expression of no more operations: e's operand where e is x * -1, a constant's
    negation; else None."""
    if e.op is Op.MUL:
        for x, k in (e.src, e.src[::-1]):
            if _negative_one(k):
                return x
    if e.op is Op.CONSTANT and isinstance(e.arg, (int, float)) and not isinstance(e.arg, bool):
        return Expr(Op.CONSTANT, e.dtype, (), -e.arg)
    return None


def _negated_max(e: Expr) -> tuple[Expr, Expr] | None:
    """(p', q') where e is max(p, q) * -1 with p = -p', q = -q' for free (`_negated`): e is then
    min(p', q') exactly, NaN included (-lum_max_nan(p, q) is lum_min_nan(-p, -q), the negations
    exact): one compare and select, where the builder's min (`minimum`: -max(-x, -y), a clamp's
    upper bound, ReLU6's 6) spends a negation on each operand that is not a constant and one on
    the max; else None."""
    for m, k in (e.src, e.src[::-1]):
        if _negative_one(k) and m.op is Op.MAXIMUM and m.dtype.is_float:
            p, q = (_negated(x) for x in m.src)
            if p is not None and q is not None:
                return p, q
    return None


def pointwise_value(node: Node, idx: list[str], inputs) -> str:
    """C for one element of a pointwise node or FusedElementwise region (compute type), with
    `idx` the output index (one C expression per dim) and `inputs` the kernel's buffers."""
    def leaf(i: int) -> str:
        return read(node.src[i], idx, pointer_of(node.src[i], inputs))

    if node.op is Op.FUSED_ELEMENTWISE:
        return expression(node.arg, leaf)
    if node.op is Op.CONCAT:  # a's element where the axis' index is below a's length, else b's, shifted
        (a, b), axis = node.src, node.arg
        split = c_dim(a.shape[axis])
        shifted = idx[:axis] + [f"({idx[axis]} - {split})"] + idx[axis + 1:]
        return f"({idx[axis]} < {split} ? {leaf(0)} : {read(b, shifted, pointer_of(b, inputs))})"
    if node.op is Op.IOTA:
        return f"(({compute_type(node.dtype)}){idx[0]})"
    args = [leaf(i) for i in range(len(node.src))]
    if node.op is Op.CONTIGUOUS:
        return args[0]
    if node.op is Op.CAST:
        return cast_value(node.src[0].dtype, node.dtype, args[0])
    if node.op is Op.MOD:
        fast = fmod_by_power_of_two(compute_type(node.dtype), args[0], _scalar_value(node.src[1]))
        if fast is not None:
            return fast
    if node.op not in code_for_op:
        raise UnsupportedError(f"no C for op {node.op.title}")
    return code_for_op[node.op](compute_type(node.src[0].dtype), *args)


def load_value(dtype: DType, expr: str) -> str:
    """A stored element as its compute type."""
    if dtype in (DType.F16, DType.BF16):
        return f"{active().half_load[dtype]}({expr})"
    return expr


def store_value(dtype: DType, expr: str) -> str:
    if dtype in (DType.F16, DType.BF16):
        return f"{active().half_store[dtype]}({expr})"
    return f"(({active().ctype(dtype)})({expr}))"


def cast_value(src: DType, dst: DType, expr: str) -> str:
    """Convert a value in `src`'s compute type to `dst`'s compute type (C semantics)."""
    if dst is DType.BOOL:
        return f"({expr} != 0)"
    if dst in (DType.F16, DType.BF16):  # computed in float, but the value must be rounded to dst
        return load_value(dst, store_value(dst, f"((float)({expr}))"))
    return f"(({compute_type(dst)})({expr}))"


def unmasked(node: Node) -> Node:
    """`node`, a view, read without its mask: the element at an index the mask allows, in place (a
    padded view's kernels test the mask themselves, once per row or run, not per element)."""
    base, st = view_of(node)
    return Node(Op.VIEW, node.dtype, st.shape, (base,), ShapeTracker(st.shape, st.strides, st.offset))


def is_inline_scalar(node: Node) -> bool:
    """Scalar constants are rendered as literals, not buffers."""
    return node.op is Op.CONSTANT and not isinstance(node.arg, ConstantArray)


_LANES: contextvars.ContextVar[dict | None] = contextvars.ContextVar("luminal_lanes", default=None)
_NODE: contextvars.ContextVar[tuple] = contextvars.ContextVar("luminal_node")


@contextlib.contextmanager
def lanes(preloaded: dict):
    """Inside the block, `read` of a source in `preloaded` (by id: a C expression) reads that
    lane of a 16-byte load (CUDA's vectorized elementwise kernels)."""
    token = _LANES.set(preloaded)
    try:
        yield
    finally:
        _LANES.reset(token)


@contextlib.contextmanager
def rendering_node(node: Node, inputs: list[Node]):
    """The node being rendered and its kernel's buffers, for the dialect's loops."""
    token = _NODE.set((node, inputs))
    try:
        yield
    finally:
        _NODE.reset(token)


def current() -> tuple[Node, list[Node]]:
    """(node, input buffers) of the kernel being rendered (`rendering_node`)."""
    return _NODE.get()


def read(node: Node, index: list[str], pointer: str | None) -> str:
    """C expression for element `index` (one C expression per dim) of `node`, compute type.
    Inside a vectorized pointwise kernel, a source preloaded by 16-byte loads reads its lane."""
    base, st = view_of(node)
    preloaded = _LANES.get()
    if preloaded is not None and id(node) in preloaded:
        return load_value(base.dtype, preloaded[id(node)])
    if is_inline_scalar(base):
        value = c_literal(base.arg, base.dtype)
    elif inline.is_inlined(base):  # computed here, never stored (`inline.py`); read at another index
        # than the reader's, its sources are not the reader's preloaded lanes
        with contextlib.nullcontext() if inline.reads_at_own_index(base, st) else lanes(None):
            computed = pointwise_value(base, inline.producer_index(st, base.shape, index), current()[1])
        value = load_value(base.dtype, store_value(base.dtype, computed))  # rounded as its buffer would hold it
    else:
        terms = [c_dim(st.offset)] + [f"{i} * {c_dim(s)}" for i, s in zip(index, st.strides) if s != 0]
        at = " + ".join(terms)
        value = active().bool_load(pointer, at) if base.dtype is DType.BOOL else load_value(base.dtype, f"{pointer}[{at}]")
    if st.mask is None:
        return value
    conds = []
    for i, (lo, hi), d in zip(index, st.mask, st.shape):
        if not (lo == 0):
            conds.append(f"{i} >= {c_dim(lo)}")
        if not (hi == d):
            conds.append(f"{i} < {c_dim(hi)}")
    if not conds:
        return value
    zero = "false" if base.dtype is DType.BOOL else f"(({compute_type(base.dtype)})0)"
    return f"(({' && '.join(conds)}) ? {value} : {zero})"


def unravel(var: str, shape, prefix: str = "i") -> tuple[list[str], list[str]]:
    """C statements splitting linear index `var` into one index per dim of `shape`."""
    names = [f"{prefix}{k}" for k in range(len(shape))]
    it = index_type()
    lines = [f"{it} {prefix}_r = {var};"] if shape else []
    for k in reversed(range(len(shape))):
        if k == 0:
            lines.append(f"{it} {names[k]} = {prefix}_r;")
        else:
            d = c_dim(shape[k])
            lines.append(f"{it} {names[k]} = {prefix}_r % {d}; {prefix}_r /= {d};")
    return names, lines


# Philox 4x32-10 (`runtime/rng.py` is its specification), one text for every dialect (`{q}`: its
# qualifiers). Unsigned arithmetic only: no signed overflow, no <stdint.h> (NVRTC lacks it).
PHILOX_C = """\
{q} float lum_philox(unsigned long long seed, unsigned long long counter) {{
  unsigned int c0 = (unsigned int)counter, c1 = (unsigned int)(counter >> 32), c2 = 0u, c3 = 0u;
  unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
  for (int r = 0; r < 10; ++r) {{
    if (r) {{ k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }}  /* the key is bumped before every round but the first */
    unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    unsigned int h0 = (unsigned int)(p0 >> 32), h1 = (unsigned int)(p1 >> 32);
    c0 = h1 ^ c1 ^ k0; c1 = (unsigned int)p1; c2 = h0 ^ c3 ^ k1; c3 = (unsigned int)p0;
  }}
  return (float)(c0 >> 8) * 5.9604644775390625e-08f;  /* 24 random bits times 2**-24: exact, in [0, 1) */
}}
"""

@dataclass
class KernelSpec:
    """One launch: `name(out, inputs..., [err], dims...)` over `grid` blocks of `block` threads."""

    name: str
    source: str
    output: Node
    inputs: list[Node]  # buffer nodes, in argument order
    symbols: list[str]
    grid: object  # a dim: number of blocks
    block: int
    uses_error_flag: bool = False
    dtypes: set = field(default_factory=set)
    extern: object = None  # a `cublas.GemmDesc`: a device with that extern step may run it instead
    variants: list = field(default_factory=list)  # other builds of this launch (same arguments)
    chooser: object = None  # bindings -> index into [self, *variants]: picked per binding
    wide: KernelSpec | None = None  # the build accumulating in double: precision "float64" without the extern
    gemm: Node | None = None  # the MatMul a launch computes before its epilogue (`plan.residual_gemvs`): never stored

    def pick(self, bindings: dict) -> KernelSpec:
        """The build of this launch for `bindings` (32- or 64-bit index math, GEMV or tiles)."""
        if not self.variants:
            return self
        return ([self, *self.variants])[self.chooser(bindings)]


def buffer_sources(node: Node, sources=None) -> list[Node]:
    """Distinct buffer nodes `node` (or only its `sources`) reads (views resolved, inline scalars skipped)."""
    out: list[Node] = []
    for s in inline.expand(node.src if sources is None else sources):
        base, _ = view_of(s)
        if not is_inline_scalar(base) and all(base is not b for b in out):
            out.append(base)
    return out


def signature(name: str, out: Node, inputs: list[Node], symbols: list[str], err: bool) -> str:
    """A kernel's C signature in the active dialect: out, input buffers, error flag, symbolic dims."""
    d = active()
    kind, restrict = d.kernel_kind, d.restrict
    params = [f"{d.ctype(out.dtype)}* {restrict} out"]
    params += [f"const {d.ctype(b.dtype)}* {restrict} in{k}" for k, b in enumerate(inputs)]
    if err:
        params.append(f"int* {restrict} err")
    params += [f"long long d_{s}" for s in symbols]
    return f"{kind} {name}({', '.join(params)})"


def pointer_of(src: Node, inputs: list[Node]) -> str | None:
    base, _ = view_of(src)
    for k, b in enumerate(inputs):
        if b is base:
            return f"in{k}"
    return None


def symbols_of(node: Node, extra=()) -> list[str]:
    dims = [node.shape, *extra]
    for s in inline.expand(node.src):
        base, st = view_of(s)
        dims += [st.shape, st.strides, (st.offset,)]
        if st.mask:
            dims += [tuple(x for lo_hi in st.mask for x in lo_hi)]
        if is_inline_scalar(base) and hasattr(base.arg, "free_symbols") and not isinstance(base.arg, (int, float)):
            dims += [(base.arg,)]
    if node.op is Op.IOTA:
        dims += [(node.arg,)]
    return dims_symbols(*dims)


def dtypes_of(node: Node) -> set:
    out = {node.dtype} | {view_of(s)[0].dtype for s in inline.expand(node.src)}
    for p in inline.inlined_producers(node):  # what their expressions compute in (a bf16 rounding's header)
        out |= {p.dtype} | ({e.dtype for e in p.arg.toposort()} if p.op is Op.FUSED_ELEMENTWISE else set())
    return out


# --- 32- or 64-bit index math, chosen per binding ---------------------------------------------
INDEX32_LIMIT = 2**31  # sizes below it index in 32 bits; tests lower it (monkeypatch) to cross it


def index_extents(node: Node, extra=()) -> list[tuple]:
    """Groups of dims whose absolute values sum to a bound on every index a kernel computing `node`
    forms: sizes, each view's largest address (and its partial sums), mask bounds, each symbol."""
    groups = [(sym.product(node.shape),), *((d,) for d in extra)]
    groups += [(sym.product(p.shape),) for p in inline.inlined_producers(node)]  # a view's flat index into one
    for s in inline.expand(node.src):
        base, st = view_of(s)
        if is_inline_scalar(base):
            continue
        groups.append((sym.product(base.shape),))
        groups.append((st.offset, *(sym.norm((d - 1) * t) for d, t in zip(st.shape, st.strides))))
        groups += [(lo,) for lo, _ in st.mask or ()] + [(hi,) for _, hi in st.mask or ()]
    names = dims_symbols(*groups)
    return groups + [(sym.symbol(n),) for n in names]


def index_fits(groups: list[tuple], bindings: dict) -> bool:
    """Whether every index of the kernel stays below `INDEX32_LIMIT` under `bindings`."""
    return all(sum(abs(int(sym.evaluate(d, bindings))) for d in g) < INDEX32_LIMIT for g in groups)


def index_variants(node: Node, render, extra=()) -> list[KernelSpec]:
    """`render()` in 32-bit index math where every size fits, else 64-bit. Static sizes decide
    now (one build); symbolic ones get both builds, the launch picking per binding."""
    groups = index_extents(node, extra)
    if all(sym.is_static(d) for g in groups for d in g):
        with index_math("int" if index_fits(groups, {}) else "long long"):
            return render()
    wide = render()
    with index_math("int"):
        narrow = render()
    for w, n in zip(wide, narrow):
        w.variants = [n]
        w.chooser = lambda bindings: int(index_fits(groups, bindings))
    return wide
