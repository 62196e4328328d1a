"""ai.onnx.ml ops that scikit-learn converters (skl2onnx) emit, as onnxruntime computes them:
Scaler, Normalizer, Imputer, OneHotEncoder, LabelEncoder, FeatureVectorizer, LinearRegressor,
LinearClassifier, SVMRegressor, SVMClassifier, TreeEnsembleRegressor / TreeEnsembleClassifier
(opsets 1 and 3). ZipMap, whose output is a sequence of maps, is a host post-step (`zipmap.py`).
Class labels here are int64: string ones (classlabels_strings) are rewritten to class indices and a
host CategoryMapper before import (`labels.py`); string keys and categories need string tensors."""

from __future__ import annotations

import numpy as np

from luminal.builder import functional as F
from luminal.frontends.onnx.ops_ml import ML
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir.dtypes import DType

I64 = DType.I64
TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def _float(c, x):
    """These ops compute in float32 and return float32 (onnxruntime casts other inputs to float)."""
    return x if x.dtype is DType.F32 else x.cast(DType.F32)


def _const(c, a, dtype):
    return c.g.constant(np.asarray(a).astype(dtype.numpy), dtype)


def _post_transform(c, s, name: str):
    """onnxruntime's write_scores on (N, classes) scores."""
    if name not in TRANSFORMS:
        c.fail(f"post_transform {name!r} is not supported (one of {', '.join(TRANSFORMS)})")
    if name == "PROBIT":
        return _probit(s)
    if name == "LOGISTIC":
        return s.sigmoid()
    if name == "SOFTMAX":
        return s.softmax(-1)
    if name == "SOFTMAX_ZERO":  # a score within 1e-7 of zero stays ~zero and takes no part in the sum
        nz = s.abs().gt(s._scalar(1e-7))
        top = s.max(-1, keepdim=True)
        e = F.where(nz, s.sub(top).exp(), s.mul(top.neg().exp()))
        return e.div(e.sum(-1, keepdim=True))
    return s


def _probit(s):
    """sqrt(2)·erfinv(2s - 1) with onnxruntime's ErfInv (Winitzki's approximation, a = 0.147). Near
    s = 0.5 the root cancels: onnxruntime's float32 loses ~1e-5 there that float64 keeps."""
    x = s.mul(2.0).sub(1.0)
    sign = F.where(x.lt(x._scalar(0.0)), x._scalar(-1.0), 1.0)
    lg = x.neg().add(1.0).mul(x.add(1.0)).log()
    f = np.float32  # its constants, as float computes them
    v = lg.mul(0.5).add(float(f(2) / (f(np.pi) * f(0.147))))
    root = v.neg().add(v.mul(v).sub(lg.mul(float(f(1) / f(0.147)))).sqrt())
    return sign.mul(root.sqrt()).mul(float(f(np.sqrt(2.0))))


def _labels(c, ints, strings):
    if strings is not None:
        c.fail("classlabels_strings inside a subgraph luminal imports inline (an If or Loop body): string class "
               "labels become class indices and a host CategoryMapper in the main graph only (labels.py)")
    if ints is None:
        c.fail("no int64 class labels")
    return np.asarray(ints, np.int64).reshape(-1)


def _rows(x):
    return x.reshape((1, x.shape[0])) if x.ndim == 1 else x


@onnx_op("Scaler", domain=ML)
def scaler(c, x, *, offset=None, scale=None):
    """(x - offset) * scale, each one value or one per feature."""
    x = _float(c, x)
    off = _const(c, offset if offset is not None else [0.0], x.dtype)
    sc = _const(c, scale if scale is not None else [1.0], x.dtype)
    return x.sub(off).mul(sc)


@onnx_op("Normalizer", domain=ML)
def normalizer(c, x, *, norm="MAX"):
    """Each row divided by its max, L1 or L2 norm; a row whose norm is 0 stays as it is (onnxruntime)."""
    x = _float(c, _rows(x))
    if norm == "MAX":
        d = x.max(-1, keepdim=True)
    elif norm == "L1":
        d = x.abs().sum(-1, keepdim=True)
    elif norm == "L2":
        d = x.square().sum(-1, keepdim=True).sqrt()
    else:
        c.fail(f"norm {norm!r} is not one of MAX, L1, L2")
    return F.where(d.eq(d._scalar(0.0)), x, x.div(d))


