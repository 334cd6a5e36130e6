"""How a step's math occupies an SM's pipes: added up, or overlapped across warpgroups.

Why a module of its own: the engine times a CTA's merged compute step as one duration, and
what that duration is depends on which of the SM's pipes can be busy at the same time, a
property of the GPU (`Hardware.async_mma_overlaps`) and of how the kernel organises its warps
(`Kernel.overlap_warpgroups`), not of attention. The engine asks `step_seconds`; the timeline
asks `phases` for what each warpgroup does inside a step.

A step's math is three loads on three pipes: the tensor cores (its matmul flops over the
kernel's matrix rate: T seconds), the FP32 pipe (its elementwise operations: V) and the
special-function unit (its exponentials: E). Which pairs may run at once:

- the FP32 pipe and the SFU never do. An SM partition's scheduler dispatches one warp
  instruction per clock to a unit 32 lanes wide; an instruction for a narrower unit holds it
  for 32 / lanes clocks ([NV-FORUM] "If there are 4 units available, it will take 8 cycles"),
  and each partition has 4 SFU lanes ([CUDA-CC]: 16 results per clock per SM). So the
  softmax's FP32 work and its exponentials share one issue stream;
- warp-level MMA (mma.sync, WMMA: every kernel of flash-attn 1.x/2.x and of kernels/) is
  issued by the same schedulers, one instruction per MMA, whose warp waits for its result:
  its tensor work adds to the rest (T + V + E, the model every validated mirror runs);
- warpgroup MMA (wgmma, Hopper) is asynchronous ([PTX-ISA] `wgmma.mma_async`: the warpgroup
  goes on issuing independent instructions while the tensor cores work). A warp-specialised
  kernel (FlashAttention-3) keeps two or three consumer warpgroups in turn (ping-pong: one
  warpgroup's softmax while another's GEMMs run, `warp_scheduler_barrier_sync`), so the
  tensor cores run while other pipes work, as far as the GPU lets them: the pipes listed in
  `Hardware.async_mma_overlaps` overlap the tensor cores; the others wait for them.

With a conflict between two pipes meaning "never busy at once", the shortest schedule of a
step whose warpgroups have enough independent work (ping-pong gives each pipe a warpgroup to
serve) takes the largest total over the groups of pipes that conflict with each other
(cliques of the conflict graph):

    nothing overlaps the tensor cores:    T + V + E
    only the FP32 pipe overlaps them:     max(T + E, V + E)
    only the SFU overlaps them:           max(T + V, V + E)
    both overlap them:                    max(T, V + E)

`phases` lays one such schedule out for the timeline: the warpgroups take the tensor cores in
turn, each one's softmax (its FP32 work then its exponentials) while the next one multiplies.

Sources: [NV-FORUM] NVIDIA developer forums, "How the 16 INT cores in a processing block in SM
execute when 32 integers in a warp is calculated" (answer by an NVIDIA engineer, 2023);
[CUDA-CC] CUDA C++ Programming Guide, arithmetic instruction throughput, compute capability
9.0; [PTX-ISA] PTX ISA 8.x, section "Asynchronous Warpgroup Level Matrix Multiply-Accumulate".
"""

from __future__ import annotations

import numpy as np

PIPES = ("vector", "exp")  # the pipes that may overlap asynchronous warpgroup MMA
# (what Hardware.async_mma_overlaps may name)


def overlapped(overlap_warpgroups: int, async_mma_overlaps: tuple[str, ...]) -> tuple[bool, bool]:
    """(FP32 pipe overlaps the tensor cores, SFU overlaps them) for a kernel with
    `overlap_warpgroups` consumer warpgroups on a GPU whose asynchronous MMA overlaps
    `async_mma_overlaps`. One warpgroup (or none) has nothing to overlap its own chain with."""
    if overlap_warpgroups < 2:
        return False, False
    return "vector" in async_mma_overlaps, "exp" in async_mma_overlaps


def step_seconds(t, v, e, overlaps: tuple[bool, bool]):
    """A step's duration from its tensor (t), FP32 (v) and SFU (e) seconds (numbers or numpy
    arrays alike), with `overlaps` as `overlapped` gives it (see the module docstring)."""
    vec, ex = overlaps
    issue = v + e  # the FP32 pipe and the SFU share the schedulers
    if not vec and not ex:
        return t + v + e
    if vec and not ex:
        return np.maximum(t + e, issue)
    if ex and not vec:
        return np.maximum(t + v, issue)
    return np.maximum(t, issue)


def phases(t: float, v: float, e: float, warpgroups: int, overlaps: tuple[bool, bool]):
    """What each consumer warpgroup does inside one step of `step_seconds(t, v, e)`: a list of
    (warpgroup, phase, start, end) with phase "mma" or "softmax", times from the step's start.

    The steady state of ping-pong: the step is n equal slots, one per warpgroup; in slot w
    warpgroup w has the tensor cores (its GEMMs, t / n) while warpgroup w - 1 runs its softmax
    (its FP32 work and exponentials) through the whole slot, so the softmax of the last
    warpgroup shows in the first slot (it follows the GEMMs of the step before). Without
    overlap (one warpgroup, or a GPU whose pipes add) each warpgroup's GEMMs and softmax
    follow each other."""
    n = max(1, warpgroups)
    if n < 2 or not any(overlaps):  # the step is t + v + e: the phases back to back
        out, now = [], 0.0
        for w in range(n):
            out.append((w, "mma", now, now + t / n))
            now += t / n
            out.append((w, "softmax", now, now + (v + e) / n))
            now += (v + e) / n
        return out
    slot = float(step_seconds(t, v, e, overlaps)) / n
    out = []
    for w in range(n):
        out.append((w, "mma", w * slot, w * slot + t / n))
        s = ((w + 1) % n) * slot
        out.append((w, "softmax", s, s + slot))
    return out
