"""The CPU emulator runs CUDA C like a GPU would: results match NumPy, do not depend on the order
threads run in, and broken kernels are flagged instead of silently giving numbers."""

from pathlib import Path

import numpy as np
import pytest

from luminal.errors import DTypeError, InputError
from luminal.kernels import emulator
from luminal.kernels.emulator import EmulatorError

KERNELS_DIR = Path(__file__).resolve().parent
SCHEDULES = (0, 1, 2)  # forward, reverse, shuffled


@pytest.fixture(scope="module")
def module(sample_source, broken_source):
    """One g++ build of every sample and broken kernel, shared by the whole file."""
    return emulator.build(sample_source + "\n" + broken_source)


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, name)))


def elements(a: np.ndarray) -> tuple[np.int64, ...]:
    """Element strides of a view, as the kernels take them."""
    return tuple(np.int64(s // a.itemsize) for s in a.strides)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even, NaN -> 0x7fff (what the GPU does)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), bits)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


# Each case launches one sample kernel under a schedule and returns [(name, actual, expected,
# rtol, atol)]. Inputs are seeded by the case name, so every schedule sees the same data.
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


@case
def ew_mul_add_strided(m, schedule):
    base = rng_for("ew").standard_normal((300, 200)).astype(np.float32)
    a = base.T  # (200, 300) view, strides (1, 200) elements
    b = rng_for("ew-b").standard_normal((1, 300)).astype(np.float32)
    b_view = np.broadcast_to(b, (200, 300))  # stride 0 along rows
    out = np.zeros((200, 300), np.float32)
    m.launch("ew_mul_add_strided", (40,), (256,),
             [base, b, out, np.int32(200), np.int32(300), *elements(a), *elements(b_view), *elements(out)],
             schedule=schedule)
    return [("out", out, a * b + 1, 1e-5, 0)]


@case
def row_sum_tree(m, schedule):
    x = rng_for("sum").standard_normal((37, 1000)).astype(np.float32)
    out = np.zeros(37, np.float32)
    m.launch("row_sum_tree", (37,), (256,), [x, out, np.int32(1000)], schedule=schedule)
    return [("sums", out, x.sum(1, dtype=np.float64), 1e-5, 1e-4)]


@case
def row_max_warp(m, schedule):
    x = rng_for("max").standard_normal((45, 77)).astype(np.float32)  # 45 rows: last block is partial
    out = np.zeros(45, np.float32)
    m.launch("row_max_warp", ((45 + 3) // 4,), (32, 4), [x, out, np.int32(45), np.int32(77)], schedule=schedule)
    return [("max", out, x.max(1), 0, 0)]


@case
def softmax_online(m, schedule):
    x = (rng_for("softmax").standard_normal((19, 1000)) * 5).astype(np.float32)
    y = np.zeros_like(x)
    m.launch("softmax_online", (19,), (256,), [x, y, np.int32(1000)], schedule=schedule)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    return [("softmax", y, e / e.sum(1, keepdims=True), 1e-5, 1e-8)]


@case
def matmul_tiled16(m, schedule):
    A = rng_for("A").standard_normal((100, 70)).astype(np.float32)
    B = rng_for("B").standard_normal((70, 90)).astype(np.float32)
    C = np.zeros((100, 90), np.float32)
    m.launch("matmul_tiled16", ((90 + 15) // 16, (100 + 15) // 16), (16, 16),
             [A, B, C, np.int32(100), np.int32(90), np.int32(70)], schedule=schedule)
    return [("C", C, A.astype(np.float64) @ B, 1e-5, 1e-4)]


@case
def int_stats_atomic(m, schedule):
    v = rng_for("atomics").integers(-500, 500, 3000).astype(np.int32)
    bins = 17
    hist = np.zeros(bins, np.uint32)
    min_max = np.array([np.iinfo(np.int32).max, np.iinfo(np.int32).min], np.int32)
    count = np.zeros(1, np.uint64)
    sum_max = np.array([0.0, -np.inf], np.float32)
    flags = np.zeros(bins, np.uint32)
    bins_hit = np.zeros(1, np.uint32)
    m.launch("int_stats_atomic", (5,), (128,),  # fewer threads than elements: grid-stride loop
             [v, np.int32(v.size), np.int32(bins), hist, min_max, count, sum_max, flags, bins_hit],
             schedule=schedule)
    return [("hist", hist, np.bincount(v % bins, minlength=bins), 0, 0),
            ("min_max", min_max, [v.min(), v.max()], 0, 0),
            ("count", count, [v.size], 0, 0),
            ("sum_max", sum_max, [v.sum(), v.max()], 0, 0),
            ("bins_hit", bins_hit, [len(np.unique(v % bins))], 0, 0)]


@case
def warp_votes(m, schedule):
    n = 1000  # 4 blocks of 256: the last warp is partly past n
    x = rng_for("votes").standard_normal(n).astype(np.float32)
    x[64:96] = np.abs(x[64:96]) + 1  # one warp all positive
    x[96:128] = -np.abs(x[96:128]) - 1  # one warp all negative
    positives, any_all = np.zeros(32, np.int32), np.zeros(64, np.int32)
    m.launch("warp_votes", (4,), (256,), [x, np.int32(n), positives, any_all], schedule=schedule)
    votes = np.zeros(1024, bool)
    votes[:n] = x > 0
    votes = votes.reshape(32, 32)
    return [("positives", positives, votes.sum(1), 0, 0),
            ("any_all", any_all, np.stack([votes.any(1), votes.all(1)], 1).ravel(), 0, 0)]


@case
def row_norm_dynamic_smem(m, schedule):
    x = rng_for("norm").standard_normal((23, 500)).astype(np.float32)
    out = np.zeros(23, np.float32)
    m.launch("row_norm_dynamic_smem", (23,), (96,), [x, out, np.int32(500)], shared_mem_bytes=3 * 4,
             schedule=schedule)
    return [("norm", out, np.sqrt((x.astype(np.float64) ** 2).sum(1)), 1e-5, 0)]


@case
def rmsnorm_f16(m, schedule):
    x = rng_for("rms").standard_normal((13, 300)).astype(np.float16)
    w = (1 + 0.1 * rng_for("rms-w").standard_normal(300)).astype(np.float16)
    y = np.zeros_like(x)
    m.launch("rmsnorm_f16", (13,), (128,), [x, w, y, np.int32(300), np.float32(1e-6)], schedule=schedule)
    x64 = x.astype(np.float64)
    ref = (x64 / np.sqrt((x64**2).mean(1, keepdims=True) + 1e-6) * w).astype(np.float16)
    return [("y", y.astype(np.float32), ref.astype(np.float32), 2**-10, 1e-6)]  # one f16 ulp


@case
def matvec_bf16(m, schedule):
    A = bf16_bits(rng_for("mv").standard_normal((50, 130)).astype(np.float32))
    x = bf16_bits(rng_for("mv-x").standard_normal(130).astype(np.float32))
    y = np.zeros(50, np.uint16)  # bf16 arrays travel as their bits (or ml_dtypes.bfloat16)
    m.launch("matvec_bf16", ((50 + 3) // 4,), (32, 4), [A, x, y, np.int32(50), np.int32(130)], schedule=schedule)
    ref = bf16_to_f32(A).astype(np.float64) @ bf16_to_f32(x)
    return [("y", bf16_to_f32(y), bf16_to_f32(bf16_bits(ref.astype(np.float32))), 2**-7, 1e-6)]  # one ulp


@case
def cast_f32_f16_bf16(m, schedule):
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1 + 2**-11, 1 + 3 * 2**-11, 65504, 65519, 65520,
                        1e-7, 6e-8, 2**-24, 1 + 2**-8, 1 + 3 * 2**-8, np.finfo(np.float32).max, -3.0e38],
                       np.float32)
    x = np.concatenate([special, rng_for("cast").standard_normal(300).astype(np.float32) * 100])
    n = x.size
    h, b, back = np.zeros(n, np.float16), np.zeros(n, np.uint16), np.zeros(2 * n, np.float32)
    m.launch("cast_f32_f16_bf16", ((n + 127) // 128,), (128,), [x, h, b, back, np.int32(n)], schedule=schedule)
    finite = ~np.isnan(x)
    with np.errstate(over="ignore"):  # 65520 and up become inf, as intended
        ref_h = x.astype(np.float16)
    return [("f16 bits", h.view(np.uint16)[finite], ref_h.view(np.uint16)[finite], 0, 0),
            ("f16 nan", np.isnan(h), ~finite, 0, 0),
            ("bf16 bits", b, bf16_bits(x), 0, 0),
            ("f16 back", back[0::2], ref_h.astype(np.float32), 0, 0),
            ("bf16 back", back[1::2], bf16_to_f32(bf16_bits(x)), 0, 0)]


@case
def scale_ftz(m, schedule):
    def flush(a):  # what -ftz=true does to f32 operands and results
        return np.where(np.abs(a) < np.finfo(np.float32).tiny, np.float32(0), a)

    x = np.array([1e-30, 1e-40, -1e-40, 3.0, -1e-30, 1.0] * 50, np.float32)  # 1e-40: a denormal
    checks = []
    for scale in (np.float32(1e20), np.float32(1e-9)):  # 1e-30 * 1e-9: a denormal result
        out = np.full_like(x, np.nan)
        m.launch("scale_ftz", (3,), (128,), [x, out, scale, np.int32(x.size)], schedule=schedule)
        checks.append((f"x * {scale}", out, flush(flush(x) * scale), 1e-6, 0))
    return checks


@pytest.mark.parametrize("name", CASES)
def test_sample_kernel_matches_numpy(module, name):
    for what, actual, expected, rtol, atol in CASES[name](module, schedule=0):
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=f"{name}: {what}")


@pytest.mark.parametrize("name", CASES)
def test_sample_kernel_is_bitwise_schedule_independent(module, name):
    forward, *others = [CASES[name](module, schedule=s) for s in SCHEDULES]
    for schedule, run in zip(SCHEDULES[1:], others):
        for (what, a, *_), (_, b, *_) in zip(forward, run):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), f"{name}: {what} under schedule {schedule}"


# ------------------------------------------------------------------ broken kernels ---
def launch_broken(module, kernel, grid, block, n, out_size, schedule=None):
    x = rng_for(kernel).standard_normal(1024).astype(np.float32)
    out = np.zeros(out_size, np.float32)
    module.launch(kernel, grid, block, [x, out, np.int32(n)], schedule=schedule)
    return x, out


def test_barrier_after_early_return_is_flagged(module):
    with pytest.raises(EmulatorError, match=r"'bug_divergent_barrier'.*__syncthreads\(\) reached by 232 of 256 "
                                            r"threads of block \(3,0,0\); 24 had exited"):
        launch_broken(module, "bug_divergent_barrier", (4,), (256,), n=1000, out_size=4)


def test_barriers_in_both_branches_are_flagged(module):
    with pytest.raises(EmulatorError, match=r"wait at different __syncthreads\(\) \(line \d+ vs line \d+\)"):
        launch_broken(module, "bug_split_barrier", (1,), (256,), n=256, out_size=256)


def test_shuffle_naming_exited_lanes_is_flagged(module):
    with pytest.raises(EmulatorError, match=r"'bug_divergent_shfl'.*mask names lane 16, which exited"):
        launch_broken(module, "bug_divergent_shfl", (1,), (64,), n=64, out_size=64)


def test_deadlock_is_flagged(module):
    with pytest.raises(EmulatorError, match=r"deadlock in block \(0,0,0\): 1 threads wait at __syncthreads"):
        launch_broken(module, "bug_deadlock", (1,), (32,), n=32, out_size=32)


def test_uninitialised_shared_memory_reads_nan(module):
    x, y = launch_broken(module, "bug_uninit_shared", (2,), (256,), n=512, out_size=512)
    halves = y.reshape(2, 2, 128)  # per block: first half read unwritten slots, second half written ones
    assert np.isnan(halves[:, 0]).all()
    np.testing.assert_array_equal(halves[:, 1], x[:512].reshape(2, 2, 128)[:, 0, ::-1])


def test_shuffle_from_missing_lanes_reads_nan(module):
    _, y = launch_broken(module, "bug_partial_warp_shfl", (1,), (48,), n=48, out_size=2)
    assert np.isfinite(y[0]) and np.isnan(y[1])  # warp 1 has 16 lanes and read 16 that do not exist


def test_race_gives_schedule_dependent_results(module, monkeypatch):
    sums = [launch_broken(module, "bug_race", (4,), (256,), n=1024, out_size=4, schedule=s)[1] for s in SCHEDULES]
    assert len({s.tobytes() for s in sums}) > 1
    monkeypatch.setenv("CUEMU_SCHEDULE", "2")  # the environment variable selects the same schedule
    from_env = launch_broken(module, "bug_race", (4,), (256,), n=1024, out_size=4)[1]
    assert from_env.tobytes() == sums[2].tobytes()


def test_module_still_works_after_an_error(module):
    with pytest.raises(EmulatorError):
        launch_broken(module, "bug_deadlock", (1,), (32,), n=32, out_size=32)
    for check in row_sum_tree(module, schedule=0):
        np.testing.assert_allclose(check[1], check[2], rtol=check[3], atol=check[4])


# ------------------------------------------------------------------ launch checks ---
def test_arguments_are_checked_against_the_signature(module):
    x, out = np.zeros(256, np.float32), np.zeros(1, np.float32)
    with pytest.raises(DTypeError, match=r"argument 0 \(const float\*\): array dtype float64"):
        module.launch("row_sum_tree", 1, 256, [x.astype(np.float64), out, np.int32(256)])
    with pytest.raises(DTypeError, match=r"argument 2 \(int\): expected a NumPy scalar of dtype int32, got int"):
        module.launch("row_sum_tree", 1, 256, [x, out, 256])
    with pytest.raises(DTypeError, match=r"got np.int64"):
        module.launch("row_sum_tree", 1, 256, [x, out, np.int64(256)])
    out.flags.writeable = False
    with pytest.raises(DTypeError, match="read-only array for a non-const pointer"):
        module.launch("row_sum_tree", 1, 256, [x, out, np.int32(256)])
    with pytest.raises(InputError, match="takes 3 arguments"):
        module.launch("row_sum_tree", 1, 256, [x, np.int32(256)])
    with pytest.raises(InputError, match="no kernel 'nope'"):
        module.launch("nope", 1, 256, [])


def test_invalid_launch_configuration_is_an_error(module):
    x, out = np.zeros(256, np.float32), np.zeros(1, np.float32)
    with pytest.raises(EmulatorError, match=r"invalid block \(2048,1,1\)"):
        module.launch("row_sum_tree", 1, 2048, [x, out, np.int32(256)])
    with pytest.raises(EmulatorError, match="exceeds"):
        module.launch("row_norm_dynamic_smem", 1, 32, [x, out, np.int32(256)], shared_mem_bytes=1 << 20)


def test_static_shared_memory_is_per_kernel(module):
    sizes = {k: info.static_shared_mem for k, info in module.kernels.items()}
    assert sizes["matmul_tiled16"] == 2112 and sizes["softmax_online"] == 256 and sizes["row_max_warp"] == 0


def test_build_is_cached_on_disk(tmp_path):
    source = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n'
    builds = emulator.stats.builds
    first = emulator.build(source, cache_path=tmp_path)
    assert emulator.stats.builds == builds + 1
    assert emulator.build(source, cache_path=tmp_path) is first  # same process: same module
    hits = emulator.stats.cache_hits
    emulator.compile_shared_library(source, cache_path=tmp_path)  # what a new process would do
    assert (emulator.stats.builds, emulator.stats.cache_hits) == (builds + 1, hits + 1)
    x = np.arange(32, dtype=np.float32)
    first.launch("twice", 1, 32, [x])
    np.testing.assert_array_equal(x, np.arange(32) * 2)


def test_translation_unit_rewrites():
    source = ('extern __shared__ __align__(16) unsigned char arena[];\n'
              'extern "C" __global__ void __launch_bounds__(128) k(float* x) {\n'
              '    extern __shared__ float dyn[];\n    __shared__ float tile[32];\n}\n')
    text = emulator.translation_unit(source)
    assert "unsigned char* const& arena = " in text and "float* const& dyn = " in text
    assert "#define __shared__ CUEMU_SHARED_IN(cuemu_smem_k)\n#line 2 \"kernel.cu\"" in text
    assert text.rstrip().endswith("CUEMU_EXPORT(k)")


# ------------------------------------------------------------------ ASan ---
@pytest.mark.skipif(emulator.libasan_path() is None, reason="g++ has no libasan.so")
def test_asan_build_runs_a_kernel_and_catches_out_of_bounds():
    code = f"""
import numpy as np
from luminal.kernels import emulator
module = emulator.build(open({str(KERNELS_DIR / "broken_kernels.cu")!r}).read(), mode="asan")
x = np.arange(1024, dtype=np.float32)
y = np.zeros(1024, np.float32)
module.launch("bug_oob", (4,), (256,), [x, y, np.int32(1024)])  # grid fits the arrays: fine
assert (y == 2 * x).all()
print("in-bounds launch ok", flush=True)
x, y = x[:1000].copy(), np.zeros(1000, np.float32)
module.launch("bug_oob", (4,), (256,), [x, y, np.int32(1000)])  # 24 threads past the end
print("out-of-bounds launch not caught", flush=True)
"""
    proc = emulator.run_python_under_asan(code)
    assert "in-bounds launch ok" in proc.stdout, proc.stderr[-3000:]
    assert proc.returncode != 0 and "not caught" not in proc.stdout
    assert "AddressSanitizer: heap-buffer-overflow" in proc.stderr and "bug_oob" in proc.stderr, proc.stderr[-3000:]


def test_asan_build_refuses_to_load_without_the_runtime(tmp_path):
    if emulator.asan_runtime_loaded():
        pytest.skip("this process runs under ASan")
    source = 'extern "C" __global__ void noop(float* x) {}\n'
    with pytest.raises(Exception, match="LD_PRELOAD=libasan.so"):
        emulator.build(source, mode="asan", cache_path=tmp_path)


def test_fiber_stacks_of_many_libraries_stay_under_the_map_limit():
    """Each emulator library keeps its fiber stacks between launches (two maps per CUDA thread);
    only the `FIBER_LIBRARIES` most recently launched keep them, and a dropped module's go with it,
    so a process compiling hundreds of CUDA graphs (a test run) stays under vm.max_map_count."""
    import gc

    import luminal as lm
    from luminal.kernels.emulator.module import EmulatedModule

    def maps() -> int:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    keep, before = [], maps()
    for i in range(EmulatedModule.FIBER_LIBRARIES + 8):
        g = lm.Graph(f"fibers_{i}")
        x = g.input("x", (4, 8))
        g.output(x.mul(float(i) + 0.5).sin(), "y")
        compiled = g.compile(device="cuda-emulator")
        np.testing.assert_allclose(compiled({"x": np.ones((4, 8), np.float32)})[0], np.sin(np.full((4, 8), i + 0.5)),
                                   rtol=1e-6)
        keep.append(compiled)
    held = maps() - before
    assert held < (EmulatedModule.FIBER_LIBRARIES + 4) * 2 * 256 + 2000, held  # 8 libraries' stacks unmapped
    keep.clear()
    gc.collect()
    assert maps() - before < held / 4, (maps() - before, held)
    # an evicted library maps its stacks again when it launches next
    g = lm.Graph("fibers_again")
    x = g.input("x", (4, 8))
    g.output(x.cos(), "y")
    np.testing.assert_allclose(g.compile(device="cuda-emulator")({"x": np.zeros((4, 8), np.float32)})[0], 1.0)
