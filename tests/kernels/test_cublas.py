"""The "gemm" extern step: every MatMul layout that real compiled plans produce (the torch zoo,
the tiny HF families, the bench models as saved in benchmarks/gpu_models/, and the ONNX node
tests' Gemm/MatMul models) becomes cuBLAS arguments that a CPU stand-in of cuBLAS's contract
(column-major, opA/opB, lda/ldb/ldc, strides, batchCount; it raises on any violation) runs to
NumPy's answer; layouts cuBLAS cannot express fall back to the generated kernel."""

import ctypes
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import luminal as lm
from luminal.archive import read_archive
from luminal.errors import DeviceError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op, toposort
from luminal.hlir.shape import ShapeTracker
from luminal.kernels import cublas
from luminal.kernels.cublas import OP_N, OP_T, CublasContractError, CublasGemm, GemmDesc, standin_gemm
from luminal.kernels.render.cstyle import buffer_sources, view_of
from luminal.kernels.runtime import KernelRuntime

MODELS = Path(__file__).parent.parent.parent / "benchmarks" / "gpu_models"


def _onnx_models():
    """Gemm/MatMul models shaped as the ONNX node tests' (test_gemm_*, test_matmul_*)."""
    def model(node, inputs, out_shape):
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                                for n, s in inputs],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    gemm = lambda **kw: helper.make_node("Gemm", ["a", "b", "c"], ["y"], **kw)  # noqa: E731
    matmul = helper.make_node("MatMul", ["a", "b"], ["y"])
    return {
        "gemm_all_attributes": model(gemm(transA=1, transB=1, alpha=0.25, beta=0.35),
                                     [("a", [4, 3]), ("b", [5, 4]), ("c", [1, 5])], [3, 5]),
        "gemm_transposeA": model(gemm(transA=1), [("a", [6, 3]), ("b", [6, 4]), ("c", [1, 4])], [3, 4]),
        "gemm_transposeB": model(gemm(transB=1), [("a", [3, 6]), ("b", [4, 6]), ("c", [1, 4])], [3, 4]),
        "matmul_3d": model(matmul, [("a", [2, 3, 4]), ("b", [2, 4, 3])], [2, 3, 3]),
        "matmul_4d": model(matmul, [("a", [1, 2, 3, 4]), ("b", [1, 2, 4, 3])], [1, 2, 3, 3]),
        "matmul_bcast": model(matmul, [("a", [3, 1, 3, 4]), ("b", [2, 4, 2])], [3, 2, 3, 2]),
    }


def _layout(node: Node) -> tuple:
    return (node.dtype, node.shape, tuple((view_of(s)[1], view_of(s)[0].shape) for s in node.src))


@pytest.fixture(scope="module")
def real_matmuls() -> dict:
    """Distinct MatMul layouts of real compiled plans -> (a node, the models it comes from)."""
    found: dict = {}
    for path in sorted(MODELS.glob("*.lum")):
        if path.name.startswith("bench_big"):  # the tiny bench models have the same layouts
            continue
        for n in toposort(read_archive(path)[1]):
            if n.op is Op.MAT_MUL:
                found.setdefault(_layout(n), (n, set()))[1].add(path.stem)
    for name, proto in _onnx_models().items():
        model = lm.onnx.compile(proto, device="numpy", optimize=True)
        for n in toposort(model.compiled.outputs):
            if n.op is Op.MAT_MUL:
                found.setdefault(_layout(n), (n, set()))[1].add(name)
    return found


def _bind_all(node: Node, value: int) -> dict:
    names = set()
    for x in toposort([node]):
        for d in (*x.shape, *(x.arg.dims if x.op is Op.VIEW else ())):
            names |= {s.name for s in sym.free_symbols(d)}
    return {s: value for s in names}


