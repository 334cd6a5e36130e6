"""The results table of an exploration: its columns, one row per point, and its files.

One row holds every input of its point (so the table alone says what was simulated) and every
result. A row is keyed by `point_id`, a hash of its inputs, which is what lets a rerun skip the
points a table already holds, and lets two runs of one spec (one embedded, one on a cluster) be
compared row by row: a simulation is pure, so equal inputs give equal rows.

Files: a table is written whole through hbmsim's one writer (writer.write_atomic), as Parquet
or CSV by its suffix. While a run goes on, each finished row is also appended to a journal
beside the table (journal.py), checked by this module's cell checks before it is written.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
from pathlib import Path

from ..errors import ConfigError, HbmsimError, InputFileError
from ..files.reader import FileChecker, decode_text, read_bytes
from ..files.writer import write_atomic
from ..gpu.hardware import Hardware
from .spec import OPTIONAL_AXES, PROBLEM_AXES, Point, point_id

# input columns every table has: the point, the GPU (and the hardware fields a Pareto view
# plots even when only the preset varies), then the problem axes
HARDWARE_COLUMNS = ("sm_count", "sram_bytes_per_sm", "l2_bytes", "hbm_bytes_per_s", "clock_hz")
INPUT_COLUMNS = ("point_id", "gpu", *HARDWARE_COLUMNS, *PROBLEM_AXES, "seq_q", "seq_k")
RESULT_COLUMNS = (
    "status",  # ok | infeasible (the program refuses the point: the reason says why) | error
    "reason",
    "bq_used",
    "bk_used",
    "time_s",
    "roofline_time_s",
    "tflops",  # attention's FLOPs as papers count them (PASS_FLOPS) over time_s
    "hbm_bytes",
    "dram_bytes",
    "l2_hit_bytes",
    "flops",
    "trips",
    "sram_peak_bytes",
    "engine_note",
)
STATUSES = ("ok", "infeasible", "error")
# the FLOPs a pass is credited with, in forward passes, as flash-attn's benchmarks count them
# (benchmarks/benchmark_flash_attention.py: backward 2.5x the forward, both 3.5x)
PASS_FLOPS = {"prefill": 1.0, "decode": 1.0, "training": 3.5}
MAX_TABLE_BYTES = 1 << 30  # a million rows of ~40 columns is a few hundred MB as CSV

_HW_TYPES = {f.name: f.type for f in dataclasses.fields(Hardware)}
TYPES = {  # column -> "int" | "float" | "str" | "bool"; other hardware columns by their field
    "point_id": "str",
    "gpu": "str",
    **{c: "float" if _HW_TYPES[c] == "float" else "int" for c in HARDWARE_COLUMNS},
    "model": "str",
    "heads": "int",
    "kv_heads": "int",
    "head_dim": "int",
    "batch": "int",
    "context": "int",
    "pass": "str",
    "causal": "bool",
    "dtype": "str",
    "program": "str",
    "bq": "int",
    "bk": "int",
    "page_size": "int",
    "seq_q": "int",
    "seq_k": "int",
    "status": "str",
    "reason": "str",
    "bq_used": "int",
    "bk_used": "int",
    "time_s": "float",
    "roofline_time_s": "float",
    "tflops": "float",
    "hbm_bytes": "int",
    "dram_bytes": "float",  # the engine's byte counts can be fractional (partial lines)
    "l2_hit_bytes": "float",
    "flops": "int",
    "trips": "int",
    "sram_peak_bytes": "int",
    "engine_note": "str",
}


def column_type(name: str) -> str:
    """A column's type; a hardware field column (`l2_bytes`, `matrix_flops_per_s.fp16`) is
    typed by its field."""
    if name in TYPES:
        return TYPES[name]
    field = name.partition(".")[0]
    if field in _HW_TYPES:
        return "int" if _HW_TYPES[field] == "int" else "float"
    raise KeyError(name)


def columns_for(hardware_keys, optional=()) -> list[str]:
    """The table's columns for a spec varying these hardware fields and giving these of the
    optional problem axes (spec.OPTIONAL_AXES)."""
    extra = [k for k in hardware_keys if k not in HARDWARE_COLUMNS]
    return [
        *INPUT_COLUMNS[:2],
        *HARDWARE_COLUMNS,
        *extra,
        *INPUT_COLUMNS[2 + len(HARDWARE_COLUMNS) :],
        *[k for k in OPTIONAL_AXES if k in optional],
        *RESULT_COLUMNS,
    ]


def input_row(point: Point, hw=None, problem=None) -> dict:
    """The input columns of a point's row (`hw`, `problem`: the point's own, where the caller
    has built them already)."""
    hw = point.gpu if hw is None else hw
    problem = point.problem if problem is None else problem
    row = {"point_id": point_id(point), "gpu": point.inputs["gpu"]}
    row.update({c: getattr(hw, c) for c in HARDWARE_COLUMNS})
    row.update(point.hardware)
    row.update({k: point.inputs[k] for k in (*PROBLEM_AXES, *OPTIONAL_AXES) if k in point.inputs})
    row.update(seq_q=problem.seq_q, seq_k=problem.seq_k)
    return row


def run_point(point: Point) -> dict:
    """One simulation as one table row. Never raises: a point the program refuses is a row
    with status "infeasible" and the reason; anything else (a bug) a row with status "error",
    so one bad point cannot stop a run of thousands. Pure: equal points give equal rows."""
    # deferred: SimPy (the engine), loaded on the workers that run points, not by a reader
    from ..api import program_kw, simulate
    from .sweep import result_fields

    try:
        hw, problem = point.gpu, point.problem
    except HbmsimError as exc:  # the spec reader checks every combination; kept as a guard
        return {"point_id": point_id(point), **point.inputs, **point.hardware, **error_fields(exc)}
    row = {**input_row(point, hw, problem), **_blank()}
    i = point.inputs
    program = i["program"]
    try:
        r = simulate(problem, hw, bq=i["bq"], bk=i["bk"], **program_kw(program))
    except HbmsimError as exc:
        return {**row, "status": "infeasible", "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - recorded in the table, and the run goes on
        return {**row, **error_fields(exc)}
    fields = result_fields(r)
    time_s = fields["time_s"]
    useful = problem.attention_flops * PASS_FLOPS[i["pass"]]
    row.update(fields)
    row.update(
        status="ok",
        reason="",
        bq_used=r.plan.tiles.bq,
        bk_used=r.plan.tiles.bk,
        tflops=useful / time_s / 1e12 if time_s else None,
    )
    return row


def _blank() -> dict:
    """A row's result columns before any result: empty, with an empty engine note."""
    return {**dict.fromkeys(RESULT_COLUMNS), "engine_note": ""}


