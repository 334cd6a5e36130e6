"""The cases of a hostile audit (issue 51), each reproduced: scheduler addresses and peers,
pipes and terminals, profiles, published timings, replayed headers, library rules, sweeps,
outputs that are inputs, and one parser for numbers. Each ends in one line naming the field
and what is allowed (or, for a closed pipe, quietly), never a traceback or a hang."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hbmsim import Problem, get_hardware, make_plan, save_trace, trace_plan
from hbmsim.cli.commands import main
from hbmsim.explore.spec import parse_spec_text
from hbmsim.files.numbers import SPELLING, parse_number
from hbmsim.validation.published import DEFAULT_PATH

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--seq", "64", "--heads", "2", "--head-dim", "16"]
SPEC = "[axes]\nmodel = 'gpt2-medium'\ncontext = [64]\n"


def cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, *args, words=()) -> str:
    code, out, err = cli(capsys, *args)
    assert code == 2 and err.count("\n") == 1 and err.startswith("hbmsim: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, (w, err)
    return err


def process(*args, env=None, stdout=subprocess.PIPE, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "hbmsim.cli", *map(str, args)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        **kw,
    )


# -- 4: scheduler addresses and the peers behind them ---------------------------------------


@pytest.mark.parametrize(
    "address, words",
    [
        ("not a url", "is not an address: give tcp://HOST:PORT"),
        ("", "is not an address"),
        ("tcp://127.0.0.1", "names no port"),
        ("http://127.0.0.1:80", "supported: tcp://HOST:PORT"),
        ("ucx://127.0.0.1:8786", "ucx:// needs UCX"),
        ("tls://127.0.0.1:8786", "tls:// needs certificates"),
        ("tcp://127.0.0.1:0", "port must be from 1 to 65535"),
        ("tcp://has space:8786", "is not a host name or IP address"),
        ("tcp://127.0.0.1:８７８６", "port must be from 1 to 65535"),
    ],
)
def test_scheduler_addresses_are_refused_before_any_connection(tmp_path, capsys, address, words):
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    t0 = time.monotonic()
    err = refused(
        capsys, "explore", spec, "-o", tmp_path / "o.csv", "--scheduler", address, words=[words]
    )
    assert "scheduler: " in err and time.monotonic() - t0 < 2
    refused(  # --dry-run checks it too
        capsys, "explore", spec, "-o", tmp_path / "o.csv", "--scheduler", address, "--dry-run"
    )


@contextlib.contextmanager
def peer(kind: str):
    """A TCP server on a free port that accepts and then: says nothing, sends random bytes,
    answers as an HTTP server, or announces a 1 TiB message."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            with contextlib.suppress(OSError):
                if kind == "garbage":
                    conn.sendall(bytes(range(256)) * 4)
                elif kind == "http":
                    conn.recv(100)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                elif kind == "huge":
                    conn.sendall(struct.pack("<Q", 1 << 40) + b"x" * 64)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        for conn in held:
            conn.close()


@pytest.mark.parametrize(
    "kind, words",
    [
        ("silent", "did not answer as a Dask scheduler within 1 s"),
        ("garbage", "does not speak Dask's protocol"),
        ("http", "does not speak Dask's protocol"),
        ("huge", "does not speak Dask's protocol"),
    ],
)
def test_a_peer_that_speaks_garbage_or_nothing_is_refused_in_one_line(tmp_path, kind, words):
    """As a process, so that anything Dask's finalisers print at exit is seen too."""
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    with peer(kind) as address:
        t0 = time.monotonic()
        proc = process(
            "explore", spec, "-o", tmp_path / "o.csv", "--scheduler", address, "--timeout", "1"
        )
        _, err = proc.communicate(timeout=30)
    err = err.decode()
    assert proc.returncode == 2 and err.count("\n") == 1 and words in err, err
    assert time.monotonic() - t0 < 10 and not (tmp_path / "o.csv").exists()


