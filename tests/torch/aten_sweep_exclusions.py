"""The ATen edge sweep's explained exclusions: (overload, layouts, dtypes, reason). Every case of
a listed (layout, dtype) that torch accepts must FAIL in luminal (a named error at compile time,
or a known disagreement explained here); test_aten_edge_sweep.py asserts the failing set is
exactly this one, so a fixed case must be removed from here."""

import torch

# An expectation that depends on the CPU, probed on this one (the sweep's flipped layout): oneDNN's
# AVX-512 gelu (an AVX-512 CPU, unless LUMINAL_ISA=avx2 / ONEDNN_MAX_CPU_ISA) answers NaN for +inf.
_TORCH_GELU_INF_IS_NAN = bool(torch.nn.functional.gelu(torch.full((3, 4), float("inf")).flip(-1)).isnan().any())

ALL_LAYOUTS = ("0d", "empty", "expand", "t", "flip")
INTS = ("i64", "i32")
NOT_EMPTY = ("0d", "expand", "t", "flip")

EXCLUDED = [
    *[(f"bitwise_{op}.{ov}", ALL_LAYOUTS, INTS + (("bool",) if ov == "Scalar" else ()),
       "bitwise ops on integers: HLIR has no bit primitives; UnsupportedError (a bool subject with an int "
       "scalar promotes to int64 too)") for op in ("and", "or", "xor") for ov in ("Tensor", "Scalar")],
    ("bitwise_not.default", ALL_LAYOUTS, INTS, "bitwise_not on integers: no bit primitives; UnsupportedError"),
    ("pow.Tensor_Tensor", ALL_LAYOUTS, INTS, "integer pow with a tensor exponent is not lowered; DTypeError"),
    ("pow.Scalar", ALL_LAYOUTS, INTS + ("bool",), "integer pow with a tensor exponent is not lowered; DTypeError"),
    ("_foreach_pow.ScalarAndTensor", ALL_LAYOUTS, INTS + ("bool",), "pow.Scalar per element (above); DTypeError"),
    *[(op, ("empty",), INTS + ("bool",), "softmax of an integer tensor (torch accepts it only when empty); "
       "DTypeError") for op in ("_softmax.default", "_log_softmax.default", "softmax.int", "log_softmax.int")],
    ("bucketize.Tensor", ("expand", "t", "flip"), ("f32",) + INTS,
     "the generated boundaries are not sorted, where torch's answer is unspecified (sorted boundaries are "
     "tested in test_vlm_models' ops and by hand)"),
    *([("gelu.default", ("flip",), ("f32",), "torch's gelu through oneDNN's AVX-512 kernel returns NaN for +inf "
        "(its AVX2 kernel and scalar path return +inf); luminal returns +inf. Only where torch does so: "
        "_TORCH_GELU_INF_IS_NAN")] if _TORCH_GELU_INF_IS_NAN else []),
    ("var_mean.correction", ("expand", "t"), ("f32",), "torch's Welford var_mean returns a NaN mean for a row "
     "of equal infinities; luminal returns the exact mean (+-inf)"),
    ("native_layer_norm.default", ("expand", "t"), ("f32",), "the saved mean of a row holding +-inf: torch's "
     "Welford pass returns NaN, luminal the exact mean (+-inf); the normalized output agrees"),
    ("index_put_.default", ("expand",), ("bool",), "torch.export itself fails (not luminal): functionalizing the "
     "in-place index_put_ on an expanded bool tensor traces a bool subtraction torch rejects"),
    ("topk.default", ("expand",), ("f32",) + INTS, "ties (an expanded row is all equal): the index torch picks "
     "among equal values is unspecified"),
    ("native_dropout.default", ("empty",), ("f32",) + INTS, "torch returns a float32 mask for an empty input "
     "(bool otherwise); luminal returns bool"),
]

