"""Mirror of FlashAttention-3 (`flash_attn_interface.flash_attn_func`, flash-attn `hopper/`):
the warp-specialised Hopper forward kernel (see fa3_rules for its choices) and, in the latest
release, its backward (FlashAttnFunc.backward: backward.py, bwd_rules.py).

The program is the FA2 loop order (Q block outer, K/V streamed, O and the log-sum-exp written
once: algorithms/flash.py `fa2_forward_program`); what is the library's here is the kernel:
- warp specialisation: a producer warpgroup issues the TMA loads of K and V through a
  `kStages` pipeline (the engine issues each load `stages - 1` steps ahead), and kBlockM / 64
  consumer warpgroups run the math with asynchronous warpgroup MMA (wgmma, at the tensor
  cores' peak), overlapping one's softmax with another's GEMMs as the GPU's pipes allow
  (`Kernel.overlap_warpgroups`, pipes.py);
- S, P and O in registers, shared memory for Q and the K/V stages (fa3_rules.smem_bytes);
- whole MMA tiles: a ragged block costs kBlockM x kBlockN x d of tensor-core work;
- clusters of two CTAs (adjacent M blocks of one head) receive K and V by TMA multicast where
  the release uses them (`Kernel.cluster`, `Kernel.multicast`);
- one CTA per SM (the register split takes the whole register file);
- tiles start M block fastest, then head, then batch (StaticPersistentTileScheduler's tile
  order; causal: DynamicPersistentTileScheduler, which hands tiles out in the same order).

The latest release also splits the K/V sequence when the M blocks leave SMs idle and packs a
K/V head's query heads into one row block (split_kernels; flash_api.cpp get_num_splits,
get_pack_gqa; heuristics.h), which decoding takes: its loops are flash-attn 2's split-KV
programs (fa2_splitkv) in FA3's kernel, and its combine is flash-attn 2's.

What it leaves out: the persistent grid (132 CTAs looping over tiles, so a tile's prologue
overlaps the previous tile's epilogue: here each tile is a CTA of its own, started when a slot
frees); the K/V blocks' order (the library walks them from the last down, which only moves
which block is masked first); with a window, which blocks are masked: the library masks the
blocks from n_block_max down to get_n_block_min_causal_local_mask and from
get_n_block_min_before_local_mask down to n_block_min (block.h, whole-block bounds), the
mirror the blocks the band's edges cross (blocks.tile_masked), at most a block more or less
at each edge, a few vector operations per score; fp8's V transpose by the producer
warpgroup (its shared-memory traffic runs beside the consumers and is not charged; its buffer
is counted); the paper's block quantisation and Hadamard rotation of FP8 inputs, which the
library leaves to its caller (it takes one descale factor per batch and K/V head, loaded
here).
"""

from __future__ import annotations

import dataclasses

from ...algorithms.flash import fa2_forward_program
from ...gpu.hardware import Hardware
from ...problem.attention import STAT_ITEMSIZE, Problem
from ...program.plan import Buffer, Kernel, Plan, TensorSpec, Tiles
from ..common import assemble, host_ops_first, override_note, refuse
from ..flash_attn_2.splitkv import splitkv_kernels
from .backward import backward_kernels, with_host_ops
from .bwd_rules import bwd_rule, check_bwd
from .rules import (
    RELEASES,
    Fa3Rule,
    check,
    check_tiles,
    fwd_rule,
    one_split_packing,
    splits_and_packing,
    window,
)

NAME = "flash-attn-3"
# tile order of the persistent schedulers: batch slowest, then head, then M block fastest
GRID_B_H_BLOCK = (0, 1, 2)
OUT_ITEMSIZE_FP8 = 2  # fp8 inputs give a 16-bit output (fp16 in 2024, bf16 since)
DESCALES = ("q_descale", "k_descale", "v_descale")

