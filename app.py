"""hbmsim in the browser: `streamlit run app.py`.

The app only gathers inputs, calls cached hbmsim functions and shows figures from
hbmsim.figures; no simulation logic or figure building lives here.
"""

from __future__ import annotations

import streamlit as st

from hbmsim import ALGOS, PRESETS, HbmsimError, Problem, figures, fmt, get_hardware, simulate

st.set_page_config(page_title="hbmsim", layout="wide")


# cache_resource, not cache_data: a Result holds its plan's tile programs (functions), which
# cannot be pickled; results are frozen, so sharing one object between sessions is safe.
@st.cache_resource(show_spinner=False, max_entries=256)
def _simulate(problem: dict, gpu: str, overrides: dict, algo: str, bq, bk):
    hw = get_hardware(gpu)
    if overrides:
        hw = hw.with_overrides(**overrides)
    return simulate(Problem.from_dict(problem), hw, algo, bq, bk)


def sidebar_ui() -> tuple[dict, str, dict, dict]:
    """Problem, GPU, overrides and tiles from the sidebar, as plain values."""
    sb = st.sidebar
    sb.header("GPU")
    gpu = sb.selectbox("GPU preset", list(PRESETS), index=list(PRESETS).index("h100-sxm"))
    hw = PRESETS[gpu]
    sram_kib = sb.number_input(
        "SRAM per SM (KiB)", min_value=2, max_value=4096, value=hw.sram_bytes_per_sm // 1024, step=4
    )
    overrides = {}
    if sram_kib * 1024 != hw.sram_bytes_per_sm:
        overrides["sram_bytes_per_sm"] = int(sram_kib) * 1024
    sb.header("Problem")
    problem = dict(
        batch=int(sb.number_input("batch", 1, 65536, 1)),
        heads=int(sb.number_input("heads", 1, 4096, 16)),
        kv_heads=int(sb.number_input("kv heads (GQA/MQA)", 1, 4096, 16)),
        seq_q=int(sb.number_input("query length", 1, 1 << 24, 4096, step=256)),
        seq_k=int(sb.number_input("key/value length", 1, 1 << 24, 4096, step=256)),
        head_dim=int(sb.number_input("head dim", 1, 1024, 64)),
        dtype=sb.selectbox("dtype", ["fp16", "bf16", "fp32"]),
        causal=sb.checkbox("causal"),
        dropout=float(sb.number_input("dropout", 0.0, 0.99, 0.0, step=0.05)),
    )
    sb.header("Tiles")
    custom = sb.checkbox("custom tiles (else each algorithm's default)")
    tiles = {"bq": None, "bk": None}
    if custom:
        tiles = {
            "bq": int(sb.number_input("bq (rows of Q per tile)", 1, 65536, 64)),
            "bk": int(sb.number_input("bk (rows of K/V per tile)", 1, 65536, 64)),
        }
    return problem, gpu, overrides, tiles


def main() -> None:
    st.title("hbmsim: where do attention's bytes go?")
    st.caption(
        "Exact HBM traffic of standard attention and FlashAttention tile programs. "
        "HBM figures follow the paper convention: every load and store is off-chip."
    )
    problem, gpu, overrides, tiles = sidebar_ui()
    results, errors = [], []
    for algo in ALGOS:
        try:
            results.append(_simulate(problem, gpu, overrides, algo, tiles["bq"], tiles["bk"]))
        except HbmsimError as exc:
            errors.append(f"{algo}: {exc}")
    for e in errors:
        st.error(e)
    if not results:
        st.info("Nothing to show: fix the inputs named above.")
        return
    cols = st.columns(len(results))
    for col, r in zip(cols, results, strict=True):
        col.subheader(r.plan.algo)
        col.metric("HBM read + write", fmt.bytes_(r.hbm_bytes))
        col.metric("trips", fmt.count(r.trips))
        col.metric("roofline time", fmt.seconds(r.roofline_time_s))
        col.caption(f"tiles {r.plan.tiles.describe()}; SRAM {fmt.bytes_(r.sram_peak_bytes)}/CTA")
    st.plotly_chart(figures.traffic_by_tensor(results), width="stretch")
    st.plotly_chart(figures.kernel_times(results), width="stretch")
    st.dataframe(
        [
            {"algo": r.plan.algo, **{k: v for k, v in kc.to_dict().items() if k != "by_tensor"}}
            for r in results
            for kc in r.kernels
        ],
        hide_index=True,
    )


main()
