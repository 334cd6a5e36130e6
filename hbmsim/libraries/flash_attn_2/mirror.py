"""Mirror of flash-attn 2.x (`flash_attn_func` / `flash_attn_qkvpacked_func`, sm80 kernels).

Forward: the regular kernel with the launch template's tiles (fa2_rules.fwd_rule), or, without
dropout and when the grid would leave SMs idle, the split-KV kernel and its combine
(`set_params_splitkv`: mha_fwd runs num_splits_heuristic whenever p_dropout == 0). One query
token with grouped K/V heads is packed per K/V head (seqlenq_ngroups_swapped). Backward: the
sequence-parallel kernel sequence of run_flash_bwd_seqk_parallel (fa2_rules.bwd_rule).
Release 2.0 (`flash-attn-2@2.0`), without split-KV or GQA packing, is release20's.
"""

from __future__ import annotations

from ...errors import ConfigError
from ...gpu.hardware import Hardware
from ...problem.attention import Problem
from ...program.plan import Plan, Tiles
from ..common import assemble, host_ops_first, override_note
from . import kernels as k2
from . import release20
from . import splitkv as sk
from .rules import (
    SPLITKV_BLOCK_M,
    bwd_rule,
    check,
    fwd_rule,
    gqa_packed,
    splitkv_block_n,
    splitkv_splits,
    window,
)

NAME = "flash-attn-2"
# "latest", the default: the newest 2.x (the rules' sources); "2.0": release 2.0.x as tag
# v2.0.9 launched it (release20: no split-KV, no GQA packing, top-left causal)
RELEASES = ("latest", "2.0")

# Host-side operations one call runs besides its kernel launches, counted from the 2.x
# wrapper (flash_attn/flash_attn_interface.py) and flash_api.cpp:
# forward: FlashAttnQKVPackedFunc.apply (1), the three qkv[:, :, i] views (3), in mha_fwd the
# torch::empty of out, softmax_lse and rng_state (3), ctx.save_for_backward (1), which alone
# comes after the launch (FWD_OPS_AFTER);
FWD_OPS = 8
FWD_OPS_AFTER = 1
# split-KV: torch::empty of softmax_lse_accum and out_accum (set_params_splitkv), before;
SPLIT_OPS = 2
# GQA packing: q.reshape(...).transpose(1, 2) before the launch, and out's reshape and
# transpose back after it;
PACK_OPS = 4
PACK_OPS_AFTER = 2
# backward: the autograd node (1), torch.empty dqkv (1) and its three views (3), in mha_bwd
# the torch::empty of softmax_d and dq_accum (2), then after the kernels dqkv[..., :d] (1);
BWD_OPS = 8
BWD_OPS_AFTER = 1
# GQA backward: torch::empty of dk_expanded and dv_expanded (the at::sum_out reduction that
# follows is a kernel).
GQA_BWD_OPS = 2


def local_note(p: Problem) -> list[str]:
    """What a window does to the call, in the library's words (rules.window)."""
    w = window(p)
    if w.is_local:
        return [
            f"window_size=({w.left}, {w.right}) after mha_fwd's clamps: the Is_local kernels "
            "(LOCAL_SWITCH), each row block visiting K/V blocks [n_block_min, n_block_max) of "
            "its band, every one masked (flash_fwd_kernel.h, mask.h)"
        ]
    if p.windowed:
        return [
            f"window ({p.window_left}, {p.window_right}) hides nothing beyond "
            + ("the causal mask" if w.is_causal else "the keys")
            + ": mha_fwd clamps it, and the "
            + ("causal" if w.is_causal else "plain")
            + " kernel runs"
        ]
    return []


