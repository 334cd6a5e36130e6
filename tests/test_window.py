"""Sliding-window attention (flash-attn's window_size): exact against naive attention with the
band mask, counts equal to the traced ops, K/V tiles outside the band never loaded, and the
window on the command line, in errors and in the Mistral 7B preset."""

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_checks import assert_classes_hold_identical_ctas, assert_exact_and_counted
from strategies import ALL_PASSES, compatible, plan_args, problems, tiles, windows
from test_cli import run

from hbmsim import ConfigError, Problem, get_hardware
from hbmsim.algorithms.registry import make_plan
from hbmsim.errors import InputFileError
from hbmsim.explore.spec import parse_spec_text
from hbmsim.interpret.counts import count_plan
from hbmsim.interpret.execute import execute_plan
from hbmsim.interpret.reference import causal_visible
from hbmsim.interpret.trace import trace_plan
from hbmsim.interpret.tracefile import load_trace
from hbmsim.libraries.flash_attn_2.rules import Window, window
from hbmsim.libraries.registry import make_impl_plan

H100 = get_hardware("h100-sxm")
WINDOW_ALGOS = ["standard", "fa1", "fa2", "split-kv"]


def cli(capsys, line: str):
    """Run `hbmsim LINE` in-process: (exit code, stdout, stderr)."""
    return run(capsys, *line.split())


def _plan(algo, p, t, splits=2):
    p = compatible(algo, p)
    bq, bk, bd, s = plan_args(algo, t, p, splits)
    return make_plan(algo, p, H100, bq, bk, bd, s)


def _band(p):
    """The naive band mask, written here from the definition (not the code's)."""
    i = np.arange(p.seq_q)[:, None]
    j = np.arange(p.seq_k)[None, :]
    off = p.seq_k - p.seq_q
    right = 0 if p.causal else p.window_right
    ok = np.ones((p.seq_q, p.seq_k), bool)
    if right >= 0:
        ok &= j <= i + off + right
    if p.window_left >= 0:
        ok &= j >= i + off - p.window_left
    return ok


# --- exactness -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    p=problems(max_seq=48, max_d=8, passes=ALL_PASSES),
    t=tiles(20),
    algo=st.sampled_from(WINDOW_ALGOS),
    splits=st.integers(1, 4),
)
def test_windowed_programs_equal_naive_attention_with_the_band_mask(data, p, t, algo, splits):
    """Every textbook program, forward and backward, over window sizes, tiles, lengths and
    causal on or off: output, lse and gradients match float64 naive attention."""
    p = data.draw(windows(p))
    e = execute_plan(_plan(algo, p, t, splits), seed=4)
    assert e.rel_err <= 1e-12
    if e.lse_max_abs_err is not None:
        assert e.lse_max_abs_err <= 1e-12
    if e.grad_rel_err:
        assert max(e.grad_rel_err.values()) <= 1e-10, e.grad_rel_err


@settings(max_examples=60, deadline=None)
@given(data=st.data(), p=problems(max_seq=96, dropout=False), t=tiles(24), mult=st.integers(1, 3))
def test_fa2_window_classes_hold_identical_ctas(data, p, t, mult):
    """fa2 groups the Q blocks of a window's steady state into one class (bq a multiple of
    bk); each class's CTAs really are alike."""
    p = data.draw(windows(p))
    bk = t[1]
    plan = make_plan("fa2", p, H100, bk * mult, bk)
    assert_classes_hold_identical_ctas(plan)


def test_a_long_window_is_a_few_classes():
    """64k tokens, window 4,096, 64 x 64 tiles: the first 64 Q blocks are a class each (their
    band grows), the other 960 one class."""
    p = Problem(seq_q=65536, seq_k=65536, causal=True, window_left=4096)
    grid = make_plan("fa2", p, H100, 64, 64).kernels[0].grid
    assert [len(c.axes[2]) for c in grid] == [1] * 64 + [960]


