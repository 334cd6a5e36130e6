"""The `hbmsim` command line: every subcommand's arguments and how they become a Problem and a
Hardware. The commands themselves live in cli.py; this module only describes and parses.

Bad values end as one line, `hbmsim: error: ARGUMENT: what is allowed` (`_Parser`), never a
usage dump or a traceback.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..algorithms.names import ALGOS
from ..engine.timing import DEFAULT_TIMING, TIMINGS
from ..errors import ConfigError, check_int
from ..explore.cluster import DEFAULT_TIMEOUT_S
from ..files.numbers import parse_number
from ..files.places import RESULTS_DIR
from ..gpu.hardware import BYTES_PER_S_RANGE, Hardware
from ..gpu.presets import PRESETS
from ..gpu.profile import resolve_hardware
from ..libraries.registry import IMPLS
from ..problem.attention import ITEMSIZE, MAX_SCALE, PASSES, Problem
from ..problem.models import MODELS

MAX_SRAM_KIB = 1 << 30  # the hardware model's own limit on SRAM per SM (1 TiB)
EPILOG = (
    "Sizes are exact: ragged tiles are counted as they are, never rounded up. Work is "
    "estimated before it starts and refused past the limits docs/limits.md lists."
)
MAX_SEED = 2**63 - 1


def _number(integer: bool):
    """An argparse type: one number, spelled as every entry point spells one
    (files/numbers.py), or the one message saying how."""

    def parse(text: str):
        try:
            return parse_number(text, integer)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "integer" if integer else "number"
    return parse


INT = _number(integer=True)
FLOAT = _number(integer=False)


def _int_list(field: str):
    def parse(text: str) -> list[int]:
        out = []
        for i, x in enumerate(text.split(",")):  # an empty entry ("64,,128") is refused
            try:
                out.append(parse_number(x, integer=True))
            except ValueError as exc:
                raise argparse.ArgumentTypeError(
                    f"{field}: expected integers separated by commas; item {i + 1} {exc}"
                ) from None
        return out

    return parse


def _window(text: str) -> tuple[int, int]:
    """--window LEFT[,RIGHT]: one or two integers; ranges are the Problem's to check."""
    parts = text.split(",")
    if len(parts) > 2:
        raise argparse.ArgumentTypeError(
            f"window: expected LEFT or LEFT,RIGHT (integers, -1 for unbounded); got {len(parts)} "
            "items"
        )
    sides = _int_list("window")(text)
    return sides[0], sides[1] if len(sides) == 2 else -1


def _add_hardware_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("hardware")
    g.add_argument(
        "--gpu",
        default="h100-sxm",
        help=f"GPU preset ({', '.join(PRESETS)}) or a profile .json (default: %(default)s)",
    )
    g.add_argument(
        "--sram-kib",
        type=INT,
        metavar="KIB",
        help="override the SRAM (shared memory) per SM, in KiB",
    )
    g.add_argument(
        "--hbm-gbps", type=FLOAT, metavar="GB/S", help="override the HBM bandwidth, in GB/s"
    )


