"""`hbmsim explore` under kills, concurrency and signals, as a real process with a real Dask
LocalCluster: a run killed (SIGKILL) at any instant is resumed by the same command with every
point exactly once; two runs on one output: one refuses naming the other, whose table is
whole; Ctrl-C or SIGTERM at any moment, cluster start-up included, ends in one line with the
signal's exit status and the table whole. Also the journal's one schema and its torn tail, the
lock, a FIFO where the journal goes, and grids at the documented maximum (streamed)."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hbmsim.explore import explore, parse_spec, read_spec, read_table, run_point
from hbmsim.explore.journal import HEADER, Journal
from hbmsim.explore.runner import pending
from hbmsim.explore.spec import point_id
from hbmsim.explore.table import columns_for, write_table
from hbmsim.files.lock import lock_path

ROOT = Path(__file__).resolve().parent.parent
# ten fast points (a few hundredths of a second each): a run is mostly its cluster's start
FAST = """
[axes]
model = "gpt2-medium"
batch = 1
context = [64, 96, 128, 160, 192]
program = ["fa2", "standard"]
"""
OTHER = FAST.replace("[64, 96, 128, 160, 192]", "[224, 256]")  # four points of its own


def cli_process(*args, **kw) -> subprocess.Popen:
    """`python -m hbmsim.cli ARGS` as its own process group (Ctrl-C at a terminal reaches
    the whole group), stdout and stderr captured."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "hbmsim.cli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
        start_new_session=True,
        **kw,
    )


def finish(proc: subprocess.Popen, timeout: float = 180) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def spec_ids(path) -> list[str]:
    return [point_id(p) for p in read_spec(path).points()]


def table_ids(path) -> list[str]:
    return [r["point_id"] for r in read_table(path)[0]]


def quiet(err: str) -> bool:
    """Nothing but hbmsim's own lines: no traceback, warning or Dask log from any process."""
    return not any(w in err for w in ("Traceback", "Warning", "Exception", "distributed."))


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    """The fast spec, its reference table (one uninterrupted run) and that run's wall time."""
    folder = tmp_path_factory.mktemp("fast")
    spec = folder / "fast.toml"
    spec.write_text(FAST)
    out = folder / "ref.parquet"
    t0 = time.monotonic()
    code, _, err = finish(cli_process("explore", spec, "-o", out, "--workers", "1"))
    assert code == 0, err
    rows = {r["point_id"]: r for r in read_table(out)[0]}
    assert sorted(rows) == sorted(spec_ids(spec))
    return spec, rows, time.monotonic() - t0


def test_a_run_killed_at_20_random_instants_resumes_with_every_point_exactly_once(fast, tmp_path):
    """SIGKILL of the whole run (the command, its cluster's workers and fork server) at 20
    instants drawn over a whole run's length, from interpreter start to the table's write;
    after each, the same command finishes and the table holds every point exactly once, each
    row as an uninterrupted run gives it."""
    spec, reference, full = fast
    draw = random.Random(51)
    out = tmp_path / "t.parquet"
    for n in range(20):
        for leftover in tmp_path.glob("*t.parquet*"):
            leftover.unlink()
        at = draw.uniform(0.0, full)
        proc = cli_process("explore", spec, "-o", out, "--workers", "1")
        time.sleep(at)
        os.killpg(proc.pid, signal.SIGKILL)
        finish(proc)
        if out.exists():  # whatever was written is a whole table of unique points
            ids = table_ids(out)
            assert len(ids) == len(set(ids)) and set(ids) <= set(reference), (n, at)
        code, _, err = finish(cli_process("explore", spec, "-o", out, "--workers", "1"))
        assert code == 0 and quiet(err), (n, at, err)
        rows = read_table(out)[0]
        assert sorted(r["point_id"] for r in rows) == sorted(reference), (n, at)
        assert all(r == reference[r["point_id"]] for r in rows), (n, at)
        assert not Journal(out).path.exists() and not lock_path(out.resolve()).exists()
        assert not [p for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".probe"))]


