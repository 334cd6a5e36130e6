"""A Plotly figure dict laid out in pixels: many small axes placed exactly.

Why pixels: the walkthrough draws tiles as square markers whose size is in pixels, so the
grids' axes must be placed where those squares tile them without gaps or overlap.
"""

from __future__ import annotations

AXIS = dict(showgrid=False, zeroline=False, showticklabels=False, fixedrange=True)


class Canvas:
    """`width_px` x `height_px` of plot area; positions are pixels from its top-left corner."""

    def __init__(self, width_px: float, height_px: float, layout: dict):
        self.width_px, self.height_px = width_px, height_px
        self.layout = dict(layout, annotations=[])
        self.data: list[dict] = []
        self._axes = 0

    def fx(self, x_px: float) -> float:
        return x_px / self.width_px

    def fy(self, y_px: float) -> float:
        return 1.0 - y_px / self.height_px

    def axes(self, left, top, width, height, x_range, y_range) -> tuple[str, str]:
        """A new x/y axis pair over the box, with the given data ranges; returns their ids."""
        self._axes += 1
        sfx = "" if self._axes == 1 else str(self._axes)
        x_dom = [self.fx(left), self.fx(left + width)]
        y_dom = [self.fy(top + height), self.fy(top)]
        self.layout[f"xaxis{sfx}"] = dict(AXIS, domain=x_dom, range=x_range, anchor=f"y{sfx}")
        self.layout[f"yaxis{sfx}"] = dict(AXIS, domain=y_dom, range=y_range, anchor=f"x{sfx}")
        return f"x{sfx}", f"y{sfx}"

    def text(self, text: str, x_px: float, y_px: float, anchor: str = "center", **font) -> None:
        """A fixed caption whose bottom sits at y_px."""
        self.layout["annotations"].append(
            dict(
                text=text,
                x=self.fx(x_px),
                y=self.fy(y_px),
                xref="paper",
                yref="paper",
                xanchor=anchor,
                yanchor="bottom",
                showarrow=False,
                font=font or dict(size=12),
            )
        )

    def add(self, trace: dict) -> int:
        """Appends a trace; returns its index (what animation frames refer to)."""
        self.data.append(trace)
        return len(self.data) - 1

    def label(self, text: str, left, top, width, height, **font) -> int:
        """A one-line text trace (animatable, unlike an annotation) over the box."""
        xa, ya = self.axes(left, top, width, height, [0, 1], [0, 1])
        return self.add(
            dict(
                type="scatter",
                mode="text",
                x=[0.0],
                y=[0.5],
                text=[text],
                textposition="middle right",
                textfont=font,
                xaxis=xa,
                yaxis=ya,
                showlegend=False,
                hoverinfo="skip",
            )
        )