def _add_problem_args(ap: argparse.ArgumentParser, seq_list: bool = False) -> None:
    d = Problem()
    g = ap.add_argument_group("problem")
    g.add_argument("--batch", type=INT, default=d.batch, help="batch size (default: %(default)s)")
    g.add_argument(
        "--model",
        metavar="NAME",
        help="a model's attention shape (sets --heads, --kv-heads, --head-dim, --head-dim-v; "
        "a model with a sliding window, mistral-7b, also --causal and --window past its "
        "window; gemma-2 models, whose layers alternate local and global, also --scale, and "
        "simulate runs one layer of each kind; an MLA model, deepseek-*, its absorbed decode "
        "shape with --latent-kv; simulate adds a per-model total over the layers): "
        f"{', '.join(MODELS)}",
    )
    g.add_argument("--heads", type=INT, help=f"query heads (default: {d.heads})")
    g.add_argument(
        "--kv-heads", type=INT, help="K/V heads for GQA/MQA; must divide --heads (default: = heads)"
    )
    if seq_list:
        g.add_argument(
            "--seq",
            type=_int_list("seq"),
            metavar="N[,N...]",
            help="sequence lengths to sweep: each sets seq_q and seq_k, except one fixed by "
            f"--seq-q or --seq-k (default: {d.seq_q})",
        )
    else:
        g.add_argument("--seq", type=INT, help=f"sets both seq_q and seq_k (default: {d.seq_q})")
    g.add_argument("--seq-q", type=INT, help="query length (overrides --seq)")
    g.add_argument("--seq-k", type=INT, help="key/value length (overrides --seq)")
    g.add_argument("--head-dim", type=INT, help=f"d (default: {d.head_dim})")
    _add_kv_layout_args(g)
    g.add_argument(
        "--dtype",
        choices=[t for t in ITEMSIZE],
        default=d.dtype,
        help="storage type of Q, K, V, O (default: %(default)s)",
    )
    g.add_argument("--causal", action="store_true", help="causal (bottom-right aligned) mask")
    g.add_argument(
        "--window",
        type=_window,
        metavar="LEFT[,RIGHT]",
        help="sliding window, flash-attn's window_size=(left, right): query i sees keys "
        "i + off - LEFT .. i + off + RIGHT (off = seq_k - seq_q); -1 leaves a side unbounded; "
        "RIGHT defaults to -1 (0 with --causal, which allows only 0 or -1); each side at most "
        "seq_k (default: no window)",
    )
    g.add_argument(
        "--dropout",
        type=FLOAT,
        default=0.0,
        metavar="P",
        help="dropout probability in [0, 1) (default: 0)",
    )
    g.add_argument(
        "--scale",
        type=FLOAT,
        help=f"softmax scale, > 0 and at most {MAX_SCALE:g} (default: 1/sqrt(head_dim))",
    )
    g.add_argument(
        "--pass",
        dest="pass_",
        choices=PASSES,
        default="fwd",
        help="which pass (default: fwd); fwd+bwd is a training step (split-kv and "
        "flash-decoding run fwd only; flash-attn-3's backward: its latest release, fp16/bf16)",
    )


def _add_kv_layout_args(g) -> None:
    """How K and V are laid out: a value head dim of their own, MLA's latent rows, pages."""
    g.add_argument(
        "--head-dim-v",
        type=INT,
        help="V's and O's head dim when it differs from --head-dim, as in MLA's absorbed form "
        "(576 for q.k, 512 for values); at most --head-dim with --latent-kv; forward only "
        "(default: = head dim)",
    )
    g.add_argument(
        "--latent-kv",
        action="store_true",
        default=None,
        help="MLA's latent K/V: V is K's first --head-dim-v columns, one cache row read once "
        "for both (textbook fa2, fa1, split-kv and standard; forward only)",
    )
    g.add_argument(
        "--page-size",
        type=INT,
        metavar="N",
        help="a paged K/V cache of N tokens per page, read through an int32 block table "
        "(flash_attn_with_kvcache's block_table; --impl flash-decoding only, N a multiple of "
        "256 up to seq_k rounded up to 256) (default: a contiguous cache)",
    )


def _add_tile_args(ap: argparse.ArgumentParser, lists: bool = False) -> None:
    g = ap.add_argument_group("tiles")
    if lists:
        g.add_argument(
            "--bq",
            type=_int_list("bq"),
            default=[],
            metavar="N[,N...]",
            help="Q-block sizes (Br) to sweep (default: the algorithm's default)",
        )
        g.add_argument(
            "--bk",
            type=_int_list("bk"),
            default=[],
            metavar="N[,N...]",
            help="K/V-block sizes (Bc) to sweep (default: the algorithm's default)",
        )
        return
    g.add_argument(
        "--bq",
        type=INT,
        help="rows of Q per tile: Br for fa1/fa2, the output tile's "
        "rows for standard (default: per algorithm)",
    )
    g.add_argument(
        "--bk",
        type=INT,
        help="rows of K/V per tile: Bc for fa1/fa2, the output "
        "tile's columns for standard (default: per algorithm)",
    )
    g.add_argument(
        "--bd",
        type=INT,
        help="standard only: contraction chunk of its matmul kernels (default: 32)",
    )
    g.add_argument(
        "--splits",
        type=INT,
        help="split-kv only: chunks of the K/V sequence (default: enough CTAs for two per SM)",
    )


