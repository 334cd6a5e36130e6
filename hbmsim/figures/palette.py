"""One colour per algorithm and implementation, the same in every chart.

Why a table and not Plotly's default cycle: the cycle hands colours out in the order series
appear, so an algorithm changed colour when another was missing from a chart. Standard (eager)
paths are warm colours, FlashAttention cool ones, and no two are neighbours on the colour wheel
(FA2's old pink was hard to tell from standard's red).
"""

from __future__ import annotations

ALGO_COLORS = {
    # textbook programs
    "standard": "#d62728",  # red
    "fa1": "#ff7f0e",  # orange
    "fa2": "#1f77b4",  # blue
    "split-kv": "#9467bd",  # purple
    # the project's CUDA kernels' tile programs (and their kinds in validation results)
    "standard-kernel": "#8c564b",  # brown
    "fa2-kernel": "#17becf",  # cyan
    "fa2-wmma-kernel": "#2ca02c",  # green
    "naive": "#8c564b",
    "cublas": "#7f7f7f",  # grey
    "flash": "#17becf",
    "flash-wmma": "#2ca02c",
    # implementation mirrors
    "torch-eager": "#e377c2",  # magenta: an eager path, not a textbook one
    "flash-attn-1": "#bcbd22",  # olive
    "flash-attn-2": "#393b79",  # navy
    "flash-attn-3": "#637939",  # dark green
    "flash-decoding": "#843c39",  # maroon
}
FALLBACK = ("#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94")


def algo_color(name: str) -> str:
    """The colour of `name`; a suffix after a space ("fa2 (counted)") keeps the base colour,
    and an unknown name gets a colour from its spelling, so it too never changes."""
    base = name.split(" ")[0]
    if base in ALGO_COLORS:
        return ALGO_COLORS[base]
    return FALLBACK[sum(base.encode()) % len(FALLBACK)]
