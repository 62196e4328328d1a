"""Loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (inference semantics)."""

from __future__ import annotations

from luminal.frontends.onnx.registry import onnx_op


def _nll(c, x, target, weight, reduction, ignore_index):
    """loss[n, d...] = -x[n, target[n, d...], d...] * weight[target], 0 where target == ignore_index."""
    if reduction not in ("none", "sum", "mean"):
        c.fail(f"reduction {reduction!r} is not one of none, sum, mean")
    if x.ndim < 2 or target.ndim != x.ndim - 1:
        c.fail(f"input of shape {x.shape} and target of shape {target.shape} do not fit (N, C, d...) and (N, d...)")
    keep = None
    if ignore_index is not None:
        keep = target.ne(ignore_index)
        target = target.where_(keep, target.mul(0))  # an ignored target may be out of range: read class 0
    picked = x.gather(1, target.unsqueeze(1)).squeeze(1)
    w = None
    if weight is not None:
        w = weight.index_select(0, target.reshape(-1)).reshape(target.shape)
    elif keep is not None:
        w = x._scalar(1.0).expand(target.shape)
    if w is not None and keep is not None:
        w = w.where_(keep, w.mul(0.0))
    loss = picked.neg() if w is None else picked.neg().mul(w)
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    return total.div(w.sum()) if w is not None else total.div(loss.mul(0).add(1).sum())


@onnx_op("NegativeLogLikelihoodLoss", since=12)
def nll_loss(c, x, target, weight=None, *, reduction="mean", ignore_index=None):
    return _nll(c, x, target, weight, reduction, ignore_index)


@onnx_op("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(c, scores, labels, weights=None, *, reduction="mean", ignore_index=None):
    log_prob = scores.log_softmax(1)
    return [_nll(c, log_prob, labels, weights, reduction, ignore_index), log_prob]
