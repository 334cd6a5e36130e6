"""The engine's timeline as a CSV file (`hbmsim simulate --timeline FILE`)."""

from __future__ import annotations

import csv

import numpy as np

from ..files.writer import open_atomic
from ..interpret.trace import OPS
from .result import LEVELS, TIMELINE_DTYPE, EngineResult, role_name


def write_timeline(result: EngineResult, path, field: str = "timeline") -> int:
    """The timeline as CSV (one row per op of a CTA group; in a warp-specialised kernel, one
    per warpgroup and phase of each compute step, its loads and stores the producer's),
    written whole or not at all (files/writer.py); returns the number of rows."""
    meta = result.meta
    kernels = [k["name"] for k in meta.get("kernels", [])]
    tensors = [t["name"] for t in meta.get("tensors", [])]
    ops = OPS
    rows = result.timeline if result.timeline is not None else np.zeros(0, TIMELINE_DTYPE)

    with open_atomic(path, field, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "start_s",
                "end_s",
                "kernel",
                "cta",
                "ctas",
                "sm",
                "op",
                "tensor",
                "region",
                "bytes",
                "level",
                "l2_hits",
                "role",
            ]
        )
        for r in rows:
            t = int(r["tensor"])
            ndim = len(meta["tensors"][t]["shape"]) if t >= 0 else 0
            region = ",".join(
                f"{a}:{b}" for a, b in zip(r["start"][:ndim], r["stop"][:ndim], strict=True)
            )
            w.writerow(
                [
                    f"{r['start_s']:.9e}",
                    f"{r['end_s']:.9e}",
                    kernels[r["kernel"]],
                    int(r["cta"]),
                    int(r["ctas"]),
                    int(r["sm"]),
                    ops[r["op"]],
                    tensors[t] if t >= 0 else "",
                    region,
                    int(r["bytes"]),
                    LEVELS[r["level"]],
                    int(r["l2_hits"]),
                    role_name(int(r["role"])),
                ]
            )
    return len(rows)
