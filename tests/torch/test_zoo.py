"""The zoo (tests/torch/zoo.py) through both entry points, against eager (f32 atol/rtol 1e-5).

Dynamo's graphs are lowered both ways: per distinct call where that is exact ("dynamo", which
falls back by itself for in-place cases) and through aot_autograd ("dynamo-aot")."""

import pytest
import torch
from torch_helpers import assert_same
from zoo import CASES, case_inputs

import luminal
from luminal.frontends.torch import dynamo


def run_dynamo(model, inputs, lowering="auto"):
    torch._dynamo.reset()
    before = luminal.stats()["graphs_compiled"]
    fallbacks = len(dynamo.EAGER_FALLBACKS)
    out = torch.compile(model, backend="luminal", options={"strict": True, "lowering": lowering})(*inputs)
    assert luminal.stats()["graphs_compiled"] > before, "luminal compiled no graph"
    assert len(dynamo.EAGER_FALLBACKS) == fallbacks
    return out


def run_export(model, inputs):
    return luminal.compile(model, inputs)(*inputs)


def run_dynamo_aot(model, inputs):
    return run_dynamo(model, inputs, lowering="aot_autograd")


PATHS = {"dynamo": run_dynamo, "dynamo-aot": run_dynamo_aot, "export": run_export}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name,make_model,make_inputs", CASES, ids=[c[0] for c in CASES])
def test_zoo(name, make_model, make_inputs, path):
    model = make_model()
    inputs = case_inputs(name, make_inputs)
    with torch.no_grad():
        want = model(*[x.clone() for x in inputs])
        got = PATHS[path](model, [x.clone() for x in inputs])
    assert_same(got, want)


def test_zoo_size():
    assert len(CASES) >= 60