@onnx_op("Imputer", domain=ML)
def imputer(c, x, *, imputed_value_floats=None, imputed_value_int64s=None, replaced_value_float=0.0,
            replaced_value_int64=0):
    """Values equal to the replaced value (NaN: every NaN) take the imputed value of their feature."""
    if x.dtype.is_float:
        imp, rep = imputed_value_floats, replaced_value_float
    else:
        imp, rep = imputed_value_int64s, replaced_value_int64
    if imp is None or len(imp) == 0:
        c.fail("no imputed values for this input type")
    hit = x.isnan() if x.dtype.is_float and np.isnan(rep) else x.eq(x._scalar(rep))
    return F.where(hit, _const(c, imp, x.dtype), x)


@onnx_op("LinearRegressor", domain=ML)
def linear_regressor(c, x, *, coefficients, intercepts=None, targets=1, post_transform="NONE"):
    if post_transform not in ("NONE", "PROBIT"):
        c.fail(f"post_transform {post_transform!r} is not supported (NONE, PROBIT)")
    x = _float(c, _rows(x))
    w = _const(c, np.asarray(coefficients, np.float64).reshape(int(targets), -1).T, x.dtype)
    y = x.matmul(w)
    y = y if intercepts is None else y.add(_const(c, intercepts, x.dtype))
    return _probit(y) if post_transform == "PROBIT" else y


@onnx_op("LinearClassifier", domain=ML)
def linear_classifier(c, x, *, coefficients, intercepts=None, classlabels_ints=None, classlabels_strings=None,
                      multi_class=0, post_transform="NONE"):
    """Scores X·Wᵀ + b, the label of the first highest score, then post_transform. (onnxruntime's
    one-row binary form, which derives the second column, is refused.)"""
    labels = _labels(c, classlabels_ints, classlabels_strings)
    x = _float(c, _rows(x))
    coef = np.asarray(coefficients, np.float64)
    n_cls = len(labels)
    rows = n_cls if coef.size == n_cls * int(x.shape[-1]) else 1
    if rows == 1 and (n_cls != 2 or coef.size != int(x.shape[-1])):
        c.fail(f"{coef.size} coefficients for {n_cls} classes of {x.shape[-1]} features")
    s = x.matmul(_const(c, coef.reshape(rows, -1).T, x.dtype))
    if intercepts is not None:
        s = s.add(_const(c, intercepts, x.dtype))
    if rows == 1:  # onnxruntime's binary form: the sign picks the label; scores [1 - p, p], p = s or
        # logistic(s) (other transforms leave s as it is)
        if post_transform == "PROBIT":
            c.fail("post_transform 'PROBIT' is not supported")
        label = F.where(s.reshape(-1).gt(s._scalar(0.0)), _const(c, labels[1], I64), _const(c, labels[0], I64))
        p = s.sigmoid() if post_transform == "LOGISTIC" else s
        return [label, F.concat([p.neg().add(1.0), p], -1)]
    label = _const(c, labels, I64).index_select(0, s.argmax(-1).cast(I64))
    return [label, _post_transform(c, s, post_transform)]


MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5, "LEAF": 6}
LEAF = MODES["LEAF"]