def _run(node: Node, bindings: dict, rng, gemv: bool = False):
    """(cuBLAS stand-in result or None, NumPy reference) of MatMul `node` on random buffers."""
    inputs = buffer_sources(node)
    bufs = {}
    for i, base in enumerate(inputs):
        shape = tuple(int(sym.evaluate(d, bindings)) for d in base.shape)
        bufs[i] = rng.standard_normal(shape).astype(base.dtype.numpy)
    views = []
    for x in node.src:
        base, st = view_of(x)
        flat = bufs[next(i for i, b in enumerate(inputs) if b is base)].reshape(-1)
        ev = [int(sym.evaluate(d, bindings)) for d in (*st.shape, *st.strides, st.offset)]
        nd = len(st.shape)
        shape, strides, off = ev[:nd], ev[nd:2 * nd], ev[-1]
        views.append(np.lib.stride_tricks.as_strided(flat[off:], shape, [s * flat.itemsize for s in strides]))
    want = np.matmul(views[0].astype(np.float64), views[1].astype(np.float64))
    bound = np.matmul(np.abs(views[0].astype(np.float64)), np.abs(views[1].astype(np.float64)))
    desc = GemmDesc.of(node, inputs)
    calls = desc.bind(bindings, gemv=gemv) if desc is not None else None
    if calls is None:
        return None, want
    out = np.full(want.shape, np.nan, node.dtype.numpy)  # beta = 0: C is never read
    for call in calls:
        standin_gemm(call, {-1: out, **bufs})
    # the rigorous bound of a K-term dot product accumulated in f32 (f64), plus one rounding to
    # the output dtype: |error| <= K eps_acc sum|a||b| + eps_out |result|
    k = views[0].shape[-1]
    eps_acc = np.finfo(np.float64 if node.dtype is DType.F64 else np.float32).eps
    eps_out = float(np.finfo(node.dtype.numpy).eps) if node.dtype is not DType.BF16 else 2.0**-7
    err = np.abs(out.astype(np.float64) - want)
    assert np.all(err <= k * eps_acc * bound + eps_out * np.abs(want) + 1e-30), float(err.max())
    return out, want


def test_every_real_layout_is_one_cublas_step(real_matmuls):
    sources = set().union(*(src for _, src in real_matmuls.values()))
    assert len(real_matmuls) >= 40 and {"llama", "qwen3", "gpt2", "bert", "minilm", "zoo_bmm",
                                        "matmul_bcast", "gemm_transposeA"} <= sources
    rng = np.random.default_rng(0)
    for node, src in real_matmuls.values():
        for value in (1, 5):  # symbolic dims (seq, ctx) short and long: M = 1 too
            got, _ = _run(node, _bind_all(node, value), rng)  # checked against NumPy in f64
            assert got is not None, f"{src}: {_layout(node)} has no cuBLAS call"


def _matmul(a_st: ShapeTracker, a_shape, b_st: ShapeTracker, b_shape, dtype=DType.F32) -> Node:
    a = Node(Op.VIEW, dtype, a_st.shape, (Node(Op.INPUT, dtype, a_shape, (), "a"),), a_st)
    b = Node(Op.VIEW, dtype, b_st.shape, (Node(Op.INPUT, dtype, b_shape, (), "b"),), b_st)
    shape = (*a_st.shape[:-1], b_st.shape[-1])
    return Node(Op.MAT_MUL, dtype, shape, (a, b))


def _st(shape, strides, offset=0, mask=None):
    return ShapeTracker(tuple(shape), tuple(strides), offset, mask)


