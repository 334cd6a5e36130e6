"""Multi-head latent attention (MLA) in its absorbed form: a value head dim of its own
(head_dim_v) and latent K/V (V is K's first head_dim_v columns, one cache row read once)."""

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_checks import assert_classes_hold_identical_ctas
from test_cli import run

from hbmsim import Problem, get_hardware
from hbmsim.algorithms.registry import make_plan
from hbmsim.api import simulate
from hbmsim.errors import ConfigError
from hbmsim.explore.spec import Point
from hbmsim.interpret.analytic import fa2_bytes, fa2_trips
from hbmsim.interpret.counts import count_plan
from hbmsim.interpret.execute import execute_plan
from hbmsim.interpret.trace import trace_plan
from hbmsim.problem.models import MODELS

H100 = get_hardware("h100-sxm")
MLA_ALGOS = ("fa2", "fa1", "split-kv", "standard")  # the programs that run latent K/V
LATENT = ("--head-dim", "576", "--head-dim-v", "512", "--latent-kv", "--dtype", "bf16")


def _json(capsys, *args):
    code, out, err = run(capsys, "simulate", *args, "--no-engine", "--json")
    assert code == 0, err
    return json.loads(out)


def test_latent_cache_is_read_once_per_row_with_no_v(capsys):
    """fa2 decoding one query against 1,000 latent rows reads K as 1,000 x 576 x 2 B and no V:
    the values are the first 512 columns of the tile already on chip. O is 512 wide."""
    d = _json(capsys, "--heads", "1", "--seq-q", "1", "--seq-k", "1000", *LATENT)
    by = d["by_tensor"]
    assert "V" not in by
    assert by["K"]["read_bytes"] == 1000 * 576 * 2
    assert by["Q"]["read_bytes"] == 576 * 2
    assert by["O"]["write_bytes"] == 512 * 2
    assert d["hbm_read_bytes"] == 1000 * 576 * 2 + 576 * 2


def test_without_latent_v_is_a_tensor_of_its_own(capsys):
    """The same shapes with separate K and V read V's 512 columns on top of K's 576."""
    d = _json(capsys, "--heads", "1", "--seq-q", "1", "--seq-k", "1000", "--head-dim", "576",
              "--head-dim-v", "512", "--dtype", "bf16")  # fmt: skip
    by = d["by_tensor"]
    assert by["K"]["read_bytes"] == 1000 * 576 * 2
    assert by["V"]["read_bytes"] == 1000 * 512 * 2
    assert by["O"]["write_bytes"] == 512 * 2


def test_every_query_head_of_the_textbook_program_reads_the_latent_rows(capsys):
    """The textbook fa2 runs one CTA per (batch, head): with 4 heads sharing one latent
    cache, each reads it (paper convention: every load is off-chip), 4 x 300 x 576 x 2 B."""
    d = _json(capsys, "--heads", "4", "--kv-heads", "1", "--seq-q", "1", "--seq-k", "300",
              *LATENT)  # fmt: skip
    assert d["by_tensor"]["K"]["read_bytes"] == 4 * 300 * 576 * 2


def test_flops_count_qk_over_d_and_pv_over_dv(capsys):
    """attention_flops = 2 b h Nq Nk (d + dv), the count FlashMLA's benchmark uses."""
    d = _json(capsys, "--heads", "2", "--kv-heads", "1", "--seq-q", "1", "--seq-k", "64",
              *LATENT)  # fmt: skip
    assert d["attention_flops"] == 2 * 2 * 1 * 64 * (576 + 512)


@pytest.mark.parametrize("algo", MLA_ALGOS)
def test_verify_matches_naive_attention_with_v_from_k(capsys, algo):
    """--verify executes the program and compares with naive attention on V = K[..., :dv]."""
    d = _json(capsys, "--algo", algo, "--heads", "4", "--kv-heads", "1", "--seq-q", "5",
              "--seq-k", "70", "--head-dim", "24", "--head-dim-v", "16", "--latent-kv",
              "--causal", "--verify")  # fmt: skip
    assert d["verify"]["rel_err"] <= 1e-12
    assert d["problem"]["head_dim_v"] == 16 and d["problem"]["latent_kv"] is True


