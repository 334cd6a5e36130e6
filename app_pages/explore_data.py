"""The Explore page's tables: the shipped example, an uploaded table, a small spec run here.

Each returns (rows, columns) as `hbmsim.explore.read_table` does, or raises HbmsimError with
one line for the page to show. Reading a table is cached by its bytes (a rerun of the page,
every widget change, would otherwise check every cell of a 2,000-row table again); a spec run
is not cached: the page keeps its result in the session, and a bar shows its progress.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import streamlit as st

import hbmsim
from hbmsim.errors import InputFileError
from hbmsim.explore import explore, read_table
from hbmsim.explore.spec import parse_spec_text

EXAMPLE_PATH = Path(hbmsim.__file__).parent / "data" / "explore_example.parquet"
EXAMPLE_SPEC = "docs/explore-example.toml"  # what made the example (hbmsim explore SPEC -o ...)
SPEC_NAME = "in the page"  # how errors name the spec: "explore spec in the page: axes..."
PAGE_MAX_POINTS = 64  # a spec run here: seconds, not minutes (`hbmsim explore` runs any size)
PAGE_MAX_WORKERS = 4  # worker processes one page's run may start on the server
MAX_SPEC_CHARS = 20_000
SMALL_SPEC = """\
# A small study run here (at most 64 points; `hbmsim explore SPEC -o OUT.parquet` runs any
# size). Axes: gpu, model (or heads, kv_heads, head_dim), batch, context, pass (prefill,
# decode, training), causal, dtype, program, bq, bk, and [axes.hardware] fields.
[axes]
gpu = "h100-sxm"
model = "gpt2-medium"
context = [256, 512]
pass = "prefill"
program = ["fa2", "fa1"]
bq = [64, 128]

[axes.hardware]
sram_bytes_per_sm = [98304, 233472]
"""


def example_table() -> tuple[list[dict], list[str]] | None:
    """The shipped example study, or None when the package has none."""
    if not EXAMPLE_PATH.exists():
        return None
    return _read(str(EXAMPLE_PATH), EXAMPLE_PATH.read_bytes())


def uploaded_table(name: str, data: bytes) -> tuple[list[dict], list[str]]:
    """A table a user uploaded (.parquet or .csv by its name), every cell checked."""
    return _read(name, data)


@st.cache_data(show_spinner="Reading the table...", max_entries=8)
def _read(name: str, data: bytes) -> tuple[list[dict], list[str]]:
    return read_table(name, data=data)


def parse_page_spec(text: str):
    """The spec in the text area, checked, and refused above PAGE_MAX_POINTS."""
    if len(text) > MAX_SPEC_CHARS:
        raise InputFileError(
            "explore spec", SPEC_NAME, f"is longer than {MAX_SPEC_CHARS:,} characters"
        )
    spec = parse_spec_text(text, SPEC_NAME)
    if spec.size > PAGE_MAX_POINTS:
        raise InputFileError(
            "explore spec",
            SPEC_NAME,
            f"holds {spec.size:,} points; the page runs at most {PAGE_MAX_POINTS} (run it "
            "with `hbmsim explore SPEC -o OUT.parquet` and upload the table)",
        )
    return spec


def run_spec(spec, progress=None, started=None) -> tuple[list[dict], list[str], str]:
    """(rows, columns, the run's summary line): the spec run on an embedded Dask cluster
    into a temporary table, read back as an uploaded table would be. `progress` and
    `started` as explore()'s."""
    workers = max(1, min(os.cpu_count() or 1, PAGE_MAX_WORKERS, spec.size))
    with tempfile.TemporaryDirectory(prefix="hbmsim-explore-") as d:
        out = Path(d) / "explore.parquet"
        run = explore(spec, out, workers=workers, progress=progress, started=started)
        rows, columns = read_table(out)
    ended = ", ".join(f"{n:,} {status}" for status, n in sorted(run.statuses.items()))
    workers = f"{run.workers} worker{'s' * (run.workers != 1)}"
    summary = f"{run.ran:,} points simulated ({ended}) in {run.seconds:.1f} s on {workers}"
    return rows, columns, summary
