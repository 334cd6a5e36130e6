// FlashAttention-2 order forward on tensor cores (WMMA): the loop of flash_fwd.cuh, with both
// products, S = Q Kᵀ and O += P V, as 16 x 16 x 16 warp matrix multiplies with fp32
// accumulation. One CTA per (Q block, batch x head); BQ / 16 warps, warp w owning query rows
// 16w .. 16w + 15 of the tile. The same source runs on the CPU against emu/cuda_emu.h, whose
// WMMA stand-in computes each fragment product in float (see tests/test_kernels.py).
//
// Per K/V tile, each warp:
//   1. S[16 x BK] = Q[16 x D] Kᵀ on tensor cores, stored as float to shared memory;
//   2. two lanes per row (lanes r and r + 16, even and odd columns): scale, mask (causal and
//      ragged columns), the online-softmax update of m and l (the lanes' partial max and sum
//      combined by a shuffle), P = exp(S - m) stored in the input type for the next product,
//      and the rescale of the row's output accumulator by exp(m_old - m_new);
//   3. O[16 x D] += P[16 x BK] V on tensor cores, the accumulator loaded from and stored back
//      to shared memory (WMMA leaves the fragment's element-to-row mapping unspecified, so the
//      per-row rescale of step 2 happens in shared memory, not in the fragment).
//
// Shared memory (dynamic; the host asks for exactly
// hbmsim.schedules.kernel_fa2.smem_bytes(BQ, BK, D, sizeof(T), wmma=True) bytes, the footprint
// of the simulator's tile program "fa2-wmma-kernel"):
//   Qs [BQ][D + pad]  T      this CTA's queries, rows past the ragged edge zero
//   Ks [BK][D + pad]  T      the current K tile, rows past the ragged edge zero
//   Vs [BK][D + pad]  T      the current V tile, rows past the ragged edge zero (0 * garbage
//                            would be NaN)
//   S  [BQ][BK + 4]   float  scores of the current tile
//   P  [BQ][BK + pad] T      probabilities of the current tile, the A operand of P V
//   Os [BQ][D + 4]    float  the output accumulator
// Every row is padded by 16 bytes (pad = 16 / sizeof(T) elements; 4 floats), the padding never
// read. Unpadded, rows of 128 or 256 bytes all start on the same bank, so the softmax's one row
// per lane and the fragment loads' 16 rows would meet 16-way bank conflicts; padded, row r
// starts 4r words further on, and with the two lanes of a row on adjacent columns at most two
// lanes share a bank. 16 bytes, not 4, because WMMA
// wants row strides in 16-byte multiples and fragment pointers 32-byte aligned (every region's
// size and every fragment's first row, a multiple of 16, keep them so).
// Row state (running max m, running sum l) lives in registers of the row's two lanes.
//
// Exps are __expf (the special-function unit's ex2 and a multiply), the exp the simulator
// charges at the SFU rate.
//
// Causal masks are aligned bottom-right, as in hbmsim: row i sees column j <= i + (nk - nq).

#pragma once
#include "tile_io.cuh"

