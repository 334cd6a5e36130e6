"""Model presets: `--model` gives the model's published attention shape, and only that."""

import json

import pytest
from test_cli import run

from hbmsim.problem.models import MODELS


def test_every_preset_is_a_shape_a_problem_accepts():
    for m in MODELS.values():
        assert m.heads % m.kv_heads == 0, m.name
        assert m.source and m.layers > 0


@pytest.mark.parametrize("name", ["llama-3-8b", "gemma-2b", "gpt2-medium"])
def test_model_sets_heads_kv_heads_and_head_dim_and_leaves_the_rest(capsys, name):
    code, out, err = run(capsys, "simulate", "--model", name, "--seq", "512", "--batch", "3",
                         "--no-engine", "--json")  # fmt: skip
    assert code == 0, err
    p = json.loads(out)["problem"]
    m = MODELS[name]
    assert (p["heads"], p["kv_heads"], p["head_dim"]) == (m.heads, m.kv_heads, m.head_dim)
    assert (p["batch"], p["seq_q"], p["seq_k"]) == (3, 512, 512)


@pytest.mark.parametrize("flag", ["--heads", "--kv-heads", "--head-dim"])
def test_a_flag_the_model_also_sets_is_refused_not_overridden(capsys, flag):
    code, out, err = run(capsys, "sweep", "--model", "mistral-7b", flag, "8", "--seq", "256")
    assert code == 2 and out == ""
    assert "--model mistral-7b sets" in err and f"drop {flag} or --model" in err
    assert err.count("\n") == 1


def test_an_unknown_model_lists_the_presets(capsys):
    code, _, err = run(capsys, "simulate", "--model", "gpt-5")
    assert code == 2 and "unknown model 'gpt-5'" in err and "llama-3-70b" in err


def test_without_a_model_the_defaults_are_unchanged(capsys):
    code, out, _ = run(capsys, "simulate", "--seq", "256", "--no-engine", "--json")
    p = json.loads(out)["problem"]
    assert (p["heads"], p["kv_heads"], p["head_dim"]) == (16, 16, 64)
