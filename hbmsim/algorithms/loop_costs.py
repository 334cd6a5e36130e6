"""What kernels' inner loops cost beyond their flops, counted from their source: instructions
issued per FMA (the repository's scalar kernels) and shared-memory traffic per flop (its
tensor-core kernel, and flash-attn 1.x's forward and backward).

Where the compiled code of a scalar kernel variant was counted (`sass_counts`: the variants
the validation runs time, from kernels/sass_mix.py), its count and its scheduler cycles per
FMA by warps per scheduler stand in for the hand counts below (`*_compiled`); the hand counts
are what the compiled loops are checked against, and what uncounted variants use.

Why, instructions: a scalar (no tensor core) matmul loop issues more than its FMAs: every
operand comes from shared memory (a load instruction per 16-byte vector, or per element where
a read is not a whole vector: tile_io.cuh `load_floats`, `load_f`), and fp16/bf16 operands are
converted to fp32 one element per instruction before the FMA. An SM issues one instruction per
scheduler per clock (`Hardware.issue_per_clock_per_sm`), so such a loop runs its FMAs at most
at the issue rate over this count (`Hardware.matrix_rate`). On sm_90 the loops compile to what
the source says: flash_fwd d64 fp16 has 512 FFMA, 576 HADD2 (the conversions) and 128 LDS in
the unrolled score loop, and 64 FFMA, 64 HADD2 and 9 LDS per key of the P V loop (cuobjdump
--dump-sass); the count below gives 2.375 and 2.14 instructions per FMA for them (the SASS
adds index and loop instructions, 2.48 and 2.42). Not counted: the global-to-shared tile
copies (`load_tile`), masking and the softmax's own instructions (charged as vector work and
exps). Nsight Compute on the H200 counted 10.8 G warp-instructions for flash_fwd d64 64 x 64
at seq 4096 (batch 4, 16 heads), where these counts give 9.7 G for the matmul loops.

Why, shared memory: the WMMA kernel keeps S, P and the O accumulator in shared memory and
goes through it between every product and the softmax; Nsight Compute saw its shared-memory
pipes 77% busy and its issue slots 32% busy (seq 4096, d 64, 64 x 64 tiles). flash-attn 1.x's
kernels split each step's output (forward) or dQ (backward) over their warps and sum the
partials through shared memory behind a barrier, 32 KB a step at d 64. An SM's banks move
`Hardware.smem_bytes_per_clock_per_sm` per clock, which the engine charges on top of the math
(`Hardware.kernel_matmul_rate`).
"""

from __future__ import annotations

import functools
import json
import math

from ..files.places import DATA_DIR
from ..problem.attention import STAT_ITEMSIZE

SASS_CACHE = "kernel_sass.json"  # hbmsim/data/, written by kernels/sass_mix.py


@functools.lru_cache(maxsize=1)
def sass_counts() -> dict:
    """The compiled kernels' loop counts (hbmsim/data/kernel_sass.json): per kernel variant
    its instructions per FMA and scheduler cycles per FMA by warps per scheduler, counted
    from the sm_90 SASS of the variants the validation runs time (kernels/sass_mix.py)."""
    return json.loads((DATA_DIR / SASS_CACHE).read_text())


def sass_key_flash(bq: int, bk: int, d: int, causal: bool, dtype: str) -> str:
    return f"flash_fwd bq{bq} bk{bk} d{d} {'causal' if causal else 'full'} {dtype}"


def sass_key_matmul(name: str, bm: int, bn: int, bd: int, dtype: str) -> str:
    return f"{name} bm{bm} bn{bn} bd{bd} {dtype}"


def compiled(key: str) -> tuple[float, tuple[float, ...]] | None:
    """(instructions per FMA, cycles per FMA by warps per scheduler) of a compiled variant,
    or None where the cache has not counted it (the hand counts below stand in)."""
    entry = sass_counts()["kernels"].get(key)
    if entry is None:
        return None
    return entry["instructions_per_fma"], tuple(entry["cycles_per_fma_by_warps"])


VECTOR_BYTES = 16  # tile_io.cuh: shared-memory reads are uint4 vectors where they can be


def _loads(n: int, itemsize: int) -> int:
    """Load instructions of `load_floats<n>`: n / (16 / itemsize) vectors when the n elements
    are whole 16-byte vectors, else one per element."""
    per_vec = VECTOR_BYTES // itemsize
    return n // per_vec if n % per_vec == 0 else n


def _converts(n: int, itemsize: int) -> int:
    """fp16 and bf16 elements become fp32 one instruction each (`to_float`); fp32 needs none."""
    return 0 if itemsize == 4 else n