def test_a_closed_port_fails_at_once(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    t0 = time.monotonic()
    refused(
        capsys,
        "explore",
        spec,
        "-o",
        tmp_path / "o.csv",
        "--scheduler",
        f"tcp://127.0.0.1:{port}",
        words=["cannot reach", "Connection refused"],
    )
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("value", ["0", "-1", "nan", "1e9"])
def test_the_connection_deadline_is_checked(tmp_path, capsys, value):
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    refused(capsys, "explore", spec, "-o", tmp_path / "o.csv", "--timeout", value, "--dry-run")


# -- 6, 17: specs -------------------------------------------------------------------------------


def test_a_range_step_too_small_to_count_is_refused(capsys, tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(
        SPEC + "[axes.hardware]\nhbm_bytes_per_s = {from = 1e12, to = 2e12, step = 1e-300}\n"
    )
    refused(capsys, "explore", spec, "-o", tmp_path / "o.csv", words=["expands to more than"])


def test_an_sram_too_small_for_the_reserve_is_named_as_the_field_given(capsys, tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC + "[axes.hardware]\nsram_bytes_per_sm = [1]\n")
    err = refused(capsys, "explore", spec, "-o", tmp_path / "o.csv", "--dry-run")
    assert "axes.hardware.sram_bytes_per_sm[0]: must be more than the 1,024 bytes" in err
    assert "sram_bytes_per_block" not in err and "232,448" not in err


@pytest.mark.parametrize("workers", ["0", "-5", "2000"])
def test_a_dry_run_checks_the_workers_as_a_run_does(capsys, tmp_path, workers):
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    refused(
        capsys, "explore", spec, "-o", tmp_path / "o.csv", "--dry-run", "--workers", workers,
        words=["workers: must be from 1 to 1,024"],
    )  # fmt: skip


def test_a_huge_value_is_named_not_echoed(capsys):
    long = "x" * 100_000
    for args in (
        ["--model", long],
        ["--gpu", long],
        ["--gpu", long + ".json"],
        ["--impl", long],
        ["--algo", long],
    ):
        err = refused(capsys, "simulate", *SMALL, *args)
        assert len(err) < 1200, (args[0], len(err))


# -- 10: stdout --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", *SMALL, "--json"],
        ["simulate", *SMALL],
        ["sweep", "--seq", ",".join(str(64 * i) for i in range(1, 40)), "--no-engine"],
    ],
)
def test_a_closed_stdout_ends_quietly(args):
    """`hbmsim ... | true`: the reader has gone before the output is written."""
    read, write = os.pipe()
    os.close(read)  # no reader: every write fails with EPIPE
    proc = process(*args, stdout=write)
    os.close(write)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode in (0, 141) and err == b"", err


def test_a_full_disk_on_stdout_is_one_line():
    with open("/dev/full", "w") as full:
        proc = process("simulate", *SMALL, stdout=full)
        _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert proc.returncode == 2 and err.count("\n") == 1, err
    assert "stdout: cannot write the output (No space left on device)" in err


def test_output_is_readable_under_an_ascii_locale():
    proc = process("simulate", *SMALL, env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C"})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and err == b"", err
    text = out.decode("ascii")
    assert " us " in text or " us\n" in text
    assert "\\x" not in text  # the report's characters have ASCII forms


# -- 11: profiles ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"base": "h100-sxm", "name": "\\ud800"}', "lone surrogate"),
        ('{"base": "h100-sxm", "\\udfff": 1}', "lone surrogate"),
        ('{"base": "h100-sxm", "l2_bytes": 1, "l2_bytes": 2}', "'l2_bytes' appears twice"),
        ('{"base": "h100-sxm", "max_threads_per_sm": 1}', "max_threads_per_sm: 1 threads"),
        ('{"base": "h100-sxm", "registers_per_sm": 1}', "registers_per_sm: 1 registers"),
        ('{"base": "h100-sxm", "registers_per_sm": 1023}', "at least 1,024"),
    ],
)
def test_profiles_are_checked_field_by_field_and_against_the_ctas(tmp_path, capsys, text, words):
    gpu = tmp_path / "g.json"
    gpu.write_text(text)
    for command in (["simulate", *SMALL], ["simulate", *SMALL, "--impl", "flash-attn-2"]):
        refused(capsys, *command, "--gpu", gpu, words=[words])


def test_a_profile_that_holds_the_ctas_still_runs(tmp_path, capsys):
    gpu = tmp_path / "g.json"
    gpu.write_text('{"base": "h100-sxm", "registers_per_sm": 1024, "max_threads_per_sm": 128}')
    code, out, err = cli(capsys, "simulate", *SMALL, "--gpu", gpu, "--json")
    assert code == 0, err
    assert json.loads(out)["engine"]["kernels"][0]["ctas_per_sm"] == 1


# -- 12: published timings ---------------------------------------------------------------------


def test_a_published_time_that_would_make_an_error_infinite_is_refused(tmp_path, capsys):
    data = json.loads(DEFAULT_PATH.read_text())
    data["points"] = data["points"][:2]
    data["points"][1]["measured_time_s"] = 1e-320
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    for extra in ([], ["--json"], ["--report", tmp_path / "r.json"]):
        refused(
            capsys, "validate", "--published", path, *extra,
            words=["points[1].measured_time_s: must be >= 1e-09"],
        )  # fmt: skip
    assert not (tmp_path / "r.json").exists()