def _forest(c, x, a: dict, prefix: str, n_out: int, agg: str = "SUM"):
    """Walk every (sample, tree) in lockstep, one level per step (a leaf steps to itself);
    returns the per-target sum (SUM, AVERAGE), min or max over the trees' leaves (N, n_out)
    and whether any tree scored each target (None where every leaf scores every target)."""
    tree_ids = np.asarray(a["nodes_treeids"], np.int64)
    node_ids = np.asarray(a["nodes_nodeids"], np.int64)
    n = len(tree_ids)
    values = a.get("nodes_values_as_tensor")
    values = np.asarray(values if values is not None else a["nodes_values"], np.float64).reshape(-1)
    try:
        modes = np.array([MODES[m] for m in a["nodes_modes"]], np.int64)
    except KeyError as exc:
        c.fail(f"node mode {exc.args[0]!r} is not one of {list(MODES)}")
    slot = {(int(t), int(i)): k for k, (t, i) in enumerate(zip(tree_ids, node_ids))}
    if len(slot) != n:
        c.fail("two nodes share a (tree id, node id)")

    def target(t, i, k):
        if modes[k] == LEAF:
            return k
        s = slot.get((int(t), int(i)))
        if s is None:
            c.fail(f"node ({t}, {i}) is not defined")
        return s

    t_ids, f_ids = a["nodes_truenodeids"], a["nodes_falsenodeids"]
    nxt_t = np.array([target(tree_ids[k], t_ids[k], k) for k in range(n)], np.int64)
    nxt_f = np.array([target(tree_ids[k], f_ids[k], k) for k in range(n)], np.int64)
    miss = np.asarray(a.get("nodes_missing_value_tracks_true") or [0] * n, bool)
    roots = np.array([slot[(int(t), int(node_ids[tree_ids == t].min()))] for t in np.unique(tree_ids)], np.int64)
    depth = _depth(roots, nxt_t, nxt_f, modes, n, c)
    init = {"MIN": np.inf, "MAX": -np.inf}.get(agg, 0.0)
    w = np.full((n, n_out), init)  # a leaf's weights per target, combined as the trees are
    has = np.zeros((n, n_out), bool)
    weights = a.get(f"{prefix}_weights_as_tensor")
    weights = a[f"{prefix}_weights"] if weights is None else weights
    for t, i, k, v in zip(a[f"{prefix}_treeids"], a[f"{prefix}_nodeids"], a[f"{prefix}_ids"], weights):
        s = slot.get((int(t), int(i)))
        if s is None or not 0 <= k < n_out:
            c.fail(f"a weight for node ({t}, {i}), target {k}, that does not exist")
        w[s, k] = min(w[s, k], v) if agg == "MIN" else max(w[s, k], v) if agg == "MAX" else w[s, k] + v
        has[s, k] = True
    ft, rows, n_trees = x.dtype, x.shape[0], len(roots)
    feats = np.where(modes == LEAF, 0, np.asarray(a["nodes_featureids"], np.int64))  # a leaf reads feature 0, unused
    # a node's two successors side by side (true at 2k, false at 2k + 1): the step is one gather at
    # 2 * node + !go, its index computed in the comparison's kernel, not two gathers and a select
    tables = {"feat": (feats, I64), "split": (values, ft), "mode": (modes, I64), "miss": (miss, DType.BOOL),
              "next": (np.stack([nxt_t, nxt_f], axis=1).reshape(-1), I64)}
    tab = {name: _const(c, values_, dtype) for name, (values_, dtype) in tables.items()}
    branch_modes = sorted(set(modes[modes != LEAF].tolist()))
    compare = {0: "le", 1: "lt", 2: "ge", 3: "gt", 4: "eq", 5: "ne"}

    def at(name, s):
        """The node table `name` at each (sample, tree)'s node `s`: on the first level every sample of a
        tree is at its root (`s` the roots, a NumPy array), so a constant row, not a gather."""
        if isinstance(s, np.ndarray):
            values_, dtype = tables[name]
            return _const(c, values_[s], dtype).reshape((1, n_trees)).expand((rows, n_trees))
        return tab[name].index_select(0, s.reshape(-1)).reshape((rows, n_trees))

    state = roots
    for _ in range(depth):  # a leaf steps to itself (nxt_t = nxt_f = itself), whatever it compares
        v = x.gather(1, at("feat", state))
        sp = at("split", state)
        if len(branch_modes) <= 1:  # one comparison for every node (scikit-learn's BRANCH_LEQ): no mode table
            go = getattr(v, compare[branch_modes[0] if branch_modes else 0])(sp)
        else:
            mode = at("mode", state)
            go = v.ne(sp)
            for m, cmp in ((0, v.le(sp)), (1, v.lt(sp)), (2, v.ge(sp)), (3, v.gt(sp)), (4, v.eq(sp))):
                go = F.where(mode.eq(m), cmp, go)
        if miss.any():
            go = go.logical_or(at("miss", state).logical_and(v.isnan()))
        twice = (_const(c, 2 * state, I64).reshape((1, n_trees)) if isinstance(state, np.ndarray) else state.mul(2))
        state = tab["next"].index_select(0, twice.add(go.logical_not().cast(I64)).reshape(-1)).reshape((rows, n_trees))
    if isinstance(state, np.ndarray):  # no branch at all: every tree a lone leaf
        state = _const(c, state, I64).reshape((1, n_trees)).expand((rows, n_trees))
    flat = state.reshape(-1)
    per_tree = _const(c, w, ft).index_select(0, flat).reshape((rows, n_trees, n_out))
    score = per_tree.min(1) if agg == "MIN" else per_tree.max(1) if agg == "MAX" else per_tree.sum(1)
    if has[modes == LEAF].all():  # every leaf scores every target (scikit-learn's trees): no table to read
        return score, None, n_trees
    scored = _const(c, has, DType.I32).index_select(0, flat).reshape((rows, n_trees, n_out)).max(1).gt(0)
    return F.where(scored, score, 0.0), scored, n_trees


