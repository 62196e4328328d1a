"""Producers computed where they are read (`luminal/kernels/render/inline.py`): the kernel plan
drops their launches, the readers' kernels compute them, and nothing changes in the bits: every
case runs on the CUDA emulator with and without inlining and compares the outputs bit for bit
(NaN positions, signs of zero), and with the NumPy runtime by value."""

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from benchmarks.gpu_models import TINY, build_llama, weight_shapes, weight_stats
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Op
from luminal.kernels import roofline as rl
from luminal.kernels.plan import KernelPlan
from luminal.kernels.runtime import KernelRuntime

EMULATOR = lm.devices.get("cuda-emulator")
pytestmark = pytest.mark.skipif(not EMULATOR.available, reason="the CUDA emulator needs a C compiler")


def _both(outputs, feeds):
    """(outputs with inlining, without, the inlining plan)."""
    plan = KernelPlan.build(outputs)
    inl = KernelRuntime(outputs, EMULATOR, plan=plan)(feeds)
    plain = KernelRuntime(outputs, EMULATOR, plan=KernelPlan.build(outputs, inline_producers=False))(feeds)
    return inl, plain, plan


def _same_bits(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, what
    assert a.tobytes() == b.tobytes(), f"{what}: bits differ at {np.argwhere(a.view(np.uint8) != b.view(np.uint8))[:4]}"


def _check_against_numpy(g, feeds, optimize=True):
    """The graph (optimized or as built) on the emulator, inlined and not: the same bits; NumPy's
    values. The plan."""
    if optimize:
        cg = g.compile(device="numpy")
        outputs, want = cg.outputs, cg(feeds)
    else:
        outputs, want = g.output_nodes, g.run(feeds)
    inl, plain, plan = _both(outputs, feeds)
    for i, (a, b) in enumerate(zip(inl, plain)):
        _same_bits(a, b, f"output {i}")
        np.testing.assert_allclose(a, want[i], rtol=1e-6, equal_nan=True)
    return plan


def _hostile(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[:6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 3e38]
    return x


def _bf16(a):
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16)


def test_bf16_rms_norm_reads_x_in_its_own_type_and_changes_no_bits():
    """The bf16 RMS norm: no f32 copy of x and no x * x are launched; the sum and the
    normalization read x's bf16; outputs equal the uninlined plan's bits and NumPy's values."""
    rng = np.random.default_rng(0)
    g = lm.Graph("rms")
    x = g.input("x", ("n", 64), lm.bf16)
    w = g.constant(_bf16(rng.standard_normal(64)), name="w")
    g.output(x.rms_norm(w, eps=1e-5), "y")
    cg = g.compile(device="numpy")
    feeds = {"x": _bf16(rng.standard_normal((5, 64)) * 3)}
    inl, plain, plan = _both(cg.outputs, feeds)
    _same_bits(inl[0], plain[0], "rms norm")
    np.testing.assert_allclose(inl[0].astype(np.float32), cg(feeds)[0].astype(np.float32), rtol=1e-2, atol=1e-2)
    kinds = [k.output.op for k in plan.launches]
    assert Op.CAST not in kinds and Op.MUL not in kinds, kinds
    assert len(plan.launches) < len(KernelPlan.build(cg.outputs, inline_producers=False).launches)
    summed = next(k for k in plan.launches if k.output.op is Op.KAHAN_SUM)
    assert [b.dtype for b in summed.inputs] == [lm.bf16]  # x itself, not an f32 copy
    normalize = plan.launches[-1]  # x (through the inlined cast) and w, 16 bytes a load each
    assert normalize.output.dtype == lm.bf16 and normalize.source.count("*(uint4*)v") == 2


@pytest.mark.parametrize("reduce", ["sum", "max", "min"])
def test_a_reduction_of_an_expression_keeps_nan_inf_and_signed_zeros(reduce):
    """|x| * 2 - 1 reduced along each axis, through a transposed view (the producer's index from
    the view's flat address) and along the contiguous axis: NaN, ±inf, ±0 and a near-overflow."""
    rng = np.random.default_rng(1)
    g = lm.Graph("red")
    x = g.input("x", (6, 10))
    y = x.abs() * 2.0 - 1.0
    for axis in (0, 1):
        g.output(getattr(y.permute(1, 0), reduce)(axis), f"t{axis}")
        g.output(getattr(y, reduce)(axis), f"r{axis}")
    g.output(-(x * x).max(1), "negmax")  # a min of negations: the signs of zeros
    plan = _check_against_numpy(g, {"x": _hostile(rng, (6, 10))})
    assert plan.inlined, "nothing was inlined"


def test_a_bool_producer_and_a_masked_read_inline():
    """A comparison counted by a sum (a bool producer read as its compute type), and a padded
    view of an expression summed (the mask's zeros, never the expression, outside the data)."""
    rng = np.random.default_rng(2)
    g = lm.Graph("bool")
    x = g.input("x", ("n", 7))
    g.output((x > 0.25).cast(lm.f32).sum(1), "count")
    g.output((x * 3.0).exp().pad(((0, 0), (2, 3))).sum(1), "padded")
    feeds = {"x": _hostile(rng, (4, 7))}
    _check_against_numpy(g, feeds)
    plan = _check_against_numpy(g, feeds, optimize=False)  # the comparison a bool buffer of its own
    masked = [s for k in plan.launches for s in k.output.src
              if s.op is Op.VIEW and s.arg.mask is not None and id(s.src[0]) in plan.inlined]
    assert masked, "the padded expression was not inlined"
    assert any(n.dtype == lm.bool_ or any(s.dtype == lm.bool_ for s in n.src) for n in plan.inlined.values())


def test_what_is_not_inlined():
    """Outputs, producers read by a kernel that reads by pointer (a MatMul), and expensive
    producers read by several kernels stay launches of their own."""
    g = lm.Graph("kept")
    x = g.input("x", (8, 8))
    e = (x.exp() + x.sin()) * 0.5  # a region of several operations, read by two sums
    g.output(e.sum(0), "a")
    g.output(e.max(1), "b")
    g.output(x.abs(), "out")  # an output, also summed
    g.output(x.abs().sum(1), "c")
    g.output((x * 2.0).matmul(x), "mm")  # a MatMul reads its operands by pointer
    cg = g.compile(device="numpy")
    plan = KernelPlan.build(cg.outputs)
    launched = {id(k.output): k.output for k in plan.launches}
    assert not set(plan.inlined) & set(launched)
    assert not any(id(o) in plan.inlined for o in plan.outputs)
    readers = {}
    for k in plan.launches:
        for s in k.output.src:
            base = s.src[0] if s.op is Op.VIEW else s
            readers.setdefault(id(base), []).append(k.output.op)
    region = [n for n in launched.values() if n.op is Op.FUSED_ELEMENTWISE and len(readers.get(id(n), ())) == 2]
    assert region, "the shared region was inlined"
    mm = next(k for k in plan.launches if k.output.op is Op.MAT_MUL)
    assert all(id(b) not in plan.inlined for b in mm.inputs) and len(mm.inputs) == 2
    feeds = {"x": np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32)}
    inl, plain, _ = _both(cg.outputs, feeds)
    for i, (a, b) in enumerate(zip(inl, plain)):
        _same_bits(a, b, f"output {i}")


