"""FlashAttention-3's backward (flash-attn `hopper/`, the latest release): which tiles, warps
and shared memory its sm90 kernel picks, and what it refuses.

Read from Dao-AILab/flash-attention `hopper/`:
- `flash_bwd_launch_template.h` `run_mha_bwd_hdim{64,96,128,192,256}` (the `Arch >= 90`
  branch: kBlockM, kBlockN, Stages_dO, Stages_dS, SdP_swapAB, dKV_swapAB, dQ_swapAB,
  NumMmaWarpGroups, AtomLayoutMSdP, AtomLayoutNdKV, AtomLayoutMdQ, V_in_regs) and
  `run_flash_bwd` (the Q pipeline's `Stages = 2` on sm90; the kernel sequence);
- `flash_api.cpp` `mha_bwd` (fp16 and bf16 only; head dims rounded as the forward's; the same
  window clamps as the forward, so `rules.window` holds; kBlockM_sm90 / kBlockN_sm90 restate
  the launch template's tiles);
- `mainloop_bwd_sm90_tma_gmma_ws.hpp` `TensorStorage` (shared memory: K, V, the fp32 dQ
  staging buffer when `dQacc_use_TMA = kHeadDim < 256`, kStages of Q, kStages_dO of dO, the
  LSE and dPsum rows of each Q stage, P unless `Mma_dKV_is_RS`, dS) and `Mma_dKV_is_RS =
  AtomLayoutMSdP == 1 && AtomLayoutNdKV == NumMmaWarpGroups && SdP_swapAB && !dKV_swapAB`;
- `flash_bwd_kernel_sm90.h` (one load warpgroup, `LoadRegisterRequirement = NumMmaWarpGroups
  == 2 ? 24 : 32`, `MmaRegisterRequirement = NumMmaWarpGroups == 2 ? 240 : 160`,
  MinBlocksPerMultiprocessor 1).

Softcapping (the causal hdim64 kernel's 96 x 128 tiles) and deterministic mode (semaphores
ordering the dQ adds) are not options of hbmsim's problem, so their branches are not mirrored.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...problem.attention import STAT_ITEMSIZE, Problem
from ..common import head_dim_bucket, refuse
from .rules import HEAD_DIMS_LATEST, WARPGROUP, window

Q_STAGES = 2  # run_flash_bwd: `static constexpr int Stages = Arch >= 90 ? 2 : ...`
LSE_ROW_ALIGN = 64  # SmemLayoutLSE: stride round_up(kBlockM, 64) per stage
TMA_DQ_MAX_HEAD_DIM = 256  # dQacc_use_TMA = kHeadDim < 256: else atomicAdd from registers


@dataclass(frozen=True)
class Fa3BwdRule:
    bm: int  # kBlockM: query rows per step of the loop over Q blocks
    bn: int  # kBlockN: key rows per CTA
    d: int  # the compiled head dim
    stages_do: int  # Stages_dO (Q has Q_STAGES)
    stages_ds: int  # Stages_dS: copies of the P and dS tiles in shared memory
    consumers: int  # NumMmaWarpGroups
    dkv_rs: bool  # Mma_dKV_is_RS: P and dS feed the dV, dK GEMMs from registers (no smem P)
    dq_swap_ab: bool
    v_in_regs: bool  # V_in_regs (Mma_dP_is_RS): the dP GEMM reads V from registers
    why: str

    @property
    def threads(self) -> int:
        return (self.consumers + 1) * WARPGROUP  # MaxThreadsPerBlock: + NumLoadWarpGroups

    @property
    def registers_per_thread(self) -> int:
        """setmaxnreg's split of the 64 K registers (flash_bwd_kernel_sm90.h), per thread as
        their average: one CTA per SM."""
        load, mma = (24, 240) if self.consumers == 2 else (32, 160)
        return (load + self.consumers * mma) // (self.consumers + 1)

    @property
    def dq_through_smem(self) -> bool:
        """dQacc_use_TMA: the dQ partial goes through shared memory to a TMA bulk reduce-add
        (store_dq, a producer warp); hdim 256 adds it from registers with atomicAdd."""
        return self.d < TMA_DQ_MAX_HEAD_DIM


def check_bwd(p: Problem, release: str, what: str = "flash-attn-3") -> None:
    """What the backward refuses beyond the forward's checks (rules.check)."""
    if release == "2024-07":
        raise refuse(
            "pass",
            f"{what}@2024-07: the beta's backward (its own launch template) is not mirrored; "
            "use the latest release for bwd and fwd+bwd",
        )
    if p.dtype not in ("fp16", "bf16"):
        raise refuse(  # mha_bwd: "FlashAttention only support fp16 and bf16 data type"
            "dtype",
            f"{what}: FlashAttention-3 has no {p.dtype} backward (mha_bwd runs fp16 and bf16 "
            "only); use fp16 or bf16, or --pass fwd",
        )


