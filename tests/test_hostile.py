"""Hostile input, as a user bent on breaking hbmsim would give it: every bad value, file and
trace ends in exit status 2 and one stderr line naming what is wrong, never a traceback, within
seconds and a bounded amount of memory, and an existing output file survives every failure.

The cases are generated: output paths x commands, raw hostile files x readers, and hypothesis
mutations of valid hardware profiles, trace files and measurements (each mutation invalid by
construction, so the assertion is exit 2 and never "0 or 2"). Most run through the real entry
point in-process (`hbmsim.cli.main`), with tracemalloc measuring their peak; a handful run as
subprocesses under resource limits, measuring peak RSS and time from outside.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import struct
import subprocess
import sys
import time
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recorded_run import measurements_doc

from hbmsim import Problem, get_hardware, make_plan, save_trace, trace_plan
from hbmsim.cli.commands import main
from hbmsim.interpret.tracefile import FORMAT_VERSION, MAGIC

ROOT = Path(__file__).resolve().parent.parent
MAX_S = 10.0
MAX_BYTES = 1 << 30  # 1 GB
SMALL = ["--seq", "64", "--heads", "2", "--head-dim", "16"]
CASES = {"count": 0}  # cases run by this module, checked >= 500 at the end


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """hbmsim's entry point in-process: (exit code, stdout, stderr), time and peak memory
    (tracemalloc: Python and NumPy allocations) asserted under the bounds. Cases whose
    refusal comes after building a plan of a million CTA classes run untraced (tracemalloc
    slows them five-fold); their memory is measured as processes below."""
    capsys.readouterr()
    heavy = "16777216" in map(str, argv)
    if not heavy:
        tracemalloc.start()
    t0 = time.monotonic()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    elapsed = time.monotonic() - t0
    peak = 0
    if not heavy:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    out, err = capsys.readouterr()
    CASES["count"] += 1
    assert elapsed < MAX_S, (argv, elapsed)
    assert peak < MAX_BYTES, (argv, peak)
    return code, out, err


def refused(argv, capsys, *words: str) -> str:
    """Exit 2, one stderr line starting `hbmsim: error:`, containing every word, no
    traceback; returns the line."""
    code, _, err = run_cli(argv, capsys)
    assert code == 2, (argv, code, err)
    assert err.count("\n") == 1 and err.startswith("hbmsim: error: "), (argv, err)
    assert "Traceback" not in err
    for w in words:
        assert w in err, (argv, w, err)
    return err


# --- output paths --------------------------------------------------------------------------

BAD_PATHS = {  # name -> (path, words in the message)
    "empty": ("", "empty path"),
    "folder": ("{tmp}", "folder"),
    "folder/": ("{tmp}/", "folder"),
    "missing folder": ("{tmp}/nope/out", "does not exist"),
    "proc": ("/proc/hbmsim-x", "cannot write"),
    "device": ("/dev/full", "device"),
    "null device": ("/dev/null", "device"),
    "under a file": ("{tmp}/existing.txt/out", "not a folder"),
}


def _commands(trace_file: Path, measurements: Path):
    """(command argv with OUT for the output path, field named in the error)."""
    return [
        (["sweep", *SMALL, "--no-engine", "-o", "OUT"], "output"),
        (["trace", *SMALL, "-o", "OUT"], "output"),
        (["simulate", *SMALL, "--timeline", "OUT"], "timeline"),
        (["replay", trace_file, "--timeline", "OUT"], "timeline"),
        (["validate", "--measurements", measurements, "--results-dir", "OUT"], "results-dir"),
    ]


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory) -> Path:
    plan = make_plan(
        "fa2",
        Problem(batch=1, heads=2, seq_q=40, seq_k=50, head_dim=8, causal=True),
        get_hardware("a100-40gb"),
        16,
        16,
    )
    path = tmp_path_factory.mktemp("trace") / "t.hbmtrace"
    save_trace(trace_plan(plan), path)
    return path


def _measurements_doc() -> dict:
    """A small valid measurements.json, as kernels/validate.py writes it."""
    configs = [
        {
            "name": f"flash {seq}",
            "kind": "flash",
            "algo": "fa2-kernel",
            "problem": Problem(batch=1, heads=2, seq_q=seq, seq_k=seq).to_dict(),
            "tiles": {"bq": 64, "bk": 64},
            "measured_time_s": 1e-4 * seq / 256,
            "resources": {"flash_fwd": {"registers": 96}},
        }
        for seq in (256, 512)
    ] + [{"name": "flash 16384", "kind": "flash", "error": "CUDADriverError"}]
    return measurements_doc(configs, sdpa_seq=256)


@pytest.fixture(scope="module")
def measurements(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("m") / "measurements.json"
    path.write_text(json.dumps(_measurements_doc()))
    return path


def test_valid_inputs_still_work(trace_file, measurements, tmp_path, capsys):
    """The fixtures the mutations start from are accepted: every refusal below is the
    mutation's doing."""
    for i, (argv, _) in enumerate(_commands(trace_file, measurements)):
        out = tmp_path / f"out{i}"
        code, _, err = run_cli([out if a == "OUT" else a for a in argv], capsys)
        assert code == 0, (argv, err)
        assert out.exists()
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps(get_hardware("l4").to_dict()))
    assert run_cli(["simulate", *SMALL, "--gpu", profile], capsys)[0] == 0


