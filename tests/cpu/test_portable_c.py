"""The C luminal generates compiles for CPUs other than this one: ARM64 on Linux and on macOS
(NEON through the compiler's vector extensions, no x86 intrinsics outside x86's guards) and
x86-64 with clang instead of gcc. zig's bundled clang and C library headers (the `ziglang` wheel,
a test dependency) cross-compile each translation unit of a program rendered as it would be on
such a machine: `build.machine_flags()` empty (what `build._machine_flags` gives off x86), the
convolutions on each path. The programs: a small CNN's training step (direct and im2col
convolutions, weight gradients, batch norm, max pool and its scatter, dropout's Philox) and a
tiny transformer's forward (fused attention, GELU, layer norm, an embedding's gather). Compiled,
not run: no ARM machine or emulator here; on x86 the same programs run in the rest of the suite.
"""

import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
import ziglang  # noqa: F401  (the dev extras install it: the compiler the tests run)
from torch import nn

import luminal
from luminal.kernels.cpu import build, program
from luminal.kernels.cpu import runtime as cpu_runtime
from luminal.kernels.cpu.steps import written_in_place

# zig ships no OpenMP header: the declarations the generated C calls (with -fopenmp the pragmas
# are lowered to the runtime's entry points, which only a link would need)
OMP_H = """#ifndef LUM_TEST_OMP_H
#define LUM_TEST_OMP_H
int omp_get_thread_num(void); int omp_get_num_threads(void); int omp_get_max_threads(void);
void omp_set_num_threads(int); int omp_get_dynamic(void); void omp_set_dynamic(int);
double omp_get_wtime(void); int omp_in_parallel(void); int omp_get_num_procs(void);
#endif
"""


class _Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.body = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.Conv2d(16, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16))
        self.head = nn.Linear(16, 10)

    def forward(self, x, y):
        h = self.stem(x)
        h = F.relu(h + self.body(h))
        logits = self.head(F.dropout(h.mean((2, 3)), 0.1, self.training))
        return F.cross_entropy(logits, y)


class _Block(nn.Module):
    def __init__(self, d=32, heads=2):
        super().__init__()
        self.emb, self.heads = nn.Embedding(50, d), heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, ids):
        x = self.emb(ids)
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.out(a)
        return x + self.mlp(self.ln2(x))


def _runtimes(monkeypatch) -> list:
    """The cpu runtimes of the programs above, as built on this machine."""
    made = []
    real = cpu_runtime.CpuRuntime.__init__

    def record(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setenv("LUMINAL_TIERED", "0")
    monkeypatch.setattr(cpu_runtime.CpuRuntime, "__init__", record)
    torch.manual_seed(0)
    cnn = _Cnn().train()
    step = torch.compile(cnn, backend="luminal", options={"device": "cpu"})
    step(torch.randn(2, 3, 32, 32), torch.tensor([1, 7])).backward()
    block = _Block().eval()
    ids = torch.randint(0, 50, (1, 12))
    with torch.no_grad():
        luminal.compile(block, (ids,), device="cpu")(ids)
    torch._dynamo.reset()
    assert len(made) >= 3, "the CNN's forward and backward and the transformer's forward"
    return made


def _sources(runtimes, conv: str | None) -> list[str]:
    found = {}
    for rt in runtimes:
        for text in program.render_program(written_in_place(rt._declared), conv).sources:
            found.setdefault(text, None)
    return [*found, program.GEMM_OBJECT]


def _compile_all(sources: list[str], target: str, flags: list[str], tmp_path) -> None:
    include = tmp_path / "include"
    include.mkdir(exist_ok=True)
    (include / "omp.h").write_text(OMP_H)
    failures = []
    for i, text in enumerate(sources):
        src = tmp_path / f"{target}_{i}.c"
        src.write_text(text)
        cmd = [sys.executable, "-m", "ziglang", "cc", "-target", target, *flags, f"-I{include}", "-c", str(src),
               "-o", str(src.with_suffix(".o"))]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                              env={"ZIG_GLOBAL_CACHE_DIR": str(tmp_path / "zig-cache"), "PATH": "/usr/bin:/bin"})
        if done.returncode != 0:
            failures.append(f"{src.name}: {done.stderr[-2000:]}")
    assert not failures, "\n".join(failures)


def _portable_flags() -> list[str]:
    # the library's own flags less the link step's and gcc's partial PRE (clang has no such pass)
    return [f for f in build.FLAGS if f not in ("-shared", "-ftree-partial-pre")]


@pytest.fixture(scope="module")
def runtimes():
    with pytest.MonkeyPatch.context() as mp:
        yield _runtimes(mp)


@pytest.mark.parametrize("conv", ["direct", "im2col"])
def test_arm64_linux_and_macos(runtimes, conv, monkeypatch, tmp_path):
    monkeypatch.setattr(build, "machine_flags", lambda: ())  # as off x86: no vector extensions named
    sources = _sources(runtimes, conv)
    text = "\n".join(sources)
    kinds = set(re.findall(r"static void ([a-z]+)_[0-9a-f]{12}\(", text))
    assert {"matmul", "softmax", "gather", "scatter", "windowreduce", "fusedelementwise"} <= kinds, kinds
    assert "lum_philox" in text  # dropout
    assert ("lum_dconv_" in text and "lum_dwgrad_op_" in text) == (conv == "direct")  # the micro-kernels
    assert "immintrin" not in text and "__m256" not in text and "__m512" not in text
    _compile_all(sources, "aarch64-linux-gnu", _portable_flags(), tmp_path)
    if conv == "direct":
        _compile_all(sources, "aarch64-macos", _portable_flags(), tmp_path)


@pytest.mark.skipif(not build.machine_flags(), reason="an x86 machine's own flags are what this compiles with")
def test_x86_64_with_clang(runtimes, tmp_path):
    flags = [f for f in build.flags() if f not in ("-shared", "-ftree-partial-pre", "-lmvec")]
    _compile_all(_sources(runtimes, None), "x86_64-linux-gnu", flags, tmp_path)
