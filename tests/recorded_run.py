"""A measurements.json as kernels/validate.py writes it, for tests that read recorded runs."""

from hbmsim import get_hardware


def measurements_doc(configs: list[dict], sdpa_seq: int, **calibration) -> dict:
    """A GPU run on an H200-like test GPU: its device record, the configurations given, one
    SDPA timing at `sdpa_seq` and a calibration from the preset (plus any rates given)."""
    h200 = get_hardware("h200")
    return {
        "device": {
            "gpu": "Test GPU",
            "sm_count": 132,
            "l2_bytes": h200.l2_bytes,
            "driver": 0,
            "cuda_runtime": 0,
            "cupy": "none",
            "date": "2026-01-01",
        },
        "preset": "h200",
        "correctness": [],
        "ncu": {"available": False},
        "sdpa": [{"seq": sdpa_seq, "head_dim": 64, "causal": False, "time_s": 1.0e-4}],
        "configs": configs,
        "calibration": {
            "hbm_bytes_per_s": h200.hbm_bytes_per_s,
            "l2_bytes_per_s": h200.l2_bytes_per_s,
            "hbm_latency_s": h200.hbm_latency_s,
            "l2_latency_s": h200.l2_latency_s,
            "launch_overhead_s": h200.launch_overhead_s,
            "scalar_fma_flops_per_s": 50e12,
            **calibration,
        },
    }