def test_two_runs_on_one_output_one_refuses_naming_the_other_whose_table_is_whole(fast, tmp_path):
    spec, reference, _ = fast
    other = tmp_path / "other.toml"
    other.write_text(OTHER)
    out = tmp_path / "shared.parquet"
    first = cli_process("explore", spec, "-o", out, "--workers", "1")
    lock = lock_path(out.resolve())
    deadline = time.monotonic() + 60
    while not (lock.exists() and lock.read_text()):  # the first run holds the output
        assert first.poll() is None and time.monotonic() < deadline, finish(first)
        time.sleep(0.01)
    code, _, err = finish(cli_process("explore", other, "-o", out, "--workers", "1"))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("hbmsim: error: output: ") and "being written by another run" in err
    assert f"process {first.pid} " in err
    code, _, err = finish(first)
    assert code == 0, err
    rows = read_table(out)[0]
    assert sorted(r["point_id"] for r in rows) == sorted(reference)  # b's rows: none
    assert all(r == reference[r["point_id"]] for r in rows)


def test_two_runs_started_together_one_refuses_and_the_table_is_the_others(fast, tmp_path):
    spec, reference, _ = fast
    other = tmp_path / "other.toml"
    other.write_text(OTHER)
    out = tmp_path / "shared.csv"
    a = cli_process("explore", spec, "-o", out, "--workers", "1")
    b = cli_process("explore", other, "-o", out, "--workers", "1")
    (ca, _, ea), (cb, _, eb) = finish(a), finish(b)
    assert sorted((ca, cb)) == [0, 2], (ea, eb)
    winner, loser = (spec, eb) if ca == 0 else (other, ea)
    assert loser.count("\n") == 1 and "being written by another run" in loser
    assert sorted(table_ids(out)) == sorted(spec_ids(winner))


def test_ctrl_c_and_sigterm_at_any_moment_end_in_one_line_with_the_table_whole(fast, tmp_path):
    """Ctrl-C (SIGINT to the process group, workers included) or SIGTERM (to the command) at
    instants drawn from the interpreter's first moments to the run's end, cluster start-up
    included: exit 130 or 143 within seconds, one line saying so, nothing else from any
    process; the table (if any) whole; the same command then finishes the points."""
    spec, reference, full = fast
    draw = random.Random(7)
    out = tmp_path / "t.parquet"
    for n in range(8):
        for leftover in tmp_path.glob("*t.parquet*"):
            leftover.unlink()
        sig = (signal.SIGINT, signal.SIGTERM)[n % 2]
        at = draw.uniform(0.3, full)
        proc = cli_process("explore", spec, "-o", out, "--workers", "1")
        time.sleep(at)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        t0 = time.monotonic()
        code, _, err = finish(proc)
        lines = [x for x in err.splitlines() if x.strip() and " points to run on " not in x]
        if code == 0:  # it had ended before the signal came
            assert "interrupted" not in err
        else:
            assert code == {signal.SIGINT: 130, signal.SIGTERM: 143}[sig], (n, at, err)
            assert time.monotonic() - t0 < 10 and len(lines) == 1 and quiet(err), (n, at, err)
            assert "interrupted" in lines[0]
        if out.exists():
            assert set(table_ids(out)) <= set(reference)
        code, _, err = finish(cli_process("explore", spec, "-o", out, "--workers", "1"))
        assert code == 0 and sorted(table_ids(out)) == sorted(reference), err


# -- the journal -------------------------------------------------------------------------------


def test_rows_as_a_task_returns_them_go_to_the_journal_and_are_read_back(tmp_path):
    """A task's row holds more than the table's columns (run_point also reports hbm_read_bytes
    and hbm_write_bytes): the journal writes the table's columns, and the next run reads every
    record back (it refused them all, on every rerun, before)."""
    spec = parse_spec({"axes": {"model": "gpt2-medium", "context": [64, 96], "program": "fa2"}})
    out = tmp_path / "t.parquet"
    journal = Journal(out, columns_for(spec.hardware))
    rows = [run_point(p) for p in spec.points()]
    assert "hbm_read_bytes" in rows[0]
    for r in rows:
        journal.append(r)
    journal.close()
    kept, note = Journal(out).read()
    assert note is None and [r["point_id"] for r in kept] == [r["point_id"] for r in rows]
    assert pending(spec, out) == (2, 0, None)
    run = explore(spec, out, workers=1)
    assert (run.kept, run.ran) == (2, 0)
    assert sorted(table_ids(out)) == sorted(r["point_id"] for r in rows)


