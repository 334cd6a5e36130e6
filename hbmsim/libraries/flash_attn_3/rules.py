"""FlashAttention-3 (flash-attn `hopper/`): which forward kernel, tiles and warps it picks.

Two releases, each read from Dao-AILab/flash-attention `hopper/`:
- "2024-07", the beta the FlashAttention-3 paper (Shah et al. 2024, arXiv:2407.08608) timed:
  `flash_fwd_launch_template.h` `run_mha_fwd_hdim64/128/256` (Flash_fwd_kernel_traits<Headdim,
  kBlockM, kBlockN, kNWarps, kStages, Is_Q_in_regs, kClusterM, T>), `mainloop_fwd_sm90_tma_
  gmma_ws.hpp` (`UseSchedulerBarrier = kHeadDim <= 128`), `flash_fwd_kernel.h`
  `compute_attn_ws` (setmaxnreg 24/240 with 12 warps, 32/160 with 16), `flash_api.cpp`
  `mha_fwd` (its refusals: head size 64, 128 or 256, fp16/bf16);
- "latest": upstream `tile_size.h` `tile_size_fwd_sm90` ({kBlockM, kBlockN, MmaPV_is_RS,
  IntraWGOverlap} per head dim, dtype and mask), `flash_fwd_launch_template.h` `run_flash_fwd`
  (kStages = 2 on sm90; clusters of 2 for fp16/bf16 head dims >= 128 without a mask when the
  M blocks are even), `flash_fwd_kernel_sm90.h` (register split), `flash_api.cpp` (fp16, bf16
  and fp8_e4m3; head dims up to 256; fp8's V transposed in shared memory by the producer);
  local (sliding-window) attention: mha_fwd's clamps (`window`), the tiles and heuristics'
  is_local, block.h `get_n_block_min_max` (the band's K/V blocks; with splits, the band's run
  of blocks split evenly).

Both: one producer warpgroup (TMA loads of Q once, then K and V per block through a `kStages`
pipeline) and kBlockM / 64 consumer warpgroups (`AtomLayoutMNK = Shape<kBlockM/64,1,1>`),
whose softmax overlaps each other's GEMMs (ping-pong, `warp_scheduler_barrier_sync`) and the
GEMM of their own next block (IntraWGOverlap). S, P and the O accumulator live in registers;
shared memory holds Q, K and V (O aliases V's buffer for the TMA store of the epilogue).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import ConfigError
from ...gpu.hardware import Hardware
from ...gpu.presets import PRESETS
from ...problem.attention import Problem
from ..common import check_head_dim, head_dim_bucket, refuse, sm_version

RELEASES = ("latest", "2024-07")
WARPGROUP = 128  # threads
MMA_ROWS = 64  # a warpgroup's wgmma covers 64 rows: kBlockM is 64 per consumer warpgroup


@dataclass(frozen=True)
class Fa3Rule:
    bm: int  # kBlockM: query rows per CTA (64 per consumer warpgroup)
    bn: int  # kBlockN: key rows per step
    d: int  # the compiled head dim
    stages: int  # kStages of the K/V TMA pipeline
    cluster: int  # CTAs of a cluster sharing K/V by TMA multicast
    why: str
    p_in_smem: bool = False  # !MmaPV_is_RS: P written to shared memory for an SS PV GEMM

    @property
    def consumers(self) -> int:
        return self.bm // MMA_ROWS

    @property
    def threads(self) -> int:
        return (self.consumers + 1) * WARPGROUP  # the producer warpgroup besides

    @property
    def registers_per_thread(self) -> int:
        """The register file split by setmaxnreg: producer 56 and consumer 256 with one
        consumer warpgroup, 24 and 240 with two, 32 and 160 with three (compute_attn_ws,
        FlashAttnFwdSm90): the whole 64 K registers, so one CTA per SM (launch bounds
        MinBlocksPerMultiprocessor 1); given per thread as their average."""
        producer, consumer = {1: (56, 256), 2: (24, 240)}.get(self.consumers, (32, 160))
        return (producer + self.consumers * consumer) // (self.consumers + 1)


HEAD_DIMS_LATEST = (64, 96, 128, 192, 256)
HEAD_DIMS_BETA = (64, 128, 256)
DTYPES = ("fp16", "bf16", "fp8")


def check(p: Problem, hw: Hardware, release: str, what: str = "flash-attn-3") -> int:
    """The library's refusals (flash_api.cpp mha_fwd, both releases); returns the compute
    capability."""
    if release not in RELEASES:
        raise ConfigError("release", f"must be one of {', '.join(RELEASES)} (got {release!r})")
    sm = sm_version(hw)
    if sm != 90:
        hopper = [name for name, preset in PRESETS.items() if sm_version(preset) == 90]
        raise refuse(
            "gpu",
            f"{what}: FlashAttention-3 only supports Hopper GPUs (sm90); {hw.name} is not one "
            f"(Hopper presets: {', '.join(hopper)})",
        )
    if p.dropout > 0:
        raise refuse("dropout", f"{what}: FlashAttention-3 has no dropout; use 0")
    if release == "2024-07":
        if p.dtype not in ("fp16", "bf16"):
            raise refuse(  # flash_api.cpp: "FlashAttention only support fp16 and bf16 data type"
                "dtype", f"{what}@2024-07: FlashAttention runs fp16 and bf16 only (got {p.dtype})"
            )
        if p.head_dim not in HEAD_DIMS_BETA:
            raise refuse(  # flash_api.cpp: "Only support head size 64, 128, and 256"
                "head_dim", f"{what}@2024-07: head dims 64, 128 and 256 only (got {p.head_dim})"
            )
        return sm
    if p.dtype not in DTYPES:
        raise refuse(  # flash_api.cpp: "FlashAttention only supports fp16, bf16, and fp8_e4m3"
            "dtype", f"{what}: FlashAttention runs {', '.join(DTYPES)} only (got {p.dtype})"
        )
    check_head_dim(p, what)
    return sm


MAX_CONSUMERS = 3  # NumMmaWarpGroups: 1 to 3 (kBlockM 64, 128, 192)
MMA_N_STEP = 16  # kBlockN values are multiples of 16 (wgmma N, the K/V TMA box)
MAX_BLOCK_N = 256  # wgmma's largest N


def check_tiles(bq: int | None, bk: int | None) -> None:
    """User tiles the kernel can be built with: one to three 64-row consumer warpgroups, and
    key blocks a whole number of wgmma N steps."""
    if bq is not None and (bq % MMA_ROWS or not 1 <= bq // MMA_ROWS <= MAX_CONSUMERS):
        raise ConfigError(
            "bq",
            f"flash-attn-3 runs {MMA_ROWS} query rows per consumer warpgroup, 1 to "
            f"{MAX_CONSUMERS} of them: 64, 128 or 192 (got {bq})",
        )
    if bk is not None and (bk % MMA_N_STEP or not MMA_N_STEP <= bk <= MAX_BLOCK_N):
        raise ConfigError(
            "bk",
            f"flash-attn-3's key blocks are multiples of {MMA_N_STEP} up to {MAX_BLOCK_N} "
            f"(got {bk})",
        )


def fwd_rule(p: Problem, release: str) -> Fa3Rule:
    """The forward kernel's tiles for `release` (see the module docstring)."""
    if release == "2024-07":
        return _beta_rule(p)
    return _latest_rule(p)


