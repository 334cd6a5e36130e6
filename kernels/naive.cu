// The naive path for the GPU: -DBM -DBN -DBD (matmul tiles), -DROWS (softmax rows per CTA),
// -DCAUSAL, -DELEM=half|bf16|float from the runner; tests compile variants with nvcc.
#include "cuda_compat.cuh"
#include "naive.cuh"

extern "C" __global__ void __launch_bounds__(NAIVE_THREADS, 1)
matmul_nt(const ELEM_T* A, const ELEM_T* B, ELEM_T* C, int M, int N, int Kd, int heads,
          int b_heads, float scale) {
    matmul_body<BM, BN, BD, true, ELEM_T>(A, B, C, M, N, Kd, heads, b_heads, scale);
}

extern "C" __global__ void __launch_bounds__(NAIVE_THREADS, 1)
matmul_nn(const ELEM_T* A, const ELEM_T* B, ELEM_T* C, int M, int N, int Kd, int heads,
          int b_heads, float scale) {
    matmul_body<BM, BN, BD, false, ELEM_T>(A, B, C, M, N, Kd, heads, b_heads, scale);
}

extern "C" __global__ void __launch_bounds__(NAIVE_THREADS, 1)
softmax_rows(const ELEM_T* S, ELEM_T* P, int nq, int nk) {
    softmax_body<ROWS, CAUSAL != 0, ELEM_T>(S, P, nq, nk);
}