# Host-side operations per call (hopper/flash_attn_interface.py and flash_api.cpp mha_fwd):
# FlashAttnFunc.apply (1), torch::empty_like out (1), softmax_lse (1), the tile-count
# semaphore (1; torch::zeros when causal or local: one more for its fill; the persistent
# scheduler's `(params.is_causal || params.is_local) && num_splits == 1`),
# ctx.save_for_backward (1),
# which alone comes after the launch (FWD_OPS_AFTER; the rest, below too, come before it);
FWD_OPS = 5
FWD_OPS_AFTER = 1
CAUSAL_OPS = 1
# fp8 without given descale factors: three torch::ones (latest: checked, (b, h_k) each).
FP8_OPS = 3
# split-KV: torch::empty of out_accum and softmax_lse_accum (mha_fwd, num_splits > 1).
SPLIT_OPS = 2
# Backward (FlashAttnFunc.backward, flash_api.cpp mha_bwd): the autograd node (1), torch.
# empty_like of dq, dk, dv (3), in mha_bwd torch::empty of softmax_d, softmax_lse_log2,
# dq_accum (3) and dq_semaphore (1), all before the first launch; after the kernels the
# three dq[..., :d] slices (BWD_OPS_AFTER);
BWD_OPS = 11
BWD_OPS_AFTER = 3
# GQA: the torch::zeros of dk_accum and dv_accum (their fills are kernels, backward.py).
GQA_BWD_OPS = 2


def make_plan(
    p: Problem,
    hw: Hardware,
    bq: int | None = None,
    bk: int | None = None,
    release: str = "latest",
) -> Plan:
    sm = check(p, hw, release)
    if "bwd" in p.pass_:
        check_bwd(p, release)
    if release == "2024-07" and p.windowed:
        raise refuse(
            "window",
            f"{NAME}@2024-07: the beta's flash_attn_func takes causal only (mha_fwd is called "
            "with window_size_left = -1); use the latest release",
        )
    check_tiles(bq, bk)
    rule = fwd_rule(p, release)
    bm, bn = bq or rule.bm, bk or rule.bn
    if (bm, bn) != (rule.bm, rule.bn):  # the consumer warpgroups follow the rows
        rule = dataclasses.replace(rule, bm=bm, bn=bn)
    if release == "2024-07":
        splits, packed = 1, False
    elif "bwd" in p.pass_:  # a training step: FlashAttnFunc, with flash_attn_func's
        splits, packed = 1, one_split_packing(p, rule)  # num_splits=1 (no heuristic)
    else:
        splits, packed = splits_and_packing(p, rule, hw.sm_count)
    notes = [f"{NAME}@{release} sm{sm}: {rule.why} ({_source(release)})"]
    if "bwd" in p.pass_:
        notes.append(
            "a training step's forward is FlashAttnFunc's: flash_attn_func passes num_splits=1, "
            "so no split of K/V (flash_attn_interface.py)"
        )
    if packed and p.seq_q > 1:  # Rows packs one query row per head; more is not modelled
        notes.append(
            f"the library would pack the {p.group_size} query heads of a K/V head into one row "
            f"block (PackGQA); with {p.seq_q} query rows the mirror runs them unpacked"
        )
        packed = False
    if splits > 1 or packed:
        fwd, tensors = split_kernels(p, rule, splits, packed)
        notes.append(
            f"num_splits_heuristic chose {splits} split(s) of K/V"
            + (", then the combine kernel (modelled as flash-attn 2's)" if splits > 1 else "")
            + (
                f"; PackGQA: the {p.group_size} query heads of a K/V head in one row block"
                if packed
                else ""
            )
            + " (flash_api.cpp get_num_splits, get_pack_gqa)"
        )
    else:
        kernel, tensors = forward_kernel(p, rule)
        fwd = [kernel]
    notes += _forward_notes(p, rule, fwd)
    notes.extend(override_note(bq, bk, (bm, bn)))
    ops = FWD_OPS + (CAUSAL_OPS if p.causal or window(p).is_local else 0)
    ops += FP8_OPS if p.dtype == "fp8" else 0
    ops += SPLIT_OPS if splits > 1 else 0
    tiles = Tiles(bm, bn, splits=splits if splits > 1 else None)
    fwd = host_ops_first(fwd, ops - FWD_OPS_AFTER)  # for a call timed alone (host.py)
    if "bwd" not in p.pass_:
        return assemble(NAME, p, hw, tiles, fwd, [], tensors, tuple(notes), ops)
    bwd, grads, brule = _backward(p, bq, bk, FWD_OPS_AFTER if "fwd" in p.pass_ else 0)
    notes.append(f"backward: {brule.why} (flash_bwd_launch_template.h)")
    if bq or bk:
        notes.append(f"backward tiles overridden by the user: {brule.bm} x {brule.bn}")
    bwd_ops = BWD_OPS + (GQA_BWD_OPS if p.group_size > 1 else 0)
    ops = (ops if "fwd" in p.pass_ else 0) + bwd_ops
    if p.pass_ == "bwd":
        tiles = Tiles(brule.bm, brule.bn)
    tensors = {**tensors, **grads}
    return assemble(NAME, p, hw, tiles, fwd, bwd, tensors, tuple(notes), ops)