def _journal_of(tmp_path, n=3):
    spec = parse_spec({"axes": {"model": "gpt2-medium", "context": [64, 96, 128]}})
    out = tmp_path / "t.parquet"
    journal = Journal(out, columns_for(spec.hardware))
    rows = [journal.append(run_point(p)) for p in list(spec.points())[:n]]
    journal.close()
    return out, journal.path, rows


@settings(max_examples=25)
@given(data=st.data())
def test_a_damaged_record_anywhere_is_dropped_and_said_the_others_kept(tmp_path_factory, data):
    """A byte changed inside one record (the disk, or an editor) fails its checksum: that
    record alone is dropped, and one line says so; the others are read as written."""
    out, path, rows = _journal_of(tmp_path_factory.mktemp("j"))
    raw = bytearray(path.read_bytes())
    lines = raw.split(b"\n")
    victim = data.draw(st.integers(1, len(rows)))  # line 0 is the header
    start = sum(len(x) + 1 for x in lines[:victim])
    at = data.draw(st.integers(start + 9, start + len(lines[victim]) - 1))  # past "crc "
    raw[at] = ord("#") if raw[at] != ord("#") else ord("%")
    path.write_bytes(bytes(raw))
    kept, note = Journal(out).read()
    assert [r["point_id"] for r in kept] == [
        r["point_id"] for i, r in enumerate(rows, start=1) if i != victim
    ]
    assert note is not None and "1 record whose checksum failed" in note and "\n" not in note


