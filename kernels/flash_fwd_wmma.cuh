// FlashAttention-2 order forward on tensor cores (WMMA): the loop of flash_fwd.cuh, with both
// products, S = Q Kᵀ and O += P V, as 16 x 16 x 16 warp matrix multiplies with fp32
// accumulation. One CTA per (Q block, batch x head); BQ / 16 warps, warp w owning query rows
// 16w .. 16w + 15 of the tile. The same source runs on the CPU against emu/cuda_emu.h, whose
// WMMA stand-in computes each fragment product in float (see tests/test_kernels.py).
//
// Per K/V tile, each warp:
//   1. S[16 x BK] = Q[16 x D] Kᵀ on tensor cores, stored as float to shared memory;
//   2. lanes 0..15, one row each: scale, mask (causal and ragged columns), the online-softmax
//      update of m and l, P = exp(S - m) stored in the input type for the next product, and
//      the rescale of the row's output accumulator by exp(m_old - m_new);
//   3. O[16 x D] += P[16 x BK] V on tensor cores, the accumulator loaded from and stored back
//      to shared memory (WMMA leaves the fragment's element-to-row mapping unspecified, so the
//      per-row rescale of step 2 happens in shared memory, not in the fragment).
//
// Shared memory (dynamic; the host asks for exactly
// hbmsim.schedules.kernel_fa2.smem_bytes(BQ, BK, D, sizeof(T), wmma=True) bytes, the footprint
// of the simulator's tile program "fa2-wmma-kernel"):
//   Qs [BQ][D]  T      this CTA's queries, rows past the ragged edge zero
//   Ks [BK][D]  T      the current K tile, rows past the ragged edge zero
//   Vs [BK][D]  T      the current V tile, rows past the ragged edge zero (0 * garbage = NaN)
//   S  [BQ][BK] float  scores of the current tile
//   P  [BQ][BK] T      probabilities of the current tile, the A operand of P V
//   Os [BQ][D]  float  the output accumulator
// Row state (running max m, running sum l) lives in registers of the row's lane.
//
// Causal masks are aligned bottom-right, as in hbmsim: row i sees column j <= i + (nk - nq).

#pragma once

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

    DYNAMIC_SMEM(unsigned char, smem);
    T* Qs = reinterpret_cast<T*>(smem);
    T* Ks = Qs + kBQ * kD;
    T* Vs = Ks + kBK * kD;
    float* S = reinterpret_cast<float*>(Vs + kBK * kD);
    T* P = reinterpret_cast<T*>(S + kBQ * kBK);
    float* Os = reinterpret_cast<float*>(P + kBQ * kBK);

    const int tid = threadIdx.x;
    const int w0 = (tid / 32) * 16;  // this warp's first row in the tile
    const int lane = tid % 32;
    const int tr = w0 + lane;  // the tile row lanes 0..15 own
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
    const T zero = from_float<T>(0.f);

    for (int e = tid; e < kBQ * kD; e += kThreads) {  // load Qi once; O = 0
        Qs[e] = e < br * kD ? q[e] : zero;
        Os[e] = 0.f;
    }
    float m = -INFINITY, l = 0.f;  // meaningful in lanes 0..15

    int kv_end = nk;
    if (kCausal) kv_end = min(nk, r0 + br - 1 + offset + 1);
    for (int c0 = 0; c0 < kv_end; c0 += kBK) {
        const int bc = min(kBK, nk - c0);
        for (int e = tid; e < kBK * kD; e += kThreads) {
            const bool in = e < bc * kD;
            Ks[e] = in ? k[(size_t)c0 * kD + e] : zero;
            Vs[e] = in ? v[(size_t)c0 * kD + e] : zero;
        }
        __syncthreads();  // Qs, Ks, Vs (and Os at the start) complete before the products

        // 1. S = Q Kᵀ for this warp's 16 rows (Kᵀ is K read column-major)
        for (int n0 = 0; n0 < kBK; n0 += 16) {
            FragC acc;
            wmma::fill_fragment(acc, 0.f);
            for (int k0 = 0; k0 < kD; k0 += 16) {
                FragA a;
                FragBt bt;
                wmma::load_matrix_sync(a, Qs + w0 * kD + k0, kD);
                wmma::load_matrix_sync(bt, Ks + n0 * kD + k0, kD);
                wmma::mma_sync(acc, a, bt, acc);
            }
            wmma::store_matrix_sync(S + w0 * kBK + n0, acc, kBK, wmma::mem_row_major);
        }
        __syncwarp();  // the warp's S rows complete before its lanes read them

        // 2. online softmax, one row per lane
        if (lane < 16) {
            float* s = S + tr * kBK;
            float tile_max = -INFINITY;
            for (int j = 0; j < kBK; ++j) {
                float x = s[j] * scale;
                if (j >= bc || (kCausal && c0 + j > row + offset)) x = -INFINITY;
                s[j] = x;
                tile_max = fmaxf(tile_max, x);
            }
            const float m_new = fmaxf(m, tile_max);
            const float alpha = (m == -INFINITY) ? 0.f : expf(m - m_new);
            float sum = 0.f;
            for (int j = 0; j < kBK; ++j) {
                const float p = (s[j] == -INFINITY) ? 0.f : expf(s[j] - m_new);
                P[tr * kBK + j] = from_float<T>(p);
                sum += p;
            }
            l = alpha * l + sum;
            m = m_new;
            for (int c = 0; c < kD; ++c) Os[tr * kD + c] *= alpha;
        }
        __syncwarp();  // P and the rescaled O rows complete before the product reads them

        // 3. O += P V for this warp's 16 rows
        for (int d0 = 0; d0 < kD; d0 += 16) {
            FragC acc;
            wmma::load_matrix_sync(acc, Os + w0 * kD + d0, kD, wmma::mem_row_major);
            for (int k0 = 0; k0 < kBK; k0 += 16) {
                FragA a;
                FragB bv;
                wmma::load_matrix_sync(a, P + w0 * kBK + k0, kBK);
                wmma::load_matrix_sync(bv, Vs + k0 * kD + d0, kD);
                wmma::mma_sync(acc, a, bv, acc);
            }
            wmma::store_matrix_sync(Os + w0 * kD + d0, acc, kD, wmma::mem_row_major);
        }
        __syncthreads();  // every warp done with Ks, Vs (and Os stored) before the next tile
    }
    __syncthreads();  // Os final (also when a causal block sees no K/V tile at all)
    if (lane < 16 && tr < br) {
        T* out = O + ((size_t)bh * nq + row) * kD;
        for (int c = 0; c < kD; ++c) out[c] = from_float<T>(Os[tr * kD + c] / l);
        LSE[(size_t)bh * nq + row] = m + logf(l);
    }
}
