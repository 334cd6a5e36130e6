"""Problem validation: every bad field is named, with its allowed range."""

import pytest

from hbmsim import ConfigError, Problem
from hbmsim.problem.attention import sum_visible


@pytest.mark.parametrize(
    "field,value,words",
    [
        ("batch", 0, "from 1"),
        ("heads", -3, "from 1"),
        ("seq_q", 0, "from 1"),
        ("seq_k", 1 << 30, "to 16,777,216"),
        ("head_dim", 2.5, "integer"),
        ("dtype", "int8", "fp32, fp16, bf16"),
        ("dropout", 1.0, "[0, 1)"),
        ("dropout", -0.1, "[0, 1)"),
        ("softmax_scale", 0.0, "> 0"),
        ("pass_", "train", "fwd, bwd, fwd+bwd"),
    ],
)
def test_bad_field_is_named_with_allowed_values(field, value, words):
    with pytest.raises(ConfigError) as info:
        Problem(**{field: value})
    assert info.value.field == field.rstrip("_")
    assert words in str(info.value)


def test_kv_heads_must_divide_heads():
    with pytest.raises(ConfigError, match="kv_heads: must divide heads"):
        Problem(heads=6, kv_heads=4)


def test_causal_needs_no_more_queries_than_keys():
    with pytest.raises(ConfigError, match="seq_q"):
        Problem(seq_q=10, seq_k=5, causal=True)


def test_defaults_resolve_kv_heads_and_scale():
    p = Problem(heads=8, head_dim=64)
    assert p.kv_heads == 8 and p.softmax_scale == pytest.approx(0.125)


def test_gqa_maps_consecutive_query_heads_to_one_kv_head():
    p = Problem(heads=8, kv_heads=2)
    assert [p.kv_head(h) for h in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize("sq,sk", [(1, 1), (5, 5), (3, 9), (1, 100), (64, 64)])
def test_sum_visible_equals_brute_force(sq, sk):
    p = Problem(seq_q=sq, seq_k=sk, causal=True)
    for r0 in range(sq):
        for r1 in range(r0, sq + 1):
            brute = sum(p.visible_cols(i) for i in range(r0, r1))
            assert sum_visible(sq, sk, r0, r1) == brute


def test_round_trip_through_dict():
    p = Problem(batch=2, heads=4, kv_heads=1, seq_q=7, seq_k=9, causal=True, dropout=0.1)
    assert Problem.from_dict(p.to_dict()) == p


@pytest.mark.parametrize("scale", [0.0, -1.0, 1e308, float("inf"), float("nan")])
def test_a_softmax_scale_out_of_range_is_refused_with_the_range(scale):
    """The API refuses what the CLI's --scale refuses: --verify's float64 scores would overflow."""
    with pytest.raises(ConfigError, match="softmax_scale: must be a number > 0 and at most 1e"):
        Problem(softmax_scale=scale)
    assert Problem(softmax_scale=1e6).softmax_scale == 1e6
