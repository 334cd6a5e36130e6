"""The Streamlit app through AppTest: renders, reacts to widgets, never shows a traceback."""

import json
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

APP = Path(__file__).resolve().parent.parent / "app.py"


@pytest.fixture
def app():
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception
    return at


def _metric(at, label):
    return [m.value for m in at.metric if m.label == label]


def test_default_render_shows_all_algorithms(app):
    assert [h.value for h in app.subheader] == ["standard", "fa1", "fa2"]
    assert len(app.get("plotly_chart")) == 2
    assert not app.error


def test_longer_sequence_moves_more_bytes(app):
    before = _metric(app, "HBM read + write")
    seq = [w for w in app.number_input if w.label == "query length"][0]
    seq.set_value(8192).run()
    seq_k = [w for w in app.number_input if w.label == "key/value length"][0]
    seq_k.set_value(8192).run()
    assert not app.exception
    assert _metric(app, "HBM read + write") != before


def test_bad_input_is_an_error_message_not_a_traceback(app):
    heads = [w for w in app.number_input if w.label == "heads"][0]
    heads.set_value(6).run()  # kv heads stays 16 > 6: invalid
    assert not app.exception
    assert any("kv_heads" in e.value for e in app.error)


def test_tiles_that_do_not_fit_are_explained(app):
    app.checkbox[1].check().run()
    [w for w in app.number_input if w.label.startswith("bq")][0].set_value(512).run()
    assert not app.exception
    assert any("SRAM" in e.value for e in app.error)
    assert app.get("plotly_chart")  # the rest of the page still works


def test_figure_has_one_bar_group_per_algorithm(app):
    spec = json.loads(app.get("plotly_chart")[0].proto.spec)
    xs = {tuple(trace["x"]) for trace in spec["data"]}
    assert xs == {("standard", "fa1", "fa2")}
