// CUDA on the CPU, just enough to run this project's kernels unmodified (tests only).
//
// Blocks run one after another; the threads of a block are std::threads that stay alive for
// the whole launch and meet at a std::barrier for __syncthreads() and between blocks. Shared
// memory is one buffer per launch (blocks do not overlap in time, as on a GPU they would not
// share it anyway). Elements are float: half and bf16 rounding is the GPU run's business.
#pragma once
#include <algorithm>
#include <array>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

namespace emu {
inline thread_local dim3 thread_idx, block_idx;
inline dim3 block_dim, grid_dim;
inline std::barrier<>* block_barrier = nullptr;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;  // one per 32 threads
inline std::vector<std::array<float, 32>> warp_exchange;  // one slot per lane, for shuffles
inline std::vector<unsigned char> shared_buffer;

template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, dim3 block, size_t smem_bytes, Args... args) {
    grid_dim = grid;
    block_dim = block;
    shared_buffer.assign(smem_bytes, 0);
    const unsigned n = block.x * block.y * block.z;
    std::barrier<> barrier(n);
    block_barrier = &barrier;
    warp_barriers.clear();
    for (unsigned w = 0; w * 32 < n; ++w)
        warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32u, n - w * 32)));
    warp_exchange.assign(warp_barriers.size(), {});
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < n; ++t) {
        threads.emplace_back([&, t] {
            thread_idx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            for (unsigned z = 0; z < grid.z; ++z)
                for (unsigned y = 0; y < grid.y; ++y)
                    for (unsigned x = 0; x < grid.x; ++x) {
                        block_idx = {x, y, z};
                        kernel(args...);
                        barrier.arrive_and_wait();  // the next block reuses shared memory
                    }
        });
    }
    for (auto& th : threads) th.join();
    block_barrier = nullptr;
}
}  // namespace emu

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(n)
#define threadIdx (emu::thread_idx)
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)
#define DYNAMIC_SMEM(type, name) type* name = reinterpret_cast<type*>(emu::shared_buffer.data())

inline void __syncthreads() { emu::block_barrier->arrive_and_wait(); }
inline void __syncwarp() { emu::warp_barriers[emu::thread_idx.x / 32]->arrive_and_wait(); }
// Every lane of the warp must call it (a full mask, as the kernels use it): each lane posts its
// value in its slot, and reads its partner's once all have posted.
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
    const unsigned warp = emu::thread_idx.x / 32, lane = emu::thread_idx.x % 32;
    emu::warp_exchange[warp][lane] = v;
    __syncwarp();
    const float out = emu::warp_exchange[warp][lane ^ lane_mask];
    __syncwarp();  // every lane has read before a later shuffle overwrites the slots
    return out;
}
#include <math.h>  // expf, logf, fmaxf, INFINITY in the global namespace, as in CUDA
inline float __expf(float x) { return expf(x); }  // CUDA's fast exp (ex2.approx)
using std::min;
using std::max;

struct alignas(16) uint4 {  // CUDA's 16-byte vector type, for tile_io.cuh's copies
    unsigned x, y, z, w;
};

inline float to_float(float x) { return x; }
template <typename T> inline T from_float(float x);
template <> inline float from_float<float>(float x) { return x; }

// WMMA, 16 x 16 x 16 only. Every lane of a warp holds the whole fragment (a GPU spreads it over
// the lanes) and computes the whole product in float; stores are split among the lanes, element
// e by lane e % 32, so no two threads write one address. Loads read the operands' element type
// and products run in float: the GPU's fp16/bf16 operand rounding is the GPU run's business.
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulation knows 16 x 16 x 16 only");
    float v[16 * 16];  // v[r * 16 + c]: row r, column c of the operand or accumulator
};

template <typename Use, typename T, typename Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float value) {
    for (float& x : f.v) x = value;
}

template <typename Use, typename T, typename E>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, row_major>& f, const E* p,
                             unsigned ldm) {
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) f.v[r * 16 + c] = to_float(p[r * ldm + c]);
}

template <typename Use, typename T, typename E>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, col_major>& f, const E* p,
                             unsigned ldm) {
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) f.v[r * 16 + c] = to_float(p[c * ldm + r]);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c)
            f.v[r * 16 + c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}

template <typename T, typename La, typename Lb>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                     const fragment<matrix_a, 16, 16, 16, T, La>& a,
                     const fragment<matrix_b, 16, 16, 16, T, Lb>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
    float out[16 * 16];
    for (int r = 0; r < 16; ++r)
        for (int col = 0; col < 16; ++col) {
            float s = c.v[r * 16 + col];
            for (int k = 0; k < 16; ++k) s += a.v[r * 16 + k] * b.v[k * 16 + col];
            out[r * 16 + col] = s;
        }
    std::copy(out, out + 16 * 16, d.v);  // d may be c
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
    for (unsigned e = emu::thread_idx.x % 32; e < 16 * 16; e += 32) {
        const unsigned r = e / 16, c = e % 16;
        (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.v[e];
    }
}
}  // namespace nvcuda::wmma