def _where_scored(scored, score, other):
    """`score` where a tree scored the target, else `other` (`_forest`'s `scored`; None: everywhere)."""
    return score if scored is None else F.where(scored, score, other)


def _depth(roots, nxt_t, nxt_f, modes, n: int, c) -> int:
    best, stack = 0, [(int(r), 0) for r in roots]
    while stack:
        k, d = stack.pop()
        if modes[k] == LEAF:
            best = max(best, d)
            continue
        if d > n:
            c.fail("the trees contain a cycle")
        stack += [(int(nxt_t[k]), d + 1), (int(nxt_f[k]), d + 1)]
    return best


def _x2d(c, x):
    x = _rows(x)
    if x.ndim != 2:
        c.fail(f"X of shape {x.shape} is not an (N, features) matrix")
    return _float(c, x)


def _tree_x(c, x):
    """Trees compare a double input as double (onnxruntime's thresholds take the input's type)."""
    x = _rows(x)
    if x.ndim != 2:
        c.fail(f"X of shape {x.shape} is not an (N, features) matrix")
    return x if x.dtype is DType.F64 else _float(c, x)


def _f32(t):
    return t if t.dtype is DType.F32 else t.cast(DType.F32)


@onnx_op("TreeEnsembleRegressor", domain=ML)
def tree_ensemble_regressor(c, x, **a):
    """Sum, average, min or max of the trees' leaf weights per target, plus base_values, then
    post_transform."""
    agg, post = a.get("aggregate_function", "SUM"), a.get("post_transform", "NONE")
    if agg not in ("SUM", "AVERAGE", "MIN", "MAX"):
        c.fail(f"aggregate_function {agg!r} is not one of SUM, AVERAGE, MIN, MAX")
    x = _tree_x(c, x)
    n_out = int(a.get("n_targets") or 1)
    score, scored, n_trees = _forest(c, x, a, "target", n_out, agg)
    if agg == "AVERAGE":
        score = score.div(float(n_trees))
    base = a.get("base_values_as_tensor")
    base = a.get("base_values") if base is None else base
    if base is not None and len(base) == n_out:  # (onnxruntime ignores one base value for several targets)
        score = score.add(_const(c, base, x.dtype))
    if n_out == 1:  # onnxruntime's one-target path applies PROBIT only
        score = _f32(score)
        return _probit(score) if post == "PROBIT" else score
    # onnxruntime writes 0 for a target no reached leaf scored, base value or not (ScoreValue's has_score)
    return _post_transform(c, _f32(_where_scored(scored, score, 0.0)), post)