def test_the_reference_mask_is_the_band():
    """The executor's ground truth hides exactly what the definition hides."""
    for kw in (
        dict(causal=True, window_left=3),
        dict(window_left=2, window_right=1),
        dict(window_left=-1, window_right=0),
        dict(seq_q=4, window_left=0, window_right=5),
    ):
        p = Problem(batch=1, heads=1, seq_q=kw.pop("seq_q", 9), seq_k=9, head_dim=2, **kw)
        assert (causal_visible(p) == _band(p)).all()
    p = Problem(batch=1, heads=1, seq_q=5, seq_k=5, head_dim=2, causal=True, window_left=1)
    assert causal_visible(p).astype(int).tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [0, 1, 1, 0, 0],
        [0, 0, 1, 1, 0],
        [0, 0, 0, 1, 1],
    ]


# --- counts ----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    p=problems(max_seq=64, passes=ALL_PASSES),
    t=tiles(),
    algo=st.sampled_from(WINDOW_ALGOS),
    splits=st.integers(1, 5),
)
def test_windowed_counts_equal_the_traced_sum(data, p, t, algo, splits):
    p = data.draw(windows(p))
    plan = _plan(algo, p, t, splits)
    counted = count_plan(plan).to_dict()
    traced = trace_plan(plan).totals()
    for f in ("hbm_read_bytes", "hbm_write_bytes", "trips", "matmul_flops", "by_tensor"):
        assert counted[f] == traced[f], f


@settings(max_examples=80, deadline=None)
@given(data=st.data(), p=problems(max_seq=80, dropout=False), t=tiles(24))
def test_fa2_loads_exactly_the_kv_tiles_the_band_touches(data, p, t):
    """K bytes of fa2 = (tiles with any visible entry, found on the naive mask) x tile bytes:
    no tile outside the band is loaded, none inside is missed."""
    p = data.draw(windows(p))
    bq, bk = t[0], t[1]
    band = _band(p)
    want = 0
    for r0 in range(0, p.seq_q, bq):
        for c0 in range(0, p.seq_k, bk):
            if band[r0 : r0 + bq, c0 : c0 + bk].any():
                want += min(bk, p.seq_k - c0) * p.head_dim * p.itemsize
    got = count_plan(make_plan("fa2", p, H100, bq, bk)).by_tensor["K"].read_bytes
    assert got == p.batch * p.heads * want


