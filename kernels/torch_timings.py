"""Time PyTorch's eager attention and its FlashAttention-2 backend on this GPU, and write the
timings as a published-style set that `hbmsim validate --published FILE` predicts.

    python -m kernels.torch_timings --out DIR [--preset h200] [--budget-s 150]

Why: the published set holds A100 and H100 timings from papers; this measures the same two
implementations, the same way the FlashAttention-2 paper's Figure 4 did, on the GPU at hand, as
an extra check of the `torch-eager` and `flash-attn-2` mirrors. Nothing here sets a constant.

- torch-eager is `attention_pytorch` of Dao-AILab/flash-attention
  benchmarks/benchmark_flash_attention.py (what hbmsim/libraries/pytorch/eager.py mirrors), on a
  packed qkv (batch, seqlen, 3, heads, d) with requires_grad.
- flash-attn-2 is torch's scaled_dot_product_attention restricted to its FLASH_ATTENTION
  backend (the flash-attn 2 sm80 kernels torch vendors), on (batch, seqlen, heads, d) tensors
  viewed as (batch, heads, seqlen, d), which that backend takes without a copy.
- Shapes follow the FlashAttention-2 paper's Figure 4: batch x seqlen = 16,384 tokens, hidden
  2,048 (heads = 2048 / d), d 64 and 128, causal off and on, fp16, no dropout.
- Decoding, measured first (a few seconds): one query token against a K/V cache of 1k to 64k
  tokens, batch 1, 8 and 32, 32 query heads of d 128 over 32 K/V heads (multi-head) or 8
  (grouped, `enable_gqa`), fp16, forward. `flash-attn-2` is the same SDPA backend: at one
  query token its mha_fwd runs flash-attn's split-KV heuristic (what hbmsim's flash-attn-2
  mirror models); `flash-decoding` is flash-attn's own `flash_attn_with_kvcache`, timed only
  where the flash_attn package is importable (else one failed row says so).
- flash-attn-3, where FlashAttention-3's `flash_attn_interface` (flash-attn's hopper/ build) is
  importable, forward only, at the FlashAttention-3 paper's Figure 5 shapes (the same tokens
  and hidden size, d 64, 128 and 256): what the `flash-attn-3` mirror predicts; else one failed
  row says it is missing.
- Times are the median of CUDA events around each call (forward; forward then backward with a
  fixed random output gradient), after warm-up, each call timed by itself (its points say
  `"timing": "synchronized"`); the host's cost per op is measured first (host_op_seconds:
  tiny in-place adds, no attention) and written as the file's `calibration.host_op_s`, which
  the prediction of its points charges per framework op and launch; a shape that fails (out
  of memory, a backend that refuses it) is left out and listed with its error. Only torch and
  the standard library are needed (einops for the eager baseline).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

SEQS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
TOKENS, HIDDEN = 16384, 2048
PASSES = ("fwd", "fwd+bwd")
DECODE_HEADS, DECODE_DIM = 32, 128  # Llama-2-7B's attention shape; 8 K/V heads as Llama 3 8B
DECODE_KV_HEADS = (32, 8)
DECODE_BATCHES = (1, 8, 32)
DECODE_SEQS = (1024, 4096, 16384, 65536)  # K/V cache 0.5 to 34 GB at batch 32
DECODE_IMPLS = ("flash-attn-2", "flash-decoding")
WARMUP, REPEATS = 3, 15


def attention_pytorch(qkv, causal: bool):
    """benchmark_flash_attention.py's baseline, dropout 0 (F.dropout returns its input)."""
    import torch
    from einops import rearrange

    batch, seqlen, _, nheads, d = qkv.shape
    q, k, v = qkv.unbind(dim=2)
    q = rearrange(q, "b t h d -> (b h) t d")
    k = rearrange(k, "b s h d -> (b h) d s")
    softmax_scale = 1.0 / math.sqrt(d)
    scores = torch.empty(batch * nheads, seqlen, seqlen, dtype=qkv.dtype, device=qkv.device)
    scores = rearrange(
        torch.baddbmm(scores, q, k, beta=0, alpha=softmax_scale), "(b h) t s -> b h t s", h=nheads
    )
    if causal:
        causal_mask = torch.triu(torch.full((seqlen, seqlen), -10000.0, device=scores.device), 1)
        scores = scores + causal_mask.to(dtype=scores.dtype)
    attention = torch.softmax(scores, dim=-1)
    output = torch.einsum("bhts,bshd->bthd", attention, v)
    return output.to(dtype=qkv.dtype)