def error_fields(reason) -> dict:
    """The result columns of a row whose point failed (`reason`: a message, or the exception)."""
    if isinstance(reason, BaseException):
        reason = str(reason) if isinstance(reason, HbmsimError) else _described(reason)
    return {**_blank(), "status": "error", "reason": str(reason)[:2000]}


def _described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def error_row(point: Point, exc: BaseException | str) -> dict:
    """The row of a point whose task failed outside the simulation (e.g. the workers that ran
    it kept dying)."""
    return {**input_row(point), **error_fields(exc)}


# -- files -------------------------------------------------------------------------------------


def table_format(path, field: str | None = None) -> str:
    """ "parquet" or "csv", by the suffix; anything else is refused, as a ConfigError naming
    `field` for a table to be written, as the reader's error for one to be read."""
    suffix = Path(os.fspath(path)).suffix.lower()
    if suffix not in (".parquet", ".csv"):
        if field is not None:
            raise ConfigError(field, f"{path}: a results table ends in .parquet or .csv")
        raise InputFileError("results table", path, "must end in .parquet or .csv")
    return suffix[1:]


def write_table(path, rows: list[dict], columns: list[str]) -> int:
    """The whole table, atomically, as Parquet or CSV by the suffix; returns bytes written."""
    if table_format(path, "output") == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: "" if r.get(c) is None else r[c] for c in columns})
        return write_atomic(path, buf.getvalue(), "output")
    # deferred: pyarrow, loaded where a table is written or read
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrow = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}
    schema = pa.schema([(c, arrow[column_type(c)]) for c in columns])
    table = pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows], schema=schema)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return write_atomic(path, sink.getvalue().to_pybytes(), "output")