def test_a_record_with_a_valid_checksum_the_table_refuses_is_named(tmp_path, capsys):
    out, path, rows = _journal_of(tmp_path, 1)
    forged = json.dumps({**rows[0], "time_s": "fast"}).encode()
    with open(path, "ab") as f:
        f.write(b"%08x %s\n" % (zlib.crc32(forged), forged))
    spec = tmp_path / "s.toml"
    spec.write_text("[axes]\nmodel = 'gpt2-medium'\ncontext = [64]\n")
    from hbmsim.cli.commands import main

    assert main(["explore", str(spec), "-o", str(out), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "explore journal" in err and "line 3" in err
    assert "remove the journal" in err


def test_a_journal_of_an_older_format_is_set_aside_with_one_line(tmp_path):
    """The journals of earlier releases (plain JSON lines, with columns the table refuses) no
    longer block a rerun: their points run again, and one line says so."""
    out, path, rows = _journal_of(tmp_path, 2)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept, note = Journal(out).read()
    assert kept == [] and "older format" in note and "\n" not in note
    assert path.read_bytes().startswith(b"{") and not HEADER.startswith(b"{")


def test_a_fifo_where_the_journal_goes_is_refused_at_once(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text("[axes]\nmodel = 'gpt2-medium'\ncontext = [64]\n")
    out = tmp_path / "o.parquet"
    os.mkfifo(tmp_path / ".o.parquet.journal")
    for extra in ((), ("--dry-run",)):
        code, _, err = finish(cli_process("explore", spec, "-o", out, *extra), timeout=30)
        assert code == 2 and err.count("\n") == 1 and "not a plain file" in err, err
        assert not out.exists()


def test_a_stale_lock_of_a_killed_run_does_not_block_the_next(tmp_path):
    """The lock is the kernel's (flock), released with its process: the lock file a killed
    run left behind, naming it, is taken over."""
    spec = tmp_path / "s.toml"
    spec.write_text("[axes]\nmodel = 'gpt2-medium'\ncontext = [64]\n")
    out = tmp_path / "o.csv"
    lock_path(out.resolve()).write_text('{"pid": 1, "host": "x", "started": "then"}')
    assert explore(read_spec(spec), out, workers=1).ran == 1
    assert not lock_path(out.resolve()).exists()


# -- grids at the documented maximum -----------------------------------------------------------

MILLION = """
[axes]
model = ["llama-3-8b", "mistral-7b", "gpt2-medium", "llama-2-7b"]
batch = [1, 2, 4, 8]
context = {from = 1024, to = 16384, factor = 2}
program = ["fa2", "flash-attn-2"]
bq = [16, 32, 64, 128, 256]
bk = [16, 32, 64, 128, 256]
[axes.hardware]
sram_bytes_per_sm = [65536, 131072, 233472, 100000, 50000]
hbm_bytes_per_s = {from = 1.0e12, to = 5.0e12, step = 1.0e12}
l2_bytes = [1000000, 2000000, 3000000, 4000000, 5000000, 6000000, 7000000, 8000000, 9000000, 10000000]
"""  # noqa: E501 - a spec's line, as a user writes it


def test_point_ids_streamed_equal_the_points_own(tmp_path):
    spec = parse_spec(
        {
            "mode": "sample",
            "samples": 200,
            "seed": 5,
            "axes": {
                "heads": [8, 16],
                "kv_heads": [1, 8],
                "head_dim": [64, 128],
                "context": {"from": 128, "to": 1 << 20, "factor": 2},
                "bq": [32, 64],
                "dtype": ["fp16", "bf16"],
                "hardware": {"hbm_bytes_per_s": [1e12, 2.5e12]},
            },
        }
    )
    assert [pid for _, pid in spec.point_ids()] == [point_id(p) for p in spec.points()]
    grid = read_spec(_write(tmp_path, MILLION))
    assert [pid for _, pid in grid.point_ids(500)] == [point_id(p) for p in grid.points(500)]


def _write(folder, text, name="s.toml"):
    path = folder / name
    path.write_text(text)
    return path


def test_a_dry_run_of_a_million_points_is_quick_and_small_with_or_without_a_table(tmp_path):
    spec = _write(tmp_path, MILLION)
    out = tmp_path / "big.parquet"
    for state in ("empty", "partial"):
        if state == "partial":
            grid = read_spec(spec)
            rows = [run_point(p) for p in grid.points(3)]
            write_table(out, rows, columns_for(grid.hardware))
        code, text, err, seconds, rss = measured_wait("explore", spec, "-o", out, "--dry-run")
        assert code == 0, err
        lacks = 1_000_000 - (3 if state == "partial" else 0)
        assert "1,000,000 points (grid" in text and f"{lacks:,} not yet in" in text
        assert seconds < 10 and rss < 1 << 30, (state, seconds, rss)


def measured_wait(*args) -> tuple[int, str, str, float, int]:
    """`hbmsim ARGS` as a process: (exit code, stdout, stderr, seconds, its own peak resident
    memory in bytes). The peak is the kernel's high-water mark of the process's memory
    (VmHWM), read until it exits: wait4's ru_maxrss would carry this test process's own peak
    across the fork and exec (Linux keeps the larger), so a large test session would be
    charged to the command."""
    t0 = time.monotonic()
    proc = cli_process(*args)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        status = Path(f"/proc/{proc.pid}/status")
        while not done.is_set():
            try:
                found = re.search(r"VmHWM:\s+(\d+) kB", status.read_text())
            except OSError:  # gone
                return
            if found:
                peak[0] = max(peak[0], int(found.group(1)) * 1024)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.wait()
    done.set()
    sampler.join()
    assert peak[0] > 0, "the command's memory was never read"
    return proc.returncode, out, err, time.monotonic() - t0, peak[0]


def test_a_million_point_run_gives_rows_within_seconds_and_stops_on_ctrl_c(tmp_path):
    """The grid is streamed: the first rows reach the journal within seconds (nothing of the
    million points is built before the first task), and Ctrl-C ends the run at once with
    the finished rows in the table."""
    spec = _write(tmp_path, MILLION)
    out = tmp_path / "big.parquet"
    proc = cli_process("explore", spec, "-o", out, "--workers", "1")
    journal = Journal(out).path
    t0 = time.monotonic()
    while not journal.exists() or journal.read_bytes().count(b"\n") < 2:
        assert proc.poll() is None, finish(proc)
        assert time.monotonic() - t0 < 20, "no row within 20 s"
        time.sleep(0.05)
    first = time.monotonic() - t0
    os.killpg(proc.pid, signal.SIGINT)
    t1 = time.monotonic()
    code, _, err = finish(proc)
    assert code == 130 and quiet(err) and time.monotonic() - t1 < 10, err
    held = int(err.split(" holds ")[1].split(" of ")[0].replace(",", ""))
    assert held >= 1 and len(table_ids(out)) == held
    assert first < 20
