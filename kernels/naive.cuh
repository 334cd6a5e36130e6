// The naive (standard) path, kernel by kernel: a tiled matmul and a row softmax. Each kernel
// reads its inputs from and writes its output to global memory, as eager attention does.
//
// matmul_body: C[bh] = scale * A[bh] (M x Kd) times B(bh) (Kd x N), where B is stored as
// (N x Kd) when TRANS_B (for S = Q Kᵀ) or (Kd x N) otherwise (for O = P V). One CTA per
// BM x BN output tile of one (batch, head); A and B chunks of BD columns/rows go through
// shared memory (single-buffered). B's head is the shared K/V head under GQA.
// The 256 threads form a 16 x 16 grid, each computing a (BM/16) x (BN/16) block of C in
// registers (a thread whose block lies wholly past N computes nothing): per step of the inner
// dimension a thread reads BM/16 + BN/16 values from shared memory for (BM/16) * (BN/16) FMAs
// (8 + 8 for 64 at 128 x 128), so the FMA units, not shared memory, set the pace, as the
// simulator assumes. One thread per output element would read
// two shared values per FMA, and shared-memory load throughput is a quarter of the FMA rate.
// Shared memory, both T, chunks zero-filled past the ragged edges:
//   At [BD][BM + pad]  A's chunk, transposed: a thread's BM/16 values are contiguous
//   Bs [BD][BN + pad]  B's chunk: a thread's BN/16 values are contiguous
// Rows are padded by 16 bytes (pad = 16 / sizeof(T)), so the transposing stores of a warp
// spread over 8 banks instead of one: hbmsim.schedules.kernel_naive.matmul_smem_bytes.
//
// softmax_body: ROWS rows per CTA, 256 threads; the rows sit in shared memory (T) with a
// 256-float scratch for the block reductions: hbmsim.schedules.kernel_naive.softmax_smem_bytes.
// One exp per element, kept in the rows between the sum and the division; exps are __expf (the
// special-function unit's ex2 and a multiply), the exp the simulator charges at the SFU rate.
#pragma once
#include "tile_io.cuh"

#define NAIVE_THREADS 256

template <int kBM, int kBN, int kBD, bool kTransB, typename T>
__device__ void matmul_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                            int M, int N, int Kd, int heads, int b_heads, float scale) {
    static_assert(NAIVE_THREADS == 256 && kBM % 16 == 0 && kBN % 16 == 0,
                  "a 16 x 16 thread grid: BM and BN must be multiples of 16");
    constexpr int kTM = kBM / 16, kTN = kBN / 16;  // this thread's block of C
    constexpr int kLdA = kBM + 16 / sizeof(T), kLdB = kBN + 16 / sizeof(T);
    DYNAMIC_SMEM(unsigned char, smem);
    T* At = reinterpret_cast<T*>(smem);
    T* Bs = At + kBD * kLdA;
    // thread (ty, tx) computes rows ty * kTM.., columns tx * kTN..; a warp holds two tx values,
    // so where the tile's last columns are past N (O = P V with N = head dim < BN) whole warps
    // have nothing to compute and skip the product, not half-idle warps issuing it anyway
    const int tid = threadIdx.x, tx = tid / 16, ty = tid % 16;
    const int bh = blockIdx.z, h = bh % heads, b = bh / heads;
    const int bhead = b * b_heads + h / (heads / b_heads);
    const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
    const bool has_columns = n0 + tx * kTN < N;  // warp-uniform: see above
    const T* a = A + (size_t)bh * M * Kd;
    const T* bmat = B + (size_t)bhead * N * Kd;
    const T zero = from_float<T>(0.f);
    float acc[kTM][kTN];
#pragma unroll
    for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = 0.f;
    for (int k0 = 0; k0 < Kd; k0 += kBD) {
        // global reads run along each matrix's contiguous dimension (coalesced)
        for (int e = tid; e < kBM * kBD; e += NAIVE_THREADS) {
            const int mm = e / kBD, kk = e % kBD;
            const bool in = m0 + mm < M && k0 + kk < Kd;
            At[kk * kLdA + mm] = in ? a[(size_t)(m0 + mm) * Kd + k0 + kk] : zero;
        }
        for (int e = tid; e < kBD * kBN; e += NAIVE_THREADS) {
            const int nn = kTransB ? e / kBD : e % kBN, kk = kTransB ? e % kBD : e / kBN;
            const bool in = n0 + nn < N && k0 + kk < Kd;
            Bs[kk * kLdB + nn] = !in ? zero
                                 : kTransB ? bmat[(size_t)(n0 + nn) * Kd + k0 + kk]
                                           : bmat[(size_t)(k0 + kk) * N + n0 + nn];
        }
        __syncthreads();  // At, Bs complete before the products
        if (has_columns) {
#pragma unroll 4
            for (int kk = 0; kk < kBD; ++kk) {
                float av[kTM], bv[kTN];
                load_floats(av, At + kk * kLdA + ty * kTM);
                load_floats(bv, Bs + kk * kLdB + tx * kTN);
#pragma unroll
                for (int i = 0; i < kTM; ++i)
#pragma unroll
                    for (int j = 0; j < kTN; ++j) acc[i][j] += av[i] * bv[j];
            }
        }
        __syncthreads();  // every product done before the next chunk overwrites At, Bs
    }
#pragma unroll
    for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
            const int row = m0 + ty * kTM + i, col = n0 + tx * kTN + j;
            if (row < M && col < N)
                C[(size_t)bh * M * N + (size_t)row * N + col] = from_float<T>(scale * acc[i][j]);
        }
}

