"""A paged K/V cache (`--page-size`): flash-decoding reads K and V page by page through an
int32 block table, exactly, and counts the table's reads as a tensor of its own.

Expected values come from the library's source by hand: flash_api.cpp mha_fwd_kvcache
("Paged KV cache block size must be divisible by 256"; `seqlen_k = max_num_blocks_per_seq *
page_block_size`) and flash_fwd_kernel.h compute_attn_1rowblock_splitkv (the table read twice
at the start, then twice for V before each block but the first visited and twice for K before
each block but the last: 2 + 4 (n - 1) reads of 4 bytes for n blocks).
"""

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_checks import assert_classes_hold_identical_ctas
from test_cli import run

from hbmsim import Problem, execute_plan, get_hardware
from hbmsim.engine.workload.classkeys import from_plan_fast
from hbmsim.engine.workload.work import from_plan_exact
from hbmsim.errors import ConfigError
from hbmsim.interpret.counts import count_plan
from hbmsim.interpret.trace import OP_LOAD, trace_plan
from hbmsim.libraries.registry import make_impl_plan

A100, H100 = get_hardware("a100-80gb"), get_hardware("h100-sxm")
DECODE = ["simulate", "--impl", "flash-decoding", "--gpu", "h100-sxm", "--json"]
SHAPE = ["--batch", "4", "--heads", "32", "--kv-heads", "8", "--head-dim", "128", "--seq-q", "1"]


def _json(capsys, *args):
    code, out, err = run(capsys, *DECODE, *SHAPE, *args)
    assert code == 0, err
    return json.loads(out)


def test_the_block_table_is_read_as_a_tensor_of_its_own(capsys):
    """seq_k 4,096, d 128: kBlockN 128, 32 blocks; num_splits_heuristic over b x h_k = 32 row
    blocks on 132 x 2 slots picks 7 splits of ceil(32 / 7) = 5 blocks (the last gets 2). A
    split of n blocks reads the table 2 + 4 (n - 1) times, 4 bytes each."""
    d = _json(capsys, "--seq-k", "4096", "--page-size", "256", "--no-engine")
    assert d["tiles"]["splits"] == 7
    reads = 4 * 8 * (6 * (2 + 4 * 4) + (2 + 4 * 1))  # batch x kv heads x (splits)
    table = d["by_tensor"]["block_table"]
    assert table == {"read_bytes": 4 * reads, "write_bytes": 0, "trips": reads}
    assert d["problem"]["page_size"] == 256


@pytest.mark.parametrize("page", ["256", "512", "1024", "4096"])
def test_kv_bytes_equal_the_contiguous_runs(capsys, page):
    """Pages are whole K/V blocks (kBlockN 128 divides every allowed page): K and V move the
    same bytes as from a contiguous cache; only the table's reads are added."""
    flat = _json(capsys, "--seq-k", "4000", "--no-engine")
    paged = _json(capsys, "--seq-k", "4000", "--page-size", page, "--no-engine")
    for name in ("K", "V", "Q", "O"):
        assert paged["by_tensor"][name] == flat["by_tensor"][name], name
    assert "block_table" not in flat["by_tensor"]
    extra = paged["by_tensor"]["block_table"]["read_bytes"]
    assert paged["hbm_read_bytes"] == flat["hbm_read_bytes"] + extra


def test_verify_matches_naive_attention_with_pages(capsys):
    d = _json(
        capsys,
        "--seq-k",
        "1000",
        "--page-size",
        "256",
        "--batch",
        "3",
        "--verify",
        "--no-engine",
    )
    assert d["verify"]["rel_err"] < 1e-12
    assert d["verify"]["lse_max_abs_err"] < 1e-12


def test_a_page_size_is_simulated_with_the_engine(capsys):
    d = _json(capsys, "--seq-k", "8192", "--page-size", "512")
    flat = _json(capsys, "--seq-k", "8192")
    assert d["time_s"] > 0
    # the table is small next to K and V: a paged read costs at most a percent more here
    assert flat["time_s"] <= d["time_s"] <= 1.01 * flat["time_s"]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--page-size", "300"], "page_size: flash-decoding: must be a multiple of 256"),
        (["--page-size", "0"], "page_size: must be from 1 to"),
        (["--page-size", "8192"], "page_size: flash-decoding: must be at most 4,096"),
        (["--page-size", "256", "--bk", "96"], "bk: flash-decoding: with page_size 256"),
    ],
)
def test_bad_page_sizes_are_one_clear_line(capsys, args, words):
    code, out, err = run(capsys, *DECODE, *SHAPE, "--seq-k", "4000", *args)
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and words in err, err


