"""A graph's C library and its launch table (the program `CpuRuntime` runs).

The library holds each distinct kernel once (sorted by name), a wrapper per kernel taking its
buffers and dims from arrays, and the driver `lum_run`, which interprets the launch table
(`steps.launch_table`): the order of launches is data, so a 32-layer model builds the same library
as a 2-layer one. The fusions happen here (`conv_gemm.fusion_plan`): a convolution's GEMM whose
im2col copy nothing else reads is one tiled kernel (`conv_gemm.Im2colGemm`), a WindowReduce read
only by the pointwise region after it is computed inside that region's kernel
(`conv.WindowEpilogue`), and so is a GEMM, tiled or plain, read only by such a region
(`conv_gemm.GemmEpilogue`); the absorbed nodes' steps do nothing.
"""

from __future__ import annotations

import collections

from luminal.hlir.ops import Node
from luminal.kernels.cpu import build, concat_in_place, conv_direct, conv_gemm, sgemm
from luminal.kernels.cpu.prelude import PRELUDE, SHARED
from luminal.kernels.cpu.render import SPECIAL, _operand
from luminal.kernels.cpu.steps import CProgram, CStep
from luminal.kernels.plan import Schedule, dedup
from luminal.kernels.render import C, render_node
from luminal.kernels.render.cexpr import rendering
from luminal.kernels.render.cstyle import KernelSpec, buffer_sources

