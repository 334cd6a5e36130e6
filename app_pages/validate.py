"""Validate: recorded GPU measurements next to the simulator's predictions."""

import streamlit as st

from hbmsim import figures
from hbmsim.validation import RESULTS_DIR, load_results, summary, summary_by_kind

st.title("Validate against real GPUs")
files, problems = load_results()
for msg in problems:
    st.warning(msg)
if not files:
    st.info(
        "No GPU measurements are recorded yet: kernels/results/ holds no results file. A "
        "validation run on a machine with an NVIDIA GPU writes one JSON file there (GPU, "
        "versions, and for each kernel configuration the measured and predicted time and "
        "DRAM bytes); this page then compares them."
    )
for f in files:
    st.subheader(f"{f.gpu} ({f.date}) — {f.path.name}")
    s = summary(f.configs)
    cols = st.columns(4)
    cols[0].metric("configurations", s["configs"])
    cols[1].metric("median |time error|", f"{s['time_median_abs_pct_error']:.1f}%")
    cols[2].metric("max |time error|", f"{s['time_max_abs_pct_error']:.1f}%")
    cols[3].metric("rank correlation", f"{s['time_spearman']:.2f}")
    st.dataframe(
        [
            {
                "kernel": kind,
                "configurations": k["configs"],
                "median |time error| %": round(k["time_median_abs_pct_error"], 1),
                "max |time error| %": round(k["time_max_abs_pct_error"], 1),
                "rank correlation": round(k["time_spearman"], 2),
                "rank correlation across tiles": ", ".join(
                    f"{r:.2f}" for r in k["tile_sweep_spearman"]
                ),
            }
            for kind, k in summary_by_kind(f.configs).items()
        ],
        hide_index=True,
        key=f"kinds_{f.path.name}",
    )
    st.plotly_chart(
        figures.validation_scatter(f.configs), width="stretch", key=f"val_{f.path.name}"
    )
    st.dataframe(f.configs, hide_index=True)
    st.download_button(
        "Download this file",
        f.path.read_bytes(),
        file_name=f.path.name,
        mime="application/json",
        key=f"dl_{f.path.name}",
    )
try:
    import cupy

    gpu = cupy.cuda.is_available()
except Exception:  # noqa: BLE001 - CuPy missing or without a driver: no live run here
    gpu = False
if gpu:
    if st.button("Run the validation on this GPU (several minutes)"):
        import sys
        import tempfile

        sys.path.insert(0, str(RESULTS_DIR.parent.parent))
        from kernels import validate

        with st.spinner("Measuring and predicting..."), tempfile.TemporaryDirectory() as tmp:
            validate.main(["--out", tmp, "--results-dir", str(RESULTS_DIR)])
        st.rerun()
else:
    st.caption(
        "Live validation needs CuPy and an NVIDIA GPU; this machine has none. "
        f"Results directory: {RESULTS_DIR.name}/"
    )