# -- 13: replay --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory) -> Path:
    plan = make_plan(
        "fa2", Problem(batch=1, heads=2, seq_q=128, seq_k=128), get_hardware("h100-sxm")
    )
    path = tmp_path_factory.mktemp("trace") / "t.hbmtrace"
    save_trace(trace_plan(plan), path)
    return path


def _edited(src: Path, dst: Path, edit) -> Path:
    """The trace with its header edited and every checksum made valid again: only the
    header's word against its records is left to find the edit."""
    data = src.read_bytes()
    magic, version, n = struct.unpack_from("<8sII", data)
    header = json.loads(data[16 : 16 + n])
    edit(header)
    head = json.dumps(header, separators=(",", ":")).encode()
    body = struct.pack("<8sII", magic, version, len(head)) + head + data[16 + n : -4]
    dst.write_bytes(body + struct.pack("<I", zlib.crc32(body)))
    return dst


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("batch", 2, "tensors[0].shape"),
        ("seq_q", 64, "tensors[0].shape"),
        ("heads", 4, "tensors[0].shape"),
        ("dtype", "fp8", "tensors[0].itemsize"),
        ("dtype", "fp32", "tensors[0].itemsize"),
        ("causal", True, "kernels[0]"),
        ("algo", "fa1", "tensors"),
        ("algo", "standard", "tensors"),
        ("sram_bytes", 0, "kernels[0].sram_bytes"),
        ("threads_per_cta", 1024, "kernels[0].threads_per_cta"),
        ("stages", 1, "kernels[0].stages"),
    ],
)
def test_replay_refuses_a_header_that_its_records_contradict(
    trace_file, tmp_path, capsys, field, value, named
):
    def edit(header):
        if field == "algo":
            header["algo"] = value
        elif field in header["kernels"][0]:
            header["kernels"][0][field] = value
        else:
            header["problem"][field] = value

    path = _edited(trace_file, tmp_path / "e.hbmtrace", edit)
    refused(capsys, "replay", path, words=[f"trace {path}: {named}", "does not match"])


def test_an_unedited_header_replays_and_says_nothing_extra(trace_file, tmp_path, capsys):
    path = _edited(trace_file, tmp_path / "same.hbmtrace", lambda header: None)
    code, out, err = cli(capsys, "replay", path, "--json")
    assert code == 0 and "note" not in json.loads(out), err


# -- 14: library rules -------------------------------------------------------------------------


def test_flash_attn_1_refuses_fp8_with_its_own_check(capsys):
    err = refused(capsys, "simulate", *SMALL, "--impl", "flash-attn-1", "--dtype", "fp8")
    fp32 = refused(capsys, "simulate", *SMALL, "--impl", "flash-attn-1", "--dtype", "fp32")
    assert err == fp32 and "fp16, and bf16 on sm80+" in err


def test_torch_eager_refuses_fp8_as_aten_does(capsys):
    refused(
        capsys, "simulate", *SMALL, "--impl", "torch-eager", "--dtype", "fp8",
        words=['"baddbmm_cuda" not implemented for \'Float8_e4m3fn\''],
    )  # fmt: skip


@pytest.mark.parametrize("gpu", ["rtx4090", "a10"])
@pytest.mark.parametrize("pass_", ["fwd", "fwd+bwd"])
def test_torch_eager_fp32_takes_gemm_tiles_that_fit_as_cublas_does(capsys, gpu, pass_):
    """cuBLAS picks, per GPU, a kernel whose shared memory fits: where the common 128 x 128
    x 32 tile does not (fp32, a 100 KiB block), the mirror takes the largest smaller tile
    that does, as the textbook standard algorithm does, and says so; tiles a user gives that
    do not fit are still refused."""
    args = ["simulate", "--seq", "1024", "--heads", "4", "--dtype", "fp32", "--gpu", gpu]
    code, out, err = cli(capsys, *args, "--impl", "torch-eager", "--pass", pass_, "--json")
    assert code == 0, err
    result = json.loads(out)
    cap = get_hardware(gpu).sram_bytes_per_block
    assert all(k["sram_bytes"] <= cap for k in result["by_kernel"])
    assert any("cuBLAS picks a kernel that does" in n for n in result["notes"])
    _, standard, _ = cli(capsys, *args, "--algo", "standard", "--pass", pass_, "--json")
    assert json.loads(standard)["tiles"] == result["tiles"]
    refused(capsys, *args, "--impl", "torch-eager", "--bq", "128", "--bk", "128")


