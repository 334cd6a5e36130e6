"""Mirror of Flash-Decoding: flash-attn >= 2.2 `flash_attn_with_kvcache` (flash_api.cpp
`mha_fwd_kvcache`), forward only.

It always runs the split-KV kernel (`run_mha_fwd(params, stream, /*force_split_kernel=*/true)`)
with kBlockM = 64 and kBlockN = 256 / 128 / 64 by head dim (run_mha_fwd_splitkv_dispatch);
the split count comes from num_splits_heuristic (set_params_splitkv), and the combine kernel
runs only when there is more than one split. One query token with grouped K/V heads is packed
per K/V head (seqlenq_ngroups_swapped), so each K/V head is read once per split, not once per
query head.

With a page size (`Problem.page_size`) the call is given a block table: K and V are read page
by page from a pool, and the table itself is read by every CTA (paged.py).
"""

from __future__ import annotations

import dataclasses

from ...gpu.hardware import Hardware
from ...problem.attention import Problem
from ...problem.paging import block_table, to_pool
from ...program.plan import Plan, Tiles
from ..common import assemble, head_dim_bucket, host_ops_first, override_note, refuse
from . import paged as pg
from . import splitkv as sk
from .call import PACK_OPS, PACK_OPS_AFTER, SPLIT_OPS
from .mirror import local_note
from .rules import HEAD_DIMS, SPLITKV_BLOCK_M, check, gqa_packed, splitkv_block_n
from .rules import splitkv_splits as heuristic

NAME = "flash-decoding"

# Host-side operations per call (flash_attn_interface.py flash_attn_with_kvcache and
# mha_fwd_kvcache): the fwd_kvcache call (1), torch::empty of out and softmax_lse (2);
FWD_OPS = 3
# split-KV's and GQA packing's operations are flash_attn_func's (call.py): PACK_OPS_AFTER of
# PACK_OPS come after the launch, the others, FWD_OPS and SPLIT_OPS before it


def make_plan(p: Problem, hw: Hardware, bq: int | None = None, bk: int | None = None) -> Plan:
    if p.pass_ != "fwd":
        raise refuse("pass", f"{NAME}: flash_attn_with_kvcache is forward only; use fwd")
    if p.dropout > 0:
        raise refuse("dropout", f"{NAME}: flash_attn_with_kvcache has no dropout; use 0")
    sm = check(p, hw, NAME)
    paged = p.page_size is not None
    if paged:
        pg.check(p, NAME)
    d_pad = head_dim_bucket(p.head_dim, HEAD_DIMS)
    packed = gqa_packed(p)
    # paged: the heuristic sees the cache as whole pages (paged.share_k)
    splits = heuristic(dataclasses.replace(p, seq_k=pg.share_k(p)) if paged else p, hw, d_pad)
    bm, bn = bq or SPLITKV_BLOCK_M, bk or splitkv_block_n(d_pad)
    if paged and p.page_size % bn:
        raise refuse(
            "bk",
            f"{NAME}: with page_size {p.page_size:,} a K/V block must not cross a page: bk must "
            f"divide it (got {bn:,})",
        )
    kernels, tensors = sk.splitkv_kernels(p, bm, bn, d_pad, splits, packed, paged=paged)
    notes = [
        f"{NAME} sm{sm} hdim{d_pad}: split-KV kernel {bm} x {bn}, 4 warps "
        "(run_mha_fwd_splitkv_dispatch: kBlockM = 64, kBlockN by head dim)",
        f"num_splits_heuristic chose {splits} split(s) of K/V (flash_api.cpp "
        "set_params_splitkv)" + ("; the combine kernel adds them" if splits > 1 else ""),
    ]
    notes.extend(local_note(p))
    if paged:
        notes.append(
            f"paged K/V: {p.pages:,} page(s) of {p.page_size:,} tokens per sequence through an "
            f"int32 block table, page j of sequence b at pool page j * {p.batch} + b; the "
            "split-KV kernel reads 2 + 4 (blocks - 1) table entries per CTA "
            "(flash_fwd_kernel.h compute_attn_1rowblock_splitkv)"
        )
    ops = FWD_OPS + (SPLIT_OPS if splits > 1 else 0)
    if packed:
        notes.append(
            f"one query token, {p.group_size} query heads per K/V head: the group is packed "
            "into one row block per K/V head (seqlenq_ngroups_swapped)"
        )
        ops += PACK_OPS
    notes.extend(override_note(bq, bk, (bm, bn)))
    tiles = Tiles(bm, bn, splits=splits)
    # for a call timed alone (host.py)
    kernels = host_ops_first(kernels, ops - (PACK_OPS_AFTER if packed else 0))
    plan = assemble(NAME, p, hw, tiles, kernels, [], tensors, tuple(notes), ops, warp_mma=True)
    if not paged:
        return plan
    stored = {
        "K": lambda x: to_pool(p, x["K"]),
        "V": lambda x: to_pool(p, x["V"]),
        "block_table": lambda x: block_table(p),
    }
    return dataclasses.replace(plan, stored_inputs=stored)