# The driver: every launch of the table in order. A step of the table is
#   kernel, n_ptrs, n_dims, ptr codes (>= 0: bufs[code]; < 0: tmps[-1 - code], the intermediates'
#   buffers: in the arena, or in a donated input), dim codes (dims[code])
DRIVER = r"""typedef void (*lum_kernel_fn)(void* const* p, const long long* d, int* err);
static const lum_kernel_fn lum_kernels[] = {@KERNELS@};
const int lum_kernel_count = @COUNT@;
const int lum_kernel_arity[] = {@ARITY@};  /* pointers, dims and err flag of each kernel */
const char lum_kernel_names[] = "@NAMES@";
void lum_run(const long long* table, long long n_steps, void* const* bufs, const long long* dims, void* const* tmps,
             int* err, int threads, double* seconds, int f64, long long* pack_table, long long pack_entries) {
  lum_f64 = f64;
  lum_pack_table = pack_table;  /* the runtime's packed weights (`lum_gemm_fw`), for this call */
  lum_pack_entries = pack_entries;
  /* The OpenMP settings are the calling thread's, shared with torch's libgomp: restored on return
     (dynamic teams left on made torch's oneDNN bf16 GEMMs return NaNs). */
  const int outer_threads = omp_get_max_threads(), outer_dynamic = omp_get_dynamic();
  /* One pool, GEMMs included; full teams less the cores other processes keep busy (`lum_team`:
     libgomp's dynamic teams count this process's own load too). */
  threads = lum_team(threads);
  /* MKL obeys torch's global count over OpenMP's: the call's is set on this thread and restored */
  const int outer_mkl = lum_mkl_threads_local ? lum_mkl_threads_local(threads) : 0;
  omp_set_num_threads(threads);
  omp_set_dynamic(0);
  lum_threads = threads;
  /* OpenBLAS runs on its calling thread (its pthread pool would spin against the OpenMP team; a large
     GEMM is split across the team instead, `LUM_BLAS_GEMM`). Its count is process-wide, NumPy's
     too: 1 for the call, then the caller's again */
  const int outer_blas = lum_blas_get_threads ? lum_blas_get_threads() : 0;
  if (outer_blas > 1) lum_blas_set_threads(1);
  void* p[@MAXP@];
  long long d[@MAXD@];
  const long long* t = table;
  for (long long s = 0; s < n_steps; ++s) {
    const long long np = t[1], nd = t[2];
    for (long long i = 0; i < np; ++i) { long long c = t[3 + i]; p[i] = c >= 0 ? bufs[c] : tmps[-1 - c]; }
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
  lum_pack_table = NULL;
  if (outer_blas > 1 && lum_blas_get_threads() == 1) lum_blas_set_threads(outer_blas);  /* unless set again meanwhile */
  omp_set_dynamic(outer_dynamic);
  omp_set_num_threads(outer_threads);
  if (lum_mkl_threads_local) lum_mkl_threads_local(outer_mkl);
}
/* lum_run with its arguments in one array of 11 words (CpuRuntime keeps one per calling thread
   and rewrites only what changed): one argument for ctypes to convert instead of 11 */
void lum_call(void* const* a) {
  lum_run((const long long*)a[0], (long long)(intptr_t)a[1], (void* const*)a[2], (const long long*)a[3],
          (void* const*)a[4], (int*)a[5], (int)(intptr_t)a[6], (double*)a[7], (int)(intptr_t)a[8],
          (long long*)a[9], (long long)(intptr_t)a[10]);
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


def _fusions(schedule: Schedule) -> tuple[dict[int, conv_gemm.Im2colGemm | conv_gemm.WindowEpilogue | conv_gemm.GemmEpilogue], set[int]]:
    """The fused kernels (`conv_gemm.fusion_plan`: tiled im2col GEMMs, WindowReduce epilogues, GEMM
    epilogues) by id of their node, and the nodes they absorb (whose steps then do nothing)."""
    users: collections.Counter = collections.Counter()
    for n in schedule.nodes:
        for b in buffer_sources(n):
            users[id(b)] += 1
    for n in schedule.outputs:
        users[id(n)] += 1
    plans, absorbed = {}, set()
    for n in schedule.nodes:
        plan = conv_gemm.fusion_plan(n, users)
        if plan is not None:
            plans[id(n)] = plan
            absorbed.update(id(x) for x in plan.absorbed)
            for x in plan.absorbed:  # a GEMM whose region took it in: its own plan is the region's now
                plans.pop(id(x), None)
    return plans, absorbed


def in_place_concats(schedule: Schedule, absorbed: set[int]) -> set[int]:
    """The CONCATs whose operands are computed inside their buffer (`concat_in_place`): their
    steps do nothing."""
    return {id(holder) for holder, _ in concat_in_place.aliases(schedule, absorbed).values()}


def _fused_step(node: Node, plans, absorbed, in_place=frozenset()) -> KernelSpec | None:
    """The kernel of a node `_fusions` fused or absorbed, or a CONCAT done in place (under a
    placeholder name), else None."""
    if id(node) in plans:
        with rendering(C):
            code, inputs, symbols = conv_gemm.fused_kernel(plans[id(node)], "@KERNEL@", _operand)
    elif id(node) in absorbed or id(node) in in_place:
        code, inputs, symbols = conv_gemm.noop_kernel(node, "@KERNEL@"), [], []
    else:
        return None
    return KernelSpec("@KERNEL@", code, node, inputs, symbols, None, 0)


def step_of(k: KernelSpec, node: Node, absorbed: bool = False) -> tuple[str, CStep]:
    """(code, step) of kernel `k` computing `node`, named by its op and a hash of its body (`plan.dedup`)."""
    k = dedup(k, node, {})
    return k.source, CStep(k.name, node, k.inputs, k.symbols, k.uses_error_flag, absorbed)


def render_program(outputs: list[Node], conv: str | None = None) -> CProgram:
    """The graph computing `outputs` as one C library: its distinct kernels and the driver.
    `conv`: the convolutions' path (`Choices.conv`; None: the default's)."""
    schedule = Schedule.build(outputs)
    plans, absorbed = _fusions(schedule)
    in_place = in_place_concats(schedule, absorbed)
    bodies: dict[str, tuple[str, CStep]] = {}
    steps: list[CStep] = []
    with conv_direct.chosen(conv):
        for node in schedule.nodes:  # one step per node (a scatter's copy and updates are one function)
            k = _fused_step(node, plans, absorbed, in_place) or render_node(node, "@KERNEL@", C, SPECIAL)[0]
            code, step = step_of(k, node, id(node) in absorbed)
            bodies.setdefault(step.name, (code, step))
            steps.append(step)
    symbols = sorted({s for st in steps for s in st.symbols})
    units = build.units(len(bodies))
    # link the GEMM object if it is built, building, or a core is free for it; else (a busy machine,
    # nothing cached) the prelude's GEMMs compiled in the library cost less
    linked = build.object_available(GEMM_OBJECT) or build.spare_core()
    sources = library_source(bodies, units, linked)
    identity = sources[0] if units == 1 else library_source(bodies, 1, linked)[0]
    return CProgram(sources, identity, steps, schedule, symbols, sorted(bodies))


# The prelude's GEMM entry points (a third of a large library's compile) are compiled once per
# machine into an object every library links; a kernel unit calls them as `lum_ext_gemm_*`.
_GEMMS = (("f", "float"), ("d", "double"))
GEMM_OBJECT = "\n".join([PRELUDE, *(
    f"LUM_SHARED void lum_ext_gemm_{n}(int ta, int tb, long long M, long long N, long long K, const {t}* A, "
    f"long long lda, const {t}* B, long long ldb, {t}* C, long long ldc) "
    f"{{ lum_gemm_{n}(ta, tb, M, N, K, A, lda, B, ldb, C, ldc); }}" for n, t in _GEMMS),
    "LUM_SHARED void lum_ext_gemm_fw(int stored, int ta, int tb, long long M, long long N, long long K, const float* A, "
    "long long lda, const float* B, long long ldb, float* C, long long ldc) "
    "{ lum_gemm_fw(stored, ta, tb, M, N, K, A, lda, B, ldb, C, ldc); }"])
GEMM_LINKED = "".join(
    f"LUM_SHARED void lum_ext_gemm_{n}(int, int, long long, long long, long long, const {t}*, long long, "
    f"const {t}*, long long, {t}*, long long);\n#define lum_gemm_{n} lum_ext_gemm_{n}\n" for n, t in _GEMMS) + (
    "LUM_SHARED void lum_ext_gemm_fw(int, int, int, long long, long long, long long, const float*, long long, "
    "const float*, long long, float*, long long);\n#define lum_gemm_fw lum_ext_gemm_fw\n")


build.LINKED["lum_ext_gemm_"] = GEMM_OBJECT


def prepare() -> None:
    """Start building the GEMM object and luminal's SGEMM in the background as a compile begins."""
    spare = build.spare_core()  # looked at once: the GEMM object's compiler, once started, would count against the next
    if spare:
        build.prepare_object(GEMM_OBJECT, spare_core_only=False)
    sgemm.prepare(spare)


# Compile cost in characters of row-loop kernels, to balance the units (gcc 12 -O2)
GEMM_BODY_WEIGHT = 0.4  # a GEMM kernel's text: its operand cases fold away
DRIVER_COST = 5_000  # the driver and wrappers of the first unit
GEMM_SOURCE_COST = 25_000  # the prelude's GEMMs, compiled in the library when not linked


def library_source(bodies: dict[str, tuple[str, CStep]], units: int = 1, linked: bool = True) -> list[str]:
    """The library of the kernels `bodies` (name -> (code, a step running it)) as `units` C
    translation units (the first holds the driver and every kernel calling the prelude's GEMMs,
    which it then compiles once; `linked`: they are the linked object's); the others are dealt
    largest first, each to the smallest unit so far."""
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
