"""How many CTAs of a kernel one SM holds at once: the engine's slots, the work bound's waves.

The limits are the GPU's (CUDA C Programming Guide, compute capabilities): shared memory per
SM and per block, resident CTAs and threads, and the register file when the compiler's count
is known.
"""

from __future__ import annotations

from ..errors import SramOverflowError
from .hardware import Hardware

REGISTER_UNIT = 256  # [CUDA-CC] registers are given to a warp in units of 256


def occupancy(
    hw: Hardware,
    sram_bytes: int,
    threads_per_cta: int,
    name: str = "",
    registers_per_thread: int | None = None,
) -> int:
    """CTAs one SM holds at once: limited by SRAM (each CTA's footprint plus the system's
    per-CTA reserve), the CTA limit, the thread limit and, when the kernel's register count is
    known, the register file (allocated per warp, rounded up to REGISTER_UNIT)."""
    if sram_bytes > hw.sram_bytes_per_block:  # a trace made for another GPU may not fit this one
        raise SramOverflowError(name, sram_bytes, hw.sram_bytes_per_block, "its tiles")
    reserve = hw.sram_bytes_per_sm - hw.sram_bytes_per_block  # the system's, per resident CTA
    by_sram = hw.sram_bytes_per_sm // (sram_bytes + reserve) if sram_bytes else hw.max_ctas_per_sm
    limits = [by_sram, hw.max_ctas_per_sm, hw.max_threads_per_sm // threads_per_cta]
    if registers_per_thread:
        per_warp = -(-registers_per_thread * 32 // REGISTER_UNIT) * REGISTER_UNIT
        limits.append(hw.registers_per_sm // (per_warp * -(-threads_per_cta // 32)))
    return max(1, min(limits))


def kernel_slots(hw: Hardware, kernel) -> int:
    """CTAs of `kernel` (a Kernel or a KernelWork) the whole GPU holds at once: its slots."""
    per_sm = occupancy(
        hw, kernel.sram_bytes, kernel.threads_per_cta, kernel.name, kernel.registers_per_thread
    )
    return per_sm * hw.sm_count