def test_executed_output_equals_attention_written_out_here():
    """The executor's O equals softmax(Q Kᵀ · scale) K[..., :dv], computed in this test."""
    p = Problem(batch=1, heads=3, kv_heads=1, seq_q=2, seq_k=19, head_dim=12, head_dim_v=8,
                latent_kv=True)  # fmt: skip
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 3, 2, 12))
    k = rng.standard_normal((1, 1, 19, 12))
    e = execute_plan(make_plan("fa2", p, H100, 2, 4), inputs={"Q": q, "K": k})
    s = np.einsum("hqd,kd->hqk", q[0], k[0, 0]) / np.sqrt(12)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    o = (w / w.sum(axis=-1, keepdims=True)) @ k[0, 0, :, :8]
    np.testing.assert_allclose(e.output[0], o, rtol=1e-12, atol=1e-14)
    assert e.output.shape == (1, 3, 2, 8)


@st.composite
def latent_problems(draw):
    d = draw(st.integers(2, 20))
    latent = draw(st.booleans())
    dv = draw(st.integers(1, d if latent else 24))
    heads = draw(st.sampled_from([1, 2, 4]))
    causal = draw(st.booleans())
    seq_k = draw(st.integers(1, 60))
    return Problem(
        batch=draw(st.integers(1, 2)),
        heads=heads,
        kv_heads=draw(st.sampled_from([k for k in (1, 2) if heads % k == 0])),
        seq_q=draw(st.integers(1, seq_k if causal else 40)),
        seq_k=seq_k,
        head_dim=d,
        head_dim_v=dv,
        latent_kv=latent,
        causal=causal,
        dtype=draw(st.sampled_from(["fp16", "fp32"])),
    )


@settings(max_examples=60, deadline=None)
@given(p=latent_problems(), algo=st.sampled_from(MLA_ALGOS), bq=st.integers(1, 24),
       bk=st.integers(1, 24), bd=st.integers(1, 12))  # fmt: skip
