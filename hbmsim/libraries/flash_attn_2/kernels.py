"""flash-attn 2.x forward and backward kernels as tile programs (split-KV: fa2_splitkv).

The programs are the textbook FA2 loops (algorithms/flash.py `online_step`, algorithms/
flash_bwd.py `fa2_backward_programs`); what is the library's here is the kernel around them:
- shared memory holds only the Q, K, V tiles (forward) or Q, dO, K, V, P, dS (backward);
  S, P, the O accumulator and the row statistics live in registers (flash_fwd_kernel.h
  `compute_attn_1rowblock`: acc_s, acc_o, scores_max, scores_sum are register fragments;
  kernel_traits.h kSmemSize = kSmemQSize + kSmemKVSize), which is why 128 x 128 tiles at head
  dim 64 fit;
- whole MMA tiles: a ragged or one-row block still costs kBlockM x kBlockN x kHeadDim of
  tensor-core work (the fragments are full; loads beyond the sequence are predicated off), so
  the math is counted padded (`pad`);
- the grid dim3(num_m_block, b, h) starts one head's row blocks together (launch order);
- local (sliding-window) attention, rules.window: each row block visits K/V blocks
  [n_block_min, n_block_max) with n_block_min = max(0, (m_block * kBlockM + seqlen_k -
  seqlen_q - window_size_left) / kBlockN) and n_block_max = min(ceil_div(seqlen_k, kBlockN),
  ceil_div((m_block + 1) * kBlockM + seqlen_k - seqlen_q + window_size_right, kBlockN))
  (flash_fwd_kernel.h compute_attn_1rowblock), the band's blocks that blocks.kv_blocks_for_q
  finds; and every one of them is masked: Mask::apply_mask's `Need_masking = Has_alibi ||
  Causal_mask || Is_local || !Is_even_MN` (mask.h) holds in the loop without masking steps
  too, where a causal kernel masks only its n_masking_steps blocks;
- the backward's loop kernel visits Q blocks [m_block_min, m_block_max) of the band
  (flash_bwd_kernel.h compute_dq_dk_dv_1colblock, blocks.q_blocks_for_kv) and writes zero dK,
  dV for a K/V block no query row sees (its early exit). It masks a tile when the tile
  touches the band's edges (`else if (Is_local)`), which is what tile_masked finds except the
  tiles whose corner lies exactly on an edge and the ragged last K/V block (Is_even_MN is
  false for local kernels), which it masks too: those few masks' vector work is not counted.
"""

from __future__ import annotations

from ...algorithms.blocks import block_classes, n_blocks
from ...algorithms.flash import fa2_forward_program
from ...algorithms.flash_bwd import fa2_backward_programs
from ...algorithms.kernels import gqa_reduce_kernel
from ...problem.attention import STAT_ITEMSIZE, Problem
from ...program.plan import Buffer, CtaClass, Kernel, TensorSpec, Tiles
from ..common import GRID_BLOCK_B_H
from ..philox import FA2_PER_ELEMENT
from .rules import BwdRule, FwdRule, window

WARP = 32


def forward_kernel(p: Problem, t: Tiles, rule: FwdRule, d_pad: int) -> tuple[Kernel, dict]:
    """flash_fwd_kernel: one CTA per (Q block, batch, head), K/V streamed."""
    local = window(p).is_local
    program, grid, tensors = fa2_forward_program(
        p, t, pad=(t.bq, t.bk, d_pad), rng=FA2_PER_ELEMENT, mask_all=local
    )
    it = p.itemsize
    buffers = (
        Buffer("Qi", (t.bq, d_pad), it),  # sQ
        Buffer("Kj", (t.bk, d_pad), it),  # sK: one copy; the next block's cp.async is issued
        Buffer("Vj", (t.bk, d_pad), it),  # sV  during this block's math (stages = 2)
        Buffer("S", (t.bq, t.bk), STAT_ITEMSIZE, registers=True),  # acc_s, then P
        Buffer("Oi", (t.bq, d_pad), STAT_ITEMSIZE, registers=True),  # acc_o
        Buffer("m", (t.bq,), STAT_ITEMSIZE, registers=True),
        Buffer("l", (t.bq,), STAT_ITEMSIZE, registers=True),
    )
    kernel = Kernel(
        "flash_fwd_kernel",
        grid,
        buffers,
        program,
        rule.warps * WARP,
        stages=2,
        description=f"{rule.bm} x {rule.bn} tiles, {rule.warps} warps; S, P and O in registers"
        + ("; local: the window's K/V blocks, each masked" if local else ""),
        launch_order=GRID_BLOCK_B_H,
    )
    return kernel, tensors


# --- backward --------------------------------------------------------------------------------


