"""How well the simulator predicts real GPUs: the headline of each comparison (median, worst,
points past the goal) and the charts of predicted against measured time, per kernel kind (our
GPU runs) and per implementation (published timings). Times are drawn in seconds with ticks
and hovers in units by size.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import plotly.graph_objects as go

from .. import fmt
from ..validation.gpu_runs import by_kind
from ..validation.published import TARGET_WORST
from .axes import loglog
from .palette import algo_color

SPEEDUP_GOAL = 0.10  # a predicted speedup within 10% of the measured one (validation.published)


@dataclass(frozen=True)
class Headline:
    """One comparison in three numbers: error = predicted / measured - 1."""

    points: int  # points in the comparison
    simulated: int  # points with a prediction
    median_abs_error: float | None
    worst_error: float | None  # signed: the error of largest magnitude
    past_goal: int  # points whose |error| is past `goal`
    goal: float

    def words(self) -> str:
        """'worst -52% · 9 of 244 past ±40%' (and how many were not simulated, if any)."""
        if self.worst_error is None:
            return "nothing simulated"
        parts = [
            f"worst {100 * self.worst_error:+.0f}%",
            f"{self.past_goal:,} of {self.simulated:,} past ±{100 * self.goal:.0f}%",
        ]
        if self.simulated < self.points:
            parts.append(f"{self.points - self.simulated:,} not simulated")
        return " · ".join(parts)


def headline(errors: list[float | None], goal: float = TARGET_WORST) -> Headline:
    """Median |error|, worst error and the points past `goal` (None: a point not simulated)."""
    done = [e for e in errors if e is not None]
    return Headline(
        points=len(errors),
        simulated=len(done),
        median_abs_error=statistics.median(abs(e) for e in done) if done else None,
        worst_error=max(done, key=abs) if done else None,
        past_goal=sum(abs(e) > goal for e in done),
        goal=goal,
    )


def point_errors(rows: list[dict]) -> list[float | None]:
    """Each published-style row's error (None where it was not simulated)."""
    return [r["error"] if r.get("predicted_time_s") else None for r in rows]


def config_errors(configs: list[dict]) -> list[float]:
    """Each GPU-run configuration's time error."""
    return [c["predicted_time_s"] / c["measured_time_s"] - 1 for c in configs]


def comparison_title(rows: list[dict]) -> str:
    """What a comparison of published-style rows compares, in a few words: timings this
    repository measured (their citation says "Measured by kernels/...") are "our GPU run"."""
    ours = [r for r in rows if r["citation"].startswith("Measured by kernels/")]
    if ours and len(ours) == len(rows):
        gpus = sorted({r["gpu"] for r in ours})
        return f"Libraries vs our GPU run ({', '.join(gpus)})"
    return "Libraries vs published timings found later"


def speedup_misses(speedups: list[dict], goal: float = SPEEDUP_GOAL) -> tuple[int, int]:
    """(speedups predicted more than `goal` off the measured one, speedups predicted)."""
    done = [sp for sp in speedups if sp.get("error") is not None]
    return sum(abs(sp["error"]) > goal for sp in done), len(done)


def validation_scatter(configs: list[dict]) -> go.Figure:
    """Predicted vs measured time, one point per configuration (a colour per kernel kind), with
    the y = x line."""
    fig = go.Figure()
    measured = [c["measured_time_s"] for c in configs]
    predicted = [c["predicted_time_s"] for c in configs]
    if measured:
        lo, hi = min(measured + predicted), max(measured + predicted)
        fig.add_scatter(
            x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(color="gray", dash="dot")
        )
    for kind, group in by_kind(configs).items():  # one trace per kernel kind
        fig.add_scatter(
            x=[c["measured_time_s"] for c in group],
            y=[c["predicted_time_s"] for c in group],
            mode="markers",
            name=kind,
            marker=dict(color=algo_color(kind)),
            text=[
                f"{c['name']}<br>measured {fmt.seconds(c['measured_time_s'])}, predicted "
                f"{fmt.seconds(c['predicted_time_s'])} "
                f"({100 * (c['predicted_time_s'] / c['measured_time_s'] - 1):+.0f}%)"
                for c in group
            ],
            hovertemplate="%{text}<extra></extra>",
        )
    ticks = measured + predicted
    loglog(
        fig,
        "Predicted vs measured time",
        "measured time",
        "predicted time",
        420,
        ticks,
        ticks,
        fmt.seconds,
        fmt.seconds,
    )
    return fig


def published_scatter(
    rows: list[dict], title: str = "Published timings: predicted vs measured"
) -> go.Figure:
    """Published timings (or timings in their format: the extra checks): predicted vs
    measured, a colour per implementation, the y = x line and a ±40% band; hover names the
    series and the paper or run it comes from."""
    fig = go.Figure()
    done = [r for r in rows if r["predicted_time_s"]]
    if done:
        values = [r["measured_time_s"] for r in done]
        values += [r["predicted_time_s"] for r in done]
        lo, hi = min(values) / 1.5, max(values) * 1.5
        for factor, name in ((1.0, "y = x"), (1.4, "+40%"), (0.6, "-40%")):
            fig.add_scatter(
                x=[lo, hi],
                y=[lo * factor, hi * factor],
                mode="lines",
                name=name,
                line=dict(color="gray", dash="dot" if factor == 1 else "dash", width=1),
                hoverinfo="skip",
            )
    impls: dict[str, list[dict]] = {}
    for r in done:
        impls.setdefault(r["impl"], []).append(r)
    for impl, group in sorted(impls.items()):
        fig.add_scatter(
            x=[r["measured_time_s"] for r in group],
            y=[r["predicted_time_s"] for r in group],
            mode="markers",
            name=impl,
            marker=dict(color=algo_color(impl)),
            text=[
                f"{r['series']}, seq {r['problem']['seq_k']:,}, batch {r['problem']['batch']}"
                f"<br>measured {fmt.seconds(r['measured_time_s'])}, predicted "
                f"{fmt.seconds(r['predicted_time_s'])} (error {100 * r['error']:+.0f}%)"
                f"<br>{_cut(r['citation'])}"
                for r in group
            ],
            hovertemplate="%{text}<extra></extra>",
        )
    times = [r[k] for r in done for k in ("measured_time_s", "predicted_time_s")]
    loglog(
        fig, title, "measured time", "predicted time", 480, times, times, fmt.seconds, fmt.seconds
    )
    return fig


def _cut(text: str, width: int = 90) -> str:
    """A citation on hover lines of at most `width` characters, whole words, nothing cut."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "<br>".join([*lines, line])
