"""Roofline: each kernel of standard and flash attention against the GPU's limits.

The download keeps every count exact (JSON integers have no size limit) and strict (no NaN);
the table shows counts past 64-bit integers (large batches x heads x sequences) as floats,
which is all a dataframe column can hold.
"""

import json

import streamlit as st

from app_pages import data
from app_pages.state import settings
from hbmsim import HbmsimError, figures

INT64_MAX = (1 << 63) - 1


def table(rows: list[dict]) -> list[dict]:
    """The rows for display: a column holding an integer past int64 becomes floats."""
    wide = {k for r in rows for k, v in r.items() if isinstance(v, int) and abs(v) > INT64_MAX}
    return [{k: float(v) if k in wide else v for k, v in r.items()} for r in rows]


st.title("Roofline")
s = settings()
points, problems = [], []
for algo in ("standard", s.algo):
    try:
        r = data.result(s, algo)
    except HbmsimError as exc:
        problems.append(f"{algo}: {exc}")
        continue
    timing = r.extra.get("_engine_result")
    if timing is None:
        st.info(
            f"{algo}: not simulated ({r.extra['engine']['skipped']}); plotted at its "
            "roofline time against counted HBM bytes instead."
        )
        for kc in r.kernels:
            hbm = kc.read_bytes + kc.write_bytes
            points.append(
                {
                    "algo": f"{algo} (counted)",
                    "kernel": kc.name,
                    "flops": kc.flops,
                    "dram_bytes": hbm,
                    "time_s": kc.roofline_time_s,
                    "intensity": kc.flops / hbm if hbm else None,
                    "flops_per_s": kc.flops / kc.roofline_time_s if kc.roofline_time_s else 0.0,
                }
            )
        continue
    for kc, kt in zip(r.kernels, timing.kernels, strict=True):
        dram = kt.dram_read_bytes + kt.dram_write_bytes
        points.append(
            {
                "algo": algo,
                "kernel": kc.name,
                "flops": kc.flops,
                "dram_bytes": dram,
                "time_s": kt.time_s,
                "intensity": kc.flops / dram if dram else None,
                "flops_per_s": kc.flops / kt.time_s if kt.time_s else 0.0,
            }
        )
for msg in problems:
    st.error(msg)
if points:
    hw = s.hardware()
    st.plotly_chart(
        figures.roofline(points, hw.matrix_rate(s.dtype), hw.hbm_bytes_per_s, hw.l2_bytes_per_s),
        width="stretch",
        key="roofline",
    )
    st.caption(
        "x: flops per byte that reached DRAM (after the L2 model); y: flops over the "
        "kernel's simulated time. Points under the HBM roof are memory-bound."
    )
    st.dataframe(table(points), hide_index=True)
    st.download_button(
        "Download (JSON)",
        json.dumps(points, indent=1, allow_nan=False),
        file_name="roofline.json",
        mime="application/json",
    )