HAND = {  # name: (A view, A buffer shape, B view, B buffer shape)
    "plain": (_st((6, 7), (7, 1)), (6, 7), _st((7, 5), (5, 1)), (7, 5)),
    "transposed_a": (_st((6, 7), (1, 6)), (7, 6), _st((7, 5), (5, 1)), (7, 5)),
    "transposed_b": (_st((6, 7), (7, 1)), (6, 7), _st((7, 5), (1, 7)), (5, 7)),
    "both_transposed": (_st((6, 7), (1, 6)), (7, 6), _st((7, 5), (1, 7)), (5, 7)),
    "m1": (_st((1, 7), (7, 1)), (1, 7), _st((7, 5), (1, 7)), (5, 7)),
    "k1": (_st((6, 1), (1, 1)), (6, 1), _st((1, 5), (5, 1)), (1, 5)),
    "n1": (_st((6, 7), (7, 1)), (6, 7), _st((7, 1), (1, 1)), (7, 1)),
    "wide_leading_dims": (_st((6, 7), (11, 1), 2), (6, 11), _st((7, 5), (1, 9), 2), (5, 9)),
    "batch_broadcast_stride0": (_st((3, 6, 7), (42, 7, 1)), (3, 6, 7), _st((3, 7, 5), (0, 5, 1)), (7, 5)),
    "batch_a_broadcast": (_st((3, 6, 7), (0, 7, 1)), (6, 7), _st((3, 7, 5), (35, 1, 7)), (3, 5, 7)),
    "batch_partial_broadcast": (_st((2, 3, 6, 7), (42, 0, 7, 1)), (2, 6, 7),
                                _st((2, 3, 7, 5), (0, 35, 5, 1)), (3, 7, 5)),
    "batch_permuted": (_st((3, 4, 6, 7), (7, 126, 21, 1)), (4, 6, 3, 7),
                       _st((3, 4, 7, 5), (140, 35, 5, 1)), (3, 4, 7, 5)),
}


@pytest.mark.parametrize("name", sorted(HAND))
@pytest.mark.parametrize("dtype", [DType.F32, DType.F64, DType.F16, DType.BF16])
def test_hand_layouts(name, dtype):
    a_st, a_shape, b_st, b_shape = HAND[name]
    node = _matmul(a_st, a_shape, b_st, b_shape, dtype)
    got, _ = _run(node, {}, np.random.default_rng(1))  # checked against NumPy in f64
    assert got is not None, name


def test_the_call_is_column_major_with_swapped_operands():
    a_st, a_shape, b_st, b_shape = HAND["transposed_a"]
    (call,) = GemmDesc.of(node := _matmul(a_st, a_shape, b_st, b_shape), buffer_sources(node)).bind({}, gemv=False)
    # C^T (5 x 6) = B^T (5 x 7, B row-major: op N, ld 5) . A^T (7 x 6, A stored transposed: op T, ld 6)
    assert (call.transa, call.transb, call.m, call.n, call.k) == (OP_N, OP_T, 5, 6, 7)
    assert (call.a[0], call.lda, call.b[0], call.ldb, call.ldc) == (1, 5, 0, 6, 5)
    assert call.compute == cublas.COMPUTE_32F


def test_float32_is_never_tf32_and_float64_widens(monkeypatch):
    """The model's precision decides, not torch's matmul setting: "float32" is full f32 even where
    torch allows TF32; "float64" widens f32 GEMMs (a DGEMM on f64 copies), every M included."""
    torch = types.SimpleNamespace(get_float32_matmul_precision=lambda: "medium")
    monkeypatch.setitem(sys.modules, "torch", torch)
    node = _matmul(*HAND["plain"])
    desc = GemmDesc.of(node, buffer_sources(node))
    (call,) = desc.bind({}, gemv=False)
    assert call.compute == cublas.COMPUTE_32F and not call.widened
    (wide,) = desc.bind({}, precision="float64")  # M = 6: the GEMV rule does not apply
    assert wide.compute == cublas.COMPUTE_64F and wide.widened and wide.dtype is DType.F32
    half = _matmul(*HAND["plain"], DType.F16)
    assert GemmDesc.of(half, buffer_sources(half)).bind({}, gemv=False, precision="float64")[0].compute == \
        cublas.COMPUTE_32F  # only f32 GEMMs widen, as on the C


