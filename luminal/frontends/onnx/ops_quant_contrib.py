"""The com.microsoft quantized ops onnxruntime's quantization tool writes (`quantize_dynamic`,
`quantize_static` in the QOperator format, and onnxruntime's own fusions of them):
DynamicQuantizeMatMul, MatMulIntegerToFloat, QGemm, QAttention, DynamicQuantizeLSTM, with
onnxruntime's CPU kernels as the definition.

A float input is quantized dynamically to uint8 as DynamicQuantizeLinear does (onnxruntime's
`GetQuantizationParameter` + `MlasQuantizeLinear`: the range widened to include 0, scale
(max - min) / 255, zero point and values rounded half to even and saturated). The integer
product (A - a_zp) @ (B - b_zp) is exact in int32 (`ops_quant.int_matmul`); it is then scaled in float32 as the kernels
do: float(acc) * (a_scale * b_scale[col]) (+ bias), the scale product rounded to float32 first.
Scales and zero points of B may be per column (1-D over B's last axis).
"""

from __future__ import annotations

import math

from luminal.builder import functional as F
from luminal.frontends.onnx import ops_rnn
from luminal.frontends.onnx.ops_quant import RANGES, TP, _div, _minus_zp, dynamic_quantize_linear, eight_bit, int_matmul
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType

MS = "com.microsoft"


def _vector(c, v, what: str):
    """A per-tensor (0-d or one element) or per-column (1-D) scale / zero point, broadcasting
    over the last axis."""
    if v is None or v.ndim == 0:
        return v
    if v.ndim != 1:
        c.fail(f"{what} must be a scalar or 1-D (per column), got shape {v.shape}")
    return v.reshape(()) if sym.equal(v.shape[0], 1) else v


def _scalar(c, v, what: str):
    if v is not None and v.ndim and not sym.equal(sym.product(v.shape), 1):
        c.fail(f"{what} must be a scalar (per-tensor), got shape {v.shape}")
    return None if v is None else v.reshape(())


def _int_product(c, a, b, a_zp, b_zp, bound):
    """(a - a_zp) @ (b - b_zp), exact in int32 (`int_matmul`); b's zero point per column or per tensor."""
    a = _minus_zp(a, _scalar(c, a_zp, "a_zero_point"))
    return int_matmul(a, _minus_zp(b, _vector(c, b_zp, "b_zero_point"), -1), bound)


def _dequantized(c, acc, a_scale, b_scale, bias=None):
    """float32(acc) * (a_scale * b_scale) + bias, the scale product rounded to float32 first."""
    mult = _scalar(c, a_scale, "the scale of A").cast(DType.F32).mul(_vector(c, b_scale, "b_scale").cast(DType.F32))
    y = acc.cast(DType.F32).mul(mult)
    return y if bias is None else y.add(bias.cast(DType.F32))


def _quantize_rows(x):
    """DynamicQuantizeLinear of each row (last axis) of x on its own: uint8 values (i32), and
    per-row scales and zero points (keepdim), as `GetQuantizationParameter` + `MlasQuantizeLinear`
    (an all-zero row gets scale 1)."""
    maxx = x.max(-1, keepdim=True).maximum(0.0)
    minx = x.min(-1, keepdim=True).minimum(0.0)
    span = maxx.sub(minx)
    scale = _div(span, span.mul(0.0).add(255.0)).where_(maxx.ne(minx), span.mul(0.0).add(1.0))
    zp = _div(minx.neg(), scale).clamp(0.0, 255.0).round()
    q = _div(x, scale.expand(x.shape)).round().add(zp).clamp(0.0, 255.0).cast(DType.I32)
    return q, scale, zp.cast(DType.I32)


@onnx_op("DynamicQuantizeMatMul", domain=MS)
def dynamic_quantize_matmul(c, a, b, b_scale, b_zp=None, bias=None):
    qa, a_scale, a_zp = dynamic_quantize_linear(c, a)
    return _dequantized(c, _int_product(c, qa, b, a_zp, b_zp, eight_bit(c, 1)), a_scale, b_scale, bias)


@onnx_op("MatMulIntegerToFloat", domain=MS)
def matmul_integer_to_float(c, a, b, a_scale, b_scale, a_zp=None, b_zp=None, bias=None):
    y = _dequantized(c, _int_product(c, a, b, a_zp, b_zp, eight_bit(c, 0, 1)), a_scale, b_scale, bias)
    return y.cast(a_scale.dtype)


