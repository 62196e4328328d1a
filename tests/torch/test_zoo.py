"""The zoo (tests/torch/zoo.py) through both entry points, against eager (f32 atol/rtol 1e-5)."""

import pytest
import torch
from torch_helpers import assert_same
from zoo import CASES, case_inputs

import luminal
from luminal.frontends.torch import dynamo


def run_dynamo(model, inputs):
    torch._dynamo.reset()
    before = luminal.stats()["graphs_compiled"]
    fallbacks = len(dynamo.EAGER_FALLBACKS)
    out = torch.compile(model, backend="luminal", options={"strict": True})(*inputs)
    assert luminal.stats()["graphs_compiled"] > before, "luminal compiled no graph"
    assert len(dynamo.EAGER_FALLBACKS) == fallbacks
    return out


def run_export(model, inputs):
    return luminal.compile(model, inputs)(*inputs)


@pytest.mark.parametrize("path", ["dynamo", "export"])
@pytest.mark.parametrize("name,make_model,make_inputs", CASES, ids=[c[0] for c in CASES])
def test_zoo(name, make_model, make_inputs, path):
    model = make_model()
    inputs = case_inputs(name, make_inputs)
    with torch.no_grad():
        want = model(*[x.clone() for x in inputs])
        got = (run_dynamo if path == "dynamo" else run_export)(model, [x.clone() for x in inputs])
    assert_same(got, want)


def test_zoo_size():
    assert len(CASES) >= 60