template <int kRows, bool kCausal, typename T>
__device__ void softmax_body(const T* __restrict__ S, T* __restrict__ P, int nq, int nk) {
    DYNAMIC_SMEM(unsigned char, smem);
    T* rows = reinterpret_cast<T*>(smem);
    float* red = reinterpret_cast<float*>(rows + (size_t)kRows * nk);
    const int tid = threadIdx.x;
    const int bh = blockIdx.y;
    const int r0 = blockIdx.x * kRows;
    const int br = min(kRows, nq - r0);
    const T* s = S + ((size_t)bh * nq + r0) * nk;
    for (int e = tid; e < br * nk; e += NAIVE_THREADS) rows[e] = s[e];
    __syncthreads();  // the rows are in shared memory
    for (int r = 0; r < br; ++r) {
        const int visible = kCausal ? min(nk, r0 + r + (nk - nq) + 1) : nk;
        float m = -INFINITY;
        for (int j = tid; j < visible; j += NAIVE_THREADS) m = fmaxf(m, to_float(rows[r * nk + j]));
        red[tid] = m;
        __syncthreads();  // every partial max written
        for (int w = NAIVE_THREADS / 2; w > 0; w /= 2) {
            if (tid < w) red[tid] = fmaxf(red[tid], red[tid + w]);
            __syncthreads();  // one level of the tree reduction done
        }
        m = red[0];
        __syncthreads();  // everyone has read the max before red is reused
        float sum = 0.f;
        for (int j = tid; j < visible; j += NAIVE_THREADS) {
            const float e = __expf(to_float(rows[r * nk + j]) - m);
            rows[r * nk + j] = from_float<T>(e);  // one exp per element: kept for the division
            sum += e;
        }
        red[tid] = sum;
        __syncthreads();  // every partial sum written
        for (int w = NAIVE_THREADS / 2; w > 0; w /= 2) {
            if (tid < w) red[tid] += red[tid + w];
            __syncthreads();
        }
        sum = red[0];
        __syncthreads();  // everyone has read the sum before red is reused
        const float inv = 1.f / sum;
        T* p = P + ((size_t)bh * nq + r0 + r) * nk;
        for (int j = tid; j < nk; j += NAIVE_THREADS)
            p[j] = from_float<T>(j < visible ? to_float(rows[r * nk + j]) * inv : 0.f);
    }
}