@pytest.mark.parametrize(
    "program, words",
    [
        (["--impl", "flash-attn-2"], "page_size: flash-attn-2: it mirrors flash_attn_func"),
        (["--impl", "torch-eager"], "page_size: torch-eager:"),
        (["--algo", "fa2"], "page_size: fa2: the textbook programs read a contiguous"),
    ],
)
def test_programs_without_a_block_table_refuse_a_page_size(capsys, program, words):
    code, out, err = run(capsys, "simulate", *program, "--seq", "512", "--page-size", "256")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and words in err, err


def _sweep(capsys, *args):
    code, out, err = run(
        capsys,
        "sweep",
        "--impl",
        "flash-decoding",
        "--seq-q",
        "1",
        "--seq",
        "1024,2048",
        "--no-engine",
        "--format",
        "json",
        *args,
    )
    assert code == 0, err
    return json.loads(out)


def test_sweep_takes_a_page_size(capsys):
    """Every row of a sweep reads its cache by page: the table's reads on top of the same
    K/V bytes (one row block, 16 heads, kBlockN 256 for d 64)."""
    flat, paged = _sweep(capsys), _sweep(capsys, "--page-size", "512")
    for f, p in zip(flat, paged, strict=True):
        assert p["hbm_read_bytes"] > f["hbm_read_bytes"]
        assert p["hbm_write_bytes"] == f["hbm_write_bytes"]


# --- the tile programs: placement, exactness, counts, classes ---------------------------------


def _k_loads(plan):
    """(kernel's CTA coordinate, pool page, first slot, last slot) of every K load."""
    tr = trace_plan(plan)
    names = [t["name"] for t in tr.tensors]
    r = tr.records
    k = r[(r["op"] == OP_LOAD) & (r["tensor"] == names.index("K"))]
    return tr, names, k