@pytest.mark.parametrize("name,a,b", [
    ("padded", _st((6, 7), (7, 1), 0, ((0, 5), (0, 7))), _st((7, 5), (5, 1))),
    ("no_unit_stride", _st((6, 7), (14, 2)), _st((7, 5), (5, 1))),
    ("rows_broadcast", _st((6, 7), (0, 1)), _st((7, 5), (5, 1))),
])
def test_layouts_that_are_no_cublas_call_fall_back(name, a, b):
    node = _matmul(a, (6, 14), b, (7, 5))
    got, _ = _run(node, {}, np.random.default_rng(2))
    assert got is None, name


def test_integer_matmul_and_decode_m_take_the_generated_kernel(monkeypatch):
    node = _matmul(*HAND["plain"][:2], *HAND["plain"][2:], DType.I32)
    assert GemmDesc.of(node, buffer_sources(node)) is None
    node = _matmul(*HAND["plain"])
    desc = GemmDesc.of(node, buffer_sources(node))
    assert desc.bind({}) is None  # M = 6 <= 8: the GEMV kernel
    monkeypatch.setenv("LUMINAL_GEMV_MAX_M", "0")
    assert desc.bind({}) is not None
    monkeypatch.setenv("LUMINAL_GEMV_MAX_M", "64")  # clamped to the 8 rows the GEMV kernel takes
    assert cublas.gemv_max_m() == 8
    monkeypatch.setenv("LUMINAL_GEMV_MAX_M", "eight")
    with pytest.raises(lm.DeviceError, match="LUMINAL_GEMV_MAX_M"):
        desc.bind({})


def _call(**kw):
    base = dict(transa=OP_N, transb=OP_N, m=4, n=3, k=2, a=(0, 0), lda=4, stride_a=8, b=(1, 0), ldb=2, stride_b=6,
                c=(-1, 0), ldc=4, stride_c=12, batch=1, dtype=DType.F32, compute=cublas.COMPUTE_32F)
    return CublasGemm(**{**base, **kw})


@pytest.mark.parametrize("bad,match", [
    (dict(lda=3), "lda = 3 < max"),
    (dict(transa=OP_T, lda=1), "lda = 1 < max"),
    (dict(ldb=1), "ldb = 1 < max"),
    (dict(ldc=2), "ldc = 2 < max"),
    (dict(m=-1), "m = -1"),
    (dict(transa=2), "bad transpose"),
    (dict(batch=2, stride_c=4), "overlap"),
    (dict(a=(0, 1)), "A reads elements 1..8"),
    (dict(batch=2), "A reads elements 0..15"),
])
def test_contract_violations_raise(bad, match):
    bufs = {0: np.zeros(8, np.float32), 1: np.zeros(6, np.float32), -1: np.zeros(12, np.float32)}
    with pytest.raises(CublasContractError, match=match):
        standin_gemm(_call(**bad), bufs)


def test_buffers_must_be_contiguous_and_of_the_calls_dtype():
    good = {0: np.zeros(8, np.float32), 1: np.zeros(6, np.float32), -1: np.zeros(12, np.float32)}
    standin_gemm(_call(), good)
    with pytest.raises(CublasContractError, match="contiguous"):
        standin_gemm(_call(), {**good, 0: np.zeros(16, np.float32)[::2]})
    with pytest.raises(CublasContractError, match="holds float64"):
        standin_gemm(_call(), {**good, 1: np.zeros(6, np.float64)})


# --- the extern step inside the kernel runtime (emulator + stand-in) -----------------------------
def test_tiny_llama_runs_its_gemms_as_extern_steps(monkeypatch):
    monkeypatch.setenv("LUMINAL_EMULATOR_EXTERNS", "gemm")
    monkeypatch.setenv("LUMINAL_GEMV_MAX_M", "0")  # every GEMM to the stand-in
    _, outputs, _ = read_archive(MODELS / "llama.lum")
    data = np.load(MODELS / "llama.npz")
    feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
    want = [data[k] for k in data.files if k.startswith("out:")]
    rt = KernelRuntime(outputs, lm.devices.get("cuda-emulator"))
    for _ in range(3):  # eager, capture + replay, replay: the extern step is on the tape
        for got, w in zip(rt(feeds), want):
            np.testing.assert_allclose(got.astype(np.float64), w.astype(np.float64), rtol=1e-5, atol=1e-5)
    (seq,) = rt.sequences.values()
    n_mm = sum(n.op is Op.MAT_MUL for n in toposort(outputs))
    assert sum(ln.extern is not None for ln in seq.launches) == n_mm > 0
    assert rt.graph_cache.replays == 2