@pytest.mark.parametrize("bad", list(BAD_PATHS))
@pytest.mark.parametrize("which", range(5))
def test_unwritable_outputs_are_refused_before_the_work(
    bad, which, trace_file, measurements, tmp_path, capsys
):
    (tmp_path / "existing.txt").write_text("keep")
    path, words = BAD_PATHS[bad]
    path = path.format(tmp=tmp_path)
    argv, field = _commands(trace_file, measurements)[which]
    if field == "results-dir" and bad in ("folder", "folder/", "missing folder"):
        pytest.skip("a results folder may exist or be created")
    if field == "results-dir" and bad in ("device", "null device"):
        words = "not a folder"
    refused([path if a == "OUT" else a for a in argv], capsys, f"{field}:", words)
    assert (tmp_path / "existing.txt").read_text() == "keep"


@pytest.mark.parametrize("which", range(4))
@pytest.mark.parametrize(
    "spoiler",
    [
        ["--seq", "0"],
        ["--heads", "3", "--kv-heads", "2"],
        ["--dropout", "2"],
        ["--gpu", "no-such-gpu"],
        ["--hbm-gbps", "-1"],
    ],
)
def test_an_existing_output_survives_a_failed_run(
    which, spoiler, trace_file, measurements, tmp_path, capsys
):
    """A run refused after the output path was accepted leaves the old file as it was."""
    target = tmp_path / "result.out"
    target.write_bytes(b"precious")
    argv, _ = _commands(trace_file, measurements)[which]
    argv = [target if a == "OUT" else a for a in argv]
    if argv[0] == "replay" and spoiler[0] not in ("--gpu", "--hbm-gbps"):
        pytest.skip("replay takes no problem flags")
    code, _, err = run_cli(argv + spoiler, capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert target.read_bytes() == b"precious"
    assert [p.name for p in tmp_path.iterdir()] == ["result.out"]  # no temporary left behind


# --- raw hostile files, for every reader -----------------------------------------------------


def _raw_files(tmp: Path) -> dict[str, tuple[Path, str]]:
    """name -> (path, words the message must contain)."""
    files = {}

    def put(name, data: bytes, words):
        p = tmp / f"{name}.json"
        p.write_bytes(data)
        files[name] = (p, words)

    put("empty", b"", "empty")
    put("whitespace", b"  \n\t ", "empty")
    put("utf16", '{"a": 1}'.encode("utf-16"), "UTF-16")
    put("binary", bytes(range(256)) * 4, "binary")
    put("latin1", '{"name": "caf\u00e9"}'.encode("latin-1"), "not UTF-8")
    put("deep", b"[" * 100_000 + b"]" * 100_000, "nests")
    put("deep-objects", b'{"a":' * 5000 + b"1" + b"}" * 5000, "nests")
    put("huge-int", b'{"base": "h200", "sm_count": ' + b"9" * 5000 + b"}", "digits")
    put("nan", b'{"sm_count": NaN}', "NaN")
    put("infinity", b'{"sm_count": Infinity}', "Infinity")
    put("overflow", b'{"hbm_bytes_per_s": 1e999}', "overflows")
    put("syntax", b'{"a": 1,,}', "not valid JSON")
    put("truncated", b'{"a": [1, 2', "not valid JSON")
    put("list", b"[1, 2, 3]", "JSON object")
    put("string", b'"hello"', "JSON object")
    put("number", b"42", "JSON object")
    put("null", b"null", "JSON object")
    put("too-large", b'{"a": "' + b"x" * (17 << 20) + b'"}', "too large")
    files["folder"] = (tmp, "directory")
    files["missing"] = (tmp / "missing.json", "no such file")
    link = tmp / "dangling.json"
    link.symlink_to(tmp / "nowhere.json")
    files["dangling-link"] = (link, "no such file")
    files["/dev/null"] = (Path("/dev/null"), "empty")
    files["/dev/zero"] = (Path("/dev/zero"), "too large")
    fifo = tmp / "fifo.json"
    os.mkfifo(fifo)  # no writer: must read as empty, not hang
    files["fifo"] = (fifo, "empty")
    return files


RAW = [
    "empty",
    "whitespace",
    "utf16",
    "binary",
    "latin1",
    "deep",
    "deep-objects",
    "huge-int",
    "nan",
    "infinity",
    "overflow",
    "syntax",
    "truncated",
    "list",
    "string",
    "number",
    "null",
    "too-large",
    "folder",
    "missing",
    "dangling-link",
    "/dev/null",
    "/dev/zero",
    "fifo",
]


@pytest.fixture(scope="module")
def raw_files(tmp_path_factory):
    return _raw_files(tmp_path_factory.mktemp("raw"))


@pytest.mark.parametrize("name", RAW)
@pytest.mark.parametrize("reader", ["profile", "measurements", "trace"])
def test_raw_hostile_files_get_one_line(name, reader, raw_files, tmp_path, capsys):
    path, words = raw_files[name]
    if reader == "profile":
        if not str(path).endswith(".json"):  # --gpu takes a .json path: link one
            link = tmp_path / "p.json"
            link.symlink_to(path)
            path = link
        argv = ["simulate", *SMALL, "--gpu", path]
    elif reader == "measurements":
        argv = ["validate", "--measurements", path, "--results-dir", tmp_path / "r"]
        if name in ("nan", "infinity", "huge-int"):
            words = "lacks"  # NaN and Infinity are what Python writes for "no value" here
    else:
        argv = ["replay", path]
        if name not in ("folder", "missing", "dangling-link", "/dev/zero"):
            words = ""  # a trace is not JSON: these fail as "not an hbmsim trace file"
    refused(argv, capsys, f"{reader} ", words)
    assert not (tmp_path / "r").exists()


# --- hardware profiles: hypothesis mutations ------------------------------------------------

BAD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.integers(max_value=-1),
    st.floats(max_value=-1e-300, allow_nan=False, allow_infinity=False),
    st.just(0),
)
NUMBER_FIELDS = [
    "sm_count",
    "sram_bytes_per_sm",
    "sram_bytes_per_block",
    "hbm_bytes_per_s",
    "l2_bytes_per_s",
    "sm_bytes_per_s",
    "exp_ops_per_s",
    "clock_hz",
    "max_ctas_per_sm",
    "max_threads_per_sm",
    "registers_per_sm",
]
FAST = settings(
    max_examples=70,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)


