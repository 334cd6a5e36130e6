// Instantiations of the flash forward kernel for the GPU (nvcc, NVRTC). Compile-time tile
// sizes come from the runner as -DBQ=.. -DBK=.. -DHEAD_DIM=.. -DCAUSAL=0|1 -DELEM=half|bf16|float;
// tests compile every variant with nvcc for sm_80 and sm_90.
#include "cuda_compat.cuh"
#include "flash_fwd.cuh"

extern "C" __global__ void __launch_bounds__(BQ, 1)
flash_fwd(const ELEM_T* Q, const ELEM_T* K, const ELEM_T* V, ELEM_T* O, float* LSE, int nq,
          int nk, int heads, int kv_heads, float scale) {
    flash_fwd_body<BQ, BK, HEAD_DIM, CAUSAL != 0, ELEM_T>(Q, K, V, O, LSE, nq, nk, heads,
                                                          kv_heads, scale);
}
