// Moving a tile of K, V or Q from global into shared memory, shared by both flash kernels.
//
// 16 bytes per thread per step (one uint4) wherever a row is a whole number of 16-byte
// vectors: element-by-element copies issue 8 times the load instructions for fp16, and the
// kernels are single-buffered, so each K/V tile's load is on the critical path. The emulation
// (emu/cuda_emu.h) defines uint4 too, so the same code runs on the CPU.

#pragma once

// Rows [0, rows) of a kRows x kD tile, rows contiguous in `src` (kD elements each), into `dst`
// with row stride `ld` elements; rows [rows, kRows) are zero-filled (a zero bit pattern is 0 in
// every element type). Vector copies need `src` and `dst + r * ld` 16-byte aligned: the callers'
// global rows start at multiples of kD elements, and their shared-memory strides are multiples
// of 16 bytes.
template <int kRows, int kD, int kThreads, typename T>
__device__ __forceinline__ void load_tile(T* __restrict__ dst, int ld, const T* __restrict__ src,
                                          int rows, int tid) {
    constexpr int kVec = 16 / sizeof(T);
    if constexpr (kD % kVec == 0) {
        constexpr int kPerRow = kD / kVec;
        for (int e = tid; e < kRows * kPerRow; e += kThreads) {
            const int r = e / kPerRow, c = (e % kPerRow) * kVec;
            uint4 x{};
            if (r < rows) x = *reinterpret_cast<const uint4*>(src + (size_t)r * kD + c);
            *reinterpret_cast<uint4*>(dst + r * ld + c) = x;
        }
    } else {
        const T zero = from_float<T>(0.f);
        for (int e = tid; e < kRows * kD; e += kThreads) {
            const int r = e / kD, c = e % kD;
            dst[r * ld + c] = r < rows ? src[(size_t)r * kD + c] : zero;
        }
    }
}

// kN consecutive elements of shared memory, as floats: in 16-byte loads when the kN elements
// are whole 16-byte vectors (`p` then 16-byte aligned), element by element otherwise. A warp
// that reads the same row (a broadcast) or a thread's own block of a row then issues one load
// instruction per 16 bytes, not one per element: shared-memory load throughput is a quarter of
// the FMA rate, so a product that loads every operand separately runs at the loads' pace.
template <int kN, typename T>
__device__ __forceinline__ void load_floats(float (&out)[kN], const T* p) {
    constexpr int kVec = 16 / sizeof(T);
    if constexpr (kN % kVec == 0) {
#pragma unroll
        for (int v = 0; v < kN / kVec; ++v) {
            const uint4 x = reinterpret_cast<const uint4*>(p)[v];
            const T* e = reinterpret_cast<const T*>(&x);
#pragma unroll
            for (int k = 0; k < kVec; ++k) out[v * kVec + k] = to_float(e[k]);
        }
    } else {
#pragma unroll
        for (int k = 0; k < kN; ++k) out[k] = to_float(p[k]);
    }
}