@FAST
@given(
    field=st.sampled_from(NUMBER_FIELDS + ["matrix_flops_per_s", "vector_flops_per_s", "name"]),
    value=BAD_VALUES,
    base=st.booleans(),
)
def test_mutated_profiles_name_the_field(field, value, base, tmp_path, capsys):
    """One field of a valid profile (a whole one, or a preset's override) made wrong."""
    if field == "name" and isinstance(value, str):
        value = None  # any string is a valid name
    if field.endswith("flops_per_s") and isinstance(value, dict) and not value:
        value = {"fp16": -1}
    doc = {"base": "h200", field: value} if base else {**get_hardware("l4").to_dict(), field: value}
    path = tmp_path / "mutant.json"
    path.write_text(json.dumps(doc))
    refused(["simulate", *SMALL, "--gpu", path], capsys, "profile", field)


@FAST
@given(field=st.sampled_from(["matrix_flops_per_s", "vector_flops_per_s"]), data=st.data())
def test_mutated_rate_tables_name_the_dtype(field, data, tmp_path, capsys):
    rates = dict(get_hardware("h100-sxm").to_dict()[field])
    dtype = data.draw(st.sampled_from(sorted(rates)))
    rates[dtype] = data.draw(BAD_VALUES)
    path = tmp_path / "mutant.json"
    path.write_text(json.dumps({"base": "h100-sxm", field: rates}))
    refused(["simulate", *SMALL, "--gpu", path], capsys, "profile", field)


# --- trace files: hypothesis mutations of header and records --------------------------------


def _parts(path: Path) -> tuple[dict, np.ndarray]:
    data = path.read_bytes()
    head_len = struct.unpack_from("<I", data, 12)[0]
    header = json.loads(data[16 : 16 + head_len])
    records = np.frombuffer(zlib.decompress(data[16 + head_len : -4]), dtype=_dtype()).copy()
    return header, records


def _dtype():
    from hbmsim.interpret.trace import RECORD_DTYPE

    return RECORD_DTYPE


def _write(path: Path, header: dict, records: np.ndarray | bytes, n: int | None = None) -> Path:
    """A trace file with a valid checksum around whatever header and records it is given."""
    raw = records if isinstance(records, bytes) else records.tobytes()
    payload = zlib.compress(raw, 6)
    header = {**header, "payload_bytes": len(payload)}
    if n is not None:
        header["n_records"] = n
    head = json.dumps(header).encode()
    body = struct.pack("<8sII", MAGIC, FORMAT_VERSION, len(head)) + head + payload
    path.write_bytes(body + struct.pack("<I", zlib.crc32(body)))
    return path


def _set(d: dict, dotted: str, value):
    *keys, last = dotted.split(".")
    for k in keys:
        d = d[int(k)] if isinstance(d, list) else d[k]
    if isinstance(d, list):
        d[int(last)] = value
    elif value is _DELETE:
        del d[last]
    else:
        d[last] = value


_DELETE = object()
HEADER_FIELDS = {  # dotted path -> what the message names
    "algo": "algo",
    "problem": "problem",
    "problem.batch": "problem.batch",
    "problem.dtype": "problem",
    "problem.seq_q": "problem.seq_q",
    "problem.head_dim": "problem.head_dim",
    "hardware": "hardware",
    "hardware.sm_count": "hardware.sm_count",
    "hardware.hbm_bytes_per_s": "hardware.hbm_bytes_per_s",
    "tiles": "tiles",
    "tiles.bq": "tiles.bq",
    "tensors": "tensors",
    "tensors.0.shape": "tensors[0].shape",
    "tensors.0.itemsize": "tensors[0].itemsize",
    "tensors.0.name": "tensors[0].name",
    "buffers": "buffers",
    "kernels": "kernels",
    "kernels.0.name": "kernels[0].name",
    "kernels.0.ctas": "kernels[0].ctas",
    "kernels.0.threads_per_cta": "kernels[0].threads_per_cta",
    "kernels.0.stages": "kernels[0].stages",
    "kernels.0.sram_bytes": "kernels[0].sram_bytes",
    "n_records": "n_records",
    "compression": "compression",
}


@FAST
@given(field=st.sampled_from(sorted(HEADER_FIELDS)), value=st.one_of(BAD_VALUES, st.just(_DELETE)))
def test_mutated_trace_headers_name_the_field(field, value, trace_file, tmp_path, capsys):
    """Checksum valid, header field wrong: missing, of the wrong type, or out of range."""
    header, records = _parts(trace_file)
    if field in ("algo", "tensors.0.name", "kernels.0.name") and isinstance(value, str):
        value = _DELETE  # any short string is a valid name
    if field == "problem.dtype" and value is not _DELETE and isinstance(value, str):
        value = _DELETE
    if field.startswith(("problem", "hardware", "tiles")) and value == {}:
        value = []
    if field in ("buffers",) and value == []:
        value = {}
    if (
        field == "tensors.0.shape"
        and isinstance(value, list)
        and all(isinstance(n, int) and n > 0 for n in value)
    ):
        value = [-1]  # a shape of positive sizes may be valid: make it wrong
    if field == "kernels.0.sram_bytes" and value == 0:
        value = -1
    if value is _DELETE and "." not in field:
        del header[field]
    elif value is _DELETE:
        _set(header, field, _DELETE)
    else:
        _set(header, field, value)
    path = _write(tmp_path / "m.hbmtrace", header, records)
    named = HEADER_FIELDS[field]
    if value is _DELETE or field in ("problem.dtype",):
        named = named.split(".")[0].split("[")[0]  # "problem: lacks dtype"
    refused(["replay", path], capsys, "trace", named)


