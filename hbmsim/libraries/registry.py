"""The registry of mirrors: `--impl NAME[@RELEASE]` to the plan its library runs."""

from __future__ import annotations

import importlib

from ..algorithms.names import MAX_TILE
from ..errors import ConfigError, check_int
from ..gpu.hardware import Hardware
from ..problem.attention import Problem
from ..program.plan import Plan

# --impl NAME -> the module whose make_plan builds its plan (imported when first asked for)
MIRRORS = {
    "torch-eager": ".pytorch.eager",
    "flash-attn-1": ".flash_attn_1.mirror",
    "flash-attn-2": ".flash_attn_2.mirror",
    "flash-attn-3": ".flash_attn_3.mirror",
    "flash-decoding": ".flash_attn_2.decoding",
}
IMPLS = tuple(MIRRORS)

# Mirrors that model a sliding window (flash-attn's window_size); the others refuse one, each
# saying why (a library without local attention, or one whose local rules are not mirrored)
WINDOWED = ("flash-attn-2", "flash-decoding", "flash-attn-3")
NO_WINDOW = {
    "torch-eager": "the eager benchmark it mirrors builds a causal mask only",
    "flash-attn-1": "flash-attn 1.x has no window_size (it came with 2.3)",
}
# Mirrors that read a paged K/V cache through a block table (flash_attn_with_kvcache's
# block_table); the others refuse a page size, each saying why
PAGED = ("flash-decoding",)
NO_PAGES = {
    "torch-eager": "eager attention reads contiguous K and V tensors",
    "flash-attn-1": "flash-attn 1.x has no block table (paged K/V came with 2.5)",
    "flash-attn-2": "it mirrors flash_attn_func (mha_fwd), which takes no block table; "
    "flash_attn_with_kvcache is flash-decoding",
    "flash-attn-3": "its paged K/V path (hopper/ page_table) is not mirrored here",
}
# Mirrors that model more than one release of their library, chosen as NAME@RELEASE
# (flash_attn_1.RELEASES: "1.0", the default, and "0.1", before its split heuristics;
# flash_attn_2.mirror.RELEASES: "latest", the default, and "2.0", before split-KV and GQA
# packing; flash_attn_3.RELEASES: "latest", the default, and "2024-07", the beta its paper timed)
WITH_RELEASES = ("flash-attn-1", "flash-attn-2", "flash-attn-3")
# Their older releases by name, for the lists a sweep or an explore spec accepts (each the
# second of its module's RELEASES; a test holds them to the modules)
OLDER_RELEASES = ("flash-attn-1@0.1", "flash-attn-2@2.0", "flash-attn-3@2024-07")
IMPL_NAMES = IMPLS + OLDER_RELEASES


def make_impl_plan(
    impl: str, problem: Problem, hw: Hardware, bq: int | None = None, bk: int | None = None
) -> Plan:
    """The plan `impl` runs for `problem` (and its pass) on `hw`. `bq`, `bk` replace the
    library's tile sizes (the plan's notes say so). `impl` may name a release of a library
    whose mirror models several (`flash-attn-1@0.1`).

    Raises ConfigError for an unknown implementation, bad tiles, or a combination the library
    refuses (one line naming the limit as the library states it); SramOverflowError when
    overridden tiles do not fit.
    """
    impl, _, release = impl.partition("@")  # "flash-attn-1@0.1": a library's older release
    if impl not in IMPLS:
        raise ConfigError("impl", f"must be one of {', '.join(IMPLS)} (got {impl[:40]!r})")
    if release and impl not in WITH_RELEASES:
        raise ConfigError(
            "impl",
            f"{impl} has one release here; NAME@RELEASE applies to {', '.join(WITH_RELEASES)}",
        )
    for name, value in (("bq", bq), ("bk", bk)):
        if value is not None:
            check_int(name, value, 1, MAX_TILE)
    if problem.windowed and impl not in WINDOWED:
        raise ConfigError(
            "window",
            f"{impl}: {NO_WINDOW[impl]}; drop --window, or use {' or '.join(WINDOWED)} or --algo",
        )
    if problem.page_size is not None and impl not in PAGED:
        raise ConfigError(
            "page_size",
            f"{impl}: {NO_PAGES[impl]}; drop --page-size, or use {' or '.join(PAGED)}",
        )
    if not problem.plain_kv:
        raise ConfigError(
            "head_dim_v",
            f"{impl}: this mirror runs Q, K and V of one head dim in separate tensors "
            f"(head_dim_v {problem.dv}, head_dim {problem.head_dim}, latent_kv "
            f"{str(problem.latent_kv).lower()}): use --algo fa2, fa1, split-kv or standard",
        )
    hw.check_dtype(problem.dtype)
    module = importlib.import_module(MIRRORS[impl], __package__)
    if release:
        return module.make_plan(problem, hw, bq, bk, release=release)
    return module.make_plan(problem, hw, bq, bk)


__all__ = ["IMPLS", "IMPL_NAMES", "make_impl_plan"]
