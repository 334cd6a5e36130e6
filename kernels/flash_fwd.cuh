// FlashAttention-2 order forward, one CTA per (Q block, batch x head): K/V tiles streamed
// through shared memory, online softmax, O and the log-sum-exp written once.
//
// Readable and portable first: one thread per query row of the tile (BQ threads); scalar FMA,
// no tensor cores. The same source compiles with nvcc/NVRTC for the GPU and with g++ against
// emu/cuda_emu.h, which runs it on the CPU (see tests/test_kernels.py).
//
// Shared memory (dynamic, carved into named pointers; the host asks for exactly
// hbmsim.schedules.kernel_fa2.smem_bytes(BQ, BK, D, sizeof(T)) bytes, the same function the
// simulator's tile program "fa2-kernel" uses for its SRAM footprint):
//   Qt [D][BQ]  T      this CTA's queries, loaded once, transposed
//   Ks [BK][D]  T      the current K tile
//   Vs [BK][D]  T      the current V tile
//   St [BK][BQ] float  scores of the current tile, transposed
// Qt and St are transposed so that the threads of a warp (consecutive rows) read consecutive
// addresses: a row-major [BQ][...] layout puts every lane of a warp on the same bank, 32-way
// conflicts on every read. Every thread reads the same elements of Ks and Vs at a time: a
// broadcast, no conflict, 16 bytes per load. Shared-memory load throughput is a quarter of the
// FMA rate, so the products are arranged to load far less than once per FMA: each score step
// reads one Qt element for kJ = 8 FMAs (8 keys at once) and one 16-byte K vector per 8
// elements; the P V step reads one 16-byte V vector for 8 FMAs per thread. Row state (running max m, running sum l, output accumulator o[D])
// lives in registers: o is only ever indexed by compile-time constants (unrolled loops).
//
// Exps are __expf (the special-function unit's ex2 and a multiply), the exp the simulator
// charges at the SFU rate.
//
// Causal masks are aligned bottom-right, as in hbmsim: row i sees column j <= i + (nk - nq).

#pragma once
#include "tile_io.cuh"

template <typename T>
__device__ __forceinline__ float load_f(const T* p) { return to_float(*p); }

template <int kBQ, int kBK, int kD, bool kCausal, typename T>
__device__ void flash_fwd_body(const T* __restrict__ Q, const T* __restrict__ K,
                               const T* __restrict__ V, T* __restrict__ O,
                               float* __restrict__ LSE, int nq, int nk, int heads,
                               int kv_heads, float scale) {
    // Ks and Vs rows are read kC elements (16 bytes) at a time, when rows are whole 16-byte
    // vectors; kJ scores are computed together, so each Qt element read serves kJ FMAs.
    constexpr int kC = (kD * sizeof(T)) % 16 == 0 ? 16 / sizeof(T) : 1;
    constexpr int kJ = kBK % 8 == 0 ? 8 : (kBK % 4 == 0 ? 4 : 1);

    DYNAMIC_SMEM(unsigned char, smem);
    T* Qt = reinterpret_cast<T*>(smem);
    T* Ks = Qt + kD * kBQ;
    T* Vs = Ks + kBK * kD;
    float* St = reinterpret_cast<float*>(Vs + kBK * kD);

    const int tid = threadIdx.x;               // this thread's row in the tile
    const int bh = blockIdx.y;                 // batch * heads + head
    const int h = bh % heads;
    const int b = bh / heads;
    const int kvh = h / (heads / kv_heads);    // GQA: the shared K/V head
    const int r0 = blockIdx.x * kBQ;
    const int br = min(kBQ, nq - r0);           // rows in this (possibly ragged) tile
    const int row = r0 + tid;
    const int offset = nk - nq;                // causal alignment

    const T* q = Q + ((size_t)bh * nq + r0) * kD;
    const T* k = K + ((size_t)(b * kv_heads + kvh) * nk) * kD;
    const T* v = V + ((size_t)(b * kv_heads + kvh) * nk) * kD;

    for (int e = tid; e < br * kD; e += kBQ) Qt[(e % kD) * kBQ + e / kD] = q[e];  // Qi, once
    __syncthreads();  // Qt complete before any row reads it

    float m = -INFINITY, l = 0.f, o[kD];
#pragma unroll
    for (int c = 0; c < kD; ++c) o[c] = 0.f;

    // K/V blocks this Q block sees: all, or up to the diagonal when causal
    int kv_end = nk;
    if (kCausal) kv_end = min(nk, r0 + br - 1 + offset + 1);
    for (int c0 = 0; c0 < kv_end; c0 += kBK) {
        const int bc = min(kBK, nk - c0);
        load_tile<kBK, kD, kBQ>(Ks, kD, k + (size_t)c0 * kD, bc, tid);
        load_tile<kBK, kD, kBQ>(Vs, kD, v + (size_t)c0 * kD, bc, tid);
        __syncthreads();  // Ks, Vs complete before the scores use them
        if (tid < br) {
            float tile_max = -INFINITY;
            for (int j0 = 0; j0 < bc; j0 += kJ) {  // kJ scores at a time (rows past bc are 0)
                float s[kJ];
#pragma unroll
                for (int jj = 0; jj < kJ; ++jj) s[jj] = 0.f;
#pragma unroll
                for (int c0 = 0; c0 < kD; c0 += kC) {
                    float kv[kJ][kC];
#pragma unroll
                    for (int jj = 0; jj < kJ; ++jj) load_floats(kv[jj], Ks + (j0 + jj) * kD + c0);
#pragma unroll
                    for (int c = 0; c < kC; ++c) {
                        const float qc = load_f(Qt + (c0 + c) * kBQ + tid);
#pragma unroll
                        for (int jj = 0; jj < kJ; ++jj) s[jj] += qc * kv[jj][c];
                    }
                }
#pragma unroll
                for (int jj = 0; jj < kJ; ++jj) {
                    const int j = j0 + jj;
                    if (j >= bc) break;
                    float x = s[jj] * scale;
                    if (kCausal && c0 + j > row + offset) x = -INFINITY;
                    St[j * kBQ + tid] = x;
                    tile_max = fmaxf(tile_max, x);
                }
            }
            const float m_new = fmaxf(m, tile_max);
            const float alpha = (m == -INFINITY) ? 0.f : __expf(m - m_new);  // rescale old sums
#pragma unroll
            for (int c = 0; c < kD; ++c) o[c] *= alpha;
            float sum = 0.f;
            for (int j = 0; j < bc; ++j) {  // P = exp(S - m_new), summed and multiplied into V
                const float s = St[j * kBQ + tid];
                const float p = (s == -INFINITY) ? 0.f : __expf(s - m_new);
                sum += p;
#pragma unroll
                for (int c0 = 0; c0 < kD; c0 += kC) {
                    float vv[kC];
                    load_floats(vv, Vs + j * kD + c0);
#pragma unroll
                    for (int c = 0; c < kC; ++c) o[c0 + c] += p * vv[c];
                }
            }
            l = alpha * l + sum;
            m = m_new;
        }
        __syncthreads();  // every row done with Ks, Vs before the next tile overwrites them
    }
    if (tid < br) {
        T* out = O + ((size_t)bh * nq + row) * kD;
#pragma unroll
        for (int c = 0; c < kD; ++c) out[c] = from_float<T>(o[c] / l);
        LSE[(size_t)bh * nq + row] = m + logf(l);
    }
}
