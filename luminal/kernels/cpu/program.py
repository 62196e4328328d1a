"""A graph's C library and its launch table (the program `CpuRuntime` runs).

The library holds each distinct kernel once (named by its op and a hash of its body, sorted by
name, so the same set of kernels gives the same source whatever the depth or the model), a
wrapper per kernel taking its buffers and dims from arrays, and the fixed driver `lum_run`. The
order of launches is data: `launch_table` lists per step its kernel, its buffers (a slot of
`bufs` or an offset into the arena) and its dims (indices into `dims`), and `lum_run`
interprets it. A 32-layer model therefore builds the same library as a 2-layer one.

One fusion happens here, on the schedule: a convolution's GEMM whose im2col copy (and padded
copy) nothing else reads is one tiled kernel (`conv.Im2colGemm`); the copies' steps do nothing.
"""

from __future__ import annotations

import collections
import hashlib

from luminal.hlir.ops import Node, Op
from luminal.kernels.cpu import build, gemm_avx512
from luminal.kernels.cpu import conv as cpu_conv
from luminal.kernels.cpu.prelude import PRELUDE, SHARED
from luminal.kernels.cpu.render import _generator, _operand
from luminal.kernels.cpu.steps import CProgram, CStep
from luminal.kernels.plan import Schedule
from luminal.kernels.render.cstyle import buffer_sources

# The driver: every launch of the table in order. A step of the table is
#   kernel, n_ptrs, n_dims, ptr codes (>= 0: bufs[code]; < 0: arena + offsets[-1 - code]), dim codes (dims[code])
DRIVER = r"""typedef void (*lum_kernel_fn)(void* const* p, const long long* d, int* err);
static const lum_kernel_fn lum_kernels[] = {@KERNELS@};
const int lum_kernel_count = @COUNT@;
const int lum_kernel_arity[] = {@ARITY@};  /* pointers, dims and err flag of each kernel */
const char lum_kernel_names[] = "@NAMES@";
void lum_run(const long long* table, long long n_steps, void* const* bufs, const long long* dims, char* arena,
             const long long* offsets, int* err, int threads, double* seconds, int f64) {
  lum_f64 = f64;
  /* The OpenMP settings are the calling thread's, and torch shares this libgomp (the same
     soname, loaded first): they are restored on return. Left on, dynamic teams made torch's
     oneDNN bf16 GEMMs, which assume full teams, return NaNs after a luminal call. */
  const int outer_threads = omp_get_max_threads(), outer_dynamic = omp_get_dynamic();
  /* One pool: the GEMMs run on this team too (MKL's threads are libgomp's; OpenBLAS is called
     single-threaded, a large GEMM split across the team). Full teams of torch's thread count less
     the cores other processes keep busy (`lum_team`; libgomp's dynamic teams size by the
     15-minute load average, this process's own included, so a process busy for minutes dropped
     to one thread while eager kept two). */
  threads = lum_team(threads);
  /* torch sets MKL's own (global) count, which MKL obeys over OpenMP's: the call's is set on
     this thread and restored */
  const int outer_mkl = lum_mkl_threads_local ? lum_mkl_threads_local(threads) : 0;
  omp_set_num_threads(threads);
  omp_set_dynamic(0);
  lum_threads = threads;
  void* p[@MAXP@];
  long long d[@MAXD@];
  const long long* t = table;
  for (long long s = 0; s < n_steps; ++s) {
    const long long np = t[1], nd = t[2];
    for (long long i = 0; i < np; ++i) { long long c = t[3 + i]; p[i] = c >= 0 ? bufs[c] : (void*)(arena + offsets[-1 - c]); }
    for (long long i = 0; i < nd; ++i) d[i] = dims[t[3 + np + i]];
    if (seconds) {
      double t0 = omp_get_wtime();
      lum_kernels[t[0]](p, d, err);
      seconds[s] += omp_get_wtime() - t0;
    } else {
      lum_kernels[t[0]](p, d, err);
    }
    t += 3 + np + nd;
  }
  omp_set_dynamic(outer_dynamic);
  omp_set_num_threads(outer_threads);
  if (lum_mkl_threads_local) lum_mkl_threads_local(outer_mkl);
}
/* the team a call asking for `threads` would get now (`lum_team`): for tests and diagnostics */
int lum_team_size(int threads) { return lum_team(threads); }
"""


