"""Implementation mirrors: each library's choices against the rules of its source, exactness
of every mirror's tile programs, counts equal to the traced sums, and the library's refusals.

Expected values are derived by hand from the cited source lines in each test's comment, never
from the code under test.
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from plan_checks import assert_classes_hold_identical_ctas, assert_exact_and_counted
from strategies import ALL_PASSES, COUNT_FIELDS, problems

from hbmsim import PRESETS, Problem, execute_plan, get_hardware
from hbmsim.algorithms.registry import make_plan
from hbmsim.engine.workload.classkeys import from_plan_fast
from hbmsim.engine.workload.work import from_plan_exact
from hbmsim.errors import ConfigError
from hbmsim.interpret.counts import count_plan
from hbmsim.interpret.trace import OP_COMPUTE, OP_LOAD, trace_plan
from hbmsim.libraries.flash_attn_1.rules import num_splits_heuristic_fwd
from hbmsim.libraries.flash_attn_2.rules import num_splits_heuristic
from hbmsim.libraries.pytorch import kernels as eager_kernels
from hbmsim.libraries.registry import IMPLS, make_impl_plan

A100, H100, L4, RTX = (get_hardware(n) for n in ("a100-80gb", "h100-sxm", "l4", "rtx4090"))
A10, RTX3090, A6000, H100_PCIE = (
    get_hardware(n) for n in ("a10", "rtx3090", "rtx-a6000", "h100-pcie")
)
KIB = 1024


def _kernel(plan, name):
    (k,) = [k for k in plan.kernels if k.name == name]
    return k


# --- flash-attn-2: tiles, warps, registers vs shared memory ----------------------------------


@pytest.mark.parametrize(
    "hw, d, causal, dropout, bm, bn, warps",
    [
        # run_mha_fwd_hdim64: 128 x 128 without dropout, 128 x 64 with, 4 warps
        (A100, 64, False, 0.0, 128, 128, 4),
        (A100, 64, True, 0.1, 128, 64, 4),
        (A100, 40, False, 0.0, 128, 128, 4),  # d = 40 runs the hdim64 kernel
        # run_mha_fwd_hdim128: sm80/sm90 128 x 64; sm86/89 128 x 32, causal 64 x 64; dropout
        # 128 x 32
        (A100, 128, False, 0.0, 128, 64, 4),
        (H100, 128, True, 0.0, 128, 64, 4),
        (RTX, 128, False, 0.0, 128, 32, 4),
        (L4, 128, True, 0.0, 64, 64, 4),
        (A10, 128, True, 0.0, 64, 64, 4),  # is_sm8x: cc 8.6 too
        (A6000, 128, False, 0.0, 128, 32, 4),
        (H100_PCIE, 128, False, 0.0, 128, 64, 4),
        (A100, 128, False, 0.1, 128, 32, 4),
        # run_mha_fwd_hdim96: sm86/89 causal 64 x 64, else 128 x 64
        (L4, 96, True, 0.0, 64, 64, 4),
        (RTX3090, 96, True, 0.0, 64, 64, 4),
        (A100, 96, True, 0.0, 128, 64, 4),
        # run_mha_fwd_hdim192: no dropout 128 x 64 with 8 warps, dropout 64 x 64 with 4
        (A100, 192, False, 0.0, 128, 64, 8),
        (A100, 192, False, 0.1, 64, 64, 4),
        # run_mha_fwd_hdim256: 128 x 64 x 8 warps when smem/block >= 128 KiB and smem/SM <
        # 192 KiB (A100: 163 / 164 KiB), else 64 x 64 x 4 (H100: 228 KiB per SM)
        (A100, 256, False, 0.0, 128, 64, 8),
        (H100, 256, False, 0.0, 64, 64, 4),
    ],
)
def test_flash_attn_2_forward_tiles_follow_the_launch_template(
    hw, d, causal, dropout, bm, bn, warps
):
    p = Problem(
        batch=4, heads=16, seq_q=2048, seq_k=2048, head_dim=d, causal=causal, dropout=dropout
    )
    plan = make_impl_plan("flash-attn-2", p, hw)
    k = _kernel(plan, "flash_fwd_kernel")
    d_pad = -(-d // 32) * 32 if d <= 128 else (192 if d <= 192 else 256)
    assert (plan.tiles.bq, plan.tiles.bk) == (bm, bn)
    assert k.threads_per_cta == 32 * warps
    # kSmemSize = kSmemQSize + kSmemKVSize: Q, K and V tiles only; S, P, O in registers
    assert k.sram_bytes == (bm + 2 * bn) * d_pad * 2
    for name in ("S", "Oi", "m", "l"):
        assert k.buffer(name).registers, name
    assert "flash_fwd_launch_template.h" in plan.notes[0]


@pytest.mark.parametrize(
    "hw, d, dropout, bm, bn, smem",
    [
        # run_mha_bwd_hdim64, smem/block >= 144 KiB: 128 x 128. kSmemSize1colblock = Q double-
        # buffered + dO (3 x 128 x 64 x 2) + K, V (2 x 128 x 64 x 2) + dS, P (2 x 128 x 128 x 2)
        # = 48 + 32 + 64 KiB: exactly the 144 KiB the template tests for
        (A100, 64, 0.0, 128, 128, 144 * KIB),
        # 99 KiB GPUs: 64 x 128 with V in registers: max(KV, KV / 2 + dS + P) =
        # 3 x 8 KiB (Q, dO) + max(32, 16 + 32) KiB
        (RTX, 64, 0.0, 64, 128, 24 * KIB + 48 * KIB),
        (A6000, 64, 0.0, 64, 128, 24 * KIB + 48 * KIB),
        # run_mha_bwd_hdim128, >= 144 KiB: 64 x 128: 3 x 16 + 2 x 32 + 2 x 16 KiB = 144 KiB
        (A100, 128, 0.0, 64, 128, 144 * KIB),
        # run_mha_bwd_hdim256: H100 (>= 176 KiB) 64 x 64 double-buffered: 3 x 32 + 2 x 32 +
        # 2 x 8 = 176 KiB; A100 without double buffering: 2 x 32 + 64 + 16 = 144 KiB
        (H100, 256, 0.1, 64, 64, 176 * KIB),
        (H100_PCIE, 256, 0.1, 64, 64, 176 * KIB),
        (A100, 256, 0.0, 64, 64, 144 * KIB),
    ],
)
def test_flash_attn_2_backward_tiles_and_shared_memory(hw, d, dropout, bm, bn, smem):
    p = Problem(batch=2, heads=8, seq_q=1024, seq_k=1024, head_dim=d, dropout=dropout, pass_="bwd")
    plan = make_impl_plan("flash-attn-2", p, hw)
    k = _kernel(plan, "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel")
    assert (plan.tiles.bq, plan.tiles.bk) == (bm, bn)
    assert k.threads_per_cta == 256  # 8 warps in every hdim branch
    assert k.sram_bytes == smem
    for name in ("dKj", "dVj", "dQi"):
        assert k.buffer(name).registers


def test_flash_attn_2_backward_adds_dq_atomically_in_fp32():
    """seqk-parallel backward: every (K/V block, Q block) pair adds its dQ partial (fp32) into
    dQ_accum once; the convert kernel reads it once and writes dQ in the dtype."""
    p = Problem(batch=1, heads=2, seq_q=512, seq_k=512, head_dim=64, pass_="bwd")
    plan = make_impl_plan("flash-attn-2", p, A100)
    r = count_plan(plan)
    main = r.kernels[1]
    pairs = (512 // 128) * (512 // 128)  # 128 x 128 tiles
    tile = 128 * 64 * 4
    assert main.by_tensor["dQ_accum"].read_bytes == 2 * pairs * tile
    assert main.by_tensor["dQ_accum"].write_bytes == 2 * pairs * tile
    assert r.kernels[2].by_tensor["dQ"].write_bytes == 2 * 512 * 64 * 2


def test_flash_attn_2_launches_one_heads_row_blocks_together():
    """grid dim3(num_m_block, b, h): blockIdx.x (the row block) fastest, then batch, then head;
    causal row blocks are CTA classes of their own and still interleave in that order."""
    # 8 x 4 heads x 8 row blocks of 64 = 256 >= 0.8 x 216: no split-KV, the regular kernel
    p = Problem(batch=8, heads=4, seq_q=512, seq_k=512, head_dim=64, causal=True)
    plan = make_impl_plan("flash-attn-2", p, A100)
    assert plan.kernels[0].name == "flash_fwd_kernel"
    order = from_plan_fast(plan).kernels[0].cta_coord[:, :3]
    expected = [(b, h, m) for h in range(4) for b in range(8) for m in range(4)]
    assert [tuple(int(x) for x in c) for c in order] == expected
    traced = trace_plan(plan).records
    first = {}
    for cta, coord in zip(traced["cta"], traced["cta_coord"], strict=True):
        first.setdefault(int(cta), tuple(int(x) for x in coord[:3]))
    assert [first[i] for i in range(len(expected))] == expected


def test_fast_workload_matches_the_trace_in_launch_order():
    """The fast builder renumbers CTAs into launch order exactly as the full trace runs them."""
    p = Problem(
        batch=2,
        heads=4,
        kv_heads=2,
        seq_q=300,
        seq_k=300,
        head_dim=64,
        causal=True,
        pass_="fwd+bwd",
    )
    plan = make_impl_plan("flash-attn-2", p, A100)
    fast, exact = from_plan_fast(plan), from_plan_exact(plan)
    for kf, ke in zip(fast.kernels, exact.kernels, strict=True):
        assert np.array_equal(kf.cta_coord, ke.cta_coord), kf.name
        assert np.array_equal(kf.acc_cta, ke.acc_cta), kf.name
        assert np.array_equal(kf.acc_key, ke.acc_key), kf.name


# --- split-KV, GQA packing, MMA padding ------------------------------------------------------


def test_num_splits_heuristic_matches_the_sources_worked_example():
    """flash_api.cpp: "if we have batch * n_heads = 48 and we have 108 SMs, having 2 splits
    (efficiency = 0.89) is better than having 3 splits (efficiency = 0.67)": 9 splits reach
    efficiency 1.0 (432 / 108 = 4 waves), and 2 is the first within 85% of it."""
    assert num_splits_heuristic(48, 108, 64, 128) == 2
    assert num_splits_heuristic(87, 108, 64, 128) == 1  # >= 0.8 x SMs: no split


def test_flash_decoding_packs_the_query_group_and_reads_kv_once_per_split():
    """Decoding, 32 query heads on 8 K/V heads, d 128, 8k cache, A100: packed (b, h_k) = 8 row
    blocks; kBlockN = 128 -> 64 K/V blocks; heuristic over 2 x 108 = 216 "SMs". Eligible split
    counts (blocks per split changes) 1..8, 10, 11, 13, 16, 22, 32, 64; efficiency 8s / 216
    below one wave, best 22 (0.815); the first >= 0.85 x 0.815 is 22."""
    p = Problem(batch=1, heads=32, kv_heads=8, seq_q=1, seq_k=8192, head_dim=128)
    plan = make_impl_plan("flash-decoding", p, A100)
    assert plan.tiles.splits == 22
    assert [k.name for k in plan.kernels] == [
        "flash_fwd_splitkv_kernel",
        "flash_fwd_splitkv_combine_kernel",
    ]
    r = count_plan(plan)
    assert r.by_tensor["K"].read_bytes == 8 * 8192 * 128 * 2  # each K/V head once
    assert any("seqlenq_ngroups_swapped" in n for n in plan.notes)


def test_a_one_row_query_pays_for_whole_mma_tiles():
    """Without packing (one head per K/V head), a 1-row query still runs 64-row MMA tiles of
    the split-KV kernel (kBlockM = 64) over whole 256-key blocks (d 64): QKᵀ and PV each cost
    2 x 64 x 256 x 64 flops per block; 1000 keys are 4 blocks."""
    p = Problem(batch=1, heads=1, seq_q=1, seq_k=1000, head_dim=64)
    plan = make_impl_plan("flash-decoding", p, A100)
    r = count_plan(plan)
    assert r.kernels[0].matmul_flops == 4 * 2 * (2 * 64 * 256 * 64)


# --- flash-attn-1 ----------------------------------------------------------------------------


def test_flash_attn_1_forward_split_heuristic():
    """num_splits_heuristic_fwd(128 heads, 108 SMs, 3 CTAs/SM): waves 128 s / 324; s = 5 gives
    1.975 waves (efficiency 0.988), the best reachable within 30, and is the first above 95%."""
    assert num_splits_heuristic_fwd(128, 108, 3, 30) == 5


def test_flash_attn_1_steps_16_rows_over_256_key_blocks():
    """fmha_fwd_hdim64.cu: FMHA_kernel_traits<256, 64, 16, 1, 4, 0x08u> for seqlen_k >= 256:
    each split CTA reads all of K once (one 256-key block per outer step) and Q once per key
    block; O goes through fp32 o_tmp between blocks and is written once in the dtype."""
    p = Problem(batch=16, heads=8, seq_q=1024, seq_k=1024, head_dim=64)
    plan = make_impl_plan("flash-attn-1", p, get_hardware("a100-40gb"))
    k = plan.kernels[0]
    s = plan.tiles.splits
    assert (plan.tiles.bq, plan.tiles.bk) == (16, 256) and k.threads_per_cta == 128
    r = count_plan(plan)
    bh, head = 16 * 8, 1024 * 64 * 2
    assert r.by_tensor["K"].read_bytes == bh * s * head
    assert r.by_tensor["Q"].read_bytes == bh * 4 * head  # 4 key blocks
    assert r.by_tensor["O"].write_bytes == bh * head
    assert r.by_tensor["O_tmp"].write_bytes == bh * 3 * 1024 * 64 * 4


def _op_string(plan) -> str:
    """A plan's traced ops in order: L or S and the tensor for each load and store, C for a
    run of computes."""
    trace = trace_plan(plan)
    names = [t["name"] for t in trace.tensors]
    ops = []
    for r in trace.records:
        if r["op"] == OP_COMPUTE:
            ops += [] if ops and ops[-1] == "C" else ["C"]
        else:
            ops.append(("L" if r["op"] == OP_LOAD else "S") + names[r["tensor"]])
    return " ".join(ops)


def test_flash_attn_1_forward_puts_each_load_where_the_kernel_waits_for_it():
    """fmha_fprop_kernel_1xN.h device_1xN_ loads into registers and waits at first use: the
    first step's Q is loaded before the steps; each step runs P = Q K^T, then the softmax,
    which reads this step's lse (p_prev_lse, after the first K/V block), then commits the next
    step's Q to shared memory (gmem_q.commit) before the second GEMM, whose epilogue reads
    this step's o_tmp (fmul4(out, p_prev_scale_o)), and stores last. One CTA, 64 query rows
    (4 steps) over two 256-key blocks; C: computes in a row. The loads go out two compute
    steps before these points (stages 3): the o_tmp right after the first GEMM."""
    p = Problem(batch=1, heads=1, seq_q=64, seq_k=512, head_dim=64)
    plan = make_impl_plan("flash-attn-1@0.1", p, get_hardware("a100-40gb"))
    assert plan.kernels[0].stages == 3
    first = "LK LV LQ " + "C LQ C SO_tmp Slse " * 3 + "C SO_tmp Slse "
    second = "LK LV LQ " + "C Llse C LQ C LO_tmp C SO Slse " * 3 + "C Llse C LO_tmp C SO Slse"
    assert _op_string(plan) == first + second


def test_flash_attn_1_forward_charges_its_shared_memory_reductions():
    """device_1xN_ at d 64 fp16, 256-key blocks, 4 warps, 4,096 tokens (256 steps a block):
    per 16-row step it commits the next Q (16 x 64 x 2 bytes), reduces the softmax's max and
    sum across the warps (64 bytes written per warp for each, 256 read per warp for the max,
    32 x 64 after the barrier), and reduces the 4 warps' fp32 16 x 64 output partials
    through shared memory (each stored once and read once); once a block K and V (256 x 64 x
    2 bytes each) are committed and read into registers. Per step 4 x 16 x 256 x 64 flops."""
    p = Problem(batch=16, heads=8, seq_q=4096, seq_k=4096, head_dim=64)
    plan = make_impl_plan("flash-attn-1@0.1", p, get_hardware("a100-40gb"))
    [kernel] = plan.kernels
    per_step = 16 * 64 * 2 + 4 * (64 + 64 + 256) + 32 * 64 + 2 * 4 * (16 * 64 * 4)
    per_block = 2 * (256 * 64 * 2) * 2
    flops = 4 * 16 * 256 * 64
    assert kernel.smem_bytes_per_flop == pytest.approx((per_step + per_block / 256) / flops)


def test_flash_attn_1_backward_puts_each_load_where_the_kernel_waits_for_it():
    """fmha_dgrad_kernel_1xN_loop.h: a K/V block's first step's Q, dO (and, in the first
    block, O for D = rowsum(dO o O), stored) and lse (and later D) come before the steps; each
    step runs S, P, dP, dS, dQ and dV, then the next step's Q and dO (and O, whose D the first
    block computes and stores) are committed to shared memory before dK; after dK the dq_tmp
    (after the first block) and the next step's lse and D go out, and dq_tmp is first read by
    the dQ reduction (smem_dq.load); dQ is stored last. One CTA, 48 query rows (3 steps) over
    two 256-key blocks; C: computes in a row."""
    p = Problem(batch=1, heads=1, seq_q=48, seq_k=512, head_dim=64, pass_="bwd")
    plan = make_impl_plan("flash-attn-1@0.1", p, get_hardware("a100-40gb"))
    assert [k.stages for k in plan.kernels] == [2]
    first = (
        "LK LV C LQ LdO LO C SD Llse "
        + "C LQ LdO LO C SD C Llse SdQ_tmp " * 2
        + "C SdQ_tmp SdK SdV "
    )
    second = (
        "LK LV C LQ LdO Llse LD "
        + "C LQ LdO C LdQ_tmp Llse LD C SdQ " * 2
        + "C LdQ_tmp C SdQ SdK SdV"
    )
    assert _op_string(plan) == first + second


def test_flash_attn_1_backward_charges_its_shared_memory_traffic():
    """The dgrad loop at d 64 fp16, 256-key blocks, 8 warps, 4,096 tokens (256 steps a
    block): per 16-row step it commits the next Q and dO (16 x 64 x 2 bytes each), stores P
    and dS (16 x 256 x 2 bytes each) and reads them back transposed, and reduces the 8 warps'
    fp32 16 x 64 dQ partials through shared memory (each stored once and read once); once a
    block K and V (256 x 64 x 2 bytes each) are committed. Per step 10 x 16 x 256 x 64 flops."""
    p = Problem(batch=16, heads=8, seq_q=4096, seq_k=4096, head_dim=64, pass_="bwd")
    plan = make_impl_plan("flash-attn-1@0.1", p, get_hardware("a100-40gb"))
    [kernel] = plan.kernels
    per_step = 2 * (16 * 64 * 2) + 2 * 2 * (16 * 256 * 2) + 2 * 8 * (16 * 64 * 4)
    per_block = 2 * (256 * 64 * 2)
    flops = 10 * 16 * 256 * 64
    assert kernel.smem_bytes_per_flop == pytest.approx((per_step + per_block / 256) / flops)


@pytest.mark.parametrize("pass_", ["fwd", "bwd"])
def test_flash_attn_1_dropout_draws_its_mask_with_philox(pass_):
    """philox.cuh: 7 rounds of two mul.wide.u32 (both halves: 4 lane results) and two
    three-input XORs, then the counter's increment (add, compare, branch); one call gives the
    8 16-bit draws of 8 elements (softmax.h apply_dropout_16bits). On top of the textbook
    compare and scale (2 per element), forward and backward alike: (7 x 6 + 3) / 8."""
    hw = get_hardware("a100-40gb")
    p = Problem(batch=1, heads=1, seq_q=256, seq_k=256, head_dim=64, pass_=pass_)
    plain = count_plan(make_impl_plan("flash-attn-1", p, hw)).kernels
    dropped = count_plan(make_impl_plan("flash-attn-1", dataclasses.replace(p, dropout=0.1), hw))
    [(name, a)] = [(k.name, k.vector_flops) for k in plain]
    [(name_d, b)] = [(k.name, k.vector_flops) for k in dropped.kernels]
    assert name == name_d
    assert b - a == 256 * 256 * (2 + (7 * 6 + 3) / 8)


def test_flash_attn_2_dropout_draws_its_mask_with_philox():
    """philox.cuh's 7 rounds (4 lane results of two mul.wide.u32, two three-input XORs each,
    no counter increment: the counter is the tile's row and column) give 16 8-bit draws,
    widened for the f16x2 compare one byte permute per two (dropout.h apply_dropout): on top
    of the textbook FA2 program with the same tiles, (7 x 6 + 8) / 16 per element."""
    hw = get_hardware("a100-40gb")
    p = Problem(batch=1, heads=1, seq_q=256, seq_k=256, head_dim=64, dropout=0.1)
    mirror = make_impl_plan("flash-attn-2", p, hw)
    textbook = make_plan("fa2", p, hw, bq=mirror.tiles.bq, bk=mirror.tiles.bk)
    [a] = count_plan(mirror).kernels
    [b] = count_plan(textbook).kernels
    assert a.vector_flops - b.vector_flops == 256 * 256 * (7 * 6 + 8) / 16


@pytest.mark.parametrize(
    "seq, names",
    [
        # seqlen 256 (one 256-key block): loop kernel; 4096 on 16 heads: 108 SMs x 1 CTA
        # (116 KiB) -> 16 / 108 waves vs 16 x 16 / 108 discounted by 1 + 256 / 4096:
        # sequence-parallel
        (256, ["fmha_bwd_dq_dk_dv_loop_kernel"]),
        (
            4096,
            [
                "zero_dq_tmp",
                "fmha_bwd_dot_do_o_kernel",
                "fmha_bwd_q_dk_dv_loop_seqparallel_kernel",
                "copy_dq",
            ],
        ),
    ],
)
def test_flash_attn_1_backward_loop_or_sequence_parallel(seq, names):
    p = Problem(batch=1, heads=16, seq_q=seq, seq_k=seq, head_dim=64, pass_="bwd")
    plan = make_impl_plan("flash-attn-1", p, A100)
    assert [k.name for k in plan.kernels] == names


def test_flash_attn_1_release_0_1_splits_nothing():
    """The kernels the FlashAttention paper timed predate num_splits_heuristic_fwd/_bwd: one CTA
    per (batch, head) forward, the loop kernel backward."""
    from hbmsim.libraries.flash_attn_1 import mirror as flash_attn_1

    p = Problem(batch=1, heads=16, seq_q=4096, seq_k=4096, head_dim=64, pass_="fwd+bwd")
    plan = flash_attn_1.make_plan(p, A100, release="0.1")
    assert [k.name for k in plan.kernels] == [
        "fmha_fwd_loop_kernel",
        "fmha_bwd_dq_dk_dv_loop_kernel",
    ]
    assert plan.kernels[0].n_ctas == 16


# --- torch eager -----------------------------------------------------------------------------


def test_torch_eager_kernel_sequence():
    """attention_pytorch: copies for the rearranges, baddbmm, the -10000 additive mask (full,
    triu, cast, add) when causal, softmax, dropout only when p > 0, the einsum's v copy and
    bmm; autograd's backward, ATen's softmax backward as a multiply then the softmax kernel,
    baddbmm's alpha as separate multiplies, UnbindBackward's stack."""
    p = Problem(batch=1, heads=2, seq_q=64, seq_k=64, head_dim=32, pass_="fwd+bwd")
    names = [k.name for k in make_impl_plan("torch-eager", p, A100).kernels]
    assert names == [
        "copy_q",
        "copy_k",
        "baddbmm",
        "softmax",
        "copy_v",
        "bmm",
        "copy_do",
        "bmm_dp",
        "bmm_dv",
        "mul_grad_output",
        "softmax_bwd",
        "bmm_dq",
        "mul_dq",
        "bmm_dk",
        "mul_dk",
        "stack",
    ]
    p = Problem(batch=1, heads=2, seq_q=64, seq_k=64, head_dim=32, causal=True, dropout=0.1)
    names = [k.name for k in make_impl_plan("torch-eager", p, A100).kernels]
    assert names == [
        "copy_q",
        "copy_k",
        "baddbmm",
        "full",
        "triu",
        "to",
        "add_mask",
        "softmax",
        "dropout",
        "copy_v",
        "bmm",
    ]


def test_torch_eager_softmax_backward_follows_atens_row_length_rule():
    """SoftMax.cu: softmax_backward_cuda_out multiplies tmp = grad * output in its own kernel
    (reads dP and P, writes tmp). Rows up to 1,024 columns and 4 KiB run the persistent warp
    kernel (128 threads, a warp per row, two rows per warp up to 128 columns): tmp and P read
    once. Longer rows run cunn_SoftMaxBackward, one row per block of
    SoftMax_getBlockSize(ILP=4) threads: tmp read for the sum, then tmp and P again."""
    assert [eager_kernels.persistent_rows_per_cta(n) for n in (16, 64, 128, 129, 1024)] == [
        16,
        8,
        8,
        4,
        4,
    ]
    assert [eager_kernels.block_threads(n) for n in (2048, 4096, 1 << 20)] == [256, 512, 512]
    for seq, reads_of_tmp, threads in ((512, 1, 128), (2048, 2, 256)):
        p = Problem(batch=2, heads=2, seq_q=seq, seq_k=seq, head_dim=64, pass_="bwd")
        table = p.batch * p.heads * seq * seq * p.itemsize
        counts = count_plan(make_impl_plan("torch-eager", p, A100))
        by_name = {k.name: k for k in counts.kernels}
        mul, soft = by_name["mul_grad_output"], by_name["softmax_bwd"]
        assert {n: (t.read_bytes, t.write_bytes) for n, t in mul.by_tensor.items()} == {
            "dP": (table, 0),
            "P": (table, 0),
            "dP_P": (0, table),
        }
        assert {n: (t.read_bytes, t.write_bytes) for n, t in soft.by_tensor.items()} == {
            "dP_P": (reads_of_tmp * table, 0),
            "P": (table, 0),
            "dS": (0, table),
        }
        assert soft.threads_per_cta == threads


# --- exactness and counts --------------------------------------------------------------------

SMALL = {
    "plain": dict(batch=1, heads=2, seq_q=80, seq_k=80, head_dim=32),
    "causal": dict(batch=2, heads=2, seq_q=70, seq_k=70, head_dim=64, causal=True),
    "gqa-ragged": dict(batch=1, heads=4, kv_heads=2, seq_q=50, seq_k=90, head_dim=40),
    "dropout": dict(batch=1, heads=2, seq_q=40, seq_k=300, head_dim=64, dropout=0.2),
    "decode-gqa": dict(batch=2, heads=8, kv_heads=2, seq_q=1, seq_k=600, head_dim=64),
}
MIRRORS = list(IMPLS)


def gpu_of(impl: str):
    """The GPU a mirror is checked on: FlashAttention-3 runs on Hopper only."""
    return H100 if impl.startswith("flash-attn-3") else A100


def _supported(pass_for):
    """(impl, case, pass) combinations the library accepts (refusals are tested below)."""
    out = []
    for impl in [*MIRRORS, "flash-attn-2@2.0", "flash-attn-3@2024-07"]:
        for case, fields in SMALL.items():
            for pass_ in pass_for(impl):
                for dtype in ("fp16", "fp8") if impl == "flash-attn-3" else ("fp16",):
                    p = Problem(pass_=pass_, dtype=dtype, **fields)
                    try:
                        make_impl_plan(impl, p, gpu_of(impl))
                    except ConfigError:
                        continue
                    out.append((impl, case + ("-fp8" if dtype == "fp8" else ""), pass_))
    return out


def _small(case: str, pass_: str) -> Problem:
    fp8 = case.endswith("-fp8")
    fields = SMALL[case.removesuffix("-fp8")]
    return Problem(pass_=pass_, dtype="fp8" if fp8 else "fp16", **fields)


@pytest.mark.parametrize("impl, case, pass_", _supported(lambda impl: ("fwd", "bwd", "fwd+bwd")))
def test_every_mirror_computes_attention_exactly(impl, case, pass_):
    plan = make_impl_plan(impl, _small(case, pass_), gpu_of(impl))
    e = execute_plan(plan)
    assert e.rel_err < 1e-9
    if "bwd" in pass_:
        assert max(e.grad_rel_err.values()) < 1e-9


@pytest.mark.parametrize(
    "impl, case, pass_",
    _supported(lambda impl: ("fwd",) if impl == "flash-decoding" else ("fwd+bwd",)),
)
def test_mirror_counts_equal_the_traced_sum(impl, case, pass_):
    plan = make_impl_plan(impl, _small(case, pass_), gpu_of(impl))
    counted = count_plan(plan).to_dict()
    traced = trace_plan(plan).totals()
    for f in COUNT_FIELDS:
        assert counted[f] == traced[f], f


def test_torch_eager_long_rows_take_the_block_softmax_backward_exactly():
    """Rows past 4,096 keys run cunn_SoftMaxBackward in chunks (a sum pass, then the output
    pass): the gradients still equal naive attention's, and the counts equal the trace."""
    p = Problem(batch=1, heads=1, seq_q=3, seq_k=4100, head_dim=8, causal=True, pass_="bwd")
    plan = make_impl_plan("torch-eager", p, A100)
    kernel = next(k for k in plan.kernels if k.name == "softmax_bwd")
    assert kernel.threads_per_cta == eager_kernels.block_threads(p.seq_k)
    e = execute_plan(plan)
    assert max(e.grad_rel_err.values()) < 1e-9
    counted, traced = count_plan(plan).to_dict(), trace_plan(plan).totals()
    assert counted["by_tensor"] == traced["by_tensor"]
    table = p.seq_q * p.seq_k * p.itemsize
    assert counted["by_tensor"]["dP_P"]["read_bytes"] == 2 * table