def hardware_from_args(args) -> Hardware:
    hw = resolve_hardware(args.gpu)
    changes = {}
    if args.sram_kib is not None:
        check_int("sram-kib", args.sram_kib, 2, MAX_SRAM_KIB)
        changes["sram_bytes_per_sm"] = args.sram_kib * 1024
    if args.hbm_gbps is not None:
        lo, hi = (b / 1e9 for b in BYTES_PER_S_RANGE)
        if not lo <= args.hbm_gbps <= hi:  # also refuses nan and inf, which argparse accepts
            raise ConfigError(
                "hbm-gbps", f"must be from {lo:g} to {hi:g} GB/s (got {args.hbm_gbps})"
            )
        changes["hbm_bytes_per_s"] = args.hbm_gbps * 1e9
    return hw.with_overrides(**changes) if changes else hw


class _Parser(argparse.ArgumentParser):
    """Errors as one line (no usage dump), naming the argument: `hbmsim: error: ...`."""

    def error(self, message: str):
        if len(message) > 300:  # a pasted 5,000-digit value is named, not echoed
            message = message[:150] + " ... " + message[-100:]
        self.exit(2, f"hbmsim: error: {message} (see {self.prog} --help)\n")


def build_parser(commands: dict[str, Callable]) -> argparse.ArgumentParser:
    """The whole command line; `commands` maps each subcommand to the function that runs it."""
    ap = _Parser(
        prog="hbmsim",
        description="Where do attention's bytes go on a GPU, and what does that cost? Counts "
        "the HBM traffic, trips and flops of attention's tile programs (textbook standard "
        "attention and FlashAttention, and mirrors of PyTorch eager, flash-attn 1 and 2 and "
        "Flash-Decoding) exactly, at any size, and simulates their time on SMs, L2 and HBM.",
        epilog=EPILOG,
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    for name, add in (
        ("simulate", _simulate_parser),
        ("sweep", _sweep_parser),
        ("trace", _trace_parser),
        ("replay", _replay_parser),
        ("validate", _validate_parser),
        ("explore", _explore_parser),
    ):
        add(sub, commands[name])
    return ap


def _simulate_parser(sub, run: Callable) -> None:
    """`hbmsim simulate`: one configuration counted and timed."""
    sim = sub.add_parser(
        "simulate",
        help="count one configuration and simulate its time (table, or --json)",
        description="Exact HBM bytes, trips, flops, SRAM footprint and roofline time of one "
        "algorithm on one problem (forward, backward or both), then the SimPy engine's "
        "predicted time, DRAM traffic after L2, occupancy and waves (skipped, with the reason, "
        "for plans too large to replay).",
        epilog=EPILOG,
    )
    _add_hardware_args(sim)
    _add_problem_args(sim)
    _add_program_args(sim)
    _add_tile_args(sim)
    sim.add_argument(
        "--verify",
        action="store_true",
        help="also execute the tile programs on random float64 inputs and report "
        "the error against naive attention (small sizes only)",
    )
    sim.add_argument("--seed", type=INT, help="seed of --verify's inputs (default 0)")
    _add_engine_args(sim)
    sim.add_argument(
        "--no-engine", action="store_true", help="counts only: skip the timing simulation"
    )
    sim.add_argument("--json", action="store_true", help="print one JSON object")
    sim.set_defaults(func=run)


def _sweep_parser(sub, run: Callable) -> None:
    """`hbmsim sweep`: every combination of algorithms, sequences and tiles."""
    sw = sub.add_parser(
        "sweep",
        help="sweep tile sizes and sequence lengths (CSV or JSON)",
        description="Counts for every combination of --algo x --seq x --bq x "
        "--bk. Tiles that do not fit SRAM appear as rows with "
        "feasible=false and the reason. At a terminal, a sweep longer than about a second "
        "shows on stderr the row it simulates.",
    )
    _add_hardware_args(sw)
    _add_problem_args(sw, seq_list=True)
    sw.add_argument(
        "--algo",
        help=f"algorithms, comma-separated, from {', '.join(ALGOS)} (default: fa2 when no "
        "--impl is given)",
    )
    sw.add_argument(
        "--impl",
        metavar="NAME[,NAME...]",
        help="implementation mirrors, comma-separated (see simulate --impl); rows name them "
        "in the algo column",
    )
    _add_tile_args(sw, lists=True)
    sw.add_argument(
        "--splits",
        type=INT,
        help="split-kv's chunks of the K/V sequence, for its rows (default: enough CTAs for "
        "two per SM); needs split-kv in --algo",
    )
    sw.add_argument(
        "--no-engine",
        action="store_true",
        help="counts only: leave time_s, dram_bytes and l2_hit_bytes blank",
    )
    sw.add_argument("--no-l2", action="store_true", help="simulate without the L2 cache")
    sw.add_argument(
        "--format", choices=("csv", "json"), default="csv", help="output format (default: csv)"
    )
    sw.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    sw.set_defaults(func=run)


def _trace_parser(sub, run: Callable) -> None:
    """`hbmsim trace`: one configuration's every op, to a file."""
    tr = sub.add_parser(
        "trace",
        help="write the full trace of one configuration to a file",
        description="Every load, store and compute of every CTA, in the "
        "versioned trace format (docs/trace-format.md).",
    )
    _add_hardware_args(tr)
    _add_problem_args(tr)
    _add_program_args(tr)
    _add_tile_args(tr)
    tr.add_argument("-o", "--output", metavar="FILE", required=True, help="trace file to write")
    tr.set_defaults(func=run)


def _replay_parser(sub, run: Callable) -> None:
    """`hbmsim replay`: a saved trace timed by the engine."""
    rp = sub.add_parser(
        "replay",
        help="time a saved trace file with the engine",
        description="Replays every CTA of a trace file (hbmsim trace) through "
        "the engine on the given GPU.",
    )
    rp.add_argument("trace", metavar="TRACE_FILE", help="a file written by hbmsim trace")
    _add_hardware_args(rp)
    _add_engine_args(rp)
    rp.add_argument("--json", action="store_true", help="print one JSON object")
    rp.set_defaults(func=run)


def _validate_parser(sub, run: Callable) -> None:
    """`hbmsim validate`: GPU runs, recorded measurements, published timings."""
    va = sub.add_parser(
        "validate",
        help="measure the CUDA kernels on a GPU and compare with the simulator",
        description="On a GPU: correctness, calibration, a timed sweep of the "
        "kernels in kernels/, then the simulator's predictions, "
        "written to kernels/results/. Anywhere: --measurements "
        "FILE predicts from a recorded run, and --published compares the simulator with "
        "published timings of real libraries (FlashAttention papers).",
    )
    va.add_argument("--out", help="directory for measurements.json (GPU run)")
    va.add_argument("--preset", default="h200", help="hbmsim preset of this GPU (default h200)")
    va.add_argument("--measure-only", action="store_true", help="measure, do not predict")
    va.add_argument(
        "--budget-s",
        type=FLOAT,
        default=420.0,
        help="the GPU run's time budget in seconds, more than 90: the sweep leaves the last 90 "
        "to ncu and SDPA, which start nothing once it is spent (default 420)",
    )
    va.add_argument(
        "--measurements",
        metavar="FILE",
        help="predict from a recorded measurements.json instead of measuring (a batch run: "
        "each configuration's engine may take four times simulate's work bound; one past it "
        "is listed as not simulated); prints the errors per kernel kind",
    )
    va.add_argument(
        "--results-dir",
        default=str(RESULTS_DIR),
        help="where the results file goes (default kernels/results)",
    )
    va.add_argument(
        "--published",
        nargs="?",
        const="",
        metavar="FILE",
        help="predict published GPU timings instead (the set packaged with hbmsim, or FILE "
        "in its format): per point, per source and implementation, and speedups; each point "
        "predicted as it was timed (its timing: loop, synchronized or kernel); a batch "
        "run (minutes) whose engine may take four times simulate's work bound per point",
    )
    va.add_argument("--json", action="store_true", help="with --published: print one JSON object")
    va.add_argument(
        "--report",
        metavar="FILE",
        help="with --published: also write the comparison as JSON to FILE (the app's Validate "
        "page shows hbmsim/data/published_predictions.json and kernels/results/extra/*.json, "
        "written this way)",
    )
    va.set_defaults(func=run)


def _explore_parser(sub, run: Callable) -> None:
    """`hbmsim explore`: a design-space study on Dask distributed."""
    ex = sub.add_parser(
        "explore",
        help="run a design-space study (a spec of axes) on Dask, into one table",
        description="Every point of SPEC (a TOML file of axes: GPUs and hardware fields, "
        "models or shapes, batch, context lengths, passes, programs, tiles; docs/explore.md) "
        "simulated as one task on Dask distributed: an embedded cluster of one worker process "
        "per core, or the cluster at --scheduler. The results form one table (Parquet or CSV "
        "by the suffix) with every input and result column. Resumable: points already in "
        "OUT, or in the journal an interrupted run left beside it, are not run again.",
    )
    ex.add_argument("spec", metavar="SPEC", help="the study's spec, a .toml file")
    ex.add_argument(
        "-o", "--output", metavar="OUT", required=True, help="results table, .parquet or .csv"
    )
    ex.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="a running Dask scheduler, tcp://HOST:PORT (e.g. tcp://10.0.0.5:8786), instead of "
        "the embedded cluster",
    )
    ex.add_argument(
        "--workers",
        type=INT,
        metavar="N",
        help="worker processes of the embedded cluster (default: one per core)",
    )
    ex.add_argument("--limit", type=INT, metavar="N", help="run only the spec's first N points")
    ex.add_argument(
        "--timeout",
        type=FLOAT,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="how long to wait for a --scheduler to answer, and for one of its workers "
        f"(default {DEFAULT_TIMEOUT_S:g})",
    )
    ex.add_argument(
        "--dry-run",
        action="store_true",
        help="check the spec and say how many points it holds and how many OUT lacks; run nothing",
    )
    ex.set_defaults(func=run)