def test_a_view_that_is_no_matrix_runs_the_generated_kernel(monkeypatch):
    monkeypatch.setenv("LUMINAL_EMULATOR_EXTERNS", "gemm")
    g = lm.Graph()
    x, w = g.input("x", (12, 16)), g.input("w", (8, 32))
    g.output(x @ w[:, ::2].T)  # B's column stride is 2: no leading dimension describes it
    g.output(x @ w[:, :16].T)  # a plain transposed slice: cuBLAS
    cg = g.compile(device="cuda-emulator")
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((12, 16)).astype(np.float32), rng.standard_normal((8, 32)).astype(np.float32)
    for got, want in zip(cg(x=a, w=b), g.run(x=a, w=b)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (seq,) = cg.runtime.sequences.values()
    kinds = sorted("extern" if ln.extern is not None else "kernel" for ln in seq.launches
                   if ln.extern is not None or ln.name.startswith("matmul"))
    assert kinds == ["extern", "kernel"]


# --- the CuPy call, argument by argument ----------------------------------------------------------
class _FakeArray:
    """A host array posing as a CuPy array: `.data.ptr` is its address."""

    def __init__(self, array):
        self.array, self.size, self.itemsize = array, array.size, array.itemsize
        self.data = types.SimpleNamespace(ptr=array.ctypes.data)


def test_cupy_gemm_passes_cublas_its_arguments_in_order(monkeypatch):
    """cupy_gemm against a fake `cupy_backends.cuda.libs.cublas` that decodes the positional
    arguments of cublasGemmStridedBatchedEx back into pointers and runs the stand-in."""
    rng = np.random.default_rng(4)
    a_st, a_shape, b_st, b_shape = HAND["batch_broadcast_stride0"]
    node = _matmul(a_st, a_shape, b_st, b_shape)
    bufs = {0: rng.standard_normal(a_shape).astype(np.float32), 1: rng.standard_normal(b_shape).astype(np.float32),
            -1: np.zeros((3, 6, 5), np.float32)}
    by_ptr = {b.ctypes.data: (s, b) for s, b in bufs.items()}
    seen = []

    def gemm_strided_batched_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
                                strideB, beta, C, Ctype, ldc, strideC, batch, compute, algo):
        assert ctypes.c_float.from_address(alpha).value == 1.0 and ctypes.c_float.from_address(beta).value == 0.0
        assert Atype == Btype == Ctype == cublas.CUDA_R[DType.F32] and algo == cublas.GEMM_DEFAULT

        def slot(ptr):
            for base, (s, b) in by_ptr.items():
                if base <= ptr < base + b.nbytes:
                    return s, (ptr - base) // b.itemsize
            raise AssertionError("a pointer into no buffer")
        seen.append(handle)
        standin_gemm(CublasGemm(transa, transb, m, n, k, slot(A), lda, strideA, slot(B), ldb, strideB, slot(C), ldc,
                                strideC, batch, DType.F32, compute), bufs)

    math_mode = [3]  # the handle allows TF32 (as CUPY_TF32=1 sets it): restored after the call
    fake_blas = types.SimpleNamespace(gemmStridedBatchedEx=gemm_strided_batched_ex,
                                      setStream=lambda handle, ptr: seen.append(("stream", ptr)),
                                      setWorkspace=lambda handle, ptr, size: seen.append(("ws", size)),
                                      getMathMode=lambda handle: math_mode[0],
                                      setMathMode=lambda handle, mode: (math_mode.__setitem__(0, mode),
                                                                        seen.append(("math", mode))))
    fake_cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(device=types.SimpleNamespace(
        get_cublas_handle=lambda: 1234)), empty=lambda shape, dtype: _FakeArray(np.empty(shape, dtype)))
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setattr(cublas, "_workspaces", {})

    class Stream:
        ptr = 77

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    (call,) = GemmDesc.of(node, buffer_sources(node)).bind({}, gemv=False)
    cublas.cupy_gemm(call, {s: _FakeArray(b) for s, b in bufs.items()}, Stream(), cublas=fake_blas)
    # the stream, then the workspace (a new stream resets it), on every call; TF32 off and back
    assert seen == [("stream", 77), ("ws", cublas.WORKSPACE_BYTES), ("math", 0), 1234, ("math", 3)]
    want = np.matmul(bufs[0].astype(np.float64), bufs[1].astype(np.float64))
    np.testing.assert_allclose(bufs[-1], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["batch_broadcast_stride0", "transposed_a", "batch_permuted"])