RECORD_MUTATIONS = {  # name -> (function(records, i) making record i wrong, words in message)
    "op": (lambda r, i: r["op"].__setitem__(i, 4 + i % 250), "op"),
    "kernel": (lambda r, i: r["kernel"].__setitem__(i, 7 + i), "kernel"),
    "cta": (lambda r, i: r["cta"].__setitem__(i, 10_000 + i), "cta"),
    "tensor": (lambda r, i: r["tensor"].__setitem__(i, 50 + i % 100), "tensor"),
    "buffer": (lambda r, i: r["buffer"].__setitem__(i, -2 - i % 100), "buffer"),
    "bytes": (lambda r, i: r["bytes"].__setitem__(i, r["bytes"][i] + 1 + i), "bytes"),
    "negative bytes": (lambda r, i: r["bytes"].__setitem__(i, -1 - i), "bytes"),
    "huge flops": (lambda r, i: r["matmul_flops"].__setitem__(i, 1 << 62), "matmul_flops"),
    "negative flops": (lambda r, i: r["vector_flops"].__setitem__(i, -1), "vector_flops"),
    "exp": (lambda r, i: r["exp_ops"].__setitem__(i, -(1 << 40)), "exp_ops"),
    "stop before start": (
        lambda r, i: r["stop"].__setitem__((i, 0), r["start"][i, 0] - 1),
        "start/stop",
    ),
    "outside tensor": (lambda r, i: r["stop"].__setitem__((i, 1), 1 << 40), "start/stop"),
    "negative start": (lambda r, i: r["start"].__setitem__((i, 2), -5), "start/stop"),
}


@FAST
@given(mutation=st.sampled_from(sorted(RECORD_MUTATIONS)), where=st.integers(0, 10**6))
def test_mutated_trace_records_name_the_record(mutation, where, trace_file, tmp_path, capsys):
    header, records = _parts(trace_file)
    fn, words = RECORD_MUTATIONS[mutation]
    transfers = np.flatnonzero(records["op"] != 2)
    computes = np.flatnonzero(records["op"] == 2)
    pool = computes if "flops" in mutation or mutation == "exp" else transfers
    if mutation in ("op", "kernel", "cta", "buffer"):
        pool = np.arange(len(records))
    i = int(pool[where % len(pool)])
    fn(records, i)
    path = _write(tmp_path / "m.hbmtrace", header, records)
    refused(["replay", path], capsys, "trace", words)


@FAST
@given(
    flips=st.lists(
        st.tuples(st.booleans(), st.integers(0, 10**6), st.integers(0, 255)),
        min_size=1,
        max_size=4,
    )
)
def test_byte_flips_under_a_valid_checksum(flips, trace_file, tmp_path, capsys):
    """Random bytes of the header text or the records changed, checksum recomputed: either
    still a trace a plan could have made (exit 0) or one line, never a traceback or a hang."""
    data = trace_file.read_bytes()
    head_len = struct.unpack_from("<I", data, 12)[0]
    head = bytearray(data[16 : 16 + head_len])
    raw = bytearray(zlib.decompress(data[16 + head_len : -4]))
    for in_header, where, value in flips:
        if in_header:
            head[where % len(head)] = 32 + value % 95  # printable: the JSON text changes
        else:
            raw[where % len(raw)] = value
    header = None
    with contextlib.suppress(ValueError):
        header = json.loads(bytes(head))
    path = tmp_path / "flipped.hbmtrace"
    if isinstance(header, dict):
        _write(path, header, bytes(raw))
    else:  # header text no longer JSON: keep it as bytes
        payload = zlib.compress(bytes(raw))
        body = struct.pack("<8sII", MAGIC, FORMAT_VERSION, len(head)) + bytes(head) + payload
        path.write_bytes(body + struct.pack("<I", zlib.crc32(body)))
    code, _, err = run_cli(["replay", path, "--json"], capsys)
    assert code in (0, 2) and "Traceback" not in err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("hbmsim: error: trace "), err