def _even_m_blocks(p: Problem, bm: int) -> bool:
    return -(-p.seq_q // bm) % 2 == 0


def _beta_rule(p: Problem) -> Fa3Rule:
    d, causal = p.head_dim, p.causal
    where = f"run_mha_fwd_hdim{d}"
    if d == 64:
        return Fa3Rule(192, 128, 64, 2, 1, f"{where}: 192 x 128, 16 warps, 2 stages")
    # "Only use Cluster if number of tiles along seqlen_q is even" (ceil_div(seqlen_q, 128))
    cluster = 2 if not causal and _even_m_blocks(p, 128) else 1
    with_cluster = f", cluster {cluster}" if cluster > 1 else ""
    if d == 128:
        bn = 128 if causal else 176
        return Fa3Rule(
            128, bn, 128, 2, cluster, f"{where}: 128 x {bn}, 12 warps, 2 stages{with_cluster}"
        )
    return Fa3Rule(128, 80, 256, 2, cluster, f"{where}: 128 x 80, 12 warps, 2 stages{with_cluster}")


def _latest_rule(p: Problem) -> Fa3Rule:
    """tile_size_fwd_sm90(headdim, headdim_v, is_causal, is_local, element_size, ...), with
    is_causal and is_local as mha_fwd sets them (`window`)."""
    d = head_dim_bucket(p.head_dim, HEAD_DIMS_LATEST)
    w, fp8 = window(p), p.dtype == "fp8"
    causal, local = w.is_causal, w.is_local
    if not fp8:
        if d == 64:  # use_blockN_128 = is_causal || is_local
            bm, bn = 192, 128 if causal or local else 192
        elif d == 96:
            bm, bn = 192, 128 if local else 144
        elif d == 128:
            bm, bn = 128, 128 if causal or local else 176
        elif d == 192:
            bm, bn = 128, 96 if local else 112  # dv = d = 192: "headdim_v <= 128 ? 128 : 112"
        else:
            bm, bn = 128, 64 if local else 80
    else:
        bm, bn = {64: (192, 160), 96: (192, 128), 128: (128, 224), 192: (128, 160)}.get(
            d, (128, 64 if local else 128)
        )
    # Enable_cluster: sm90, 2-byte types with head dim >= 128 (fp8: 192), !Is_causal &&
    # !Is_local, no split
    wants = (d >= 128) if not fp8 else (d == 192)
    cluster = 2 if wants and not (causal or local) and _even_m_blocks(p, bm) else 1
    with_cluster = f", cluster {cluster}" if cluster > 1 else ""
    kind = "e4m3" if fp8 else "fp16/bf16"
    # MmaPV_is_RS: false for fp16/bf16 head dims 64 (without a mask) and 96, else true
    p_in_smem = not fp8 and ((d == 64 and not (causal or local)) or d == 96)
    mask = " causal" if causal else (" local" if local else "")
    return Fa3Rule(
        bm,
        bn,
        d,
        2,
        cluster,
        f"tile_size_fwd_sm90 hdim{d} {kind}{mask}: {bm} x {bn}, "
        f"{(bm // 64 + 1) * 4} warps, 2 stages{with_cluster}"
        + (", P through shared memory" if p_in_smem else ""),
        p_in_smem,
    )


@dataclass(frozen=True)
class Window:
    """The window the latest release's kernels see (flash_api.cpp mha_fwd)."""

    left: int  # window_size_left after the clamps (-1: none)
    right: int  # window_size_right after the clamps (-1: none)
    is_causal: bool  # params.is_causal
    is_local: bool  # params.is_local (never with is_causal)


def window(p: Problem) -> Window:
    """mha_fwd: `if (window_size_left >= max_seqlen_k - 1) window_size_left = -1`, `if
    (window_size_right >= max_seqlen_q - 1) window_size_right = -1`; "causal=true is the same
    as causal=false" for one query row without a window (is_causal = false; the paged-KV
    exception at head dim 128 does not apply: no paged cache here); `if (is_causal)
    window_size_right = 0`; `params.is_causal = window_size_left < 0 && window_size_right ==
    0`, `params.is_local = (window_size_left >= 0 || window_size_right >= 0) &&
    !params.is_causal` (attention_chunk 0)."""
    left = -1 if p.window_left >= p.seq_k - 1 else p.window_left
    right = -1 if p.window_right >= p.seq_q - 1 else p.window_right
    causal = p.causal and not (p.seq_q == 1 and left == -1 and right == -1)
    if causal:
        right = 0
    is_causal = left < 0 and right == 0
    return Window(left, right, is_causal, (left >= 0 or right >= 0) and not is_causal)


def masked(p: Problem) -> bool:
    """A mask the kernel applies: params.is_causal or params.is_local (`window`)."""
    w = window(p)
    return w.is_causal or w.is_local


def loaded_keys(p: Problem, bm: int) -> int:
    """seqlen_k_loaded (flash_api.cpp get_num_splits): "If is_local, we're not going to load
    all of seqlen_k": min(seqlen_k, window_size_right + window_size_left + 1 + kBlockM), the
    sides filled as set_params_fprop fills them (left: seqlen_k - 1, right: seqlen_q - 1)."""
    w = window(p)
    if not w.is_local:
        return p.seq_k
    left = w.left if w.left >= 0 else p.seq_k - 1
    right = w.right if w.right >= 0 else p.seq_q - 1
    return max(0, min(p.seq_k, right + left + 1 + bm))


# --- split-KV and PackGQA (the latest release; the 2024-07 beta had neither) ----------------

L2_SPLIT_BYTES = 50 * 1024 * 1024  # num_splits_heuristic: "we assume that L2 size is 50MB"
MAX_SPLITS = 128  # get_num_splits passes 128


def num_splits_heuristic(
    total_mblocks: int,
    num_sms: int,
    num_n_blocks: int,
    num_m_blocks: int,
    size_one_kv_head: int,
    causal: bool,
    max_splits: int = MAX_SPLITS,
) -> int:
    """hopper/heuristics.h num_splits_heuristic, line for line: one split when the M blocks
    nearly fill the SMs (unless one K/V head outgrows L2 and the queries go over it at least
    twice), none for 4 K/V blocks or fewer, else the fewest splits within 85% of the best wave
    efficiency (no skipping of equal-block counts, unlike flash-attn 2's)."""
    if total_mblocks >= 0.8 * num_sms:
        if size_one_kv_head > L2_SPLIT_BYTES and num_m_blocks >= 2 * num_sms and not causal:
            return min(-(-size_one_kv_head // L2_SPLIT_BYTES), max_splits)
        return 1
    if num_n_blocks <= 4:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)
    efficiency = []
    for s in range(1, max_splits + 1):
        n_waves = float(total_mblocks * s) / num_sms  # float arithmetic, as in C++
        efficiency.append(n_waves / math.ceil(n_waves))
    best = max(efficiency)
    for s in range(1, max_splits + 1):
        if efficiency[s - 1] >= 0.85 * best:
            return s
    return 1


def should_pack_gqa(seqlen_q: int, qhead_per_khead: int, block_m: int) -> bool:
    """hopper/heuristics.h should_pack_gqa (not varlen): pack when the padded rows of one head
    are below 90% of the packed group's efficiency."""

    def round_up(a: int, b: int) -> int:
        return -(-a // b) * b

    nopack = seqlen_q / round_up(seqlen_q, block_m)
    pack = seqlen_q * qhead_per_khead / round_up(seqlen_q * qhead_per_khead, block_m)
    return nopack < 0.9 * pack


def splits_and_packing(p: Problem, rule: Fa3Rule, num_sms: int) -> tuple[int, bool]:
    """flash_api.cpp get_num_splits, then get_pack_gqa (which always packs a split problem):
    M blocks counted with the query group packed, one K/V head's bytes for its L2 rule; with
    a window, the K/V blocks counted over the keys it loads (`loaded_keys`), and the
    heuristic told `is_causal || is_local`."""
    g = p.group_size
    num_m_blocks = -(-(p.seq_q * g) // rule.bm)
    num_n_blocks = -(-loaded_keys(p, rule.bm) // rule.bn)
    size_one_kv_head = p.seq_k * 2 * p.head_dim * (1 if p.dtype == "fp8" else 2)
    total_mblocks = p.batch * p.kv_heads * num_m_blocks
    splits = num_splits_heuristic(
        total_mblocks, num_sms, num_n_blocks, num_m_blocks, size_one_kv_head, masked(p)
    )
    if splits > 1:
        return splits, g > 1
    return 1, one_split_packing(p, rule)


def one_split_packing(p: Problem, rule: Fa3Rule) -> bool:
    """get_pack_gqa with num_splits == 1 (mha_fwd's `num_splits <= 0 ? get_num_splits(params)
    : num_splits`, where flash_attn_func passes 1): grouped heads pack when should_pack_gqa
    says so."""
    return p.group_size > 1 and should_pack_gqa(p.seq_q, p.group_size, rule.bm)


def smem_bytes(rule: Fa3Rule, itemsize: int, fp8: bool) -> int:
    """SharedStorage: Q, kStages of K and of V (O aliases V for the epilogue), P where the PV
    GEMM reads it from shared memory, and with fp8 the TMA target of V before the producer
    transposes it (smem_vt); the pipelines' barriers are a few hundred bytes, left out."""
    q = rule.bm * rule.d * itemsize
    kv = rule.stages * rule.bn * rule.d * itemsize
    p = rule.bm * rule.bn * itemsize if rule.p_in_smem else 0
    return q + 2 * kv + p + (kv if fp8 else 0)
