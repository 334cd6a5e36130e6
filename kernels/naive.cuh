// The naive (standard) path, kernel by kernel: a tiled matmul and a row softmax. Each kernel
// reads its inputs from and writes its output to global memory, as eager attention does.
//
// matmul_body: C[bh] = scale * A[bh] (M x Kd) times B(bh) (Kd x N), where B is stored as
// (N x Kd) when TRANS_B (for S = Q Kᵀ) or (Kd x N) otherwise (for O = P V). One CTA per
// BM x BN output tile of one (batch, head); A and B chunks of BD columns/rows go through
// shared memory (single-buffered); each of the 256 threads keeps BM*BN/256 accumulators.
// B's head is the shared K/V head under GQA. Shared memory: As[BM][BD], Bs[BD][BN], both T:
// hbmsim.schedules.kernel_naive.matmul_smem_bytes.
//
// softmax_body: ROWS rows per CTA, 256 threads; the rows sit in shared memory (T) with a
// 256-float scratch for the block reductions: hbmsim.schedules.kernel_naive.softmax_smem_bytes.
#pragma once

#define NAIVE_THREADS 256

template <int kBM, int kBN, int kBD, bool kTransB, typename T>
__device__ void matmul_body(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                            int M, int N, int Kd, int heads, int b_heads, float scale) {
    DYNAMIC_SMEM(unsigned char, smem);
    T* As = reinterpret_cast<T*>(smem);
    T* Bs = As + kBM * kBD;
    constexpr int PER_THREAD = (kBM * kBN + NAIVE_THREADS - 1) / NAIVE_THREADS;
    const int tid = threadIdx.x;
    const int bh = blockIdx.z, h = bh % heads, b = bh / heads;
    const int bhead = b * b_heads + h / (heads / b_heads);
    const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
    const int bm = min(kBM, M - m0), bn = min(kBN, N - n0);
    const T* a = A + (size_t)bh * M * Kd;
    const T* bmat = B + (size_t)bhead * N * Kd;
    float acc[PER_THREAD];
    for (int i = 0; i < PER_THREAD; ++i) acc[i] = 0.f;
    for (int k0 = 0; k0 < Kd; k0 += kBD) {
        const int bd = min(kBD, Kd - k0);
        for (int e = tid; e < bm * bd; e += NAIVE_THREADS)
            As[(e / bd) * kBD + e % bd] = a[(size_t)(m0 + e / bd) * Kd + k0 + e % bd];
        for (int e = tid; e < bd * bn; e += NAIVE_THREADS) {
            const int kk = e / bn, nn = e % bn;
            Bs[kk * kBN + nn] = kTransB ? bmat[(size_t)(n0 + nn) * Kd + k0 + kk]
                                       : bmat[(size_t)(k0 + kk) * N + n0 + nn];
        }
        __syncthreads();  // As, Bs complete before the products
        for (int i = 0; i < PER_THREAD; ++i) {
            const int e = tid + i * NAIVE_THREADS;
            if (e >= bm * bn) break;
            const int mm = e / bn, nn = e % bn;
            float s = acc[i];
            for (int kk = 0; kk < bd; ++kk)
                s += to_float(As[mm * kBD + kk]) * to_float(Bs[kk * kBN + nn]);
            acc[i] = s;
        }
        __syncthreads();  // every product done before the next chunk overwrites As, Bs
    }
    for (int i = 0; i < PER_THREAD; ++i) {
        const int e = tid + i * NAIVE_THREADS;
        if (e >= bm * bn) break;
        C[(size_t)bh * M * N + (size_t)(m0 + e / bn) * N + n0 + e % bn] =
            from_float<T>(scale * acc[i]);
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
        for (int j = tid; j < visible; j += NAIVE_THREADS) sum += expf(to_float(rows[r * nk + j]) - m);
        red[tid] = sum;
        __syncthreads();  // every partial sum written
        for (int w = NAIVE_THREADS / 2; w > 0; w /= 2) {
            if (tid < w) red[tid] += red[tid + w];
            __syncthreads();
        }
        sum = red[0];
        __syncthreads();  // everyone has read the sum before red is reused
        T* p = P + ((size_t)bh * nq + r0 + r) * nk;
        for (int j = tid; j < nk; j += NAIVE_THREADS)
            p[j] = from_float<T>(j < visible ? expf(to_float(rows[r * nk + j]) - m) / sum : 0.f);
    }
}
