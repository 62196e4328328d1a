// Deliberately broken kernels: the emulator must flag each one. Self-contained (no helpers), so the
// file can be appended to sample_kernels.cu into one translation unit.

// Missing __syncthreads between the steps of a shared-memory tree: a race whose result depends
// on the order threads run in.
extern "C" __global__ void bug_race(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float partial[256];
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[threadIdx.x] = i < (unsigned)n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];  // no barrier
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// Early return before __syncthreads: the last, partial block's surplus threads never arrive.
extern "C" __global__ void bug_divergent_barrier(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float tile[256];
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned)n) return;
    tile[threadIdx.x] = x[i];
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = tile[0] + tile[1];
}

// __syncthreads in both branches of a divergent if/else: two different barriers.
extern "C" __global__ void bug_split_barrier(const float* __restrict__ x, float* __restrict__ y, int n) {
    __shared__ float tile[256];
    tile[threadIdx.x] = x[threadIdx.x];
    if (threadIdx.x < 128) {
        __syncthreads();
        y[threadIdx.x] = tile[threadIdx.x + 128];
    } else {
        __syncthreads();
        y[threadIdx.x] = tile[threadIdx.x - 128];
    }
}

// Reads shared memory that only half the block wrote: the other half reads poison (NaN).
extern "C" __global__ void bug_uninit_shared(const float* __restrict__ x, float* __restrict__ y, int n) {
    __shared__ float tile[256];
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x < blockDim.x / 2) tile[threadIdx.x] = x[i];
    __syncthreads();
    if (i < (unsigned)n) y[i] = tile[blockDim.x - 1 - threadIdx.x];
}

// A full-mask shuffle after half of the warp has returned.
extern "C" __global__ void bug_divergent_shfl(const float* __restrict__ x, float* __restrict__ y, int n) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if ((threadIdx.x & 31u) >= 16) return;
    y[i] = x[i] + __shfl_down_sync(0xffffffffu, x[i], 8);
}

// Lane 0 waits at __syncthreads while the rest of its warp waits for it in a shuffle.
extern "C" __global__ void bug_deadlock(const float* __restrict__ x, float* __restrict__ y, int n) {
    float v = x[threadIdx.x];
    if (threadIdx.x == 0) __syncthreads();
    else v = __shfl_sync(0xffffffffu, v, 0);
    y[threadIdx.x] = v;
}

// A full-warp shuffle reduction in a 48-thread block: warp 1 has 16 lanes, so lanes read values
// from lanes that do not exist (undefined on the GPU, poison here).
extern "C" __global__ void bug_partial_warp_shfl(const float* __restrict__ x, float* __restrict__ y, int n) {
    float v = x[threadIdx.x];
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31u) == 0) y[threadIdx.x >> 5] = v;
}

// No bounds check: the last block reads and writes past the end of the arrays (ASan's job).
extern "C" __global__ void bug_oob(const float* __restrict__ x, float* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 2.0f * x[i];
}
