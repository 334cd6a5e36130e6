"""How many CTAs of a kernel one SM holds at once: the engine's slots, the work bound's waves.

The limits are the GPU's (CUDA C Programming Guide, compute capabilities): shared memory per
SM and per block, resident CTAs and threads, and the register file when the compiler's count
is known.
"""

from __future__ import annotations

from ..errors import ConfigError, SramOverflowError
from .hardware import Hardware

REGISTER_UNIT = 256  # [CUDA-CC] registers are given to a warp in units of 256
WARP = 32  # [CUDA-CC] threads per warp


def occupancy(
    hw: Hardware,
    sram_bytes: int,
    threads_per_cta: int,
    name: str = "",
    registers_per_thread: int | None = None,
) -> int:
    """CTAs one SM holds at once: limited by SRAM (each CTA's footprint plus the system's
    per-CTA reserve), the CTA limit, the thread limit and, when the kernel's register count is
    known, the register file (allocated per warp, rounded up to REGISTER_UNIT). A CTA that
    no SM can hold is refused (check_cta_fits), never counted as one."""
    if sram_bytes > hw.sram_bytes_per_block:  # a trace made for another GPU may not fit this one
        raise SramOverflowError(name, sram_bytes, hw.sram_bytes_per_block, "its tiles")
    check_cta_fits(hw, threads_per_cta, name, registers_per_thread)
    reserve = hw.sram_bytes_per_sm - hw.sram_bytes_per_block  # the system's, per resident CTA
    by_sram = hw.sram_bytes_per_sm // (sram_bytes + reserve) if sram_bytes else hw.max_ctas_per_sm
    limits = [by_sram, hw.max_ctas_per_sm, hw.max_threads_per_sm // threads_per_cta]
    if registers_per_thread:
        limits.append(
            hw.registers_per_sm // registers_per_cta(threads_per_cta, registers_per_thread)
        )
    return min(limits)


def warps_per_scheduler(hw: Hardware, n_ctas: int, threads_per_cta: int, occ: int) -> float:
    """Warps each of an SM's schedulers holds while a kernel runs: its CTAs per SM (`occ`, or
    fewer where the grid does not fill every SM) times their warps, over the schedulers."""
    share = max(1, min(occ, -(-n_ctas // hw.sm_count)))
    return share * -(-threads_per_cta // WARP) / hw.schedulers_per_sm()


def registers_per_cta(threads_per_cta: int, registers_per_thread: int | None) -> int:
    """Registers a CTA is given: per warp, its threads' count rounded up to REGISTER_UNIT;
    at least one unit per warp where the count is not known (no warp runs on none)."""
    warps = -(-threads_per_cta // WARP)
    per_warp = -(-(registers_per_thread or 1) * WARP // REGISTER_UNIT) * REGISTER_UNIT
    return warps * per_warp


def check_cta_fits(
    hw: Hardware, threads_per_cta: int, name: str = "", registers_per_thread: int | None = None
) -> None:
    """Refuse a GPU whose SM cannot hold one CTA of a kernel: its threads past
    max_threads_per_sm, or its registers (at least one allocation unit per warp) past
    registers_per_sm. A real launch fails the same way ("too many resources requested")."""
    what = f"one CTA of kernel {name!r}" if name else "one CTA"
    if threads_per_cta > hw.max_threads_per_sm:
        raise ConfigError(
            "max_threads_per_sm",
            f"{hw.max_threads_per_sm:,} threads per SM cannot hold {what}, which has "
            f"{threads_per_cta:,} threads",
        )
    need = registers_per_cta(threads_per_cta, registers_per_thread)
    if need > hw.registers_per_sm:
        per = f"{registers_per_thread} per thread" if registers_per_thread else "count unknown"
        raise ConfigError(
            "registers_per_sm",
            f"{hw.registers_per_sm:,} registers per SM cannot hold {what}: its "
            f"{threads_per_cta:,} threads need at least {need:,} ({per}; a warp is given "
            f"registers in units of {REGISTER_UNIT})",
        )


def kernel_slots(hw: Hardware, kernel) -> int:
    """CTAs of `kernel` (a Kernel or a KernelWork) the whole GPU holds at once: its slots."""
    per_sm = occupancy(
        hw, kernel.sram_bytes, kernel.threads_per_cta, kernel.name, kernel.registers_per_thread
    )
    return per_sm * hw.sm_count
