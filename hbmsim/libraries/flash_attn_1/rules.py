"""flash-attn 1.x (the fmha kernels): which kernel traits and splits it picks.

Read from Dao-AILab/flash-attention 1.0.x, csrc/flash_attn/:
- fmha_api.cpp `mha_fwd` / `mha_bwd`: `TORCH_CHECK((head_size % 8 == 0) && (head_size <= 128))`,
  K and V shaped (total_k, num_heads, head_size) like Q (no grouped heads), head dims
  dispatched to the hdim32 / hdim64 / hdim128 kernels, `blocksize_c = head_size > 64 ? 128 :
  256` and max_seqlen_k rounded to it (128 or 256 for short sequences), o_tmp (fp32) when the
  kernel loops over more than one K/V block;
- src/fmha_fwd_hdim{32,64,128}.cu and fmha_bwd_hdim{32,64,128}.cu: `FMHA_kernel_traits<S, D,
  STEP = 16, WARPS_M = 1, WARPS_N, FLAGS>`: key blocks of S = 128 or 256 columns, query steps
  of 16 rows, 4 warps forward and 8 backward; FLAGS 0x08 shares one shared-memory tile for K
  and V and keeps V in registers, 0x100 (the backward on A100) keeps V in shared memory;
- src/fmha_fwd_launch_template.h `num_splits_heuristic_fwd` and fmha_bwd_launch_template.h
  `num_splits_heuristic_bwd`: the forward splits each head's query steps over gridDim.z CTAs
  when batch x heads is small; the backward either loops over K/V blocks in one CTA per head
  or runs one CTA per K/V block (sequence-parallel) with dQ added atomically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...gpu.hardware import Hardware
from ...problem.attention import STAT_ITEMSIZE, Problem
from ..common import head_dim_bucket, refuse, sm_version

HEAD_DIMS = (32, 64, 128)  # run_fmha_fwd: d <= 32, <= 64, <= 128
STEP_M = 16  # Cta_tile_p::M = STEP x WARPS_M = 16 query rows per step
FWD_WARPS = 4  # WARPS_N of the forward traits
BWD_WARPS = 8  # WARPS_N of the backward traits
MAX_FWD_SPLITS = 30  # run_fmha_fwd_loop: std::min(30, ...)


@dataclass(frozen=True)
class Fa1Kernel:
    n: int  # key block (Cta_tile_p::N)
    d: int  # compiled head dim
    v_in_regs: bool
    why: str


def check(p: Problem, hw: Hardware) -> int:
    sm = sm_version(hw)
    if sm < 75:
        raise refuse("gpu", "flash-attn-1: FlashAttention only supports Turing or Ampere GPUs")
    # fmha_api.cpp mha_fwd / mha_bwd: TORCH_CHECK(is_sm8x || is_sm75), is_sm8x being
    # `dprops->major == 8`: a Blackwell part (cc 10.x) is refused. (sm90 is taken by the sm80
    # branch here, see bwd_kernel)
    if sm >= 100:
        raise refuse(
            "gpu",
            "flash-attn-1: FlashAttention 1.x runs on sm75 and sm8x (TORCH_CHECK(is_sm8x || "
            f"is_sm75)); {hw.name} is sm{sm}",
        )
    # fmha_api.cpp: TORCH_CHECK(q_dtype == torch::kFloat16 || (is_sm8x && q_dtype ==
    # torch::kBFloat16)): every other dtype (fp32, fp8) is refused by the same check
    if p.dtype not in ("fp16", "bf16") or (p.dtype == "bf16" and sm < 80):
        raise refuse("dtype", "flash-attn-1: FlashAttention supports fp16, and bf16 on sm80+")
    if p.head_dim % 8 or p.head_dim > 128:
        raise refuse(
            "head_dim", "flash-attn-1: (head_size % 8 == 0) && (head_size <= 128) must hold"
        )
    if p.kv_heads != p.heads:
        raise refuse(
            "kv_heads",
            "flash-attn-1: K and V must have the query's number of heads "
            "(CHECK_SHAPE(k, total_k, num_heads, head_size))",
        )
    if p.causal and p.seq_q != p.seq_k:
        raise refuse(
            "seq_q",
            "flash-attn-1 aligns its causal mask to the top-left corner, hbmsim's is "
            "bottom-right: use seq_q == seq_k for causal flash-attn-1",
        )
    return sm


def max_seqlen_k(p: Problem, d: int) -> int:
    """mha_fwd / mha_bwd: max_seqlen_k rounded up to blocksize_c, then 128 or 256 if short."""
    bc = 128 if d > 64 else 256
    m = -(-p.seq_k // bc) * bc
    if p.seq_k <= 128:
        return 128
    if p.seq_k <= 256:
        return 256
    return m


def fwd_kernel(p: Problem) -> Fa1Kernel:
    d = head_dim_bucket(p.head_dim, HEAD_DIMS)
    s_k = max_seqlen_k(p, d)
    if d == 128:
        return Fa1Kernel(
            128, d, True, "fmha_fwd_hdim128.cu: FMHA_kernel_traits<128, 128, 16, 1, 4, 0x08u>"
        )
    n = 128 if s_k == 128 else 256
    return Fa1Kernel(
        n,
        d,
        True,
        f"fmha_fwd_hdim{d}.cu, max_seqlen_k {s_k}: FMHA_kernel_traits<{n}, {d}, 16, 1, 4, 0x08u>",
    )


def bwd_kernel(p: Problem, sm: int) -> Fa1Kernel:
    d = head_dim_bucket(p.head_dim, HEAD_DIMS)
    s_k = max_seqlen_k(p, d)
    if d == 128:
        return Fa1Kernel(
            128, d, False, "fmha_bwd_hdim128.cu: FMHA_kernel_traits<128, 128, 16, 1, 8, 0x100u>"
        )
    if s_k == 128:
        return Fa1Kernel(
            128,
            d,
            True,
            f"fmha_bwd_hdim{d}.cu, max_seqlen_k 128: FMHA_kernel_traits<128, {d}, 16, 1, 8, 0x08u>",
        )
    if d == 64 and sm == 75:
        return Fa1Kernel(
            128, d, True, "fmha_bwd_hdim64.cu, sm75: FMHA_kernel_traits<128, 64, 16, 1, 8, 0x08u>"
        )
    # hdim64 on sm80 keeps V in shared memory (0x100u), on sm86/sm89 in registers; the sm80
    # branch stands for sm90 too, which this 1.0.x file does not name
    v_regs = d == 32 or (sm // 10 == 8 and sm % 10 > 0)
    flags = "0x08u" if v_regs else "0x100u"
    return Fa1Kernel(
        256,
        d,
        v_regs,
        f"fmha_bwd_hdim{d}.cu, max_seqlen_k {s_k}: FMHA_kernel_traits<256, {d}, 16, 1, 8, {flags}>",
    )


def fwd_smem_bytes(p: Problem, k: Fa1Kernel, loop: bool) -> int:
    """Gemm_Q_K::SMEM_BYTES (+ the softmax-lse tile when looping): Q double-buffered
    (2 x 16 x d), one tile shared by K and V (N x d), the fp32 O tile used to reduce across
    warps (16 x d x 4), and 16 fp32 lse values."""
    it = p.itemsize
    return (
        2 * STEP_M * k.d * it
        + k.n * k.d * it
        + STEP_M * k.d * 4
        + (STEP_M * STAT_ITEMSIZE if loop else 0)
    )


def bwd_smem_bytes(p: Problem, k: Fa1Kernel) -> int:
    """run_fmha_bwd_loop: smem_size_q * 2 + smem_size_v * (V_IN_REGS ? 1 : 2) + smem_size_dq +
    smem_size_s * 2, with smem_size_dq = 16 x D x 4 x WARPS_N and smem_size_s = 16 x N x 2."""
    it = p.itemsize
    q, v = STEP_M * k.d * it, k.n * k.d * it
    dq = STEP_M * k.d * 4 * BWD_WARPS
    s = STEP_M * k.n * 2
    return 2 * q + v * (1 if k.v_in_regs else 2) + dq + 2 * s


def ctas_per_sm(hw: Hardware, smem: int, threads: int) -> int:
    """cudaOccupancyMaxActiveBlocksPerMultiprocessor from what hbmsim knows (shared memory,
    the 1 KiB the system keeps per CTA, threads, the CTA limit); registers are not known."""
    reserve = hw.sram_bytes_per_sm - hw.sram_bytes_per_block
    return max(
        1,
        min(
            hw.sram_bytes_per_sm // (smem + reserve),
            hw.max_ctas_per_sm,
            hw.max_threads_per_sm // threads,
        ),
    )


def num_splits_heuristic_fwd(batch_nheads: int, num_sms: int, ctas: int, max_splits: int) -> int:
    """fmha_fwd_launch_template.h, line for line: the fewest splits whose wave efficiency is
    above 95% of the best."""
    eff = []
    for s in range(1, max_splits + 1):
        n_waves = float(batch_nheads * s) / (num_sms * ctas)
        eff.append(n_waves / math.ceil(n_waves))
    best = max(eff)
    for s in range(1, max_splits + 1):
        if eff[s - 1] > 0.95 * best:
            return s
    return 1


def fwd_splits(p: Problem, hw: Hardware, ctas: int) -> int:
    # `std::min(30, (launch_params.params.seqlen_q + M - 1 / M))`: as written, 1 / M is 0, so
    # the bound is seqlen_q + 16 (30 for any real sequence)
    max_splits = min(MAX_FWD_SPLITS, p.seq_q + STEP_M - 1 // STEP_M)
    return num_splits_heuristic_fwd(p.batch * p.heads, hw.sm_count, ctas, max_splits)


def bwd_splits(p: Problem, hw: Hardware, ctas: int, k: Fa1Kernel) -> int:
    """num_splits_heuristic_bwd: 1 (loop over K/V blocks) or seqlen_k / blocksize
    (sequence-parallel), whichever has the better discounted wave efficiency."""
    seqlen = max_seqlen_k(p, k.d)
    bh, cap = p.batch * p.heads, hw.sm_count * ctas
    n1 = bh / cap
    eff_1 = n1 / math.ceil(n1)
    parallel = seqlen // k.n
    np_ = bh * parallel / cap
    eff_raw = np_ / math.ceil(np_)
    if not p.causal:
        discount = 1 + k.n / seqlen
    else:
        if seqlen // k.n >= 10:
            return parallel
        discount = 1 + 0.5 * k.n / seqlen
    return 1 if eff_1 >= eff_raw / discount else parallel
