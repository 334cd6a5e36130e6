// Calibration microbenchmarks (kernels/validate.py): load latency, launch overhead, the math
// rates of the attention kernels' inner loops and L2's atomic-add throughput. The attention
// kernels themselves are never used to fit the simulator.
#include "cuda_compat.cuh"
#include <mma.h>

// Pointer chase: each load's address comes from the previous load, so time / steps is latency.
extern "C" __global__ void chase(const unsigned* next, unsigned start, int steps, unsigned* out) {
    unsigned i = start;
    for (int s = 0; s < steps; ++s) i = next[i];
    *out = i;
}

extern "C" __global__ void empty() {}

// Scalar FMA rate (flash_fwd.cu, naive.cu): two dependent chains per thread, 4 flops a step.
extern "C" __global__ void fma_loop(float* out, int iters) {
    float a = threadIdx.x, b = 1.0001f, c = 0.5f, d = 0.25f;
    for (int i = 0; i < iters; ++i) {
        a = a * b + c;
        d = d * b + a;
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = a + d;
}

// Tensor-core rate (flash_fwd_wmma.cu): each warp runs 16 x 16 x 16 half MMAs with fp32
// accumulation on fragments held in registers, four independent accumulators as the flash
// kernel's warps have several output fragments in flight; 4 * 2 * 16^3 flops a step.
extern "C" __global__ void wmma_loop(float* out, int iters) {
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[4];
    wmma::fill_fragment(a, __float2half(1e-3f));
    wmma::fill_fragment(b, __float2half(1e-3f));
    for (int j = 0; j < 4; ++j) wmma::fill_fragment(c[j], 0.f);
    for (int i = 0; i < iters; ++i)
        for (int j = 0; j < 4; ++j) wmma::mma_sync(c[j], a, b, c[j]);
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    for (int j = 1; j < 4; ++j)
        for (int e = 0; e < c[0].num_elements; ++e) c[0].x[e] += c[j].x[e];
    wmma::store_matrix_sync(out + (size_t)warp * 256, c[0], 16, wmma::mem_row_major);
}

// L2 atomic-add throughput (flash-attn's dQ accumulation in fp32): every thread adds into
// its own floats with atomics whose result is unused (compiled to RED, which the SM does not
// wait for), a warp into 32 consecutive floats, over a buffer L2 holds; 4 bytes per atomic.
extern "C" __global__ void red_add_loop(float* buf, int n, int iters) {
    const int stride = gridDim.x * blockDim.x;
    for (int i = 0; i < iters; ++i)
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride)
            atomicAdd(buf + j, 1.0f);
}

// Instruction latencies in clocks (kernels/validate.py "latency_cycles"; hbmsim/gpu/issue.py
// cites published values for the shared-load and exp ones): one thread runs a chain whose
// every step needs the one before, timed with clock64. mode 0: FFMA; 1: shared-memory loads
// (a pointer chase around 256 words of dynamic shared memory, 1 KiB the launch asks for);
// 2: MUFU.EX2. cycles[0]: clocks for `steps` steps; out[0] keeps the chain's result live.
extern "C" __global__ void latency_chain(int mode, int steps, float seed, long long* cycles,
                                         float* out) {
    DYNAMIC_SMEM(unsigned, ring);
    for (int i = 0; i < 256; ++i) ring[i] = (i + 1) % 256;
    __syncthreads();
    float x = seed;
    unsigned j = 0;
    const long long t0 = clock64();
    if (mode == 0) {
        for (int s = 0; s < steps; ++s) x = fmaf(x, 1.0001f, 0.5f);
    } else if (mode == 1) {
        for (int s = 0; s < steps; ++s) j = ring[j];
    } else {
        for (int s = 0; s < steps; ++s) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x));
    }
    const long long t1 = clock64();
    cycles[0] = t1 - t0;
    out[0] = x + (float)j;
}
