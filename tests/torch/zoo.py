"""A zoo of small torch modules: (name, module factory, input factory). Shared by the tests.

Inputs are deterministic (seeded by the case name). Every module is checked against eager
through both `torch.compile(backend="luminal")` and `luminal.compile`.
"""

from __future__ import annotations

import zlib

import torch
import torch.nn.functional as F
from torch import nn


class Fn(nn.Module):
    """A module around a function; weights and buffers given as keyword tensors."""

    def __init__(self, fn, **tensors):
        super().__init__()
        self.fn = fn
        for k, v in tensors.items():
            if isinstance(v, nn.Parameter):
                self.register_parameter(k, v)
            else:
                self.register_buffer(k, v)

    def forward(self, *args):
        return self.fn(self, *args)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def randint(lo, hi, *shape, seed=0, dtype=torch.int64):
    return torch.randint(lo, hi, shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


X = lambda *shape: (lambda: (randn(*shape),))  # noqa: E731
XY = lambda a, b: (lambda: (randn(*a, seed=1), randn(*b, seed=2)))  # noqa: E731


def f(fn, **tensors):
    return lambda: Fn(fn, **tensors)


def mod(cls, *args, **kwargs):
    def make():
        torch.manual_seed(0)
        return cls(*args, **kwargs).eval()

    return make


CASES = [
    # --- constants of every dtype added to float inputs ---------------------------------
    ("const_int32", f(lambda s, x: x + torch.tensor([1, -2, 3, 4], dtype=torch.int32)), X(3, 4)),
    ("const_int64", f(lambda s, x: x * torch.tensor([1, -2, 3, 4], dtype=torch.int64)), X(3, 4)),
    ("const_float64", f(lambda s, x: x + torch.tensor([0.5, -2.25, 3.0, 4.125], dtype=torch.float64)), X(3, 4)),
    ("const_bool", f(lambda s, x: x + torch.tensor([True, False, True, False])), X(3, 4)),
    ("const_0d_float64", f(lambda s, x: x * torch.tensor(1.5, dtype=torch.float64)), X(3, 4)),
    ("buffer_int32", f(lambda s, x: x - s.b, b=torch.arange(4, dtype=torch.int32)), X(3, 4)),
    ("int_input_plus_float", f(lambda s, i: i + 0.5), lambda: (randint(-5, 5, 3, 4),)),
    ("bool_input_times_float", f(lambda s, m, x: m * x), lambda: (randn(3, 4, seed=3) > 0, randn(3, 4))),
    ("int32_plus_int64", f(lambda s, a, b: a + b), lambda: (randint(-9, 9, 3, 4, dtype=torch.int32), randint(-9, 9, 4))),
    ("scalar_ops_int", f(lambda s, i: (i * 3 - 7) // 2), lambda: (randint(-20, 20, 5, 3),)),
    # --- casts ---------------------------------------------------------------------------
    ("cast_to_int32", f(lambda s, x: (x * 10).to(torch.int32)), X(4, 5)),
    ("cast_to_int64_back", f(lambda s, x: (x * 10).long().float() / 10), X(4, 5)),
    ("cast_to_float64", f(lambda s, x: x.double() * 3), X(4, 5)),
    ("cast_to_bool", f(lambda s, x: (x * 2).round().bool()), X(4, 5)),
    ("cast_half_roundtrip", f(lambda s, x: x.half().float()), X(4, 5)),
    ("int_true_div", f(lambda s, a, b: a / b), lambda: (randint(-50, 50, 4, 4), randint(1, 9, 4, 4, seed=5))),
    # --- permutes and transposes ----------------------------------------------------------
    ("permute_3d", f(lambda s, x: x.permute(2, 0, 1) * 2), X(2, 3, 4)),
    ("transpose", f(lambda s, x: x.transpose(0, 2) + 1), X(2, 3, 4)),
    ("t_2d", f(lambda s, x: x.t() - 1), X(3, 5)),
    ("permute_reshape", f(lambda s, x: x.permute(0, 2, 1).reshape(2, -1) * 3), X(2, 3, 4)),
    ("mT", f(lambda s, x: x.mT @ x), X(2, 3, 4)),
    # --- unary math ----------------------------------------------------------------------
    ("sigmoid", f(lambda s, x: torch.sigmoid(x)), X(4, 6)),
    ("tanh", f(lambda s, x: torch.tanh(x)), X(4, 6)),
    ("relu", f(lambda s, x: torch.relu(x)), X(4, 6)),
    ("abs", f(lambda s, x: x.abs()), X(4, 6)),
    ("neg", f(lambda s, x: -x), X(4, 6)),
    ("clip_min", f(lambda s, x: x.clip(min=-0.5)), X(4, 6)),
    ("clip_max", f(lambda s, x: x.clip(max=0.25)), X(4, 6)),
    ("clip_both", f(lambda s, x: x.clamp(-0.5, 0.5)), X(4, 6)),
    ("clip_int", f(lambda s, i: i.clamp(-3, 4)), lambda: (randint(-10, 10, 4, 6),)),
    ("sqrt", f(lambda s, x: x.abs().sqrt()), X(4, 6)),
    ("sin", f(lambda s, x: torch.sin(x * 3)), X(4, 6)),
    ("cos", f(lambda s, x: torch.cos(x * 3)), X(4, 6)),
    ("exp_log", f(lambda s, x: x.exp() + (x.abs() + 0.1).log()), X(4, 6)),
    ("rsqrt_reciprocal", f(lambda s, x: (x.abs() + 0.5).rsqrt() + (x + 3).reciprocal()), X(4, 6)),
    ("gelu", f(lambda s, x: F.gelu(x)), X(4, 6)),
    ("gelu_tanh", f(lambda s, x: F.gelu(x, approximate="tanh")), X(4, 6)),
    ("silu_softplus", f(lambda s, x: F.silu(x) + F.softplus(x)), X(4, 6)),
    ("leaky_relu_hardtanh", f(lambda s, x: F.leaky_relu(x, 0.1) + F.hardtanh(x)), X(4, 6)),
    ("erf", f(lambda s, x: torch.erf(x)), X(4, 6)),
    ("rounding", f(lambda s, x: torch.stack([(x * 4).floor(), (x * 4).ceil(), (x * 4).round(), (x * 4).trunc()])), X(4, 6)),
    ("sign", f(lambda s, x: torch.sign(x)), X(4, 6)),
    ("pow_int_exponent", f(lambda s, x: x ** 3 + x ** 2), X(4, 6)),
    ("pow_float_exponent", f(lambda s, x: x.abs() ** 1.7), X(4, 6)),
    ("pow_tensor", f(lambda s, a, b: a.abs().pow(b)), XY((3, 4), (3, 4))),
    # --- fmod / remainder with negatives --------------------------------------------------
    ("fmod_float", f(lambda s, x: torch.fmod(x * 5, 1.5)), X(4, 6)),
    ("fmod_int", f(lambda s, i: torch.fmod(i, 3)), lambda: (randint(-20, 20, 4, 6),)),
    ("remainder_float", f(lambda s, x: torch.remainder(x * 5, -1.5)), X(4, 6)),
    ("remainder_int", f(lambda s, i: i % 7), lambda: (randint(-20, 20, 4, 6),)),
    ("remainder_int_neg_divisor", f(lambda s, a, b: torch.remainder(a, b)),
     lambda: (randint(-20, 20, 4, 6), randint(1, 5, 4, 6, seed=3) * torch.tensor([1, -1, 1, -1, 1, -1]))),
    ("floor_divide_int", f(lambda s, a, b: torch.div(a, b, rounding_mode="floor")),
     lambda: (randint(-20, 20, 4, 6), randint(1, 5, 4, 6, seed=3) * torch.tensor([1, -1, 1, -1, 1, -1]))),
    ("div_trunc", f(lambda s, a, b: torch.div(a, b, rounding_mode="trunc")), XY((4, 6), (4, 6))),
    ("maximum_minimum", f(lambda s, a, b: torch.maximum(a, b) - torch.minimum(a, b * 2)), XY((4, 6), (6,))),
    # --- where, comparisons, logic --------------------------------------------------------
    ("where", f(lambda s, a, b: torch.where(a > 0, a, b)), XY((4, 6), (4, 6))),
    ("where_scalar", f(lambda s, x: torch.where(x > 0.2, x, -1.0)), X(4, 6)),
    ("masked_fill", f(lambda s, x: x.masked_fill(x < 0, float("-inf")).softmax(-1)), X(4, 6)),
    ("comparisons", f(lambda s, a, b: torch.stack([a == b, a != b, a < b, a <= b, a > b, a >= b])),
     lambda: (randint(0, 3, 4, 5).float(), randint(0, 3, 4, 5, seed=9).float())),
    ("compare_scalar", f(lambda s, x: torch.stack([x > 0.1, x <= -0.2, x == 0])), X(4, 6)),
    ("compare_int_float", f(lambda s, i, x: i < x), lambda: (randint(-2, 2, 4, 6), randn(4, 6))),
    ("logical", f(lambda s, a, b: ((a > 0) & (b > 0)) | ~(a > b) ^ (b < -1)), XY((4, 6), (4, 6))),
    ("isnan_isinf", f(lambda s, x: torch.isnan(x.log()) | torch.isinf(1.0 / (x.round()))), X(4, 6)),
    # --- reductions ----------------------------------------------------------------------
    ("sum_all", f(lambda s, x: x.sum()), X(4, 6)),
    ("sum_dim_keepdim", f(lambda s, x: x.sum(1, keepdim=True) + x.sum((0, 2))[None, :, None]), X(3, 4, 5)),
    ("sum_int_bool", f(lambda s, i: (i.sum(0), (i > 0).sum(-1))), lambda: (randint(-9, 9, 4, 6, dtype=torch.int32),)),
    ("mean", f(lambda s, x: x.mean(-1) + x.mean()), X(4, 6)),
    ("amax_amin", f(lambda s, x: x.amax(0) - x.amin(-1).sum()), X(4, 6)),
    ("max_dim", f(lambda s, x: x.max(dim=1)), X(4, 6)),
    ("min_dim_keepdim", f(lambda s, x: x.min(dim=0, keepdim=True)), X(4, 6)),
    ("argmax_argmin", f(lambda s, x: (x.argmax(-1), x.argmin(0), x.argmax())), X(4, 6)),
    ("prod", f(lambda s, x: x.prod(-1)), X(4, 6)),
    ("var_std", f(lambda s, x: (x.var(-1), x.std(0, unbiased=False))), X(4, 6)),
    ("any_all", f(lambda s, x: ((x > 1).any(-1), (x > -2).all(0), (x > 2).any())), X(4, 6)),
    ("cumsum", f(lambda s, x, i: (x.cumsum(-1), i.cumsum(0))), lambda: (randn(4, 6), randint(-5, 5, 4, 6))),
    ("logsumexp", f(lambda s, x: torch.logsumexp(x, -1)), X(4, 6)),
    # --- matmul shapes -------------------------------------------------------------------
    ("matmul_2d", f(lambda s, a, b: a @ b), XY((5, 7), (7, 3))),
    ("matmul_batched", f(lambda s, a, b: a @ b), XY((2, 5, 7), (2, 7, 3))),
    ("matmul_broadcast", f(lambda s, a, b: a @ b), XY((2, 3, 5, 7), (1, 7, 4))),
    ("matmul_3d_2d", f(lambda s, a, b: a @ b), XY((2, 5, 7), (7, 3))),
    ("matmul_vec", f(lambda s, a, b: (a @ b, b @ a.T)), XY((5, 7), (7,))),
    ("bmm", f(lambda s, a, b: torch.bmm(a, b)), XY((3, 4, 5), (3, 5, 2))),
    ("linear", mod(nn.Linear, 8, 5), X(2, 3, 8)),
    ("linear_no_bias", mod(nn.Linear, 8, 5, bias=False), X(3, 8)),
    ("mlp", lambda: mod(nn.Sequential, nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))(), X(2, 8)),
    # --- nn layers -----------------------------------------------------------------------
    ("softmax", f(lambda s, x: torch.softmax(x, -1) + torch.softmax(x, 0)), X(4, 6)),
    ("log_softmax", f(lambda s, x: F.log_softmax(x, dim=-1)), X(4, 6)),
    ("layer_norm", mod(nn.LayerNorm, 6), X(2, 4, 6)),
    ("layer_norm_2d", mod(nn.LayerNorm, (4, 6)), X(2, 4, 6)),
    ("rms_norm", mod(nn.RMSNorm, 6), X(2, 4, 6)),
    ("group_norm", mod(nn.GroupNorm, 2, 4), X(2, 4, 3, 3)),
    ("batch_norm_eval", mod(nn.BatchNorm2d, 3), X(2, 3, 4, 4)),
    ("embedding", mod(nn.Embedding, 10, 4), lambda: (randint(0, 10, 2, 5),)),
    ("conv1d", mod(nn.Conv1d, 3, 4, 3, padding=1), X(2, 3, 9)),
    ("conv2d", mod(nn.Conv2d, 3, 4, 3), X(1, 3, 6, 6)),
    ("conv2d_stride_pad_dilation", mod(nn.Conv2d, 2, 4, 3, stride=2, padding=2, dilation=2), X(2, 2, 9, 8)),
    ("conv2d_groups", mod(nn.Conv2d, 4, 6, (3, 1), groups=2, bias=False), X(1, 4, 5, 5)),
    ("avg_max_pool", f(lambda s, x: (F.avg_pool2d(x, 2), F.max_pool2d(x, 3, stride=2, padding=1))), X(1, 2, 6, 6)),
    # --- slicing, cat, split, indexing ---------------------------------------------------
    ("slice_steps", f(lambda s, x: x[:, ::2] + x[:, 1::2]), X(4, 6)),
    ("slice_negative", f(lambda s, x: x[1:-1:2, -3:] * x[-1, -3:]), X(6, 5)),
    ("select_and_narrow", f(lambda s, x: x[:, 2] + x.narrow(1, 1, 1).squeeze(1)), X(4, 6)),
    ("flip_roll", f(lambda s, x: x.flip(0) + x.roll(2, 1)), X(4, 6)),
    ("cat", f(lambda s, a, b: torch.cat([a, b, a], dim=1)), XY((2, 3), (2, 4))),
    ("cat_mixed_dtypes", f(lambda s, a, i: torch.cat([a, i], 0)), lambda: (randn(2, 3), randint(0, 9, 1, 3))),
    ("split", f(lambda s, x: torch.split(x, [2, 1, 3], dim=1)), X(4, 6)),
    ("chunk_unbind", f(lambda s, x: (*x.chunk(3, -1), *x.unbind(0))), X(2, 6)),
    ("stack_expand_repeat", f(lambda s, x: torch.stack([x.expand(3, 4), x.expand(3, 4)[0:1].expand(3, 4)]).repeat(1, 2, 1)), X(1, 4)),
    ("pad", f(lambda s, x: F.pad(x, (1, 2, 0, 1), value=0.5)), X(2, 3, 4)),
    ("gather", f(lambda s, x, i: torch.gather(x, 1, i)), lambda: (randn(4, 6), randint(0, 6, 4, 3))),
    ("scatter", f(lambda s, x, i: torch.zeros(4, 6).scatter(1, i, x)), lambda: (randn(4, 2), torch.tensor([[0, 5], [1, 4], [2, 3], [3, 2]]))),
    ("scatter_add", f(lambda s, x, i: torch.zeros(4, 6).scatter_add(1, i, x)), lambda: (randn(4, 3), randint(0, 6, 4, 3))),
    ("index_tensor", f(lambda s, x, i: x[i] + x[:, i].sum()), lambda: (randn(6, 6), torch.tensor([0, 5, -1, 2]))),
    ("index_2d", f(lambda s, x, i, j: x[i, j]), lambda: (randn(5, 6), torch.tensor([0, 4, 1]), torch.tensor([5, 0, 2]))),
    ("index_put", f(lambda s, x, i: x.clone().index_put_((i,), torch.ones(3, 6))), lambda: (randn(5, 6), torch.tensor([4, 0, 2]))),
    ("index_put_accumulate", f(lambda s, x, i: torch.zeros(5, 6).index_put_((i,), x, accumulate=True)),
     lambda: (randn(4, 6), torch.tensor([1, 1, 3, 0]))),
    ("setitem_mask", f(lambda s, x: _setitem_mask(x)), X(4, 6)),
    ("topk", f(lambda s, x: torch.topk(x, 3, dim=-1)), X(4, 6)),
    ("sort_argsort", f(lambda s, x: (torch.sort(x, dim=0, descending=True), torch.argsort(x, -1))), X(4, 6)),
    ("tril_triu", f(lambda s, x: x.tril() + x.triu(1) * 2), X(5, 5)),
    ("arange_ops", f(lambda s, x: x * torch.arange(x.shape[-1]) + torch.arange(2, 14, 2)), X(3, 6)),
    ("full_like_ones", f(lambda s, x: torch.ones_like(x) * 2 + torch.full((6,), 3.0) + torch.zeros_like(x)), X(3, 6)),
    ("attention", f(lambda s, q, k: F.scaled_dot_product_attention(q, k, k, is_causal=True)), XY((1, 2, 5, 8), (1, 2, 5, 8))),
    ("inplace_ops", f(lambda s, x: _inplace(x)), X(3, 4)),
]


def _setitem_mask(x):
    y = x.clone()
    y[y < 0] = 0.0
    return y


def _inplace(x):
    y = x * 2
    y.add_(1).mul_(3)
    y[0] = 7.0
    return y.relu_()


def case_inputs(name, make_inputs):
    torch.manual_seed(zlib.crc32(name.encode()))
    return make_inputs()
