"""Mirror of flash-attn 1.x (`flash_attn_unpadded_qkvpacked_func`, the fmha kernels): the
FlashAttention v1 the FlashAttention-2 paper timed. See fa1_rules (choices) and fa1_kernels
(programs).

Tiles are not free parameters of the library: 16-row query steps and N-key blocks are fixed by
its kernel traits; `bq`, `bk` override only the key block N (bq must stay 16, the MMA step).
"""

from __future__ import annotations

from ...errors import ConfigError
from ...gpu.hardware import Hardware
from ...problem.attention import Problem
from ...program.plan import Plan, Tiles
from ..common import assemble
from . import backward as b1
from . import kernels as k1
from . import rules as r1

NAME = "flash-attn-1"

# Host-side operations per call (flash_attn/flash_attn_interface.py 1.x and fmha_api.cpp):
# forward: the autograd Function apply (1), the qkv[:, 0], [:, 1], [:, 2] views (3),
# torch.empty_like for out (1), softmax_lse (1), ctx.save_for_backward (1); o_tmp when the
# kernel loops (1); with dropout, torch.cuda.get_rng_state (1).
FWD_OPS = 7
# backward: torch.empty_like dqkv (1) and its three views (3), softmax_d (1), the autograd
# node (1); dq_tmp when looping (1); with dropout, get/set of the RNG state (3).
BWD_OPS = 6


RELEASES = ("1.0", "0.1")
# "1.0": flash-attn 1.0.x, which the FlashAttention-2 paper timed: forward splits over the
# query steps (num_splits_heuristic_fwd, "[2022-11-25]") and the sequence-parallel backward.
# "0.1": the kernels the FlashAttention paper (2022) timed, before those heuristics: one CTA per
# (batch, head) forward and backward, nothing split.


def make_plan(
    p: Problem,
    hw: Hardware,
    bq: int | None = None,
    bk: int | None = None,
    release: str = "1.0",
) -> Plan:
    if release not in RELEASES:
        raise ConfigError("release", f"must be one of {', '.join(RELEASES)} (got {release!r})")
    sm = r1.check(p, hw)
    if bq is not None and bq != r1.STEP_M:
        raise ConfigError("bq", f"flash-attn-1 steps 16 query rows at a time; got {bq}")
    fk = r1.fwd_kernel(p)
    if bk:
        fk = r1.Fa1Kernel(bk, fk.d, fk.v_in_regs, f"key blocks overridden by the user: {bk}")
    loop = -(-p.seq_k // fk.n) > 1
    fwd_smem = r1.fwd_smem_bytes(p, fk, loop)
    ctas = r1.ctas_per_sm(hw, fwd_smem, r1.FWD_WARPS * 32)
    splits = r1.fwd_splits(p, hw, ctas) if release == "1.0" else 1
    kernel, tensors = k1.forward_kernel(p, fk, splits)
    notes = [
        f"{NAME} {release} sm{sm} hdim{fk.d}: {fk.why}: 16-row query steps x {fk.n}-key "
        "blocks, 4 warps",
        f"num_splits_heuristic_fwd: {splits} split(s) of each head's query steps for "
        f"batch x heads = {p.batch * p.heads} on {hw.sm_count} SMs x {ctas} CTAs/SM "
        "(occupancy from shared memory; registers are not modelled)"
        if release == "1.0"
        else "release 0.1: one CTA per (batch, head), no splits",
    ]
    ops = FWD_OPS + (1 if loop else 0) + (1 if p.dropout > 0 else 0)
    bwd = []
    tiles = Tiles(r1.STEP_M, fk.n, splits=splits)
    if "bwd" in p.pass_:
        bk_ = r1.bwd_kernel(p, sm)
        if bk:
            bk_ = r1.Fa1Kernel(bk, bk_.d, bk_.v_in_regs, f"key blocks overridden: {bk}")
        bctas = r1.ctas_per_sm(hw, r1.bwd_smem_bytes(p, bk_), r1.BWD_WARPS * 32)
        bsplits = r1.bwd_splits(p, hw, bctas, bk_) if release == "1.0" else 1
        if bsplits > 1:
            bwd, grads = b1.backward_parallel_kernels(p, bk_)
            how = f"sequence-parallel: one CTA per {bk_.n}-key block, dQ added atomically"
        else:
            bwd, grads = b1.backward_loop_kernel(p, bk_)
            how = "one CTA per head looping over the key blocks"
        tensors = {**tensors, **grads}
        notes.append(f"backward: {bk_.why}, 8 warps; num_splits_heuristic_bwd: {how}")
        bloop = -(-p.seq_k // bk_.n) > 1
        ops += BWD_OPS + (1 if bloop else 0) + (3 if p.dropout > 0 else 0)
        if p.pass_ == "bwd":
            ops -= FWD_OPS + (1 if loop else 0) + (1 if p.dropout > 0 else 0)
            tiles = Tiles(r1.STEP_M, bk_.n, splits=bsplits)
    return assemble(NAME, p, hw, tiles, [kernel], bwd, tensors, tuple(notes), ops, warp_mma=True)
