"""The Explore page through AppTest: the example study drawn, an upload checked (a malformed
table is one line, never a traceback), and a small spec run in the page becoming the table."""

import json
import sys

import pytest

pytest.importorskip("streamlit")
from test_app import APP, make  # noqa: E402

# the page's own modules import as app_pages.*, from the repository's root (main.py puts it
# on sys.path when it runs; this module reads them before any page has run)
ROOT = str(APP.rpartition("/app_pages/")[0])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from app_pages import explore_data  # noqa: E402
from hbmsim.explore import parse_spec, read_table, run_point  # noqa: E402
from hbmsim.explore.table import columns_for, write_table  # noqa: E402
from hbmsim.figures import explore as ef  # noqa: E402

PAGE = "explore.py"
TINY_SPEC = """\
[axes]
model = "gpt2-medium"
context = [256, 512]
program = "fa2"
bq = [64, 128]
"""


@pytest.fixture
def example(monkeypatch, tmp_path_factory):
    """The shipped example table's rows; until the package has one, a small table made here
    (run in this process, no cluster) stands in for it."""
    if not explore_data.EXAMPLE_PATH.exists():
        path = tmp_path_factory.mktemp("example") / "explore_example.parquet"
        axes = {
            "model": ["gpt2-medium", "llama-3-8b"],
            "context": [256, 512],
            "program": ["fa2", "fa1"],
            "hardware": {"sram_bytes_per_sm": [65536, 233472]},
        }
        spec = parse_spec({"axes": axes}, "test")
        write_table(path, [run_point(p) for p in spec.points()], columns_for(spec.hardware))
        monkeypatch.setattr(explore_data, "EXAMPLE_PATH", path)
    return read_table(explore_data.EXAMPLE_PATH)


