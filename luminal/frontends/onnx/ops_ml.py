"""ai.onnx.ml ops that are tensor arithmetic: Binarizer, ArrayFeatureExtractor, TreeEnsemble.

(The older TreeEnsembleRegressor / Classifier and what else scikit-learn converters emit:
`ops_ml_sklearn`; LabelEncoder and CategoryMapper on strings run on the host: `strings.py`.)"""

from __future__ import annotations

import numpy as np

from luminal.builder import functional as F
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir.dtypes import DType

I64 = DType.I64

ML = "ai.onnx.ml"


@onnx_op("Binarizer", domain=ML)
def binarizer(c, x, *, threshold=0.0):
    """1 where x > threshold, else 0 (NaN gives 0), in x's type."""
    return x.gt(x._scalar(threshold)).cast(x.dtype)


@onnx_op("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(c, x, indices):
    """x[..., indices.ravel()]; a 1-D x gives one row (onnxruntime's shape). An index outside
    [0, x.shape[-1]) fails at run time (IndexOutOfRange), as onnxruntime rejects it."""
    if x.ndim == 1:
        x = x.reshape((1, x.shape[0]))
    idx = indices.reshape(-1)
    n = idx.shape[0]
    lead = tuple(x.shape[:-1])
    return x.gather(x.ndim - 1, idx.reshape((1,) * len(lead) + (n,)).expand(lead + (n,)))


# TreeEnsemble node modes (ai.onnx.ml 5): BRANCH_LEQ, LT, GTE, GT, EQ, NEQ, MEMBER
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
AGGREGATES = {0: "average", 1: "sum", 2: "min", 3: "max"}


@onnx_op("TreeEnsemble", since=5, domain=ML)
def tree_ensemble(c, x, *, nodes_splits, nodes_featureids, nodes_modes, nodes_truenodeids, nodes_falsenodeids,
                  nodes_trueleafs, nodes_falseleafs, leaf_targetids, leaf_weights, tree_roots, n_targets=None,
                  aggregate_function=1, post_transform=0, nodes_missing_value_tracks_true=None, membership_values=None,
                  nodes_hitrates=None):
    """Every (sample, tree) walks the trees in lockstep, one level per step (as many steps as the
    deepest tree, leaves stepping to themselves): the node's feature, split and mode are gathered
    from constant tables, the branch taken by a where; then the leaves' weights are aggregated per
    target (sum, average, min or max) as onnx's reference does. post_transform NONE only."""
    if post_transform != 0:
        c.fail(f"post_transform {post_transform} is not supported (NONE only, as onnx's reference)")
    if aggregate_function not in AGGREGATES:
        c.fail(f"aggregate_function {aggregate_function} is not one of {sorted(AGGREGATES)}")
    if x.ndim != 2 or not x.dtype.is_float:
        c.fail(f"X of shape {x.shape} and dtype {x.dtype} is not a float (N, features) matrix")
    modes = np.asarray(nodes_modes).reshape(-1).astype(np.int64)
    splits = np.asarray(nodes_splits, np.float64).reshape(-1)
    feats = np.asarray(nodes_featureids, np.int64)
    t_ids, f_ids = np.asarray(nodes_truenodeids, np.int64), np.asarray(nodes_falsenodeids, np.int64)
    t_leaf, f_leaf = np.asarray(nodes_trueleafs, bool), np.asarray(nodes_falseleafs, bool)
    weights = np.asarray(leaf_weights, np.float64).reshape(-1)
    targets = np.asarray(leaf_targetids, np.int64)
    roots = np.asarray(tree_roots, np.int64)
    n_nodes, n_leaves = len(modes), len(weights)
    if not (len(splits) == len(feats) == len(t_ids) == len(f_ids) == len(t_leaf) == len(f_leaf) == n_nodes) \
            or len(targets) != n_leaves or n_targets is None or len(roots) == 0:
        c.fail("the node, leaf and root attributes differ in length")
    if modes.min(initial=0) < 0 or modes.max(initial=0) > MEMBER:
        c.fail(f"node modes {sorted(set(modes.tolist()))} are not all in 0..6")
    missing = np.zeros(n_nodes, bool) if nodes_missing_value_tracks_true is None else \
        np.asarray(nodes_missing_value_tracks_true, bool)
    members = np.full((n_nodes, 1), np.nan)  # each MEMBER node's set, NaN-padded (NaN equals nothing)
    if (modes == MEMBER).any():
        if membership_values is None:
            c.fail("set-membership nodes without membership_values")
        sets, cur = [], []
        for v in np.asarray(membership_values, np.float64).reshape(-1):
            if np.isnan(v):
                sets.append(cur)
                cur = []
            else:
                cur.append(v)
        member_nodes = np.flatnonzero(modes == MEMBER)
        if len(sets) != len(member_nodes):
            c.fail("membership_values does not hold one NaN-terminated set per membership node")
        members = np.full((n_nodes, max(1, max(len(s) for s in sets))), np.nan)
        for node, s in zip(member_nodes, sets):
            members[node, :len(s)] = s
    # slots: nodes 0..n_nodes-1, then leaves; a leaf steps to itself
    nxt_t = np.concatenate([np.where(t_leaf, t_ids + n_nodes, t_ids), n_nodes + np.arange(n_leaves)])
    nxt_f = np.concatenate([np.where(f_leaf, f_ids + n_nodes, f_ids), n_nodes + np.arange(n_leaves)])
    if nxt_t.min() < 0 or nxt_t.max() >= n_nodes + n_leaves or nxt_f.min() < 0 or nxt_f.max() >= n_nodes + n_leaves:
        c.fail("a node points outside the node or leaf arrays")
    start = np.where(t_leaf[roots] & f_leaf[roots] & (t_ids[roots] == f_ids[roots]), t_ids[roots] + n_nodes, roots)
    depth = _depth(start, nxt_t, nxt_f, n_nodes, c)
    ft, n = x.dtype, x.shape[0]
    n_trees = len(roots)

    def table(a, dtype):
        return c.g.constant(np.asarray(a).astype(dtype.numpy), dtype)

    pad = np.zeros(n_leaves)
    tab = {"feat": table(np.concatenate([feats, pad.astype(np.int64)]), I64),
           "split": table(np.concatenate([splits, pad]), ft), "mode": table(np.concatenate([modes, pad]), I64),
           "miss": table(np.concatenate([missing, pad.astype(bool)]), DType.BOOL),
           "t": table(nxt_t, I64), "f": table(nxt_f, I64)}
    member_tab = table(np.concatenate([members, np.full((n_leaves, members.shape[1]), np.nan)]), ft)
    state = table(start, I64).reshape((1, n_trees)).expand((n, n_trees))

    def at(name, s):
        return tab[name].index_select(0, s.reshape(-1)).reshape((n, n_trees))

    for _ in range(depth):
        v = x.gather(1, at("feat", state).clamp(0, None))  # (N, T): the node's feature of each sample
        sp, mode = at("split", state), at("mode", state)
        in_set = member_tab.index_select(0, state.reshape(-1)).reshape((n, n_trees, members.shape[1]))
        in_set = in_set.eq(v.unsqueeze(-1)).cast(DType.I32).max(-1).gt(0)
        go = in_set
        for m, cmp in ((LEQ, v.le(sp)), (LT, v.lt(sp)), (GTE, v.ge(sp)), (GT, v.gt(sp)), (EQ, v.eq(sp)), (NEQ, v.ne(sp))):
            go = F.where(mode.eq(m), cmp, go)
        go = go.logical_or(at("miss", state).logical_and(v.isnan()))
        state = F.where(go, at("t", state), at("f", state))
    leaf = state.sub(c.g.scalar(n_nodes, I64))
    w = table(weights, ft).index_select(0, leaf.reshape(-1)).reshape((n, n_trees, 1))
    tid = table(targets, I64).index_select(0, leaf.reshape(-1)).reshape((n, n_trees, 1))
    hit = tid.eq(F.arange(c.g, 0, int(n_targets), dtype=I64).reshape((1, 1, int(n_targets))))
    agg = AGGREGATES[aggregate_function]
    if agg in ("sum", "average"):
        if agg == "average":
            w = w.div(float(n_trees))
        return F.where(hit, w, 0.0).sum(1)
    big = float(np.finfo(ft.numpy).max)
    if agg == "min":
        return F.where(hit, w, big).min(1).minimum(big)
    return F.where(hit, w, -big).max(1).maximum(-big)


def _depth(start, nxt_t, nxt_f, n_nodes: int, c) -> int:
    """The number of branch steps of the deepest tree (a cycle is an import error)."""
    best = 0
    stack = [(int(s), 0) for s in start]
    while stack:
        slot, d = stack.pop()
        if slot >= n_nodes:
            best = max(best, d)
            continue
        if d > n_nodes:
            c.fail("the trees contain a cycle")
        stack.extend(((int(nxt_t[slot]), d + 1), (int(nxt_f[slot]), d + 1)))
    return best
