// Runs the naive path on the CPU: S = Q Kᵀ scale, P = softmax(S), O = P V.
// naive_main NQ NK HEADS KV_HEADS BATCH D SCALE DIR MATMUL_SMEM SOFTMAX_SMEM
// (BM, BN, BD, ROWS, CAUSAL from -D flags; shared-memory sizes from the simulator's functions)
#include "cuda_emu.h"
#include "../naive.cuh"

#include <cstdio>
#include <cstdlib>
#include <string>

static std::vector<float> read(const std::string& path, size_t n) {
    std::vector<float> v(n);
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f || std::fread(v.data(), sizeof(float), n, f) != n) std::exit(2);
    std::fclose(f);
    return v;
}

static void mm_nt(const float* A, const float* B, float* C, int M, int N, int Kd, int h, int bh,
                  float s) { matmul_body<BM, BN, BD, true, float>(A, B, C, M, N, Kd, h, bh, s); }
static void mm_nn(const float* A, const float* B, float* C, int M, int N, int Kd, int h, int bh,
                  float s) { matmul_body<BM, BN, BD, false, float>(A, B, C, M, N, Kd, h, bh, s); }
static void sm(const float* S, float* P, int nq, int nk) {
    softmax_body<ROWS, CAUSAL != 0, float>(S, P, nq, nk);
}

int main(int argc, char** argv) {
    if (argc != 11) return 1;
    const int nq = std::atoi(argv[1]), nk = std::atoi(argv[2]), heads = std::atoi(argv[3]);
    const int kvh = std::atoi(argv[4]), batch = std::atoi(argv[5]), d = std::atoi(argv[6]);
    const float scale = std::strtof(argv[7], nullptr);
    const std::string dir = argv[8];
    const size_t mm_smem = std::strtoull(argv[9], nullptr, 10);
    const size_t sm_smem = std::strtoull(argv[10], nullptr, 10);
    auto q = read(dir + "/q.f32", (size_t)batch * heads * nq * d);
    auto k = read(dir + "/k.f32", (size_t)batch * kvh * nk * d);
    auto v = read(dir + "/v.f32", (size_t)batch * kvh * nk * d);
    std::vector<float> s((size_t)batch * heads * nq * nk, NAN), p(s.size(), NAN);
    std::vector<float> o(q.size(), NAN);
    const unsigned bh = batch * heads;
    emu::launch(mm_nt, dim3{(unsigned)((nk + BN - 1) / BN), (unsigned)((nq + BM - 1) / BM), bh},
                dim3{NAIVE_THREADS, 1, 1}, mm_smem, q.data(), k.data(), s.data(), nq, nk, d,
                heads, kvh, scale);
    emu::launch(sm, dim3{(unsigned)((nq + ROWS - 1) / ROWS), bh, 1}, dim3{NAIVE_THREADS, 1, 1},
                sm_smem, s.data(), p.data(), nq, nk);
    emu::launch(mm_nn, dim3{(unsigned)((d + BN - 1) / BN), (unsigned)((nq + BM - 1) / BM), bh},
                dim3{NAIVE_THREADS, 1, 1}, mm_smem, p.data(), v.data(), o.data(), nq, d, nk,
                heads, kvh, 1.0f);
    FILE* f = std::fopen((dir + "/o.f32").c_str(), "wb");
    std::fwrite(o.data(), sizeof(float), o.size(), f);
    std::fclose(f);
    return 0;
}
