"""flash-attn 2.0 (`--impl flash-attn-2@2.0`): the forward and backward as tag v2.0.9
launched them, beside the newest release, as a user sees them through the CLI."""

import json

import pytest
from plan_checks import assert_exact_and_counted
from test_cli import run

from hbmsim import Problem, get_hardware
from hbmsim.interpret.counts import count_plan
from hbmsim.libraries.registry import make_impl_plan

A100, A10, H100 = (get_hardware(n) for n in ("a100-80gb", "a10", "h100-sxm"))
CACHES = (8192, 16384, 32768, 65536, 131072)
DECODE = [
    "--gpu", "a100-80gb", "--batch", "1", "--heads", "16", "--kv-heads", "2", "--seq-q", "1",
    "--head-dim", "128", "--dtype", "fp16",
]  # fmt: skip


def simulate_json(capsys, *args) -> dict:
    code, out, err = run(capsys, "simulate", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_a_release_without_split_kv_grows_with_the_cache_and_the_newest_does_not(capsys):
    """Batch 1, 16 query heads over 2 K/V heads, one query token: release 2.0 runs one CTA per
    head over the whole cache, so each doubling of the cache about doubles its time; the
    newest release splits the cache over the SMs, so 16 times the cache costs it little more.
    Each says where its kernels come from."""
    old = [
        simulate_json(capsys, "--impl", "flash-attn-2@2.0", *DECODE, "--seq-k", str(n))
        for n in CACHES
    ]
    new = [
        simulate_json(capsys, "--impl", "flash-attn-2", *DECODE, "--seq-k", str(n)) for n in CACHES
    ]
    t_old = [d["time_s"] for d in old]
    t_new = [d["time_s"] for d in new]
    assert all(b > 1.8 * a for a, b in zip(t_old, t_old[1:], strict=False)), t_old
    assert t_new[-1] < 1.25 * t_new[0], t_new
    assert t_old[0] > t_new[0]  # 16 CTAs on 108 SMs against the split grid
    for d in old:
        assert [k["name"] for k in d["by_kernel"]] == ["flash_fwd_kernel"]
        assert any("v2.0.9 flash_fwd_launch_template.h" in n for n in d["notes"])
        assert any("no split-KV and no GQA packing" in n for n in d["notes"])
    for d in new:
        assert [k["name"] for k in d["by_kernel"]][-1] == "flash_fwd_splitkv_combine_kernel"
        assert any("num_splits_heuristic" in n and "flash_api.cpp" in n for n in d["notes"])
        assert any("seqlenq_ngroups_swapped" in n for n in d["notes"])


@pytest.mark.parametrize(
    "gpu, head_dim, causal, tiles, threads",
    [  # v2.0.9 flash_fwd_launch_template.h run_mha_fwd_hdim160 / hdim224 / hdim128
        ("a100-80gb", 160, False, (128, 32), 128),  # "For A100, H100, 128 x 32"
        ("h100-sxm", 160, True, (128, 32), 128),
        ("a10", 160, True, (64, 64), 128),  # sm86 causal: "64 x 64 ... (because it's square)"
        ("a10", 160, False, (128, 64), 256),  # "128 x 64 with 8 warps ... for non-causal"
        ("a100-80gb", 224, False, (128, 64), 256),  # max smem per block >= 112 KB
        ("a10", 224, False, (64, 64), 128),  # 99 KB
        ("a100-80gb", 136, False, (128, 32), 128),  # rounds up to the hdim160 kernel
        ("a100-80gb", 128, False, (128, 64), 128),
    ],
)
def test_release_2_0_launches_its_own_tiles_per_head_dim(
    capsys, gpu, head_dim, causal, tiles, threads
):
    args = ["--impl", "flash-attn-2@2.0", "--gpu", gpu, "--seq", "512", "--heads", "2"]
    args += ["--head-dim", str(head_dim), "--no-engine"] + (["--causal"] if causal else [])
    d = simulate_json(capsys, *args)
    assert (d["tiles"]["bq"], d["tiles"]["bk"]) == tiles
    (kernel,) = make_impl_plan(
        "flash-attn-2@2.0",
        Problem(heads=2, seq_q=512, seq_k=512, head_dim=head_dim, causal=causal),
        get_hardware(gpu),
    ).kernels
    assert kernel.threads_per_cta == threads
    assert any("v2.0.9 flash_fwd_launch_template.h" in n for n in d["notes"])


def test_the_newest_release_has_no_head_dim_160_kernel():
    """160 rounds up to 192 in the newest release (its HEADDIM_SWITCH), to 160 in 2.0."""
    p = Problem(heads=2, seq_q=512, seq_k=512, head_dim=160)
    new, old = (make_impl_plan(i, p, A100) for i in ("flash-attn-2", "flash-attn-2@2.0"))
    assert any("hdim192" in n for n in new.notes)
    assert any("hdim160" in n for n in old.notes)
    # the MMAs run on the compiled head dim: 192 columns against 160
    assert count_plan(new).matmul_flops > count_plan(old).matmul_flops


@pytest.mark.parametrize(
    "gpu, fields, tiles, v_in_registers, q_stages",
    [  # v2.0.9 flash_bwd_launch_template.h run_mha_bwd_hdim*
        ("a10", dict(head_dim=32, dropout=0.1), (128, 128), True, 2),  # < 104 KB: V in regs
        ("a100-80gb", dict(head_dim=32, dropout=0.1), (128, 128), False, 2),
        ("a100-80gb", dict(head_dim=160), (64, 64), False, 2),  # >= 116 KB
        ("a10", dict(head_dim=160), (64, 64), False, 1),  # No_double_buffer
        ("a100-80gb", dict(head_dim=224), (64, 64), False, 2),
        ("a100-80gb", dict(head_dim=256), (64, 64), False, 1),  # "A100 ... no double buffering"
        ("h100-sxm", dict(head_dim=256), (64, 64), False, 2),  # "H100"
    ],
)
def test_release_2_0_backward_launches_its_own_tiles(gpu, fields, tiles, v_in_registers, q_stages):
    p = Problem(heads=2, seq_q=256, seq_k=256, pass_="bwd", **fields)
    plan = make_impl_plan("flash-attn-2@2.0", p, get_hardware(gpu))
    loop = next(k for k in plan.kernels if k.name == "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel")
    assert (plan.tiles.bq, plan.tiles.bk) == tiles
    buffers = {b.name: b for b in loop.buffers}
    assert buffers["Vj"].registers == v_in_registers
    assert loop.stages == q_stages
    assert any("v2.0.9 flash_bwd_launch_template.h" in n for n in plan.notes)


def test_a_99_kb_gpu_keeps_v_in_registers_for_head_dim_32_with_dropout_in_both_releases():
    """run_mha_bwd_hdim32 (2.0 and newest alike): under 104 KB of shared memory per block the
    128 x 128 backward keeps V in registers even with dropout, which is what fits."""
    p = Problem(heads=2, seq_q=256, seq_k=256, head_dim=32, dropout=0.1, pass_="bwd")
    for impl in ("flash-attn-2@2.0", "flash-attn-2"):
        loop = make_impl_plan(impl, p, A10).kernels[1]
        assert next(b.registers for b in loop.buffers if b.name == "Vj")
        assert loop.sram_bytes <= A10.sram_bytes_per_block


@pytest.mark.parametrize(
    "fields, gpu",
    [
        (dict(batch=2, heads=8, kv_heads=2, seq_q=1, seq_k=600, head_dim=64), A100),
        (dict(heads=2, seq_q=90, seq_k=90, head_dim=152, causal=True, pass_="fwd+bwd"), A100),
        (dict(heads=2, seq_q=40, seq_k=300, head_dim=224, dropout=0.2, pass_="fwd+bwd"), H100),
    ],
)
def test_release_2_0_computes_attention_exactly_and_counts_what_it_traces(fields, gpu):
    assert_exact_and_counted(make_impl_plan("flash-attn-2@2.0", Problem(**fields), gpu))


@pytest.mark.parametrize(
    "args, field, words",
    [
        (["--window", "128"], "window", "release 2.0 has no window_size (it came with 2.3)"),
        (["--causal", "--seq-q", "1"], "causal", "top-left corner"),
        (["--gpu", "b200"], "gpu", "8.x and 9.0 only"),
        (["--dtype", "fp32"], "dtype", "fp16 and bf16 only"),
        (["--head-dim", "256", "--gpu", "a10", "--pass", "bwd"], "head_dim", "A100/A800 or H100"),
    ],
)
def test_what_release_2_0_lacks_is_refused_in_one_line(capsys, args, field, words):
    code, out, err = run(capsys, "simulate", "--impl", "flash-attn-2@2.0", "--seq-k", "512", *args)
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and f"{field}: flash-attn-2@2.0" in err and words in err


def test_an_unknown_release_names_the_releases_there_are(capsys):
    code, out, err = run(capsys, "simulate", "--impl", "flash-attn-2@2.5", "--seq", "512")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "release: must be one of latest, 2.0" in err


def test_the_causal_masks_agree_where_seq_q_equals_seq_k(capsys):
    """Release 2.0's top-left causal mask is hbmsim's bottom-right one on a square problem, which
    it therefore runs (and says so)."""
    d = simulate_json(
        capsys, "--impl", "flash-attn-2@2.0", "--seq", "512", "--causal", "--no-engine"
    )
    assert any("top-left mask is the bottom-right one" in n for n in d["notes"])


def test_each_older_release_is_named_as_its_module_lists_it():
    """The names a sweep or an explore spec accepts for older releases are each mirror's
    second release, as its module lists them (the first is the default)."""
    from hbmsim.libraries.flash_attn_1 import mirror as fa1
    from hbmsim.libraries.flash_attn_2 import mirror as fa2
    from hbmsim.libraries.flash_attn_3 import rules as fa3
    from hbmsim.libraries.registry import OLDER_RELEASES, WITH_RELEASES

    modules = dict(zip(WITH_RELEASES, (fa1, fa2, fa3), strict=True))
    assert tuple(f"{name}@{m.RELEASES[1]}" for name, m in modules.items()) == OLDER_RELEASES


def test_a_sweep_and_an_explore_spec_take_a_release_by_name(capsys, tmp_path):
    """`sweep --impl flash-attn-2@2.0,flash-attn-2` gives a row per release, the 2.0 row the
    counts `simulate --impl flash-attn-2@2.0` gives; an explore spec takes the same name as a
    program, and an unknown release is refused naming the field."""
    from hbmsim.explore.spec import parse_spec_text

    shape = ["--seq-q", "1", "--seq-k", "8192", "--heads", "16", "--kv-heads", "2"]
    shape += ["--head-dim", "128", "--gpu", "a100-80gb"]
    code, out, err = run(
        capsys,
        "sweep",
        "--impl",
        "flash-attn-2@2.0,flash-attn-2",
        *shape,
        "--no-engine",
        "--format",
        "json",
    )
    assert code == 0, err
    rows = {r["algo"]: r for r in json.loads(out)}
    assert set(rows) == {"flash-attn-2@2.0", "flash-attn-2"}
    code, out, _ = run(
        capsys, "simulate", "--impl", "flash-attn-2@2.0", *shape, "--no-engine", "--json"
    )
    assert code == 0
    assert rows["flash-attn-2@2.0"]["hbm_bytes"] == json.loads(out)["hbm_bytes"]
    assert rows["flash-attn-2@2.0"]["hbm_bytes"] > rows["flash-attn-2"]["hbm_bytes"]
    spec = "[axes]\nmodel = 'llama-3-8b'\ncontext = 1024\nprogram = ['flash-attn-2@2.0']\n"
    assert parse_spec_text(spec).points()
    code, _, err = run(capsys, "sweep", "--impl", "flash-attn-2@9.9", "--seq", "128")
    assert code == 2 and "algo" in err and "flash-attn-2@2.0" in err