@pytest.fixture(scope="module")
def tiny_prefill():
    rng = np.random.default_rng(0)
    stats = weight_stats(TINY)
    weights = {n: _bf16(rng.standard_normal(s) * stats[n]["std"] + stats[n]["mean"])
               for n, s in weight_shapes(TINY).items()}
    return build_llama(TINY, "bf16", "prefill", weights).compile(device="numpy")


def test_llama_prefill_same_bits_fewer_launches_and_bytes(tiny_prefill):
    """The tiny bf16 Llama prefill (the GPU check's graph): the same logits bit for bit, fewer
    launches, and the roofline counts what the readers read in the producers' place."""
    feeds = {"ids": np.array([[3, 17, 250, 0, 9, 88, 1, 64]], np.int64)}
    inl, plain, plan = _both(tiny_prefill.outputs, feeds)
    _same_bits(inl[0], plain[0], "logits")
    plain_plan = KernelPlan.build(tiny_prefill.outputs, inline_producers=False)
    assert len(plan.launches) < len(plain_plan.launches)
    b = {"seq": 8}
    moved = rl.summary(rl.roofline(plan, b), rl.compulsory_bytes(plan, b))["bytes"]
    before = rl.summary(rl.roofline(plain_plan, b), rl.compulsory_bytes(plain_plan, b))["bytes"]
    assert moved < before
    for k in plan.launches:  # every buffer a launch reads is the output of an earlier launch, an input or a weight
        for s in k.inputs:
            assert id(s) not in plan.inlined
    for k in (k for k in plan.launches if k.output.op is Op.ATTENTION):  # RoPE's q computed in the tiled kernel
        assert k.output.src[0].op is Op.VIEW or k.output.src[0].op is Op.CONCAT
        assert [b.op for b in k.inputs].count(Op.CONCAT) == 1  # k's RoPE is read per query tile: launched
        assert id(k.output.src[0].src[0] if k.output.src[0].op is Op.VIEW else k.output.src[0]) in plan.inlined


