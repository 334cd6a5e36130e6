"""flash-attn 2.0.x: which kernels and tiles release 2.0 picks, and what it refuses.

Every rule is read from Dao-AILab/flash-attention at tag v2.0.9 (csrc/flash_attn/):
- flash_api.cpp `mha_fwd` / `mha_bwd`: the refusals (`check`);
- src/static_switch.h `FWD_HEADDIM_SWITCH`: the compiled head dims 32, 64, 96, 128, 160, 192,
  224, 256 (160 and 224 left in later releases);
- src/flash_fwd_launch_template.h `run_mha_fwd_hdim*` (`fwd_rule_20`; the same file in every
  2.0.x tag) and src/flash_bwd_launch_template.h `run_mha_bwd_hdim*` (`bwd_rule_20`);
- src/flash_fwd_kernel.h: the causal mask aligned to the top-left corner, `n_block_max =
  min(n_block_max, ceil_div((m_block + 1) * kBlockM, kBlockN))` and `apply_mask_causal`
  without the `seqlen_k - seqlen_q` offset. 2.1 moved it to the bottom-right, which is hbmsim's
  causal; the two agree only when seq_q == seq_k, and other causal problems are refused.
"""

from __future__ import annotations

from ...gpu.hardware import Hardware
from ...problem.attention import Problem
from ..common import check_head_dim, head_dim_bucket, refuse, sm_version
from .rules import KIB, BwdRule, FwdRule, bwd_rule, fwd_rule

NAME = "flash-attn-2@2.0"
TAG = "v2.0.9"
HEAD_DIMS = (32, 64, 96, 128, 160, 192, 224, 256)  # FWD_HEADDIM_SWITCH: d rounds up to one


def check(p: Problem, hw: Hardware) -> int:
    """v2.0.9 flash_api.cpp mha_fwd's and mha_bwd's refusals, and what the release lacks;
    returns the compute capability."""
    sm = sm_version(hw)
    # `is_sm8x = dprops->major == 8 && dprops->minor >= 0; is_sm90 = major == 9 && minor == 0;
    # TORCH_CHECK(is_sm90 || is_sm8x, "FlashAttention only supports Ampere GPUs or newer.")`
    if not (80 <= sm < 90 or sm == 90):
        raise refuse(
            "gpu",
            f"{NAME}: mha_fwd of {TAG} accepts compute capability 8.x and 9.0 only "
            f"({hw.name} is {sm // 10}.{sm % 10}); use the latest release",
        )
    if p.dtype not in ("fp16", "bf16"):
        raise refuse(  # mha_fwd: "FlashAttention only support fp16 and bf16 data type"
            "dtype", f"{NAME}: FlashAttention runs fp16 and bf16 only (got {p.dtype})"
        )
    check_head_dim(p, NAME)  # "FlashAttention forward only supports head dimension at most 256"
    if p.windowed:
        raise refuse(
            "window",
            f"{NAME}: release 2.0 has no window_size (it came with 2.3); drop --window or use "
            "the latest release",
        )
    if p.causal and p.seq_q != p.seq_k:
        raise refuse(
            "causal",
            f"{NAME}: release 2.0 aligns the causal mask to the top-left corner "
            "(flash_fwd_kernel.h), hbmsim's causal is bottom-right (2.1 and later); they agree "
            f"only when seq_q == seq_k (got {p.seq_q:,} and {p.seq_k:,}); drop --causal or use "
            "the latest release",
        )
    # mha_bwd: `if (head_size > 192) TORCH_CHECK(is_sm80 || is_sm90, "FlashAttention backward
    # for head dim > 192 requires A100/A800 or H100/H800")`
    if "bwd" in p.pass_ and p.head_dim > 192 and sm not in (80, 90):
        raise refuse(
            "head_dim",
            f"{NAME}: the backward for head dim > 192 requires A100/A800 or H100/H800 "
            f"({hw.name} is {sm // 10}.{sm % 10}); use head dim <= 192 or --pass fwd",
        )
    return sm


def fwd_rule_20(p: Problem, hw: Hardware, sm: int) -> tuple[int, FwdRule]:
    """(compiled head dim, tiles) of v2.0.9 flash_fwd_launch_template.h `run_mha_fwd_hdim<d>`,
    switched on the user's causal flag (mha_fwd passes it to set_params_fprop unchanged).
    hdim 32, 64, 96, 128, 192 and 256 launch what the newest release launches (rules.fwd_rule,
    the same branches and tiles); 160 and 224 are 2.0's own."""
    d = head_dim_bucket(p.head_dim, HEAD_DIMS)
    sm8x = sm // 10 == 8 and sm % 10 > 0  # is_sm8x = dprops->major == 8 && dprops->minor > 0
    where = f"run_mha_fwd_hdim{d}"
    if d == 160:
        # "For A100, H100, 128 x 32 is the fastest. For sm86 or sm89, 64 x 64 is the fastest
        # for causal (because it's square), and 128 x 64 with 8 warps is the fastest for
        # non-causal."
        if not sm8x:
            return d, FwdRule(128, 32, 4, f"{where}, sm80/sm90: 128 x 32, 4 warps")
        if p.causal:
            return d, FwdRule(64, 64, 4, f"{where}, sm86/sm89 causal: 64 x 64, 4 warps")
        return d, FwdRule(128, 64, 8, f"{where}, sm86/sm89: 128 x 64, 8 warps")
    if d == 224:
        # `if (max_smem_per_block >= 2 * Headdim * (128 + 2 * 64))  // 112 KB`
        if hw.sram_bytes_per_block >= 2 * d * (128 + 2 * 64):
            return d, FwdRule(128, 64, 8, f"{where}, max smem/block >= 112 KiB: 128 x 64, 8 warps")
        return d, FwdRule(64, 64, 4, f"{where}: 64 x 64, 4 warps")
    return fwd_rule(p, hw, sm, causal=p.causal)


def bwd_rule_20(p: Problem, hw: Hardware) -> tuple[int, BwdRule]:
    """(compiled head dim, tiles) of v2.0.9 flash_bwd_launch_template.h `run_mha_bwd_hdim<d>`
    (Flash_bwd_kernel_traits<Headdim, kBlockM, kBlockN, kNWarps, ..., Is_V_in_regs,
    No_double_buffer>), switched on cudaDevAttrMaxSharedMemoryPerBlockOptin
    (hw.sram_bytes_per_block). Every branch launches run_flash_bwd_seqk_parallel. hdim 32,
    64, 96, 128 and 192 launch what the newest release launches (rules.bwd_rule, the same
    branches), and so does hdim 256 on the GPUs 2.0 runs it on (sm80 and sm90, `check`: 144 KiB
    or more); 160 and 224 are 2.0's own."""
    d = head_dim_bucket(p.head_dim, HEAD_DIMS)
    where = f"run_mha_bwd_hdim{d}"
    if d == 160:
        if hw.sram_bytes_per_block >= 116 * KIB:
            return d, BwdRule(64, 64, 8, False, True, f"{where}, smem >= 116 KiB: 64 x 64, 8 warps")
        return d, BwdRule(
            64, 64, 8, False, False, f"{where}: 64 x 64, 8 warps, no double buffering"
        )
    if d == 224:
        return d, BwdRule(64, 64, 8, False, True, f"{where}: 64 x 64, 8 warps")
    return bwd_rule(p, hw)


__all__ = ["HEAD_DIMS", "NAME", "TAG", "bwd_rule_20", "check", "fwd_rule_20"]