@pytest.mark.parametrize(
    "damage,words",
    [
        ("reversed", "out of order"),
        ("shuffled", "out of order"),
        ("no records", "n_records"),
        ("one CTA dropped", "ctas"),
        ("duplicated", "out of order"),
        ("bomb", "n_records"),
        ("short payload", "n_records"),
        ("kernel name missing", "kernels[0]"),
        ("dtype missing", "dtype"),
        ("negative ctas", "kernels[0].ctas"),
        ("zero threads", "threads_per_cta"),
        ("strings for numbers", "problem.seq_q"),
    ],
)
def test_traces_with_valid_checksums_and_hostile_content(
    damage, words, trace_file, tmp_path, capsys
):
    header, records = _parts(trace_file)
    n = None
    if damage == "reversed":
        records = records[::-1].copy()
    elif damage == "shuffled":
        records = records[np.random.default_rng(0).permutation(len(records))]
    elif damage == "no records":
        records, n = records[:0], 0
    elif damage == "one CTA dropped":
        records = records[records["cta"] != records["cta"].max()]
        n = len(records)
    elif damage == "duplicated":
        records, n = np.concatenate([records, records[:3]]), len(records) + 3
    elif damage == "bomb":  # 256 MB of zeros, a quarter MB compressed; the header says 10 records
        records, n = bytes(256 << 20), 10
    elif damage == "short payload":
        records, n = records[:-5], len(records)
    elif damage == "kernel name missing":
        del header["kernels"][0]["name"]
    elif damage == "dtype missing":
        del header["problem"]["dtype"]
    elif damage == "negative ctas":
        header["kernels"][0]["ctas"] = -3
    elif damage == "zero threads":
        header["kernels"][0]["threads_per_cta"] = 0
    elif damage == "strings for numbers":
        header["problem"]["seq_q"] = "40"
    path = _write(tmp_path / "m.hbmtrace", header, records, n)
    refused(["replay", path], capsys, "trace", words)


# --- measurements: hypothesis mutations -----------------------------------------------------

MEASUREMENT_FIELDS = [
    "preset",
    "device",
    "device.gpu",
    "device.date",
    "device.l2_bytes",
    "device.sm_count",
    "calibration",
    "calibration.hbm_bytes_per_s",
    "calibration.hbm_latency_s",
    "configs",
    "configs.0",
    "configs.0.algo",
    "configs.0.kind",
    "configs.0.problem",
    "configs.0.problem.seq_q",
    "configs.0.problem.head_dim",
    "configs.0.tiles",
    "configs.0.tiles.bq",
    "configs.0.measured_time_s",
    "configs.0.resources",
    "sdpa",
    "sdpa.0.time_s",
]


@FAST
@given(field=st.sampled_from(MEASUREMENT_FIELDS), value=st.one_of(BAD_VALUES, st.just(_DELETE)))
def test_mutated_measurements_name_the_field(field, value, tmp_path, capsys):
    doc = _measurements_doc()
    if field in ("device.gpu", "configs.0.kind") and (isinstance(value, str) or value is _DELETE):
        value = 3
    if field == "configs.0" and value is _DELETE:
        value = None
    optional = ("configs.0.resources", "sdpa", "sdpa.0.time_s", "configs.0.measured_time_s")
    optional += ("calibration.hbm_bytes_per_s", "calibration.hbm_latency_s")
    if field in optional and (value is _DELETE or value in ({}, [])):
        value = "x"  # absent or empty is allowed there: make it wrong
    if field in ("calibration", "configs.0") and isinstance(value, dict):
        value = {"hbm_bytes_per_s": "x"} if field == "calibration" else "x"
    if field == "configs" and value == []:
        value = {}
    if field in ("calibration.hbm_latency_s", "device.l2_bytes") and value == 0:
        value = -1
    if value is _DELETE and "." not in field:
        del doc[field]
    else:
        _set(doc, field, value)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "results"
    head = field.split(".")[0]
    refused(["validate", "--measurements", path, "--results-dir", out], capsys, head)
    assert not out.exists() or not list(out.iterdir())


RECORDED_RATES = {
    "l2_atomic_bytes_per_s": 2.0e12,
    "cta_seconds_per_sm": 8e-8,
    "fma_flops_per_s_by_warps_per_sm": {"1": 5e12, "8": 40e12, "32": 50e12},
    "wmma_flops_per_s_by_warps_per_sm": {"1": 50e12, "8": 400e12},
    "async_mma_overlap": {"vector": 0.9, "exp": 0.1, "alone_s": {"mma": 1e-3, "exp": 1e-3}},
    "latency_cycles": {"ffma": 4.0, "shared": 29.5, "mufu": 18.0},
}


@pytest.mark.parametrize(
    "key, value, field",
    [
        ("l2_atomic_bytes_per_s", -1.0, "calibration.l2_atomic_bytes_per_s"),
        ("cta_seconds_per_sm", "slow", "calibration.cta_seconds_per_sm"),
        ("fma_flops_per_s_by_warps_per_sm", {"0": 1e12}, "fma_flops_per_s_by_warps_per_sm"),
        ("fma_flops_per_s_by_warps_per_sm", {"x": 1e12}, "fma_flops_per_s_by_warps_per_sm"),
        ("wmma_flops_per_s_by_warps_per_sm", {"4": "fast"}, "by_warps_per_sm.4"),
        ("wmma_flops_per_s_by_warps_per_sm", [1e12], "wmma_flops_per_s_by_warps_per_sm"),
        ("async_mma_overlap", {"exp": "most"}, "async_mma_overlap.exp"),
        ("async_mma_overlap", {"vector": 5.0}, "async_mma_overlap.vector"),
        ("async_mma_overlap", {"alone_s": {"mma": -1}}, "async_mma_overlap.alone_s.mma"),
        ("async_mma_overlap", [0.5], "async_mma_overlap"),
        ("latency_cycles", {"ldg": 500.0}, "calibration.latency_cycles"),
        ("latency_cycles", {"shared": -3}, "calibration.latency_cycles.shared"),
    ],
)
def test_calibrations_recorded_for_later_are_read_and_checked(key, value, field, tmp_path, capsys):
    """A GPU run records rates the prediction does not use yet (L2's atomic adds, the math a
    few warps per SM reach): the reader takes them as written and refuses a wrong one by
    name, as for every other field."""
    doc = _measurements_doc()
    doc["calibration"].update(RECORDED_RATES)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    code, _, err = run_cli(
        ["validate", "--measurements", path, "--results-dir", tmp_path / "ok"], capsys
    )
    assert code == 0, err
    doc["calibration"][key] = value
    path.write_text(json.dumps(doc))
    out = tmp_path / "results"
    refused(["validate", "--measurements", path, "--results-dir", out], capsys, field)
    assert not out.exists()


