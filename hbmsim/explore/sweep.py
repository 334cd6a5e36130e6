"""Sweeps as data: a spec in, a table (list of row dicts) out.

The CLI writes the table as CSV or JSON, the app draws heatmaps and scaling plots from it,
and the benchmarks time it. Tiles that do not fit become rows with `feasible = False` and the
reason, never exceptions: a sweep's job is to map where the feasible region ends. A value no
row could take (a tile of 0, splits past the range `simulate` allows) is refused for the
whole sweep, as `simulate` refuses it.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..algorithms.names import ALGOS, MAX_TILE
from ..api import program_kw, simulate
from ..errors import ConfigError, HbmsimError, check_int
from ..gpu.hardware import Hardware
from ..libraries.registry import IMPL_NAMES
from ..problem.attention import Problem

COLUMNS = (
    "algo",
    "seq_q",
    "seq_k",
    "bq",
    "bk",
    "feasible",
    "reason",
    "hbm_read_bytes",
    "hbm_write_bytes",
    "hbm_bytes",
    "trips",
    "flops",
    "sram_peak_bytes",
    "roofline_time_s",
    "time_s",
    "dram_bytes",
    "l2_hit_bytes",
)


@dataclass(frozen=True)
class SweepSpec:
    """Every combination of algos x seqs x bq x bk (an algo may also name an implementation
    mirror, hbmsim.libraries). Empty tile lists mean the default tiles;
    seqs of None keep the problem's own lengths. A seq s sets seq_k = s and seq_q = s, or keeps
    seq_q when the problem decodes (seq_q == 1)."""

    problem: Problem
    hardware: Hardware
    algos: Sequence[str] = ("fa2",)
    seqs: Sequence[int] | None = None
    bqs: Sequence[int] = ()
    bks: Sequence[int] = ()
    engine: bool = True  # also simulate time (blank where the plan is too large to replay)
    l2: bool = True
    engine_max_trips: int | None = None  # simulate only plans with at most this many trips
    splits: int | None = None  # split-kv's K/V splits (its rows only; None: its default)

    def __post_init__(self):
        for a in self.algos:
            if a not in ALGOS and a not in IMPL_NAMES:
                raise ConfigError(
                    "algo",
                    f"must be one of {', '.join(ALGOS)} or an implementation "
                    f"({', '.join(IMPL_NAMES)}) (got {a[:40]!r})",
                )
        if not self.algos:
            raise ConfigError("algo", "give at least one algorithm or implementation")
        # values simulate refuses whatever the row (make_plan's own checks), refused here for
        # the whole sweep rather than turned into rows; tiles that do not fit stay rows
        for name, values in (("bq", self.bqs), ("bk", self.bks), ("splits", [self.splits])):
            for value in values:
                if value is not None:
                    check_int(name, value, 1, MAX_TILE)


def _problem_at(p: Problem, seq: int | None) -> Problem:
    if seq is None:
        return p
    seq_q = p.seq_q if p.seq_q == 1 else seq
    return dataclasses.replace(p, seq_q=seq_q, seq_k=seq)


# progress(done, total, what): `done` rows of `total` computed, `what` the next one in words
Progress = Callable[[int, int, str], None]


def run_sweep(spec: SweepSpec, progress: Progress | None = None) -> list[dict]:
    """Every row of the spec, in order (seqs, then algos, then bq, then bk); `progress` is
    told before each row what it computes."""
    seqs: Iterable[int | None] = spec.seqs if spec.seqs else [None]
    cells = [
        (algo, _problem_at(spec.problem, seq), bq, bk)
        for seq in seqs
        for algo in spec.algos
        for bq in spec.bqs or [None]
        for bk in spec.bks or [None]
    ]
    rows = []
    for i, (algo, p, bq, bk) in enumerate(cells):
        if progress is not None:
            progress(i, len(cells), describe(algo, p, bq, bk))
        rows.append(_row(algo, p, spec, bq, bk))
    return rows


def describe(algo: str, p: Problem, bq: int | None, bk: int | None) -> str:
    """One row of a sweep in words: algorithm, lengths, tiles."""
    lengths = f"{p.seq_k:,} tokens" if p.seq_q == p.seq_k else f"{p.seq_q:,} x {p.seq_k:,}"
    tiles = "default tiles" if bq is None and bk is None else f"bq {bq or '-'} x bk {bk or '-'}"
    return f"{algo} at {lengths}, {tiles}"


def _row(algo: str, p: Problem, spec: SweepSpec, bq: int | None, bk: int | None) -> dict:
    row = {"algo": algo, "seq_q": p.seq_q, "seq_k": p.seq_k, "bq": bq, "bk": bk}
    try:
        r = simulate(
            p,
            spec.hardware,
            bq=bq,
            bk=bk,
            splits=spec.splits if algo == "split-kv" else None,
            **program_kw(algo),
            engine=spec.engine,
            l2=spec.l2,
            engine_max_trips=spec.engine_max_trips,
        )
    except HbmsimError as exc:
        row.update(feasible=False, reason=str(exc))
        return {c: row.get(c) for c in COLUMNS}
    row.update(bq=r.plan.tiles.bq, bk=r.plan.tiles.bk, feasible=True, reason="")
    row.update(result_fields(r))
    return {c: row.get(c) for c in COLUMNS}


def result_fields(r) -> dict:
    """What a table row reports of one simulate() result: exact counts, and the engine's time
    and traffic after L2 (None where the engine did not run; `engine_note` says why)."""
    fields = {
        "hbm_read_bytes": r.hbm_read_bytes,
        "hbm_write_bytes": r.hbm_write_bytes,
        "hbm_bytes": r.hbm_bytes,
        "trips": r.trips,
        "flops": r.flops,
        "sram_peak_bytes": r.sram_peak_bytes,
        "roofline_time_s": r.roofline_time_s,
        "time_s": None,
        "dram_bytes": None,
        "l2_hit_bytes": None,
        "engine_note": r.extra.get("engine", {}).get("skipped", ""),
    }
    if "time_s" in r.extra:
        fields.update(
            time_s=r.extra["time_s"],
            dram_bytes=r.extra["dram_read_bytes"] + r.extra["dram_write_bytes"],
            l2_hit_bytes=r.extra["l2_hit_bytes"],
        )
    return fields


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return buf.getvalue()


def to_json(rows: list[dict]) -> str:
    return json.dumps(rows, indent=1, allow_nan=False)  # strict JSON: every value is finite