@onnx_op("QGemm", domain=MS)
def qgemm(c, a, a_scale, a_zp, b, b_scale, b_zp, cc=None, y_scale=None, y_zp=None, *, alpha=1.0, transA=0,  # noqa: N803
          transB=0):  # noqa: N803 - ORT names
    """alpha * (A - a_zp) @ (B - b_zp) (+ C, int32, added to the accumulator), scaled by
    alpha * a_scale * b_scale; with y_scale requantized: / y_scale, clamped to the output
    type's range less y_zp, rounded half to even, plus y_zp (`MlasRequantizeOutput`)."""
    a = a.T if transA else a
    b = b.T if transB else b
    acc = _int_product(c, a, b, a_zp, b_zp, eight_bit(c, 0, 3))
    if cc is not None:
        acc = acc.add(cc.cast(DType.I32))
    scale = _scalar(c, a_scale, "a_scale").cast(DType.F32)
    if alpha != 1.0:
        scale = scale.mul(float(alpha))
    scale = scale.mul(_vector(c, b_scale, "b_scale").cast(DType.F32))
    if y_scale is None:
        return acc.cast(DType.F32).mul(scale)
    scale = _div(scale, _scalar(c, y_scale, "y_scale").cast(DType.F32))
    to = (c.elem_type(8) if y_zp is not None else None) or TP.UINT8
    low, high = RANGES[to]
    zp = _scalar(c, y_zp, "y_zero_point").cast(DType.F32) if y_zp is not None else None
    r = acc.cast(DType.F32).mul(scale)
    if zp is None:
        r = r.clamp(float(low), float(high)).round()
    else:
        r = r.maximum(zp.neg().add(float(low))).minimum(zp.neg().add(float(high))).round().add(zp)
    return r.cast(DType.I32)


@onnx_op("QAttention", domain=MS)
def qattention(c, x, weight, bias, input_scale, weight_scale, mask_index=None, input_zp=None, weight_zp=None,
               past=None, *, num_heads, scale=0.0, mask_filter_value=-10000.0, unidirectional=0, do_rotary=0,
               past_present_share_buffer=0):
    """Packed-QKV self-attention over a quantized input: QKV = float32((x - x_zp) @ (W - w_zp)) *
    (input_scale * weight_scale) + bias, then attention as onnxruntime's CPU kernel computes it:
    scores = scale * Q K^T + mask, the mask additive (mask_filter_value where a 1-D mask_index's
    key length ends or a 2-D / 3-D mask is 0, and past the diagonal when unidirectional), softmax,
    times V. `present` (K and V stacked) when asked for."""
    if past is not None or do_rotary or past_present_share_buffer:
        c.fail("QAttention with a past state or rotary embedding is not supported")
    if x.ndim != 3 or weight.ndim != 2:
        c.fail(f"input (batch, seq, hidden) and weight (hidden, 3 * hidden) expected, got {x.shape} and {weight.shape}")
    bsz, seq = x.shape[0], x.shape[1]
    acc = _int_product(c, x, weight, input_zp, weight_zp, eight_bit(c, 0, 1))
    qkv = _dequantized(c, acc, input_scale, weight_scale, bias)  # (B, S, 3 * hidden)
    hidden = sym.floordiv(weight.shape[1], 3)
    head = sym.floordiv(hidden, num_heads)

    def heads(k):
        t = qkv.slice(2, sym.norm(k * hidden), sym.norm((k + 1) * hidden))
        return t.reshape((bsz, seq, num_heads, head)).permute(0, 2, 1, 3)  # (B, N, S, h)

    q, k, v = heads(0), heads(1), heads(2)
    alpha = scale or 1.0 / math.sqrt(float(head))
    scores = q.matmul(k.transpose(-2, -1)).mul(alpha)  # (B, N, S, S)
    mask = None
    if mask_index is not None:
        if mask_index.ndim == 1:  # each batch row's key length (right padding)
            if not sym.equal(mask_index.shape[0], bsz):
                c.fail(f"a 1-D mask_index of {mask_index.shape[0]} elements (start and end positions) is not supported")
            keep = F.arange(c.g, 0, seq, dtype=mask_index.dtype).reshape((1, seq)).lt(mask_index.reshape((bsz, 1)))
            keep = keep.reshape((bsz, 1, 1, seq))
        elif mask_index.ndim in (2, 3):  # (B, T) or (B, S, T): 1 attends, 0 does not
            keep = mask_index.gt(0)
            keep = keep.reshape((bsz, 1, 1, seq)) if mask_index.ndim == 2 else keep.unsqueeze(1)
        else:
            c.fail(f"a mask_index of rank {mask_index.ndim} is not supported")
        zero = scores.mul(0.0)
        mask = zero.where_(keep, zero.add(mask_filter_value))
    if unidirectional:
        zero = scores.mul(0.0)
        causal = F.triangle(zero.add(1.0), 0, upper=False).ne(0.0)
        future = zero.where_(causal, zero.add(mask_filter_value))
        mask = future if mask is None else mask.add(future)
    if mask is not None:
        scores = scores.add(mask)
    out = scores.softmax(-1).matmul(v).permute(0, 2, 1, 3).reshape((bsz, seq, hidden))
    out, k, v = (t.cast(input_scale.dtype) for t in (out, k, v))  # T3: float or float16
    if c.n_outputs > 1 and c.outputs_wanted[1]:
        return [out, F.stack([k, v], 0)]
    return out


