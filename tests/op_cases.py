"""The table of high-level op cases shared by the NumPy-vs-torch tests and the CUDA tests.

Each case: a name, input specs (shape, kind), the luminal expression and the torch expression
over the same inputs. Shapes are odd on purpose and several cases broadcast or read views.
"""

import numpy as np
import torch
import torch.nn.functional as TF

import luminal as lm


def make(spec, rng):
    shape, kind = spec
    if kind == "f":
        return rng.standard_normal(shape).astype(np.float32)
    if kind == "pos":
        return (np.abs(rng.standard_normal(shape)) + 0.05).astype(np.float32)
    if kind == "unit":  # away from the half-integers where rounding is knife-edge in f32 math
        return rng.uniform(-3, 3, shape).astype(np.float32)
    if kind == "i":
        return rng.integers(-9, 10, shape).astype(np.int64)
    if kind == "nz":
        v = rng.integers(1, 6, shape).astype(np.int64)
        return v * rng.choice([-1, 1], shape)
    if kind == "b":
        return rng.random(shape) < 0.5
    if kind == "edge":  # NaN, ±inf, -0.0 in a pattern over the rows of the last axis
        return _edge_rows(rng.standard_normal(shape).astype(np.float32))
    if kind.startswith("perm"):  # distinct indices along the last axis (scatter without races)
        n = int(kind[4:])
        rows = [rng.permutation(n)[: shape[-1]] for _ in range(int(np.prod(shape[:-1])))]
        return np.array(rows, np.int64).reshape(shape)
    if kind.startswith("idx"):
        return rng.integers(0, int(kind[3:]), shape).astype(np.int64)
    raise ValueError(kind)


def case_graph(cases, seed: int, prefix: str):
    """All `cases` as outputs of one graph (one egglog run, one build): (graph, feeds, the
    input arrays of each case), inputs named `<prefix><case>_<i>`."""
    g = lm.Graph(prefix)
    rng = np.random.default_rng(seed)
    feeds, inputs = {}, []
    for ci, (name, specs, lum, _) in enumerate(cases):
        arrays = [make(s, rng) for s in specs]
        tensors = []
        for i, a in enumerate(arrays):
            feeds[f"{prefix}{ci}_{i}"] = a
            tensors.append(g.input(f"{prefix}{ci}_{i}", a.shape, lm.DType.of(a.dtype)))
        g.output(lum(*tensors), name)
        inputs.append(arrays)
    return g, feeds, inputs


def _edge_rows(x):
    """Row r (of the last axis) gets: 0 a NaN, 1 a +inf, 2 all -inf, 3 a -inf and signed
    zeros, 4 +inf and -inf, 5 nothing; the column of the special value moves with r."""
    rows = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    n = rows.shape[1]
    for r, row in enumerate(rows if n else []):
        j = r % n
        if r % 6 == 0:
            row[j] = np.nan
        elif r % 6 == 1:
            row[j] = np.inf
        elif r % 6 == 2:
            row[:] = -np.inf
        elif r % 6 == 3:
            row[::2], row[1::3], row[j] = -0.0, 0.0, -np.inf
        elif r % 6 == 4:
            row[j], row[(j + 1) % n] = np.inf, -np.inf
    return x


