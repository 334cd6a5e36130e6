"""The trace file: round trip, and a clear TraceFileError for every kind of damage."""

import struct
import zlib

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import ALL_PASSES, compatible, plan_args, problems, tiles

from hbmsim import (
    ALGOS,
    Problem,
    TraceFileError,
    get_hardware,
    load_trace,
    save_trace,
    trace_plan,
)
from hbmsim.algorithms.registry import make_plan
from hbmsim.interpret.counts import count_plan
from hbmsim.interpret.trace import MAX_TRACE_RECORDS
from hbmsim.interpret.tracefile import FORMAT_VERSION, MAGIC


@pytest.fixture
def saved(tmp_path):
    plan = make_plan(
        "fa2",
        Problem(batch=1, heads=2, seq_q=40, seq_k=50, head_dim=8, causal=True),
        get_hardware("a100-40gb"),
        16,
        16,
    )
    trace = trace_plan(plan)
    path = tmp_path / "t.hbmtrace"
    save_trace(trace, path)
    return trace, path


def test_round_trip_keeps_records_and_metadata(saved):
    trace, path = saved
    back = load_trace(path)
    assert np.array_equal(back.records, trace.records)
    assert back.meta == trace.meta
    assert back.totals() == trace.totals()


def test_records_follow_program_order(saved):
    """Within a CTA: Q loaded first, O and lse stored last; CTAs appear in launch order."""
    trace, _ = saved
    r = trace.records
    names = [t["name"] for t in trace.tensors]
    first = r[r["cta"] == 0]
    transfers = first[first["op"] != 2]
    assert names[transfers["tensor"][0]] == "Q"
    assert [names[t] for t in transfers["tensor"][-2:]] == ["O", "lse"]
    assert np.all(np.diff(r["cta"].astype(np.int64)) >= 0)


def _rewrite(path, data):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "damage,words",
    [
        (lambda d: d[: len(d) // 2], "truncated"),
        (lambda d: d[:-1], "corrupted or truncated"),
        (lambda d: d[:40] + bytes([d[40] ^ 0xFF]) + d[41:], "corrupted"),
        (lambda d: b"", "not an hbmsim trace file"),
        (lambda d: b"PK\x03\x04" + d[4:], "not an hbmsim trace file"),
    ],
)
def test_damaged_files_are_reported_plainly(saved, damage, words):
    _, path = saved
    _rewrite(path, damage(path.read_bytes()))
    with pytest.raises(TraceFileError, match=words):
        load_trace(path)


def test_other_versions_are_named(saved):
    _, path = saved
    data = path.read_bytes()
    body = MAGIC + struct.pack("<I", FORMAT_VERSION + 1) + data[12:-4]
    _rewrite(path, body + struct.pack("<I", zlib.crc32(body)))
    with pytest.raises(
        TraceFileError, match=f"version {FORMAT_VERSION + 1}.*version {FORMAT_VERSION} only"
    ):
        load_trace(path)


def test_a_consistent_but_lying_header_is_caught(saved):
    """Checksum fine, but the header promises more records than the payload holds."""
    _, path = saved
    data = path.read_bytes()
    head_len = struct.unpack_from("<I", data, 12)[0]
    head = data[16 : 16 + head_len].decode().replace('"n_records":', '"n_records":1', 1)
    body = (
        MAGIC
        + struct.pack("<II", FORMAT_VERSION, len(head))
        + head.encode()
        + data[16 + head_len : -4]
    )
    _rewrite(path, body + struct.pack("<I", zlib.crc32(body)))
    with pytest.raises(
        TraceFileError, match=r"n_records: says [\d,]+ records but the payload holds"
    ):
        load_trace(path)


def test_missing_file(tmp_path):
    with pytest.raises(TraceFileError, match="nope.hbmtrace: no such file"):
        load_trace(tmp_path / "nope.hbmtrace")


@given(
    p=problems(passes=ALL_PASSES),
    t=tiles(),
    algo=st.sampled_from(ALGOS),
    splits=st.integers(1, 4),
)
def test_every_real_trace_passes_the_sanity_checks(tmp_path_factory, p, t, algo, splits):
    """The checks a loaded trace must pass (regions inside tensors, bytes = region size, CTAs
    in launch order, ...) hold for every trace a schedule really makes: only hostile files
    are refused."""
    p = compatible(algo, p)
    bq, bk, bd, s = plan_args(algo, t, p, splits)
    plan = make_plan(algo, p, get_hardware("h100-sxm"), bq, bk, bd, s)
    assume(count_plan(plan).ops <= MAX_TRACE_RECORDS)  # past it tracing refuses (tested apart)
    trace = trace_plan(plan)
    path = tmp_path_factory.mktemp("t") / "t.hbmtrace"
    save_trace(trace, path)
    back = load_trace(path)
    assert np.array_equal(back.records, trace.records) and back.meta == trace.meta


def test_a_loaded_trace_cannot_be_edited_in_place(saved):
    """Records come back read-only: a Trace is a record of what a plan did."""
    _, path = saved
    with pytest.raises(ValueError, match="read-only"):
        load_trace(path).records["bytes"][0] = 1
