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
