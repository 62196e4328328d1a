// Hand-written kernels of the kinds luminal's renderer generates. The same text is compiled by
// NVRTC for sm_80/sm_90 (test_nvrtc.py) and run in the CPU emulator (test_emulator.py).
// Launch shapes: blockDim.x a multiple of 32 unless a kernel says otherwise.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over the whole block; every thread gets it. `scratch`: 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // a previous call may still be reading scratch
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_sum(lane < nwarps ? scratch[lane] : 0.0f);
}

// 1. out[i, j] = a[i, j] * b[i, j] + 1 over a (rows, cols) index space. Every operand has its own
// element strides (0 broadcasts), as views do. Grid-stride loop, 64-bit index math.
extern "C" __global__ void ew_mul_add_strided(const float* __restrict__ a, const float* __restrict__ b,
                                              float* __restrict__ out, int rows, int cols,
                                              long long a_s0, long long a_s1, long long b_s0, long long b_s1,
                                              long long o_s0, long long o_s1) {
    const long long total = (long long)rows * cols;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long i = idx / cols, j = idx % cols;
        out[i * o_s0 + j * o_s1] = a[i * a_s0 + j * a_s1] * b[i * b_s0 + j * b_s1] + 1.0f;
    }
}

// 2. Row sums, one block of 256 threads per row: strided partial sums, then a shared-memory tree.
extern "C" __global__ void __launch_bounds__(256) row_sum_tree(const float* __restrict__ x,
                                                               float* __restrict__ out, int cols) {
    __shared__ float partial[256];
    const float* row = x + (long long)blockIdx.x * cols;
    float v = 0.0f;
    for (int c = threadIdx.x; c < cols; c += 256) v += row[c];
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int stride = 128; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// 3. Row maxima, one warp per row (block (32, warps)): warp shuffles only, no shared memory.
extern "C" __global__ void row_max_warp(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) return;  // whole warps leave together, so no shuffle waits for them
    float m = NEG_INF;
    for (int c = threadIdx.x; c < cols; c += 32) m = fmaxf(m, x[(long long)row * cols + c]);
    m = warp_max(m);
    if (threadIdx.x == 0) out[row] = m;
}

// 4. Softmax of each row, one block per row. Pass 1 keeps a running (max, sum) per thread,
// rescaling the sum when the max grows, and merges the pairs across the warp with shuffles and
// across warps through shared memory; pass 2 normalises.
__device__ __forceinline__ void merge_max_sum(float& m, float& s, float m2, float s2) {
    const float top = fmaxf(m, m2);
    s = (m == NEG_INF ? 0.0f : s * expf(m - top)) + (m2 == NEG_INF ? 0.0f : s2 * expf(m2 - top));
    m = top;
}

__device__ __forceinline__ void warp_merge_max_sum(float& m, float& s) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, offset), s2 = __shfl_xor_sync(0xffffffffu, s, offset);
        merge_max_sum(m, s, m2, s2);
    }
}

extern "C" __global__ void softmax_online(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float warp_m[32], warp_s[32];
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = y + (long long)blockIdx.x * cols;
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    float m = NEG_INF, s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) merge_max_sum(m, s, xr[c], 1.0f);
    warp_merge_max_sum(m, s);
    if (lane == 0) {
        warp_m[warp] = m;
        warp_s[warp] = s;
    }
    __syncthreads();
    m = lane < nwarps ? warp_m[lane] : NEG_INF;
    s = lane < nwarps ? warp_s[lane] : 0.0f;
    warp_merge_max_sum(m, s);
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - m) * inv;
}

// 5. C[M, N] = A[M, K] @ B[K, N], row-major, 16x16 shared-memory tiles, ragged edges padded with 0.
#define TILE 16
extern "C" __global__ void matmul_tiled16(const float* __restrict__ A, const float* __restrict__ B,
                                          float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];  // +1: no bank conflicts on the column reads
    const int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int ak = k0 + threadIdx.x, bk = k0 + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[(long long)row * K + ak] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[(long long)bk * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[(long long)row * N + col] = acc;
}

