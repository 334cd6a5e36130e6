"""The L2 model's memory budget: the accesses it decides one by one, estimated before the
workload is built and refused past the budget with the estimate (never cut).
"""

from __future__ import annotations

from ...errors import TooLargeToExecuteError
from ...gpu.occupancy import kernel_slots

# Peak memory per access decided (the stream's ids, bytes and order, the bulk test's arrays),
# the whole run's peak resident memory over the accesses it decided: 72-104 bytes on streams
# of 10-35 M accesses, 131 on the paper's configuration (1.47 M, 183 MB, the interpreter
# included), 155 on flash-attn 1.x causal at 16k tokens (10.6 M, its long programs' engine
# state included)
BYTES_PER_ACCESS = 160


def least_decided(plan, counts) -> int:
    """A lower bound on the accesses `hit_tables` decides for `plan` (with its counts), known
    before the workload is built: one CTA's of a one-class kernel (lockstep may decide it
    from that CTA; the budget is checked again once the workload is built), one CTA's per
    class of a kernel of several classes (classwave may decide it from one CTA of each run
    of a class's CTAs), and no more than every access or two waves' worth."""
    hw = plan.hardware
    out = 0
    for kernel, kc in zip(plan.kernels, counts.kernels, strict=True):
        slots = kernel_slots(hw, kernel)
        per_cta = -(-kc.trips // max(1, kc.ctas))
        if len(kernel.grid) == 1:
            out += per_cta
        else:  # classwave may decide one CTA a class (runs of a class's size at most)
            classwave = kc.trips * len(kernel.grid) // max(1, kc.ctas)
            out += min(kc.trips, 2 * slots * per_cta, classwave)
    return out


def check_decided(n: int, max_bytes: int | None) -> None:
    """Refuse, with the estimate, `n` accesses to decide past `max_bytes` of memory."""
    if max_bytes is not None and n * BYTES_PER_ACCESS > max_bytes:
        raise TooLargeToExecuteError(
            f"engine: the L2 model would decide {n:,} loads and stores one by one here (about "
            f"{n * BYTES_PER_ACCESS / 1e9:,.1f} GB; at most {max_bytes / 1e9:.1f} GB): "
            "use a smaller problem to simulate time; counts work at any size"
        )