def test_a_sequences_pages_are_interleaved_across_the_batch():
    """Page j of sequence b sits at pool page j * batch + b: every K tile of sequence b comes
    from a page whose number is b modulo the batch, slots within one page, and the sequence's
    pages together hold its keys once."""
    p = Problem(batch=3, heads=2, kv_heads=1, seq_q=1, seq_k=1000, head_dim=64, page_size=512)
    plan = make_impl_plan("flash-decoding", p, A100)
    _, _, k = _k_loads(plan)
    for b in range(3):
        mine = k[k["cta_coord"][:, 0] == b]
        pages = mine["start"][:, 0]
        assert set((pages % 3).tolist()) == {b}
        assert (mine["stop"][:, 2] <= 512).all()
        keys = sorted(
            (int(pg) // 3 * 512 + int(a), int(pg) // 3 * 512 + int(z))
            for pg, a, z in zip(pages, mine["start"][:, 2], mine["stop"][:, 2], strict=True)
        )
        assert keys[0][0] == 0 and keys[-1][1] == 1000
        assert all(x[1] == y[0] for x, y in zip(keys, keys[1:], strict=False))


@st.composite
def paged_problems(draw):
    kv_heads = draw(st.sampled_from([1, 2]))
    seq_k = draw(st.integers(1, 1300))
    page = 256 * draw(st.integers(1, -(-seq_k // 256)))
    causal = draw(st.booleans())
    seq_q = draw(st.integers(1, min(3, seq_k)))
    p = Problem(
        batch=draw(st.integers(1, 3)),
        heads=kv_heads * draw(st.sampled_from([1, 2, 4])),
        kv_heads=kv_heads,
        seq_q=seq_q,
        seq_k=seq_k,
        head_dim=draw(st.sampled_from([8, 64, 96, 160])),
        causal=causal,
        page_size=page,
    )
    if draw(st.booleans()):
        p = dataclasses.replace(p, window_left=draw(st.integers(0, seq_k)))
    return p


@settings(max_examples=30, deadline=None)
@given(p=paged_problems(), hw=st.sampled_from([A100, H100]))
def test_paged_decoding_is_exact_and_counts_what_it_traces(p, hw):
    """Any page size the library takes, over cache lengths that fill the last page or not:
    the executed programs equal naive attention, the counts equal the trace, K and V move what
    the contiguous cache moves, each CTA reads the table 2 + 4 (n - 1) times for its n K
    blocks, and the fast workload's tile keys equal the full trace's."""
    plan = make_impl_plan("flash-decoding", p, hw)
    e = execute_plan(plan)
    assert e.rel_err < 1e-9 and e.lse_max_abs_err < 1e-9
    counted, traced = count_plan(plan).to_dict(), trace_plan(plan).totals()
    assert counted["by_tensor"] == traced["by_tensor"]
    flat = count_plan(make_impl_plan("flash-decoding", dataclasses.replace(p, page_size=None), hw))
    for name in ("K", "V"):
        assert (
            counted["by_tensor"][name]["read_bytes"]
            == flat.to_dict()["by_tensor"][name]["read_bytes"]
        )
    tr, names, _ = _k_loads(plan)
    r = tr.records
    split = r[r["kernel"] == 0]
    loads = split[split["op"] == OP_LOAD]
    for cta in np.unique(loads["cta"]):
        mine = loads[loads["cta"] == cta]
        n = int((mine["tensor"] == names.index("K")).sum())
        table = int((mine["tensor"] == names.index("block_table")).sum())
        assert table == (2 + 4 * (n - 1) if n else 0)
    fast, exact = from_plan_fast(plan), from_plan_exact(plan)
    for kf, ke in zip(fast.kernels, exact.kernels, strict=True):
        assert np.array_equal(kf.acc_key, ke.acc_key), kf.name


def test_declared_cta_classes_hold_identical_ctas_with_pages():
    p = Problem(batch=2, heads=4, kv_heads=2, seq_q=1, seq_k=1100, head_dim=64, page_size=256)
    assert_classes_hold_identical_ctas(make_impl_plan("flash-decoding", p, A100))


def test_the_split_heuristic_sees_whole_pages():
    """seq_k 257, d 128 (kBlockN 128) on the A100 (108 SMs: num_SMs 216), one row block:
    efficiency is splits / 216, so num_splits_heuristic takes the most splits the blocks allow.
    Contiguous: 3 blocks, 3 splits. Paged by 512 the library sees seqlen_k 512: 4 blocks, 4
    splits of one block each, and the fourth lies past the keys (n_block_max = min(3, 4) = 3 =
    n_block_min): it reads no K, V or table entry and still the combine weighs it out."""
    p = Problem(batch=1, heads=1, seq_q=1, seq_k=257, head_dim=128)
    assert make_impl_plan("flash-decoding", p, A100).tiles.splits == 3
    paged = make_impl_plan("flash-decoding", dataclasses.replace(p, page_size=512), A100)
    assert paged.tiles.splits == 4
    tr, names, k = _k_loads(paged)
    assert sorted(k["cta_coord"][:, 2].tolist()) == [0, 1, 2]  # split index of each K load
    assert execute_plan(paged).rel_err < 1e-12
    with pytest.raises(ConfigError, match="at most 512"):
        make_impl_plan("flash-decoding", dataclasses.replace(p, page_size=768), A100)


def test_the_api_takes_a_page_size():
    """`Problem(page_size=...)` through `hbmsim.simulate`: the table is a tensor of its own,
    the problem's dict names the page size, and a contiguous problem's dict does not."""
    from hbmsim import simulate

    p = Problem(batch=2, heads=8, kv_heads=2, seq_q=1, seq_k=2048, head_dim=128, page_size=1024)
    d = simulate(p, H100, impl="flash-decoding", engine=False).to_dict()
    assert d["problem"]["page_size"] == 1024
    assert d["by_tensor"]["block_table"]["read_bytes"] > 0
    assert "page_size" not in dataclasses.replace(p, page_size=None).to_dict()
    assert Problem.from_dict(p.to_dict()) == p


def test_a_paged_trace_file_replays(capsys, tmp_path):
    """A trace written with --page-size keeps the page size and replays to the same bytes."""
    out = tmp_path / "paged.trace"
    args = ["--impl", "flash-decoding", "--seq-q", "1", "--seq-k", "1000", "--heads", "4"]
    code, _, err = run(capsys, "trace", *args, "--page-size", "256", "-o", str(out))
    assert code == 0, err
    code, text, err = run(capsys, "replay", str(out), "--json")
    assert code == 0, err
    replayed = json.loads(text)
    direct = json.loads(
        run(capsys, "simulate", *args, "--page-size", "256", "--no-engine", "--json")[1]
    )
    assert replayed["problem"]["page_size"] == 256
    assert replayed["hbm_read_bytes"] == direct["hbm_read_bytes"]


# --- explore: page size as an axis -------------------------------------------------------------

DECODE_SPEC = """
[axes]
heads = 32
kv_heads = 8
head_dim = 128
batch = 4
context = [2048, 4096]
pass = "decode"
program = ["flash-decoding", "fa2"]
"""


def test_a_spec_without_page_sizes_keeps_the_ids_of_the_example_table():
    """The example table was written before page_size was an axis: its spec still gives the
    same point ids, so it (and any earlier table) resumes rather than reruns."""
    from hbmsim.explore import read_spec, read_table

    rows, columns = read_table("hbmsim/data/explore_example.parquet")
    spec = read_spec("docs/explore-example.toml")
    assert "page_size" not in columns
    assert {pid for _, pid in spec.point_ids()} == {r["point_id"] for r in rows}


def test_page_size_is_an_explore_axis():
    """Each page size is a point of its own (its own id, the fast ids equal to each point's),
    its row names the page size; flash-decoding reads the table on top of the same K/V bytes,
    and fa2 refuses the page size as an infeasible row saying why."""
    from hbmsim.explore import parse_spec
    from hbmsim.explore.spec import point_id
    from hbmsim.explore.table import run_point

    flat = parse_spec(_toml(DECODE_SPEC))
    paged = parse_spec(_toml(DECODE_SPEC + "page_size = [256, 1024]\n"))
    assert paged.size == 2 * flat.size
    ids = list(paged.point_ids())
    assert [pid for _, pid in ids] == [point_id(pt) for pt in paged.points()]
    assert len({pid for _, pid in ids}) == paged.size
    assert not {pid for _, pid in ids} & {pid for _, pid in flat.point_ids()}
    rows = {
        (r["context"], r["program"], r.get("page_size")): r
        for spec in (flat, paged)
        for r in map(run_point, spec.points())
    }
    for context in (2048, 4096):
        base = rows[(context, "flash-decoding", None)]
        for page in (256, 1024):
            row = rows[(context, "flash-decoding", page)]
            assert row["status"] == "ok" and row["page_size"] == page
            assert row["hbm_bytes"] > base["hbm_bytes"]
            bad = rows[(context, "fa2", page)]
            assert bad["status"] == "infeasible" and "page_size" in bad["reason"]


def _toml(text):
    import tomllib
    from decimal import Decimal

    return tomllib.loads(text, parse_float=Decimal)


def test_a_page_size_axis_outside_the_range_is_refused_naming_it(tmp_path):
    from hbmsim.errors import InputFileError
    from hbmsim.explore import read_spec

    path = tmp_path / "spec.toml"
    path.write_text(DECODE_SPEC + "page_size = [256, 0]\n")
    with pytest.raises(InputFileError, match=r"axes\.page_size\[1\]"):
        read_spec(path)


def test_an_explore_run_with_page_sizes_writes_the_column_and_resumes(tmp_path):
    """An embedded run of a page-size axis writes a page_size column (CSV), and a rerun keeps
    every row: the ids it reads back are the ones it runs."""
    from hbmsim.explore import explore, read_spec, read_table

    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(
        DECODE_SPEC.replace('["flash-decoding", "fa2"]', '"flash-decoding"')
        + "page_size = [256, 512]\n"
    )
    spec, out = read_spec(spec_path), tmp_path / "t.csv"
    run = explore(spec, out, workers=1)
    assert run.statuses == {"ok": 4}
    rows, columns = read_table(out)
    assert "page_size" in columns
    assert sorted((r["context"], r["page_size"]) for r in rows) == [
        (2048, 256),
        (2048, 512),
        (4096, 256),
        (4096, 512),
    ]
    again = explore(spec, out, workers=1)
    assert again.kept == 4 and again.ran == 0
    assert read_table(out) == (rows, columns)
