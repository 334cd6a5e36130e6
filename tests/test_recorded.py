"""The recorded comparisons (the published set's, and the extra checks in kernels/results/extra/)
are what the model predicts today, on a stratified sample of their points, and no group's
accuracy slips unnoticed when they are recorded again.

Why a sample, and which: re-predicting every point takes minutes, and the cheapest point of a
group says nothing about its long, causal or backward points, where the engine takes other
paths (stretched kernels, the backward's atomics, skipped waves). The sample takes, from every
stratum (a comparison's source, implementation, pass, mask), its shortest and its longest
point, so each path a recorded point runs is re-run.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from hbmsim.validation.published import load_extra_checks, load_published, load_recorded, predict

ROOT = Path(__file__).resolve().parent.parent
BASELINE = Path(__file__).resolve().parent / "data" / "recorded_medians.json"
MEDIAN_SLACK = 0.01  # one point of median |error|


def _comparisons() -> list[tuple[str, dict, list]]:
    """(name, recorded comparison, the points of the set it was made from) for each."""
    out = []
    recorded = load_recorded()
    assert recorded is not None, "hbmsim/data/published_predictions.json is missing"
    out.append(("published", recorded, load_published()[0]))
    extra, problems = load_extra_checks()
    assert not problems, problems
    for path, comparison in extra:
        out.append((path.name, comparison, load_published(ROOT / comparison["set"])[0]))
    return out


def _size(r: dict) -> int:
    p = r["problem"]
    return p["batch"] * p["heads"] * p["seq_q"] * p["seq_k"]


def _stratified(recorded: dict) -> list[dict]:
    """Per stratum (source, implementation, pass, causal, one query token or not) the shortest
    and the longest recorded point that has a prediction."""
    strata: dict[tuple, list[dict]] = {}
    for r in recorded["points"]:
        if r["predicted_time_s"] is None:
            continue
        p = r["problem"]
        key = (r["source"], r["impl"], p["pass"], p["causal"], p["seq_q"] == 1)
        strata.setdefault(key, []).append(r)
    sample = []
    for rows in strata.values():
        rows.sort(key=_size)
        sample += [rows[0]] if len(rows) == 1 else [rows[0], rows[-1]]
    return sample


def test_a_stratified_sample_of_every_recorded_comparison_is_predicted_as_recorded():
    """At least 40 points, causal and not, forward, backward and both, the longest of each
    series among them, every implementation a comparison records: each re-predicted gives
    the time recorded (to float rounding)."""
    sampled, impls, kinds = 0, set(), set()
    for name, recorded, points in _comparisons():
        sample = _stratified(recorded)
        by_id = {p.id: p for p in points}
        again = predict([by_id[r["id"]] for r in sample])
        for new, old in zip(again, sample, strict=True):
            assert new["predicted_time_s"] == pytest.approx(old["predicted_time_s"], rel=1e-9), (
                name,
                old["id"],
                old["source"],
                old["impl"],
            )
            p = old["problem"]
            impls.add(old["impl"])
            kinds |= {p["pass"], "causal" if p["causal"] else "full"}
            kinds |= {"long"} if p["seq_k"] >= 8192 else set()
        sampled += len(sample)
    assert sampled >= 40
    assert {"torch-eager", "flash-attn-1", "flash-attn-2", "flash-attn-3"} <= impls
    assert {"fwd", "bwd", "fwd+bwd", "causal", "full", "long"} <= kinds


def _medians() -> dict[str, float]:
    """Median |error| per (comparison, source, implementation), from the recorded files."""
    out = {}
    for name, recorded, _points in _comparisons():
        groups: dict[str, list[float]] = {}
        for r in recorded["points"]:
            if r["error"] is not None:
                groups.setdefault(f"{name} | {r['source']} | {r['impl']}", []).append(
                    abs(r["error"])
                )
        out |= {k: statistics.median(v) for k, v in groups.items()}
    return out


def test_no_groups_median_error_rose_more_than_a_point_over_the_baseline():
    """tests/data/recorded_medians.json holds each group's median |error| as last accepted:
    recording the comparisons again may lower a median (then lower the baseline with it) but
    not raise one by more than a point, and no group may vanish, without a visible change to
    the baseline (which CHANGELOG.md then explains)."""
    baseline = json.loads(BASELINE.read_text())
    now = _medians()
    assert set(baseline) <= set(now), sorted(set(baseline) - set(now))
    risen = {
        k: (round(baseline[k], 4), round(now[k], 4))
        for k in baseline
        if now[k] > baseline[k] + MEDIAN_SLACK
    }
    assert not risen, risen