def test_a_date_cannot_steer_where_results_go(tmp_path, capsys):
    doc = _measurements_doc()
    doc["device"]["date"] = "../../escaped"
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    refused(
        ["validate", "--measurements", path, "--results-dir", tmp_path / "r" / "s"],
        capsys,
        "device.date",
    )
    assert not (tmp_path / "escaped.json").exists()


# --- values on the command line, and work bounds --------------------------------------------

BAD_FLAGS = [
    (["simulate", "--seed", "-1", "--verify", *SMALL], "seed"),
    (["simulate", "--seed", str(2**64)], "seed"),
    (["simulate", "--seq", "0"], "seq_q"),
    (["simulate", "--seq", "-5"], "seq_q"),
    (["simulate", "--seq", str(1 << 25)], "seq_q"),
    (["simulate", "--seq", "1e-3"], "seq"),
    (["simulate", "--seq", "1_000"], "seq"),
    (["simulate", "--heads", "\uff11\uff16"], "heads"),
    (["simulate", "--seq", "9" * 5000], "seq"),
    (["simulate", "--heads", "0"], "heads"),
    (["simulate", "--batch", str(10**30)], "batch"),
    (["simulate", "--head-dim", "0"], "head_dim"),
    (["simulate", "--dropout", "1.5"], "dropout"),
    (["simulate", "--dropout", "nan"], "dropout"),
    (["simulate", "--bq", "0"], "bq"),
    (["simulate", "--bq", "-16"], "bq"),
    (["simulate", "--sram-kib", "0"], "sram-kib"),
    (["simulate", "--hbm-gbps", "-1"], "hbm-gbps"),
    (["simulate", "--hbm-gbps", "nan"], "hbm-gbps"),
    (["simulate", "--gpu", "nope"], "gpu"),
    (["simulate", "--dtype", "fp4"], "dtype"),
    (["sweep", "--seq", "1,2,x"], "seq"),
    (
        ["sweep", "--seq", ",".join(str(64 * i) for i in range(1, 200)), "--bq", "16,32,64"],
        "sweep",
    ),
    (["trace", "--seq", "65536", "-o", "{tmp}/t.hbmtrace"], "trace"),
    (["simulate", "--seq", "32768", "--verify", "--batch", "1", "--heads", "1"], "verify"),
    (
        ["simulate", "--seq", "2048", "--heads", "16", "--verify", "--bq", "1", "--bk", "1"],
        "verify",
    ),
    (["simulate", "--seq", "16777216", "--bq", "16", "--bk", "16", "--causal"], "counts"),
    (
        ["simulate", "--seq", "16777216", "--bq", "16", "--bk", "16", "--causal", "--no-engine"],
        "counts",
    ),
    (
        [
            "sweep",
            "--seq",
            "16777216",
            "--bq",
            "16",
            "--bk",
            "16",
            "--causal",
            "--no-engine",
            "-o",
            "{tmp}/s",
        ],
        None,
    ),
    (["simulate", "--seq", "65536", "--causal", "--exact"], "engine"),
]


@pytest.mark.parametrize("argv,field", BAD_FLAGS)
def test_bad_values_and_too_much_work_are_refused_in_one_line(argv, field, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if field is None:  # a sweep records the refusal as an infeasible row instead
        code, _, err = run_cli(argv, capsys)
        assert code == 0, err
        assert "counts:" in (tmp_path / "s").read_text()
        return
    refused(argv, capsys, field)


def test_counts_too_large_to_simulate_say_so_and_keep_the_counts(capsys):
    code, out, _ = run_cli(["simulate", "--seq", "131072", "--causal", "--json"], capsys)
    assert code == 0
    skipped = json.loads(out)["engine"]["skipped"]
    assert "simulation steps" in skipped and "bq, bk" in skipped


# --- a handful as real processes: peak memory and time measured from outside ---------------


def _limited(argv: list[str], fsize: int | None = None) -> tuple[int, str, float, int]:
    """`python -m hbmsim.cli ARGV` with 2 GB of address space (a runaway dies, not the
    machine), killed after 60 s: (exit code, stderr, seconds, its peak RSS in bytes)."""
    import signal
    import threading

    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hbmsim.cli", *map(str, argv)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=limits,
    )
    killer = threading.Timer(60, proc.kill)
    killer.start()
    try:
        err = proc.stderr.read().decode()
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage
    finally:
        killer.cancel()
        proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    CASES["count"] += 1
    return proc.returncode, err, time.monotonic() - t0, usage.ru_maxrss * 1024


@pytest.mark.parametrize(
    "argv,words",
    [
        (["replay", "/dev/zero"], "too large"),
        (["simulate", "--seq", "16777216", "--bq", "16", "--bk", "16", "--causal"], "counts:"),
        (["simulate", "--seq", "32768", "--verify", "--batch", "1", "--heads", "1"], "verify:"),
        (["validate", "--measurements", "/dev/zero"], "too large"),
    ],
)
def test_as_a_process_within_time_and_memory(argv, words):
    code, err, seconds, rss = _limited(argv)
    assert code == 2 and err.count("\n") == 1 and words in err, err
    assert "Traceback" not in err
    assert seconds < MAX_S, seconds
    assert rss < MAX_BYTES, rss


