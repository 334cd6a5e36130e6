"""The Roofline page at the edges of the sidebar: the largest problem, the smallest SRAM, a
slow link. It shows numbers or a message in the sidebar's terms, never a traceback."""

import pytest

pytest.importorskip("streamlit")
from test_app import make  # noqa: E402

from hbmsim import Problem, get_hardware, make_plan  # noqa: E402
from hbmsim.interpret.counts import count_plan  # noqa: E402

PAGE = "roofline.py"


def test_the_largest_problem_shows_its_counts_past_64_bit_integers():
    """batch 65,536 x heads 4,096 x seq 16M x d 1,024: flops past 2^63 reach the table (as
    floats: all a dataframe column holds) instead of an Arrow conversion error."""
    big = {"batch": 65536, "heads": 4096, "kv_heads": 4096, "seq_q": 1 << 24, "seq_k": 1 << 24}
    at = make({**{k: str(v) for k, v in big.items()}, "head_dim": "1024"}, PAGE)
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    fa2 = table[table["kernel"] == "fa2_fwd"]
    plan = make_plan("fa2", Problem(**big, head_dim=1024), get_hardware("h100-sxm"))
    flops = count_plan(plan).flops
    assert flops > 1 << 63
    assert float(fa2["flops"].iloc[0]) == pytest.approx(flops, rel=1e-15)


def test_an_sram_too_small_for_any_block_is_explained_in_the_sidebars_terms():
    at = make({"sram_kib": "1", "seq_q": "256", "seq_k": "256"}, PAGE)
    assert not at.exception
    errors = [e.value for e in at.error]
    assert errors and all("SRAM per SM: must be 0 or at least 2 KiB" in e for e in errors)
    assert not any("sram_bytes" in e or "232,448" in e for e in errors)


def test_a_one_gb_per_s_link_is_simulated():
    """The setting that once spun forever: 1 GB/s, 3 heads of 3,000 tokens."""
    q = {"hbm_gbps": "1", "seq_q": "3000", "seq_k": "3000", "heads": "3", "kv_heads": "3"}
    at = make(q, PAGE)
    assert not at.exception and not at.error and not at.info
    table = at.dataframe[0].value
    (time_column,) = [c for c in table.columns if c.startswith("time (")]
    assert time_column in {"time (µs)", "time (ms)", "time (s)"}  # the unit follows the size
    assert (table[time_column] > 0).all()
