"""What regenerating dropout's keep-mask costs in the fused kernels: Philox, counted from source.

Why: flash-attn never stores dropout's mask; every kernel that needs it draws it again from a
counter-based generator (Philox4x32 with 7 rounds, `philox.cuh` in both releases), on the
same lanes as the softmax. Its integer work is several times the compare-and-scale that the
textbook programs charge per element (`flash.dropout_tile`: two operations), and the
published timings show it: flash-attn 1.x with dropout 0.1 takes 1.17-1.25x its time without
(the FlashAttention paper's Tables 15-20, forward and backward alike), where two operations
per element gave 1.03-1.07x.

Counted as 32-bit lane results, the unit the engine's vector rate is in. One round of
`single_round` is two `mul.wide.u32` (each both 32-bit halves of a product: two results)
and two three-input XORs (one `LOP3` each); the key schedule depends only on the seed, is
the same for the whole warp, and runs once on the uniform datapath (`UIADD3`), so it is not
per element. Checked by compiling the library's `philox.cuh` with nvcc 13.0 for sm_80: 14
`IMAD.WIDE.U32` and 14 `LOP3.LUT` per call, key additions hoisted.
"""

from __future__ import annotations

ROUNDS = 7  # "7-round philox": six rounds with the key bumped, then a last one
CALL = ROUNDS * (2 * 2 + 2)  # lane results of one call: 4 random 32-bit words

# flash-attn 1.x (`Philox::operator()`, softmax.h `apply_dropout_16bits`): the counter is
# incremented after each call (an add, a compare and a branch: 3), and one call gives 8
# 16-bit draws, one per element of a thread's 16 x 16 MMA tile share.
FA1_PER_ELEMENT = (CALL + 3) / 8

# flash-attn 2.x (`flash::philox`, dropout.h `apply_dropout`): the counter is the (row, col)
# of the tile, no increment; one call gives 16 8-bit draws, widened to 16 bits (`rnd_16[i] =
# rnd_8[i]`: a byte permute per two draws) for the f16x2 compare.
FA2_PER_ELEMENT = (CALL + 16 / 2) / 16