@pytest.mark.parametrize("algo", ["fa2", "fa1"])
def test_kv_bytes_fall_as_the_window_narrows(algo):
    """Causal, 4,096 tokens, 64 x 64 tiles: Q block i reads K/V blocks max(0, i - w/64) .. i,
    i.e. min(i, w/64) + 1 of them (counted here from the band, by hand); each K block once in
    fa1. The counts follow that and fall with w."""
    n, b, d, heads = 4096, 64, 64, 2
    last = None
    for w in (-1, 2048, 1024, 256, 64, 0):
        p = Problem(batch=1, heads=heads, seq_q=n, seq_k=n, head_dim=d, causal=True, window_left=w)
        k = count_plan(make_plan(algo, p, H100, b, b)).by_tensor["K"].read_bytes
        reach = n // b if w < 0 else w // b
        if algo == "fa2":
            blocks = sum(min(i, reach) + 1 for i in range(n // b))
            assert k == heads * blocks * b * d * 2
        else:
            assert k == heads * n * d * 2  # fa1 reads K once: every K block is in some band
        if last is not None and algo == "fa2":
            assert k < last
        last = k


def test_fa1_reads_q_only_for_the_blocks_in_the_band():
    """fa1 (K/V outer): K/V block j is streamed past the Q blocks whose rows see it. With
    causal, window 64 and 64-tiles at 1,024 tokens, block j meets Q blocks j and j + 1 (the
    last one only j): 2 x 16 - 1 Q-block reads instead of the causal 16 x 17 / 2."""
    n, b, d = 1024, 64, 32
    p = Problem(batch=1, heads=1, seq_q=n, seq_k=n, head_dim=d, causal=True, window_left=64)
    q = count_plan(make_plan("fa1", p, H100, b, b)).by_tensor["Q"].read_bytes
    assert q == (2 * (n // b) - 1) * b * d * 2


def test_standard_attention_still_stores_the_whole_table_and_a_band_mask():
    p = Problem(batch=1, heads=2, seq_q=512, seq_k=512, head_dim=32, causal=True, window_left=64)
    r = count_plan(make_plan("standard", p, H100))
    causal = Problem(batch=1, heads=2, seq_q=512, seq_k=512, head_dim=32, causal=True)
    full = count_plan(make_plan("standard", causal, H100))
    assert r.by_tensor["S"].write_bytes == full.by_tensor["S"].write_bytes == 2 * 2 * 512 * 512 * 2
    assert r.by_tensor["window_mask"].read_bytes == 2 * 512 * 512  # one byte per entry, per head
    assert "causal_mask" not in r.by_tensor


def test_attention_flops_count_the_band():
    for kw in (
        dict(causal=True, window_left=5),
        dict(window_left=3, window_right=7),
        dict(seq_q=20, window_left=0, window_right=4),
        dict(window_left=30, window_right=-1),
    ):
        p = Problem(batch=2, heads=3, seq_q=kw.pop("seq_q", 33), seq_k=33, head_dim=8, **kw)
        assert p.attention_flops == 4 * 2 * 3 * int(_band(p).sum()) * 8


# --- problem and command line ----------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,field,words",
    [
        (dict(window_left=-2), "window_left", "-1 (unbounded) or from 0 to seq_k (64)"),
        (dict(window_left=65), "window_left", "from 0 to seq_k (64)"),
        (dict(window_right=100), "window_right", "from 0 to seq_k (64)"),
        (dict(causal=True, window_right=3), "window_right", "0 or -1 with causal"),
        (dict(seq_q=80, window_right=4), "window_right", "at least seq_q - seq_k (16)"),
        (dict(window_left=1.5), "window_left", "got 1.5"),
    ],
)
def test_bad_windows_are_refused_naming_the_field(kw, field, words):
    base = dict(batch=1, heads=1, seq_q=kw.pop("seq_q", 64), seq_k=64, head_dim=8)
    with pytest.raises(ConfigError) as info:
        Problem(**base, **kw)
    assert info.value.field == field and words in str(info.value)


@pytest.mark.parametrize(
    "args,words",
    [
        (["--window", "-5"], "window_left: must be -1 (unbounded) or from 0 to seq_k (4,096)"),
        (["--window", "5000"], "window_left: must be -1 (unbounded) or from 0 to seq_k (4,096)"),
        (["--window", "1,2,3"], "window: expected LEFT or LEFT,RIGHT"),
        (["--window", "abc"], "window: expected integers"),
        (["--window", "64,8", "--causal"], "window_right: must be 0 or -1 with causal"),
        (["--window", "64", "--algo", "fa2-kernel"], "window: fa2-kernel mirrors a CUDA kernel"),
        (["--model", "mistral-7b", "--seq", "8192", "--window", "64"], "drop --window or --model"),
    ],
)
def test_bad_windows_on_the_command_line_are_one_line(capsys, args, words):
    code, out, err = run(capsys, "simulate", "--no-engine", *args)
    assert code != 0 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_simulate_json_carries_the_window_and_its_counts(capsys):
    """--window 128 --causal at 1,024 tokens, 64 x 64 tiles: Q block i reads blocks
    max(0, i - 2) .. i, 1 + 2 + 3 x 14 = 45 K tiles per head."""
    code, out, _ = cli(
        capsys,
        "simulate --algo fa2 --seq 1024 --heads 2 --head-dim 64 --bq 64 --bk 64 --causal "
        "--window 128 --no-engine --json",
    )
    assert code == 0
    d = json.loads(out)
    assert d["problem"]["window_left"] == 128 and d["problem"]["window_right"] == -1
    assert d["problem"]["causal"] is True
    assert d["by_tensor"]["K"]["read_bytes"] == 2 * 45 * 64 * 64 * 2
    band = 2 * (128 * 129 // 2 + 129 * (1024 - 128))  # row i sees min(i, 128) + 1 keys
    assert d["attention_flops"] == 4 * band * 64


def test_simulate_text_says_the_window(capsys):
    code, out, _ = cli(capsys, "simulate --seq 512 --window 32,16 --heads 1 --no-engine")
    assert code == 0 and "window 32 left, 16 right" in out.splitlines()[0]


def test_sweep_takes_a_window(capsys):
    """Each length of the sweep reads K/V inside the window: Q block i of 64 reads
    min(i, 4) + 1 K/V blocks of 64 x 64 x 2 bytes (K and V), 16 heads."""
    code, out, _ = cli(
        capsys, "sweep --algo fa2 --seq 1024,2048 --causal --window 256 --no-engine --format json"
    )
    assert code == 0
    rows = json.loads(out)
    for row, n in zip(rows, (1024, 2048), strict=True):
        kv = 2 * 16 * sum(min(i, 4) + 1 for i in range(n // 64)) * 64 * 64 * 2
        q_o_lse = 16 * n * (64 * 2 * 2) + 16 * n * 4
        assert row["hbm_bytes"] == kv + q_o_lse


def test_verify_matches_naive_with_a_window(capsys):
    code, out, _ = cli(
        capsys,
        "simulate --algo fa2 --seq 200 --heads 2 --head-dim 16 --window 17,5 --verify "
        "--no-engine --json",
    )
    assert code == 0
    assert json.loads(out)["verify"]["rel_err"] <= 1e-12


# --- model presets ---------------------------------------------------------------------------


def test_mistral_7b_at_16k_reads_kv_only_inside_its_window(capsys):
    """Mistral 7B's W = 4,096 (paper Table 1): at 16,384 tokens with 64 x 64 tiles, Q block i
    reads min(i, 64) + 1 K blocks: 2,080 + 192 x 65 = 14,560 per head, not 256 x 257 / 2."""
    code, out, _ = cli(capsys, "simulate --model mistral-7b --seq 16384 --no-engine --json")
    assert code == 0
    d = json.loads(out)
    assert d["problem"]["causal"] is True and d["problem"]["window_left"] == 4096
    assert d["model"]["window"] == 4096 and "arXiv:2310.06825" in d["model"]["window_source"]
    assert d["tiles"] == {"bq": 64, "bk": 64}
    assert d["by_tensor"]["K"]["read_bytes"] == 32 * 14_560 * 64 * 128 * 2


def test_mistral_7b_text_output_says_the_window(capsys):
    code, out, _ = cli(capsys, "simulate --model mistral-7b --seq 16384 --no-engine")
    assert code == 0
    assert "window 4,096 left, 0 (causal) right" in out
    assert "model: mistral-7b: sliding window of 4,096 keys" in out


def test_mistral_7b_within_its_window_hides_nothing(capsys):
    code, out, _ = cli(capsys, "simulate --model mistral-7b --seq 2048 --no-engine --json")
    assert code == 0
    d = json.loads(out)
    assert d["problem"]["window_left"] == -1 and d["problem"]["causal"] is False
    assert "fits in it" in d["model"]["window_note"]


# --- the flash-attn 2 mirror -----------------------------------------------------------------

A100, A10 = get_hardware("a100-80gb"), get_hardware("a10")


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    p=problems(max_seq=80, max_d=24, passes=ALL_PASSES),
    impl=st.sampled_from(["flash-attn-2", "flash-decoding", "flash-attn-3"]),
)
def test_flash_attn_local_runs_exactly_and_counts_what_it_traces(data, p, impl):
    """flash-attn 2's local kernels (forward, backward, split-KV, decoding) and FA3's forward
    with any window:
    naive attention with the band mask, counts equal to the trace, and every declared CTA
    class made of CTAs with one op sequence."""
    p = data.draw(windows(p))
    p = dataclasses.replace(
        p, head_dim=8 * -(-p.head_dim // 8), dtype="bf16" if p.dtype == "bf16" else "fp16"
    )
    if impl in ("flash-decoding", "flash-attn-3"):
        p = dataclasses.replace(p, pass_="fwd", dropout=0.0)
    plan = make_impl_plan(impl, p, H100 if impl == "flash-attn-3" else A100)
    assert_exact_and_counted(plan, ("matmul_flops", "vector_flops", "exp_ops"))
    assert_classes_hold_identical_ctas(plan)


def _fa2(hw=A100, **kw):
    base = dict(batch=1, heads=8, seq_q=2048, seq_k=2048, head_dim=128, dtype="bf16")
    return make_impl_plan("flash-attn-2", Problem(**{**base, **kw}), hw)


def test_flash_attn_2_clamps_the_window_as_mha_fwd_does():
    """window_size_left >= seqlen_k becomes -1; causal sets the right side to 0 (but not for
    one query row); params.is_causal = left < 0 and right == 0; Is_local otherwise."""
    p = Problem(seq_q=64, seq_k=64, causal=True, window_left=64)
    assert window(p) == Window(-1, 0, True, False)
    p = Problem(seq_q=64, seq_k=64, causal=True, window_left=16)
    assert window(p) == Window(16, 0, False, True)
    p = Problem(seq_q=64, seq_k=64, window_left=-1, window_right=0)
    assert window(p) == Window(-1, 0, True, False)
    p = Problem(seq_q=1, seq_k=64, causal=True, window_left=16)
    assert window(p) == Window(16, -1, False, True)
    p = Problem(seq_q=64, seq_k=64, window_left=3, window_right=64)
    assert window(p) == Window(3, -1, False, True)


def test_flash_attn_2_local_masks_every_block_and_causal_only_the_diagonal():
    """Causal 2,048 x 2,048, head dim 128, 128 x 64 tiles on an A100. Causal: row block m
    visits 2m + 2 K/V blocks and masks ceil(128 / 64) = 2 of them. Local (window 512): it
    visits min(2m + 2, 10) blocks (n_block_min = (128 m - 512) / 64) and masks all. The mask
    costs one vector op per score, 128 x 64 per masked block, 8 heads."""
    causal, local = _fa2(causal=True), _fa2(causal=True, window_left=512)
    assert local.tiles.bq == causal.tiles.bq == 128 and local.tiles.bk == causal.tiles.bk == 64
    visits = [min(2 * m + 2, 2 * m + 2 - max(0, (128 * m - 512) // 64)) for m in range(16)]
    assert visits[0] == 2 and visits[-1] == 10
    per_block = 128 * 64
    kv_bytes = lambda plan: count_plan(plan).by_tensor["K"].read_bytes  # noqa: E731
    assert kv_bytes(local) == 8 * sum(visits) * 64 * 128 * 2
    # vector work = row blocks x epilogue + visits x softmax + masked blocks x 128 x 64: the
    # unmasked and causal kernels give the first two, which predict the local kernel's
    full = _fa2()
    v = {k: count_plan(plan).vector_flops for k, plan in (("n", full), ("c", causal), ("l", local))}
    visits_n, visits_c = 8 * 16 * 32, 8 * sum(2 * m + 2 for m in range(16))
    softmax = (v["n"] - v["c"] + 8 * 16 * 2 * per_block) // (visits_n - visits_c)
    epilogues = v["n"] - visits_n * softmax
    assert v["l"] == epilogues + 8 * sum(visits) * (softmax + per_block)
    assert any("Is_local" in n for n in local.notes)


def test_flash_attn_2_local_takes_the_non_causal_tiles_on_sm86():
    """run_mha_fwd_hdim128 switches on params.is_causal: sm86 causal gets 64 x 64, but a
    causal problem with a window runs as local (is_causal false): 128 x 32."""
    assert (_fa2(A10, causal=True).tiles.bq, _fa2(A10, causal=True).tiles.bk) == (64, 64)
    local = _fa2(A10, causal=True, window_left=256)
    assert (local.tiles.bq, local.tiles.bk) == (128, 32)


def test_flash_attn_2_decoding_does_not_pack_the_query_group_with_a_window():
    """seqlenq_ngroups_swapped needs window_size_left < 0 and window_size_right < 0."""
    p = Problem(batch=1, heads=32, kv_heads=8, seq_q=1, seq_k=8192, head_dim=128, dtype="bf16")
    packed = make_impl_plan("flash-decoding", p, A100)
    local = make_impl_plan("flash-decoding", dataclasses.replace(p, window_left=4096), A100)
    assert any("packed" in n for n in packed.notes)
    assert not any("packed" in n for n in local.notes)


@pytest.mark.parametrize("impl", ["torch-eager", "flash-attn-1", "flash-attn-3@2024-07"])
def test_mirrors_without_a_window_refuse_one(capsys, impl):
    code, out, err = cli(capsys, f"simulate --impl {impl} --seq 1024 --window 128 --no-engine")
    assert code != 0 and out == ""
    assert err.startswith("hbmsim: error: window: " + impl) and len(err.splitlines()) == 1


# --- explore ---------------------------------------------------------------------------------


def test_explore_points_of_mistral_7b_carry_its_window():
    """A spec's mistral-7b points past 4,096 tokens are windowed, as `simulate --model` is."""
    spec = parse_spec_text('[axes]\nmodel = ["mistral-7b"]\ncontext = [2048, 16384]\n')
    short, long = (spec.point(i).problem for i in range(2))
    assert (short.causal, short.window_left) == (True, -1)
    assert (long.causal, long.window_left, long.seq_k) == (True, 4096, 16384)


def test_explore_refuses_a_non_causal_mistral_7b():
    with pytest.raises(InputFileError) as info:
        parse_spec_text('[axes]\nmodel = ["mistral-7b"]\ncontext = [8192]\ncausal = [false]\n')
    assert "axes.causal: mistral-7b attends causally over a sliding window" in str(info.value)


# --- API and trace files ---------------------------------------------------------------------


def test_the_api_takes_a_window_and_verifies_it():
    from hbmsim import simulate

    p = Problem(batch=1, heads=2, seq_q=300, seq_k=300, head_dim=16, window_left=31, window_right=7)
    r = simulate(p, H100, "fa2", verify=True, engine=False)
    d = r.to_dict()
    assert (d["problem"]["window_left"], d["problem"]["window_right"]) == (31, 7)
    assert d["verify"]["rel_err"] <= 1e-12
    assert Problem.from_dict(d["problem"]) == p


def test_a_windowed_trace_keeps_its_window_and_replays(capsys, tmp_path):
    path = tmp_path / "w.trace"
    code, _, err = cli(
        capsys, f"trace --algo fa2 --seq 256 --heads 2 --causal --window 40 -o {path}"
    )
    assert code == 0, err
    code, out, _ = cli(capsys, f"replay {path}")
    assert code == 0 and "simulated time" in out
    meta = load_trace(path).meta
    assert meta["problem"]["window_left"] == 40


# --- the flash-attn 3 mirror -----------------------------------------------------------------


def _fa3(**kw):
    base = dict(batch=4, heads=16, seq_q=4096, seq_k=4096, head_dim=128, dtype="bf16")
    return make_impl_plan("flash-attn-3", Problem(**{**base, **kw}), H100)


def test_flash_attn_3_local_tiles_follow_tile_size_fwd_sm90():
    """hdim 128: 128 x 176 with a cluster of 2 unmasked, 128 x 128 causal or local
    (use_blockN_128 = is_causal || is_local), no cluster with a mask; hdim 256: 128 x 80,
    local 128 x 64 ("is_local ? 64 : 80")."""
    full, causal, local = _fa3(), _fa3(causal=True), _fa3(causal=True, window_left=1024)
    assert (full.tiles.bk, full.kernels[0].cluster) == (176, 2)
    assert (causal.tiles.bk, local.tiles.bk) == (128, 128)
    assert local.kernels[0].cluster == 1 and "local" in local.notes[0]
    assert _fa3(head_dim=256).tiles.bk == 80
    assert _fa3(head_dim=256, window_left=512, window_right=0).tiles.bk == 64


def test_flash_attn_3_clamps_the_window_as_its_mha_fwd_does():
    """Left at seqlen_k - 1 or more, right at seqlen_q - 1 or more: no window."""
    from hbmsim.libraries.flash_attn_3.rules import Window as W3
    from hbmsim.libraries.flash_attn_3.rules import window as w3

    assert w3(Problem(seq_q=64, seq_k=64, causal=True, window_left=63)) == W3(-1, 0, True, False)
    assert w3(Problem(seq_q=64, seq_k=64, causal=True, window_left=62)) == W3(62, 0, False, True)
    assert w3(Problem(seq_q=64, seq_k=64, window_left=3, window_right=63)) == W3(3, -1, False, True)
    assert w3(Problem(seq_q=1, seq_k=64, causal=True)) == W3(-1, -1, False, False)
    assert w3(Problem(seq_q=1, seq_k=64, causal=True, window_left=8)) == W3(8, 0, False, True)


def test_flash_attn_3_splits_the_band_of_a_windowed_decode():
    """One query over 65,536 keys, window 4,096, 8 query heads on 2 K/V heads, hdim 128:
    get_num_splits counts the keys it loads (4,096 + 0 + 1 + 128 = 4,225: 34 blocks of 128)
    and splits; each split takes a share of the band's 33 blocks (keys 61,439 .. 65,535:
    blocks 479 .. 511), so K is read once, 33 x 128 rows per K/V head."""
    p = Problem(
        batch=1,
        heads=8,
        kv_heads=2,
        seq_q=1,
        seq_k=65536,
        head_dim=128,
        dtype="bf16",
        causal=True,
        window_left=4096,
    )
    plan = make_impl_plan("flash-attn-3", p, H100)
    assert plan.tiles.splits > 1
    assert count_plan(plan).by_tensor["K"].read_bytes == 2 * 33 * 128 * 128 * 2


def test_the_walkthroughs_edges_of_a_window_follow_its_band():
    """A causal window of 256 keys at 1,024 tokens on 64 x 64 display tiles: the left edge
    starts 256 keys left of the first row's diagonal and runs parallel to it, the right edge
    one key past the diagonal (tile (r, c) spans r - 0.5 to r + 0.5)."""
    from hbmsim.figures.walkthrough.figure import mask_edges

    p = Problem(seq_q=1024, seq_k=1024, causal=True, window_left=256)
    right, left = mask_edges(p, 64, 64)
    assert (right[0], left[0]) == ("causal edge", "window edge")
    assert right[1] == pytest.approx([1 / 64 - 0.5, 1025 / 64 - 0.5])
    assert left[1] == pytest.approx([-256 / 64 - 0.5, 768 / 64 - 0.5])
    assert right[2] == left[2] == pytest.approx([-0.5, 1024 / 64 - 0.5])
    assert mask_edges(Problem(seq_q=1024, seq_k=1024), 64, 64) == []