@pytest.mark.parametrize("dtype", ["bf16", "f16", "i32"])
def test_an_inlined_producer_is_rounded_or_wrapped_to_its_dtype(dtype):
    """x * x in a narrow dtype, summed (and maxed): the reader sees the product as the producer's
    buffer held it, rounded to bf16/f16 (not the float it was computed in), or wrapped in int32."""
    dt = {"bf16": lm.bf16, "f16": lm.f16, "i32": DType.I32}[dtype]
    rng = np.random.default_rng(4)
    g = lm.Graph(f"narrow-{dtype}")
    x = g.input("x", ("n", 9), dt)
    g.output((x * x).sum(-1), "sum")
    g.output((x * x + x).max(-1), "max")
    if dt.is_float:
        a = rng.standard_normal((4, 9)) * 7
        a[0, :3] = [np.nan, np.inf, -0.0]
        a = a.astype(dt.numpy)
    else:
        info = np.iinfo(dt.numpy)
        a = rng.integers(info.min, info.max, (4, 9), endpoint=True).astype(dt.numpy)
    feeds = {"x": a}
    want = g.run(feeds)  # the unoptimized graph on the NumPy runtime: each product stored in its dtype
    inl, plain, plan = _both(g.output_nodes, feeds)
    assert plan.inlined
    for i, (got, old, ref) in enumerate(zip(inl, plain, want)):
        _same_bits(got, old, f"output {i}")
        np.testing.assert_array_equal(np.asarray(got, np.float64), np.asarray(ref, np.float64))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_a_reader_of_x_and_of_an_inlined_transpose_of_x(dtype):
    """x + (x * 2)ᵀ as built: the vectorized elementwise kernel preloads x's lanes at its own
    index, and the inlined product reads x at the transposed index: it must not take those
    lanes (it did, before its reads left the lanes out: every off-diagonal element was wrong)."""
    dt = {"f32": lm.f32, "bf16": lm.bf16}[dtype]
    g = lm.Graph("lanes")
    x = g.input("x", (8, 8), dt)
    g.output(x + (x * 2.0).permute(1, 0), "y")
    g.output((x * 3.0).permute(1, 0) * x + x, "z")
    feeds = {"x": np.arange(64, dtype=np.float32).reshape(8, 8).astype(dt.numpy)}
    plan = _check_against_numpy(g, feeds, optimize=False)
    assert len(plan.launches) == 2 and any("uint4" in k.source for k in plan.launches)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_scaled_scores_are_computed_in_each_softmax_pass(dtype):
    """Decode's attention as built: scores in the model's dtype, cast to f32 and scaled, then a
    Softmax, whose max pass and exp pass each compute the scaled score (no launch of their own);
    masked (-inf) rows, a NaN score and a row of -inf: the same bits as the launched scores."""
    dt = {"f32": lm.f32, "bf16": lm.bf16}[dtype]
    rng = np.random.default_rng(5)
    g = lm.Graph("decode-softmax")
    s = g.input("s", (2, 3, 40), dt)
    g.output((s.cast(lm.f32) * 0.125).softmax(-1).cast(dt), "p")
    a = rng.standard_normal((2, 3, 40)) * 4
    a[0, 0, 5:] = -np.inf  # a masked tail
    a[0, 1, :] = -np.inf  # every key masked
    a[1, 2, 7] = np.nan
    plan = _check_against_numpy(g, {"s": a.astype(dt.numpy)})
    assert plan.launches[0].output.op is Op.SOFTMAX and [b.dtype for b in plan.launches[0].inputs] == [dt]


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_decode_scores_concat_inlines_into_the_softmax(dtype):
    """Decode's attention weights: the cached keys' scores masked past the position, the new
    key's score concatenated after them, scaled in f32, a Softmax. The concat, the mask's select
    and the scale are computed in the Softmax's passes (one launch reads the two score buffers
    and the mask); a row masked entirely but for the new key, a NaN score: the same bits."""
    dt = {"f32": lm.f32, "bf16": lm.bf16}[dtype]
    rng = np.random.default_rng(6)
    g = lm.Graph("decode-concat")
    cached, new = g.input("cached", (1, 2, 3, 20), dt), g.input("new", (1, 2, 3, 1), dt)
    pos = g.input("pos", (1,), DType.I32)
    valid = g.iota(20, DType.I32).reshape(1, 1, 1, 20) < pos.reshape(1, 1, 1, 1)
    scores = lm.concat([lm.where(valid, cached, float("-inf")), new], -1)
    g.output((scores.cast(lm.f32) * 0.125).softmax(-1).cast(dt), "p")
    c = (rng.standard_normal((1, 2, 3, 20)) * 4).astype(dt.numpy)
    c[0, 1, 2, 3] = np.nan
    for at in (0, 7, 20):  # nothing cached, part of the cache, all of it
        feeds = {"cached": c, "new": (rng.standard_normal((1, 2, 3, 1)) * 4).astype(dt.numpy),
                 "pos": np.array([at], np.int32)}
        plan = _check_against_numpy(g, feeds)
    kinds = [k.output.op for k in plan.launches]
    assert Op.CONCAT not in kinds and Op.SELECT not in kinds, kinds
    if dtype == "bf16":  # the f32 cast of bf16 scores is cheap enough for each pass; in f32 the
        # scale reads the mask and both scores (more than its 4 bytes): launched once, not thrice
        soft = next(k for k in plan.launches if k.output.op is Op.SOFTMAX)
        assert sorted(b.op.name for b in soft.inputs) == ["INPUT", "INPUT", "LESS_THAN"]