def test_declared_cta_classes_hold_identical_ctas():
    """Every CTA a mirror puts in one class has the same op sequence up to offsets."""
    for impl, case, pass_ in _supported(
        lambda impl: ("fwd",) if impl == "flash-decoding" else ("fwd+bwd",)
    ):
        plan = make_impl_plan(impl, _small(case, pass_), gpu_of(impl))
        assert_classes_hold_identical_ctas(plan, (impl, case))


@given(
    p=problems(max_seq=80, max_d=24, passes=ALL_PASSES),
    impl=st.sampled_from([*MIRRORS, "flash-attn-2@2.0"]),
)
def test_accepted_problems_run_exactly_and_count_what_they_trace(p, impl):
    """Any problem a mirror accepts (head dims made multiples of 8, the dtypes flash-attn
    takes) executes to naive attention, and its counts equal its trace."""
    p = dataclasses.replace(
        p, head_dim=8 * -(-p.head_dim // 8), dtype="bf16" if p.dtype == "bf16" else "fp16"
    )
    try:
        plan = make_impl_plan(impl, p, gpu_of(impl))
    except ConfigError:
        return  # refusals: tested below
    assert_exact_and_counted(plan)


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "impl, problem, hw, field, words",
    [
        ("flash-attn-4", {}, A100, "impl", "torch-eager, flash-attn-1"),
        ("flash-attn-3", {}, A100, "gpu", "only supports Hopper"),
        ("flash-attn-3", {}, A10, "gpu", "only supports Hopper"),
        ("flash-attn-3", {"dropout": 0.1}, H100, "dropout", "no dropout"),
        ("flash-attn-3", {"pass_": "fwd+bwd", "dtype": "fp8"}, H100, "dtype", "no fp8 backward"),
        ("flash-attn-3@2024-07", {"pass_": "bwd"}, H100, "pass", "beta's backward"),
        ("flash-attn-3", {"head_dim": 320}, H100, "head_dim", "at most 256"),
        ("flash-attn-3", {"dtype": "fp32"}, H100, "dtype", "fp16, bf16, fp8 only (got fp32)"),
        ("flash-attn-3@2024-07", {"dtype": "fp8"}, H100, "dtype", "fp16 and bf16"),
        ("flash-attn-3@2024-07", {"head_dim": 96}, H100, "head_dim", "64, 128 and 256 only"),
        ("flash-attn-3@2025", {}, H100, "release", "latest, 2024-07"),
        ("flash-attn-2", {"dtype": "fp8"}, H100, "dtype", "fp16 and bf16"),
        ("flash-attn-2", {"dtype": "fp8"}, A100, "dtype", "FP8 tensor cores"),
        ("flash-attn-2", {"head_dim": 320}, A100, "head_dim", "at most 256"),
        ("flash-attn-2", {"dtype": "fp32"}, A100, "dtype", "fp16 and bf16 only (got fp32)"),
        ("flash-attn-2", {"head_dim": 36}, A100, "head_dim", "multiple of 8"),
        (
            "flash-attn-2",
            {"head_dim": 256, "dropout": 0.1, "pass_": "bwd"},
            L4,
            "dropout",
            "only works without dropout",
        ),
        (
            "flash-attn-2",
            {"head_dim": 256, "dropout": 0.1, "pass_": "bwd"},
            A10,
            "dropout",
            "only works without dropout",
        ),
        ("flash-attn-1", {"head_dim": 256}, A100, "head_dim", "head_size <= 128"),
        ("flash-attn-1", {"heads": 8, "kv_heads": 2}, A100, "kv_heads", "num_heads"),
        ("flash-decoding", {"pass_": "fwd+bwd"}, A100, "pass", "forward only"),
        ("flash-decoding", {"dropout": 0.1}, A100, "dropout", "no dropout"),
        ("flash-attn-2", {}, A100.with_overrides(name="mygpu"), "gpu", "architecture"),
    ],
)
def test_refusals_are_one_line_naming_the_limit(impl, problem, hw, field, words):
    p = Problem(**{"batch": 1, "heads": 4, "seq_q": 128, "seq_k": 128, **problem})
    with pytest.raises(ConfigError) as e:
        make_impl_plan(impl, p, hw)
    assert e.value.field == field
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "name, sm",
    [
        ("a10", 86),
        ("a100-pcie-80gb", 80),
        ("h100-pcie", 90),
        ("l40s", 89),
        ("rtx-a6000", 86),
        ("a100", 80),  # a profile named after its GPU: the A100's family, not the A10's
        ("a10-mine", 86),
        ("h200+calibrated", 90),
        ("b200", 100),
        ("gb200-mine", 100),
    ],
)
def test_the_architecture_comes_from_the_preset_or_the_profiles_name(name, sm):
    from hbmsim.libraries.common import sm_version

    assert sm_version(H100.with_overrides(name=name)) == sm


def test_every_preset_has_an_architecture():
    from hbmsim.libraries.common import sm_version

    assert {sm_version(hw) for hw in PRESETS.values()} == {80, 86, 89, 90, 100}


def test_user_tiles_override_the_library_and_the_plan_says_so():
    p = Problem(batch=1, heads=2, seq_q=256, seq_k=256, head_dim=64)
    plan = make_impl_plan("flash-attn-2", p, A100, bq=64, bk=32)
    assert (plan.tiles.bq, plan.tiles.bk) == (64, 32)
    assert any("overridden" in n for n in plan.notes)
