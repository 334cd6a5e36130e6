// Instantiation of the tensor-core flash forward kernel for the GPU (nvcc, NVRTC), fp16 or bf16
// inputs: -DBQ=.. -DBK=.. -DHEAD_DIM=.. -DCAUSAL=0|1 -DELEM=half|bf16 (WMMA has no fp32 inputs;
// flash_fwd.cu covers fp32). BQ / 16 warps per CTA.
#include "cuda_compat.cuh"
#include "flash_fwd_wmma.cuh"

extern "C" __global__ void __launch_bounds__(BQ / 16 * 32, 1)
flash_fwd_wmma(const ELEM_T* Q, const ELEM_T* K, const ELEM_T* V, ELEM_T* O, float* LSE, int nq,
               int nk, int heads, int kv_heads, float scale) {
    flash_fwd_wmma_body<BQ, BK, HEAD_DIM, CAUSAL != 0, ELEM_T>(Q, K, V, O, LSE, nq, nk, heads,
                                                               kv_heads, scale);
}
