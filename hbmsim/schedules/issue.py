"""Instructions the repository's scalar CUDA kernels issue per FMA, counted from their source.

Why: a scalar (no tensor core) matmul loop issues more than its FMAs: every operand comes from
shared memory (a load instruction per 16-byte vector, or per element where a read is not a
whole vector: tile_io.cuh `load_floats`, `load_f`), and fp16/bf16 operands are converted to
fp32 one element per instruction before the FMA. An SM issues one instruction per scheduler per
clock (`Hardware.issue_per_clock_per_sm`), so such a loop runs its FMAs at most at the issue
rate over this count (`Hardware.matrix_rate`). On sm_90 the loops compile to what the source
says: flash_fwd d64 fp16 has 512 FFMA, 576 HADD2 (the conversions) and 128 LDS in the
unrolled score loop, and 64 FFMA, 64 HADD2 and 9 LDS per key of the P V loop (cuobjdump
--dump-sass); the count below gives 2.375 and 2.14 instructions per FMA for them (the SASS
adds index and loop instructions, 2.48 and 2.42). Not counted: the global-to-shared tile copies
(`load_tile`), masking and the softmax's own instructions (charged as vector work and exps).
"""

from __future__ import annotations

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


def naive_matmul(bm: int, bn: int, itemsize: int, threads_side: int = 16) -> float:
    """kernels/naive.cuh `matmul_body`: per step of the inner dimension a thread reads its
    BM/16 values of A and BN/16 of B (`load_floats`), converts them, and does (BM/16)·(BN/16)
    FMAs. (The CUDA kernel takes tiles in 16s; smaller tiles the simulator accepts count as
    one value per thread.)"""
    tm, tn = max(1, bm // threads_side), max(1, bn // threads_side)
    issued = tm * tn + _loads(tm, itemsize) + _loads(tn, itemsize)
    return (issued + _converts(tm + tn, itemsize)) / (tm * tn)
