"""torchvision, imported for its model code only, and tiny random-weight vision models.

torchvision 0.28 (the release that matches torch 2.13) lies in `.venv/torchvision`, off
sys.path (see the Makefile): PyPI ships only its CUDA build, whose C ops (nms, roi_align, ...)
cannot load against the CPU torch, and its `_meta_registrations` then fails at import (fake
kernels for ops that do not exist). `import_torchvision()` imports the package without that one
module: the models, which need no C op, work; torchvision.ops.nms and friends do not.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import torch

TORCHVISION_DIR = Path(__file__).resolve().parents[2] / ".venv" / "torchvision"


def import_torchvision():
    """The torchvision package, or None where it is not installed (pytest.skip on None)."""
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    if not (TORCHVISION_DIR / "torchvision").is_dir():
        return None
    try:
        torch.ops.load_library(str(next(TORCHVISION_DIR.glob("torchvision/_C*.so"))))
        has_ops = True
    except (OSError, StopIteration):
        has_ops = False
    if not has_ops:  # fake kernels of C ops that did not load: skip that one module
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
    sys.path.append(str(TORCHVISION_DIR))
    import torchvision

    return torchvision


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random weights everywhere, batch-norm statistics included: torchvision zero-initializes
    some heads (ViT's), which would make a comparison vacuous."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (1.0 / max(1, p[0].numel()) ** 0.5 if p.ndim > 1 else 0.1))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
    return model.eval()


def torchvision_models() -> dict:
    """name -> builder of a torchvision model with random weights (64x64 inputs)."""
    tv = import_torchvision()
    if tv is None:
        return {}
    M = tv.models
    return {
        "resnet18": lambda: M.resnet18(num_classes=10),
        "mobilenet_v3_small": lambda: M.mobilenet_v3_small(num_classes=10),
        "convnext_tiny": lambda: M.convnext_tiny(num_classes=10),
        "vit": lambda: M.VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32,
                                           mlp_dim=64, num_classes=10),
        "swin_t": lambda: M.swin_t(num_classes=10),
        "deeplabv3_mobilenet_v3_large": lambda: M.segmentation.deeplabv3_mobilenet_v3_large(
            num_classes=4, weights_backbone=None, aux_loss=False),
        "fcn_resnet50": lambda: M.segmentation.fcn_resnet50(num_classes=4, weights_backbone=None, aux_loss=False),
    }


class BackboneHead(torch.nn.Module):
    """A torchvision one-stage detector without its transform and post-processing: the image
    through `backbone` (feature maps) and `head` -> {"cls_logits", "bbox_regression"}. The
    post-processing (box decoding, score filtering, torchvision.ops.batched_nms) does not lower:
    NMS is a torchvision C op (not loadable here) with a data-dependent output size."""

    def __init__(self, detector: torch.nn.Module):
        super().__init__()
        self.backbone, self.head = detector.backbone, detector.head

    def forward(self, images):
        return self.head(list(self.backbone(images).values()))


def detection_models() -> dict:
    """name -> (builder of a detector's BackboneHead with random weights, input side)."""
    tv = import_torchvision()
    if tv is None:
        return {}
    D = tv.models.detection
    return {
        "ssdlite320_mobilenet_v3_large": (lambda: BackboneHead(D.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=5)), 160),
        "retinanet_resnet50_fpn": (lambda: BackboneHead(D.retinanet_resnet50_fpn(
            weights=None, weights_backbone=None, num_classes=5)), 128),
    }


def hf_vision_models() -> dict:
    """name -> builder of a tiny random-weight Hugging Face vision model (64x64 inputs)."""
    import transformers as T

    return {
        "segformer": lambda: T.SegformerForSemanticSegmentation(T.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
            mlp_ratios=[2, 2], decoder_hidden_size=32, num_labels=3, patch_sizes=[7, 3], strides=[4, 2])),
        "dinov2": lambda: T.Dinov2Model(T.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                       intermediate_size=64, image_size=64, patch_size=16)),
        "convnext_hf": lambda: T.ConvNextForImageClassification(T.ConvNextConfig(
            num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=5)),
        "detr": lambda: T.DetrForObjectDetection(T.DetrConfig(
            use_timm_backbone=False, use_pretrained_backbone=False,
            backbone_config=T.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                           out_features=["stage2"]),
            d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=5, num_labels=3)),
    }