def _wrapper(step: CStep) -> str:
    """`lum_w_<name>(p, d, err)`: the kernel called with its pointers and dims from arrays."""
    args = [f"p[{i}]" for i in range(1 + len(step.inputs))]
    if step.err:
        args.append("err")
    args += [f"d[{i}]" for i in range(len(step.symbols))]
    unused = "" if step.err else " (void)err;"
    return f"LUM_SHARED void lum_w_{step.name}(void* const* p, const long long* d, int* err) {{{unused} " \
           f"{step.name}({', '.join(args)}); }}"


def _fusions(schedule: Schedule) -> tuple[dict[int, cpu_conv.Im2colGemm], set[int]]:
    """MatMuls run as tiled im2col + GEMM kernels (`conv.Im2colGemm`), by id, and the nodes
    they absorb (whose steps then do nothing)."""
    users: collections.Counter = collections.Counter()
    for n in schedule.nodes:
        for b in buffer_sources(n):
            users[id(b)] += 1
    for n in schedule.outputs:
        users[id(n)] += 1
    plans, absorbed = {}, set()
    for n in schedule.nodes:
        plan = cpu_conv.im2col_gemm(n, users) if n.op is Op.MAT_MUL else None
        if plan is not None:
            plans[id(n)] = plan
            absorbed.update(id(x) for x in plan.absorbed)
    return plans, absorbed


def _fused_step(node: Node, plans, absorbed) -> tuple[str, CStep] | None:
    if id(node) in plans:
        code, inputs, symbols = cpu_conv.im2col_gemm_kernel(plans[id(node)], "@KERNEL@", _operand)
        return code, CStep("@KERNEL@", node, inputs, symbols, False)
    if id(node) in absorbed:
        return cpu_conv.noop_kernel(node, "@KERNEL@"), CStep("@KERNEL@", node, [], [], False)
    return None


def render_program(outputs: list[Node]) -> CProgram:
    """The graph computing `outputs` as one C library: its distinct kernels and the driver."""
    schedule = Schedule.build(outputs)
    plans, absorbed = _fusions(schedule)
    bodies: dict[str, tuple[str, CStep]] = {}
    steps: list[CStep] = []
    for node in schedule.nodes:  # one step per node (a scatter's copy and updates are one function)
        code, step = _fused_step(node, plans, absorbed) or _generator(node)(node, "@KERNEL@")
        h = hashlib.sha1(code.encode()).hexdigest()[:12]
        step.name = f"{node.op.title.lower()}_{h}"
        bodies.setdefault(step.name, (code.replace("@KERNEL@", step.name), step))
        steps.append(step)
    symbols = sorted({s for st in steps for s in st.symbols})
    units = build.units(len(bodies))
    # the GEMM object, when it is built or building, or a core is free to build it beside the units;
    # else (a busy machine, nothing cached) the prelude's GEMMs, compiled in the library, cost less
    linked = build.object_available(GEMM_OBJECT) or build.spare_core()
    sources = library_source(bodies, units, linked)
    identity = sources[0] if units == 1 else library_source(bodies, 1, linked)[0]
    return CProgram(sources, identity, steps, schedule, symbols, sorted(bodies))


# The prelude's float GEMM entry points (BLAS dispatch, gemv, skinny and loop GEMMs, the float64
# path: 1.2G of gcc's instructions, a third of the 32-layer Llama's 55-kernel library) are compiled
# once per machine into an object every library links (`build.compiled_object`, started in the
# background by `prepare`), not in every library and unit that calls them: a kernel unit names them
# `lum_ext_gemm_*`, and the prelude's own copies, unused there, are dropped unoptimized.
_GEMMS = (("f", "float"), ("d", "double"))
GEMM_OBJECT = "\n".join([PRELUDE, *(
    f"LUM_SHARED void lum_ext_gemm_{n}(int ta, int tb, long long M, long long N, long long K, const {t}* A, "
    f"long long lda, const {t}* B, long long ldb, {t}* C, long long ldc) "
    f"{{ lum_gemm_{n}(ta, tb, M, N, K, A, lda, B, ldb, C, ldc); }}" for n, t in _GEMMS)])