def _forward_notes(p: Problem, rule, fwd: list) -> list[str]:
    """What the forward's kernel is: its compiled head dim, its warp roles, its clusters and
    its fp8 handling."""
    notes = []
    if rule.d != p.head_dim:
        notes.append(f"head dim {p.head_dim} runs the hdim{rule.d} kernel: MMAs on {rule.d}")
    notes.append(
        f"warp-specialised: 1 producer warpgroup (TMA loads), {rule.consumers} consumer "
        "warpgroups (wgmma) whose softmax and GEMMs overlap"
    )
    if fwd[0].cluster > 1:
        notes.append("clusters of 2 CTAs: K and V reach both by one TMA multicast")
    if p.dtype == "fp8":
        notes.append(
            "fp8 (e4m3): Q, K, V one byte each, O in 16 bits; descale factors loaded per "
            "(batch, K/V head); V transposed in shared memory by the producer (not charged)"
        )
    return notes


def _backward(p: Problem, bq: int | None, bk: int | None, fwd_after: int):
    """The backward's kernels (fa3_backward), its tensors and its tile rule; the host runs
    the forward's last `fwd_after` operations before the backward's first launch."""
    rule = bwd_rule(p)
    if bq or bk:
        rule = dataclasses.replace(rule, bm=bq or rule.bm, bn=bk or rule.bn)
    kernels, tensors = backward_kernels(p, rule)
    gqa = p.group_size > 1
    before = BWD_OPS - BWD_OPS_AFTER + (GQA_BWD_OPS if gqa else 0) + fwd_after
    return with_host_ops(kernels, before, gqa), tensors, rule


def _source(release: str) -> str:
    if release == "2024-07":
        return "hopper/flash_fwd_launch_template.h, the 2024-07 beta"
    return "hopper/tile_size.h"


def _fp8_scaled(p: Problem, tensors: dict, base, kv_head_of):
    """fp8 inputs: a 16-bit output, and the three descale factors of the CTA's batch and K/V
    head loaded first (`kv_head_of` maps the grid's head coordinate to it). Changes
    `tensors` in place; returns the program."""
    o = tensors["O"]
    tensors["O"] = TensorSpec(o.name, o.shape, OUT_ITEMSIZE_FP8, o.role, "16-bit output")
    for name in DESCALES:
        tensors[name] = TensorSpec(
            name, (p.batch, p.kv_heads), STAT_ITEMSIZE, "input", "fp8 descale factor"
        )

    def program(ctx, cta):
        b, h = cta[0], cta[1]
        for name in DESCALES:
            ctx.load("descale", name, (b, kv_head_of(h)))
        base(ctx, cta)

    return program


