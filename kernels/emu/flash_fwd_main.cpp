// Runs flash_fwd on the CPU: flash_fwd_main NQ NK HEADS KV_HEADS BATCH SCALE DIR SMEM_BYTES
// reads DIR/{q,k,v}.f32 (float32, row-major (batch, heads, seq, d)), writes DIR/{o,lse}.f32.
// SMEM_BYTES is what the host allocates for shared memory: the caller passes the simulator's
// footprint function, and AddressSanitizer catches a kernel that needs more.
// BQ, BK, HEAD_DIM, CAUSAL come from -D flags, as for the GPU build; WMMA=1 picks flash_fwd_wmma.
#include "cuda_emu.h"
#if WMMA  // the tensor-core kernel: BQ / 16 warps
#include "../flash_fwd_wmma.cuh"
#define FLASH_BODY flash_fwd_wmma_body
#define THREADS (BQ / 16 * 32)
#else  // the scalar kernel: one thread per query row
#include "../flash_fwd.cuh"
#define FLASH_BODY flash_fwd_body
#define THREADS BQ
#endif

#include <cstdio>
#include <cstdlib>
#include <string>

static std::vector<float> read(const std::string& path, size_t n) {
    std::vector<float> v(n);
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f || std::fread(v.data(), sizeof(float), n, f) != n) {
        std::fprintf(stderr, "cannot read %zu floats from %s\n", n, path.c_str());
        std::exit(2);
    }
    std::fclose(f);
    return v;
}

static void write(const std::string& path, const std::vector<float>& v) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(v.data(), sizeof(float), v.size(), f) != v.size()) std::exit(3);
    std::fclose(f);
}

static void kernel(const float* Q, const float* K, const float* V, float* O, float* LSE, int nq,
                   int nk, int heads, int kv_heads, float scale) {
    FLASH_BODY<BQ, BK, HEAD_DIM, CAUSAL != 0, float>(Q, K, V, O, LSE, nq, nk, heads, kv_heads,
                                                     scale);
}

int main(int argc, char** argv) {
    if (argc != 9) {
        std::fprintf(stderr, "usage: %s NQ NK HEADS KV_HEADS BATCH SCALE DIR SMEM_BYTES\n",
                     argv[0]);
        return 1;
    }
    const int nq = std::atoi(argv[1]), nk = std::atoi(argv[2]), heads = std::atoi(argv[3]);
    const int kv_heads = std::atoi(argv[4]), batch = std::atoi(argv[5]);
    const float scale = std::strtof(argv[6], nullptr);
    const std::string dir = argv[7];
    const size_t d = HEAD_DIM;
    auto q = read(dir + "/q.f32", (size_t)batch * heads * nq * d);
    auto k = read(dir + "/k.f32", (size_t)batch * kv_heads * nk * d);
    auto v = read(dir + "/v.f32", (size_t)batch * kv_heads * nk * d);
    std::vector<float> o(q.size(), NAN), lse((size_t)batch * heads * nq, NAN);  // poisoned
    const size_t smem = std::strtoull(argv[8], nullptr, 10);
    dim3 grid{(unsigned)((nq + BQ - 1) / BQ), (unsigned)(batch * heads), 1};
    emu::launch(kernel, grid, dim3{THREADS, 1, 1}, smem, q.data(), k.data(), v.data(), o.data(),
                lse.data(), nq, nk, heads, kv_heads, scale);
    write(dir + "/o.f32", o);
    write(dir + "/lse.f32", lse);
    return 0;
}