def _add_program_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_mutually_exclusive_group()
    g.add_argument(
        "--algo", choices=ALGOS, help="textbook algorithm, as the papers write it (default: fa2)"
    )
    g.add_argument(
        "--impl",
        metavar="NAME",
        help=f"what a real library runs instead: {', '.join(IMPLS)}; its kernels, tiles, grid "
        "order and per-call overhead follow the library's source (--bq/--bk override its tiles); "
        "NAME@RELEASE runs an older release: flash-attn-1@0.1, flash-attn-2@2.0 (no split-KV, "
        "no GQA packing), flash-attn-3@2024-07",
    )


def _add_engine_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("engine")
    g.add_argument(
        "--no-l2",
        action="store_true",
        help="no L2 cache: every load goes to DRAM (DRAM bytes = HBM bytes)",
    )
    g.add_argument(
        "--exact",
        action="store_true",
        help="replay every op of every CTA on its own (slow reference) instead of "
        "grouping CTAs launched together",
    )
    g.add_argument(
        "--timing",
        choices=tuple(TIMINGS),
        default=DEFAULT_TIMING,
        help="which time to report: "
        + "; ".join(f"{k}: {v}" for k, v in TIMINGS.items())
        + f" (default {DEFAULT_TIMING}; the JSON carries all three)",
    )
    g.add_argument(
        "--timeline",
        metavar="FILE",
        help="write the simulated timeline (start, end, SM, CTA, op, tensor, tile, "
        "bytes, level) as CSV",
    )
