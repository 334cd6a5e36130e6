"""The three ways a call is timed (engine/timing.py), as `hbmsim simulate --timing` and the
API report them: the GPU alone, a call in a timed loop, one call by itself."""

import json

import pytest

from hbmsim import Problem, get_hardware
from hbmsim.api import simulate
from hbmsim.cli.commands import main
from hbmsim.errors import ConfigError

DECODE = [  # a host-bound decode call: its kernels take less than its launches and ops
    "--impl", "flash-decoding", "--model", "llama-3-8b", "--seq-q", "1", "--seq-k", "8192",
]  # fmt: skip


def simulate_json(capsys, *args) -> dict:
    capsys.readouterr()
    assert main(["simulate", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("mode", ["kernel", "loop", "alone"])
def test_the_time_reported_is_the_one_asked_for_and_the_json_carries_all_three(capsys, mode):
    out = simulate_json(capsys, *DECODE, "--timing", mode)
    engine = out["engine"]
    gpu, host, alone = engine["gpu_time_s"], engine["host_time_s"], engine["synchronized_call_s"]
    assert engine["times_s"] == {"kernel": gpu, "loop": max(gpu, host), "alone": alone}
    assert out["time_s"] == engine["times_s"][mode]
    assert out["timing"] == mode
    assert engine["bound"] == "host" and host > gpu  # a decode call: the launches bound it
    assert gpu < max(gpu, host) <= alone  # the host's lead is waited for when timed alone


def test_the_default_timing_is_a_call_in_a_timed_loop(capsys):
    out = simulate_json(capsys, *DECODE)
    assert out["timing"] == "loop"
    assert out["time_s"] == max(out["engine"]["gpu_time_s"], out["engine"]["host_time_s"])


def test_a_textbook_program_times_the_same_every_way(capsys):
    out = simulate_json(capsys, "--algo", "fa2", "--seq", "1024", "--timing", "alone")
    times = out["engine"]["times_s"]
    assert times["kernel"] == times["loop"] == times["alone"] == out["time_s"] > 0
    assert out["engine"]["bound"] == "gpu"


def test_the_text_report_names_the_timing_and_shows_each(capsys):
    capsys.readouterr()
    assert main(["simulate", *DECODE, "--timing", "kernel"]) == 0
    text = capsys.readouterr().out
    assert "timing kernel: the GPU's time alone" in text
    for flag in ("--timing kernel", "--timing loop", "--timing alone"):
        assert flag in text


def test_replay_reports_the_timing_asked_for(capsys, tmp_path):
    trace = tmp_path / "t.hbmtrace"
    assert main(["trace", "--seq", "256", "--heads", "2", "-o", str(trace)]) == 0
    capsys.readouterr()
    assert main(["replay", str(trace), "--timing", "alone", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["timing"] == "alone" and out["time_s"] == out["engine"]["times_s"]["alone"]


def test_an_unknown_timing_is_refused_naming_the_field_and_the_choices(capsys):
    with pytest.raises(ConfigError) as err:
        simulate(Problem(seq_q=128, seq_k=128), get_hardware("h100-sxm"), timing="graph")
    assert "timing" in str(err.value) and "kernel, loop, alone" in str(err.value)
    capsys.readouterr()
    with pytest.raises(SystemExit) as code:
        main(["simulate", "--timing", "graph"])
    assert code.value.code == 2
    err_line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--timing" in err_line and "'kernel', 'loop', 'alone'" in err_line
