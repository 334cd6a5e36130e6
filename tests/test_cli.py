"""The `hbmsim` command as a user runs it: JSON fields, tables, errors, files."""

import csv
import io
import json
import subprocess
import sys

import pytest

from hbmsim import Problem, get_hardware
from hbmsim.cli.commands import main
from hbmsim.interpret.tracefile import load_trace


def run(capsys, *args):
    """Run the CLI in-process; argparse's own errors exit via SystemExit, caught here too."""
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_simulate_json_has_the_documented_fields(capsys):
    code, out, _ = run(capsys, "simulate", "--algo", "fa2", "--seq", "2048", "--json")
    assert code == 0
    d = json.loads(out)
    for key in (
        "hbm_read_bytes",
        "hbm_write_bytes",
        "trips",
        "flops",
        "sram_peak_bytes",
        "roofline_time_s",
        "by_tensor",
        "by_kernel",
        "problem",
        "hardware",
        "tiles",
    ):
        assert key in d
    assert d["problem"]["seq_q"] == d["problem"]["seq_k"] == 2048
    assert d["tiles"] == {"bq": 64, "bk": 64}
    assert set(d["by_tensor"]["K"]) == {"read_bytes", "write_bytes", "trips"}
    assert d["hbm_read_bytes"] == sum(t["read_bytes"] for t in d["by_tensor"].values())


def test_verify_reports_error_against_naive(capsys):
    code, out, _ = run(
        capsys,
        "simulate",
        "--algo",
        "fa1",
        "--seq",
        "200",
        "--heads",
        "2",
        "--causal",
        "--dropout",
        "0.1",
        "--verify",
        "--json",
    )
    assert code == 0
    v = json.loads(out)["verify"]
    assert v["rel_err"] <= 1e-12 and v["max_abs_err"] <= 1e-12


def test_verify_refuses_sizes_it_cannot_execute(capsys):
    code, out, err = run(capsys, "simulate", "--seq", "65536", "--verify")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "verify:" in err


def test_table_output_names_kernels_and_tensors(capsys):
    code, out, _ = run(capsys, "simulate", "--algo", "standard", "--causal", "--seq", "1024")
    assert code == 0
    for word in ("qk", "mask", "softmax", "pv", "causal_mask", "HBM read", "roofline"):
        assert word in out


