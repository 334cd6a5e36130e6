"""The flash-attn 2 call around its kernels, alike in every release mirrored (the newest,
mirror.py, and 2.0, release20.py): the host-side operations its Python wrapper and
flash_api.cpp run besides the launches, the backward's launches, and where the host runs its
operations for a call timed alone (host.py).

Why one module: v2.0.9's flash_attn_interface.py (FlashAttnQKVPackedFunc) and flash_api.cpp
run the same operations as the newest release's for the calls both make; the newest adds
split-KV's and GQA packing's (mirror.py)."""

from __future__ import annotations

from ...problem.attention import Problem
from ...program.plan import Kernel, TensorSpec, Tiles
from ..common import host_ops_first
from . import kernels as k2
from .rules import BwdRule

# Host-side operations one call runs besides its kernel launches, counted from the 2.x
# wrapper (flash_attn/flash_attn_interface.py) and flash_api.cpp:
# forward: FlashAttnQKVPackedFunc.apply (1), the three qkv[:, :, i] views (3), in mha_fwd the
# torch::empty of out, softmax_lse and rng_state (3), ctx.save_for_backward (1), which alone
# comes after the launch (FWD_OPS_AFTER);
FWD_OPS = 8
FWD_OPS_AFTER = 1
# split-KV: torch::empty of softmax_lse_accum and out_accum (set_params_splitkv), before;
SPLIT_OPS = 2
# GQA packing: q.reshape(...).transpose(1, 2) before the launch, and out's reshape and
# transpose back after it;
PACK_OPS = 4
PACK_OPS_AFTER = 2
# backward: the autograd node (1), torch.empty dqkv (1) and its three views (3), in mha_bwd
# the torch::empty of softmax_d and dq_accum (2), then after the kernels dqkv[..., :d] (1);
BWD_OPS = 8
BWD_OPS_AFTER = 1
# GQA backward: torch::empty of dk_expanded and dv_expanded (the at::sum_out reduction that
# follows is a kernel).
GQA_BWD_OPS = 2


def backward(
    p: Problem, bq: int | None, bk: int | None, d_bwd: int, rule: BwdRule, source: str
) -> tuple[list[Kernel], dict[str, TensorSpec], Tiles, str]:
    """run_flash_bwd_seqk_parallel's launches with `rule`'s tiles (bq, bk replace them), its
    tensors, its tiles and the note citing `source`."""
    tiles = Tiles(bq or rule.bm, bk or rule.bn)
    kernels, grads = k2.backward_kernels(p, tiles, rule, d_bwd)
    return kernels, grads, tiles, f"backward: {rule.why} ({source})"


def place_host_ops(
    p: Problem, fwd: list[Kernel], bwd: list[Kernel], fwd_ops: int, fwd_after: int
) -> tuple[list[Kernel], list[Kernel], int]:
    """(fwd, bwd, the call's host ops) with the ops placed where the host runs them, for a
    call timed alone: the forward's `fwd_ops` before its launch but `fwd_after`, the
    backward's before its first kernel but BWD_OPS_AFTER; in a forward + backward call the
    forward's last ones come before the backward's first kernel."""
    bwd_ops = BWD_OPS + (GQA_BWD_OPS if p.group_size > 1 else 0) if bwd else 0
    ops = (fwd_ops if "fwd" in p.pass_ else 0) + bwd_ops
    if "fwd" in p.pass_:
        fwd = host_ops_first(fwd, fwd_ops - fwd_after)
    if bwd:
        before = bwd_ops - BWD_OPS_AFTER + (fwd_after if "fwd" in p.pass_ else 0)
        bwd = host_ops_first(bwd, before)
    return fwd, bwd, ops
