"""What a training graph saves for its backward (`luminal/frontends/torch/partition.py`): cheap
activations over tensors the backward keeps anyway (a layer norm's output, a batch norm plus
ReLU) are recomputed in the backward, not saved beside their inputs; random ops never are.
Each test compares the saved tensors with eager's and the gradients (and batch norm's running
statistics) with eager's, on both host devices."""

import copy

import pytest
import torch
import torch.nn.functional as F
from test_training import DEVICES, _compiled, _grads, _served_backward, assert_grads_equal
from torch_helpers import runs_on_luminal


def _saved(fn):
    """fn()'s result, the shapes of the tensors autograd saved meanwhile, and their storages
    (data pointer: bytes; `_check` sums them)."""
    shapes, storages = [], {}

    def pack(t):
        shapes.append(tuple(t.shape))
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, shapes, storages


def _check(model, x, device, served_graphs=2):
    """Gradients and buffers equal to eager's; the saved shapes and bytes of both runs."""
    eager = copy.deepcopy(model)
    eager_loss, eager_shapes, eager_storages = _saved(lambda: eager(x).square().sum())
    eager_loss.backward()
    with runs_on_luminal(served_graphs) as served:
        loss, shapes, storages = _saved(lambda: _compiled(model, device)(x).square().sum())
        loss.backward()
    assert _served_backward(served)
    assert_grads_equal(_grads(model), _grads(eager))
    for (name, b), want in zip(model.named_buffers(), eager.buffers()):
        torch.testing.assert_close(b, want, rtol=1e-5, atol=1e-6, msg=name)
    return (shapes, storages), (eager_shapes, eager_storages)


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_and_gelu_outputs_are_recomputed(device):
    """A transformer block's norm and FFN: eager saves the layer norm's input and output; the
    backward gets the input and the row statistics and recomputes the output in one pointwise pass
    (`partition._split_layer_norms`). Eager saves GELU's input and output; the backward gets the
    input (GELU's own backward reads it) and recomputes the output for the last linear layer's
    weight gradient."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 64),
                                torch.nn.GELU(), torch.nn.Linear(64, 16))
    (_, storages), (_, eager_storages) = _check(model, torch.randn(4, 5, 16), device)

    def count(storages, width):  # tensors of 4 x 5 tokens x width (the weights are 16 x 16 and 16 x 64)
        return list(storages.values()).count(4 * 20 * width)

    # eager: x, the norm's input and output, the model's output (for the loss's square); luminal: not the norm's output
    assert count(eager_storages, 16) == 4, eager_storages
    assert count(storages, 16) == 3, storages
    assert count(eager_storages, 64) == 2, eager_storages  # GELU's input and output
    assert count(storages, 64) == 1, storages  # its input


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_relu_outputs_are_recomputed(device):
    """Conv, BatchNorm (training mode), ReLU, conv: the backward recomputes the normalized,
    rectified tensor from the first conv's output and the batch statistics; the running
    statistics are updated once, as eager's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 4, 3, padding=1)).train()
    x = torch.randn(2, 3, 6, 6)
    (shapes, storages), (eager_shapes, eager_storages) = _check(model, x, device)
    maps = (2, 8, 6, 6)
    assert eager_shapes.count(maps) >= 2, eager_shapes  # eager: the first conv's output and the ReLU's
    assert shapes.count(maps) == 1, shapes
    assert sum(storages.values()) <= sum(eager_storages.values()) - 4 * 2 * 8 * 36, (storages, eager_storages)
    assert int(model[1].num_batches_tracked) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_mask_is_saved_not_redrawn(device):
    """GELU is recomputed, dropout is not: the backward uses the mask the forward drew (the gradient
    of `c` in `dropout(gelu(xW)) * c` is the dropped activation the forward returned, divided by c)."""
    torch.manual_seed(0)

    class Dropped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 16)
            self.c = torch.nn.Parameter(torch.rand(16) + 0.5)

        def forward(self, x):
            return F.dropout(F.gelu(self.linear(x)), 0.5, True) * self.c

    model = Dropped()
    with runs_on_luminal(2) as served:
        out = _compiled(model, device)(torch.randn(64, 8))
        out.sum().backward()
    assert _served_backward(served)
    dropped = out.detach() / model.c.detach()
    assert 0.3 < (dropped == 0).float().mean() < 0.7
    torch.testing.assert_close(model.c.grad, dropped.sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_buffer_changed_in_place_is_not_saved_for_a_recomputation(device):
    """`x * buffer` after the forward updates the buffer in place: recomputing it in the backward
    would save the buffer, which torch's version check rejects once the update is written back;
    it is saved (or recomputed from what the backward keeps) as before, and the gradients and the
    buffer are eager's."""
    torch.manual_seed(0)

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)
            self.register_buffer("scale", torch.ones(8))

        def forward(self, x):
            self.scale.mul_(1.5)
            return torch.sigmoid(self.linear(x) * self.scale)

    _check(Scaled(), torch.randn(4, 8), device)


class _Norms(torch.nn.Module):
    """Layer norms the split must keep exact: without weight and bias, over two dims, and one whose
    output is also returned (a forward output as well as the next layer's input)."""

    def __init__(self, affine: bool, dims: int):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm((5, 16)[-dims:], elementwise_affine=affine)
        self.out = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = self.norm(self.linear(x))
        return self.out(h), h


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine, dims", [(False, 1), (True, 2), (False, 2)])
def test_split_layer_norms_keep_eager_gradients(device, affine, dims):
    torch.manual_seed(0)
    model = _Norms(affine, dims)
    eager = copy.deepcopy(model)
    x = torch.randn(4, 5, 16)
    y, h = eager(x)
    (y.square().sum() + h.sin().sum()).backward()
    with runs_on_luminal(2) as served:
        y, h = _compiled(model, device)(x)
        (y.square().sum() + h.sin().sum()).backward()
    assert _served_backward(served)
    assert_grads_equal(_grads(model), _grads(eager))
