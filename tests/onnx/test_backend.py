"""onnx's own BackendTest against luminal: the official node tests listed in
data/onnx_node_tests.txt and the models bundled in the onnx wheel (pytorch-converted,
pytorch-operator, simple). Exclusions are listed with their reasons in data/excluded_*.txt.

Each test is a tiny model, compiled with optimize=False to keep the per-test cost small
(test_onnx_api.py runs a sample with the optimizer on). Only the selected tests are put into
the test class, so pytest does not collect the thousands of other backend tests as skips.
"""

import os
import pathlib
import re

import onnx
import onnx.backend.test

from luminal.frontends.onnx import Backend

DATA = pathlib.Path(__file__).parent / "data"
BUNDLED_KINDS = ("pytorch-converted", "pytorch-operator", "simple")
BUNDLED_DIR = pathlib.Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data"


def read_list(name: str) -> list[str]:
    """Test names from a data file: one per line, '#' starts a comment (the reason)."""
    lines = (line.split("#", 1)[0].strip() for line in (DATA / name).read_text().splitlines())
    return [line for line in lines if line]


class LuminalTestBackend(Backend):
    optimize = False


NODE_TESTS = read_list("onnx_node_tests.txt")
BUNDLED_MODELS = sorted(p.name for kind in BUNDLED_KINDS for p in (BUNDLED_DIR / kind).iterdir() if p.is_dir())
EXCLUDED = read_list("excluded_node_tests.txt") + read_list("excluded_bundled_models.txt")
SELECTED = {f"{name}_cpu" for name in NODE_TESTS + BUNDLED_MODELS}

backend_test = onnx.backend.test.BackendTest(LuminalTestBackend, __name__)
for _name in sorted(SELECTED):
    backend_test.include(f"^{re.escape(_name)}$")
for _name in EXCLUDED:
    backend_test.exclude(f"^{re.escape(_name)}_cpu$")

OnnxBackendTest = backend_test.tests
for _attr in [a for a in vars(OnnxBackendTest) if a.startswith("test_") and a not in SELECTED]:
    delattr(OnnxBackendTest, _attr)


def test_selection_is_complete():
    """Every listed test exists in this onnx version; the pass-rate floors hold by construction."""
    present = {a for a in vars(OnnxBackendTest) if a.startswith("test_")}
    assert SELECTED <= present, sorted(SELECTED - present)[:10]
    excluded_nodes = read_list("excluded_node_tests.txt")
    excluded_bundled = read_list("excluded_bundled_models.txt")
    assert len(NODE_TESTS) == 754 and 1 - len(excluded_nodes) / len(NODE_TESTS) >= 0.95
    assert len(BUNDLED_MODELS) == 140 and 1 - len(excluded_bundled) / len(BUNDLED_MODELS) >= 0.90


OPTIMIZED_SAMPLE = sorted(a for a in SELECTED if a.removesuffix("_cpu") not in EXCLUDED)[::40]


def test_optimized_sample():
    """Every 40th selected test again, through the egglog optimizer (optimize=True)."""
    for name in OPTIMIZED_SAMPLE:
        getattr(OnnxBackendTest, name)(OnnxBackendTest(name), optimize=True)