FFT = "the FFTs take complex inputs and dim lists: tests/torch/test_complex_fft.py"
RANDOM = "random values, which eager torch draws otherwise: tests/torch/test_random_torch.py"
BACKWARD = "a backward op (saved tensors and geometry that must agree): tests/torch/test_training.py, test_backward_ops.py"
NOT_GENERATED = {  # overload -> why the schema generator skips it, and where it is tested
    **dict.fromkeys(["_fft_c2c.default", "_fft_r2c.default", "_fft_c2r.default"], FFT),
    **dict.fromkeys(["convolution_backward.default", "avg_pool2d_backward.default", "avg_pool3d_backward.default",
                     "_weight_norm_interface_backward.default",
                     "max_pool2d_with_indices_backward.default", "max_pool3d_with_indices_backward.default",
                     "adaptive_max_pool2d_backward.default", "adaptive_max_pool3d_backward.default",
                     "_adaptive_avg_pool2d_backward.default", "_adaptive_avg_pool3d_backward.default",
                     "replication_pad1d_backward.default", "replication_pad2d_backward.default",
                     "replication_pad3d_backward.default"], BACKWARD),
    "_native_batch_norm_legit.no_stats": "eager torch itself segfaults on some generated edge inputs (a flipped f32 "
                                         "view); batch and instance norm without running statistics: "
                                         "tests/torch/test_backward_ops.py",
    **dict.fromkeys(["bernoulli.Tensor", "bernoulli.default", "bernoulli.p", "normal.Tensor_Tensor", "normal.Tensor_float",
                     "normal.float_Tensor", "normal.float_float", "normal_functional.default", "rand.default",
                     "rand_like.default", "randn.default", "randn_like.default", "uniform.default"], RANDOM),
    '_adaptive_avg_pool2d.default': 'window / size arguments: tests/torch/test_vision_models.py',
    '_adaptive_avg_pool3d.default': 'window / size arguments: tests/torch/test_vision_models.py',
    '_to_dim_order_copy.default': 'not an overload of this torch (registered for other versions)',
    '_upsample_bicubic2d_aa.default': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    '_upsample_bicubic2d_aa.vec': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    '_upsample_bilinear2d_aa.default': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    '_upsample_bilinear2d_aa.vec': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    '_upsample_nearest_exact1d.default': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    '_upsample_nearest_exact1d.vec': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    '_upsample_nearest_exact2d.default': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    '_upsample_nearest_exact2d.vec': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    '_upsample_nearest_exact3d.default': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    '_upsample_nearest_exact3d.vec': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'adaptive_avg_pool1d.default': 'window / size arguments: tests/torch/test_vision_models.py',
    'adaptive_avg_pool2d.default': 'window / size arguments: tests/torch/test_vision_models.py',
    'adaptive_avg_pool3d.default': 'window / size arguments: tests/torch/test_vision_models.py',
    'adaptive_max_pool1d.default': 'window / size arguments: tests/torch/test_vision_models.py',
    'adaptive_max_pool2d.default': 'window / size arguments: tests/torch/test_vision_models.py',
    'adaptive_max_pool3d.default': 'window / size arguments: tests/torch/test_vision_models.py',
    'arange.default': 'creation op without a tensor argument: tests/torch/test_torch_semantics.py',
    'arange.start': 'creation op without a tensor argument: tests/torch/test_torch_semantics.py',
    'arange.start_step': 'creation op without a tensor argument: tests/torch/test_torch_semantics.py',
    'as_strided.default': 'stride lists: as_strided in test_hand_written_cases; the empty_* ones are creation ops (tests/torch/test_torch_semantics.py)',
    'as_strided_copy.default': 'stride lists: as_strided in test_hand_written_cases; the empty_* ones are creation ops (tests/torch/test_torch_semantics.py)',
    'avg_pool1d.default': 'window / size arguments: tests/torch/test_vision_models.py',
    'avg_pool2d.default': 'window / size arguments: tests/torch/test_vision_models.py',
    'avg_pool3d.default': 'window / size arguments: test_training.py::test_pooling_backward (avg 3d, local response norm)',
    'grid_sampler_2d.default': 'a grid of coordinates and mode codes: tests/torch/test_torch_semantics.py::test_grid_sample',
    'grid_sampler_3d.default': 'a grid of coordinates and mode codes: tests/torch/test_torch_semantics.py::test_grid_sample',
    'convolution.default': 'window / size arguments: tests/torch/test_vision_models.py',
    'empty.default': 'creation op without a tensor argument: tests/torch/test_torch_semantics.py',
    'empty.memory_format': 'creation op without a tensor argument: tests/torch/test_torch_semantics.py',
    'empty_permuted.default': 'stride lists: as_strided in test_hand_written_cases; the empty_* ones are creation ops (tests/torch/test_torch_semantics.py)',
    'empty_strided.default': 'stride lists: as_strided in test_hand_written_cases; the empty_* ones are creation ops (tests/torch/test_torch_semantics.py)',
    'full.default': 'creation op without a tensor argument: tests/torch/test_torch_semantics.py',
    'max_pool1d.default': 'window / size arguments: tests/torch/test_vision_models.py',
    'max_pool2d.default': 'window / size arguments: tests/torch/test_vision_models.py',
    'max_pool2d_with_indices.default': 'window / size arguments: tests/torch/test_vision_models.py',
    'native_group_norm.default': 'normalization with float hyper-parameters: tests/torch/test_torch_semantics.py and the model zoo',
    'new_empty_strided.default': 'stride lists: as_strided in test_hand_written_cases; the empty_* ones are creation ops (tests/torch/test_torch_semantics.py)',
    'ones.default': 'creation op without a tensor argument: tests/torch/test_torch_semantics.py',
    'scalar_tensor.default': 'creation op without a tensor argument: tests/torch/test_torch_semantics.py',
    'upsample_bicubic2d.default': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'upsample_bicubic2d.vec': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'upsample_bilinear2d.default': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'upsample_bilinear2d.vec': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'upsample_linear1d.default': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'upsample_linear1d.vec': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'upsample_nearest1d.default': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'upsample_nearest1d.vec': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'upsample_nearest2d.default': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'upsample_nearest2d.vec': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'upsample_nearest3d.default': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'upsample_nearest3d.vec': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'upsample_trilinear3d.default': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'upsample_trilinear3d.vec': 'window / size arguments: tests/torch/test_vision_models.py, test_interpolate_taps.py',
    'view.dtype_unused': 'not an overload of this torch (registered for other versions)',
    'zeros.default': 'creation op without a tensor argument: tests/torch/test_torch_semantics.py',
    **{f"_foreach_{op}": "a second list argument (tensors or scalars): tests/torch/test_training_state.py, through "
       "its per-tensor op (swept)" for op in (
        "add.List", "add.ScalarList", "sub.List", "sub.ScalarList", "mul.List", "mul.ScalarList", "div.List",
        "div.ScalarList", "addcdiv.Scalar", "addcdiv.ScalarList", "addcmul.Scalar", "addcmul.ScalarList",
        "clamp_max.List", "clamp_max.ScalarList", "clamp_min.List", "clamp_min.ScalarList", "maximum.List",
        "maximum.ScalarList", "minimum.List", "minimum.ScalarList", "copy.default", "lerp.List", "lerp.Scalar",
        "lerp.ScalarList", "pow.List", "pow.ScalarList")},
}