// 6. Global atomics on integer data: a histogram, min and max, a 64-bit count, the sum as float
// (of integers, so exact in any order), a float max by an atomicCAS loop, and the number of
// distinct bins hit (atomicExch on a flag per bin). All results are order-independent.
extern "C" __global__ void int_stats_atomic(const int* __restrict__ v, int n, int bins, unsigned* hist,
                                            int* min_max, unsigned long long* count, float* sum_max,
                                            unsigned* flags, unsigned* bins_hit) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int value = v[i];
        const int bin = ((value % bins) + bins) % bins;
        atomicAdd(&hist[bin], 1u);
        atomicMin(&min_max[0], value);
        atomicMax(&min_max[1], value);
        atomicAdd(count, 1ull);
        atomicAdd(&sum_max[0], (float)value);
        int* max_bits = (int*)&sum_max[1];
        int old = *max_bits;
        while (__int_as_float(old) < (float)value) {
            const int assumed = old;
            old = atomicCAS(max_bits, assumed, __float_as_int((float)value));
            if (old == assumed) break;
        }
        if (atomicExch(&flags[bin], 1u) == 0u) atomicAdd(bins_hit, 1u);
    }
}

// 7. Per warp: how many elements are positive (__ballot_sync + __popc), and whether any / all are.
// Lanes past n vote "false" but stay for the vote.
extern "C" __global__ void warp_votes(const float* __restrict__ x, int n, int* __restrict__ positives,
                                      int* __restrict__ any_all) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, warp = i >> 5;
    const bool positive = i < n && x[i] > 0.0f;
    const unsigned ballot = __ballot_sync(0xffffffffu, positive);
    const int any = __any_sync(0xffffffffu, positive), all = __all_sync(0xffffffffu, positive);
    if ((threadIdx.x & 31u) == 0) {
        positives[warp] = __popc(ballot);
        any_all[2 * warp] = any;
        any_all[2 * warp + 1] = all;
    }
}

// 8. L2 norm of each row, one block per row of any multiple-of-32 size; the per-warp partials live
// in dynamic shared memory (blockDim.x / 32 floats, given at launch).
extern "C" __global__ void row_norm_dynamic_smem(const float* __restrict__ x, float* __restrict__ out, int cols) {
    extern __shared__ float warp_partial[];
    const float* row = x + (long long)blockIdx.x * cols;
    float v = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) v += row[c] * row[c];
    v = warp_sum(v);
    if ((threadIdx.x & 31u) == 0) warp_partial[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (unsigned w = 0; w < (blockDim.x >> 5); ++w) total += warp_partial[w];
        out[blockIdx.x] = sqrtf(total);
    }
}

// 9. RMSNorm of f16 rows with an f16 weight: f32 accumulation, f16 result. One block per row.
extern "C" __global__ void rmsnorm_f16(const __half* __restrict__ x, const __half* __restrict__ weight,
                                       __half* __restrict__ y, int cols, float eps) {
    __shared__ float scratch[32];
    const __half* xr = x + (long long)blockIdx.x * cols;
    __half* yr = y + (long long)blockIdx.x * cols;
    float squares = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = __half2float(xr[c]);
        squares += v * v;
    }
    const float scale = rsqrtf(block_sum(squares, scratch) / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = __float2half(__half2float(xr[c]) * scale * __half2float(weight[c]));
}

// 10. y = A @ x for bf16 A[rows, cols] and x[cols]: one warp per row (block (32, warps)),
// f32 accumulation, bf16 result.
extern "C" __global__ void matvec_bf16(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ x,
                                       __nv_bfloat16* __restrict__ y, int rows, int cols) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) return;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += 32)
        acc += __bfloat162float(A[(long long)row * cols + c]) * __bfloat162float(x[c]);
    acc = warp_sum(acc);
    if (threadIdx.x == 0) y[row] = __float2bfloat16(acc);
}

// 11. f32 -> f16 and bf16 (round to nearest even) and back: checks the conversions bit for bit.
extern "C" __global__ void cast_f32_f16_bf16(const float* __restrict__ x, __half* __restrict__ h,
                                             __nv_bfloat16* __restrict__ b, float* __restrict__ back, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    h[i] = __float2half_rn(x[i]);
    b[i] = __float2bfloat16_rn(x[i]);
    back[2 * i] = __half2float(h[i]);
    back[2 * i + 1] = __bfloat162float(b[i]);
}

// 12. out[i] = x[i] * scale. Under -ftz=true (the flag NVRTC gets here) denormal inputs and
// results are flushed to zero; the emulator does the same.
extern "C" __global__ void scale_ftz(const float* __restrict__ x, float* __restrict__ out, float scale, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * scale;
}
