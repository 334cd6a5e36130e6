"""The readable text report `hbmsim simulate` and `hbmsim replay` print without --json."""

from __future__ import annotations

from .. import fmt
from ..engine.timing import TIMINGS
from ..interpret.intensity import latent_roofline_text


def render_timing(timing) -> str:
    lines = [
        f"simulated time  {fmt.seconds(timing.reported_s):>10}   ({timing.engine_mode} path, L2 "
        f"{'on' if timing.l2 else 'off'}; timing {timing.timing}: {TIMINGS[timing.timing]})",
        f"DRAM read       {fmt.bytes_(timing.dram_read_bytes):>10}   after L2",
        f"DRAM write      {fmt.bytes_(timing.dram_write_bytes):>10}",
        f"L2 hits         {fmt.bytes_(timing.l2_hit_bytes):>10}",
        f"achieved DRAM   {fmt.bytes_(timing.achieved_dram_bytes_per_s):>10}/s",
        *_host_lines(timing),
        "",
        fmt.table(
            ["kernel", "time", "CTAs/SM", "waves", "DRAM read", "DRAM write", "L2 hits"],
            [
                [
                    k.name,
                    fmt.seconds(k.time_s),
                    str(k.ctas_per_sm),
                    f"{k.waves:,}",
                    fmt.bytes_(k.dram_read_bytes),
                    fmt.bytes_(k.dram_write_bytes),
                    fmt.bytes_(k.l2_hit_bytes),
                ]
                for k in timing.kernels
            ],
        ),
    ]
    if stretched := [k.name for k in timing.kernels if k.stretched]:
        lines.append(
            f"stretched: {', '.join(stretched)} (long causal or windowed loops, or past the "
            "step-by-step replay's work bound: each group timed alone and stretched while the "
            "links are oversubscribed; how far that departs from the replay: "
            "docs/engine-internals.md, 'How the fast path departs from the replay')"
        )
    return "\n".join(lines)


def _headline(plan) -> str:
    """The program, GPU and problem in one line."""
    p = plan.problem
    kv = f" (kv {p.kv_heads})" if p.kv_heads != p.heads else ""
    return (
        f"{plan.algo} on {plan.hardware.name}: batch {p.batch} x heads {p.heads}{kv}, "
        f"seq {p.seq_q:,} x {p.seq_k:,}, d {p.head_dim}"
        + ("" if p.plain_kv else f", dv {p.dv}")
        + (", latent K/V" if p.latent_kv else "")
        + f", {p.dtype}"
        + (", causal" if p.causal else "")
        + (f", {p.window_text()}" if p.windowed else "")
        + (f", dropout {p.dropout:g}" if p.dropout else "")
    )


