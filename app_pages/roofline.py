"""Roofline: each kernel of standard and flash attention against the GPU's limits.

The download keeps every count exact (JSON integers have no size limit) and strict (no NaN);
the table (roofline.roofline_table) shows numbers as floats, which also carries counts past
64-bit integers (large batches x heads x sequences), in units its headers name.
"""

import json

import streamlit as st

from app_pages import data
from app_pages.state import settings, show_errors
from hbmsim import HbmsimError
from hbmsim.figures import roofline

st.title("Roofline")
s = settings()
points, problems = [], []
for algo in ("standard", s.algo):
    try:
        r = data.result(s, algo)
    except HbmsimError as exc:
        problems.append((algo, exc))
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
show_errors(problems)
if points:
    hw = s.hardware()
    st.plotly_chart(
        roofline.roofline(points, hw.matrix_rate(s.dtype), hw.hbm_bytes_per_s, hw.l2_bytes_per_s),
        width="stretch",
        key="roofline",
    )
    ridge = roofline.ridge(hw.matrix_rate(s.dtype), hw.hbm_bytes_per_s)
    st.caption(
        "x: flops per byte that reached DRAM (after the L2 model); y: flops over the "
        "kernel's simulated time. A kernel left of the ridge "
        f"({ridge:,.0f} flops per byte = peak {s.dtype} FLOP/s over HBM bandwidth) is "
        "memory-bound: more bandwidth, not more math, would speed it up. A point above the "
        "HBM roof got some of its bytes from L2 instead."
    )
    table = roofline.roofline_table(points)
    time_column = next(k for k in table[0] if k.startswith("time ("))  # its unit fits its size
    st.dataframe(
        table,
        hide_index=True,
        column_config={
            "flops": st.column_config.NumberColumn(format="compact"),
            "DRAM bytes": st.column_config.NumberColumn(format="compact"),
            time_column: st.column_config.NumberColumn(format="%.3g"),
            "flops per DRAM byte": st.column_config.NumberColumn(format="%.3g"),
            "achieved TFLOP/s": st.column_config.NumberColumn(format="%.3g"),
        },
    )
    st.download_button(
        "Download (JSON)",
        json.dumps(points, indent=1, allow_nan=False),
        file_name="roofline.json",
        mime="application/json",
    )
