"""How well the simulator predicts real GPUs, drawn: predicted against measured time, per kernel
kind (our GPU runs) and per implementation (published timings).
"""

from __future__ import annotations

import plotly.graph_objects as go

from ..validation.gpu_runs import by_kind
from .axes import loglog
from .palette import algo_color


def validation_scatter(configs: list[dict]) -> go.Figure:
    """Predicted vs measured time, one point per configuration (a colour per kernel kind), with
    the y = x line."""
    fig = go.Figure()
    measured = [c["measured_time_s"] * 1e6 for c in configs]
    predicted = [c["predicted_time_s"] * 1e6 for c in configs]
    if measured:
        lo, hi = min(measured + predicted), max(measured + predicted)
        fig.add_scatter(
            x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(color="gray", dash="dot")
        )
    for kind, group in by_kind(configs).items():  # one trace per kernel kind
        fig.add_scatter(
            x=[c["measured_time_s"] * 1e6 for c in group],
            y=[c["predicted_time_s"] * 1e6 for c in group],
            mode="markers",
            name=kind,
            marker=dict(color=algo_color(kind)),
            text=[c["name"] for c in group],
            hovertemplate="%{text}<br>measured %{x:.4g} µs<br>predicted %{y:.4g} µs<extra></extra>",
        )
    loglog(
        fig,
        "Predicted vs measured time",
        "measured (µs)",
        "predicted (µs)",
        420,
        measured,
        predicted,
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
        values = [r["measured_time_s"] * 1e3 for r in done]
        values += [r["predicted_time_s"] * 1e3 for r in done]
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
            x=[r["measured_time_s"] * 1e3 for r in group],
            y=[r["predicted_time_s"] * 1e3 for r in group],
            mode="markers",
            name=impl,
            marker=dict(color=algo_color(impl)),
            text=[
                f"{r['series']}, seq {r['problem']['seq_k']:,}, batch {r['problem']['batch']}"
                f"<br>error {100 * r['error']:+.0f}%<br>{r['citation'][:90]}"
                for r in group
            ],
            hovertemplate="%{text}<br>measured %{x:.4g} ms<br>predicted %{y:.4g} ms<extra></extra>",
        )
    ms = [r[k] * 1e3 for r in done for k in ("measured_time_s", "predicted_time_s")]
    loglog(
        fig,
        title,
        "measured (ms)",
        "predicted (ms)",
        480,
        ms,
        ms,
    )
    return fig
