"""`hbmsim explore` as a user runs it: specs checked before anything runs, one table with every
input and result column, resumable runs, and the same table from an embedded cluster and from
a real `dask scheduler` with two `dask worker` processes, one of them killed mid-run."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hbmsim.cli.commands import main
from hbmsim.explore import explore, parse_spec, read_spec, read_table
from hbmsim.explore.journal import Journal
from hbmsim.explore.table import INPUT_COLUMNS, RESULT_COLUMNS, run_point
from hbmsim.problem.models import MODELS

# tiny points (about 0.05 s each): 2 contexts x 2 programs x 2 SRAM sizes = 8
SMALL = """
[axes]
model = "gpt2-medium"
batch = 1
context = [256, 512]
program = ["fa2", "standard"]
[axes.hardware]
sram_bytes_per_sm = [65536, 233472]
"""


def write(tmp_path, text, name="spec.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def cli(capsys, *args):
    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def comparable(rows):
    return sorted(rows, key=lambda r: r["point_id"])


# -- the spec ----------------------------------------------------------------------------------


def test_a_spec_spans_the_grid_of_its_axes_and_each_point_carries_its_inputs(tmp_path):
    spec = read_spec(write(tmp_path, SMALL))
    points = list(spec.points())
    assert spec.size == len(points) == 8
    seen = {
        (p.inputs["context"], p.inputs["program"], p.hardware["sram_bytes_per_sm"]) for p in points
    }
    assert len(seen) == 8
    gpt2 = MODELS["gpt2-medium"]
    for p in points:
        assert (p.inputs["heads"], p.inputs["kv_heads"], p.inputs["head_dim"]) == (
            gpt2.heads,
            gpt2.kv_heads,
            gpt2.head_dim,
        )
        assert p.gpu.sram_bytes_per_sm == p.hardware["sram_bytes_per_sm"]
        assert p.problem.seq_q == p.problem.seq_k == p.inputs["context"]


def test_passes_set_the_problem_a_user_means():
    spec = parse_spec(
        {
            "axes": {
                "heads": 4,
                "head_dim": 64,
                "context": 300,
                "pass": ["prefill", "decode", "training"],
            }
        }
    )
    by_pass = {p.inputs["pass"]: p.problem for p in spec.points()}
    assert (by_pass["prefill"].seq_q, by_pass["prefill"].pass_) == (300, "fwd")
    assert (by_pass["decode"].seq_q, by_pass["decode"].seq_k) == (1, 300)
    assert by_pass["training"].pass_ == "fwd+bwd"


def test_ranges_expand_to_exactly_the_values_they_name():
    spec = parse_spec(
        {
            "axes": {
                "model": "gpt2-medium",
                "context": {"from": 1024, "to": 8192, "factor": 2},
                "batch": {"from": 1, "to": 7, "step": 3},
            }
        }
    )
    assert spec.axes["context"] == [1024, 2048, 4096, 8192]
    assert spec.axes["batch"] == [1, 4, 7]


def test_a_sample_is_a_seeded_subset_of_the_grid_without_repeats():
    doc = {
        "mode": "sample",
        "samples": 20,
        "seed": 3,
        "axes": {
            "model": [m for m in MODELS if not MODELS[m].alternating],  # one-layer models
            "context": {"from": 128, "to": 1 << 20, "factor": 2},
            "bq": [32, 64, 128],
            "bk": [32, 64, 128],
        },
    }
    a, b = parse_spec(doc), parse_spec(doc)
    grid = parse_spec({"axes": doc["axes"]})
    every = {tuple(sorted(p.inputs.items())) for p in grid.points()}
    drawn = [tuple(sorted(p.inputs.items())) for p in a.points()]
    assert drawn == [tuple(sorted(p.inputs.items())) for p in b.points()]  # seeded
    assert len(set(drawn)) == 20 and set(drawn) <= every
    other = parse_spec({**doc, "seed": 4})
    assert [tuple(sorted(p.inputs.items())) for p in other.points()] != drawn


@pytest.mark.parametrize(
    "text, field",
    [
        ("mode = 'grid'\nspeed = 1\n[axes]\nmodel = 'gpt2-medium'\ncontext = 256", "speed"),
        ("[axes]\nmodel = 'gpt2-medium'\ncontext = 256\nwidth = [1]", "axes.width"),
        ("[axes]\nmodel = 'gpt-5'\ncontext = 256", "axes.model"),
        ("[axes]\nmodel = 'gpt2-medium'\ncontext = []", "axes.context"),
        (
            "[axes]\nmodel = 'gpt2-medium'\ncontext = {from = 4096, to = 1024, step = 1}",
            "axes.context",
        ),
        ("[axes]\nmodel = 'gpt2-medium'\ncontext = 256\nbatch = [1, 0]", "axes.batch[1]"),
        (
            "[axes]\nmodel = 'gpt2-medium'\ncontext = 256\n[axes.hardware]\nl2_bytes = [-1]",
            "axes.hardware.l2_bytes[0]",
        ),
        (
            "[axes]\nmodel = 'gpt2-medium'\ncontext = 256\n[axes.hardware]\nwarp_size = [32]",
            "axes.hardware.warp_size",
        ),
        (
            "[axes]\nmodel = 'gpt2-medium'\ncontext = 256\n[axes.hardware]\n"
            "hbm_bytes_per_s = [nan]",
            "axes.hardware.hbm_bytes_per_s[0]",
        ),
        ("[axes]\nmodel = 'gpt2-medium'\nheads = 8\ncontext = 256", "axes.heads"),
        ("[axes]\nheads = 32\nkv_heads = [8, 12]\nhead_dim = 128\ncontext = 256", "axes.kv_heads"),
        ("[axes]\nmodel = 'gpt2-medium'\ncontext = [256, 256]", "axes.context"),
        ("[axes]\nmodel = 'gpt2-medium'\ncontext = 256\nprogram = 'flash'", "axes.program"),
        ("mode = 'sample'\n[axes]\nmodel = 'gpt2-medium'\ncontext = 256", "samples"),
        (
            "[axes]\nmodel = 'gpt2-medium'\ncontext = 256\n[axes.hardware]\n"
            "'matrix_flops_per_s.fp64' = [1e12]",
            "axes.hardware.matrix_flops_per_s.fp64",
        ),
        ("[axes\nmodel = 1", None),  # not TOML
    ],
)
def test_a_malformed_spec_is_refused_before_anything_runs_naming_the_field(
    capsys, tmp_path, text, field
):
    out = tmp_path / "out.parquet"
    code, stdout, err = cli(capsys, "explore", write(tmp_path, text), "-o", out)
    assert code == 2 and stdout == ""
    assert err.startswith("hbmsim: error: explore spec ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    if field is not None:
        assert f": {field}: " in err, err
    else:
        assert "is not valid TOML" in err
    assert not out.exists() and not list(tmp_path.glob(".out.parquet*"))


def test_a_grid_past_the_limit_is_refused_with_the_way_out(tmp_path):
    text = (
        "[axes]\nheads = {from = 1, to = 100, step = 1}\nhead_dim = {from = 1, to = 100, "
        "step = 1}\ncontext = {from = 1, to = 200, step = 1}\n"
    )
    with pytest.raises(Exception, match=r"axes: span 2,000,000 points.*mode = \"sample\""):
        read_spec(write(tmp_path, text))


# -- rows --------------------------------------------------------------------------------------


def test_a_row_holds_every_input_and_result_and_equal_points_give_equal_rows():
    spec = parse_spec({"axes": {"model": "gpt2-medium", "context": 256}})
    (point,) = spec.points()
    row = run_point(point)
    assert set(INPUT_COLUMNS + RESULT_COLUMNS) <= set(row)
    assert row["status"] == "ok" and row["time_s"] > 0 and row["hbm_bytes"] > 0
    assert row == run_point(next(iter(spec.points())))


def test_a_point_the_program_refuses_is_an_infeasible_row_with_the_reason():
    spec = parse_spec({"axes": {"model": "gpt2-medium", "context": 256, "bq": 4096, "bk": 4096}})
    (row,) = [run_point(p) for p in spec.points()]
    assert row["status"] == "infeasible" and "SRAM" in row["reason"]
    assert row["time_s"] is None


# -- runs --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """The small spec run once on the embedded cluster (one worker): the reference table."""
    folder = tmp_path_factory.mktemp("embedded")
    out = folder / "ref.parquet"
    run = explore(read_spec(write(folder, SMALL)), out, workers=1)
    return run, read_table(out)


def test_an_embedded_run_writes_one_row_per_point_with_every_column(embedded):
    run, (rows, columns) = embedded
    assert run.points == run.ran == len(rows) == 8 and run.kept == 0
    assert run.statuses == {"ok": 8}
    assert set(INPUT_COLUMNS + RESULT_COLUMNS) <= set(columns)
    assert len({r["point_id"] for r in rows}) == 8
    assert all(r["time_s"] > 0 for r in rows)


def test_a_rerun_skips_what_the_table_holds_and_runs_what_it_lacks(tmp_path, embedded):
    _, (rows, columns) = embedded
    out = tmp_path / "t.csv"
    from hbmsim.explore.table import write_table

    write_table(out, rows[:5], columns)  # as if the run had stopped after five points
    run = explore(read_spec(write(tmp_path, SMALL)), out, workers=1)
    assert (run.kept, run.ran) == (5, 3)
    again, _ = read_table(out)
    assert comparable(again) == comparable(rows)  # CSV and Parquet give the same values
    run = explore(read_spec(write(tmp_path, SMALL)), out, workers=1)
    assert (run.kept, run.ran, run.workers) == (8, 0, 0)  # nothing to run: no cluster started


@given(cut=st.integers(min_value=0, max_value=10_000))
def test_a_journal_cut_anywhere_keeps_exactly_its_whole_lines(tmp_path_factory, embedded, cut):
    """A run killed mid-write leaves a journal cut at any byte: the records before the cut
    are read back as they were written, the torn one is dropped and said in one line."""
    _, (rows, _) = embedded
    folder = tmp_path_factory.mktemp("journal")
    journal = Journal(folder / "t.parquet")
    for r in rows:
        journal.append(r)
    journal.close()
    data = journal.path.read_bytes()
    at = cut % (len(data) + 1)
    journal.path.write_bytes(data[:at])
    whole = max(0, data[:at].count(b"\n") - 1)  # the first line is the journal's header
    kept, note = Journal(folder / "t.parquet").read()
    assert kept == rows[:whole]
    torn = at not in (0, len(data)) and data[at - 1 : at] != b"\n"
    assert (note is not None) == torn, note
    if torn:
        assert note.count("\n") == 0 and "dropped" in note


def test_an_interrupted_run_resumes_from_its_journal(tmp_path, embedded):
    _, (rows, _) = embedded
    out = tmp_path / "t.parquet"
    journal = Journal(out)
    for r in rows[:3]:
        journal.append(r)
    journal.close()
    with open(journal.path, "ab") as f:
        f.write(b'0badc0de {"point_id": "torn')  # the line being written when the run was killed
    notes = []
    run = explore(read_spec(write(tmp_path, SMALL)), out, workers=1, notice=notes.append)
    assert (run.kept, run.ran) == (3, 5)
    assert len(notes) == 1 and "cut short" in notes[0]
    assert not journal.path.exists()  # the table replaced it
    assert comparable(read_table(out)[0]) == comparable(rows)


def test_the_cli_runs_a_spec_with_a_limit_and_says_what_it_did(capsys, tmp_path):
    out = tmp_path / "t.csv"
    spec = write(tmp_path, SMALL)
    code, _, err = cli(capsys, "explore", spec, "-o", out, "--dry-run")
    assert code == 0 and not out.exists()
    code, _, err = cli(capsys, "explore", spec, "-o", out, "--limit", "2", "--workers", "1")
    assert code == 0, err
    assert "8 points" not in err and "2 points: 0 already in" in err and "2 ok" in err
    assert len(read_table(out)[0]) == 2
    code, out_text, _ = cli(capsys, "explore", spec, "-o", out, "--dry-run")
    assert "8 points" in out_text and "6 not yet in" in out_text
    code, _, err = cli(capsys, "explore", spec, "-o", out, "--limit", "0")
    assert code == 2 and "limit: must be from 1 to 8" in err


def test_an_unreachable_scheduler_is_one_line(capsys, tmp_path):
    code, _, err = cli(
        capsys,
        "explore",
        write(tmp_path, SMALL),
        "-o",
        tmp_path / "t.parquet",
        "--scheduler",
        "tcp://127.0.0.1:9",
    )
    assert code == 2 and "scheduler: cannot reach 127.0.0.1:9" in err
    assert err.count("\n") == 1
    assert not (tmp_path / "t.parquet").exists()  # nothing ran: no empty table either


# -- a real cluster, one worker killed ---------------------------------------------------------

BIGGER = SMALL.replace("context = [256, 512]", "context = [256, 384, 512, 640, 768]").replace(
    'program = ["fa2", "standard"]', 'program = ["fa2", "standard", "fa1"]'
)  # 30 points


@contextlib.contextmanager
def dask_process(*args):
    dask = Path(sys.executable).with_name("dask")
    proc = subprocess.Popen(
        [str(dask), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_cluster_run_with_a_worker_killed_mid_run_gives_the_embedded_table(tmp_path):
    from distributed import Client

    file = tmp_path / "scheduler.json"
    spec = read_spec(write(tmp_path, BIGGER))
    reference = tmp_path / "ref.parquet"
    explore(spec, reference, workers=1)
    with dask_process(
        "scheduler",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--no-dashboard",
        "--scheduler-file",
        str(file),
    ):
        deadline = time.monotonic() + 60
        while not file.exists() or not file.read_text().strip():
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.1)
        address = json.loads(file.read_text())["address"]
        worker = ("worker", address, "--nthreads", "1", "--no-dashboard")
        with dask_process(*worker) as first, dask_process(*worker):
            with Client(address, timeout="30s") as client:
                client.wait_for_workers(2, timeout=60)
            out = tmp_path / "cluster.parquet"
            journal = Journal(out).path
            result = {}
            thread = threading.Thread(
                target=lambda: result.update(run=explore(spec, out, scheduler=address))
            )
            thread.start()
            while not journal.exists() or journal.read_text().count("\n") < 5:  # header + 4
                assert thread.is_alive(), "the run ended before a worker could be killed"
                time.sleep(0.02)
            os.killpg(first.pid, signal.SIGKILL)  # the worker and its nanny: gone for good
            first.wait()
            thread.join(timeout=240)
            assert not thread.is_alive()
    run = result["run"]
    assert run.workers == 2 and run.ran == 30 and run.statuses == {"ok": 30}
    assert comparable(read_table(out)[0]) == comparable(read_table(reference)[0])


LONGER = SMALL.replace("context = [256, 512]", "context = {from = 256, to = 2048, step = 128}")


def test_ctrl_c_keeps_every_finished_row_and_the_same_command_runs_the_rest(tmp_path):
    """Ctrl-C at a terminal (SIGINT to the whole process group, workers included): one line,
    exit status 130, no traceback from any process, the finished rows in the table; the rerun
    runs only the rest and ends with the table a run without interruption gives."""
    spec = write(tmp_path, LONGER)
    out = tmp_path / "t.parquet"
    cmd = [
        sys.executable,
        "-m",
        "hbmsim.cli",
        "explore",
        str(spec),
        "-o",
        str(out),
        "--workers",
        "2",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    journal = Journal(out).path
    deadline = time.monotonic() + 120
    while not journal.exists() or journal.read_text().count("\n") < 6:  # header + 5 rows
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    (line,) = [x for x in err.splitlines() if x.startswith("interrupted")]
    kept = int(line.split(" holds ")[1].split(" of ")[0].replace(",", ""))
    assert kept >= 5 and len(read_table(out)[0]) == kept and not journal.exists()
    run = explore(read_spec(spec), out, workers=2)
    assert (run.kept, run.ran) == (kept, run.points - kept)
    reference = tmp_path / "ref.parquet"
    explore(read_spec(spec), reference, workers=2)
    assert comparable(read_table(out)[0]) == comparable(read_table(reference)[0])


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_reading_a_results_table_leaves_no_arrow_thread_behind():
    """A Parquet table is read on the calling thread: Arrow's thread pools, once started, were
    still alive when a Ctrl-C'd `hbmsim explore` exited, and its exit aborted in C++'s
    std::terminate (status -6 in 3 runs of 10). Counted in a fresh process, pyarrow imported:
    its threads before and after reading the example table the package ships."""
    script = (
        "import os, sys\n"
        "import pyarrow.parquet\n"  # its own threads start on import
        "from hbmsim.explore.table import read_table\n"
        "n = lambda: len(os.listdir('/proc/self/task'))\n"
        "before = n()\n"
        "rows, columns = read_table(sys.argv[1])\n"
        "print(before, n(), len(rows))\n"
    )
    example = Path(__file__).resolve().parent.parent / "hbmsim" / "data" / "explore_example.parquet"
    out = subprocess.run(
        [sys.executable, "-c", script, str(example)], capture_output=True, text=True, check=True
    ).stdout.split()
    before, after, rows = (int(x) for x in out)
    assert rows > 0 and after == before