def render_result(result) -> str:
    """The readable table `hbmsim simulate` prints without --json."""
    plan = result.plan
    lines = [_headline(plan), f"tiles: {plan.tiles.describe()}"]
    lines += [f"note: {n}" for n in plan.notes]
    lines += [
        "",
        f"HBM read        {fmt.bytes_(result.hbm_read_bytes):>10}   ({result.hbm_read_bytes:,} B)",
        f"HBM write       {fmt.bytes_(result.hbm_write_bytes):>10}   "
        f"({result.hbm_write_bytes:,} B)",
        f"trips           {fmt.count(result.trips):>10}   ({result.trips:,} loads + stores)",
        f"flops           {fmt.count(result.flops):>10}   (matmul {fmt.count(result.matmul_flops)}"
        f", vector {fmt.count(result.vector_flops)}, exp {fmt.count(result.exp_ops)})",
        f"SRAM peak       {fmt.bytes_(result.sram_peak_bytes):>10}   per CTA, of "
        f"{fmt.bytes_(plan.hardware.sram_bytes_per_block)} per block",
        f"roofline time   {fmt.seconds(result.roofline_time_s):>10}",
    ]
    if "latent_roofline" in result.extra:
        lines.append(f"MLA roofline    {latent_roofline_text(result.extra['latent_roofline'])}")
    verify = result.extra.get("verify")
    if verify:
        lines.append(
            f"verify          max |O - naive| = {verify['max_abs_err']:.3g}, "
            f"relative {verify['rel_err']:.3g}"
        )
    lines += [
        "",
        "counted (HBM accesses, paper convention: every load and store is off-chip)"
        + ("" if len(result.by_pass) < 2 else "\n" + _passes_table(result)),
        fmt.table(
            ["kernel", "CTAs", "read", "write", "trips", "flops", "SRAM/CTA", "roofline", "bound"],
            [
                [
                    k.name,
                    f"{k.ctas:,}",
                    fmt.bytes_(k.read_bytes),
                    fmt.bytes_(k.write_bytes),
                    fmt.count(k.trips),
                    fmt.count(k.flops),
                    fmt.bytes_(k.sram_bytes),
                    fmt.seconds(k.roofline_time_s),
                    k.bound,
                ]
                for k in result.kernels
            ],
        ),
    ]
    lines += [  # where a kernel's matmuls run slower than the plain tensor-core peak
        f"{k.name} matmuls: {k.matmul_units}, {fmt.count(k.matmul_rate_flops_per_s)} FLOP/s"
        for k in result.kernels
        if k.matmul_flops and k.matmul_units != "tensor cores"
    ]
    lines += [
        "",
        fmt.table(
            ["tensor", "read", "write", "trips"],
            [
                [name, fmt.bytes_(t.read_bytes), fmt.bytes_(t.write_bytes), fmt.count(t.trips)]
                for name, t in result.by_tensor.items()
            ],
        ),
    ]
    timing = result.extra.get("_engine_result")
    if timing is not None:
        lines += [
            "",
            "simulated (SimPy engine: occupancy, L2, shared bandwidth, overlap)",
            render_timing(timing),
        ]
    elif "engine" in result.extra:
        lines += ["", f"engine skipped: {result.extra['engine']['skipped']}"]
    return "\n".join(lines)


def _passes_table(result) -> str:
    passes = result.extra.get("passes", result.by_pass)
    rows = [
        [
            name,
            fmt.bytes_(t["hbm_read_bytes"]),
            fmt.bytes_(t["hbm_write_bytes"]),
            fmt.count(t["trips"]),
            fmt.count(t["flops"]),
            fmt.seconds(t["roofline_time_s"]),
            fmt.seconds(t["time_s"]) if "time_s" in t else "-",
        ]
        for name, t in passes.items()
    ]
    total = [
        sum(t[k] for t in passes.values())
        for k in ("hbm_read_bytes", "hbm_write_bytes", "trips", "flops", "roofline_time_s")
    ]
    times = [t["time_s"] for t in passes.values() if "time_s" in t]
    rows.append(
        [
            "fwd+bwd",
            fmt.bytes_(total[0]),
            fmt.bytes_(total[1]),
            fmt.count(total[2]),
            fmt.count(total[3]),
            fmt.seconds(total[4]),
            fmt.seconds(sum(times)) if len(times) == len(passes) else "-",
        ]
    )
    return fmt.table(["pass", "read", "write", "trips", "flops", "roofline", "simulated"], rows)


def _host_lines(timing) -> list[str]:
    """For a call a framework issues (the library mirrors): the host's share, and one call
    timed by itself (host.py), which is what a measurement synchronising after every
    call sees; nothing for a program with no host to wait for."""
    if not timing.host_time_s:
        return []
    bound = "host-bound" if timing.host_bound else "GPU-bound"
    return [
        f"host            {fmt.seconds(timing.host_time_s):>10}   launches and framework ops "
        f"(in a timed loop the call is {bound})",
        f"kernels alone   {fmt.seconds(timing.gpu_s):>10}   the GPU's time (--timing kernel)",
        f"in a timed loop {fmt.seconds(timing.time_s):>10}   the longer of host and GPU "
        "(--timing loop)",
        f"one call alone  {fmt.seconds(timing.alone_s):>10}   timed by itself, the GPU waiting "
        "for the host's launches (--timing alone)",
    ]
