// cuda_emu.h -- compile CUDA C kernels with g++ and run them on the CPU, to test their semantics.
//
// Model (luminal/kernels/emulator/__init__.py is the Python side):
//   * blocks of a grid run one after another on the calling OS thread;
//   * the threads of a block are user-space fibers: a fiber runs until __syncthreads(),
//     __syncwarp(), a shuffle or a vote, then yields to the block scheduler, which releases a
//     barrier once every thread that must reach it waits at it;
//   * bugs become errors, not hangs: barrier divergence (threads that exited, or wait at a
//     different __syncthreads), warp-level ops whose mask names exited lanes, deadlock;
//   * __shared__ memory (static and extern) is filled with 0xFF bytes (NaN for floats) at the start
//     of every block, so reading shared memory nobody wrote shows up as NaN in the results;
//   * shuffles that read a lane outside the mask (undefined on the GPU) get the same poison;
//   * the order in which fibers run between barriers is selectable (CUEMU_SCHEDULE=0 forward,
//     1 reverse, 2 shuffled with a fixed seed): a result that changes with it is a data race;
//   * f32 denormals are flushed (MXCSR FTZ+DAZ) like `-ftz=true`, unless built with CUEMU_FTZ=0.
//
// An error is recorded in the emulator state and the launch returns non-zero (the Python side
// raises). Memory errors are not caught here: build with -fsanitize=address,undefined for that.
//
// Not emulated: concurrency between blocks (a block spinning on a flag set by another block hangs),
// the memory model, FMA contraction and GPU ulp of math functions, textures, cooperative groups,
// tensor cores, inline PTX. One launch at a time per loaded library (the state is a global).
//
// Every build compiles this header, so it stays lean: no <random>, <string> or <algorithm>
// (error messages are formatted with snprintf), which halves the fixed cost of a build.
#pragma once
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>  // float overloads (expf, fmaxf, ...) in the global namespace, as in CUDA
#include <type_traits>
#include <utility>
#include <vector>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#ifndef CUEMU_FAST_SWITCH  // hand-written context switch: ~10x faster than swapcontext
#if defined(__x86_64__)
#define CUEMU_FAST_SWITCH 1
#else
#define CUEMU_FAST_SWITCH 0
#endif
#endif
#ifndef CUEMU_FTZ
#define CUEMU_FTZ 1
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/asan_interface.h>
#else
#define CUEMU_ASAN 0
#endif
#define __CUEMU__ 1
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 900  // the architecture whose semantics kernels may select with #if
#endif

// ------------------------------------------------------------------ types ---------------
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;
inline dim3 make_uint3(unsigned x, unsigned y, unsigned z) { return dim3(x, y, z); }