@pytest.mark.parametrize(
    "args,field",
    [
        (["--batch", "0"], "batch"),
        (["--heads", "6", "--kv-heads", "4"], "kv_heads"),
        (["--gpu", "v100"], "gpu"),
        (["--dropout", "1.5"], "dropout"),
        (["--bq", "1024", "--bk", "1024"], "tiles"),
        (["--dtype", "int8"], "--dtype"),
        (["--seq-q", "10", "--seq-k", "5", "--causal"], "seq_q"),
        (["--sram-kib", "0"], "sram-kib"),
        (["--algo", "fa2-wmma-kernel", "--dtype", "fp32"], "dtype"),
        (["--algo", "fa2-wmma-kernel", "--head-dim", "40"], "head_dim"),
        (["--algo", "fa2-wmma-kernel", "--bq", "24", "--bk", "64"], "bq"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(capsys, args, field):
    code, out, err = run(capsys, "simulate", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    assert field in err and "Traceback" not in err


def test_sweep_csv_keeps_infeasible_tiles_as_rows(capsys):
    code, out, _ = run(capsys, "sweep", "--bq", "64,1024", "--bk", "64", "--seq", "1024,2048")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 4
    bad = [r for r in rows if r["feasible"] == "False"]
    assert len(bad) == 2 and all("SRAM" in r["reason"] for r in bad)
    good = [r for r in rows if r["feasible"] == "True"]
    assert {int(r["seq_k"]) for r in good} == {1024, 2048}


def test_sweep_json_over_algorithms(tmp_path, capsys):
    out_file = tmp_path / "s.json"
    code, _, err = run(
        capsys,
        "sweep",
        "--algo",
        "standard,fa1,fa2",
        "--seq",
        "512,1024",
        "--format",
        "json",
        "-o",
        str(out_file),
    )
    assert code == 0 and "wrote 6 rows" in err
    rows = json.loads(out_file.read_text())
    assert [r["algo"] for r in rows[:3]] == ["standard", "fa1", "fa2"]


def test_trace_writes_a_loadable_file(tmp_path, capsys):
    path = tmp_path / "x.hbmtrace"
    code, out, _ = run(capsys, "trace", "--seq", "128", "--heads", "2", "-o", str(path))
    assert code == 0 and "records" in out
    trace = load_trace(path)
    assert trace.meta["algo"] == "fa2" and trace.meta["problem"]["seq_q"] == 128


@pytest.mark.parametrize("command", ["simulate", "sweep", "trace"])
def test_help_describes_every_option(command):
    out = subprocess.run(
        [sys.executable, "-m", "hbmsim.cli", command, "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for opt in (
        "--gpu",
        "--batch",
        "--heads",
        "--kv-heads",
        "--seq",
        "--head-dim",
        "--dtype",
        "--causal",
        "--dropout",
        "--bq",
        "--bk",
    ):
        assert opt in out


def test_a_million_tokens_counts_quickly():
    """Not a timing test: the process must simply finish within a generous limit."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "hbmsim.cli",
            "simulate",
            "--algo",
            "fa2",
            "--seq",
            "1048576",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert json.loads(out)["problem"]["seq_q"] == 1048576


def test_simulate_json_carries_the_engine_results(capsys):
    code, out, err = run(capsys, "simulate", "--seq", "1024", "--heads", "4", "--json")
    assert code == 0 and err == ""  # no progress bar with --json
    d = json.loads(out)
    for key in (
        "time_s",
        "dram_read_bytes",
        "dram_write_bytes",
        "l2_hit_bytes",
        "achieved_dram_bytes_per_s",
    ):
        assert key in d
    k = d["engine"]["kernels"][0]
    assert {"ctas_per_sm", "waves", "time_s"} <= set(k)
    assert d["dram_read_bytes"] + d["l2_hit_bytes"] == d["hbm_read_bytes"]


def test_no_l2_makes_dram_equal_hbm(capsys):
    code, out, _ = run(
        capsys, "simulate", "--algo", "standard", "--seq", "512", "--no-l2", "--json"
    )
    d = json.loads(out)
    assert (d["dram_read_bytes"], d["dram_write_bytes"]) == (
        d["hbm_read_bytes"],
        d["hbm_write_bytes"],
    )


def test_timeline_file_is_written(tmp_path, capsys):
    path = tmp_path / "tl.csv"
    code, _, err = run(capsys, "simulate", "--seq", "256", "--heads", "2", "--timeline", str(path))
    assert code == 0 and "timeline rows" in err
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert rows and {r["op"] for r in rows} == {"load", "store", "compute"}
    assert all(float(r["end_s"]) >= float(r["start_s"]) for r in rows)


def test_replay_of_a_trace_file_matches_simulate(tmp_path, capsys):
    path = tmp_path / "x.hbmtrace"
    run(capsys, "trace", "--seq", "300", "--heads", "2", "--causal", "-o", str(path))
    _, out, _ = run(capsys, "replay", str(path), "--json")
    replayed = json.loads(out)
    _, out, _ = run(capsys, "simulate", "--seq", "300", "--heads", "2", "--causal", "--json")
    direct = json.loads(out)
    assert replayed["dram_read_bytes"] == direct["dram_read_bytes"]
    assert replayed["time_s"] == pytest.approx(direct["time_s"], rel=1e-9)


def test_replay_of_a_broken_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "bad.hbmtrace"
    path.write_bytes(b"HBMTRACE" + b"\x00" * 3)
    code, _, err = run(capsys, "replay", str(path))
    assert code == 2 and err.count("\n") == 1 and "not an hbmsim trace" in err


def test_engine_is_skipped_with_a_reason_at_a_million_causal_tokens(capsys):
    code, out, _ = run(capsys, "simulate", "--seq", "1048576", "--causal", "--json")
    assert code == 0
    assert "even with every kernel stretched" in json.loads(out)["engine"]["skipped"]


def test_replay_help_lists_its_options():
    out = subprocess.run(
        [sys.executable, "-m", "hbmsim.cli", "replay", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for opt in ("TRACE_FILE", "--gpu", "--no-l2", "--exact", "--timeline", "--json"):
        assert opt in out


def test_training_reports_both_passes_and_their_sum(capsys):
    code, out, _ = run(
        capsys,
        "simulate",
        "--algo",
        "fa2",
        "--pass",
        "fwd+bwd",
        "--seq",
        "512",
        "--heads",
        "2",
        "--json",
    )
    assert code == 0
    d = json.loads(out)
    fwd, bwd = d["passes"]["fwd"], d["passes"]["bwd"]
    assert fwd["hbm_read_bytes"] + bwd["hbm_read_bytes"] == d["hbm_read_bytes"]
    # a pass's time is its kernels' GPU time; the call takes the longer of GPU and host
    assert fwd["time_s"] + bwd["time_s"] == pytest.approx(d["engine"]["gpu_time_s"])
    assert d["time_s"] == pytest.approx(max(d["engine"]["gpu_time_s"], d["engine"]["host_time_s"]))
    assert {k["pass"] for k in d["by_kernel"]} == {"fwd", "bwd"}
    _, table, _ = run(
        capsys, "simulate", "--algo", "fa2", "--pass", "fwd+bwd", "--seq", "512", "--heads", "2"
    )
    assert "fwd+bwd" in table and "fa2_bwd" in table


def test_backward_verify_checks_gradients(capsys):
    code, out, _ = run(
        capsys,
        "simulate",
        "--algo",
        "standard",
        "--pass",
        "bwd",
        "--seq",
        "96",
        "--heads",
        "2",
        "--causal",
        "--dropout",
        "0.2",
        "--verify",
        "--json",
    )
    assert code == 0
    grads = json.loads(out)["verify"]["grad_rel_err"]
    assert set(grads) == {"dQ", "dK", "dV"} and max(grads.values()) <= 1e-10


def test_split_kv_decoding_and_its_splits(capsys):
    code, out, _ = run(
        capsys,
        "simulate",
        "--algo",
        "split-kv",
        "--seq-q",
        "1",
        "--seq-k",
        "4096",
        "--heads",
        "4",
        "--splits",
        "8",
        "--json",
    )
    assert code == 0
    d = json.loads(out)
    assert d["tiles"]["splits"] == 8
    assert [k["name"] for k in d["by_kernel"]] == ["splitkv_fwd", "splitkv_combine"]
    code, _, err = run(
        capsys,
        "simulate",
        "--algo",
        "split-kv",
        "--seq-q",
        "1",
        "--seq-k",
        "4096",
        "--splits",
        "1000",
    )
    assert code == 2 and "splits: must be from 1 to 64" in err


def test_a_backward_timeline_names_the_atomic_adds(tmp_path, capsys):
    path = tmp_path / "tl.csv"
    code, _, _ = run(
        capsys, "simulate", "--pass", "bwd", "--seq", "256", "--heads", "2", "--timeline", str(path)
    )
    assert code == 0
    ops = {r["op"] for r in csv.DictReader(io.StringIO(path.read_text()))}
    assert "atomic" in ops


def test_an_engine_budget_keeps_the_counts_and_says_why():
    from hbmsim import Problem, get_hardware, simulate

    r = simulate(
        Problem(seq_q=2048, seq_k=2048), get_hardware("h100-sxm"), "fa2", engine_max_trips=1000
    )
    assert "more than this view simulates (1,000)" in r.extra["engine"]["skipped"]
    assert r.hbm_read_bytes > 0 and "time_s" not in r.extra


@pytest.mark.parametrize(
    "command,args,field",
    [
        ("simulate", ["--hbm-gbps", "inf"], "--hbm-gbps: must be plain ASCII digits"),
        ("simulate", ["--hbm-gbps", "nan"], "--hbm-gbps: must be plain ASCII digits"),
        ("simulate", ["--hbm-gbps", "1e7000"], "--hbm-gbps: is too large for a number"),
        ("simulate", ["--hbm-gbps", "1e20"], "hbm-gbps: must be from"),
        ("replay", ["--hbm-gbps=-1e9"], "hbm-gbps: must be from 0.001 to 1e+07 GB/s"),
        ("simulate", ["--sram-kib", str(1 << 40)], "sram-kib: must be from 2"),
        ("simulate", ["--verify", "--scale", "1e308"], "scale: must be > 0 and at most 1e+06"),
        ("simulate", ["--scale", "inf"], "--scale: must be plain ASCII digits"),
        ("simulate", ["--scale", "nan"], "--scale: must be plain ASCII digits"),
        ("sweep", ["--bq", "64,,128"], "bq: expected integers separated by commas; item 2 must"),
        ("sweep", ["--seq", "128,"], "seq: expected integers separated by commas; item 2 must"),
        ("simulate", ["--no-engine", "--exact"], "exact: only applies to the engine"),
        ("simulate", ["--no-engine", "--no-l2"], "no-l2: only applies to the engine"),
        ("simulate", ["--no-engine", "--timeline", "t.csv"], "timeline: only applies"),
        ("simulate", ["--timeline", ""], "timeline: give a file name"),
        ("replay", ["--timeline", " "], "timeline: give a file name"),
        ("simulate", ["--seed", "3"], "seed: seeds --verify's inputs"),
        ("trace", ["--seq", "64", "--seq-q", "8", "--seq-k", "8", "-o", "t"], "seq: --seq-q"),
        ("sweep", ["--no-engine", "--no-l2"], "no-l2: only applies to the engine"),
        ("sweep", ["--seq", "64,128", "--seq-q", "8", "--seq-k", "8"], "seq: --seq-q and --seq-k"),
        ("validate", ["--measurements", "m.json", "--out", "d"], "out: measures on a GPU"),
        ("validate", ["--measurements", "m.json", "--measure-only"], "measure-only: measures"),
    ],
)
def test_out_of_range_or_ignored_flags_are_one_line(tmp_path, capsys, command, args, field):
    """Infinity, NaN and absurd values are refused with the allowed range; a flag that would
    change nothing in its combination is refused rather than dropped. Nothing is written."""
    if command == "replay":
        trace = tmp_path / "t.hbmtrace"
        assert run(capsys, "trace", "--seq", "64", "-o", str(trace))[0] == 0
        args = [str(trace), *args]
    code, out, err = run(capsys, command, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and field in err, err
    assert not list(tmp_path.glob("*.csv")) and not (tmp_path / "d").exists()


def test_a_profile_with_infinite_bandwidth_is_refused_with_the_range(tmp_path, capsys):
    """JSON's Infinity extension (Python reads it) is refused by the file reader; a finite
    bandwidth out of range is refused naming the range."""
    profile = tmp_path / "inf.json"
    profile.write_text('{"base": "h100-sxm", "hbm_bytes_per_s": Infinity}', "utf-8")
    code, out, err = run(capsys, "simulate", "--gpu", str(profile))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "inf.json" in err and "Infinity" in err, err
    profile.write_text('{"base": "h100-sxm", "hbm_bytes_per_s": 1e300}', "utf-8")
    code, out, err = run(capsys, "simulate", "--gpu", str(profile))
    assert code == 2 and out == ""
    assert "hbm_bytes_per_s: must be a number from 1e+06 to 1e+16 bytes/s" in err, err


def strict_loads(text: str):
    """json.loads that refuses NaN and Infinity, as the JSON standard does."""

    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", "--seq", "64", "--verify", "--scale", "1e6", "--json"],
        ["simulate", "--seq", "64", "--hbm-gbps", "0.001", "--json"],
        ["simulate", "--seq", "64", "--no-engine", "--json"],
        ["sweep", "--seq", "64,128", "--bq", "64,4096", "--format", "json"],
    ],
)
def test_json_output_is_strict_at_the_edges_of_the_ranges(capsys, args):
    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert strict_loads(out)


def test_sweep_uses_seq_q_and_seq_k_without_seq(capsys):
    code, out, _ = run(capsys, "sweep", "--seq-q", "128", "--seq-k", "300", "--no-engine")
    assert code == 0
    (row,) = csv.DictReader(io.StringIO(out))
    assert (row["seq_q"], row["seq_k"]) == ("128", "300")


def test_sweep_holds_seq_q_fixed_while_seq_sweeps_seq_k(capsys):
    """`--seq 256,512 --seq-q 128`: the query length stays 128, the key length is swept (as
    `--seq-q 1` sweeps a decoding KV cache)."""
    code, out, _ = run(capsys, "sweep", "--seq", "256,512", "--seq-q", "128", "--no-engine")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["seq_q"], r["seq_k"]) for r in rows] == [("128", "256"), ("128", "512")]
    code, out, _ = run(capsys, "sweep", "--seq", "64,96", "--seq-k", "128", "--no-engine")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["seq_q"], r["seq_k"]) for r in rows] == [("64", "128"), ("96", "128")]


def test_sweep_runs_split_kv_rows_with_the_splits_given_and_refuses_them_elsewhere(capsys):
    """--splits sets split-kv's rows, as simulate --splits would (their counts equal), leaves
    fa2's rows alone, and is refused when no split-kv row would use it."""
    base = ("--seq-q", "1", "--seq-k", "4096", "--bk", "64", "--no-engine")
    code, out, _ = run(capsys, "sweep", "--algo", "split-kv,fa2", "--splits", "8", *base)
    assert code == 0
    rows = {r["algo"]: r for r in csv.DictReader(io.StringIO(out))}
    for splits, algo in ((8, "split-kv"), (None, "fa2")):
        flags = ("--splits", str(splits)) if splits else ()
        code, one, _ = run(capsys, "simulate", "--algo", algo, *flags, "--json", *base)
        assert code == 0
        assert int(rows[algo]["hbm_bytes"]) == json.loads(one)["hbm_bytes"]
    code, other, _ = run(capsys, "sweep", "--algo", "split-kv", "--splits", "2", *base)
    assert next(csv.DictReader(io.StringIO(other)))["hbm_bytes"] != rows["split-kv"]["hbm_bytes"]
    code, out, err = run(capsys, "sweep", "--algo", "fa2", "--splits", "8", *base)
    assert code == 2 and out == "" and "splits: only applies to split-kv" in err


def test_sweep_refuses_a_causal_point_with_more_queries_than_keys(capsys):
    code, out, err = run(
        capsys, "sweep", "--seq", "128,512", "--seq-q", "256", "--causal", "--no-engine"
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "seq_q: must be <= seq_k (128)" in err


def test_simulate_says_where_a_kernels_matmuls_run_and_at_what_rate(capsys):
    """The scalar kernel mirror is issue-bound on an H200 (its rate is the issue rate over its
    scheduler cycles per FMA at the warps it runs with: 8 CTAs of 2 warps on the 8 SMs
    this small problem fills, 0.5 warps a scheduler: half the schedulers issue, each from
    one warp), the WMMA
    one runs warp-level MMA slowed by its shared-memory traffic; a plain tensor-core kernel
    prints no such line."""
    from hbmsim import get_hardware
    from hbmsim.algorithms import loop_costs

    hw = get_hardware("h200")
    small = ["--gpu", "h200", "--seq", "256", "--heads", "2"]
    code, out, _ = run(capsys, "simulate", "--algo", "fa2-kernel", *small, "--json")
    (k,) = json.loads(out)["by_kernel"]
    _ipf, curve = loop_costs.compiled(loop_costs.sass_key_flash(64, 64, 64, False, "fp16"))
    assert (
        code == 0
        and k["matmul_units"].startswith("FMA units")
        and "issue-bound" in k["matmul_units"]
    )
    assert k["matmul_rate_flops_per_s"] == pytest.approx(2 * hw.issue_rate() * 0.5 / curve[0])
    code, out, _ = run(capsys, "simulate", "--algo", "fa2-wmma-kernel", *small, "--json")
    (k,) = json.loads(out)["by_kernel"]
    assert "warp-level MMA" in k["matmul_units"] and "shared-memory" in k["matmul_units"]
    assert k["matmul_rate_flops_per_s"] < hw.warp_mma_flops_per_s["fp16"]
    code, text, _ = run(capsys, "simulate", "--algo", "fa2-kernel", *small)
    assert "flash_fwd matmuls: FMA units" in text
    code, text, _ = run(capsys, "simulate", "--algo", "fa2", *small)
    assert "matmuls:" not in text


def test_a_sweep_at_a_terminal_shows_each_row_it_simulates_and_clears_the_bar(capsys, monkeypatch):
    """At a terminal, a sweep past the bar's delay (none here) shows a progress bar naming the
    row it simulates (row k of n, algorithm, lengths, tiles) and clears it before it ends;
    the CSV on stdout is untouched. Piped (no terminal), stderr stays empty."""
    from hbmsim.cli import commands as cli

    args = ("sweep", "--bq", "64,128", "--bk", "64", "--seq", "512,1024", "--heads", "2")
    code, quiet_out, err = run(capsys, *args)
    assert code == 0 and err == ""
    monkeypatch.setattr(cli.Progress, "AFTER_S", 0.0)
    monkeypatch.setattr(cli.time, "monotonic", iter(range(0, 10_000, 1)).__next__)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    code, out, err = run(capsys, *args)
    assert code == 0 and out == quiet_out
    drawn = [part.rstrip() for part in err.split("\r") if part.strip()]
    assert drawn == [
        f"simulating [{'#' * (30 * k // 4)}{'.' * (30 - 30 * k // 4)}] {100 * k // 4:3d}% "
        f"row {k + 1} of 4: fa2 at {seq:,} tokens, bq {bq} x bk 64"
        for k, (seq, bq) in enumerate([(512, 64), (512, 128), (1024, 64), (1024, 128)])
    ]
    assert err.endswith("\r")  # the bar's line is blanked, the cursor back at its start


def test_a_simulation_at_a_terminal_shows_its_stages_and_kernels_and_clears_the_bar(
    capsys, monkeypatch
):
    """At a terminal, `simulate` past the bar's delay (none here) names what it is doing: the
    CTAs' work laid out, the L2 hits decided, then each kernel with how many of its CTAs have
    been launched; the bar is cleared before the result, and the JSON on stdout is the same as
    piped (no terminal: stderr empty)."""
    from hbmsim.cli import commands as cli

    args = ("simulate", "--impl", "flash-attn-2", "--seq", "2048", "--causal", "--json")
    code, quiet_out, err = run(capsys, *args)
    assert code == 0 and err == ""
    monkeypatch.setattr(cli.Progress, "AFTER_S", 0.0)
    monkeypatch.setattr(cli.time, "monotonic", iter(range(0, 100_000, 1)).__next__)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    code, out, err = run(capsys, *args)
    assert code == 0 and json.loads(out) == json.loads(quiet_out)
    drawn = [part.rstrip() for part in err.split("\r") if part.strip()]
    assert "laying out each CTA's work" in drawn[0] and "deciding L2 hits" in drawn[1]
    assert any("flash_fwd_kernel" in line and "CTAs launched" in line for line in drawn[2:])
    assert err.endswith("\r")


def test_run_sweep_tells_its_progress_every_row_in_order():
    from hbmsim.explore.sweep import SweepSpec, run_sweep

    p = Problem(batch=1, heads=2, seq_q=256, seq_k=512, head_dim=64)
    calls = []
    spec = SweepSpec(p, get_hardware("h100-sxm"), ("fa1", "fa2"), None, (32, 64), ())
    rows = run_sweep(spec, lambda *a: calls.append(a))
    assert [(r["algo"], r["bq"]) for r in rows] == [
        ("fa1", 32),
        ("fa1", 64),
        ("fa2", 32),
        ("fa2", 64),
    ]
    assert calls == [
        (i, 4, f"{a} at 256 x 512, bq {bq} x bk -")
        for i, (a, bq) in enumerate([("fa1", 32), ("fa1", 64), ("fa2", 32), ("fa2", 64)])
    ]


def test_simulate_says_what_one_call_timed_by_itself_takes_for_a_library_mirror(capsys):
    """A library mirror's call is issued by a framework: the text report gives the host's
    share and one call timed alone (the JSON's engine.synchronized_call_s), which a textbook
    program, with no host to wait for, does not print."""
    from hbmsim import fmt

    args = ("simulate", "--gpu", "h200", "--batch", "32", "--heads", "32", "--seq", "512")
    code, out, _ = run(capsys, *args, "--impl", "flash-attn-2", "--json")
    assert code == 0
    engine = json.loads(out)["engine"]
    code, text, _ = run(capsys, *args, "--impl", "flash-attn-2")
    assert code == 0
    (host,) = [line for line in text.splitlines() if line.startswith("host ")]
    (alone,) = [line for line in text.splitlines() if line.startswith("one call alone")]
    assert fmt.seconds(engine["host_time_s"]) in host and "GPU-bound" in host
    assert fmt.seconds(engine["synchronized_call_s"]) in alone
    code, text, _ = run(capsys, *args, "--algo", "fa2")
    assert "one call alone" not in text and "\nhost " not in text


def test_ctrl_c_is_one_line_and_leaves_no_output(tmp_path):
    """SIGINT to the process group (Ctrl-C at a terminal) in the middle of a sweep."""
    import os
    import signal
    import time

    out = tmp_path / "sweep.csv"
    cmd = [
        sys.executable,
        "-m",
        "hbmsim.cli",
        "sweep",
        "--seq",
        "2048,4096,8192,16384,32768",
        "--bq",
        "16,32,64,128",
        "--bk",
        "16,32,64,128",
        "--causal",
        "--algo",
        "fa2,fa1,standard",
        "-o",
        str(out),
    ]  # minutes of work
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(6)  # imports done (about 1 s), rows being simulated
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert (
        err.strip()
        == "hbmsim: interrupted before sweep finished; no output file was left half written"
    )
    assert not out.exists() and not list(tmp_path.iterdir())


def test_blackwell_presets_run_the_mirrors_that_accept_sm100_and_fa3_refuses(capsys):
    """flash-attn 2.x accepts any cc >= 8.0 (flash_api.cpp `is_sm8x_min`); FlashAttention-3
    only sm90 and flash-attn 1.x only cc 7.5 and 8.x: on a B200 each says so in one line
    naming the gpu field."""
    for gpu in ("b200", "gb200"):
        for impl in ("flash-attn-2", "torch-eager"):
            code, out, _ = run(
                capsys, "simulate", "--gpu", gpu, "--impl", impl, "--seq", "512",
                "--pass", "fwd+bwd", "--json",
            )  # fmt: skip
            assert code == 0 and json.loads(out)["time_s"] > 0
        code, out, err = run(capsys, "simulate", "--gpu", gpu, "--impl", "flash-attn-3")
        assert code == 2 and out == "" and err.count("\n") == 1
        assert "gpu:" in err and "only supports Hopper GPUs (sm90)" in err and gpu in err
        # flash-attn 1.x: TORCH_CHECK(is_sm8x || is_sm75), cc major 8 only
        code, out, err = run(capsys, "simulate", "--gpu", gpu, "--impl", "flash-attn-1")
        assert code == 2 and out == "" and err.count("\n") == 1
        assert "gpu:" in err and "sm100" in err