def flash_sdpa(q, k, v, causal: bool):
    """torch's SDPA, FlashAttention backend only: (b, s, h, d) in, (b, s, h, d) out."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
        )
    return out.transpose(1, 2)


def decode_call(impl: str, batch: int, seq_k: int, heads: int, kv_heads: int, d: int, device):
    """The forward of one decoding step: one query token per sequence against a K/V cache of
    seq_k tokens, inputs drawn fresh. `flash-attn-2` is SDPA's flash backend (grouped K/V heads
    through `enable_gqa`), `flash-decoding` flash-attn's `flash_attn_with_kvcache`."""
    import torch

    dtype = torch.float16 if device.type == "cuda" else torch.float32
    q = torch.randn(batch, 1, heads, d, device=device, dtype=dtype)
    k, v = (torch.randn(batch, seq_k, kv_heads, d, device=device, dtype=dtype) for _ in range(2))
    if impl == "flash-decoding":
        from flash_attn import flash_attn_with_kvcache

        def fwd():
            with torch.no_grad():
                flash_attn_with_kvcache(q, k, v)

        return fwd
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gqa = {"enable_gqa": True} if kv_heads != heads else {}

    def fwd():
        with torch.no_grad(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **gqa
            )

    return fwd


def median_time(fn, device) -> float:
    import torch

    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize(device) if device.type == "cuda" else None
    times = []
    for _ in range(REPEATS):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


FA3_HEAD_DIMS = (64, 128, 256)  # the FlashAttention-3 paper's Figure 5 panels


def fa3_available() -> str | None:
    """None when FlashAttention-3's Python interface imports, else why not."""
    try:
        import flash_attn_interface  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - an ImportError, or a build that fails to load
        return f"flash_attn_interface (FlashAttention-3) is not importable: {exc}"[:300]
    return None


def make_calls(impl: str, batch: int, seq: int, heads: int, d: int, causal: bool, device):
    """(forward, forward+backward) closures for one shape, inputs drawn fresh (never zeros);
    flash-attn-3's forward only."""
    import torch

    dtype = torch.float16 if device.type == "cuda" else torch.float32
    if impl == "flash-attn-3":
        from flash_attn_interface import flash_attn_func

        q, k, v = (torch.randn(batch, seq, heads, d, device=device, dtype=dtype) for _ in range(3))

        def fa3_fwd():
            flash_attn_func(q, k, v, causal=causal)  # returns out (and lse in some releases)

        return {"fwd": fa3_fwd}
    if impl == "torch-eager":
        qkv = torch.randn(batch, seq, 3, heads, d, device=device, dtype=dtype, requires_grad=True)

        def fwd():
            return attention_pytorch(qkv, causal)

    else:
        q, k, v = (
            torch.randn(batch, seq, heads, d, device=device, dtype=dtype, requires_grad=True)
            for _ in range(3)
        )

        def fwd():
            return flash_sdpa(q, k, v, causal)

    dout = torch.randn(batch, seq, heads, d, device=device, dtype=dtype)

    def fwd_only():
        with torch.no_grad():
            fwd()

    def fwd_bwd():
        fwd().backward(dout)

    return {"fwd": fwd_only, "fwd+bwd": fwd_bwd}


def agreement(device) -> float:
    """max |eager - flash| / max |eager| on one shared input: both implementations compute the
    same attention, or the timings mean nothing."""
    import torch

    torch.manual_seed(1)
    batch, seq, heads, d = 2, 512, 4, 64
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    qkv = torch.randn(batch, seq, 3, heads, d, device=device, dtype=dtype)
    with torch.no_grad():
        ref = attention_pytorch(qkv, True).float()
        q, k, v = qkv.unbind(dim=2)
        if device.type == "cuda":
            got = flash_sdpa(q, k, v, True).float()
        else:  # the flash backend is CUDA-only; the math backend checks the layout here
            import torch.nn.functional as F

            got = (
                F.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
                )
                .transpose(1, 2)
                .float()
            )
    return float((ref - got).abs().max() / ref.abs().max())


