"""Vision: pooling in every mode, transposed / grouped / depthwise convolution, interpolate in
every mode (one graph per family, through luminal.compile on the NumPy runtime and the compiled
cpu backend, and through torch.compile), and whole models — torchvision's (random weights) and
tiny Hugging Face ones (SegFormer, DINOv2, ConvNeXt, DETR), and the SSDlite / RetinaNet detectors up
to their heads (their NMS post-processing does not lower: vision_models.BackboneHead).

The whole models are heavy (Dynamo's tracing alone is 5-60 s each on a 2-core machine): the default
run covers resnet18, mobilenet_v3_small and SegFormer (`DEFAULT_RUN`), the rest run with
LUMINAL_SLOW=1:  LUMINAL_SLOW=1 .venv/bin/pytest -q tests/torch/test_vision_models.py -s
"""

import os

import pytest
import torch
import torch.nn.functional as F
from torch_helpers import assert_same, compile_by, max_abs_error
from vision_models import detection_models, hf_vision_models, randomize, torchvision_models

import luminal
from luminal.frontends.torch import dynamo


class Family(torch.nn.Module):
    """Many cases of one op family in one graph: every output is compared."""

    def __init__(self, cases):
        super().__init__()
        self.cases = cases

    def forward(self, x):
        return tuple(f(x) for f in self.cases)


def _w(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


POOLING = [
    lambda x: F.max_pool2d(x, 2),
    lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
    lambda x: F.max_pool2d(x, 3, 2, 1, dilation=2),
    lambda x: F.max_pool2d(x, (2, 3), (2, 1), (1, 0), dilation=(1, 2), ceil_mode=True),
    lambda x: F.max_pool2d(x, 2, return_indices=True)[1],
    lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True)[1],
    lambda x: F.max_pool1d(x[:, 0], 3, 2, ceil_mode=True),
    lambda x: F.avg_pool2d(x, 2),
    lambda x: F.avg_pool2d(x, 3, 2, 1),
    lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
    lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    lambda x: F.avg_pool2d(x, 2, divisor_override=3),
    lambda x: F.avg_pool1d(x[:, 0], 3, 2, 1, ceil_mode=True, count_include_pad=False),
    lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
    lambda x: F.adaptive_avg_pool2d(x, 1),
    lambda x: F.adaptive_avg_pool2d(x, (7, 10)),  # larger than the input: windows repeat
    lambda x: F.adaptive_avg_pool1d(x[:, 0], 3),
    lambda x: F.adaptive_max_pool2d(x, (3, 4)),
    lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True)[1],
    lambda x: F.adaptive_max_pool1d(x[:, 0], 4),
]

W0 = _w(6, 4, 3, 3, seed=0)
W1 = _w(6, seed=1)
W2 = _w(4, 2, 3, 3, seed=2)
W3 = _w(8, 1, 3, 3, seed=3)
W4 = _w(8, seed=4)
W5 = _w(4, 3, 3, 3, seed=5)
W6 = _w(3, seed=6)
W7 = _w(4, 3, 3, 3, seed=7)
W8 = _w(4, 2, 2, 3, seed=8)
W9 = _w(4, seed=9)
W10 = _w(4, 1, 3, 3, seed=10)
W11 = _w(4, 5, 4, seed=11)
W12 = _w(5, seed=12)  # weights made once: torch.export cannot trace a Generator

CONVS = [
    lambda x: F.conv2d(x, W0, W1, padding=1),
    lambda x: F.conv2d(x, W2, None, stride=2, groups=2),  # grouped
    lambda x: F.conv2d(x, W3, W4, padding=2, dilation=2, groups=4),  # depthwise, multiplier 2
    lambda x: F.conv_transpose2d(x, W5, W6),
    lambda x: F.conv_transpose2d(x, W7, None, stride=2, padding=1, output_padding=1),
    lambda x: F.conv_transpose2d(x, W8, W9, stride=(2, 1), padding=(0, 1), groups=2),
    lambda x: F.conv_transpose2d(x, W10, None, stride=3, padding=2, dilation=2, groups=4),
    lambda x: F.conv_transpose1d(x[:, :, 0], W11, W12, stride=2, padding=1),
]

