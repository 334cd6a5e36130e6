"""Models whose layers differ (Gemma 2: local sliding-window and global layers alternate) and
the per-model total every `--model` run reports: each kind simulated, the total composed from
them, and the combinations that cannot mean one thing refused in one line."""

import json

import pytest
from test_cli import run

from hbmsim.problem.models import MODELS

TOTALLED = ("hbm_read_bytes", "hbm_write_bytes", "trips", "flops", "dram_read_bytes",
            "dram_write_bytes", "time_s")  # fmt: skip


def simulate_json(capsys, *args) -> dict:
    code, out, err = run(capsys, "simulate", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_gemma_2_9b_simulates_a_local_and_a_global_layer_and_adds_them_up(capsys):
    """21 local and 21 global layers (42 alternating, layer 0 local); the local layer is the
    same problem as a causal layer with window_left 4,095 given by hand, and reads fewer K
    bytes than the global one past the window; the total is 21 x local + 21 x global."""
    d = simulate_json(capsys, "--model", "gemma-2-9b", "--seq", "8192", "--causal")
    m = d["model"]
    assert (m["name"], m["layers"], m["local_window"]) == ("gemma-2-9b", 42, 4096)
    local, glob = m["kinds"]
    assert (local["kind"], local["layers"], local["causal"], local["window_left"]) == (
        "local", 21, True, 4095)  # fmt: skip
    assert (glob["kind"], glob["layers"], glob["causal"], glob["window_left"]) == (
        "global", 21, True, -1)  # fmt: skip
    # the top level is the global layer's report, as `simulate` gives for one layer
    assert d["problem"]["window_left"] == -1 and d["hbm_read_bytes"] == glob["hbm_read_bytes"]
    assert d["time_s"] == glob["time_s"]
    by_hand = simulate_json(capsys, "--heads", "16", "--kv-heads", "8", "--head-dim", "256",
                            "--seq", "8192", "--causal", "--window", "4095")  # fmt: skip
    for key in TOTALLED:
        assert local[key] == by_hand[key], key
    assert by_hand["by_tensor"]["K"]["read_bytes"] < d["by_tensor"]["K"]["read_bytes"]
    assert local["hbm_read_bytes"] < glob["hbm_read_bytes"]
    for key in TOTALLED:
        assert m["total"][key] == pytest.approx(21 * local[key] + 21 * glob[key], rel=1e-12), key
    assert (
        m["total_note"] == "per model: the fwd pass over all 42 layers = 21 x local + 21 x global"
    )
    assert "not counted" in m["softcap_note"] and m["softcap"] == 50.0


def test_within_the_local_window_both_kinds_are_the_same_layer(capsys):
    """At 4,096 keys the local window hides nothing: both kinds are one problem, unmasked
    beyond what the user asked for."""
    d = simulate_json(capsys, "--model", "gemma-2-2b", "--seq", "4096", "--no-engine")
    local, glob = d["model"]["kinds"]
    assert (local["layers"], glob["layers"]) == (13, 13)
    assert local["window_left"] == glob["window_left"] == -1 and not local["causal"]
    assert local["hbm_read_bytes"] == glob["hbm_read_bytes"]
    assert d["model"]["total"]["hbm_read_bytes"] == 26 * glob["hbm_read_bytes"]
    assert d["model"]["total"]["time_s"] is None  # no engine, no time: said, not made up


@pytest.mark.parametrize("name", ["llama-3-8b", "mistral-7b", "gpt2-medium"])
def test_a_model_with_one_kind_of_layer_totals_layers_times_the_layer(capsys, name):
    """Every preset answers the per-model question; its top-level fields stay the layer's."""
    layers = {"llama-3-8b": 32, "mistral-7b": 32, "gpt2-medium": 24}[name]
    d = simulate_json(capsys, "--model", name, "--seq", "8192", "--causal")
    (kind,) = d["model"]["kinds"]
    assert (kind["kind"], kind["layers"]) == ("layer", layers)
    for key in TOTALLED:
        assert kind[key] == d[key], key
        assert d["model"]["total"][key] == pytest.approx(layers * d[key], rel=1e-12), key
    if name == "mistral-7b":  # the windowed preset still says its window
        assert d["model"]["window"] == 4096 and d["problem"]["window_left"] == 4096
        assert "sliding window of 4,096" in d["model"]["window_note"]


def test_gemma_2_27b_sets_its_query_scale():
    """query_pre_attn_scalar 144 (google/gemma-2-27b config.json): scale 144^-0.5, not the
    1/sqrt(head_dim 128) default; the 9B's 256 equals its head dim."""
    assert MODELS["gemma-2-27b"].scale() == {"softmax_scale": 144**-0.5}
    assert MODELS["gemma-2-9b"].scale() == {"softmax_scale": 1 / 16}


def test_the_27b_problem_carries_the_scale_and_verifies_with_it(capsys):
    d = simulate_json(capsys, "--model", "gemma-2-27b", "--seq", "128", "--batch", "1",
                      "--no-engine", "--verify")  # fmt: skip
    assert d["problem"]["softmax_scale"] == 1 / 12
    assert d["verify"]["rel_err"] < 1e-6  # executed with that scale against naive attention


def test_the_text_report_gives_each_kind_the_total_and_the_soft_cap(capsys):
    code, out, err = run(capsys, "simulate", "--model", "gemma-2-9b", "--seq", "8192",
                         "--causal", "--no-engine")  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert any(line.startswith("  local  x 21, window 4,095 left") for line in lines), out
    assert any(line.startswith("  global x 21, causal:") for line in lines), out
    total = [line for line in lines if line.startswith("per model: the fwd pass over all 42")]
    assert len(total) == 1 and "no time" in total[0]
    assert sum(line.startswith("soft-cap: ") and "not counted" in line for line in lines) == 1


@pytest.mark.parametrize(
    "args, field, says",
    [
        (("simulate", "--model", "gemma-2-9b", "--window", "100"), "window",
         "sets each layer's window"),
        (("simulate", "--model", "gemma-2-27b", "--scale", "0.1"), "scale",
         "sets the softmax scale"),
        (("sweep", "--model", "gemma-2-9b", "--seq", "1024"), "model",
         "alternates local and global layers"),
        (("trace", "--model", "gemma-2-2b", "-o", "x.json"), "model",
         "alternates local and global layers"),
    ],
)  # fmt: skip
def test_what_cannot_mean_one_thing_is_refused_in_one_line(capsys, tmp_path, args, field, says):
    args = tuple(str(tmp_path / a) if a == "x.json" else a for a in args)
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith(f"hbmsim: error: {field}: ") and says in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "x.json").exists()


def test_explore_refuses_an_alternating_model_naming_the_axis(capsys, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text("[axes]\nmodel = ['llama-3-8b', 'gemma-2-9b']\ncontext = 1024\n")
    code, out, err = run(capsys, "explore", str(spec), "-o", str(tmp_path / "t.parquet"))
    assert code == 2 and out == ""
    assert ": axes.model: gemma-2-9b alternates local and global layers" in err, err
    assert err.count("\n") == 1