HOST_OPS = 400  # tiny calls per host-op measurement


def host_op_seconds(device) -> float:
    """Seconds the host spends on one PyTorch op, dispatch to launch: the median over runs of
    HOST_OPS in-place adds to a one-element tensor between two CUDA events, each run starting
    on an idle GPU (a synchronise before it). Each add's kernel takes a few microseconds of
    GPU time, its dispatch and launch more, so the GPU waits for the host and the events time
    the host's issue rate: what hbmsim charges per launch and per framework op
    (`Hardware.host_op_s`, a property of the host and the framework, which this calibrates
    where the preset guesses; no attention call is timed for it). On a CPU device, wall
    time."""
    import torch

    x = torch.zeros(1, device=device)

    def ops():
        for _ in range(HOST_OPS):
            x.add_(1.0)

    return median_time(ops, device) / HOST_OPS


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def document(
    source: str, citation: str, agreement_max_rel: float, host_op_s: float | None = None
) -> dict:
    """An empty timings file in the published set's format (hbmsim.published reads it), with
    the host's measured cost per op where it was measured (host_op_seconds), which the
    prediction of this file's points takes in place of the preset's."""
    calibration = {} if host_op_s is None else {"calibration": {"host_op_s": host_op_s}}
    return {
        **calibration,
        "what": "Timings measured on a GPU by kernels/torch_timings.py, in the published set's "
        "format: extra checks, never a source of constants.",
        "sources": {
            source: {
                "citation": citation,
                "setup": "FlashAttention-2 paper Fig. 4 shapes: batch x seqlen = 16384, hidden "
                "2048, fp16, no dropout; decoding: one query token, K/V cache of 1k-64k tokens, "
                "batch 1-32, 32 heads of d 128 over 32 or 8 K/V heads, fp16, forward; median "
                "of CUDA events after warm-up.",
            }
        },
        "agreement_max_rel": agreement_max_rel,
        "points": [],
        "failed": [],
    }


def published_point(
    source, citation, gpu, preset, impl, shape, time_s, index, seq_q=None, kv_heads=None
) -> dict:
    """One timing as a point of the published set: `shape` is (batch, heads, seq, head dim,
    causal, pass); `seq_q` and `kv_heads` where they differ from seq and heads (decoding: one
    query token against seq keys, grouped K/V heads), and then the point's panel names the
    batch and K/V heads, so a series is one cache length sweep."""
    batch, heads, seq, d, causal, pass_ = shape
    panel = {} if seq_q is None else {"panel": f"decode b{batch} kv{kv_heads or heads}"}
    return {
        **panel,
        "source": source,
        "citation": citation,
        "gpu": gpu,
        "preset": preset,
        "impl": impl,
        "label": impl,
        "batch": batch,
        "heads": heads,
        "kv_heads": heads if kv_heads is None else kv_heads,
        "seq_q": seq if seq_q is None else seq_q,
        "seq_k": seq,
        "head_dim": d,
        "dtype": "fp16",
        "causal": causal,
        "dropout": 0.0,
        "pass": pass_,
        "measured_time_s": time_s,
        "measured_unit": "s",
        "conversion": "median of CUDA events",
        # each call timed alone (median_time: events around one call, then a synchronise)
        "timing": "synchronized",
        "id": index,
    }


def time_shape(doc: dict, where: tuple, deadline: float, device, row: dict, runs) -> None:
    """Time one shape into `doc` and rewrite the file (`where`: source, citation, GPU, preset,
    path). `runs()` builds the shape's inputs and gives its timed calls, (shape, call, the
    point's other fields) each, the shape as published_point takes it. Past the deadline, or
    when a call fails, `row` goes to the failed list with the reason and the run goes on."""
    import torch

    source, citation, gpu, preset, path = where
    if time.monotonic() > deadline:
        doc["failed"].append({**row, "error": "skipped: time budget spent"})
        return
    call = None
    try:
        for shape, call, fields in runs():
            t = median_time(call, device)
            index = len(doc["points"])
            point = published_point(
                source, citation, gpu, preset, row["impl"], shape, t, index, **fields
            )
            doc["points"].append(point)
            print(f"{row['impl']} {point.get('panel', '')} {shape}: {t * 1e3:.3f} ms")
    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
        doc["failed"].append({**row, "error": f"{type(exc).__name__}: {exc}"[:300]})
    finally:
        call = None  # the inputs go before the cache is emptied
    if device.type == "cuda":
        torch.cuda.empty_cache()
    write_atomic(path, json.dumps(doc, indent=1))