template <int kBQ, int kBK, int kD, bool kCausal, typename T>
__device__ void flash_fwd_wmma_body(const T* __restrict__ Q, const T* __restrict__ K,
                                    const T* __restrict__ V, T* __restrict__ O,
                                    float* __restrict__ LSE, int nq, int nk, int heads,
                                    int kv_heads, float scale) {
    namespace wmma = nvcuda::wmma;
    static_assert(kBQ % 16 == 0 && kBK % 16 == 0 && kD % 16 == 0,
                  "WMMA tiles are 16 x 16 x 16: BQ, BK and HEAD_DIM must be multiples of 16");
    constexpr int kThreads = kBQ / 16 * 32;
    using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
    using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
    using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
    using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

    constexpr int kLd = kD + 16 / sizeof(T);     // row stride of Qs, Ks, Vs
    constexpr int kLdS = kBK + 4;                // of S
    constexpr int kLdP = kBK + 16 / sizeof(T);   // of P
    constexpr int kLdO = kD + 4;                 // of Os

    DYNAMIC_SMEM(unsigned char, smem);
    T* Qs = reinterpret_cast<T*>(smem);
    T* Ks = Qs + kBQ * kLd;
    T* Vs = Ks + kBK * kLd;
    float* S = reinterpret_cast<float*>(Vs + kBK * kLd);
    T* P = reinterpret_cast<T*>(S + kBQ * kLdS);
    float* Os = reinterpret_cast<float*>(P + kBQ * kLdP);

    const int tid = threadIdx.x;
    const int w0 = (tid / 32) * 16;  // this warp's first row in the tile
    const int lane = tid % 32;
    const int tr = w0 + lane % 16;  // the tile row this lane shares with lane ^ 16
    const int half = lane / 16;     // ... taking its even (0) or odd (1) columns
    const int bh = blockIdx.y;
    const int h = bh % heads;
    const int b = bh / heads;
    const int kvh = h / (heads / kv_heads);
    const int r0 = blockIdx.x * kBQ;
    const int br = min(kBQ, nq - r0);
    const int row = r0 + tr;
    const int offset = nk - nq;

    const T* q = Q + ((size_t)bh * nq + r0) * kD;
    const T* k = K + ((size_t)(b * kv_heads + kvh) * nk) * kD;
    const T* v = V + ((size_t)(b * kv_heads + kvh) * nk) * kD;

    load_tile<kBQ, kD, kThreads>(Qs, kLd, q, br, tid);  // Qi, once
    for (int e = tid; e < kBQ * kD; e += kThreads) Os[e / kD * kLdO + e % kD] = 0.f;
    float m = -INFINITY, l = 0.f;  // the row's, the same in both its lanes

    int kv_end = nk;
    if (kCausal) kv_end = min(nk, r0 + br - 1 + offset + 1);
    for (int c0 = 0; c0 < kv_end; c0 += kBK) {
        const int bc = min(kBK, nk - c0);
        load_tile<kBK, kD, kThreads>(Ks, kLd, k + (size_t)c0 * kD, bc, tid);
        load_tile<kBK, kD, kThreads>(Vs, kLd, v + (size_t)c0 * kD, bc, tid);
        __syncthreads();  // Qs, Ks, Vs (and Os at the start) complete before the products

        // 1. S = Q Kᵀ for this warp's 16 rows (Kᵀ is K read column-major)
        for (int n0 = 0; n0 < kBK; n0 += 16) {
            FragC acc;
            wmma::fill_fragment(acc, 0.f);
            for (int k0 = 0; k0 < kD; k0 += 16) {
                FragA a;
                FragBt bt;
                wmma::load_matrix_sync(a, Qs + w0 * kLd + k0, kLd);
                wmma::load_matrix_sync(bt, Ks + n0 * kLd + k0, kLd);
                wmma::mma_sync(acc, a, bt, acc);
            }
            wmma::store_matrix_sync(S + w0 * kLdS + n0, acc, kLdS, wmma::mem_row_major);
        }
        __syncwarp();  // the warp's S rows complete before its lanes read them

        // 2. online softmax, two lanes per row, each over every other column; the row's max
        //    and sum are combined with one shuffle each, so both lanes hold the same m and l
        {
            float* s = S + tr * kLdS;
            float tile_max = -INFINITY;
            for (int j = half; j < kBK; j += 2) {
                float x = s[j] * scale;
                if (j >= bc || (kCausal && c0 + j > row + offset)) x = -INFINITY;
                s[j] = x;
                tile_max = fmaxf(tile_max, x);
            }
            tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 16));
            const float m_new = fmaxf(m, tile_max);
            const float alpha = (m == -INFINITY) ? 0.f : __expf(m - m_new);
            float sum = 0.f;
            for (int j = half; j < kBK; j += 2) {
                const float p = (s[j] == -INFINITY) ? 0.f : __expf(s[j] - m_new);
                P[tr * kLdP + j] = from_float<T>(p);
                sum += p;
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 16);
            l = alpha * l + sum;
            m = m_new;
            for (int c = half; c < kD; c += 2) Os[tr * kLdO + c] *= alpha;
        }
        __syncwarp();  // P and the rescaled O rows complete before the product reads them

        // 3. O += P V for this warp's 16 rows
        for (int d0 = 0; d0 < kD; d0 += 16) {
            FragC acc;
            wmma::load_matrix_sync(acc, Os + w0 * kLdO + d0, kLdO, wmma::mem_row_major);
            for (int k0 = 0; k0 < kBK; k0 += 16) {
                FragA a;
                FragB bv;
                wmma::load_matrix_sync(a, P + w0 * kLdP + k0, kLdP);
                wmma::load_matrix_sync(bv, Vs + k0 * kLd + d0, kLd);
                wmma::mma_sync(acc, a, bv, acc);
            }
            wmma::store_matrix_sync(Os + w0 * kLdO + d0, acc, kLdO, wmma::mem_row_major);
        }
        __syncthreads();  // every warp done with Ks, Vs (and Os stored) before the next tile
    }
    __syncthreads();  // Os final (also when a causal block sees no K/V tile at all)
    if (tr < br) {
        T* out = O + ((size_t)bh * nq + row) * kD;
        for (int c = half; c < kD; c += 2) out[c] = from_float<T>(Os[tr * kLdO + c] / l);
        if (half == 0) LSE[(size_t)bh * nq + row] = m + logf(l);
    }
}
