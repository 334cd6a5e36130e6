// Which of an SM's pipes run while its tensor cores run asynchronous warpgroup MMA (wgmma):
// the property the simulator's `Hardware.async_mma_overlaps` holds (hbmsim/pipes.py), which no
// datasheet gives. Hopper only (sm_90a: wgmma). Never an attention kernel: three warpgroups of
// one CTA per SM each run one loop, chosen by `mode`'s bits, so the host times each loop alone
// and two together; two loops that overlap take the longer one's time, two that exclude each
// other the sum (kernels/validate.py `pipes_overlap`).
//   bit 0: warpgroup 0 runs wgmma m64n64k16 (fp16 in, fp32 accumulate, both operands from
//          shared memory), 16 per commit group, as FlashAttention-3's consumers issue them;
//   bit 1: warpgroup 1 runs ex2.approx.ftz.f32 (the SFU: the softmax's exponentials) on 8
//          independent registers per thread;
//   bit 2: warpgroup 2 runs FFMA (the FP32 pipe: the softmax's other work) on 8 independent
//          chains per thread.
// The operands are whatever shared memory holds: only the time is read.
#include <cuda_fp16.h>

#define PROBE_THREADS 384

__device__ __forceinline__ unsigned long long smem_desc(const void* p) {
    // matrix descriptor: start address >> 4 (bits 0-13), leading byte offset 128 >> 4
    // (bits 16-29), stride byte offset 256 >> 4 (bits 32-45), no swizzle (bits 62-63 = 0)
    unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
    return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (static_cast<unsigned long long>(128 >> 4) << 16) |
           (static_cast<unsigned long long>(256 >> 4) << 32);
}

__device__ __forceinline__ void wgmma_64x64x16(float (&d)[32], unsigned long long a, unsigned long long b) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, 1, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
          "+f"(d[31])
        : "l"(a), "l"(b));
}

extern "C" __global__ void __launch_bounds__(PROBE_THREADS, 1)
    pipes_probe(float* out, int mode, int mma_iters, int ex2_iters, int fma_iters) {
    __shared__ __align__(1024) __half tiles[2][64 * 16];  // A (64 x 16) and B (64 x 16)
    const int wg = threadIdx.x / 128;
    float acc = 0.f;
    if (wg == 0 && (mode & 1)) {
        float d[32];
        for (int i = 0; i < 32; ++i) d[i] = 0.f;
        const unsigned long long a = smem_desc(tiles[0]), b = smem_desc(tiles[1]);
        for (int it = 0; it < mma_iters; ++it) {
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
            for (int k = 0; k < 16; ++k) wgmma_64x64x16(d, a, b);
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        }
        for (int i = 0; i < 32; ++i) acc += d[i];
    } else if (wg == 1 && (mode & 2)) {
        float x[8];
        for (int i = 0; i < 8; ++i) x[i] = -1e-3f * (threadIdx.x + i);
        for (int it = 0; it < ex2_iters; ++it) {
            for (int i = 0; i < 8; ++i) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[i]));
        }
        for (int i = 0; i < 8; ++i) acc += x[i];
    } else if (wg == 2 && (mode & 4)) {
        float x[8];
        for (int i = 0; i < 8; ++i) x[i] = 1e-3f * (threadIdx.x + i);
        for (int it = 0; it < fma_iters; ++it) {
            for (int i = 0; i < 8; ++i) x[i] = fmaf(x[i], 0.999f, 1e-4f);
        }
        for (int i = 0; i < 8; ++i) acc += x[i];
    }
    out[blockIdx.x * PROBE_THREADS + threadIdx.x] = acc;  // keep every loop's result live
}