@onnx_op("TreeEnsembleClassifier", domain=ML)
def tree_ensemble_classifier(c, x, **a):
    """Per-class sums of the trees' weights plus base_values, the label of the first highest
    scored class, then post_transform; two classes as onnxruntime's binary case."""
    labels = _labels(c, a.get("classlabels_int64s"), a.get("classlabels_strings"))
    x = _tree_x(c, x)
    if len(labels) == 2:
        return _binary_trees(c, x, a, labels)
    if len(labels) < 2:
        c.fail(f"{len(labels)} class labels")
    score, scored, _ = _forest(c, x, a, "class", len(labels))
    ranked = _where_scored(scored, score, -np.inf)  # a class no reached leaf scored is no candidate (onnxruntime's has_score)
    base = a.get("base_values_as_tensor")
    base = a.get("base_values") if base is None else base
    if base is not None and len(base):
        if len(base) != len(labels):
            c.fail(f"{len(base)} base_values for {len(labels)} classes")
        score = ranked = score.add(_const(c, base, x.dtype))  # base values score every class
    else:
        score = _where_scored(scored, score, 0.0)  # written as 0 (has_score), before post_transform
    pick = ranked.argmax(-1).cast(I64)
    label = _const(c, labels, I64).index_select(0, pick)
    return [label, _post_transform(c, _f32(score), a.get("post_transform", "NONE"))]


def _kernel(c, x, sv, kernel_type: str, params):
    """K(x, each support vector) (N, n_sv) as onnxruntime's kernel_dot; params (gamma, coef0, degree)."""
    gamma, coef0, degree = (list(params) + [0.0, 0.0, 0.0])[:3] if params is not None else (0.0, 0.0, 0.0)
    if kernel_type == "RBF":
        d = x.unsqueeze(1).sub(sv.unsqueeze(0)).square().sum(-1)
        return d.mul(-float(gamma)).exp()
    dot = x.matmul(sv.T)
    if kernel_type == "LINEAR":
        return dot
    if kernel_type == "POLY":
        return dot.mul(float(gamma)).add(float(coef0)).pow(float(degree))
    if kernel_type == "SIGMOID":
        return dot.mul(float(gamma)).add(float(coef0)).tanh()
    c.fail(f"kernel_type {kernel_type!r} is not one of LINEAR, POLY, RBF, SIGMOID")


@onnx_op("SVMRegressor", domain=ML)
def svm_regressor(c, x, *, coefficients, support_vectors=None, n_supports=0, kernel_type="LINEAR", kernel_params=None,
                  rho=None, one_class=0, post_transform="NONE"):
    """Σ coefficients·K(x, sv) + rho (or x·coefficients + rho without support vectors); one_class
    gives ±1 by the sign."""
    if post_transform != "NONE":
        c.fail(f"post_transform {post_transform!r} is not supported (NONE only)")
    x = _x2d(c, x)
    coef = np.asarray(coefficients, np.float64).reshape(-1)
    if n_supports:
        sv = _const(c, np.asarray(support_vectors, np.float64).reshape(int(n_supports), -1), x.dtype)
        score = _kernel(c, x, sv, kernel_type, kernel_params).matmul(_const(c, coef.reshape(-1, 1), x.dtype))
    else:
        score = x.matmul(_const(c, coef.reshape(-1, 1), x.dtype))
    score = score.add(float(rho[0]) if rho is not None and len(rho) else 0.0)
    if one_class:
        score = F.where(score.gt(score._scalar(0.0)), score._scalar(1.0), -1.0)
    return score


@onnx_op("OneHotEncoder", domain=ML)
def one_hot_encoder(c, x, *, cats_int64s=None, cats_strings=None, zeros=1):
    """x.shape + (categories,): 1.0 where the value (a float truncated to int64, as onnxruntime
    reads it) is the category. A value in no category gives zeros (zeros=1; zeros=0 is refused:
    onnxruntime then fails at run time)."""
    if cats_strings is not None or cats_int64s is None:
        c.fail("cats_strings: string categories need string tensors; cats_int64s only")
    if not zeros:
        c.fail("zeros=0 (an error on an unknown category) is not supported")
    cats = np.asarray(cats_int64s, np.int64).reshape(-1)
    v = x if x.dtype is I64 else x.cast(I64)
    table = _const(c, cats, I64).reshape((1,) * x.ndim + (len(cats),))
    return v.unsqueeze(-1).eq(table).cast(DType.F32)


