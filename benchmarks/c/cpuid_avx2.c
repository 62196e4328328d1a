/* CPUID as a CPU without AVX-512 answers it, for the libraries this process loads from now on
   (`benchmarks/ort_isa.py`: onnxruntime's MLAS picks its kernels from CPUID once, when it loads,
   and has no variable to choose them).

   Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID, 0; the CPU flag "cpuid_fault") makes the
   CPUID instruction raise SIGSEGV in this thread and every thread it creates afterwards. The
   handler runs the real CPUID with faulting off for that one instruction, clears the AVX-512 and
   AMX feature bits (leaf 7 and its subleaf 1, and XSAVE's AVX-512 and AMX state components of
   leaf 0xD), and steps over the 2-byte instruction. Any other SIGSEGV puts back the handler that
   was there before (the default, or Python's faulthandler) and returns, so the faulting
   instruction runs again under it: a real crash stays a crash. */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define BIT(n) (1u << (n))

static struct sigaction previous;
static volatile long answered;

static void masked(unsigned leaf, unsigned sub, unsigned* a, unsigned* b, unsigned* c, unsigned* d) {
  if (leaf == 7 && sub == 0) {
    /* AVX512 F, DQ, IFMA, PF, ER, CD, BW, VL */
    *b &= ~(BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31));
    /* AVX512 VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ */
    *c &= ~(BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14));
    /* AVX512 4VNNIW, 4FMAPS, VP2INTERSECT, FP16; AMX BF16, TILE, INT8 */
    *d &= ~(BIT(2) | BIT(3) | BIT(8) | BIT(23) | BIT(22) | BIT(24) | BIT(25));
  } else if (leaf == 7 && sub == 1) {
    *a &= ~BIT(5);  /* AVX512_BF16 */
    *d &= ~BIT(19); /* AVX10 */
  } else if (leaf == 0xD && sub == 0) {
    *a &= ~(BIT(5) | BIT(6) | BIT(7) | BIT(17) | BIT(18)); /* opmask, ZMM state; AMX tile state */
  }
}

static void on_segv(int sig, siginfo_t* info, void* raw) {
  (void)sig;
  (void)info;
  greg_t* r = ((ucontext_t*)raw)->uc_mcontext.gregs;
  const unsigned char* ip = (const unsigned char*)r[REG_RIP];
  if (ip[0] == 0x0f && ip[1] == 0xa2) {
    unsigned leaf = (unsigned)r[REG_RAX], sub = (unsigned)r[REG_RCX], a, b, c, d;
    const int saved = errno;
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
    __cpuid_count(leaf, sub, a, b, c, d);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
    errno = saved;
    masked(leaf, sub, &a, &b, &c, &d);
    r[REG_RAX] = a;
    r[REG_RBX] = b;
    r[REG_RCX] = c;
    r[REG_RDX] = d;
    r[REG_RIP] += 2;
    answered++;
    return;
  }
  sigaction(SIGSEGV, &previous, NULL); /* not ours: the instruction faults again, under it */
}

/* 0: CPUID is answered as above from now on (this thread and those it creates); else errno of
   the failed sigaction or arch_prctl (no CPUID faulting on this CPU or kernel), nothing installed */
int lum_mask_avx512(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &previous)) return errno;
  if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0)) {
    const int failed = errno;
    sigaction(SIGSEGV, &previous, NULL);
    return failed;
  }
  return 0;
}

/* leaf 7's EBX as this thread's CPUID gives it now (bit 16: AVX512F) */
unsigned lum_cpuid7_ebx(void) {
  unsigned a, b, c, d;
  __cpuid_count(7, 0, a, b, c, d);
  return b;
}

long lum_cpuid_answered(void) { return answered; }