def read_table(path, data: bytes | None = None) -> tuple[list[dict], list[str]]:
    """A results table (ours, or one a user hands in), every column and value checked:
    (rows, columns). One InputFileError naming the file and the column if anything is off.
    `data`: the file's bytes when they did not come from disk (an upload in the app); `path`
    then only names it (and its suffix says the format)."""
    kind = table_format(path)
    if data is None:
        data = bytes(read_bytes(path, "results table", MAX_TABLE_BYTES))
    elif len(data) > MAX_TABLE_BYTES:
        raise InputFileError("results table", path, f"is larger than {MAX_TABLE_BYTES:,} bytes")
    chk = FileChecker("results table", path)
    if kind == "csv":
        text = decode_text(data, "results table", path)
        try:
            reader = csv.DictReader(io.StringIO(text))
            columns = list(reader.fieldnames or [])
            raw = list(reader)
        except csv.Error as exc:
            raise chk.error(None, f"is not a readable CSV file ({exc})") from None
    else:
        # deferred: pyarrow, loaded where a table is written or read
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:  # one thread: no Arrow pool left running when the process exits (read_table's
            # pools made a Ctrl-C'd explore abort at exit in std::terminate, 3 runs in 10)
            table = pq.ParquetFile(pa.BufferReader(data), pre_buffer=False).read(use_threads=False)
        except (pa.ArrowException, OSError) as exc:
            raise chk.error(None, f"is not a readable Parquet file ({exc})") from None
        columns = table.column_names
        raw = table.to_pylist()
    return check_rows(chk, raw, columns, kind), columns


# results every simulated point has (time_s and what follows from it need the engine to run)
COUNTED = (
    "bq_used",
    "bk_used",
    "roofline_time_s",
    "hbm_bytes",
    "flops",
    "trips",
    "sram_peak_bytes",
)
# columns that may be empty: a point of explicit shapes has no model, default tiles no bq/bk,
# and a point the program refuses no results; an error row may also lack what its point's
# GPU and problem would have given (the GPU's fields, the lengths), had they been built
# (an optional axis' column is empty in the rows of a point without it)
NULLABLE = {"model", "bq", "bk", *OPTIONAL_AXES, *RESULT_COLUMNS} - {"status"}
ERROR_NULLABLE = {*HARDWARE_COLUMNS, "seq_q", "seq_k"}


def check_rows(chk: FileChecker, raw: list[dict], columns: list[str], kind: str) -> list[dict]:
    missing = [c for c in (*INPUT_COLUMNS, *RESULT_COLUMNS) if c not in columns]
    if missing:
        raise chk.error(missing[0], "is missing: not an hbmsim explore table")
    for c in columns:
        try:
            column_type(c)
        except KeyError:
            raise chk.error(c, "is not a column of an explore table") from None
    rows = []
    for n, r in enumerate(raw):
        row = {}
        failed = r.get("status") == "error"
        for c in columns:
            row[c] = _cell(chk, r.get(c), c, column_type(c), n, kind)
            if row[c] is None and c not in NULLABLE:
                if failed and c in ERROR_NULLABLE:
                    continue  # a column of a point whose GPU or problem was never built
                raise chk.error(f"{c} (row {n + 1})", "is empty; every point has one")
        if row["status"] not in STATUSES:
            raise chk.error(f"status (row {n + 1})", f"must be one of {', '.join(STATUSES)}")
        if row["status"] == "ok":
            for c in COUNTED:
                if row[c] is None:
                    raise chk.error(f"{c} (row {n + 1})", "is empty in a row whose status is ok")
        if not row["point_id"]:
            raise chk.error(f"point_id (row {n + 1})", "is empty")
        rows.append(row)
    return rows


def _cell(chk: FileChecker, value, column: str, kind: str, n: int, fmt: str):
    where = f"{column} (row {n + 1})"
    if fmt == "csv":  # text: "" is no value
        if value is None or value == "":
            return "" if kind == "str" and column in ("reason", "engine_note") else None
        try:
            if kind == "int":
                return int(value)
            if kind == "float":
                x = float(value)
                if not math.isfinite(x):
                    raise ValueError
                return x
            if kind == "bool":
                if value not in ("True", "False"):
                    raise ValueError
                return value == "True"
            return value
        except ValueError:
            raise chk.error(where, f"must be a {kind} (got {value[:40]!r})") from None
    want = {"int": int, "float": (int, float), "str": str, "bool": bool}[kind]
    if value is not None and (
        not isinstance(value, want) or (kind != "bool" and isinstance(value, bool))
    ):
        raise chk.error(where, f"must be a {kind} (got {type(value).__name__})")
    if kind == "float" and value is not None and not math.isfinite(value):
        raise chk.error(where, f"must be a finite number (got {value!r})")
    return value