@onnx_op("DynamicQuantizeLSTM", domain=MS)
def dynamic_quantize_lstm(c, x, W, R, B=None, seq_lens=None, initial_h=None, initial_c=None, P=None,  # noqa: N803
                          W_scale=None, W_zp=None, R_scale=None, R_zp=None, *, activation_alpha=None,  # noqa: N803
                          activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None,
                          input_forget=0):
    """ONNX's LSTM (layout 0) with W (dirs, input, 4 * hidden) and R (dirs, hidden, 4 * hidden)
    quantized, per direction or per column. As onnxruntime's kernel: X @ W is one quantized
    GEMM over every step (X quantized once), and each step's H @ R quantizes that step's H
    afresh, each batch row on its own. (onnxruntime quantizes H in the chunks of rows its
    threads take: one row per thread when it has a thread per row, as here; the whole batch on
    one thread. At batch 1 the two agree.)"""
    dirs = 2 if direction == "bidirectional" else 1
    if W.ndim != 3 or R.ndim != 3:
        c.fail(f"W (dirs, input, 4 * hidden) and R (dirs, hidden, 4 * hidden) expected, got {W.shape} and {R.shape}")
    width = W.shape[2]

    def per_dir(v, what):  # (dirs,) or (dirs, 4 * hidden) -> (dirs, 4 * hidden)
        if v.ndim == 1:
            return v.reshape((v.shape[0], 1)).expand((v.shape[0], width))
        if v.ndim != 2:
            c.fail(f"{what} must be (num_directions,) or (num_directions, 4 * hidden_size), got shape {v.shape}")
        return v

    w_scale, w_zp = per_dir(W_scale, "W_scale"), per_dir(W_zp, "W_zero_point")
    r_scale, r_zp = per_dir(R_scale, "R_scale"), per_dir(R_zp, "R_zero_point")

    def project(xs):  # (seq, batch, input) -> (seq, batch, dirs * 4 * hidden)
        qx, x_scale, x_zp = dynamic_quantize_linear(c, xs)
        wq = W.permute(1, 0, 2).reshape((W.shape[1], sym.norm(dirs * width)))
        acc = _int_product(c, qx, wq, x_zp, w_zp.reshape((sym.norm(dirs * width),)), eight_bit(c, 1, 2))
        return _dequantized(c, acc, x_scale, w_scale.reshape((sym.norm(dirs * width),)))

    def recurrent(d, h):  # h (batch, hidden), each row quantized on its own
        qh, h_scale, h_zp = _quantize_rows(h)
        acc = int_matmul(_minus_zp(qh, h_zp), _minus_zp(R[d], r_zp[d], -1), eight_bit(c, 1, 2))
        return acc.cast(DType.F32).mul(h_scale.mul(r_scale[d].cast(DType.F32)))

    acts = ops_rnn._activations(c, activations, activation_alpha, activation_beta, 3, dirs, ["Sigmoid", "Tanh", "Tanh"])
    step = ops_rnn.lstm_step(acts, R.shape[1], P, clip, input_forget, recurrent)
    initial = ops_rnn._initial(0, initial_h, initial_c)
    return ops_rnn._run(c, x, None, R.permute(0, 2, 1), B, seq_lens, initial, direction, 0, 4, step, project)
