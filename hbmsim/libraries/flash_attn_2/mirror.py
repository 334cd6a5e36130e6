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
from ..common import assemble, override_note
from . import kernels as k2
from . import release20
from . import splitkv as sk
from .call import (
    FWD_OPS,
    FWD_OPS_AFTER,
    PACK_OPS,
    PACK_OPS_AFTER,
    SPLIT_OPS,
    backward,
    place_host_ops,
)
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
    bwd, tiles = [], fwd_tiles
    if "bwd" in p.pass_:
        d_bwd, brule = bwd_rule(p, hw)
        bwd, grads, bt, note = backward(p, bq, bk, d_bwd, brule, "flash_bwd_launch_template.h")
        tensors = {**tensors, **grads}
        notes.append(note)
        tiles = bt if p.pass_ == "bwd" else tiles
    # the forward's last ops (FWD_OPS_AFTER, and PACK_OPS_AFTER) come after its launch
    fwd_after = FWD_OPS_AFTER + (PACK_OPS_AFTER if packed else 0)
    fwd, bwd, ops = place_host_ops(p, fwd, bwd, fwd_ops, fwd_after)
    return assemble(NAME, p, hw, tiles, fwd, bwd, tensors, tuple(notes), ops, warp_mma=True)
