"""flash-attn 2.0.x (`flash-attn-2@2.0`): the forward as release 2.0 launched it.

Read from Dao-AILab/flash-attention at tag v2.0.9 (csrc/flash_attn/; its
src/flash_fwd_launch_template.h is the same in every 2.0.x tag). Why a release of its own:
the decode timings of the Flash-Decoding blog post and of xformers' benchmark ran 2.0.9, and
what 2.0 did at one query token differs from the newest release in kind, not in tiles:
- no split-KV: flash_api.cpp `mha_fwd` calls `run_mha_fwd` straight away (no
  `num_splits_heuristic` or `set_params_splitkv`; both came with 2.2), and
  flash_fwd_launch_template.h `run_flash_fwd` launches `dim3 grid(num_m_block, params.b,
  params.h)`: at one query token one CTA per (batch, head) streams the whole K/V cache;
- no GQA packing: the kernel reads K/V head `bidh / params.h_h_k_ratio` for each query head
  (flash_fwd_kernel.h `compute_attn_1rowblock`), with no `seqlenq_ngroups_swapped` (2.2);
- a causal mask aligned to the top-left corner: `n_block_max = min(n_block_max,
  ceil_div((m_block + 1) * kBlockM, kBlockN))` and `apply_mask_causal` without the
  `seqlen_k - seqlen_q` offset (flash_fwd_kernel.h); 2.1 moved it to the bottom-right, which is
  hbmsim's causal, so the two agree only when seq_q == seq_k and other causal problems are
  refused;
- no window_size (it came with 2.3);
- the compiled head dims 32, 64, 96, 128, 160, 192, 224, 256 (static_switch.h
  `FWD_HEADDIM_SWITCH`; 160 and 224 left in later releases), each with its launch rule
  (`fwd_rule`).
The kernel itself (S, P and O in registers, the next K/V block's cp.async issued during this
block's math, kernel_traits.h `kSmemSize = kSmemQSize + kSmemKVSize`) is the newest release's
`flash_fwd_kernel` (kernels.forward_kernel). The backward is not mirrored: 2.0's
`run_mha_bwd_hdim*` pick other tiles and V placements (flash_bwd_launch_template.h, e.g.
hdim32 keeps V in registers by shared memory, hdim256 has no 99 KB refusal) and its
`Flash_bwd_kernel_traits::kSmemSize` differs from the newest's, so `--pass bwd` is refused.
"""

from __future__ import annotations

from ...gpu.hardware import Hardware
from ...problem.attention import Problem
from ...program.plan import Plan, Tiles
from ..common import (
    assemble,
    check_head_dim,
    head_dim_bucket,
    host_ops_first,
    override_note,
    refuse,
    sm_version,
)
from . import kernels as k2
from .rules import FwdRule, fwd_rule

NAME = "flash-attn-2@2.0"
TAG = "v2.0.9"
# FWD_HEADDIM_SWITCH (v2.0.9 src/static_switch.h): d rounds up to the next compiled head dim
HEAD_DIMS = (32, 64, 96, 128, 160, 192, 224, 256)

# Host-side operations per call, counted from v2.0.9 flash_attn/flash_attn_interface.py
# (FlashAttnQKVPackedFunc.forward) and flash_api.cpp mha_fwd: the .apply (1), the three
# qkv[:, :, i] views (3), torch::empty_like out, softmax_lse and rng_state (3; p only with
# return_softmax), ctx.save_for_backward (1), which alone comes after the launch.
FWD_OPS = 8
FWD_OPS_AFTER = 1


def check(p: Problem, hw: Hardware) -> int:
    """v2.0.9 flash_api.cpp mha_fwd's refusals, and what the release lacks; returns the
    compute capability."""
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
    if p.pass_ != "fwd":
        raise refuse(
            "pass",
            f"{NAME}: only the forward is mirrored (release 2.0's backward picks its own tiles "
            "and shared memory, flash_bwd_launch_template.h, kernel_traits.h); use fwd, or the "
            "latest release",
        )
    return sm


def rule_20(p: Problem, hw: Hardware, sm: int) -> tuple[int, FwdRule]:
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


def make_plan(p: Problem, hw: Hardware, bq: int | None = None, bk: int | None = None) -> Plan:
    """The 2.0 forward: one kernel, grid (num_m_block, b, h), whatever the sequence lengths."""
    sm = check(p, hw)
    d_pad, rule = rule_20(p, hw, sm)
    bm, bn = bq or rule.bm, bk or rule.bn
    kernel, tensors = k2.forward_kernel(p, Tiles(bm, bn), rule, d_pad)
    drop = "dropout" if p.dropout > 0 else "no dropout"
    notes = [
        f"{NAME} sm{sm} hdim{d_pad} {drop}: {rule.why} ({TAG} flash_fwd_launch_template.h)",
        f"release 2.0 ({TAG}): no split-KV and no GQA packing; grid (num_m_block, b, h) = "
        f"{-(-p.seq_q // bm):,} x {p.batch:,} x {p.heads:,} CTAs, each streaming the K/V "
        "blocks of its query head's K/V head (flash_api.cpp mha_fwd, run_flash_fwd)",
    ]
    if d_pad != p.head_dim:
        notes.append(f"head dim {p.head_dim} runs the hdim{d_pad} kernel: MMAs on {d_pad}")
    if p.causal:
        notes.append("causal, seq_q == seq_k: release 2.0's top-left mask is the bottom-right one")
    notes.extend(override_note(bq, bk, (bm, bn)))
    fwd = host_ops_first([kernel], FWD_OPS - FWD_OPS_AFTER)  # for a call timed alone (host.py)
    return assemble(
        "flash-attn-2", p, hw, Tiles(bm, bn), fwd, [], tensors, tuple(notes), FWD_OPS, warp_mma=True
    )


__all__ = ["HEAD_DIMS", "NAME", "TAG", "check", "make_plan", "rule_20"]