def test_a_widened_call_never_reaches_cublas_and_rounds_once(monkeypatch, name):
    """At precision "float64" cupy_gemm runs an f32 GEMM as a DGEMM on f64 copies of the operand
    views (cuBLAS has no f32 GEMM accumulating in double): CuPy's array API, here NumPy's, whose
    result is the float64 product rounded once; the cuBLAS bindings are never called."""
    rng = np.random.default_rng(5)
    a_st, a_shape, b_st, b_shape = HAND[name]
    node = _matmul(a_st, a_shape, b_st, b_shape)
    bufs = {0: rng.standard_normal(a_shape).astype(np.float32), 1: rng.standard_normal(b_shape).astype(np.float32)}
    bufs[-1] = np.zeros(tuple(int(d) for d in node.shape), np.float32)
    monkeypatch.setitem(sys.modules, "cupy", np)  # the array API CuPy mirrors

    class Stream:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    calls = GemmDesc.of(node, buffer_sources(node)).bind({}, precision="float64")
    assert calls and all(c.widened for c in calls)
    for call in calls:
        cublas.cupy_gemm(call, bufs, Stream(), cublas=types.SimpleNamespace())  # no attribute of it is used
    a, b = (np.lib.stride_tricks.as_strided(bufs[i], st.shape, [s * 4 for s in st.strides]) for i, st in
            ((0, a_st), (1, b_st)))
    np.testing.assert_array_equal(bufs[-1], np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32))


def test_cublas_is_called_through_ctypes_with_statuses_checked(monkeypatch):
    """cupy_gemm calls libcublas through ctypes, not CuPy's bindings: their setStream refuses a
    capturing stream and CuPy 14.2 has no setWorkspace. Each entry point keeps CuPy's name and
    convention; a failing status is a named DeviceError."""
    calls = []

    def c_function(status=0, out=None):
        def fn(*args):
            calls.append(args)
            if out is not None:
                args[1]._obj.value = out  # the int* of cublasGetMathMode
            return status
        return fn

    lib = types.SimpleNamespace(cublasSetWorkspace_v2=c_function(), cublasSetStream_v2=c_function(),
                                cublasGemmStridedBatchedEx=c_function(), cublasGetMathMode=c_function(out=3),
                                cublasSetMathMode=c_function(7))
    monkeypatch.setattr(cublas, "_libcublas", lambda: lib)
    cublas._c_bindings.cache_clear()
    try:
        blas = cublas._c_bindings()
        blas.setStream(5, 99)
        blas.setWorkspace(5, 1000, cublas.WORKSPACE_BYTES)
        blas.gemmStridedBatchedEx(5, *range(22))
        assert calls == [(5, 99), (5, 1000, cublas.WORKSPACE_BYTES), (5, *range(22))]
        assert blas.getMathMode(5) == 3
        with pytest.raises(DeviceError, match="cublasSetMathMode returned status 7"):
            blas.setMathMode(5, 0)
        assert all(getattr(lib, sym).restype is ctypes.c_int for sym, _ in cublas._C_ENTRY.values())
    finally:
        cublas._c_bindings.cache_clear()