@onnx_op("SVMClassifier", domain=ML)
def svm_classifier(c, x, *, coefficients, rho, classlabels_ints=None, classlabels_strings=None, support_vectors=None,
                   vectors_per_class=None, kernel_type="LINEAR", kernel_params=None, prob_a=None, prob_b=None,
                   post_transform="NONE"):
    """As onnxruntime: one-vs-one scores Σ coef·K(x, sv) + rho per class
    pair (i, j), a vote for i when positive, else for j, the label of the first most voted class;
    without support vectors, scores x·coefᵀ + rho[0] and the label of the first highest. With
    prob_a/prob_b, the class probabilities coupled from the pairwise ones (`_coupled`). Two
    classes: onnxruntime's binary form."""
    labels = _labels(c, classlabels_ints, classlabels_strings)
    k = len(labels)
    if k < 2:
        c.fail(f"{k} class labels")
    proba = prob_a is not None and len(prob_a) > 0
    x = _x2d(c, x)
    coef = np.asarray(coefficients, np.float64).reshape(-1)
    counts = np.asarray(vectors_per_class if vectors_per_class is not None else [], np.int64)
    n_sv = int(counts.sum())
    if n_sv == 0:  # liblinear form
        if proba:
            c.fail("prob_a/prob_b without support vectors is not supported")
        if k == 2:
            c.fail("two classes without support vectors (onnxruntime's binary liblinear form) is not supported")
        s = x.matmul(_const(c, coef.reshape(k, -1).T, x.dtype)).add(float(rho[0]))
        pick = s.argmax(-1)
    else:
        if len(counts) != k or coef.size < (k - 1) * n_sv:
            c.fail(f"vectors_per_class {counts.tolist()} and {coef.size} coefficients do not fit {k} classes")
        sv = _const(c, np.asarray(support_vectors, np.float64).reshape(n_sv, -1), x.dtype)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        pairs = [(i, j) for i in range(k - 1) for j in range(i + 1, k)]
        mix = np.zeros((n_sv, len(pairs)))  # each pair's coefficients over all support vectors
        vote_i, vote_j = np.zeros((len(pairs), k)), np.zeros((len(pairs), k))
        rows = coef[:(k - 1) * n_sv].reshape(k - 1, n_sv)
        for p, (i, j) in enumerate(pairs):
            si, sj = slice(starts[i], starts[i] + counts[i]), slice(starts[j], starts[j] + counts[j])
            mix[si, p], mix[sj, p] = rows[j - 1, si], rows[i, sj]
            vote_i[p, i], vote_j[p, j] = 1, 1
        s = _kernel(c, x, sv, kernel_type, kernel_params).matmul(_const(c, mix, x.dtype))
        s = s.add(_const(c, np.asarray(rho, np.float64)[:len(pairs)], x.dtype))
        pos = s.gt(s._scalar(0.0)).cast(x.dtype)
        votes = pos.matmul(_const(c, vote_i, x.dtype)).add(pos.neg().add(1.0).matmul(_const(c, vote_j, x.dtype)))
        pick = votes.argmax(-1)
        if proba:  # probabilities from the pairwise ones; the label stays the vote's
            if prob_b is None or len(prob_a) < len(pairs) or len(prob_b) < len(pairs):
                c.fail(f"prob_a/prob_b need one value per class pair ({len(pairs)})")
            label = _const(c, labels, I64).index_select(0, pick.cast(I64))
            p = _coupled(c, s, np.asarray(prob_a[:len(pairs)]), np.asarray(prob_b[:len(pairs)]), pairs, k)
            return [label, _post_transform(c, p, post_transform)]
        if k == 2:  # onnxruntime's binary form: the label by the vote; scores [-s, s] (NONE) or [1 - s, s]
            if post_transform == "PROBIT":
                c.fail("post_transform 'PROBIT' is not supported")
            label = _const(c, labels, I64).index_select(0, pick.cast(I64))
            return [label, F.concat([s.neg() if post_transform == "NONE" else s.neg().add(1.0), s], -1)]
    label = _const(c, labels, I64).index_select(0, pick.cast(I64))
    return [label, _post_transform(c, s, post_transform)]


