// What the kernels need from CUDA, in one place: element types and their float conversions,
// and dynamic shared memory. emu/cuda_emu.h provides the same names on the CPU.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>

// Aligned for WMMA's 256-bit fragment loads; every carve-up offset is a multiple of 32 bytes.
#define DYNAMIC_SMEM(type, name) extern __shared__ __align__(128) type name[]

// NVRTC has no <math.h>, so INFINITY (which nvcc gets from the host headers) is spelled out.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);
}

#ifndef ELEM
#define ELEM half
#endif
#define ELEM_half __half
#define ELEM_bf16 __nv_bfloat16
#define ELEM_float float
#define ELEM_CAT(x) ELEM_##x
#define ELEM_EXPAND(x) ELEM_CAT(x)
#define ELEM_T ELEM_EXPAND(ELEM)
