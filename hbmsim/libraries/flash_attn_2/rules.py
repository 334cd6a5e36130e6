"""flash-attn 2.x: which kernel, tiles and warps it picks for a problem on a GPU.

Every rule is read from Dao-AILab/flash-attention (2.x, csrc/flash_attn/):
- flash_api.cpp `mha_fwd` / `mha_bwd`: refusals, head-dim rounding, `num_splits_heuristic`
  and `set_params_splitkv` (split-KV), `seqlenq_ngroups_swapped` (GQA decode packing);
- src/flash_fwd_launch_template.h `run_mha_fwd_hdim{32,64,96,128,192,256}` (forward tiles)
  and `run_mha_fwd_splitkv_dispatch` (split-KV tiles);
- src/flash_bwd_launch_template.h `run_mha_bwd_hdim*` (backward tiles);
- local (sliding-window) attention: `mha_fwd`'s window clamps and `set_params_fprop`'s
  is_causal (`window`), src/flash_fwd_launch_template.h `LOCAL_SWITCH` (the Is_local kernel),
  src/flash_fwd_kernel.h / flash_bwd_kernel.h (the block ranges, blocks.py), src/mask.h.
`Flash_fwd_kernel_traits<kHeadDim, kBlockM, kBlockN, kNWarps, ...>` and
`Flash_bwd_kernel_traits<kHeadDim, kBlockM, kBlockN, kNWarps, ..., Is_V_in_regs,
No_double_buffer>` (src/kernel_traits.h) give the shared memory each kernel asks for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...gpu.hardware import Hardware
from ...problem.attention import Problem
from ..common import check_head_dim, head_dim_bucket, refuse, sm_version

# HEADDIM_SWITCH (src/static_switch.h): the compiled head dims; d rounds up to the next one.
HEAD_DIMS = (32, 64, 96, 128, 192, 256)
KIB = 1024


@dataclass(frozen=True)
class FwdRule:
    bm: int  # kBlockM: query rows per CTA
    bn: int  # kBlockN: key rows per step
    warps: int
    why: str


@dataclass(frozen=True)
class BwdRule:
    bm: int
    bn: int
    warps: int
    v_in_regs: bool
    double_buffer_q: bool
    why: str


def check(p: Problem, hw: Hardware, what: str = "flash-attn-2") -> int:
    """The library's refusals (flash_api.cpp mha_fwd); returns the compute capability."""
    sm = sm_version(hw)
    if sm < 80:
        raise refuse("gpu", f"{what}: FlashAttention only supports Ampere GPUs or newer")
    if p.dtype not in ("fp16", "bf16"):
        raise refuse(  # flash_api.cpp: "FlashAttention only support fp16 and bf16 data type"
            "dtype", f"{what}: FlashAttention runs fp16 and bf16 only (got {p.dtype})"
        )
    check_head_dim(p, what)
    return sm


@dataclass(frozen=True)
class Window:
    """The window the kernels see, after flash_api.cpp `mha_fwd`'s clamps and
    `set_params_fprop`'s flags."""

    left: int  # window_size_left after the clamps (-1: none)
    right: int  # window_size_right after the clamps (-1: none)
    is_causal: bool  # params.is_causal: the causal kernels and tiles
    is_local: bool  # Is_local: the local kernels (never together with is_causal)


def window(p: Problem) -> Window:
    """flash_api.cpp mha_fwd: `if (window_size_left >= seqlen_k) window_size_left = -1` (and
    right); `if (seqlen_q == 1 ...) is_causal = false` ("causal=true is the same as
    causal=false in this case"); `if (is_causal) window_size_right = 0`. set_params_fprop:
    `params.is_causal = window_size_left < 0 && window_size_right == 0` ("Causal is the special
    case where window_size_right == 0 and window_size_left < 0"). flash_fwd_launch_template.h
    run_flash_fwd: `LOCAL_SWITCH((params.window_size_left >= 0 || params.window_size_right >=
    0) && !Is_causal, Is_local, ...)`. So a causal problem with a window runs the local kernel,
    and params.is_causal (the tile rules' switch) is false for it."""
    left = -1 if p.window_left >= p.seq_k else p.window_left
    right = -1 if p.window_right >= p.seq_k else p.window_right
    if p.causal and p.seq_q > 1:
        right = 0
    is_causal = left < 0 and right == 0
    return Window(left, right, is_causal, (left >= 0 or right >= 0) and not is_causal)