def _binary_trees(c, x, a, labels):
    """onnxruntime's binary case, where every weight is for class id 0 (skl2onnx's binary trees and
    boosting): s = the sum plus the one base value (0 where no leaf scored); the label is the
    second when s > 0.5 (weights all >= 0) or s > 0 (mixed signs); the scores [1 - s, s] (weights
    all >= 0) or, mixed, [-s, s] ([logistic(-s), logistic(s)] under LOGISTIC)."""
    ids = {int(i) for i in a.get("class_ids", [])}
    base = a.get("base_values_as_tensor")
    base = a.get("base_values") if base is None else base
    post = a.get("post_transform", "NONE")
    if ids != {0} or (base is not None and len(base) > 1) or post not in ("NONE", "LOGISTIC"):
        c.fail(f"two classes with class ids {sorted(ids)}, {0 if base is None else len(base)} base values and "
               f"post_transform {post!r}: only the form with class id 0, at most one base value and NONE or "
               "LOGISTIC is supported")
    score, scored, _ = _forest(c, x, a, "class", 1)
    if base is not None and len(base):
        score = score.add(float(base[0]))
    s = _f32(_where_scored(scored, score, 0.0))
    weights = a.get("class_weights_as_tensor")
    positive = bool(np.all(np.asarray(a["class_weights"] if weights is None else weights) >= 0))
    label = F.where(s.reshape(-1).gt(s._scalar(0.5 if positive else 0.0)), _const(c, labels[1], I64),
                    _const(c, labels[0], I64))
    if positive:
        return [label, F.concat([s.neg().add(1.0), s], -1)]
    if post == "LOGISTIC":
        return [label, F.concat([s.neg().sigmoid(), s.sigmoid()], -1)]
    return [label, F.concat([s.neg(), s], -1)]


@onnx_op("LabelEncoder", since=2, domain=ML)
def label_encoder(c, x, *, keys_floats=None, keys_int64s=None, keys_strings=None, values_floats=None,
                  values_int64s=None, values_strings=None, default_float=-0.0, default_int64=-1, default_string=None,
                  keys_tensor=None, values_tensor=None, default_tensor=None):
    """Each element mapped through keys -> values (the first of equal keys; from opset 4 NaN
    matches a NaN key),
    else the default. Numeric keys and values only (strings need string tensors)."""
    if keys_strings is not None or values_strings is not None or (
            keys_tensor is not None and keys_tensor.dtype.kind in "OSU") or (
            values_tensor is not None and values_tensor.dtype.kind in "OSU"):
        c.fail("string keys or values: string tensors run on the host between compiled stages (strings.py), "
               "which a subgraph luminal imports inline (an If or Loop body) cannot hold")
    keys = next((np.asarray(k) for k in (keys_tensor, keys_floats, keys_int64s) if k is not None), None)
    if values_tensor is not None:
        values, vtype = np.asarray(values_tensor).reshape(-1), values_tensor.dtype
        default = np.asarray(default_tensor).reshape(-1)[0] if default_tensor is not None else (
            -0.0 if vtype.kind == "f" else -1)
    elif values_floats is not None:
        values, vtype, default = np.asarray(values_floats, np.float32), np.dtype(np.float32), default_float
    elif values_int64s is not None:
        values, vtype, default = np.asarray(values_int64s, np.int64), np.dtype(np.int64), default_int64
    else:
        values = vtype = default = None
    if keys is None or values is None or keys.size != values.size or keys.size == 0:
        c.fail("it needs as many numeric keys as values (keys_* and values_*)")
    keys = keys.reshape(-1)
    out = DType.of(vtype)
    table = _const(c, keys, x.dtype).reshape((1,) * x.ndim + (keys.size,))
    v = x.unsqueeze(-1)
    hit = v.eq(table)
    if c.opset >= 4 and x.dtype.is_float and np.isnan(keys.astype(np.float64)).any():  # onnxruntime: from opset 4
        hit = hit.logical_or(v.isnan().logical_and(table.isnan()))
    first = hit.cast(DType.I32).argmax(-1)
    found = _const(c, values.astype(vtype), out).index_select(0, first.reshape(-1).cast(I64)).reshape(tuple(x.shape))
    return F.where(hit.cast(DType.I32).max(-1).gt(0), found, _const(c, np.asarray(default, vtype), out))