def make_plan(
    p: Problem,
    hw: Hardware,
    bq: int | None = None,
    bk: int | None = None,
    release: str = "latest",
) -> Plan:
    if release not in RELEASES:
        raise ConfigError("release", f"must be one of {', '.join(RELEASES)} (got {release!r})")
    if release == "2.0":
        return release20.make_plan(p, hw, bq, bk)
    sm = check(p, hw, NAME)
    d_pad, rule = fwd_rule(p, hw, sm)
    packed = gqa_packed(p)
    # set_params_splitkv: "SplitKV is not implemented for dropout"
    splits = splitkv_splits(p, hw, d_pad) if p.dropout == 0 else 1
    drop = "dropout" if p.dropout > 0 else "no dropout"
    head = f"{NAME} sm{sm} hdim{d_pad} {drop}"
    notes = [] if splits > 1 else [f"{head}: {rule.why} (flash_fwd_launch_template.h)"]
    if d_pad != p.head_dim:
        notes.append(f"head dim {p.head_dim} runs the hdim{d_pad} kernel: MMAs on {d_pad}")
    fwd, tensors = [], {}
    fwd_ops = FWD_OPS
    if splits > 1:
        bm, bn = SPLITKV_BLOCK_M, splitkv_block_n(d_pad)
        bm, bn = bq or bm, bk or bn
        fwd, tensors = sk.splitkv_kernels(p, bm, bn, d_pad, splits, packed)
        notes.append(
            f"{head}: num_splits_heuristic chose {splits} splits of K/V (flash_api.cpp): split-KV "
            f"kernel {bm} x {bn}, 4 warps, then the combine kernel"
        )
        fwd_ops += SPLIT_OPS
        fwd_tiles = Tiles(bm, bn, splits=splits)
    else:
        bm, bn = bq or rule.bm, bk or rule.bn
        if packed:
            fwd, tensors = sk.splitkv_kernels(
                p, bm, bn, d_pad, 1, True, name="flash_fwd_kernel", warps=rule.warps
            )
        else:
            kernel, tensors = k2.forward_kernel(p, Tiles(bm, bn), rule, d_pad)
            fwd = [kernel]
        fwd_tiles = Tiles(bm, bn)
    if packed:
        notes.append(
            f"one query token, {p.group_size} query heads per K/V head: the group is packed "
            "into one row block per K/V head (seqlenq_ngroups_swapped)"
        )
        fwd_ops += PACK_OPS
    notes.extend(local_note(p))
    notes.extend(override_note(bq, bk, (fwd_tiles.bq, fwd_tiles.bk)))
    bwd = []
    tiles = fwd_tiles
    if "bwd" in p.pass_:
        d_bwd, brule = bwd_rule(p, hw)
        bt = Tiles(bq or brule.bm, bk or brule.bn)
        bwd, grads = k2.backward_kernels(p, bt, brule, d_bwd)
        tensors = {**tensors, **grads}
        notes.append(f"backward: {brule.why} (flash_bwd_launch_template.h)")
        if p.pass_ == "bwd":
            tiles = bt
    bwd_ops = BWD_OPS + (GQA_BWD_OPS if p.group_size > 1 else 0) if bwd else 0
    ops = (fwd_ops if "fwd" in p.pass_ else 0) + bwd_ops
    # where the host runs them, for a call timed alone (host.py): the forward's before its
    # launch but FWD_OPS_AFTER (and PACK_OPS_AFTER), the backward's before its first kernel
    # but BWD_OPS_AFTER; in a forward + backward call the forward's last ones come before the
    # backward's first kernel
    fwd_after = FWD_OPS_AFTER + (PACK_OPS_AFTER if packed else 0)
    if "fwd" in p.pass_:
        fwd = host_ops_first(fwd, fwd_ops - fwd_after)
    if bwd:
        bwd_before = bwd_ops - BWD_OPS_AFTER + (fwd_after if "fwd" in p.pass_ else 0)
        bwd = host_ops_first(bwd, bwd_before)
    return assemble(NAME, p, hw, tiles, fwd, bwd, tensors, tuple(notes), ops, warp_mma=True)