def charts(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def markers(at) -> int:
    """Points the Pareto view draws (its frontier traces are lines through some of them)."""
    pareto = charts(at)[0]
    return sum(len(t["x"]) for t in pareto["data"] if t["mode"] == "markers")


def drawn(at, rows) -> int:
    """The rows the Pareto view draws as its own markers, counted from the rows and the view's
    chosen axes and colour: a colour group whose points are exactly an earlier group's (two
    models of one attention shape) is drawn once, under both names."""
    chosen = {s.label: s.value for s in at.selectbox}
    x, y, color = chosen["x"], chosen["y"], chosen["colour by"]
    groups: dict = {}
    for r in rows:
        groups.setdefault(r[color], []).append((r[x], r[y]))
    seen: set = set()
    for points in groups.values():
        seen.add(tuple(sorted(points)))
    return sum(len(points) for points in seen)


def test_the_page_draws_the_example_study(example):
    """The Pareto view of the longest context (a frontier over several is the shortest's),
    or of every context when asked; parallel coordinates of every row that ran; the best
    configuration of each model and context; the downloads. A filter narrows every view."""
    rows, columns = example
    at = make(page=PAGE)
    assert not at.exception and not at.error
    assert len(charts(at)) == 1  # the parallel coordinates are drawn when asked
    at.toggle(key="explore_parcoords_on").set_value(True).run()
    pareto, parcoords = charts(at)
    timed = [r for r in rows if r["status"] == "ok" and r["time_s"] is not None]
    longest = max(r["context"] for r in rows)
    at_longest = [r for r in timed if r["context"] == longest]
    y = next(s for s in at.selectbox if s.label == "y")
    assert y.value == "time_s" and "time" in y.options  # the unit is the chart's, by size
    assert markers(at) == drawn(at, at_longest) > 0
    merged = [t["name"] for t in pareto["data"] if "(the same points)" in t["name"]]
    assert markers(at) < len(at_longest) and merged  # the example holds models of one shape
    assert any(t["name"].endswith(" frontier") for t in pareto["data"])
    assert parcoords["data"][0]["type"] == "parcoords"
    assert len(parcoords["data"][0]["dimensions"][-1]["values"]) == len(timed)
    best = at.dataframe[0].value
    assert len(best) == len({(r["model"], r["context"]) for r in timed})
    fastest: dict = {}
    for r in timed:
        key = (r["model"], r["context"])
        fastest[key] = min(fastest.get(key, r["time_s"]), r["time_s"])
    assert max(fastest.values()) >= 1e-3  # the example's longest calls take milliseconds
    columns = (best["model"], best["context"], best["time (ms)"])
    shown = {(m, c): t for m, c, t in zip(*columns, strict=True)}
    assert shown == pytest.approx({k: t * 1e3 for k, t in fastest.items()})
    labels = [str(b.proto.label) for b in at.get("download_button")]
    assert labels == [
        "Download best configurations (CSV)",
        f"Download the whole table, {len(rows):,} rows (CSV)",
    ]
    context = next(s for s in at.selectbox if s.label == "context")
    context.set_value("all").run()
    assert not at.exception and markers(at) == drawn(at, timed)
    # a filter on the model (or the program, where there is one model) narrows every view
    key = next(m.key for m in at.multiselect if m.label in ("program", "model"))
    column = at.multiselect(key=key).label
    first = ef.distinct(rows, column)[0]
    at.multiselect(key=key).set_value([first]).run()
    assert not at.exception
    assert markers(at) == drawn(at, [r for r in timed if r[column] == first])
    assert len(at.dataframe[0].value) == len(
        {(r["model"], r["context"]) for r in timed if r[column] == first}
    )


def test_a_missing_example_is_said_not_a_crash(monkeypatch, tmp_path):
    monkeypatch.setattr(explore_data, "EXAMPLE_PATH", tmp_path / "explore_example.parquet")
    at = make(page=PAGE)
    assert not at.exception and not at.error
    assert any("example table is not there" in i.value for i in at.info)
    assert not at.get("plotly_chart")


@pytest.mark.parametrize(
    "name,data,said",
    [
        ("bad.csv", b"point_id,gpu\nx,h100-sxm\n", "bad.csv: sm_count: is missing"),
        ("bad.parquet", b"not parquet at all", "bad.parquet: is not a readable Parquet file"),
    ],
)
def test_a_malformed_upload_is_one_error_line(example, name, data, said):
    at = make(page=PAGE)
    at.radio(key="explore_source").set_value("upload").run()
    at.file_uploader(key="explore_upload").set_value((name, data, "application/octet-stream"))
    at.run()
    assert not at.exception
    (error,) = [e.value for e in at.error]
    assert error.startswith("results table ") and said in error
    assert "\n" not in error and "Traceback" not in error
    assert not at.get("plotly_chart")


def test_a_bad_value_in_an_uploaded_csv_is_named_by_column_and_row(example):
    rows, columns = example
    text = ef.to_csv(rows, columns).splitlines()
    cells = text[2].split(",")
    cells[columns.index("head_dim")] = "wide"
    text[2] = ",".join(cells)
    at = make(page=PAGE)
    at.radio(key="explore_source").set_value("upload").run()
    upload = at.file_uploader(key="explore_upload")
    upload.set_value(("mine.csv", "\n".join(text).encode(), "text/csv")).run()
    assert not at.exception
    # named as the file names it, not by the sidebar's label ("head dim")
    assert [e.value for e in at.error] == [
        "results table mine.csv: head_dim (row 2): must be a int (got 'wide')"
    ]
    good = ef.to_csv(rows, columns).encode()
    at.file_uploader(key="explore_upload").set_value(("mine.csv", good, "text/csv")).run()
    assert not at.exception and not at.error
    at.toggle(key="explore_parcoords_on").set_value(True).run()
    assert len(charts(at)) == 2


def test_a_small_spec_run_in_the_page_becomes_the_table(example):
    """Refused with one line, before anything runs: TOML that does not parse, a spec field
    out of range, a spec past the page's limit. Then four tiny points run on the embedded
    cluster and are drawn."""
    at = make(page=PAGE)
    at.radio(key="explore_source").set_value("spec").run()
    too_many = TINY_SPEC.replace("[256, 512]", "{ from = 1, to = 100, step = 1 }")
    for text, said in [
        ("[axes\n", "explore spec in the page: is not valid TOML"),
        (TINY_SPEC.replace("256", "0"), "explore spec in the page: axes.context[0]: "),
        (too_many, f"holds 200 points; the page runs at most {explore_data.PAGE_MAX_POINTS}"),
    ]:
        at.text_area(key="explore_spec").set_value(text)
        at.button(key="explore_run").click().run()
        assert not at.exception
        (error,) = [e.value for e in at.error]
        assert said in error and "\n" not in error, error
        assert not at.get("plotly_chart")
    at.text_area(key="explore_spec").set_value(TINY_SPEC)
    at.button(key="explore_run").click().run()
    assert not at.exception and not at.error
    assert any(c.value.startswith("The last spec run here: 4 points simulated") for c in at.caption)
    assert any(c.value.startswith("Loaded: the spec run here, 4 rows") for c in at.caption)
    best = at.dataframe[0].value
    assert list(best["context"]) == [256, 512] and set(best["program"]) == {"fa2"}
    assert markers(at) == 2  # the longest context's (bq 64 and bq 128)
    at.run()  # a rerun keeps the table the spec made
    assert any(c.value.startswith("Loaded: the spec run here, 4 rows") for c in at.caption)