def split_kernels(p: Problem, rule: Fa3Rule, splits: int, packed: bool):
    """The split and/or packed forward: with splits the SingleTileScheduler's grid (M block,
    split x head, batch), each CTA a range of K/V blocks writing an fp32 partial output and
    its lse, then the combine kernel; with PackGQA a K/V head's query group in one row block.
    The loops are flash-attn 2's split-KV programs (fa2_splitkv), the kernel FA3's."""
    kernels, tensors = splitkv_kernels(
        p,
        rule.bm,
        rule.bn,
        rule.d,
        splits,
        packed,
        name="flash_fwd_kernel_sm90",
        split_band=window(p).is_local,  # block.h: each split a share of the band's blocks
    )
    program = kernels[0].program
    if p.dtype == "fp8":  # a packed block's head coordinate is the K/V head already
        program = _fp8_scaled(p, tensors, program, (lambda h: h) if packed else p.kv_head)
    kernels[0] = dataclasses.replace(
        kernels[0],
        program=program,
        description=f"{kernels[0].description}; {_description(rule)}",
        **_sm90_kernel(p, rule),
    )
    return kernels, tensors


def _description(rule: Fa3Rule) -> str:
    return (
        f"{rule.bm} x {rule.bn} tiles, {rule.consumers} consumer warpgroups + 1 producer; "
        "S, P and O in registers"
    )


def _sm90_kernel(p: Problem, rule: Fa3Rule) -> dict:
    """What makes a kernel FA3's, whatever loop it runs: its shared memory and register
    buffers, its warpgroups and their register split, the K/V pipeline's stages (Kernel
    fields)."""
    bm, bn, it = rule.bm, rule.bn, p.itemsize
    buffers = [
        Buffer("Qi", (bm, rule.d), it),  # smem_q
        Buffer("Kj", (rule.stages, bn, rule.d), it),  # smem_k: kStages
        Buffer("Vj", (rule.stages, bn, rule.d), it),  # smem_v: kStages (smem_o aliases it)
        Buffer("S", (bm, bn), STAT_ITEMSIZE, registers=True),  # tSrS, then P
        Buffer("Oi", (bm, rule.d), STAT_ITEMSIZE, registers=True),  # tOrO
        Buffer("m", (bm,), STAT_ITEMSIZE, registers=True),
        Buffer("l", (bm,), STAT_ITEMSIZE, registers=True),
    ]
    if rule.p_in_smem:
        buffers.append(Buffer("P_smem", (bm, bn), it))  # smem_p for the SS PV GEMM
    if p.dtype == "fp8":
        buffers.append(Buffer("Vt", (rule.stages, bn, rule.d), it))  # smem_vt, the TMA target
        buffers.append(Buffer("descale", (3,), STAT_ITEMSIZE, registers=True))
    return dict(
        buffers=tuple(buffers),
        threads_per_cta=rule.threads,
        stages=rule.stages,
        registers_per_thread=rule.registers_per_thread,
        overlap_warpgroups=rule.consumers,
    )


def forward_kernel(p: Problem, rule: Fa3Rule) -> tuple[Kernel, dict]:
    """compute_attn_ws / FlashAttnFwdSm90: one CTA per (M block, head, batch)."""
    base, grid, tensors = fa2_forward_program(
        p, Tiles(rule.bm, rule.bn), pad=(rule.bm, rule.bn, rule.d)
    )
    program = _fp8_scaled(p, tensors, base, p.kv_head) if p.dtype == "fp8" else base
    kernel = Kernel(
        "flash_fwd_kernel_sm90",
        grid,
        program=program,
        description=_description(rule),
        launch_order=GRID_B_H_BLOCK,
        cluster=rule.cluster,
        multicast=("K", "V") if rule.cluster > 1 else (),
        **_sm90_kernel(p, rule),
    )
    return kernel, tensors


__all__ = ["NAME", "RELEASES", "make_plan"]
