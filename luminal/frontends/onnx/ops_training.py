"""The optimizer steps of ai.onnx.preview.training (Adagrad, Adam, Momentum): one update of
each (X, G, state...) group, elementwise, as onnx's reference writes it. They are plain tensor
arithmetic, so an inference compiler runs them too (the gradient ops of the domain are not
lowered)."""

from __future__ import annotations

from luminal.builder import functional as F
from luminal.frontends.onnx.registry import onnx_op

TRAINING = "ai.onnx.preview.training"


def _groups(c, rest, per: int):
    if not rest or len(rest) % per:
        c.fail(f"{len(rest)} tensor inputs after R and T do not split into groups of {per}")
    n = len(rest) // per
    return [[rest[k * n + i] for k in range(per)] for i in range(n)]


def _scalar(t, like):
    return t.reshape(()).cast(like.dtype)


@onnx_op("Adagrad", domain=TRAINING, variadic=True)
def adagrad(c, r, t, *rest, decay_factor=0.0, epsilon=0.0, norm_coefficient=0.0):
    xs, hs = [], []
    for x, g, h in _groups(c, rest, 3):
        step = _scalar(t, x)
        lr = _scalar(r, x).div(step.mul(decay_factor).add(1.0))
        g_reg = x.mul(norm_coefficient).add(g)
        h_new = h.add(g_reg.mul(g_reg))
        xs.append(x.sub(lr.mul(g_reg).div(h_new.sqrt().add(epsilon))))
        hs.append(h_new)
    return xs + hs


@onnx_op("Adam", domain=TRAINING, variadic=True)
def adam(c, r, t, *rest, alpha=0.9, beta=0.999, epsilon=0.0, norm_coefficient=0.0, norm_coefficient_post=0.0):
    xs, vs, hs = [], [], []
    for x, g, v, h in _groups(c, rest, 4):
        step = _scalar(t, x)
        g_reg = x.mul(norm_coefficient).add(g)
        v_new = v.mul(alpha).add(g_reg.mul(1 - alpha))
        h_new = h.mul(beta).add(g_reg.mul(g_reg).mul(1 - beta))
        lr = _scalar(r, x)
        a_t, b_t = x._scalar(alpha).pow(step), x._scalar(beta).pow(step)
        corrected = lr.mul(b_t.neg().add(1.0).sqrt()).div(a_t.neg().add(1.0))  # bias correction when T > 0
        lr = F.where(step.gt(0.0), corrected, lr)
        x_new = x.sub(lr.mul(v_new.div(h_new.sqrt().add(epsilon))))
        xs.append(x_new.mul(1 - norm_coefficient_post))
        vs.append(v_new)
        hs.append(h_new)
    return xs + vs + hs


@onnx_op("Momentum", domain=TRAINING, variadic=True)
def momentum(c, r, t, *rest, alpha, beta, mode, norm_coefficient):
    if mode not in ("standard", "nesterov"):
        c.fail(f"mode {mode!r} is not standard or nesterov")
    xs, vs = [], []
    for x, g, v in _groups(c, rest, 3):
        step = _scalar(t, x)
        g_reg = x.mul(norm_coefficient).add(g)
        b = F.where(step.gt(0.0), x._scalar(beta), 1.0)  # the gradient's coefficient is 1 at the first step
        v_new = v.mul(alpha).add(g_reg.mul(b))
        lr = _scalar(r, x)
        if mode == "standard":
            xs.append(x.sub(lr.mul(v_new)))
        else:
            xs.append(x.sub(lr.mul(g_reg.add(v_new.mul(alpha)))))
        vs.append(v_new)
    return xs + vs