def test_a_bomb_trace_as_a_process(tmp_path, trace_file):
    header, _ = _parts(trace_file)
    path = _write(tmp_path / "bomb.hbmtrace", header, bytes(256 << 20), 10)
    code, err, seconds, rss = _limited(["replay", path])
    assert code == 2 and "n_records" in err and err.count("\n") == 1, err
    assert seconds < MAX_S and rss < MAX_BYTES


def test_a_write_that_fails_half_way_leaves_the_old_file(tmp_path):
    """The file-size limit makes the trace's write fail after 64 KiB (as a full disk would):
    exit 2, one line, the old file as it was and no temporary left beside it."""
    target = tmp_path / "old.hbmtrace"
    target.write_bytes(b"the previous trace")
    argv = ["trace", "--seq", "2048", "--heads", "4", "--bq", "16", "--bk", "16", "-o", target]
    code, err, _, _ = _limited(argv, fsize=64 << 10)
    assert code == 2 and err.count("\n") == 1 and "output:" in err, err
    assert target.read_bytes() == b"the previous trace"
    assert [p.name for p in tmp_path.iterdir()] == ["old.hbmtrace"]


# --- the app: URL values ---------------------------------------------------------------------

HOSTILE_URL = {
    "seq_q": "1e999",
    "seq_k": "-4",
    "heads": "nan",
    "batch": "9" * 5000,
    "head_dim": "\u0663\u0662",  # Arabic-Indic digits
    "dropout": "0.999",
    "bq": "1_000",
    "gpu": "../../etc/passwd.json",
    "dtype": "fp4",
    "causal": "maybe",
    "hbm_gbps": "0x10",
}


def test_hostile_url_values_are_named_and_the_page_still_works():
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app_pages" / "main.py"), default_timeout=120)
    for k, v in HOSTILE_URL.items():
        at.query_params[k] = v
    at.query_params["seq_q"] = "1e999"
    at.run()
    assert not at.exception
    warnings = [w.value for w in at.sidebar.warning]
    for name in HOSTILE_URL:
        assert any(w.startswith(f"URL parameter {name}=") for w in warnings), name
    assert all(len(w) < 300 for w in warnings)  # a 5,000-digit value is cut, not echoed
    assert at.get("plotly_chart")  # the defaults stand in: the page draws
    CASES["count"] += 1


def test_a_bad_combination_from_the_url_is_one_line_and_the_rest_works():
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app_pages" / "main.py"), default_timeout=120)
    for k, v in {"seq_q": "256", "seq_k": "256", "heads": "6", "kv_heads": "4"}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception
    refusals = [e.value for e in at.error if "must divide heads" in e.value]
    assert len(refusals) == 1 and refusals[0].startswith("kv heads: "), refusals
    assert at.title
    CASES["count"] += 1


@pytest.mark.parametrize(
    "change, named",
    [
        ({"framework_ops": "many"}, "framework_ops"),
        ({"framework_ops": -1}, "framework_ops"),
        ({"host_issued": "yes"}, "host_issued"),
        ({"framework_ops": 3, "kernel_ops": 4}, "kernels[0].host_ops_before"),
        ({"framework_ops": 3, "kernel_ops": -1}, "kernels[0].host_ops_before"),
        ({"framework_ops": 3, "kernel_ops": "2"}, "kernels[0].host_ops_before"),
    ],
)
def test_a_trace_headers_host_fields_are_checked(change, named, trace_file, tmp_path, capsys):
    """The call's host side (framework ops, whether a framework issues it, the ops each
    kernel's launch waits for) is checked like every other field: a kernel may not claim more
    of the call's framework ops than the call has."""
    header, records = _parts(trace_file)
    change = dict(change)
    if "kernel_ops" in change:
        header["kernels"][0]["host_ops_before"] = change.pop("kernel_ops")
    header.update(change)
    path = _write(tmp_path / "h.hbmtrace", header, records)
    refused(["replay", path], capsys, "trace", named)