def test_programs_are_exact_and_counts_equal_the_trace(p, algo, bq, bk, bd):
    """Every program that runs latent K/V or a value head dim of its own equals naive
    attention; its counts equal the sum over its traced ops, and its declared CTA classes
    hold identical CTAs."""
    splits = None
    if algo == "split-kv":
        splits = min(-(-p.seq_k // bk), 3)
    plan = make_plan(algo, p, H100, bq, bk, bd if algo == "standard" else None, splits)
    e = execute_plan(plan, seed=2)
    assert e.rel_err <= 1e-12
    trace = trace_plan(plan)
    counted, traced = count_plan(plan).to_dict(), trace.totals()
    for f in ("hbm_read_bytes", "hbm_write_bytes", "trips", "matmul_flops", "vector_flops"):
        assert counted[f] == traced[f], f
    assert counted["by_tensor"] == traced["by_tensor"]
    # every CTA a declared class holds runs the same op sequence (what counting relies on)
    assert_classes_hold_identical_ctas(plan)
    if p.latent_kv:
        assert "V" not in plan.tensors and "Vj" not in {b.name for k in plan.kernels
                                                         for b in k.buffers}  # fmt: skip


@pytest.mark.parametrize("latent", [True, False])
def test_fa2_counts_equal_the_closed_form(latent):
    """The closed form (Q once, K once per Q block, V too unless latent, O of dv columns)
    agrees with the counts on an unmasked problem."""
    p = Problem(batch=2, heads=4, kv_heads=1, seq_q=96, seq_k=200, head_dim=40, head_dim_v=32,
                latent_kv=latent)  # fmt: skip
    plan = make_plan("fa2", p, H100, 32, 64)
    counted = count_plan(plan).to_dict()
    closed = fa2_bytes(p, plan.tiles)
    for name, rw in closed.items():
        assert counted["by_tensor"][name]["read_bytes"] == rw["read_bytes"], name
        assert counted["by_tensor"][name]["write_bytes"] == rw["write_bytes"], name
    assert set(counted["by_tensor"]) == set(closed)
    assert counted["trips"] == fa2_trips(p, plan.tiles)


@pytest.mark.parametrize(
    "name,heads,layers",
    [("deepseek-v2", 128, 60), ("deepseek-v3", 128, 61), ("deepseek-v2-lite", 16, 27)],
)
def test_presets_give_the_absorbed_decode_shape(capsys, name, heads, layers):
    """DeepSeek's MLA absorbed: H query heads, one latent row of 512 + 64 columns, V its
    first 512 (kv_lora_rank 512, qk_rope_head_dim 64 in the cited configs)."""
    d = _json(capsys, "--model", name, "--seq-q", "1", "--seq-k", "256")
    p = d["problem"]
    assert (p["heads"], p["kv_heads"], p["head_dim"]) == (heads, 1, 576)
    assert (p["head_dim_v"], p["latent_kv"]) == (512, True)
    assert d["by_tensor"]["K"]["read_bytes"] == heads * 256 * 576 * 2  # fp16: 2 B a column
    assert "V" not in d["by_tensor"]
    assert MODELS[name].layers == layers
    assert "kv_lora_rank 512 + rope 64" in d["model"]["latent_note"]


def test_a_preset_says_its_latent_shape_in_the_text_report(capsys):
    code, out, err = run(capsys, "simulate", "--model", "deepseek-v3", "--seq-q", "1",
                         "--seq-k", "128", "--no-engine")  # fmt: skip
    assert code == 0, err
    assert "d 576, dv 512, latent K/V" in out
    assert "model: deepseek-v3: multi-head latent attention" in out


def test_the_engine_times_a_latent_decode():
    """A DeepSeek-V3 decode step (batch 4, 4k cache) runs through the engine to a time."""
    p = Problem(batch=4, heads=128, kv_heads=1, seq_q=1, seq_k=4096, head_dim=576,
                head_dim_v=512, latent_kv=True, dtype="bf16")  # fmt: skip
    r = simulate(p, H100, algo="split-kv")
    assert r.extra["time_s"] > 0 and "skipped" not in r.extra.get("engine", {})


def test_an_explore_point_of_an_mla_model_carries_its_latent_shape():
    shape = MODELS["deepseek-v3"].shape()
    inputs = {**shape, "model": "deepseek-v3", "batch": 1, "context": 512, "pass": "decode",
              "causal": False, "dtype": "bf16"}  # fmt: skip
    p = Point(0, inputs, {}).problem
    assert (p.head_dim, p.dv, p.latent_kv, p.seq_q) == (576, 512, True, 1)


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--head-dim", "24", "--head-dim-v", "32", "--latent-kv"),
         "head_dim_v: must be at most head_dim (24) with latent_kv"),
        (("--head-dim", "24", "--head-dim-v", "0"), "head_dim_v: must be from 1 to 1,024"),
        (("--head-dim", "24", "--head-dim-v", "16", "--pass", "fwd+bwd"),
         "pass: must be fwd when head_dim_v (16) differs from head_dim (24)"),
        (("--head-dim", "24", "--latent-kv", "--pass", "bwd"), "pass: must be fwd"),
        (("--head-dim", "24", "--head-dim-v", "16", "--latent-kv", "--impl", "flash-attn-2"),
         "head_dim_v: flash-attn-2: this mirror runs Q, K and V of one head dim"),
        (("--head-dim", "24", "--head-dim-v", "16", "--impl", "torch-eager"),
         "head_dim_v: torch-eager: this mirror runs Q, K and V of one head dim"),
        (("--head-dim", "32", "--head-dim-v", "16", "--latent-kv", "--algo", "fa2-kernel"),
         "head_dim_v: fa2-kernel mirrors a CUDA kernel with Q, K and V of one head dim"),
        (("--model", "deepseek-v3", "--head-dim-v", "256"),
         "--model deepseek-v3 sets head_dim_v (512): drop --head-dim-v or --model"),
        (("--model", "llama-3-8b", "--latent-kv"),
         "--model llama-3-8b sets latent_kv (false): drop --latent-kv or --model"),
    ],
)  # fmt: skip
def test_bad_combinations_are_one_line(capsys, args, needle):
    """Each refusal names the field and what it allows, in one line, with no output."""
    shape = () if "--model" in args else ("--heads", "2", "--kv-heads", "1")
    code, out, err = run(capsys, "simulate", "--seq", "16", *shape, *args)
    assert code == 2 and out == ""
    assert needle in err, err
    assert err.count("\n") == 1


