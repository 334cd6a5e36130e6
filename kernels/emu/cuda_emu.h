// CUDA on the CPU, just enough to run this project's kernels unmodified (tests only).
//
// Blocks run one after another; the threads of a block are std::threads that stay alive for
// the whole launch and meet at a std::barrier for __syncthreads() and between blocks. Shared
// memory is one buffer per launch (blocks do not overlap in time, as on a GPU they would not
// share it anyway). Elements are float: half and bf16 rounding is the GPU run's business.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

namespace emu {
inline thread_local dim3 thread_idx, block_idx;
inline dim3 block_dim, grid_dim;
inline std::barrier<>* block_barrier = nullptr;
inline std::vector<unsigned char> shared_buffer;

template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, dim3 block, size_t smem_bytes, Args... args) {
    grid_dim = grid;
    block_dim = block;
    shared_buffer.assign(smem_bytes, 0);
    const unsigned n = block.x * block.y * block.z;
    std::barrier<> barrier(n);
    block_barrier = &barrier;
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
#include <math.h>  // expf, logf, fmaxf, INFINITY in the global namespace, as in CUDA
using std::min;
using std::max;

inline float to_float(float x) { return x; }
template <typename T> inline T from_float(float x);
template <> inline float from_float<float>(float x) { return x; }