# overloads the generator drives, but whose every generated call torch itself rejects (so no
# case is made), and where they are tested instead
_MATMUL = "matrix shapes: the generated companion (a last-dim vector) does not fit; tests/torch/test_torch_semantics.py and the model zoo"
_COMPLEX = "complex inputs (the generator makes real ones): tests/torch/test_complex_fft.py"
NO_CASE = {
    **dict.fromkeys(["_conj.default", "view_as_complex.default", "view_as_real.default"], _COMPLEX),
    "addmm.default": _MATMUL, "baddbmm.default": _MATMUL, "bmm.default": _MATMUL, "mm.default": _MATMUL,
    "dot.default": _MATMUL,
    "_grouped_mm.default": "bf16 only under tracing, and needs 16-byte-aligned strides; tests/torch/test_moe.py",
    "bucketize.Scalar": "needs 1-D sorted boundaries; bucketize is in test_hand_written_cases",
    "clamp.default": "min and max both default to None, which torch rejects; clamp_min / clamp_max are swept",
    "clamp.Tensor": "min and max both default to None, which torch rejects; clamp_min / clamp_max are swept",
    "clip.default": "min and max both default to None, which torch rejects; clamp_min / clamp_max are swept",
    "clip.Tensor": "min and max both default to None, which torch rejects; clamp_min / clamp_max are swept",
    "conv_transpose1d.default": "weight shapes: tests/torch/test_vision_models.py (conv family)",
    "conv_transpose2d.input": "weight shapes: tests/torch/test_vision_models.py (conv family)",
    "conv_transpose3d.input": "weight shapes: tests/torch/test_vision_models.py (conv family)",
    "lerp.Scalar": "its `weight` is filled with None (the generator's entry for norms' weight); lerp.Tensor is "
                   "swept, and tests/torch/test_training_state.py lerps by scalars",
    "linalg_vector_norm.default": "torch rejects the generated (subject, dim) calls; norms are in the model zoo",
    "roll.default": "dims defaults to (), so the generated shifts (one per dim) do not align; test_torch_semantics",
    "scatter_reduce.two": "reduce='add' is not one of its modes (sum, prod, mean, amax, amin); scatter.reduce is swept",
    "slice_scatter.default": "the source must have the slice's shape; the Swin model test (test_vision_models) covers it",
    "split.sizes": "its split_size is a list (the generator fills an int); split_with_sizes is swept",
    "unfold.default": "its size is an int (the generator fills size with a shape); test_hand_written_cases covers it",
}
