"""FlashAttention-3's backward on Hopper against the rules its source states
(hbmsim/libraries/flash_attn_3/bwd_rules.py and backward.py cite each): the launch template's
tiles per head dim, the kernel sequence, shared memory, bytes worked out by hand, causal
skipping, GQA through fp32 accumulators, exactness, and refusals, through the CLI's JSON."""

import json

import pytest
from test_cli import run

from hbmsim import Problem, execute_plan, get_hardware
from hbmsim.interpret.counts import count_plan
from hbmsim.interpret.trace import trace_plan
from hbmsim.libraries.registry import make_impl_plan

H100 = get_hardware("h100-sxm")
KB = 1024
PRE, MAIN, POST = "flash_bwd_preprocess", "flash_bwd_kernel_sm90", "flash_bwd_postprocess (dQ)"


def simulate(capsys, *args, engine=False):
    extra = () if engine else ("--no-engine",)
    code, out, err = run(
        capsys, "simulate", "--impl", "flash-attn-3", "--gpu", "h100-sxm", "--json", *extra, *args
    )
    assert code == 0, err
    return json.loads(out)


def kernel(d: dict, name: str) -> dict:
    (k,) = [k for k in d["by_kernel"] if k["name"] == name]
    return k


@pytest.mark.parametrize(
    "d, causal, tiles, warpgroups",
    [
        # run_mha_bwd_hdim64, Arch >= 90: <128, 128, ...>, NumMmaWarpGroups 2
        (64, False, (128, 128), 2),
        (64, True, (128, 128), 2),
        (96, False, (64, 128), 2),  # hdim96: <64, 128, ...>, 2
        (128, False, (80, 128), 2),  # hdim128: <80, 128, ...> without a mask
        (128, True, (64, 128), 2),  # ... <64, 128, ...> when Is_causal || Is_local
        (192, False, (64, 96), 3),  # hdim192: <64, 96, ...>, 3
        (256, False, (64, 80), 2),  # hdim256: <64, 80, ...>, 2
    ],
)
def test_the_backward_takes_the_launch_templates_tiles_per_head_dim(
    capsys, d, causal, tiles, warpgroups
):
    args = ["--pass", "bwd", "--head-dim", str(d), "--seq", "512", "--heads", "2"]
    out = simulate(capsys, *args, *(["--causal"] if causal else []))
    assert (out["tiles"]["bq"], out["tiles"]["bk"]) == tiles
    assert [k["name"] for k in out["by_kernel"]] == [PRE, MAIN, POST]
    main = kernel(out, MAIN)
    assert main["threads_per_cta"] == (warpgroups + 1) * 128  # + the producer warpgroup
    assert main["ctas"] == 2 * -(-512 // tiles[1])  # one CTA per (K/V block, head)
    assert kernel(out, PRE)["threads_per_cta"] == 256  # FlashAttnBwdPreprocess
    assert kernel(out, PRE)["sram_bytes"] == 0


@pytest.mark.parametrize(
    "d, causal, kib",
    [
        # K + V + dQ staging (fp32) + 2 Q stages + 2 dO stages + LSE and dPsum + 2 dS stages;
        # no P in shared memory (Mma_dKV_is_RS). LSE rows: (round_up(kBlockM, 64) + kBlockM)
        (128, False, 32 + 32 + 40 + 40 + 40 + 40 + 2 * (128 + 80) * 4 / KB),  # 80 x 128
        (128, True, 32 + 32 + 32 + 32 + 32 + 32 + 2 * (64 + 64) * 4 / KB),  # 64 x 128
        (64, False, 16 + 16 + 32 + 32 + 32 + 64 + 2 * (128 + 128) * 4 / KB),  # 128 x 128
        # hdim 256, 64 x 80: 1 dO stage, 1 P and 1 dS stage in shared memory, dQ added from
        # registers (no staging buffer)
        (256, False, 40 + 40 + 64 + 32 + 10 + 10 + 2 * (64 + 64) * 4 / KB),
        # hdim 192, 64 x 96: 1 dO stage, P and dS once each, dQ staged
        (192, False, 36 + 36 + 48 + 48 + 24 + 12 + 12 + 2 * (64 + 64) * 4 / KB),
    ],
)
def test_the_main_kernels_shared_memory_is_its_tensor_storage(capsys, d, causal, kib):
    args = ["--pass", "bwd", "--head-dim", str(d), "--seq", "512", "--heads", "2"]
    out = simulate(capsys, *args, *(["--causal"] if causal else []))
    assert kernel(out, MAIN)["sram_bytes"] == kib * KB
    assert kernel(out, MAIN)["sram_bytes"] <= H100.sram_bytes_per_block


def test_bytes_are_the_k_v_blocks_reading_every_q_block(capsys):
    """hdim 128, 1,024 tokens, 2 heads, 80 x 128: each of the 8 K/V blocks of a head reads
    all of Q and dO once; dq_accum is cleared once, reduce-added 8 times (a read and a write
    each) and read once by the postprocess; K, V read and dK, dV, dQ written once."""
    out = simulate(capsys, "--pass", "bwd", "--head-dim", "128", "--seq", "1024", "--heads", "2")
    t = out["by_tensor"]
    one = 2 * 1024 * 128  # elements of Q (or dO, K, V, ...) over both heads
    assert t["Q"]["read_bytes"] == 8 * one * 2
    assert t["dO"]["read_bytes"] == (8 + 1) * one * 2  # + the preprocess's dot(dO, O)
    assert t["O"]["read_bytes"] == one * 2
    assert t["K"]["read_bytes"] == t["V"]["read_bytes"] == one * 2
    assert t["dQ_accum"]["write_bytes"] == (1 + 8) * one * 4
    assert t["dQ_accum"]["read_bytes"] == (8 + 1) * one * 4
    for name in ("dQ", "dK", "dV"):
        assert t[name]["write_bytes"] == one * 2
    rows = 2 * 1024  # dPsum and LSE_log2: written by the preprocess, read per K/V block
    assert t["dPsum"]["write_bytes"] == t["lse_log2"]["write_bytes"] == rows * 4
    assert t["dPsum"]["read_bytes"] == 8 * rows * 4
    assert out["hbm_read_bytes"] == sum(x["read_bytes"] for x in t.values())


def test_causal_visits_only_the_q_blocks_that_see_each_k_v_block(capsys):
    """hdim 64, 2,048 tokens, 128 x 128 both ways: K/V block j sees Q blocks j..15, 136 of
    the 256 pairs, so Q is read and the tiles multiplied 136 / 256 as often."""
    args = ["--pass", "bwd", "--head-dim", "64", "--seq", "2048", "--heads", "2"]
    full, causal = simulate(capsys, *args), simulate(capsys, *args, "--causal")
    q_block = 128 * 64 * 2
    assert full["by_tensor"]["Q"]["read_bytes"] == 2 * 256 * q_block
    assert causal["by_tensor"]["Q"]["read_bytes"] == 2 * 136 * q_block
    ratio = kernel(causal, MAIN)["matmul_flops"] / kernel(full, MAIN)["matmul_flops"]
    assert ratio == pytest.approx(136 / 256)


def test_grouped_heads_add_dk_dv_in_fp32_per_k_v_head(capsys):
    """GQA (4 query heads, 2 K/V heads, 512 tokens, hdim 128 at 80 x 128): mha_bwd's zeroed
    dk_accum and dv_accum (a fill each), every query head's 4 K/V blocks reduce-add 128 x 128
    fp32 tiles into its K/V head's, two postprocess kernels convert them."""
    args = ["--pass", "bwd", "--head-dim", "128", "--seq", "512", "--heads", "4"]
    out = simulate(capsys, *args, "--kv-heads", "2")
    names = [k["name"] for k in out["by_kernel"]]
    assert names == [
        "fill_kernel (dK_accum = 0)",
        "fill_kernel (dV_accum = 0)",
        PRE,
        MAIN,
        POST,
        "flash_bwd_postprocess (dK)",
        "flash_bwd_postprocess (dV)",
    ]
    acc = 2 * 512 * 128 * 4  # one fp32 accumulator over the 2 K/V heads
    adds = 4 * 4 * 128 * 128 * 4  # 4 query heads x 4 K/V blocks, one tile each
    for name in ("dK_accum", "dV_accum"):
        assert out["by_tensor"][name]["write_bytes"] == acc + adds
        assert out["by_tensor"][name]["read_bytes"] == adds + acc
    assert out["by_tensor"]["dK"]["write_bytes"] == 2 * 512 * 128 * 2
    assert "dK_rep" not in out["by_tensor"]  # no per-query-head copies, unlike flash-attn 2


def test_a_training_step_is_the_forward_then_the_backward(capsys):
    args = ["--head-dim", "128", "--seq", "2048", "--heads", "4", "--batch", "2"]
    fwd, bwd, both = (
        simulate(capsys, "--pass", pass_, *args, engine=True) for pass_ in ("fwd", "bwd", "fwd+bwd")
    )
    names = [k["name"] for k in both["by_kernel"]]
    assert names == [k["name"] for k in fwd["by_kernel"]] + [k["name"] for k in bwd["by_kernel"]]
    for key in ("hbm_read_bytes", "hbm_write_bytes", "matmul_flops"):
        assert both[key] == fwd[key] + bwd[key]
    gpu = [x["engine"]["times_s"]["kernel"] for x in (fwd, bwd, both)]
    assert gpu[2] == pytest.approx(gpu[0] + gpu[1], rel=0.05)
    # 2.5 times the forward's matmuls, at a lower rate (fp32 atomics, more traffic)
    assert 2.5 * gpu[0] < gpu[1] < 5 * gpu[0]
    (main,) = [k for k in bwd["engine"]["kernels"] if k["name"] == MAIN]
    assert main["ctas_per_sm"] == 1  # setmaxnreg takes the whole register file


def test_a_training_steps_forward_does_not_split(capsys):
    """flash_attn_func passes num_splits=1 (mha_fwd runs get_num_splits only for <= 0): the
    forward of a training step is one kernel, where the forward-only mirror splits this small
    problem (2 heads x 8 M blocks on 132 SMs) and combines."""
    args = ["--head-dim", "128", "--seq", "1024", "--heads", "2"]
    fwd, both = (simulate(capsys, "--pass", pass_, *args) for pass_ in ("fwd", "fwd+bwd"))
    assert "flash_fwd_splitkv_combine_kernel" in [k["name"] for k in fwd["by_kernel"]]
    names = [k["name"] for k in both["by_kernel"]]
    assert names == ["flash_fwd_kernel_sm90", PRE, MAIN, POST]
    assert kernel(both, "flash_fwd_kernel_sm90")["ctas"] == 2 * 1024 // 128  # (M block, head)


@pytest.mark.parametrize(
    "fields",
    [
        dict(head_dim=64, seq_q=200, seq_k=200, heads=2),
        dict(head_dim=128, causal=True, seq_q=300, seq_k=500, heads=4, kv_heads=2),
        dict(head_dim=256, seq_q=150, seq_k=170, heads=2, kv_heads=1, pass_="fwd+bwd"),
        dict(head_dim=96, seq_q=260, seq_k=260, heads=1, window_left=50, window_right=10),
        dict(head_dim=40, causal=True, seq_q=130, seq_k=130, heads=2, dtype="bf16"),
        dict(head_dim=192, seq_q=100, seq_k=300, heads=3, kv_heads=1, causal=True),
    ],
)
def test_the_backward_computes_exact_gradients_and_counts_what_it_traces(fields):
    p = Problem(**{"batch": 1, "pass_": "bwd", **fields})
    plan = make_impl_plan("flash-attn-3", p, H100)
    e = execute_plan(plan)
    assert max(e.grad_rel_err.values()) < 1e-9
    counted, traced = count_plan(plan).to_dict(), trace_plan(plan).totals()
    assert counted["by_tensor"] == traced["by_tensor"]
    assert counted["matmul_flops"] == traced["matmul_flops"]


def test_bf16_training_step_verifies_through_the_cli(capsys):
    args = ["--pass", "fwd+bwd", "--dtype", "bf16", "--head-dim", "64", "--seq", "256"]
    out = simulate(capsys, *args, "--heads", "2", "--verify")
    assert out["problem"]["dtype"] == "bf16"
    assert max(out["verify"]["grad_rel_err"].values()) < 1e-9


@pytest.mark.parametrize(
    "impl, args, words",
    [
        ("flash-attn-3", ["--dtype", "fp8", "--pass", "bwd"], "no fp8 backward"),
        ("flash-attn-3", ["--dtype", "fp8", "--pass", "fwd+bwd"], "no fp8 backward"),
        ("flash-attn-3@2024-07", ["--pass", "fwd+bwd"], "beta's backward"),
    ],
)
def test_what_the_backward_does_not_run_is_refused_on_one_line(capsys, impl, args, words):
    code, out, err = run(capsys, "simulate", "--impl", impl, "--seq", "256", "--no-engine", *args)
    assert code != 0 and not out
    assert words in err and err.strip().count("\n") == 0 and "Traceback" not in err