F, P, E = "f", "pos", "edge"
CASES = [
    ("add", [((3, 5), F), ((5,), F)], lambda a, b: a + b, lambda a, b: a + b),
    ("sub", [((3, 5), F), ((3, 1), F)], lambda a, b: a - b, lambda a, b: a - b),
    ("rsub_scalar", [((4,), F)], lambda a: 2.5 - a, lambda a: 2.5 - a),
    ("mul", [((2, 3, 4), F), ((3, 1), F)], lambda a, b: a * b, lambda a, b: a * b),
    ("div", [((3, 5), F), ((3, 5), P)], lambda a, b: a / b, lambda a, b: a / b),
    ("rdiv_scalar", [((3, 5), P)], lambda a: 1.0 / a, lambda a: 1.0 / a),
    ("neg", [((7,), F)], lambda a: -a, lambda a: -a),
    ("reciprocal", [((7,), P)], lambda a: a.reciprocal(), lambda a: a.reciprocal()),
    ("pow_int", [((3, 4), F)], lambda a: a**3, lambda a: a**3),
    ("pow_neg_int", [((3, 4), P)], lambda a: a**-2, lambda a: a**-2),
    ("pow_float", [((3, 4), P)], lambda a: a**1.7, lambda a: a**1.7),
    ("pow_half", [((3, 4), P)], lambda a: a**0.5, lambda a: a**0.5),
    ("pow_tensor", [((3, 4), F), ((3, 4), "i")], lambda a, b: a.pow(b.cast(lm.f32)),
     lambda a, b: a.pow(b.float())),
    ("sqrt", [((5, 3), P)], lambda a: a.sqrt(), torch.sqrt),
    ("rsqrt", [((5, 3), P)], lambda a: a.rsqrt(), torch.rsqrt),
    ("exp", [((5, 3), F)], lambda a: a.exp(), torch.exp),
    ("log", [((5, 3), P)], lambda a: a.log(), torch.log),
    ("sin", [((5, 3), F)], lambda a: a.sin(), torch.sin),
    ("cos", [((5, 3), F)], lambda a: a.cos(), torch.cos),
    ("tanh", [((5, 3), F)], lambda a: a.tanh(), torch.tanh),
    ("sigmoid", [((5, 3), F)], lambda a: a.sigmoid(), torch.sigmoid),
    ("relu", [((5, 3), F)], lambda a: a.relu(), torch.relu),
    ("gelu_erf", [((5, 7), F)], lambda a: a.gelu(), TF.gelu),
    ("gelu_tanh", [((5, 7), F)], lambda a: a.gelu("tanh"), lambda a: TF.gelu(a, approximate="tanh")),
    ("silu", [((5, 3), F)], lambda a: a.silu(), TF.silu),
    ("erf", [((41,), F)], lambda a: a.erf(), torch.erf),
    ("abs", [((5, 3), F)], lambda a: a.abs(), torch.abs),
    ("sign", [((5, 3), "i")], lambda a: a.cast(lm.f32).sign(), lambda a: a.float().sign()),
    ("floor", [((6, 5), "unit")], lambda a: a.floor(), torch.floor),
    ("ceil", [((6, 5), "unit")], lambda a: a.ceil(), torch.ceil),
    ("round", [((6, 5), "unit")], lambda a: a.round(), torch.round),
    ("trunc", [((6, 5), "unit")], lambda a: a.trunc(), torch.trunc),
    ("clamp_both", [((5, 3), F)], lambda a: a.clamp(-0.5, 0.7), lambda a: a.clamp(-0.5, 0.7)),
    ("clamp_min", [((5, 3), F)], lambda a: a.clamp(min=0.1), lambda a: a.clamp(min=0.1)),
    ("clamp_max", [((5, 3), F)], lambda a: a.clamp(max=0.1), lambda a: a.clamp(max=0.1)),
    ("where", [((4, 1), "b"), ((4, 5), F), ((5,), F)], lambda c, a, b: lm.where(c, a, b), torch.where),
    ("where_scalar", [((4, 5), "b"), ((4, 5), F)], lambda c, a: lm.where(c, a, float("-inf")),
     lambda c, a: torch.where(c, a, float("-inf"))),
    ("lt", [((3, 4), "i"), ((4,), "i")], lambda a, b: a < b, lambda a, b: a < b),
    ("le", [((3, 4), "i"), ((4,), "i")], lambda a, b: a <= b, lambda a, b: a <= b),
    ("gt", [((3, 4), "i"), ((4,), "i")], lambda a, b: a > b, lambda a, b: a > b),
    ("ge", [((3, 4), "i"), ((4,), "i")], lambda a, b: a >= b, lambda a, b: a >= b),
    ("eq", [((3, 4), "i"), ((4,), "i")], lambda a, b: a.eq(b), torch.eq),
    ("ne", [((3, 4), "i"), ((4,), "i")], lambda a, b: a.ne(b), torch.ne),
    ("eq_float", [((3, 4), F)], lambda a: a.eq(a.round()), lambda a: a.eq(a.round())),
    ("logical_and", [((9,), "b"), ((9,), "b")], lambda a, b: a & b, torch.logical_and),
    ("logical_or", [((9,), "b"), ((9,), "b")], lambda a, b: a | b, torch.logical_or),
    ("logical_not", [((9,), "b")], lambda a: ~a, torch.logical_not),
    ("logical_xor", [((9,), "b"), ((9,), "b")], lambda a, b: a.logical_xor(b), torch.logical_xor),
    ("maximum", [((3, 4), F), ((4,), F)], lambda a, b: a.maximum(b), torch.maximum),
    ("minimum", [((3, 4), F), ((4,), F)], lambda a, b: a.minimum(b), torch.minimum),
    ("maximum_int", [((3, 4), "i"), ((3, 4), "i")], lambda a, b: a.maximum(b), torch.maximum),
    ("fmod_neg", [((3, 4), "i"), ((3, 4), "nz")], lambda a, b: a.fmod(b), torch.fmod),
    ("fmod_float", [((3, 4), F), ((3, 4), P)], lambda a, b: a.fmod(b), torch.fmod),
    ("remainder", [((3, 4), "i"), ((3, 4), "nz")], lambda a, b: a.remainder(b), torch.remainder),
    ("remainder_float", [((3, 4), F), ((3, 4), P)], lambda a, b: a.remainder(-b), lambda a, b: torch.remainder(a, -b)),
    ("div_trunc_int", [((3, 4), "i"), ((3, 4), "nz")], lambda a, b: a.div(b, rounding_mode="trunc"),
     lambda a, b: torch.div(a, b, rounding_mode="trunc")),
    ("div_floor_int", [((3, 4), "i"), ((3, 4), "nz")], lambda a, b: a.div(b, rounding_mode="floor"),
     lambda a, b: torch.div(a, b, rounding_mode="floor")),
    ("sum_all", [((3, 4, 5), F)], lambda a: a.sum(), lambda a: a.sum()),
    ("sum_axis", [((3, 4, 5), F)], lambda a: a.sum(1), lambda a: a.sum(1)),
    ("sum_axes_keepdim", [((3, 4, 5), F)], lambda a: a.sum((0, 2), keepdim=True), lambda a: a.sum((0, 2), keepdim=True)),
    ("sum_int", [((3, 4), "i")], lambda a: a.sum(0), lambda a: a.sum(0)),
    ("sum_bool", [((3, 4), "b")], lambda a: a.sum(1), lambda a: a.sum(1)),
    ("mean", [((3, 4, 5), F)], lambda a: a.mean(-1), lambda a: a.mean(-1)),
    ("max", [((3, 4, 5), F)], lambda a: a.max(1), lambda a: a.amax(1)),
    ("min", [((3, 4, 5), F)], lambda a: a.min(1, keepdim=True), lambda a: a.amin(1, keepdim=True)),
    ("prod", [((3, 7), F)], lambda a: a.prod(1), lambda a: a.prod(1)),
    ("prod_int", [((3, 5), "i")], lambda a: a.prod(1), lambda a: a.prod(1)),
    ("var", [((3, 9), F)], lambda a: a.var(1), lambda a: a.var(1)),
    ("var_biased", [((3, 9), F)], lambda a: a.var(1, correction=0), lambda a: a.var(1, correction=0)),
    ("std", [((3, 9), F)], lambda a: a.std(-1), lambda a: a.std(-1)),
    ("argmax", [((3, 7), "i")], lambda a: a.argmax(1), lambda a: a.argmax(1)),
    ("argmin", [((3, 7), F)], lambda a: a.argmin(0), lambda a: a.argmin(0)),
    ("argmax_flat", [((3, 7), F)], lambda a: a.argmax(), lambda a: a.argmax()),
    ("cumsum", [((3, 7), F)], lambda a: a.cumsum(1), lambda a: a.cumsum(1)),
    ("cumsum_int", [((6, 3), "i")], lambda a: a.cumsum(0), lambda a: a.cumsum(0)),
    ("softmax", [((3, 11), F)], lambda a: a.softmax(-1), lambda a: a.softmax(-1)),
    ("softmax_axis0", [((3, 11), F)], lambda a: a.softmax(0), lambda a: a.softmax(0)),
    ("log_softmax", [((3, 11), F)], lambda a: a.log_softmax(-1), lambda a: a.log_softmax(-1)),
    ("logsumexp", [((3, 11), F)], lambda a: a.logsumexp(-1), lambda a: a.logsumexp(-1)),
    ("matmul_2d", [((5, 7), F), ((7, 3), F)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul_batch_bcast", [((2, 1, 5, 7), F), ((3, 7, 4), F)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul_vec_mat", [((7,), F), ((2, 7, 3), F)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul_mat_vec", [((4, 7), F), ((7,), F)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("dot", [((7,), F), ((7,), F)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul_int", [((3, 4), "i"), ((4, 2), "i")], lambda a, b: a @ b, lambda a, b: a @ b),
    ("bmm", [((2, 3, 4), F), ((2, 4, 5), F)], lambda a, b: a.bmm(b), torch.bmm),
    ("linear", [((2, 3, 6), F), ((5, 6), F), ((5,), F)], lambda x, w, b: x.linear(w, b), TF.linear),
    ("layer_norm", [((2, 3, 8), F), ((8,), F), ((8,), F)], lambda x, w, b: x.layer_norm((8,), w, b),
     lambda x, w, b: TF.layer_norm(x, (8,), w, b)),
    ("layer_norm_2d", [((2, 3, 8), F)], lambda x: x.layer_norm((3, 8)), lambda x: TF.layer_norm(x, (3, 8))),
    ("rms_norm", [((2, 3, 8), F), ((8,), F)], lambda x, w: x.rms_norm(w, eps=1e-6),
     lambda x, w: TF.rms_norm(x, (8,), w, eps=1e-6)),
    ("embedding", [((2, 5), "idx10"), ((10, 4), F)], lambda i, w: w.embedding(i), lambda i, w: TF.embedding(i, w)),
    ("gather", [((3, 6), F), ((3, 4), "idx6")], lambda a, i: a.gather(1, i), lambda a, i: a.gather(1, i)),
    ("index_select", [((5, 3), F), ((4,), "idx5")], lambda a, i: a.index_select(0, i), lambda a, i: a.index_select(0, i)),
    ("advanced_index", [((5, 3, 2), F), ((2, 2), "idx3")], lambda a, i: a[:, i], lambda a, i: a[:, i]),
    ("advanced_index_2", [((5, 4, 2), F), ((3,), "idx5"), ((3,), "idx4")], lambda a, i, j: a[i, j], lambda a, i, j: a[i, j]),
    # duplicate indices make a plain scatter order-dependent (undefined in torch and on a GPU)
    ("scatter", [((4, 6), F), ((4, 3), "perm6"), ((4, 3), F)], lambda a, i, s: a.scatter(1, i, s),
     lambda a, i, s: a.scatter(1, i, s)),
    ("scatter_add", [((4, 6), F), ((4, 3), "idx6"), ((4, 3), F)], lambda a, i, s: a.scatter(1, i, s, reduce="add"),
     lambda a, i, s: a.scatter_add(1, i, s)),
    ("concat", [((2, 3), F), ((2, 5), F), ((2, 1), F)], lambda a, b, c: lm.concat([a, b, c], 1),
     lambda a, b, c: torch.cat([a, b, c], 1)),
    ("concat_empty", [((2, 3), F), ((0,), F)], lambda a, b: lm.concat([a, b], 0), lambda a, b: torch.cat([a, b], 0)),
    ("stack", [((2, 3), F), ((2, 3), F)], lambda a, b: lm.stack([a, b], 1), lambda a, b: torch.stack([a, b], 1)),
    ("split", [((7, 3), F)], lambda a: lm.split(a, 3, 0)[2], lambda a: torch.split(a, 3, 0)[2]),
    ("split_sizes", [((7, 3), F)], lambda a: lm.split(a, [2, 5], 0)[1], lambda a: torch.split(a, [2, 5], 0)[1]),
    ("chunk", [((7, 3), F)], lambda a: lm.chunk(a, 3, 0)[1], lambda a: torch.chunk(a, 3, 0)[1]),
    ("triu", [((4, 6), F)], lambda a: a.triu(1), lambda a: a.triu(1)),
    ("tril", [((2, 5, 4), F)], lambda a: a.tril(-1), lambda a: a.tril(-1)),
    ("topk_values", [((3, 9), F)], lambda a: a.topk(4, -1)[0], lambda a: a.topk(4, -1)[0]),
    ("topk_indices", [((3, 9), F)], lambda a: a.topk(4, -1)[1], lambda a: a.topk(4, -1)[1]),
    ("topk_smallest", [((9, 3), F)], lambda a: a.topk(2, 0, largest=False)[0], lambda a: a.topk(2, 0, largest=False)[0]),
    ("sort", [((3, 8), "i")], lambda a: a.sort(-1)[0], lambda a: a.sort(dim=-1, stable=True)[0]),
    ("sort_idx_ties", [((3, 8), "i")], lambda a: a.sort(-1, descending=True)[1],
     lambda a: a.sort(dim=-1, descending=True, stable=True)[1]),
    ("cast_f16_roundtrip", [((3, 4), F)], lambda a: a.cast(lm.f16).cast(lm.f32), lambda a: a.half().float()),
    # NaN, ±inf and -0.0 (the `edge` rows above) through the ops whose kernels treat them specially
    ("edge_softmax", [((12, 40), E)], lambda a: a.softmax(-1), lambda a: a.softmax(-1)),
    ("edge_softmax_axis0", [((7, 6), E)], lambda a: a.softmax(0), lambda a: a.softmax(0)),
    ("edge_log_softmax", [((6, 9), E)], lambda a: a.log_softmax(-1), lambda a: a.log_softmax(-1)),
    ("edge_logsumexp", [((6, 9), E)], lambda a: a.logsumexp(-1), lambda a: a.logsumexp(-1)),
    ("edge_sum", [((12, 40), E)], lambda a: a.sum(-1), lambda a: a.sum(-1)),
    ("edge_mean", [((6, 9), E)], lambda a: a.mean(0), lambda a: a.mean(0)),
    ("edge_cumsum", [((6, 5), E)], lambda a: a.cumsum(1), lambda a: a.cumsum(1)),
    ("edge_max", [((12, 40), E)], lambda a: a.max(-1), lambda a: a.amax(-1)),
    ("edge_min", [((6, 9), E)], lambda a: a.min(0), lambda a: a.amin(0)),
    ("edge_argmax", [((6, 9), E)], lambda a: a.argmax(-1), lambda a: a.argmax(-1)),
    ("edge_argmin", [((6, 9), E)], lambda a: a.argmin(-1), lambda a: a.argmin(-1)),
    ("edge_sort", [((6, 9), E)], lambda a: a.sort(-1)[0], lambda a: a.sort(dim=-1, stable=True)[0]),
    ("edge_sort_desc_idx", [((6, 9), E)], lambda a: a.sort(-1, descending=True)[1],
     lambda a: a.sort(dim=-1, descending=True, stable=True)[1]),
    ("edge_topk", [((6, 9), E)], lambda a: a.topk(3, -1)[0], lambda a: a.topk(3, -1)[0]),
    ("edge_topk_smallest", [((6, 9), E)], lambda a: a.topk(3, -1, largest=False)[0],
     lambda a: a.topk(3, -1, largest=False)[0]),
    ("edge_clamp", [((6, 5), E)], lambda a: a.clamp(-0.5, 0.7), lambda a: a.clamp(-0.5, 0.7)),
    ("edge_relu_abs", [((6, 5), E)], lambda a: a.relu() + a.abs(), lambda a: a.relu() + a.abs()),
    ("edge_maximum", [((6, 5), E), ((6, 5), F)], lambda a, b: a.maximum(b), torch.maximum),
    ("edge_minimum", [((6, 5), E), ((6, 5), E)], lambda a, b: a.minimum(b), torch.minimum),
    ("edge_where", [((6, 5), E), ((6, 5), F)], lambda a, b: lm.where(a > b, a, b), lambda a, b: torch.where(a > b, a, b)),
    ("edge_compare", [((6, 5), E), ((5,), F)], lambda a, b: (a < b) | a.eq(b) | (a >= b * 2),
     lambda a, b: (a < b) | a.eq(b) | (a >= b * 2)),
    ("edge_ne_isnan", [((6, 5), E)], lambda a: a.ne(a).logical_xor(a.isnan()) | a.isinf(),
     lambda a: a.ne(a).logical_xor(a.isnan()) | a.isinf()),
    ("edge_fmod", [((6, 5), E), ((6, 5), F)], lambda a, b: a.fmod(b) + b.fmod(a), lambda a, b: a.fmod(b) + b.fmod(a)),
    ("edge_remainder", [((6, 5), E), ((6, 5), F)], lambda a, b: (a % b) + (b % a), lambda a, b: (a % b) + (b % a)),
    ("edge_floor_div", [((6, 5), E), ((6, 5), F)], lambda a, b: (a // b) + (b // a), lambda a, b: (a // b) + (b // a)),
    ("edge_rounding", [((6, 5), E)], lambda a: a.floor() + a.ceil() * 2 + a.round() * 3 + a.trunc() * 4,
     lambda a: a.floor() + a.ceil() * 2 + a.round() * 3 + a.trunc() * 4),
    ("edge_unary", [((6, 5), E)], lambda a: a.exp() + a.sigmoid() + a.tanh() + a.sin() + a.sign(),
     lambda a: a.exp() + a.sigmoid() + a.tanh() + a.sin() + a.sign()),
    ("edge_matmul", [((6, 5), E), ((5, 3), F)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("permute_contiguous_op", [((2, 3, 4), F)], lambda a: a.permute(2, 0, 1).reshape(4, 6).exp(),
     lambda a: a.permute(2, 0, 1).reshape(4, 6).exp()),
]