namespace cuemu {

enum class State : unsigned char { READY, AT_BARRIER, AT_WARP_SYNC, DONE };
enum class WarpOp : unsigned char { SYNCWARP, SHUFFLE, VOTE };

struct Fiber {
#if CUEMU_FAST_SWITCH
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
  char* stack = nullptr;
  State state = State::DONE;
  WarpOp warp_op = WarpOp::SYNCWARP;
  unsigned warp_mask = 0;
  int barrier_line = 0;  // source line of the __syncthreads() it waits at
  unsigned linear = 0;   // threadIdx flattened, x fastest
  dim3 tid;
};

struct Ctx {
  std::vector<Fiber> fibers;
  std::vector<unsigned> order;
  std::vector<uint64_t> warp_slots;  // one 8-byte slot per thread, for shuffles and votes
  unsigned char* dyn_smem = nullptr;
  size_t dyn_smem_size = 0, stack_size = 0;
  unsigned nthreads = 0;
  Fiber* cur = nullptr;
#if CUEMU_FAST_SWITCH
  void* sched_sp = nullptr;
#else
  ucontext_t sched_uc;
#endif
  void* asan_fake_stack = nullptr;
  const void* sched_stack_bottom = nullptr;
  size_t sched_stack_size = 0;
  dim3 blockIdx, blockDim, gridDim;
  void (*body)(void*) = nullptr;
  void* body_arg = nullptr;
  int schedule_override = -1;  // set by cuemu_set_schedule(); -1: read CUEMU_SCHEDULE per launch
  int schedule = 0;
  uint64_t rng = 0;    // splitmix64 state of the shuffled schedule
  char error[1024] = "";  // the first error of the current launch; empty: none
  unsigned long long switches = 0;
};

inline Ctx g_ctx;  // hidden visibility + -fno-gnu-unique: every loaded library has its own
inline Ctx& ctx() { return g_ctx; }

inline bool failed() { return ctx().error[0] != 0; }

// Keeps the first error of a launch; later ones are usually consequences of it.
__attribute__((format(printf, 1, 2))) inline void record_error(const char* format, ...) {
  Ctx& c = ctx();
  if (c.error[0]) return;
  va_list args;
  va_start(args, format);
  std::vsnprintf(c.error, sizeof c.error, format, args);
  va_end(args);
}
#define CUEMU_BLOCK_FMT "block (%u,%u,%u)"
#define CUEMU_BLOCK_ARGS ::cuemu::ctx().blockIdx.x, ::cuemu::ctx().blockIdx.y, ::cuemu::ctx().blockIdx.z

// ------------------------------------------------------------------ context switching ---
#if CUEMU_FAST_SWITCH
// x86-64 SysV: save callee-saved registers, MXCSR and the x87 control word on the old stack, swap
// rsp, restore from the new stack. `.hidden`: each library keeps its own copy.
extern "C" __attribute__((visibility("hidden"))) void cuemu_switch_stack(void** save_sp, void* load_sp);
asm(R"(
.text
.globl cuemu_switch_stack
.hidden cuemu_switch_stack
.type cuemu_switch_stack,@function
cuemu_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size cuemu_switch_stack,.-cuemu_switch_stack
)");
#endif

inline void to_scheduler() {  // called on a fiber's stack
  Ctx& c = ctx();
  ++c.switches;
#if CUEMU_ASAN
  void* fake = nullptr;  // a finished fiber passes nullptr: ASan frees its fake stack
  __sanitizer_start_switch_fiber(c.cur->state == State::DONE ? nullptr : &fake, c.sched_stack_bottom,
                                 c.sched_stack_size);
#endif
#if CUEMU_FAST_SWITCH
  cuemu_switch_stack(&c.cur->sp, c.sched_sp);
#else
  swapcontext(&c.cur->uc, &c.sched_uc);
#endif
#if CUEMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

inline void run_fiber(Fiber& f) {  // called on the scheduler's stack
  Ctx& c = ctx();
  c.cur = &f;
  ++c.switches;
#if CUEMU_ASAN
  __sanitizer_start_switch_fiber(&c.asan_fake_stack, f.stack, c.stack_size);
#endif
#if CUEMU_FAST_SWITCH
  cuemu_switch_stack(&c.sched_sp, f.sp);
#else
  swapcontext(&c.sched_uc, &f.uc);
#endif
#if CUEMU_ASAN
  __sanitizer_finish_switch_fiber(c.asan_fake_stack, nullptr, nullptr);
#endif
}

[[noreturn]] inline void fiber_entry() {
  Ctx& c = ctx();
#if CUEMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &c.sched_stack_bottom, &c.sched_stack_size);
#endif
  c.body(c.body_arg);
  c.cur->state = State::DONE;
  to_scheduler();  // a DONE fiber is never resumed
  __builtin_trap();
}

// A fiber that detects an error records it and parks for good; the scheduler abandons the block
// (the next launch re-initialises every fiber, so abandoned stacks are harmless).
[[noreturn]] inline void fiber_fail(const char* what) {
  const Fiber& f = *ctx().cur;
  record_error("%s in " CUEMU_BLOCK_FMT ", thread (%u,%u,%u)", what, CUEMU_BLOCK_ARGS, f.tid.x, f.tid.y, f.tid.z);
  ctx().cur->state = State::DONE;
  to_scheduler();
  __builtin_trap();
}

inline void prepare_fiber(Fiber& f) {
  Ctx& c = ctx();
  f.state = State::READY;
#if CUEMU_ASAN
  __asan_unpoison_memory_region(f.stack, c.stack_size);  // frames of an abandoned previous life
#endif
#if CUEMU_FAST_SWITCH
  // initial frame, popped by cuemu_switch_stack: [mxcsr|x87cw][r15..rbp = 0][ret -> fiber_entry][pad]
  uintptr_t top = (uintptr_t)(f.stack + c.stack_size) & ~(uintptr_t)15;
  void** sp = (void**)top;
  *--sp = nullptr;  // keeps rsp = 8 mod 16 at fiber_entry, as after a call
  *--sp = (void*)&fiber_entry;
  for (int i = 0; i < 6; ++i) *--sp = nullptr;
  --sp;
  uint32_t mxcsr;
  uint16_t x87cw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(x87cw));
  std::memcpy((char*)sp, &mxcsr, 4);
  std::memcpy((char*)sp + 4, &x87cw, 2);
  f.sp = sp;
#else
  getcontext(&f.uc);
  f.uc.uc_stack.ss_sp = f.stack;
  f.uc.uc_stack.ss_size = c.stack_size;
  f.uc.uc_link = nullptr;
  makecontext(&f.uc, (void (*)())fiber_entry, 0);
#endif
}

// ------------------------------------------------------------------ barriers -----------
inline void syncthreads(int line) {
  Fiber& f = *ctx().cur;
  f.barrier_line = line;
  f.state = State::AT_BARRIER;
  to_scheduler();
}

inline void warp_sync(unsigned mask, WarpOp op) {
  Fiber& f = *ctx().cur;
  if (!(mask >> (f.linear & 31u) & 1u)) {
    char what[96];
    std::snprintf(what, sizeof what, "warp-level operation with mask 0x%08x, which does not name the calling lane %u",
                  mask, f.linear & 31u);
    fiber_fail(what);
  }
  f.warp_mask = mask;
  f.warp_op = op;
  f.state = State::AT_WARP_SYNC;
  to_scheduler();
}

// Releases the lanes of warp-level ops whose whole mask has arrived. Returns -1 on error, else
// the number of lanes released. Lanes of the mask beyond the block's last thread are ignored.
inline int release_warp_syncs() {
  Ctx& c = ctx();
  int released = 0;
  for (unsigned lo = 0; lo < c.nthreads; lo += 32) {
    const unsigned hi = c.nthreads < lo + 32 ? c.nthreads : lo + 32;
    unsigned ready = 0;
    for (unsigned i = lo; i < hi; ++i) {
      const Fiber& f = c.fibers[i];
      if (f.state != State::AT_WARP_SYNC) continue;
      bool all_here = true;
      for (unsigned l = 0; l < hi - lo; ++l) {
        if (!(f.warp_mask >> l & 1u)) continue;
        const Fiber& g = c.fibers[lo + l];
        if (g.state == State::DONE) {
          record_error("warp-level sync/shuffle/vote in " CUEMU_BLOCK_FMT ", warp %u: its mask names lane %u, "
                       "which exited without joining (undefined behaviour on the GPU)", CUEMU_BLOCK_ARGS, lo / 32, l);
          return -1;
        }
        if (g.state != State::AT_WARP_SYNC) all_here = false;
        else if (g.warp_op != f.warp_op) {
          record_error("lanes of warp %u in " CUEMU_BLOCK_FMT " meet at different warp-level operations "
                       "(shuffle/vote/__syncwarp) under one mask", lo / 32, CUEMU_BLOCK_ARGS);
          return -1;
        }
      }
      if (all_here) ready |= 1u << (i - lo);
    }
    for (unsigned l = 0; l < 32; ++l)
      if (ready >> l & 1u) c.fibers[lo + l].state = State::READY, ++released;
  }
  return released;
}

inline uint64_t next_random() {  // splitmix64
  uint64_t z = (ctx().rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Runs one block to completion. Returns false (with ctx().error set) on a bug or deadlock.
inline bool run_block() {
  Ctx& c = ctx();
  const unsigned n = c.nthreads;
  c.order.resize(n);
  for (unsigned i = 0; i < n; ++i) c.order[i] = c.schedule == 1 ? n - 1 - i : i;
  for (;;) {
    if (c.schedule == 2)  // Fisher-Yates, a new order every round
      for (unsigned i = n - 1; i > 0; --i) std::swap(c.order[i], c.order[next_random() % (i + 1)]);
    for (unsigned i : c.order)
      if (c.fibers[i].state == State::READY) {
        run_fiber(c.fibers[i]);
        if (failed()) return false;
      }
    unsigned done = 0, at_barrier = 0;
    for (unsigned i = 0; i < n; ++i) {
      done += c.fibers[i].state == State::DONE;
      at_barrier += c.fibers[i].state == State::AT_BARRIER;
    }
    if (done == n) return true;
    const int released = release_warp_syncs();
    if (released < 0) return false;
    if (released > 0) continue;
    if (at_barrier && at_barrier + done == n) {
      if (done) {
        record_error("__syncthreads() reached by %u of %u threads of " CUEMU_BLOCK_FMT
                     "; %u had exited (barrier in divergent code)", at_barrier, n, CUEMU_BLOCK_ARGS, done);
        return false;
      }
      for (unsigned i = 1; i < n; ++i)
        if (c.fibers[i].barrier_line != c.fibers[0].barrier_line) {
          record_error("threads of " CUEMU_BLOCK_FMT " wait at different __syncthreads() (line %d vs line %d): "
                       "barrier in divergent code", CUEMU_BLOCK_ARGS, c.fibers[0].barrier_line,
                       c.fibers[i].barrier_line);
          return false;
        }
      for (unsigned i = 0; i < n; ++i) c.fibers[i].state = State::READY;
      continue;
    }
    record_error("deadlock in " CUEMU_BLOCK_FMT ": %u threads wait at __syncthreads(), %u at a warp-level sync "
                 "whose lanes never all arrive, %u exited", CUEMU_BLOCK_ARGS, at_barrier, n - done - at_barrier, done);
    return false;
  }
}

// ------------------------------------------------------------------ launch -------------
struct SharedSection { char* begin; char* end; size_t size() const { return begin && end ? end - begin : 0; } };

template <class... A, size_t... I>
inline void call_kernel(void (*k)(A...), void** args, std::index_sequence<I...>) {
  k(*reinterpret_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(args[I])...);
}
template <class... A> struct Launch { void (*kernel)(A...); void** args; };
template <class... A> inline void trampoline(void* p) {
  auto* l = static_cast<Launch<A...>*>(p);
  call_kernel(l->kernel, l->args, std::index_sequence_for<A...>{});
}

constexpr size_t kMaxSharedBytes = 227 * 1024;  // sm_90's per-block limit (opt-in above 48 KiB)

inline bool allocate_fibers(unsigned n) {
  Ctx& c = ctx();
  const char* env = std::getenv("CUEMU_STACK_KB");
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t want = (env ? std::strtoul(env, nullptr, 10) : (CUEMU_ASAN ? 256 : 64)) * 1024;
  want = (want + page - 1) / page * page;
  if (c.fibers.size() >= n && c.stack_size == want) return true;
  for (Fiber& f : c.fibers)
    if (f.stack) munmap(f.stack - page, c.stack_size + page);
  c.fibers.assign(n, Fiber());
  c.stack_size = want;
  for (Fiber& f : c.fibers) {
    // a PROT_NONE guard page below each stack: an overflow faults instead of corrupting a neighbour
    void* m = mmap(nullptr, want + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) { c.fibers.clear(); return false; }
    mprotect(m, page, PROT_NONE);
    f.stack = static_cast<char*>(m) + page;
  }
  return true;
}

inline void release_fibers() {
  Ctx& c = ctx();
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (Fiber& f : c.fibers)
    if (f.stack) munmap(f.stack - page, c.stack_size + page);
  c.fibers.clear();
}

inline int launch_blocks(const SharedSection (&shared)[2], dim3 grid, dim3 block, size_t dyn_smem) {
  Ctx& c = ctx();
  c.nthreads = block.x * block.y * block.z;
  if (!allocate_fibers(c.nthreads)) {
    record_error("mmap of fiber stacks failed");
    return 1;
  }
  c.warp_slots.assign((c.nthreads + 31) / 32 * 32, 0);
  if (dyn_smem > c.dyn_smem_size) {
    std::free(c.dyn_smem);
    c.dyn_smem = static_cast<unsigned char*>(std::aligned_alloc(128, (dyn_smem + 127) / 128 * 128));
    c.dyn_smem_size = dyn_smem;
  }
  c.gridDim = grid;
  c.blockDim = block;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        c.blockIdx = dim3(bx, by, bz);
        for (const SharedSection& s : shared)
          if (s.size()) std::memset(s.begin, 0xFF, s.size());
        if (dyn_smem) std::memset(c.dyn_smem, 0xFF, dyn_smem);
        for (unsigned t = 0; t < c.nthreads; ++t) {
          Fiber& f = c.fibers[t];
          f.linear = t;
          f.tid = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
          prepare_fiber(f);
        }
        if (!run_block()) return 2;
      }
  return 0;
}

// shared[0]: the kernel's own __shared__ variables, shared[1]: those of helpers before any kernel
template <class... A>
inline int launch(void (*kernel)(A...), SharedSection own, SharedSection common, dim3 grid, dim3 block,
                  size_t dyn_smem, void** args) {
  Ctx& c = ctx();
  c.error[0] = 0;
  const unsigned long long nthreads = (unsigned long long)block.x * block.y * block.z;
  if (!nthreads || nthreads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    record_error("invalid block (%u,%u,%u): at most 1024 threads, blockDim.z <= 64", block.x, block.y, block.z);
  else if (!grid.x || !grid.y || !grid.z || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
    record_error("invalid grid (%u,%u,%u)", grid.x, grid.y, grid.z);
  else if (own.size() + common.size() + dyn_smem > kMaxSharedBytes)
    record_error("shared memory %zu static + %zu dynamic bytes exceeds %zu", own.size() + common.size(), dyn_smem,
                 kMaxSharedBytes);
  if (failed()) return 1;
  const char* env = std::getenv("CUEMU_SCHEDULE");
  c.schedule = c.schedule_override >= 0 ? c.schedule_override : env ? std::atoi(env) : 0;
  c.rng = 12345;  // the shuffled schedule is the same on every run
  Launch<A...> l{kernel, args};
  c.body = &trampoline<A...>;
  c.body_arg = &l;
#if defined(__x86_64__)
  const unsigned saved_mxcsr = _mm_getcsr();
  if (CUEMU_FTZ) _mm_setcsr(saved_mxcsr | 0x8040);  // FTZ | DAZ; fibers inherit it at creation
#endif
  const SharedSection sections[2] = {own, common};
  const int rc = launch_blocks(sections, grid, block, dyn_smem);
#if defined(__x86_64__)
  _mm_setcsr(saved_mxcsr);
#endif
  return rc;
}

inline void* dyn_smem() { return ctx().dyn_smem; }

// "[with A = {const float*, float*, int}]": the Python side checks argument types against it
template <class... A> inline const char* signature_of(void (*)(A...)) { return __PRETTY_FUNCTION__; }

// ------------------------------------------------------------------ warp-level ops -----
inline unsigned lane_id() { return ctx().cur->linear & 31u; }

template <class T> inline T shuffle(unsigned mask, T value, unsigned src_lane) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move at most 8 bytes");
  Ctx& c = ctx();
  const unsigned self = c.cur->linear, base = self & ~31u;
  uint64_t raw = 0;
  std::memcpy(&raw, &value, sizeof(T));
  c.warp_slots[self] = raw;
  warp_sync(mask, WarpOp::SHUFFLE);  // every lane of the mask has written its slot
  T result;
  if ((mask >> src_lane & 1u) && base + src_lane < c.nthreads) std::memcpy(&result, &c.warp_slots[base + src_lane], sizeof(T));
  else std::memset(&result, 0xFF, sizeof(T));  // source lane not in the mask: undefined on the GPU
  warp_sync(mask, WarpOp::SHUFFLE);  // every lane has read before anyone writes again
  return result;
}

inline unsigned ballot(unsigned mask, bool predicate) {
  Ctx& c = ctx();
  const unsigned base = c.cur->linear & ~31u;
  c.warp_slots[c.cur->linear] = predicate;
  warp_sync(mask, WarpOp::VOTE);
  unsigned bits = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && base + l < c.nthreads && c.warp_slots[base + l]) bits |= 1u << l;
  warp_sync(mask, WarpOp::VOTE);
  return bits;
}

inline unsigned active_lanes(unsigned mask) {  // lanes of the mask that exist in this block
  const unsigned base = ctx().cur->linear & ~31u, n = ctx().nthreads;
  return n - base >= 32 ? mask : mask & ((1u << (n - base)) - 1u);
}

}  // namespace cuemu

// ------------------------------------------------------------------ CUDA C surface -----
#define __global__
#define __device__
#define __host__
#define __noinline__ __attribute__((noinline))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict
#define __constant__ static
// Static shared variables live in a named section, poisoned at every block start. The build puts
// each kernel's variables in a section of its own (cuemu_smem_<kernel>) by redefining __shared__.
#define CUEMU_SHARED_IN(name) __attribute__((section(#name))) static
#define __shared__ CUEMU_SHARED_IN(cuemu_smem)
#define threadIdx (::cuemu::ctx().cur->tid)
#define blockIdx (::cuemu::ctx().blockIdx)
#define blockDim (::cuemu::ctx().blockDim)
#define gridDim (::cuemu::ctx().gridDim)
#define warpSize 32
#define __syncthreads() ::cuemu::syncthreads(__LINE__)
#define __threadfence() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define __threadfence_block() __atomic_thread_fence(__ATOMIC_SEQ_CST)

inline void __syncwarp(unsigned mask = 0xffffffffu) { ::cuemu::warp_sync(mask, ::cuemu::WarpOp::SYNCWARP); }
inline unsigned __activemask() {
  unsigned live = 0, base = ::cuemu::ctx().cur->linear & ~31u;
  for (unsigned l = 0; l < 32 && base + l < ::cuemu::ctx().nthreads; ++l)
    if (::cuemu::ctx().fibers[base + l].state != ::cuemu::State::DONE) live |= 1u << l;
  return live;
}
[[noreturn]] inline void __trap() { ::cuemu::fiber_fail("__trap()"); }

// Shuffles: `width` splits the warp into segments; a source outside the segment means "self".
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const unsigned lane = ::cuemu::lane_id(), seg = lane & ~(unsigned)(width - 1);
  return ::cuemu::shuffle(mask, v, seg + ((unsigned)src & (unsigned)(width - 1)));
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const unsigned lane = ::cuemu::lane_id(), seg = lane & ~(unsigned)(width - 1);
  return ::cuemu::shuffle(mask, v, lane + delta < seg + (unsigned)width ? lane + delta : lane);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const unsigned lane = ::cuemu::lane_id(), seg = lane & ~(unsigned)(width - 1);
  return ::cuemu::shuffle(mask, v, lane >= seg + delta ? lane - delta : lane);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const unsigned lane = ::cuemu::lane_id(), seg = lane & ~(unsigned)(width - 1), src = lane ^ (unsigned)lane_mask;
  return ::cuemu::shuffle(mask, v, src >= seg && src < seg + (unsigned)width ? src : lane);
}
inline unsigned __ballot_sync(unsigned mask, int p) { return ::cuemu::ballot(mask, p != 0); }
inline int __any_sync(unsigned mask, int p) { return ::cuemu::ballot(mask, p != 0) != 0; }
inline int __all_sync(unsigned mask, int p) {
  return ::cuemu::ballot(mask, p != 0) == ::cuemu::active_lanes(mask);
}