# -- 15: sweep ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--bq", "0"),
        ("--bq", "-1"),
        ("--bq", str(2**63)),
        ("--bk", "100000"),
        ("--splits", "0"),
    ],
)
def test_sweep_refuses_what_simulate_refuses_with_the_same_words(capsys, flag, value):
    extra = ["--algo", "split-kv"] if flag == "--splits" else []
    by_simulate = refused(capsys, "simulate", *SMALL, *extra, flag, value)
    by_sweep = refused(capsys, "sweep", *SMALL, *extra, flag, value, "--no-engine")
    assert by_sweep == by_simulate


# -- 16: an output that is an input ------------------------------------------------------------


def test_an_output_that_is_one_of_the_inputs_is_refused(trace_file, tmp_path, capsys):
    gpu = tmp_path / "g.json"
    gpu.write_text('{"base": "h100-sxm"}')
    before = gpu.read_bytes()
    alias = tmp_path / "sub" / ".." / "g.json"
    (tmp_path / "sub").mkdir()
    link = tmp_path / "hard.json"
    os.link(gpu, link)
    published = tmp_path / "p.json"
    published.write_text(DEFAULT_PATH.read_text())
    trace = tmp_path / "t.hbmtrace"
    trace.write_bytes(trace_file.read_bytes())
    cases = [
        (["sweep", *SMALL, "--gpu", gpu, "-o", gpu], "output"),
        (["sweep", *SMALL, "--gpu", gpu, "-o", alias], "output"),
        (["simulate", *SMALL, "--gpu", gpu, "--timeline", link], "timeline"),
        (["trace", *SMALL, "--gpu", gpu, "-o", gpu], "output"),
        (["replay", trace, "--timeline", trace], "timeline"),
        (["replay", trace, "--gpu", gpu, "--timeline", gpu], "timeline"),
        (["validate", "--published", published, "--report", published], "report"),
    ]
    for args, field in cases:
        refused(capsys, *args, words=[f"{field}: ", "is the ", "input of this command"])
    assert gpu.read_bytes() == before and trace.read_bytes() == trace_file.read_bytes()
    assert published.read_text() == DEFAULT_PATH.read_text()


# -- 17: one parser for numbers ----------------------------------------------------------------

ASCII_NUMBERS = st.one_of(
    st.integers(1, 4096).map(str),
    st.builds(lambda m, e: f"{m}e{e}", st.integers(1, 9), st.integers(0, 3)),
)
NOT_NUMBERS = st.one_of(
    st.builds(lambda a, b: f"{a}_{b:03d}", st.integers(1, 9), st.integers(0, 999)),  # 1_000
    st.integers(1, 4096).map(lambda n: "".join(chr(0xFF10 + int(c)) for c in str(n))),  # ５
    st.integers(1, 4096).map(lambda n: "".join(chr(0x0660 + int(c)) for c in str(n))),  # ٣٢
    st.sampled_from(["nan", "inf", "0x10", " 64", "64 ", "1,000", "+", "1e", "١"]),
)


def _app_parse(name: str, text: str):
    pytest.importorskip("streamlit")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from app_pages.fields import parse  # the app's own URL parser

    return parse(name, text)


def _spec_context(text: str):
    spec = parse_spec_text(f"[axes]\nmodel = 'gpt2-medium'\ncontext = {text}\n", "s.toml")
    return spec.axes["context"][0]


@given(text=ASCII_NUMBERS)
def test_every_entry_point_reads_a_number_the_same_way(text):
    """A plain ASCII number (an exponent too) is the same value from a flag, a spec and the
    app's URL."""
    value = parse_number(text, integer=True)
    assert main(["simulate", "--seq-k", text, "--seq-q", "1", "--no-engine", "--json"]) == 0
    assert _spec_context(text) == value
    assert _app_parse("seq_k", text) == value


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # capsys read per draw
@given(text=NOT_NUMBERS)
def test_every_entry_point_refuses_the_same_spellings_with_the_same_words(text, capsys):
    with pytest.raises(ValueError) as by_parser:
        parse_number(text, integer=True)
    message = str(by_parser.value)
    assert message.startswith(SPELLING) or "too long" in message or "whole" in message
    code, _, err = cli(capsys, "simulate", "--seq", text, "--no-engine")
    assert code == 2 and message in err, err
    with pytest.raises(ValueError) as by_app:
        _app_parse("seq_k", text)
    assert message in str(by_app.value)
    if text == text.strip() and "," not in text:  # a TOML value, not TOML syntax
        with pytest.raises(Exception) as by_spec:
            _spec_context(text)
        assert SPELLING in str(by_spec.value) or "not valid TOML" in str(by_spec.value)