def measure_decoding(doc, deadline, device, where, batches, seqs, kv_heads_list) -> None:
    """The decoding shapes into `doc`, before the deadline (time_shape)."""
    try:
        import flash_attn  # noqa: F401

        impls = DECODE_IMPLS
    except ImportError as exc:
        impls = ("flash-attn-2",)
        doc["failed"].append(
            {"impl": "flash-decoding", "error": f"flash_attn is not importable: {exc}"[:300]}
        )
    heads, d = DECODE_HEADS, DECODE_DIM
    for impl in impls:
        for kv_heads in kv_heads_list:
            for batch in batches:
                for seq in seqs:
                    row = {
                        "impl": impl,
                        "seq_q": 1,
                        "seq_k": seq,
                        "batch": batch,
                        "kv_heads": kv_heads,
                    }

                    def runs(impl=impl, kv_heads=kv_heads, batch=batch, seq=seq):
                        call = decode_call(impl, batch, seq, heads, kv_heads, d, device)
                        shape = (batch, heads, seq, d, False, "fwd")
                        return [(shape, call, {"seq_q": 1, "kv_heads": kv_heads})]

                    time_shape(doc, where, deadline, device, row, runs)


def measure(
    out: Path,
    preset: str,
    budget_s: float,
    seqs=SEQS,
    head_dims=HEAD_DIMS,
    decode=(DECODE_BATCHES, DECODE_SEQS, DECODE_KV_HEADS),
) -> Path:
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    deadline = time.monotonic() + budget_s
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    today = datetime.date.today().isoformat()
    source = f"{preset}-torch-{today}"
    citation = (
        f"Measured by kernels/torch_timings.py on one {gpu}, torch {torch.__version__}, {today}"
    )
    try:
        host_op_s = host_op_seconds(device)
    except Exception as exc:  # noqa: BLE001 - the timings go on; the preset's value stands in
        print(f"host op cost: not measured ({type(exc).__name__}: {exc})", flush=True)
        host_op_s = None
    doc = document(source, citation, agreement(device), host_op_s)
    path = out / f"{source}.json"
    where = (source, citation, gpu, preset, path)
    # decoding first: a few seconds, and the Fig. 4 shapes below may spend the budget
    measure_decoding(doc, deadline, device, where, *decode)
    impls = [("torch-eager", head_dims), ("flash-attn-2", head_dims)]
    missing = fa3_available()
    if missing is None:
        impls.append(
            ("flash-attn-3", tuple(d for d in FA3_HEAD_DIMS if d in head_dims) or head_dims)
        )
    else:
        doc["failed"].append({"impl": "flash-attn-3", "error": missing})
    for impl, dims in impls:
        for d in dims:
            for causal in (False, True):
                for seq in seqs:
                    batch, heads = TOKENS // seq, HIDDEN // d
                    row = {"impl": impl, "seq": seq, "head_dim": d, "causal": causal}

                    def runs(impl=impl, d=d, causal=causal, seq=seq, batch=batch, heads=heads):
                        calls = make_calls(impl, batch, seq, heads, d, causal, device)
                        shape = (batch, heads, seq, d, causal)
                        return [((*shape, p), calls[p], {}) for p in PASSES if p in calls]

                    time_shape(doc, where, deadline, device, row, runs)
    write_atomic(path, json.dumps(doc, indent=1))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--small", action="store_true", help="a few tiny shapes (a dry run on CPU)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    kw = (
        {"seqs": (512,), "head_dims": (64,), "decode": ((1,), (1024,), (32, 8))}
        if args.small
        else {}
    )
    path = measure(args.out, args.preset, args.budget_s, **kw)
    print(f"timings: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