def bwd_rule(p: Problem) -> Fa3BwdRule:
    """run_mha_bwd_hdim<d>'s sm90 branch, switched on params.is_causal / is_local
    (CAUSAL_LOCAL_SWITCH) as mha_bwd sets them (`window`)."""
    d = head_dim_bucket(p.head_dim, HEAD_DIMS_LATEST)
    w = window(p)
    masked = w.is_causal or w.is_local
    where = f"run_mha_bwd_hdim{d} sm90"
    # (kBlockM, kBlockN, Stages_dO, Stages_dS, SdP_swapAB, dKV_swapAB, dQ_swapAB,
    #  NumMmaWarpGroups, AtomLayoutMSdP, AtomLayoutNdKV, AtomLayoutMdQ, V_in_regs)
    if d == 64:  # <128, 128, 64, ..., 2, 2, true, false, false, 2, 1, 2, 2, false>
        args = (128, 128, 2, 2, True, False, False, 2, 1, 2, 2, False)
    elif d == 96:  # <64, 128, 96, ..., 2, 2, true, false, false, 2, 1, 2, 1, true>
        args = (64, 128, 2, 2, True, False, False, 2, 1, 2, 1, True)
    elif d == 128 and masked:  # Is_causal || Is_local: <64, 128, 128, ..., 2, 2, true,
        args = (64, 128, 2, 2, True, False, False, 2, 1, 2, 1, False)  # false, false, 2, 1, 2, 1>
    elif d == 128:  # <80, 128, 128, ..., 2, 2, true, false, true, 2, 1, 2, 1, false>
        args = (80, 128, 2, 2, True, False, True, 2, 1, 2, 1, False)
    elif d == 192:  # <64, 96, 192, ..., 1, 1, false, true, false, 3, 1, 1, 1, false>
        args = (64, 96, 1, 1, False, True, False, 3, 1, 1, 1, False)
    else:  # hdim256: <64, 80, 256, ..., 1, 1, false, true, true, 2, 1, 1, 1, false>
        args = (64, 80, 1, 1, False, True, True, 2, 1, 1, 1, False)
    bm, bn, st_do, st_ds, sdp_swap, dkv_swap, dq_swap, wgs, atom_sdp, atom_dkv, _, v_regs = args
    dkv_rs = atom_sdp == 1 and atom_dkv == wgs and sdp_swap and not dkv_swap
    mask = " causal" if w.is_causal else (" local" if w.is_local else "")
    return Fa3BwdRule(
        bm,
        bn,
        d,
        st_do,
        st_ds,
        wgs,
        dkv_rs,
        dq_swap,
        v_regs,
        f"{where}{mask}: {bm} x {bn}, {wgs} MMA warpgroups + 1 producer, Q in {Q_STAGES} "
        f"stages, dO in {st_do}, dS in {st_ds}"
        + ("" if dkv_rs else ", P through shared memory")
        + ("" if d < TMA_DQ_MAX_HEAD_DIM else ", dQ added from registers"),
    )


def bwd_smem_bytes(rule: Fa3BwdRule, itemsize: int) -> int:
    """TensorStorage of CollectiveMainloopBwdSm90 (alignment padding left out)."""
    bm, bn, d = rule.bm, rule.bn, rule.d
    kv = 2 * bn * d * itemsize  # smem_k, smem_v
    dqacc = bm * d * STAT_ITEMSIZE if rule.dq_through_smem else 0  # smem_dqacc
    q = Q_STAGES * bm * d * itemsize  # smem_q
    do = rule.stages_do * bm * d * itemsize  # smem_do
    stats = 2 * lse_cosize(bm) * STAT_ITEMSIZE  # smem_lse, smem_dpsum
    pds = (1 if rule.dkv_rs else 2) * rule.stages_ds * bm * bn * itemsize  # smem_p, smem_ds
    return kv + dqacc + q + do + stats + pds


def lse_cosize(bm: int) -> int:
    """Floats SmemLayoutLSE spans: Shape<kBlockM, kStages>, Stride<1, round_up(kBlockM, 64)>."""
    return (Q_STAGES - 1) * (-(-bm // LSE_ROW_ALIGN) * LSE_ROW_ALIGN) + bm
