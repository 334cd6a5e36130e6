"""Mirror of flash-attn 2.0.x (`flash-attn-2@2.0`): the call as release 2.0 (tag v2.0.9) ran it.

Why a release of its own: the decode timings of the Flash-Decoding blog post and of xformers'
benchmark ran 2.0.9, and what 2.0 did at one query token differs from the newest release in
kind, not in tiles:
- no split-KV: v2.0.9 flash_api.cpp `mha_fwd` calls `run_mha_fwd` straight away (no
  `num_splits_heuristic` or `set_params_splitkv`; both came with 2.2), and
  flash_fwd_launch_template.h `run_flash_fwd` launches `dim3 grid(num_m_block, params.b,
  params.h)`: at one query token one CTA per (batch, head) streams the whole K/V cache;
- no GQA packing: the kernel reads K/V head `bidh / params.h_h_k_ratio` for each query head
  (flash_fwd_kernel.h `compute_attn_1rowblock`), with no `seqlenq_ngroups_swapped` (2.2);
- no window_size (2.3), and a causal mask aligned top-left (rules20).
The kernels themselves are the newest release's (kernels.py): the forward's S, P and O in
registers with the next K/V block's cp.async issued during this block's math
(kernel_traits.h `kSmemSize = kSmemQSize + kSmemKVSize`), and the backward's
run_flash_bwd_seqk_parallel sequence (dot_do_o, the loop kernel with dQ added atomically,
convert_dq; `kSmemSize1colblock` the same formula), then at::sum_out over each group under
GQA (mha_bwd). What 2.0 picks differently is its tiles (rules20).
"""

from __future__ import annotations

from ...gpu.hardware import Hardware
from ...problem.attention import Problem
from ...program.plan import Plan, Tiles
from ..common import assemble, override_note
from . import kernels as k2
from .call import FWD_OPS, FWD_OPS_AFTER, backward, place_host_ops
from .rules20 import NAME, TAG, bwd_rule_20, check, fwd_rule_20


def make_plan(p: Problem, hw: Hardware, bq: int | None = None, bk: int | None = None) -> Plan:
    """The 2.0 forward, one kernel over grid (num_m_block, b, h) whatever the sequence
    lengths, and its backward."""
    sm = check(p, hw)
    d_pad, rule = fwd_rule_20(p, hw, sm)
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
    tiles = Tiles(bm, bn)
    fwd, bwd = [kernel], []
    if "bwd" in p.pass_:
        d_bwd, brule = bwd_rule_20(p, hw)
        source = f"{TAG} flash_bwd_launch_template.h"
        bwd, grads, bt, note = backward(p, bq, bk, d_bwd, brule, source)
        tensors = {**tensors, **grads}
        notes.append(note)
        tiles = bt if p.pass_ == "bwd" else tiles
    # the host's operations as the newest release's (call.py: v2.0.9's wrapper runs the same)
    fwd, bwd, ops = place_host_ops(p, fwd, bwd, FWD_OPS, FWD_OPS_AFTER)
    return assemble(
        "flash-attn-2", p, hw, tiles, fwd, bwd, tensors, tuple(notes), ops, warp_mma=True
    )


__all__ = ["make_plan"]