// Atomics: all fibers share one OS thread and switch only at barriers, so a plain
// read-modify-write is atomic. The value parameter is non-deduced, as with CUDA's overloads.
template <class T> using cuemu_same_t = std::type_identity_t<T>;
// Integers wrap as the hardware's atomics do: in their unsigned type (signed overflow is undefined in C++).
template <class T> inline T cuemu_wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) return (T)((std::make_unsigned_t<T>)a + (std::make_unsigned_t<T>)b);
  else return a + b;
}
template <class T> inline T cuemu_wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) return (T)((std::make_unsigned_t<T>)a - (std::make_unsigned_t<T>)b);
  else return a - b;
}
template <class T> inline T atomicAdd(T* p, cuemu_same_t<T> v) { T old = *p; *p = cuemu_wrap_add(old, v); return old; }
template <class T> inline T atomicSub(T* p, cuemu_same_t<T> v) { T old = *p; *p = cuemu_wrap_sub(old, v); return old; }
template <class T> inline T atomicExch(T* p, cuemu_same_t<T> v) { T old = *p; *p = v; return old; }
template <class T> inline T atomicMax(T* p, cuemu_same_t<T> v) { T old = *p; if (old < v) *p = v; return old; }
template <class T> inline T atomicMin(T* p, cuemu_same_t<T> v) { T old = *p; if (v < old) *p = v; return old; }
template <class T> inline T atomicAnd(T* p, cuemu_same_t<T> v) { T old = *p; *p = old & v; return old; }
template <class T> inline T atomicOr(T* p, cuemu_same_t<T> v) { T old = *p; *p = old | v; return old; }
template <class T> inline T atomicXor(T* p, cuemu_same_t<T> v) { T old = *p; *p = old ^ v; return old; }
template <class T> inline T atomicCAS(T* p, cuemu_same_t<T> cmp, cuemu_same_t<T> v) {
  T old = *p;
  if (old == cmp) *p = v;
  return old;
}
inline unsigned atomicInc(unsigned* p, unsigned v) { unsigned old = *p; *p = old >= v ? 0 : old + 1; return old; }
inline unsigned atomicDec(unsigned* p, unsigned v) { unsigned old = *p; *p = (old == 0 || old > v) ? v : old - 1; return old; }