def flash_fwd(bk: int, d: int, itemsize: int) -> float:
    """kernels/flash_fwd.cuh, averaged over its two products (each does bq·bk·d FMAs).

    S = Q Kᵀ: per kJ keys × kC dims, kJ reads of a K vector (kC elements, one load when a row
    is whole vectors), kC reads of Qt elements (one load each), every element converted, kJ·kC
    FMAs. O += P V: per key, one read of its score, d / kC reads of V vectors, d conversions,
    d FMAs."""
    kc = VECTOR_BYTES // itemsize if (d * itemsize) % VECTOR_BYTES == 0 else 1
    kj = 8 if bk % 8 == 0 else (4 if bk % 4 == 0 else 1)
    fmas = kj * kc
    qk = fmas + kj * _loads(kc, itemsize) + kc + _converts(kj * kc + kc, itemsize)
    pv = d + 1 + (d // kc) * _loads(kc, itemsize) + _converts(d, itemsize)
    return (qk / fmas + pv / d) / 2


def flash_fwd_compiled(
    bq: int, bk: int, d: int, causal: bool, dtype: str, itemsize: int
) -> tuple[float, tuple[float, ...]]:
    """flash_fwd's (instructions per FMA, cycles per FMA by warps per scheduler): from its
    compiled loops where the cache counted the variant, else the hand count below with
    every issue slot used."""
    found = compiled(sass_key_flash(bq, bk, d, causal, dtype))
    return found if found else (flash_fwd(bk, d, itemsize), ())


def naive_matmul_compiled(
    name: str, bm: int, bn: int, bd: int, dtype: str, itemsize: int, n_dim: int | None = None
) -> tuple[float, tuple[float, ...]]:
    """naive.cu's matmul_nt / matmul_nn, as `flash_fwd_compiled`: the compiled count
    includes the chunk copies' index arithmetic, which the hand count leaves out. `n_dim`:
    the product's N; where a tile's last columns lie past it, the warps without columns
    copy but do not multiply (`has_columns` in naive.cuh), so each FMA carries more of the
    copies and fewer warps issue the products (`computing_warps`)."""
    key = sass_key_matmul(name, bm, bn, bd, dtype)
    found = compiled(key)
    if not found:
        return naive_matmul(bm, bn, itemsize), ()
    share = computing_warps(bn, n_dim) if n_dim else 1.0
    if share >= 1.0:
        return found
    entry = sass_counts()["kernels"][key]
    loops = entry["loops"]
    fmas = entry["fmas_per_step"]
    prod = loops["product"]
    copies = [loops[k] for k in ("copy_a", "copy_b") if k in loops]
    issued = prod["instructions"] * prod["trips_per_step"] * share + sum(
        c["instructions"] * c["trips_per_step"] for c in copies
    )

    def at(cycles: list[float], w: float) -> float:  # per iteration of w warps, w >= 1
        lo = min(int(w), len(cycles))
        hi = min(lo + 1, len(cycles))
        frac = min(w, len(cycles)) - lo
        return cycles[lo - 1] * (1 - frac) + cycles[hi - 1] * frac

    curve = []
    for w in range(1, len(prod["cycles_by_warps"]) + 1):
        busy = w * share  # warps with columns on a scheduler (below 1: on some schedulers)
        cyc = prod["trips_per_step"] * at(prod["cycles_by_warps"], max(1.0, busy))
        cyc += sum(c["trips_per_step"] * at(c["cycles_by_warps"], w) for c in copies)
        curve.append(cyc / (busy * fmas))
    return issued / (share * fmas), tuple(curve)


def computing_warps(bn: int, n_dim: int, threads_side: int = 16, warp_columns: int = 2) -> float:
    """Fraction of naive.cu's matmul warps that multiply, averaged over the column tiles of
    an N-column product: thread column tx (tid / 16) holds columns tx·BN/16.., a warp two
    such columns, and a warp whose first column lies past N skips the product."""
    tn = max(1, bn // threads_side)
    tiles = -(-n_dim // bn)
    warps = threads_side // warp_columns
    busy = 0
    for j in range(tiles):
        cols = min(bn, n_dim - j * bn)
        thread_columns = math.ceil(cols / tn)
        busy += min(warps, math.ceil(thread_columns / warp_columns))
    return busy / (tiles * warps)


def naive_matmul(bm: int, bn: int, itemsize: int, threads_side: int = 16) -> float:
    """kernels/naive.cuh `matmul_body`: per step of the inner dimension a thread reads its
    BM/16 values of A and BN/16 of B (`load_floats`), converts them, and does (BM/16)·(BN/16)
    FMAs. (The CUDA kernel takes tiles in 16s; smaller tiles the simulator accepts count as
    one value per thread.)"""
    tm, tn = max(1, bm // threads_side), max(1, bn // threads_side)
    issued = tm * tn + _loads(tm, itemsize) + _loads(tn, itemsize)
    return (issued + _converts(tm + tn, itemsize)) / (tm * tn)


SMEM_WAVEFRONT_BYTES = 128  # one shared-memory access of a warp: 32 banks x 4 bytes


def wmma_smem_bytes_per_flop(bq: int, bk: int, d: int, itemsize: int) -> float:
    """kernels/flash_fwd_wmma.cuh: shared-memory bytes one K/V tile step moves, over its
    4·bq·bk·d matmul flops. The kernel keeps S, P and the O accumulator in shared memory, so
    per warp (16 query rows) and tile it
    - loads a Q and a K fragment (16 x 16 elements each) per 16 x 16 x 16 product of S = Q Kᵀ
      and stores each 16 x 16 fp32 block of S;
    - runs the softmax over its rows with two lanes per row: the row loops read and write S,
      read S and write P, read and write O, each warp access hitting 16 banks twice (rows
      are bq + 4 words apart, so rows r and r + 8 share banks): two 128-byte wavefronts
      per access of 32 elements, whatever its element size;
    - loads and stores each 16 x 16 fp32 block of O around its products, loading a P and a V
      fragment per product;
    and the CTA writes the K and V tiles it loads from global memory (16-byte vectors).
    Fragment loads and stores are taken as conflict-free (the rows are padded by 16 bytes)."""
    warps = bq // 16
    frag = 16 * 16 * itemsize
    acc = 16 * 16 * 4
    qk = (bk // 16) * (d // 16) * 2 * frag + (bk // 16) * acc
    softmax = (bk // 2 * 2 + bk // 2 * 2 + d // 2 * 2) * 2 * SMEM_WAVEFRONT_BYTES
    pv = (d // 16) * (2 * acc + (bk // 16) * 2 * frag)
    kv_tiles = 2 * bk * d * itemsize
    return (warps * (qk + softmax + pv) + kv_tiles) / (4 * bq * bk * d)


def fa1_fwd_smem_bytes_per_flop(n: int, d: int, itemsize: int, warps: int, steps: int) -> float:
    """flash-attn 1.x forward (fmha_fprop_kernel_1xN.h `device_1xN_`, traits flags 0x08: K and
    V in registers): shared-memory bytes per matmul flop that a 16-row query step over a key
    block of `n` keys moves behind barriers, with `steps` steps per block (the block's own
    cost spread over them). Per step:
    - the next Q tile is committed (16·d elements, `gmem_q.commit`);
    - the softmax reduces its max and sum across the warps (`reduce_max_after_sync_`,
      `reduce_sum_after_sync_`: 64 bytes written per warp for each, 256 bytes read per warp
      for the max, 32·d bytes read after the barrier);
    - the output is split over the key block across the warps (Cta_tile_o WARPS_K = warps):
      every warp stores its fp32 16 x d partial (`smem_o.store`) and, after `__syncthreads`,
      the partials are read back and summed (`smem_o.load`): the reduction the
      FlashAttention-2 paper (section 3.3) names as what slows FlashAttention down.
    Once per key block K and V are committed and read into registers (n·d elements each).
    Flops per step: 4·16·n·d (S = Q Kᵀ and P V). Not counted: the Q fragments every warp reads
    for S = Q Kᵀ, loaded one k-step ahead of their MMAs (`Gemm_Q_K`), which overlap the math
    (8 KB a step at d 64 against 0.5 MFLOP); swizzled tiles are taken as conflict-free."""
    step = 16
    commit_q = step * d * itemsize
    softmax = 2 * 64 * warps + 256 * warps + 32 * d
    partials = 2 * warps * step * d * STAT_ITEMSIZE
    per_block = 2 * 2 * n * d * itemsize
    flops = 4 * step * n * d
    return (commit_q + softmax + partials + per_block / max(1, steps)) / flops


def fa1_bwd_smem_bytes_per_flop(n: int, d: int, itemsize: int, warps: int, steps: int) -> float:
    """flash-attn 1.x backward (fmha_dgrad_kernel_1xN_loop.h): shared-memory bytes per matmul
    flop that a 16-row query step over a key block of `n` keys moves behind barriers, with
    `steps` steps per block (the block's own cost spread over them). Per step:
    - the next Q and dO tiles are committed (16·d elements each, `gmem_q.commit`,
      `gmem_do.commit`);
    - P and dS are stored (16·n elements each, `smem_s.store`, `smem_dp.store`) and read back
      transposed for dV and dK after `__syncwarp` (`smem_s.load`, `smem_dp.load`);
    - dQ is split over the key block across the warps: every warp stores its fp32 16 x d
      partial (`smem_dq.store`), read back and summed after `__syncthreads` (`smem_dq.load`).
    The backward's softmax uses no shared memory. Once per key block K and V are committed
    (n·d elements each). Flops per step: 10·16·n·d (Q Kᵀ, dO Vᵀ, dS K, Pᵀ dO, dSᵀ Q). Not
    counted: the operand fragments each warp reads one k-step ahead of its MMAs (Q, dO, their
    transposes, its slice of K, Kᵀ and V), which overlap the math."""
    step = 16
    commits = 2 * step * d * itemsize
    transposes = 2 * 2 * step * n * itemsize
    partials = 2 * warps * step * d * STAT_ITEMSIZE
    per_block = 2 * n * d * itemsize
    flops = 10 * step * n * d
    return (commits + transposes + partials + per_block / max(1, steps)) / flops