def fwd_rule(p: Problem, hw: Hardware, sm: int, causal: bool | None = None) -> tuple[int, FwdRule]:
    """(compiled head dim, tiles) of the forward kernel: run_mha_fwd_hdim<d>, switched on
    params.is_causal (flash_api.cpp run_mha_fwd `BOOL_SWITCH(params.is_causal, Is_causal`),
    which is false for local attention (`window`); `causal` gives params.is_causal where a
    release sets it otherwise (release20: the user's flag, unchanged)."""
    d = head_dim_bucket(p.head_dim, HEAD_DIMS)
    drop = p.dropout > 0
    causal = window(p).is_causal if causal is None else causal
    sm8x = sm // 10 == 8 and sm % 10 > 0  # is_sm8x: cc_major == 8 && cc_minor > 0
    where = f"run_mha_fwd_hdim{d}"
    if d == 32:
        return d, FwdRule(128, 128, 4, f"{where}: 128 x 128, 4 warps")
    if d == 64:
        if not drop:
            return d, FwdRule(128, 128, 4, f"{where}, no dropout: 128 x 128, 4 warps")
        return d, FwdRule(128, 64, 4, f"{where}, dropout: 128 x 64, 4 warps")
    if d == 96:
        if sm8x and causal:
            return d, FwdRule(64, 64, 4, f"{where}, sm86/sm89 causal: 64 x 64, 4 warps")
        return d, FwdRule(128, 64, 4, f"{where}: 128 x 64, 4 warps")
    if d == 128:
        if drop:
            return d, FwdRule(128, 32, 4, f"{where}, dropout: 128 x 32, 4 warps")
        if sm8x:
            if causal:
                return d, FwdRule(64, 64, 4, f"{where}, sm86/sm89 causal: 64 x 64, 4 warps")
            return d, FwdRule(128, 32, 4, f"{where}, sm86/sm89: 128 x 32, 4 warps")
        return d, FwdRule(128, 64, 4, f"{where}, sm80/sm90 no dropout: 128 x 64, 4 warps")
    if d == 192:
        if not drop:
            return d, FwdRule(128, 64, 8, f"{where}, no dropout: 128 x 64, 8 warps")
        return d, FwdRule(64, 64, 4, f"{where}, dropout: 64 x 64, 4 warps")
    # d == 256: "For A100, we want to run with 128 x 64 (128KB smem). For H100 we want to run
    # with 64 x 64 (96KB smem) since then we can get 2 CTAs per SM."
    big = hw.sram_bytes_per_block >= 2 * d * (128 + 2 * 64)
    if big and hw.sram_bytes_per_sm < 4 * d * (64 + 2 * 64):
        return d, FwdRule(
            128, 64, 8, f"{where}, max smem/block >= 128 KiB and /SM < 192 KiB: 128 x 64, 8 warps"
        )
    return d, FwdRule(64, 64, 4, f"{where}: 64 x 64, 4 warps")


def bwd_rule(p: Problem, hw: Hardware) -> tuple[int, BwdRule]:
    """(compiled head dim, tiles) of the backward kernel: run_mha_bwd_hdim<d>, which branch on
    cudaDevAttrMaxSharedMemoryPerBlockOptin (hw.sram_bytes_per_block)."""
    d = head_dim_bucket(p.head_dim, HEAD_DIMS)
    smem = hw.sram_bytes_per_block
    drop = p.dropout > 0
    where = f"run_mha_bwd_hdim{d}"
    if d == 32:  # `max_smem_per_block >= 2 * ((3 * 128 + 2 * 128) * Headdim + 2 * 128 * 128)`
        if smem >= 2 * ((3 * 128 + 2 * 128) * d + 2 * 128 * 128):  # 104 KB
            return d, BwdRule(128, 128, 8, not drop, True, f"{where}: 128 x 128, 8 warps")
        return d, BwdRule(  # "96 KB"
            128, 128, 8, True, True, f"{where}, smem < 104 KiB: 128 x 128, 8 warps, V in registers"
        )
    if d == 64:
        if smem >= 144 * KIB:
            return d, BwdRule(
                128, 128, 8, False, True, f"{where}, smem >= 144 KiB: 128 x 128, 8 warps"
            )
        return d, BwdRule(64, 128, 8, True, True, f"{where}: 64 x 128, 8 warps, V in registers")
    if d == 96:
        v_regs = not (smem >= 116 * KIB and drop)
        return d, BwdRule(64, 128, 8, v_regs, True, f"{where}: 64 x 128, 8 warps")
    if d == 128:
        if smem >= 144 * KIB:
            return d, BwdRule(
                64, 128, 8, False, True, f"{where}, smem >= 144 KiB: 64 x 128, 8 warps"
            )
        return d, BwdRule(64, 64, 8, True, True, f"{where}: 64 x 64, 8 warps, V in registers")
    if d == 192:
        if smem >= 136 * KIB:
            return d, BwdRule(64, 64, 8, False, True, f"{where}, smem >= 136 KiB: 64 x 64, 8 warps")
        return d, BwdRule(
            64,
            64,
            8,
            True,
            False,
            f"{where}: 64 x 64, 8 warps, V in registers, no double buffering",
        )
    if smem >= 176 * KIB:  # "H100"
        return d, BwdRule(64, 64, 8, False, True, f"{where}, smem >= 176 KiB: 64 x 64, 8 warps")
    if smem >= 144 * KIB:  # "A100, we don't do double buffering to save smem"
        return d, BwdRule(
            64,
            64,
            8,
            False,
            False,
            f"{where}, smem >= 144 KiB: 64 x 64, 8 warps, no double buffering",
        )
    if drop:  # "sm86 and sm89, max smem is 99 KB. Only works without dropout."
        raise refuse(
            "dropout",
            "flash-attn-2: the head dim 256 backward on GPUs with 99 KB of shared memory only "
            "works without dropout",
        )
    return d, BwdRule(
        64,
        32,
        8,
        True,
        False,
        f"{where}, 99 KiB smem: 64 x 32, 8 warps, V in registers, no double buffering",
    )