GEMM_LINKED = "".join(
    f"LUM_SHARED void lum_ext_gemm_{n}(int, int, long long, long long, long long, const {t}*, long long, "
    f"const {t}*, long long, {t}*, long long);\n#define lum_gemm_{n} lum_ext_gemm_{n}\n" for n, t in _GEMMS)


build.LINKED["lum_ext_gemm_"] = GEMM_OBJECT


def prepare() -> None:
    """Start building the GEMM object in the background (a no-op once it is in the cache): as a
    compile begins (`kernels.cpu.prepare`, not when the library itself will build in the
    background: a compiler beside the compile's Python slowed the 32-layer Llama's lowering to
    0.44-0.54 s on cpu against 0.33-0.38 s on numpy, in alternating runs), or as that background
    build begins."""
    spare = build.spare_core()  # looked at once: the GEMM object's compiler, once started, would count against the next
    if spare:
        build.prepare_object(GEMM_OBJECT, spare_core_only=False)
    gemm_avx512.prepare(spare)  # luminal's AVX-512 SGEMM, when the runtime will put it in front of the BLAS


# Compile cost in characters of row-loop kernels (gcc 12 -O2, cc1 instructions of the 32-layer
# Llama's library, ~50k per character), to balance the units: a GEMM kernel's text (its operand
# cases fold away) costs 0.4 of that; the driver and the wrappers of the first unit ~5,000; the
# prelude's GEMMs, when compiled in the library (not linked: `linked`), ~25,000.
GEMM_BODY_WEIGHT = 0.4
DRIVER_COST = 5_000
GEMM_SOURCE_COST = 25_000


def library_source(bodies: dict[str, tuple[str, CStep]], units: int = 1, linked: bool = True) -> list[str]:
    """The library of the kernels `bodies` (name -> (code, a step running it)) as `units` C
    translation units, compiled in parallel (at most one per kernel; the first holds the driver):
    a function of the set of kernels, `units` and `linked` (the GEMMs are the linked object's, else
    the prelude's, compiled in the first unit) only. The kernels calling the prelude's GEMMs
    all go to the first unit (a unit that calls them compiles the prelude's GEMM code, a fifth of
    a second: once, not in every unit); the others are dealt to the units largest first, each to
    the smallest unit so far."""
    names = sorted(bodies)
    arity = [(1 + len(bodies[n][1].inputs), len(bodies[n][1].symbols), int(bodies[n][1].err)) for n in names]
    driver = (DRIVER.replace("@KERNELS@", ", ".join(f"lum_w_{n}" for n in names) or "0")
              .replace("@COUNT@", str(len(names)))
              .replace("@ARITY@", ", ".join(f"{a}, {b}, {c}" for a, b, c in arity) or "0")
              .replace("@NAMES@", " ".join(names))
              .replace("@MAXP@", str(max([a for a, _, _ in arity], default=1)))
              .replace("@MAXD@", str(max([b for _, b, _ in arity] + [1]))))
    declared = "".join(f"LUM_SHARED void lum_w_{n}(void* const* p, const long long* d, int* err);\n" for n in names)
    gemms = [n for n in names if "lum_gemm_" in bodies[n][0]]
    units = max(1, min(units, len(names) - len(gemms) + (1 if gemms else 0)))  # no unit without a kernel
    parts: list[list[str]] = [[] for _ in range(units)]
    sizes = [0] * units
    sizes[0] = DRIVER_COST
    if gemms:  # the GEMM kernels together: a unit calling the prelude's GEMMs compiles them
        parts[0] += gemms
        sizes[0] += (0 if linked else GEMM_SOURCE_COST) + sum(GEMM_BODY_WEIGHT * len(bodies[n][0]) for n in gemms)
    for n in sorted(set(names) - set(gemms), key=lambda n: (-len(bodies[n][0]), n)):
        u = sizes.index(min(sizes))
        parts[u].append(n)
        sizes[u] += len(bodies[n][0])
    sources = []
    for u, part in enumerate(parts):
        kernels = [bodies[n][0] for n in sorted(part)] + [_wrapper(bodies[n][1]) for n in sorted(part)]
        tail = [SHARED, declared, driver] if u == 0 else []
        sources.append("\n".join([PRELUDE, GEMM_LINKED if gemms and linked else "", *kernels, *tail]))
    return sources
