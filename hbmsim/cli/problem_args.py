"""How the command line's problem flags become a Problem: the lengths, the shape from the flags
or a --model preset (a flag and the preset that also sets it refused together), the model's
mask and scale, and the layers a command may run."""

from __future__ import annotations

from ..errors import ConfigError
from ..problem.attention import MAX_SCALE, Problem
from ..problem.models import get_model


def problem_from_args(args, seq: int | None = None, layer_kinds: bool = False) -> Problem:
    """The problem the flags describe. With --model, the model's layer: for a model that
    alternates local and global layers, its global layer, which only a caller that simulates
    every kind (`layer_kinds`, simulate's per-model total) may take; the others refuse it."""
    if args.scale is not None and not 0 < args.scale <= MAX_SCALE:  # also nan and inf
        raise ConfigError("scale", f"must be > 0 and at most {MAX_SCALE:g} (got {args.scale})")
    if isinstance(args.seq, int) and args.seq_q is not None and args.seq_k is not None:
        raise ConfigError("seq", "--seq-q and --seq-k set both lengths: drop --seq")
    seq = seq if seq is not None else (args.seq if isinstance(args.seq, int) else None)
    default = Problem()
    seq_q = args.seq_q if args.seq_q is not None else (seq if seq is not None else default.seq_q)
    seq_k = args.seq_k if args.seq_k is not None else (seq if seq is not None else default.seq_k)
    left, right = args.window if args.window is not None else (-1, -1)
    mask = {"causal": args.causal, "window_left": left, "window_right": right}
    scale = {"softmax_scale": args.scale}
    if args.model is not None:
        model = get_model(args.model)
        _check_model_layers(model, args, layer_kinds)
        preset = model.attention(seq_k)
        if preset and args.window is not None:
            raise ConfigError(
                "window",
                f"--model {args.model} sets its sliding window ({preset['window_left']:,}) at "
                f"{seq_k:,} keys: drop --window or --model",
            )
        mask.update(preset)
        if model.scale() and args.scale is not None:
            raise ConfigError(
                "scale",
                f"--model {model.name} sets the softmax scale ({model.query_scale:g}, "
                f"{model.query_scale_source}): drop --scale or --model",
            )
        scale.update(model.scale())
    return Problem(
        batch=args.batch,
        seq_q=seq_q,
        seq_k=seq_k,
        **_shape_from_args(args),
        dtype=args.dtype,
        dropout=args.dropout,
        pass_=args.pass_,
        page_size=args.page_size,
        **scale,
        **mask,
    )


def _check_model_layers(model, args, layer_kinds: bool) -> None:
    """A model alternating local and global layers sets each layer's window itself: a
    --window would say which layers it replaces, so it is refused; and a command that runs
    one layer (sweep, trace) is refused rather than silently running the global one."""
    if not model.alternating:
        return
    if args.window is not None:
        raise ConfigError(
            "window",
            f"--model {model.name} sets each layer's window (local layers "
            f"{model.local_window:,} keys, global layers none): drop --window or --model",
        )
    if not layer_kinds:
        raise ConfigError(
            "model",
            f"{model.name} alternates local and global layers; `hbmsim simulate --model "
            f"{model.name}` simulates both, here give one layer's shape: --heads "
            f"{model.heads} --kv-heads {model.kv_heads} --head-dim {model.head_dim} (local: "
            f"--causal --window {model.local_window - 1})",
        )


def _shape_from_args(args) -> dict:
    """heads, kv_heads, head_dim, head_dim_v and latent_kv: from --model, or the flags (a
    flag and the model that also sets it are refused together, rather than one silently
    winning)."""
    given = {
        "heads": args.heads,
        "kv_heads": args.kv_heads,
        "head_dim": args.head_dim,
        "head_dim_v": args.head_dim_v,
        "latent_kv": args.latent_kv,
    }
    if args.model is None:
        default = Problem()
        return {
            "heads": default.heads if args.heads is None else args.heads,
            "kv_heads": args.kv_heads,
            "head_dim": default.head_dim if args.head_dim is None else args.head_dim,
            "head_dim_v": args.head_dim_v,
            "latent_kv": bool(args.latent_kv),
        }
    model = get_model(args.model)
    for name, value in given.items():
        if value is not None:
            flag = "--" + name.replace("_", "-")
            sets = getattr(model, name)
            if name == "head_dim_v" and sets is None:
                sets = model.head_dim
            raise ConfigError(
                name.replace("_", "-"),
                f"--model {model.name} sets {name} ({str(sets).lower()}): drop {flag} or --model",
            )
    return model.shape()