def test_a_producer_read_through_a_reshape_that_splits_its_rows():
    """exp(x) * 2 (n x 64) summed as rows of 16, and x * 3 - 1 maxed down the columns of that
    reshape: the reader's index is not the producer's, so the producer's element comes from the
    view's flat address, split by the producer's strides."""
    rng = np.random.default_rng(7)
    g = lm.Graph("split")
    x = g.input("x", ("n", 64))
    g.output((x.exp() * 2.0).reshape(-1, 16).sum(-1), "rows16")
    g.output((x * 3.0 - 1.0).reshape(-1, 16).permute(1, 0).max(-1), "cols")
    plan = _check_against_numpy(g, {"x": _hostile(rng, (3, 64))})
    assert len(plan.inlined) == 2 and len(plan.launches) == 2


def test_an_expensive_producer_is_not_repeated_through_a_cheap_one():
    """exp(sin(x) * 3) + 1 (one reader: a cast) cast to f32 and read by two sums: the cast alone
    is cheap, but repeating it would repeat the region inlined into it, so it is launched once."""
    g = lm.Graph("deep")
    x = g.input("x", (6, 32), lm.bf16)
    y = ((x.sin() * 3.0).exp() + 1.0).cast(lm.f32)
    g.output(y.sum(0), "a")
    g.output(y.max(1), "b")
    plan = KernelPlan.build(g.output_nodes)
    reduce_inputs = [b for k in plan.launches if k.output.op in (Op.SUM_REDUCE, Op.MAX_REDUCE) for b in k.inputs]
    assert len(reduce_inputs) == 2 and reduce_inputs[0] is reduce_inputs[1] and reduce_inputs[0].dtype == lm.f32
    feeds = {"x": np.linspace(-3, 3, 192, dtype=np.float32).reshape(6, 32).astype(lm.bf16.numpy)}
    inl, plain, _ = _both(g.output_nodes, feeds)
    for i, (a, b) in enumerate(zip(inl, plain)):
        _same_bits(a, b, f"output {i}")
