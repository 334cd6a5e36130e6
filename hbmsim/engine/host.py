"""One call of a library timed by itself: the host launching its kernels while the GPU runs.

Why: the engine's `time_s` is a call in the steady state of a timed loop. The host issues the next
call's launches and framework operations while the GPU runs this call's kernels, so a call takes the
longer of the two (simulation.py): how the papers' benchmarks time (many calls between two
synchronisations). A measurement can time each call alone instead: CUDA events around one call, then
a synchronise before the next (kernels/torch_timings.py does). The GPU is then idle when the call
starts; its first kernel waits for the host to run the wrapper's framework operations and the
launch, and a later kernel waits for its own launch if the host is still behind. On the H200's
PyTorch timings (2026-11-30) the steady state left FlashAttention-2's forward at 512 tokens 19-47%
too fast; the host's 70 us before its one kernel is what those calls took and the loop hid.

The timeline of a call timed alone, every host operation taking `Hardware.host_op_s`:
    host:  h_i = (framework ops before kernel i and kernel i's launch, all kernels up to i) x
           host_op_s, the launch time of kernel i;
    GPU:   g_i = max(g_(i-1), h_i) + d_i, kernel i's end (d_i its duration as the engine ran
           it, back to back after the kernel before it; g_(-1) = 0);
    call:  max(g_last, h_end), h_end the host's time for every operation of the call (the end
           event is recorded once the call returns).
Where a plan's kernels do not say how many framework operations come before each
(`Kernel.host_ops_before`), all of them come before the first kernel: the most of the host's
time a call timed alone can wait for.
"""

from __future__ import annotations

from collections.abc import Sequence


def ops_before_kernels(meta: dict) -> tuple[list[int], int]:
    """(framework ops before each kernel's launch, ops after the last launch) of a plan's
    call (its trace metadata: `framework_ops` and each kernel's `host_ops_before`)."""
    kernels = meta.get("kernels", [])
    total = int(meta.get("framework_ops") or 0)
    said = [k.get("host_ops_before") for k in kernels]
    if not kernels:
        return [], total
    if all(n is None for n in said):
        return [total] + [0] * (len(kernels) - 1), 0
    before = [int(n or 0) for n in said]
    if sum(before) > total:  # plans are checked where they are built; trace files on reading
        raise ValueError(f"kernels declare {sum(before)} framework ops of the call's {total}")
    return before, total - sum(before)


def synchronized_call_s(
    durations: Sequence[float], ops_before: Sequence[int], ops_after: int, host_op_s: float
) -> float:
    """Seconds of one call timed alone (see the module docstring): kernels of `durations`
    back to back, kernel i launched after `ops_before[i]` more framework ops and its launch."""
    host = gpu = 0.0
    for d, ops in zip(durations, ops_before, strict=True):
        host += (ops + 1) * host_op_s
        gpu = max(gpu, host) + d
    return max(gpu, host + ops_after * host_op_s)