def test_the_api_refuses_a_latent_flag_that_is_not_a_boolean():
    with pytest.raises(ConfigError, match="latent_kv: must be true or false"):
        Problem(head_dim=8, latent_kv="yes")


def test_defaults_are_unchanged():
    """Without the new fields a problem's JSON, FLOP count and tensors are what they were."""
    p = Problem(batch=1, heads=2, seq_q=64, seq_k=64, head_dim=32)
    d = p.to_dict()
    assert "head_dim_v" not in d and "latent_kv" not in d
    assert p.attention_flops == 4 * 2 * 64 * 64 * 32
    plan = make_plan("fa2", p, H100, 16, 16)
    assert plan.tensors["V"].shape == (1, 2, 64, 32) and plan.tensors["O"].shape == (1, 2, 64, 32)
    # replacing head_dim moves the value head dim with it when none was given
    assert dataclasses.replace(p, head_dim=48).dv == 48
    assert Problem.from_dict(Problem(head_dim=8, head_dim_v=4, latent_kv=True).to_dict()).dv == 4


@pytest.mark.parametrize("batch", [1, 8])
def test_decode_intensity_against_the_ridge(capsys, batch):
    """DeepSeek-V3 decoding one token against 4,096 latent rows, bf16 on an H100 SXM: with each
    latent row read once per request, 2 x 128 x 4,096 x (576 + 512) flops over
    2 B x (128 x 576 + 4,096 x 576 + 128 x 512) bytes per request, 228 flop/B at any batch,
    under the ridge 989.4 TFLOP/s / 3.35 TB/s = 295 flop/B: memory-bound."""
    d = _json(capsys, "--model", "deepseek-v3", "--seq-q", "1", "--seq-k", "4096", "--batch",
              str(batch), "--dtype", "bf16", "--gpu", "h100-sxm")  # fmt: skip
    r = d["latent_roofline"]
    assert r["flops"] == batch * 2 * 128 * 4096 * (576 + 512)
    assert r["bytes"] == batch * 2 * (128 * 576 + 4096 * 576 + 128 * 512)
    assert r["intensity_flop_per_byte"] == pytest.approx(228.3, abs=0.1)
    assert r["ridge_flop_per_byte"] == pytest.approx(989.4 / 3.35)
    assert r["bound"] == "memory"


def test_two_query_tokens_per_request_are_compute_bound(capsys):
    """With two query tokens (speculative decoding) 256 query rows share each latent row: the
    intensity nearly doubles, past the ridge (FlashMLA's deep dive: compute-bound once
    h_q s_q is about 128 or more on its throttled H800)."""
    d = _json(capsys, "--model", "deepseek-v3", "--seq-q", "2", "--seq-k", "4096", "--dtype",
              "bf16", "--gpu", "h100-sxm")  # fmt: skip
    assert d["latent_roofline"]["bound"] == "compute"
    code, out, _ = run(capsys, "simulate", "--model", "deepseek-v3", "--seq-q", "2",
                       "--seq-k", "4096", "--dtype", "bf16", "--no-engine")  # fmt: skip
    assert "MLA roofline    latent K/V read once per request: 432 flop/B" in out
    assert "compute-bound" in out


def test_plain_problems_have_no_latent_roofline(capsys):
    d = _json(capsys, "--seq", "256")
    assert "latent_roofline" not in d


def test_an_explore_spec_refuses_training_an_mla_model(capsys, tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('[axes]\nmodel = ["deepseek-v3"]\ncontext = [1024]\npass = ["training"]\n')
    code, out, err = run(capsys, "explore", str(spec), "-o", str(tmp_path / "o.parquet"),
                         "--dry-run")  # fmt: skip
    assert code == 2 and out == ""
    assert "axes.pass: pass: must be fwd when head_dim_v (512) differs" in err
    assert err.count("\n") == 1