def test_a_trace_header_without_host_fields_replays(trace_file, tmp_path, capsys):
    """Files written before the host fields existed lack them: they replay as before."""
    header, records = _parts(trace_file)
    for name in ("framework_ops", "host_issued"):
        header.pop(name, None)
    for k in header["kernels"]:
        k.pop("host_ops_before", None)
    path = _write(tmp_path / "old.hbmtrace", header, records)
    code, out, err = run_cli(["replay", path, "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["time_s"] > 0


# --- explore specs and results tables ---------------------------------------------------------

SPEC_AXES = {  # a valid spec's axes (TOML values as Python), each mutated below
    "gpu": "h100-sxm",
    "model": "gpt2-medium",
    "batch": [1, 2],
    "context": [64, 128],
    "pass": "prefill",
    "causal": True,
    "dtype": "fp16",
    "program": "fa2",
    "bq": [16],
    "bk": [16],
}
SPEC_HARDWARE = {"sram_bytes_per_sm": [65536], "hbm_bytes_per_s": [2e12]}


def _toml(value) -> str:
    """A Python value as TOML (enough for the values the mutations draw)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # TOML refuses escaped surrogate pairs
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _spec_text(axes: dict, hardware: dict, top: dict | None = None) -> str:
    lines = [f"{k} = {_toml(v)}" for k, v in (top or {}).items()]
    lines += ["[axes]"] + [f"{json.dumps(k)} = {_toml(v)}" for k, v in axes.items()]
    lines += ["[axes.hardware]"] + [f"{json.dumps(k)} = {_toml(v)}" for k, v in hardware.items()]
    return "\n".join(lines) + "\n"


SPEC_BAD = st.one_of(
    st.booleans(),
    st.text(max_size=6),
    st.just([]),
    st.integers(max_value=0),
    st.integers(min_value=10**17),  # past every integer and bytes/s range
    st.floats(allow_infinity=True).filter(lambda x: math.isnan(x) or abs(x) > 1e300),
    st.dictionaries(
        st.sampled_from(["from", "to", "step", "factor", "by"]),
        st.integers(-5, 0),
        min_size=1,
        max_size=3,
    ),
)


def test_a_valid_spec_runs(tmp_path, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text(_spec_text({**SPEC_AXES, "batch": 1, "context": 64}, SPEC_HARDWARE))
    code, _, err = run_cli(["explore", spec, "-o", tmp_path / "o.csv", "--dry-run"], capsys)
    assert code == 0, err


@FAST
@given(axis=st.sampled_from(sorted(SPEC_AXES) + sorted(SPEC_HARDWARE)), value=SPEC_BAD)
def test_mutated_explore_specs_name_the_axis_before_anything_runs(axis, value, tmp_path, capsys):
    """One axis of a valid spec made wrong (every value drawn is wrong for every axis: the
    strings are no preset, model, pass or program name, the numbers out of every range)."""
    if axis == "causal" and isinstance(value, bool):
        value = "yes"
    axes, hardware = dict(SPEC_AXES), dict(SPEC_HARDWARE)
    (hardware if axis in SPEC_HARDWARE else axes)[axis] = value
    where = f"axes.hardware.{axis}" if axis in SPEC_HARDWARE else f"axes.{axis}"
    spec = tmp_path / "mutant.toml"
    spec.write_text(_spec_text(axes, hardware))
    out = tmp_path / "o.parquet"
    out.unlink(missing_ok=True)  # tmp_path is shared by hypothesis' examples
    refused(["explore", spec, "-o", out], capsys, "explore spec", where)
    assert not out.exists()


@pytest.mark.parametrize("name", RAW)
def test_raw_hostile_files_as_explore_specs_get_one_line(name, raw_files, tmp_path, capsys):
    path, _ = raw_files[name]
    refused(["explore", path, "-o", tmp_path / "o.parquet"], capsys, "explore spec")
    assert not (tmp_path / "o.parquet").exists()


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "s.toml"
    path.write_text(_spec_text({**SPEC_AXES, "batch": 1, "context": [64, 128]}, SPEC_HARDWARE))
    return path


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
@pytest.mark.parametrize("name", [n for n in RAW if n not in ("folder", "/dev/null", "/dev/zero",
                                                               "fifo")])  # fmt: skip
def test_raw_hostile_files_as_results_tables_get_one_line(
    name, suffix, raw_files, spec_file, tmp_path, capsys
):
    """A results table to resume from is read (and refused) before anything runs, and left as
    it was."""
    path, _ = raw_files[name]
    table = tmp_path / f"t{suffix}"
    if path.exists():
        table.write_bytes(path.read_bytes()[: 20 << 20])
    else:
        table.symlink_to(path)  # missing or dangling: a link to nowhere
    before = table.read_bytes() if table.exists() else None
    code, _, err = run_cli(["explore", spec_file, "-o", table], capsys)
    if before is None:  # nothing to resume from: the run writes a fresh table
        assert code == 0, err
        return
    assert code == 2 and err.count("\n") == 1 and "results table" in err, err
    assert table.read_bytes() == before


@FAST
@given(
    column=st.sampled_from(
        [
            "heads",
            "context",
            "causal",
            "status",
            "time_s",
            "hbm_bytes",
            "sram_bytes_per_sm",
        ]
    ),  # fmt: skip
    value=st.sampled_from(["x", "1.5", "nan", "inf", "-", "True!", "1e999", ""]),
    row=st.integers(0, 1),
)
def test_mutated_results_tables_name_the_column_and_row(
    column, value, row, spec_file, tmp_path_factory, capsys
):
    import csv
    import io

    folder = tmp_path_factory.mktemp("table")
    table = folder / "t.csv"
    code, _, err = run_cli(["explore", spec_file, "-o", table, "--workers", "1"], capsys) if not (
        TABLE_CACHE.get("text")) else (0, "", "")  # fmt: skip
    if "text" not in TABLE_CACHE:
        assert code == 0, err
        TABLE_CACHE["text"] = table.read_text()
    rows = list(csv.DictReader(io.StringIO(TABLE_CACHE["text"])))
    if value == rows[row][column] or (column == "time_s" and value in ("", "1.5")):
        value = "x"  # an empty time (not simulated) and any finite one are valid
    rows[row][column] = value
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    table.write_text(buf.getvalue())
    refused(
        ["explore", spec_file, "-o", table], capsys, "results table", f"{column} (row {row + 1})"
    )


TABLE_CACHE: dict[str, str] = {}


def test_at_least_500_cases_ran(request):
    """The generated cases above number at least 500 (checked when the whole module ran:
    every other test of it before this one, in file order)."""
    mine = [
        i for i in request.session.items if i.module is request.module and i is not request.node
    ]
    if {i.nodeid for i in mine} - RAN:
        pytest.skip("only part of this module was selected")
    print(f"hostile cases run: {CASES['count']}")
    assert CASES["count"] >= 500, CASES["count"]


RAN: set[str] = set()


@pytest.fixture(autouse=True)
def _note_ran(request):
    yield
    RAN.add(request.node.nodeid)
