"""Is a latent-K/V (MLA) attention call bandwidth- or compute-bound? Its arithmetic intensity
against the GPU's ridge point, in closed form.

Why a closed form beside the counts: the textbook programs run one CTA per (batch, query
head), so their counted HBM accesses (paper convention) read the latent cache once per query
head. A kernel built for MLA decoding (FlashMLA) packs a request's query heads (and query
tokens) into one tile and reads each latent row once per request, and that traffic decides
the bound. FlashMLA's deep dive (docs/20250422-new-kernel-deep-dive.md, "A Theoretical
Analysis of the MLA Algorithm") writes it out: FLOPs 2 h_q s_q s_k (d_k + d_v), bytes
sizeof(bf16) (h_q s_q d_k + s_k d_k + h_q s_q d_v), so the intensity is about
h_q s_q (d_k + d_v) / d_k per request, and the same per request at any batch (each request
has its own cache); benchmark/bench_flash_mla.py counts both the same way. The ridge is the
GPU's dense matrix rate for the dtype over its HBM bandwidth (datasheet peaks, as the preset
gives them); the deep dive's H800 figures (865 TFLOP/s throttled, 3.35 TB/s) put it at
h_q s_q = 128 by its approximation (d_k + d_v) / d_k ~ 2.

Ignored: L2 (a latent row is read from HBM once per request, never again), the split-KV
combine's partial outputs, the softmax's vector work, and masking beyond the FLOPs it hides.
"""

from __future__ import annotations

from ..gpu.hardware import Hardware
from ..problem.attention import Problem

SOURCE = (
    "FlashMLA docs/20250422-new-kernel-deep-dive.md (theoretical analysis) and "
    "benchmark/bench_flash_mla.py (FLOPS and bytes)"
)


def latent_roofline(p: Problem, hw: Hardware) -> dict:
    """Intensity of `p` with each latent row read once per request, the GPU's ridge, and which
    side of it the call falls on. `p` must have latent K/V."""
    if not p.latent_kv:
        raise ValueError("latent_roofline needs a problem with latent K/V")
    rows = p.batch * p.heads * p.seq_q  # query rows, each reading d columns of Q, writing dv
    cache = p.batch * p.kv_heads * p.seq_k  # latent rows, read once per request
    nbytes = p.itemsize * (rows * p.head_dim + cache * p.head_dim + rows * p.dv)
    flops = p.attention_flops
    intensity = flops / nbytes
    matrix = hw.matrix_flops_per_s[p.dtype]
    ridge = matrix / hw.hbm_bytes_per_s
    return {
        "flops": flops,
        "bytes": nbytes,
        "intensity_flop_per_byte": intensity,
        "ridge_flop_per_byte": ridge,
        "bound": "compute" if intensity >= ridge else "memory",
        "time_s": max(flops / matrix, nbytes / hw.hbm_bytes_per_s),
        "source": SOURCE,
    }


def latent_roofline_text(r: dict) -> str:
    """The roofline in one line, as the text report prints it."""
    return (
        f"latent K/V read once per request: {r['intensity_flop_per_byte']:.0f} flop/B vs the "
        f"ridge's {r['ridge_flop_per_byte']:.0f} flop/B: {r['bound']}-bound "
        f"({r['bytes']:,} B, {r['flops']:,} flops)"
    )