# --- split-KV (Flash-Decoding) ---------------------------------------------------------------

SPLITKV_BLOCK_M = 64  # run_mha_fwd_splitkv_dispatch: "kBlockM = 64"
MAX_SPLITS = 128  # set_params_splitkv: num_splits_heuristic(..., 128); "num_splits > 128 not
# supported"


def splitkv_block_n(d: int) -> int:
    """kBlockN of the split-KV kernel: Headdim <= 64 ? 256 : (Headdim <= 128 ? 128 : 64)."""
    return 256 if d <= 64 else (128 if d <= 128 else 64)


def num_splits_heuristic(
    batch_nheads_mblocks: int, num_sms: int, num_n_blocks: int, max_splits: int
) -> int:
    """flash_api.cpp num_splits_heuristic, line for line: the fewest splits whose wave
    efficiency is within 85% of the best, skipping split counts that give the same blocks per
    split as one fewer."""
    if batch_nheads_mblocks >= 0.8 * num_sms:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)

    def ceildiv(a: int, b: int) -> int:
        return -(-a // b)

    def eligible(s: int) -> bool:
        return s == 1 or ceildiv(num_n_blocks, s) != ceildiv(num_n_blocks, s - 1)

    efficiency = []
    best = 0.0
    for s in range(1, max_splits + 1):
        if not eligible(s):
            efficiency.append(0.0)
            continue
        # float arithmetic as in C++: n_waves = float(b*h*m*s) / num_SMs; eff = n/ceil(n)
        n_waves = float(batch_nheads_mblocks * s) / num_sms
        eff = n_waves / math.ceil(n_waves)
        best = max(best, eff)
        efficiency.append(eff)
    for s in range(1, max_splits + 1):
        if eligible(s) and efficiency[s - 1] >= 0.85 * best:
            return s
    return 1


def gqa_packed(p: Problem) -> bool:
    """seqlenq_ngroups_swapped (flash_api.cpp mha_fwd, mha_fwd_kvcache): one query token with
    grouped K/V heads, no dropout, head dim a multiple of 8 -> Q is viewed as (b, ngroups,
    h_k, d), so one CTA row block holds a K/V head's whole query group. Not with a window:
    the condition asks `window_size_left < 0 && window_size_right < 0` (after the clamps)."""
    w = window(p)
    return (
        p.seq_q == 1
        and p.heads > p.kv_heads
        and w.left < 0
        and w.right < 0
        and p.dropout == 0
        and p.head_dim % 8 == 0
    )


def splitkv_splits(p: Problem, hw: Hardware, d: int) -> int:
    """set_params_splitkv: num_splits_heuristic(b * h * num_m_blocks, SMs * 2, num_n_blocks,
    128) with num_m_blocks over kBlockM = 64 rows ("We multiply number of SMs by 2 to hard-code
    the fact that we're using 128 threads per block"); after GQA packing h is the K/V heads
    and the rows are the query group."""
    heads, rows = (p.kv_heads, p.group_size) if gqa_packed(p) else (p.heads, p.seq_q)
    m_blocks = -(-rows // SPLITKV_BLOCK_M)
    n_blocks = -(-p.seq_k // splitkv_block_n(d))
    return num_splits_heuristic(p.batch * heads * m_blocks, hw.sm_count * 2, n_blocks, MAX_SPLITS)