def backward_kernels(
    p: Problem, t: Tiles, rule: BwdRule, d_pad: int
) -> tuple[list[Kernel], dict[str, TensorSpec]]:
    """run_flash_bwd_seqk_parallel: flash_bwd_dot_do_o_kernel (D = rowsum(dO o O), dQaccum
    cleared) over grid_m; flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel over grid_n, dQ added
    into an fp32 accumulator with atomicAdd; flash_bwd_convert_dq_kernel over grid_m. GQA:
    mha_bwd computes dK, dV per query head and sums them over each group (at::sum_out)."""
    pre, main, convert, tensors = fa2_backward_programs(
        p, t, pad=(t.bq, t.bk, d_pad), rng=FA2_PER_ELEMENT
    )
    it = p.itemsize
    threads = rule.warps * WARP
    q_grid = tuple(
        CtaClass((range(p.batch), range(p.heads), r)) for r in block_classes(p.seq_q, t.bq)
    )
    if p.masked:
        n_classes = [range(j, j + 1) for j in range(n_blocks(p.seq_k, t.bk))]
    else:
        n_classes = block_classes(p.seq_k, t.bk)
    kv_grid = tuple(CtaClass((range(p.batch), range(p.heads), r)) for r in n_classes)
    q_stages = 2 if rule.double_buffer_q else 1
    kernels = [
        Kernel(
            "flash_bwd_dot_do_o_kernel",
            q_grid,
            (
                Buffer("dOi", (t.bq, d_pad), it, registers=True),
                Buffer("Oi", (t.bq, d_pad), it, registers=True),
                Buffer("D", (t.bq,), STAT_ITEMSIZE, registers=True),
                Buffer("dQi", (t.bq, d_pad), STAT_ITEMSIZE, registers=True),
            ),
            pre,
            threads,
            pass_="bwd",
            description="D = rowsum(dO * O); dQ_accum = 0 (no shared memory)",
            launch_order=GRID_BLOCK_B_H,
        ),
        Kernel(
            "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
            kv_grid,
            _loop_buffers(p, t, rule, d_pad, q_stages),
            main,
            threads,
            stages=q_stages,
            pass_="bwd",
            description=f"{rule.why}; dK, dV in registers, dQ partials added atomically",
            launch_order=GRID_BLOCK_B_H,
        ),
        Kernel(
            "flash_bwd_convert_dq_kernel",
            q_grid,
            (Buffer("dQi", (t.bq, d_pad), STAT_ITEMSIZE),),  # kSmemdQSize
            convert,
            threads,
            pass_="bwd",
            description="dQ = dQ_accum, converted to the dtype",
            launch_order=GRID_BLOCK_B_H,
        ),
    ]
    if p.group_size > 1:
        kernels.append(gqa_reduce_kernel(p))
    return kernels, tensors


def _loop_buffers(p: Problem, t: Tiles, rule: BwdRule, d_pad: int, q_stages: int) -> tuple:
    """The loop kernel's shared memory and registers: kernel_traits.h kSmemSize1colblock =
    kSmemQdOSize + (Is_V_in_regs ? max(kSmemKVSize, kSmemKVSize / 2 + kSmemdSSize +
    kSmemPSize) : kSmemKVSize + kSmemdSSize + kSmemPSize)."""
    it = p.itemsize
    v_bytes = t.bk * d_pad * it
    ds_p_bytes = 2 * t.bq * t.bk * it
    buffers = [
        Buffer("Qi", (q_stages, t.bq, d_pad) if q_stages > 1 else (t.bq, d_pad), it),
        Buffer("dOi", (t.bq, d_pad), it),
        Buffer("Kj", (t.bk, d_pad), it),
        Buffer("Vj", (t.bk, d_pad), it, registers=rule.v_in_regs),
        Buffer("S", (t.bq, t.bk), it),  # sP
        Buffer("dP", (t.bq, t.bk), it),  # sdS
        Buffer("dKj", (t.bk, d_pad), STAT_ITEMSIZE, registers=True),  # acc_dk
        Buffer("dVj", (t.bk, d_pad), STAT_ITEMSIZE, registers=True),  # acc_dv
        Buffer("dQi", (t.bq, d_pad), STAT_ITEMSIZE, registers=True),  # acc_dq, then atomicAdd
        Buffer("lse", (t.bq,), STAT_ITEMSIZE, registers=True),
        Buffer("D", (t.bq,), STAT_ITEMSIZE, registers=True),
    ]
    if rule.v_in_regs and v_bytes > ds_p_bytes:  # V's shared memory outlives P and dS's
        buffers.append(Buffer("V_stage", ((v_bytes - ds_p_bytes) // it,), it))
    return tuple(buffers)
