"""`benchmarks/ort_isa.py`: under `LUMINAL_ISA=avx2` the benchmarks make onnxruntime pick its AVX2
kernels by answering CPUID without AVX-512. Each case runs in a fresh interpreter (the mask is the
process's, and onnxruntime must load after it). What the mask can do depends on the CPU (AVX-512,
CPUID faulting) and on a C compiler: every case states the outcome for each, none is skipped."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from luminal.kernels.cpu import build

pytest.importorskip("onnxruntime")


def _flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        return set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), ()))


def _run(isa: str, tmp_path, *parts: str) -> subprocess.CompletedProcess:
    """The script of `parts` (each dedented) in a fresh interpreter under LUMINAL_ISA=`isa`."""
    env = {**os.environ, "LUMINAL_ISA": isa, "LUMINAL_CACHE_DIR": str(tmp_path)}
    script = "\n".join(textwrap.dedent(p) for p in parts)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=300, cwd=os.path.dirname(os.path.dirname(__file__)))


# a 3x3 convolution and a GEMM through onnxruntime (MLAS's kernels, chosen when it loads), against NumPy
ORT_CONV = """
    import numpy as np, onnx, onnxruntime as ort
    from onnx import TensorProto, helper
    rng = np.random.default_rng(0)
    w, m = rng.standard_normal((16, 8, 3, 3), dtype=np.float32), rng.standard_normal((12, 40), dtype=np.float32)
    x = rng.standard_normal((1, 8, 12, 12), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Reshape", ["c", "s"], ["r"]), helper.make_node("MatMul", ["r", "m"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()), helper.make_tensor("m", TensorProto.FLOAT, m.shape, m.ravel()),
         helper.make_tensor("s", TensorProto.INT64, [2], [16 * 12, 12])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    xp = np.pad(x[0], ((0, 0), (1, 1), (1, 1))).astype(np.float64)
    c = sum(np.einsum("oc,chw->ohw", w[:, :, i, j], xp[:, i:i + 12, j:j + 12]) for i in range(3) for j in range(3))
    want = c.reshape(16 * 12, 12) @ m
    print("ORT_ERR", float(np.abs(y - want).max() / np.abs(want).max()))
"""


def test_avx2_masks_cpuid_and_onnxruntime_still_computes(tmp_path):
    r = _run("avx2", tmp_path, """
        from benchmarks import ort_isa
        state = ort_isa.apply()
        print("STATE", state["isa"], "|", state["why"])
        if ort_isa._lib is not None:
            print("AVX512F", bool(ort_isa._lib.lum_cpuid7_ebx() & ort_isa.AVX512F))
    """, ORT_CONV, """
        print("ANSWERED", ort_isa.state()["cpuid_answered"])
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    out = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert float(out["ORT_ERR"]) < 1e-5
    flags = _flags()
    if "avx512f" not in flags:
        assert out["STATE"] == "avx2 | the CPU has no AVX-512"
    elif "cpuid_fault" not in flags:
        assert out["STATE"].startswith("native | no CPUID faulting")
    elif build.compiler() is None:
        assert out["STATE"].startswith("native | no C compiler")
    else:
        assert out["STATE"] == "avx2 | CPUID masked (benchmarks/ort_isa.py)"
        assert out["AVX512F"] == "False"
        assert int(out["ANSWERED"]) > 1  # onnxruntime asked CPUID, and got the masked answer


def test_native_installs_nothing(tmp_path):
    r = _run("native", tmp_path, """
        from benchmarks import ort_isa
        print("STATE", ort_isa.apply())
    """, ORT_CONV)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "'isa': 'native', 'why': 'LUMINAL_ISA is native', 'cpuid_answered': 0" in r.stdout
    assert float(r.stdout.split("ORT_ERR ")[1]) < 1e-5


def test_after_onnxruntime_loaded_it_says_so(tmp_path):
    r = _run("avx2", tmp_path, """
        import onnxruntime
        from benchmarks import ort_isa
        print("STATE", ort_isa.apply())
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    if "avx512f" in _flags():
        assert "'isa': 'native', 'why': 'onnxruntime was loaded before the CPUID mask'" in r.stdout
    else:  # nothing to mask: onnxruntime's kernels are already the CPU's AVX2 ones
        assert "'isa': 'avx2', 'why': 'the CPU has no AVX-512'" in r.stdout


@pytest.mark.parametrize("faulthandler", [False, True])
def test_a_real_segfault_still_crashes(tmp_path, faulthandler):
    """Any SIGSEGV that is not a CPUID goes to the handler that was there before: the default (the
    process dies of SIGSEGV), or Python's faulthandler (its report, then the same death)."""
    r = _run("avx2", tmp_path, f"""
        import ctypes, faulthandler
        if {faulthandler}:
            faulthandler.enable()
        from benchmarks import ort_isa
        print("STATE", ort_isa.apply()["isa"], flush=True)
        ctypes.string_at(8)
    """)
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stderr[-2000:])
    assert "STATE" in r.stdout
    if faulthandler:
        assert "Segmentation fault" in r.stderr