@onnx_op("FeatureVectorizer", domain=ML, variadic=True)
def feature_vectorizer(c, *xs, inputdimensions=None):
    """The inputs' features side by side, as float: each (N, C) or (C,) input cut or zero-padded to
    its entry of inputdimensions."""
    dims = list(inputdimensions or [])
    if len(dims) != len(xs):
        c.fail(f"{len(xs)} inputs and {len(dims)} inputdimensions")
    parts = []
    for x, d in zip(xs, dims):
        x = _float(c, _rows(x))
        if x.ndim != 2:
            c.fail(f"an input of shape {x.shape}: (N, C) or (C,) only")
        have = int(x.shape[1])
        parts.append(x.slice(1, 0, d) if have >= d else x.pad(((0, 0), (0, d - have))))
    return F.concat(parts, 1) if len(parts) > 1 else parts[0]


COUPLING_STEPS = 100  # libsvm's (and onnxruntime's) iteration bound of multiclass_probability


def _coupled(c, s, prob_a, prob_b, pairs, k: int):
    """libsvm's multiclass_probability as onnxruntime runs it, per row: the pairwise probabilities
    r_ij = 1 - logistic(s·A + B), clamped to [1e-7, 1 - 1e-7], coupled by Wu, Lin and Weng's
    fixed-point iteration from p = 1/k, each row stopping at its own first iteration whose error is
    below 0.005/k (unrolled to the bound, a stopped row kept as it is)."""
    ft, n, n_pairs = s.dtype, s.shape[0], len(pairs)
    v = s.mul(_const(c, prob_a, ft)).add(_const(c, prob_b, ft))
    r = v.neg().sigmoid().clamp(1e-7, 1 - 1e-7)  # (N, pairs)
    put_ij, put_ji = np.zeros((n_pairs, k * k)), np.zeros((n_pairs, k * k))
    for q, (i, j) in enumerate(pairs):
        put_ij[q, i * k + j], put_ji[q, j * k + i] = 1, 1
    big_r = r.matmul(_const(c, put_ij, ft)).add(r.neg().add(1.0).matmul(_const(c, put_ji, ft))).reshape((n, k, k))
    off = _const(c, 1.0 - np.eye(k), ft).reshape((1, k, k))
    diag = big_r.square().sum(1)  # Q[t][t] = sum_j r[j][t]^2
    q = big_r.transpose(1, 2).mul(big_r).neg().mul(off).add(diag.unsqueeze(-1).mul(_const(c, np.eye(k), ft)))
    # per column (N, 1) tensors: every step is elementwise, sums over the k classes written out,
    # so the 100 steps fuse instead of costing reductions and slices per step
    qc = [[q.slice(1, t, t + 1).slice(2, j, j + 1).reshape((n, 1)) for j in range(k)] for t in range(k)]
    p = [F.full(c.g, (n, 1), 1.0 / k, ft) for _ in range(k)]
    done = F.full(c.g, (n, 1), False, DType.BOOL)
    eps = 0.005 / k

    def total(terms):
        out = terms[0]
        for t in terms[1:]:
            out = out.add(t)
        return out

    for _ in range(COUPLING_STEPS):
        qp = [total([qc[t][j].mul(p[j]) for j in range(k)]) for t in range(k)]  # Q·p
        pqp = total([p[t].mul(qp[t]) for t in range(k)])
        err = qp[0].sub(pqp).abs()
        for t in range(1, k):
            err = err.maximum(qp[t].sub(pqp).abs())
        done = done.logical_or(err.lt(err._scalar(eps)))
        new = list(p)
        for t in range(k):
            diff = qp[t].neg().add(pqp).div(qc[t][t])
            new[t] = new[t].add(diff)
            grow = diff.add(1.0)
            pqp = pqp.add(diff.mul(diff.mul(qc[t][t]).add(qp[t].mul(2.0)))).div(grow).div(grow)
            qp = [qp[j].add(diff.mul(qc[t][j])).div(grow) for j in range(k)]
            new = [v.div(grow) for v in new]
        p = [F.where(done, old, v) for old, v in zip(p, new)]
    return F.concat(p, -1)