#include "cuemu_math.h"

// One ctypes-callable entry point per kernel, with cuLaunchKernel-style void** arguments; the
// build appends CUEMU_EXPORT(k) for every kernel. Section bounds come from the linker.
#define CUEMU_EXPORT(k)                                                                                   \
  extern "C" __attribute__((weak, visibility("hidden"))) char __start_cuemu_smem_##k[], __stop_cuemu_smem_##k[]; \
  extern "C" __attribute__((visibility("default"))) int cuemu_launch_##k(                                 \
      unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, size_t smem, void** args) { \
    return ::cuemu::launch(k, {__start_cuemu_smem_##k, __stop_cuemu_smem_##k},                            \
                           {__start_cuemu_smem, __stop_cuemu_smem}, dim3(gx, gy, gz), dim3(bx, by, bz), smem, args); \
  }                                                                                                       \
  extern "C" __attribute__((visibility("default"))) const char* cuemu_signature_##k() {                  \
    return ::cuemu::signature_of(k);                                                                      \
  }                                                                                                       \
  extern "C" __attribute__((visibility("default"))) size_t cuemu_static_smem_##k() {                     \
    return ::cuemu::SharedSection{__start_cuemu_smem_##k, __stop_cuemu_smem_##k}.size();                  \
  }

extern "C" __attribute__((weak, visibility("hidden"))) char __start_cuemu_smem[], __stop_cuemu_smem[];
// not inline: an unused inline function would not be emitted, hence not exported
extern "C" __attribute__((visibility("default"))) const char* cuemu_last_error() { return ::cuemu::ctx().error; }
extern "C" __attribute__((visibility("default"))) unsigned long long cuemu_switches() { return ::cuemu::ctx().switches; }
extern "C" __attribute__((visibility("default"))) void cuemu_set_schedule(int s) { ::cuemu::ctx().schedule_override = s; }
// unmap the fiber stacks (two memory maps per thread, kept between launches); the next launch maps them again
extern "C" __attribute__((visibility("default"))) void cuemu_release_fibers() { ::cuemu::release_fibers(); }