INTERPOLATE = [
    lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
    lambda x: F.interpolate(x, size=(8, 3), mode="nearest"),
    lambda x: F.interpolate(x, scale_factor=(1.7, 0.6), mode="nearest"),
    lambda x: F.interpolate(x, size=(8, 3), mode="nearest-exact"),
    lambda x: F.interpolate(x, size=(9, 11), mode="bilinear"),
    lambda x: F.interpolate(x, size=(9, 11), mode="bilinear", align_corners=True),
    lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"),
    lambda x: F.interpolate(x, size=(3, 4), mode="bilinear"),
    lambda x: F.interpolate(x, size=(9, 11), mode="bicubic"),
    lambda x: F.interpolate(x, size=(3, 4), mode="bicubic", align_corners=True),
    # antialiased, NaN and -inf included (the taps are torch's bit for bit, FMA residues at the
    # cubic's zero crossings included: tests/torch/test_interpolate_taps.py)
    lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", antialias=True),
    lambda x: F.interpolate(x, size=(2, 3), mode="bicubic", antialias=True),
    lambda x: F.interpolate(x.transpose(2, 3), size=(3, 2), mode="bilinear", antialias=True),
    lambda x: F.interpolate(x[:, :, 0], size=11, mode="linear"),
    lambda x: F.interpolate(x[:, :, 0], size=3, mode="linear", align_corners=True),
    lambda x: F.interpolate(x.unsqueeze(2).expand(-1, -1, 2, -1, -1), size=(3, 6, 9), mode="trilinear"),
]

FAMILIES = {"pooling": POOLING, "conv": CONVS, "interpolate": INTERPOLATE}


@pytest.mark.parametrize("family,path", [(f, p) for f in FAMILIES for p in ("export-numpy", "dynamo")]
                         + [("conv", "export-cpu"), ("pooling", "export-cpu")])  # the C backend's windows
def test_vision_op_family(family, path):
    x = torch.randn(2, 4, 5, 7, generator=torch.Generator().manual_seed(1))
    x[0, 0, 0, 0] = float("nan")  # NaN propagation of max pooling and the taps
    x[1, 1, 2, 3] = -float("inf")
    model = Family(FAMILIES[family])
    want = model(x)
    got = compile_by(path, model, x)
    for g, w in zip(got, want):
        assert_same(g, w)


def _check_model(name, model, x, kw=False):
    torch._dynamo.reset()
    before, fallbacks = luminal.stats()["graphs_compiled"], len(dynamo.EAGER_FALLBACKS)
    with torch.no_grad():
        want = model(pixel_values=x) if kw else model(x)
        fast = torch.compile(model, backend="luminal", options={"strict": True})
        got = fast(pixel_values=x) if kw else fast(x)
    graphs = luminal.stats()["graphs_compiled"] - before
    print(f"{name}: {graphs} graph(s), max abs error {max_abs_error(got, want):.2e}")
    assert len(dynamo.EAGER_FALLBACKS) == fallbacks
    assert graphs == 1  # no graph break
    assert_same(got, want, atol=1e-4, rtol=1e-4)  # deep random nets: f32 sums in another order


DEFAULT_RUN = {"resnet18", "mobilenet_v3_small", "segformer"}  # in every run of the suite; the rest slow


@pytest.mark.parametrize("name", sorted(torchvision_models()))
def test_torchvision_model(name):
    if not os.environ.get("LUMINAL_SLOW") and name not in DEFAULT_RUN:
        pytest.skip("heavy: run with LUMINAL_SLOW=1")
    model = randomize(torchvision_models()[name]())
    _check_model(name, model, torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2)))


@pytest.mark.parametrize("name", sorted(hf_vision_models()))
def test_hf_vision_model(name):
    if not os.environ.get("LUMINAL_SLOW") and name not in DEFAULT_RUN:
        pytest.skip("heavy: run with LUMINAL_SLOW=1")
    model = randomize(hf_vision_models()[name]())
    _check_model(name, model, torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2)), kw=True)


@pytest.mark.parametrize("name", sorted(detection_models()))
def test_detection_backbone_head(name):
    """SSDlite and RetinaNet up to their class logits and box regression (vision_models.
    BackboneHead), through torch.compile and luminal.compile: NMS post-processing is a
    torchvision C op with a data-dependent output size, which does not lower."""
    if not os.environ.get("LUMINAL_SLOW"):
        pytest.skip("heavy: run with LUMINAL_SLOW=1")
    build, side = detection_models()[name]
    model, x = randomize(build()), torch.randn(1, 3, side, side, generator=torch.Generator().manual_seed(2))
    _check_model(name, model, x)
    with torch.no_grad():  # and luminal.compile (torch.export) on the compiled cpu backend
        want, got = model(x), luminal.compile(model, (x,))(x)
    print(f"{name}/export: max abs error {max_abs_error(got, want):.2e}")
    assert_same(got, want, atol=1e-4, rtol=1e-4)
