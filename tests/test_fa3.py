"""The FlashAttention-3 mirror against the rules its source states
(hbmsim/libraries/flash_attn_3/rules.py cites each), fp8 byte counts, and the timeline's
producer and warpgroup rows."""

import csv

import numpy as np
import pytest

from hbmsim import Problem, get_hardware
from hbmsim.engine.result import ROLE_PRODUCER, role_code
from hbmsim.engine.simulation import occupancy, run_engine
from hbmsim.engine.timeline import write_timeline
from hbmsim.errors import ConfigError
from hbmsim.figures import warpgroups as rolefig
from hbmsim.interpret.counts import count_plan
from hbmsim.interpret.trace import OP_COMPUTE, OP_LOAD
from hbmsim.libraries.flash_attn_3.rules import fwd_rule, smem_bytes
from hbmsim.libraries.registry import make_impl_plan
from hbmsim.program.plan import launch_sequence

H100, H200 = get_hardware("h100-sxm"), get_hardware("h200")
KB = 1024


def plan_of(release="latest", **fields):
    p = Problem(**{"batch": 1, "heads": 2, "seq_q": 1024, "seq_k": 1024, **fields})
    return make_impl_plan(f"flash-attn-3@{release}", p, H100)


@pytest.mark.parametrize(
    "d, causal, seq, tiles, cluster",
    [
        # run_mha_fwd_hdim64: Flash_fwd_kernel_traits<64, 192, 128, 16, 2, false, 1, T>
        (64, False, 1024, (192, 128), 1),
        (64, True, 1024, (192, 128), 1),
        # hdim128: <128, 128, Is_causal ? 128 : 176, 12, 2, ..., !Is_causal && UseCluster ? 2 : 1>
        # with UseCluster = ceil_div(seqlen_q, 128) % 2 == 0
        (128, False, 1024, (128, 176), 2),
        (128, False, 1152, (128, 176), 1),
        (128, True, 1024, (128, 128), 1),
        # hdim256: <256, 128, 80, 12, 2, ..., !Is_causal && UseCluster ? 2 : 1>
        (256, False, 512, (128, 80), 2),
        (256, True, 512, (128, 80), 1),
    ],
)
def test_the_paper_beta_picks_its_launch_templates_tiles(d, causal, seq, tiles, cluster):
    plan = plan_of("2024-07", head_dim=d, causal=causal, seq_q=seq, seq_k=seq)
    (k,) = plan.kernels
    assert (plan.tiles.bq, plan.tiles.bk) == tiles
    assert k.cluster == cluster and k.stages == 2
    assert k.overlap_warpgroups == tiles[0] // 64  # one consumer warpgroup per 64 rows
    assert k.threads_per_cta == (tiles[0] // 64 + 1) * 128  # kNWarps: 16 or 12


@pytest.mark.parametrize(
    "d, dtype, causal, tiles",
    [
        # tile_size_fwd_sm90: {192, is_causal || is_local ? 128 : 192} for hdim 64 fp16
        (64, "fp16", False, (192, 192)),
        (64, "fp16", True, (192, 128)),
        (96, "bf16", False, (192, 144)),
        (128, "fp16", False, (128, 176)),
        (128, "fp16", True, (128, 128)),
        (192, "fp16", False, (128, 112)),
        (256, "fp16", True, (128, 80)),
        # e4m3: 192 x 160, 192 x 128, 128 x 224, 128 x 160, 128 x 128
        (64, "fp8", False, (192, 160)),
        (96, "fp8", False, (192, 128)),
        (128, "fp8", True, (128, 224)),
        (192, "fp8", False, (128, 160)),
        (256, "fp8", False, (128, 128)),
    ],
)
def test_the_latest_release_picks_tile_size_fwd_sm90s_tiles(d, dtype, causal, tiles):
    plan = plan_of(head_dim=d, dtype=dtype, causal=causal)
    assert (plan.tiles.bq, plan.tiles.bk) == tiles


def test_head_dims_round_up_to_the_compiled_ones_in_the_latest_release():
    plan = plan_of(head_dim=72)
    assert fwd_rule(plan.problem, "latest").d == 96
    assert any("hdim96 kernel" in n for n in plan.notes)


@pytest.mark.parametrize(
    "release, fields, kib",
    [
        # Q + 2 stages of K and of V, fp16: 24 + 32 + 32 KiB at 192 x 128 x 64
        ("2024-07", dict(head_dim=64), 88),
        ("2024-07", dict(head_dim=128), 32 + 88 + 88),  # 128 x 176
        ("2024-07", dict(head_dim=128, causal=True), 32 + 64 + 64),
        ("2024-07", dict(head_dim=256), 64 + 80 + 80),  # 128 x 80
        ("latest", dict(head_dim=64), 24 + 48 + 48 + 72),  # 192 x 192 and P in smem
        ("latest", dict(head_dim=128, dtype="fp8"), 16 + 56 + 56 + 56),  # and V's TMA target
    ],
)
def test_shared_memory_is_q_and_the_kv_stages(release, fields, kib):
    plan = plan_of(release, **fields)
    k = plan.kernels[0]  # (the latest release splits these small problems: a combine follows)
    rule = fwd_rule(plan.problem, release)
    assert k.sram_bytes == kib * KB
    assert smem_bytes(rule, plan.problem.itemsize, plan.problem.dtype == "fp8") == kib * KB


@pytest.mark.parametrize("d", [64, 128, 256])
def test_the_register_split_leaves_one_cta_per_sm(d):
    """setmaxnreg gives the producer and consumers the whole register file."""
    (k,) = plan_of("2024-07", head_dim=d).kernels
    assert occupancy(H100, k.sram_bytes, k.threads_per_cta, k.name, k.registers_per_thread) == 1
    per_thread = k.registers_per_thread * k.threads_per_cta
    assert per_thread <= H100.registers_per_sm < 2 * per_thread


def test_every_hopper_preset_runs_it_at_its_own_sm_count():
    """The H100 PCIe is Hopper (sm90) too: the same kernel, one CTA per SM on its 114 SMs."""
    from hbmsim.api import simulate

    p = Problem(batch=2, heads=16, seq_q=4096, seq_k=4096, head_dim=128)
    times = {}
    for name in ("h100-sxm", "h100-pcie"):
        r = simulate(p, get_hardware(name), impl="flash-attn-3")
        (k,) = r.extra["engine"]["kernels"]
        assert k["ctas_per_sm"] == 1
        times[name] = r.extra["time_s"]
    # 114 SMs at a lower clock and 60% of the bandwidth: slower, by less than the SXM's 1.3x
    # tensor-core peak and 1.7x bandwidth together
    assert 1.0 < times["h100-pcie"] / times["h100-sxm"] < 1.7


def test_tiles_start_m_block_fastest_then_head_then_batch():
    plan = plan_of(batch=2, heads=2, seq_q=400, seq_k=400)
    order = list(launch_sequence(plan.kernels[0]))
    assert order[:3] == [(0, 0, 0), (0, 0, 1), (0, 0, 2)]
    assert order[3] == (0, 1, 0) and order[6] == (1, 0, 0)


def test_fp8_moves_one_byte_per_input_element_and_counts_its_scales():
    p = dict(batch=8, heads=32, kv_heads=8, seq_q=512, seq_k=768, head_dim=128)  # no split
    c8, c16 = count_plan(plan_of(dtype="fp8", **p)), count_plan(plan_of(dtype="bf16", **p))
    q8, q16 = c8.by_tensor["Q"], c16.by_tensor["Q"]
    assert 2 * q8.read_bytes == q16.read_bytes == 8 * 32 * 512 * 128 * 2  # each Q row once
    assert c8.by_tensor["O"].write_bytes == c16.by_tensor["O"].write_bytes  # 16-bit output
    n_ctas = plan_of(dtype="fp8", **p).kernels[0].n_ctas
    for name in ("q_descale", "k_descale", "v_descale"):
        assert c8.by_tensor[name].read_bytes == 4 * n_ctas  # one fp32 per CTA
    assert "q_descale" not in c16.by_tensor


def test_fp8_runs_at_the_fp8_tensor_rate_and_is_refused_where_there_is_none():
    assert H100.matrix_rate("fp8") == pytest.approx(2 * H100.matrix_rate("fp16"), rel=1e-3)
    a100 = get_hardware("a100-80gb")
    with pytest.raises(Exception, match="FP8 tensor cores"):
        make_impl_plan("flash-attn-3", Problem(dtype="fp8"), a100)
    big = dict(head_dim=256, heads=16, seq_q=4096, seq_k=4096)
    fast = run_engine(plan_of(dtype="fp8", **big))
    slow = run_engine(plan_of(dtype="bf16", **big))
    assert fast.host_time_s < fast.gpu_time_s and slow.host_time_s < slow.gpu_time_s
    assert 1.3 < slow.time_s / fast.time_s < 2


def test_flash_attn_3_computes_attention_exactly_in_every_release():
    from hbmsim import execute_plan

    for release, fields in (
        ("latest", dict(head_dim=64, causal=True, seq_q=300, seq_k=500)),
        ("2024-07", dict(head_dim=128, seq_q=260, seq_k=200)),
        ("latest", dict(head_dim=40, dtype="fp8", heads=4, kv_heads=2, seq_q=90, seq_k=330)),
    ):
        assert execute_plan(plan_of(release, **fields)).rel_err < 1e-9


def test_the_timeline_has_the_producers_loads_and_each_warpgroups_phases(tmp_path):
    """Loads are the producer's rows; each step has an MMA and a softmax row per consumer
    warpgroup; within one CTA no two warpgroups' MMA rows overlap (they take the tensor cores
    in turn), and a warpgroup's softmax overlaps another's MMA; the CSV names the roles."""
    plan = plan_of("2024-07", heads=1, head_dim=128, seq_q=256, seq_k=1024)
    r = run_engine(plan, exact=True, timeline=True)
    t = r.timeline
    loads = t[t["op"] == OP_LOAD]
    assert len(loads) and np.all(loads["role"] == ROLE_PRODUCER)
    cta = t[(t["cta"] == 0) & (t["op"] == OP_COMPUTE)]
    mma = [cta[cta["role"] == role_code(w, "mma")] for w in range(2)]
    soft = [cta[cta["role"] == role_code(w, "softmax")] for w in range(2)]
    assert all(len(x) >= 4 for x in mma + soft)
    spans = sorted(
        (float(a), float(b)) for m in mma for a, b in zip(m["start_s"], m["end_s"], strict=True)
    )
    for (_, b0), (a1, _) in zip(spans, spans[1:], strict=False):
        assert b0 <= a1 + 1e-15
    overlapping = [
        (a, b)
        for a, b in zip(soft[0]["start_s"], soft[0]["end_s"], strict=True)
        if any(a < d and c < b for c, d in zip(mma[1]["start_s"], mma[1]["end_s"], strict=True))
    ]
    assert overlapping
    first_mma = min(float(m["start_s"].min()) for m in mma)
    assert float(loads["start_s"].min()) < first_mma  # the producer goes first
    write_timeline(r, tmp_path / "t.csv")
    with open(tmp_path / "t.csv") as f:
        roles = {row["role"] for row in csv.DictReader(f)}
    assert {"producer", "wg0 mma", "wg0 softmax", "wg1 mma", "wg1 softmax"} <= roles


def test_the_warpgroup_chart_draws_the_timelines_rows():
    plan = plan_of(heads=1, head_dim=64, seq_q=384, seq_k=1024)
    r = run_engine(plan, exact=True, timeline=True)
    fig = rolefig.warpgroup_chart(r)
    by_name = {d.name: d for d in fig.data}
    assert set(by_name) == {"TMA load", "MMA (tensor cores)", "softmax"}
    rows = set(by_name["MMA (tensor cores)"].y) | set(by_name["softmax"].y)
    assert rows == {f"consumer warpgroup {w}" for w in range(3)}
    assert all(x > 0 for d in fig.data for x in d.x)
    plain = run_engine(make_impl_plan("flash-attn-2", plan.problem, H100), timeline=True)
    assert not rolefig.warp_specialised(plain)
    with pytest.raises(ValueError):
        rolefig.warpgroup_chart(plain)


@pytest.mark.parametrize(
    "bq, bk, field",
    [(32, None, "bq"), (256, None, "bq"), (None, 40, "bk"), (None, 272, "bk")],
)
def test_tiles_the_kernel_cannot_be_built_with_are_refused(bq, bk, field):
    p = Problem(batch=1, heads=2, seq_q=512, seq_k=512)
    with pytest.raises(ConfigError) as e:
        make_impl_plan("flash-attn-3", p, H100, bq=bq, bk=bk)
    assert e.value.field == field and "\n" not in str(e.value)


def test_user_rows_set_the_consumer_warpgroups():
    p = Problem(batch=1, heads=2, seq_q=512, seq_k=512)
    k = make_impl_plan("flash-attn-3", p, H100, bq=64, bk=64).kernels[0]
    assert k.overlap_warpgroups == 1 and k.threads_per_cta == 256  # one consumer: no overlap


# --- split-KV and PackGQA (the latest release) -----------------------------------------------

MB50 = 50 * 1024 * 1024


@pytest.mark.parametrize(
    "args, splits",
    [
        # 8 M blocks (one batch x 8 K/V heads) on 132 SMs, 187 K/V blocks: the efficiency
        # 8s / 132 / ceil(8s / 132) first reaches 85% of the best (1.0 at s = 33) at s = 15
        ((8, 132, 187, 1, MB50 // 100, False), 15),
        ((106, 132, 187, 1, MB50 // 100, False), 1),  # M blocks fill 80% of the SMs
        ((8, 132, 4, 1, MB50 // 100, False), 1),  # four K/V blocks or fewer: no split
        # enough M blocks, but one K/V head outgrows the 50 MB it assumes of L2 and the
        # queries go over it twice or more: ceil(size / 50 MB) splits, none when causal
        ((600, 132, 1000, 300, 3 * MB50 + 1, False), 4),
        ((600, 132, 1000, 300, 3 * MB50 + 1, True), 1),
    ],
)
def test_num_splits_heuristic_follows_hoppers_heuristics_h(args, splits):
    from hbmsim.libraries.flash_attn_3.rules import num_splits_heuristic

    assert num_splits_heuristic(*args) == splits


@pytest.mark.parametrize(
    "seqlen_q, group, block_m, pack",
    [(1, 8, 128, True), (128, 4, 128, False), (100, 8, 128, True), (100, 2, 128, False)],
)
def test_should_pack_gqa_compares_the_padded_rows(seqlen_q, group, block_m, pack):
    """Pack when one head's padded rows fill less than 90% of what the packed group fills:
    100 rows of 8 heads, 78% against 89% packed (800 of 896 rows): pack."""
    from hbmsim.libraries.flash_attn_3.rules import should_pack_gqa

    assert should_pack_gqa(seqlen_q, group, block_m) == pack


def test_decoding_with_grouped_heads_splits_the_cache_and_packs_the_group():
    p = Problem(batch=1, heads=32, kv_heads=8, seq_q=1, seq_k=32768, head_dim=128)
    plan = make_impl_plan("flash-attn-3", p, H100)
    split, combine = plan.kernels
    assert plan.tiles.splits == 15 and combine.name == "flash_fwd_splitkv_combine_kernel"
    assert split.overlap_warpgroups == 2 and split.name == "flash_fwd_kernel_sm90"
    # one CTA per (batch, K/V head, split, row block): the group packed in one row block
    assert split.n_ctas == 1 * 8 * 15 * 1
    beta = make_impl_plan("flash-attn-3@2024-07", p, H100)  # the beta split nothing
    assert len(beta.kernels) == 1 and beta.kernels[0].n_ctas == 32


def test_one_query_row_takes_the_unmasked_tiles():
    """mha_fwd: "causal=true is the same as causal=false" at one query row."""
    p = Problem(batch=64, heads=16, seq_q=1, seq_k=2048, head_dim=128, causal=True)
    assert make_impl_plan("flash-attn-3", p, H100).tiles.bk == 176  # not the causal 128
