"""The `hbmsim` command: simulate, sweep and trace from the shell.

Every user error ends as one line on stderr, `hbmsim: error: FIELD: what is allowed`, and exit
status 2; a traceback means a bug in hbmsim.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from . import fmt
from .bounds import check_replay
from .errors import ConfigError, HbmsimError, check_int
from .hardware import BYTES_PER_S_RANGE, PRESETS, Hardware, resolve_hardware
from .outfile import check_folder, check_writable, write_atomic
from .problem import ITEMSIZE, MAX_SCALE, PASSES, Problem
from .report import render_result, render_timing
from .schedules import ALGOS

MAX_SRAM_KIB = 1 << 30  # the hardware model's own limit on SRAM per SM (1 TiB)
EPILOG = (
    "Sizes are exact: ragged tiles are counted as they are, never rounded up. Work is "
    "estimated before it starts and refused past the limits README.md lists."
)
MAX_SEED = 2**63 - 1
MAX_SWEEP_ROWS = 512  # each row is one count and simulation: ~0.1 s at small sizes


def _int_list(field: str):
    def parse(text: str) -> list[int]:
        try:  # an empty entry ("64,,128") is refused, not skipped
            return [int(x) for x in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{field}: expected integers separated by commas, none empty (got {text!r})"
            ) from None

    return parse


def _add_hardware_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("hardware")
    g.add_argument(
        "--gpu",
        default="h100-sxm",
        help=f"GPU preset ({', '.join(PRESETS)}) or a profile .json (default: %(default)s)",
    )
    g.add_argument(
        "--sram-kib",
        type=int,
        metavar="KIB",
        help="override the SRAM (shared memory) per SM, in KiB",
    )
    g.add_argument(
        "--hbm-gbps", type=float, metavar="GB/S", help="override the HBM bandwidth, in GB/s"
    )


def _add_problem_args(ap: argparse.ArgumentParser, seq_list: bool = False) -> None:
    d = Problem()
    g = ap.add_argument_group("problem")
    g.add_argument("--batch", type=int, default=d.batch, help="batch size (default: %(default)s)")
    g.add_argument("--heads", type=int, default=d.heads, help="query heads (default: %(default)s)")
    g.add_argument(
        "--kv-heads", type=int, help="K/V heads for GQA/MQA; must divide --heads (default: = heads)"
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
        g.add_argument("--seq", type=int, help=f"sets both seq_q and seq_k (default: {d.seq_q})")
    g.add_argument("--seq-q", type=int, help="query length (overrides --seq)")
    g.add_argument("--seq-k", type=int, help="key/value length (overrides --seq)")
    g.add_argument("--head-dim", type=int, default=d.head_dim, help="d (default: %(default)s)")
    g.add_argument(
        "--dtype",
        choices=[t for t in ITEMSIZE],
        default=d.dtype,
        help="storage type of Q, K, V, O (default: %(default)s)",
    )
    g.add_argument("--causal", action="store_true", help="causal (bottom-right aligned) mask")
    g.add_argument(
        "--dropout",
        type=float,
        default=0.0,
        metavar="P",
        help="dropout probability in [0, 1) (default: 0)",
    )
    g.add_argument(
        "--scale",
        type=float,
        help=f"softmax scale, > 0 and at most {MAX_SCALE:g} (default: 1/sqrt(head_dim))",
    )
    g.add_argument(
        "--pass", dest="pass_", choices=PASSES, default="fwd", help="which pass (default: fwd)"
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
        type=int,
        help="rows of Q per tile: Br for fa1/fa2, the output tile's "
        "rows for standard (default: per algorithm)",
    )
    g.add_argument(
        "--bk",
        type=int,
        help="rows of K/V per tile: Bc for fa1/fa2, the output "
        "tile's columns for standard (default: per algorithm)",
    )
    g.add_argument(
        "--bd",
        type=int,
        help="standard only: contraction chunk of its matmul kernels (default: 32)",
    )
    g.add_argument(
        "--splits",
        type=int,
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


def problem_from_args(args, seq: int | None = None) -> Problem:
    if args.scale is not None and not 0 < args.scale <= MAX_SCALE:  # also nan and inf
        raise ConfigError("scale", f"must be > 0 and at most {MAX_SCALE:g} (got {args.scale})")
    if isinstance(args.seq, int) and args.seq_q is not None and args.seq_k is not None:
        raise ConfigError("seq", "--seq-q and --seq-k set both lengths: drop --seq")
    seq = seq if seq is not None else (args.seq if isinstance(args.seq, int) else None)
    default = Problem()
    seq_q = args.seq_q if args.seq_q is not None else (seq if seq is not None else default.seq_q)
    seq_k = args.seq_k if args.seq_k is not None else (seq if seq is not None else default.seq_k)
    return Problem(
        batch=args.batch,
        heads=args.heads,
        kv_heads=args.kv_heads,
        seq_q=seq_q,
        seq_k=seq_k,
        head_dim=args.head_dim,
        dtype=args.dtype,
        causal=args.causal,
        dropout=args.dropout,
        softmax_scale=args.scale,
        pass_=args.pass_,
    )


def _refuse_ignored(args) -> None:
    """Flags that would change nothing in this combination are refused, never dropped."""
    timeline = getattr(args, "timeline", None)
    if timeline is not None and not timeline.strip():
        raise ConfigError("timeline", "give a file name for the timeline CSV (got an empty path)")
    if getattr(args, "no_engine", False):
        for flag, given in (
            ("exact", getattr(args, "exact", False)),
            ("no-l2", args.no_l2),
            ("timeline", timeline is not None),
        ):
            if given:
                raise ConfigError(flag, "only applies to the engine; drop --no-engine or --" + flag)


def _check_verify_finite(verify: dict | None, scale: float | None) -> None:
    """An error that is not a finite number proves nothing: say so instead of reporting it."""
    if verify is None:
        return
    errors = {k: v for k, v in verify.items() if not isinstance(v, dict)}
    errors.update({f"grad_rel_err[{k}]": v for k, v in verify.get("grad_rel_err", {}).items()})
    bad = [k for k, v in errors.items() if not math.isfinite(v)]
    if bad:
        raise HbmsimError(
            f"verify: {bad[0]} is {errors[bad[0]]} (the float64 execution overflowed"
            + (f" at softmax scale {scale:g}" if scale is not None else "")
            + "); nothing was verified"
        )


def strict_json(obj) -> str:
    """JSON as the standard defines it: a value that is not a finite number (NaN, Infinity,
    which Python would write bare) is refused with its path instead of written."""
    try:
        return json.dumps(obj, indent=1, allow_nan=False)
    except ValueError:
        raise HbmsimError(f"json: {_first_non_finite(obj, '')} is not a finite number") from None


def _first_non_finite(obj, path: str) -> str:
    items = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for key, value in items:
        if isinstance(value, float) and not math.isfinite(value):
            return f"{path}.{key}".lstrip(".")
        if isinstance(value, dict | list):
            found = _first_non_finite(value, f"{path}.{key}")
            if found:
                return found
    return ""


# --- commands ------------------------------------------------------------------------------


class Progress:
    """A progress bar on stderr that appears only once a run has taken about a second."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.start = time.monotonic()
        self.last = 0.0  # redraw at most five times a second
        self.shown = False

    def __call__(self, fraction: float) -> None:
        now = time.monotonic()
        if not self.enabled or now - self.start < 1.0 or now - self.last < 0.2:
            return
        self.last = now
        self.shown = True
        filled = int(30 * min(1.0, fraction))
        sys.stderr.write(
            f"\rsimulating [{'#' * filled}{'.' * (30 - filled)}] {100 * fraction:3.0f}%"
        )
        sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r" + " " * 50 + "\r")
            sys.stderr.flush()


def cmd_simulate(args) -> int:
    from .api import engine_result, simulate
    from .timeline import write_timeline

    _refuse_ignored(args)
    if args.seed is not None and not args.verify:
        raise ConfigError("seed", "seeds --verify's inputs; add --verify or drop --seed")
    if args.seed is not None:
        check_int("seed", args.seed, 0, MAX_SEED)
    if args.timeline is not None:
        check_writable(args.timeline, "timeline")  # before the work, not after
    progress = Progress(enabled=not args.json)
    try:
        result = simulate(
            problem_from_args(args),
            hardware_from_args(args),
            args.algo,
            impl=args.impl,
            bq=args.bq,
            bk=args.bk,
            bd=args.bd,
            splits=args.splits,
            verify=args.verify,
            seed=args.seed or 0,
            engine=not args.no_engine,
            l2=not args.no_l2,
            exact=args.exact,
            timeline=bool(args.timeline),
            progress=progress,
        )
    finally:
        progress.close()
    if args.timeline:
        timing = engine_result(result)
        if timing is None:
            raise HbmsimError(f"timeline: {result.extra['engine']['skipped']}")
        rows = write_timeline(timing, args.timeline)
        note = " (truncated)" if timing.timeline_truncated else ""
        print(f"wrote {rows:,} timeline rows{note} to {args.timeline}", file=sys.stderr)
    _check_verify_finite(result.extra.get("verify"), args.scale)
    if args.json:
        print(strict_json(result.to_dict()))
    else:
        print(render_result(result))
    return 0


def _validate_published(args) -> int:
    """Every published timing that names an implementation, predicted and compared."""
    from . import __version__
    from .published import load_published, predict, render, summarize

    for flag, given in (
        ("measurements", args.measurements is not None),
        ("out", args.out is not None),
        ("measure-only", args.measure_only),
    ):
        if given:
            raise ConfigError(flag, "is for kernel measurements; --published needs none")
    if args.report is not None:
        check_writable(args.report, "report")
    points, _ = load_published(args.published or None)
    show = not args.json and sys.stderr.isatty()

    def progress(n, total, pt):
        if show:
            sys.stderr.write(f"\rsimulating point {n + 1}/{total} ({pt.series})" + " " * 10)
            sys.stderr.flush()

    rows = predict(points, progress)
    if show:
        sys.stderr.write("\r" + " " * 100 + "\r")
    summary = summarize(rows)
    report = {
        "hbmsim": __version__,
        "date": time.strftime("%Y-%m-%d"),
        "set": args.published or "packaged",
        "points": rows,
        **summary,
    }
    if args.report is not None:
        write_atomic(args.report, json.dumps(report, indent=1, allow_nan=False), "report")
    if args.json:
        print(json.dumps(report, indent=1, allow_nan=False))
    else:
        print(render(rows, summary))
    return 0


def cmd_validate(args) -> int:
    """The GPU validation run (kernels/validate.py), or its prediction half alone; or, with
    --published, the published timings."""
    if args.published is not None:
        return _validate_published(args)
    for flag, given in (("json", args.json), ("report", args.report is not None)):
        if given:
            raise ConfigError(flag, "applies to --published only")
    root = Path(__file__).resolve().parent.parent
    if not (root / "kernels" / "validate.py").exists():
        raise HbmsimError("validate: needs a source checkout (kernels/ beside hbmsim/)")
    sys.path.insert(0, str(root))
    from kernels import validate

    results_dir = check_folder(args.results_dir, "results-dir")
    if args.measurements is not None:
        for flag, given in (("out", args.out is not None), ("measure-only", args.measure_only)):
            if given:
                raise ConfigError(flag, "measures on a GPU; --measurements predicts from a file")
        print(f"results: {validate.predict(Path(args.measurements), results_dir)}")
        return 0
    if args.out is None:
        raise ConfigError("out", "give --out DIR to measure on this GPU, or --measurements FILE")
    check_folder(args.out, "out")
    if problem := validate.budget_problem(args.budget_s):
        raise ConfigError("budget-s", problem)
    try:
        import cupy

        ok = cupy.cuda.is_available()
    except Exception:  # noqa: BLE001 - no CuPy or no driver
        ok = False
    if not ok:
        raise HbmsimError(
            "validate: measuring needs CuPy and a CUDA GPU (pip install -e "
            "'.[gpu]'); --measurements FILE predicts from a previous run"
        )
    argv = [
        "--out",
        str(args.out),
        "--preset",
        args.preset,
        "--results-dir",
        str(args.results_dir),
        "--budget-s",
        str(args.budget_s),
    ] + (["--measure-only"] if args.measure_only else [])
    return validate.main(argv)


def cmd_replay(args) -> int:
    from .engine import simulate_workload

    _refuse_ignored(args)
    from .timeline import write_timeline
    from .tracefile import load_trace
    from .workload import from_trace

    if args.timeline is not None:
        check_writable(args.timeline, "timeline")
    hw = hardware_from_args(args)
    trace = load_trace(args.trace)
    check_replay(len(trace.records))
    progress = Progress(enabled=not args.json)
    try:
        timing = simulate_workload(
            from_trace(trace),
            hw,
            l2=not args.no_l2,
            exact=args.exact,
            timeline=bool(args.timeline),
            progress=progress,
        )
    finally:
        progress.close()
    if args.timeline:
        rows = write_timeline(timing, args.timeline)
        print(f"wrote {rows:,} timeline rows to {args.timeline}", file=sys.stderr)
    totals = trace.totals()
    out = {
        "algo": trace.meta["algo"],
        "problem": trace.meta["problem"],
        "tiles": trace.meta["tiles"],
        "hardware": hw.to_dict(),
        **{k: totals[k] for k in ("hbm_read_bytes", "hbm_write_bytes", "trips")},
        **timing.to_dict(),
    }
    if args.json:
        print(strict_json(out))
        return 0
    print(
        f"replayed {args.trace} ({trace.meta['algo']}, {len(trace.records):,} records) on {hw.name}"
    )
    print(render_timing(timing))
    return 0


def cmd_sweep(args) -> int:
    from .sweep import SweepSpec, run_sweep, to_csv, to_json

    _refuse_ignored(args)
    if args.output is not None:
        check_writable(args.output, "output")
    algos = [a.strip() for a in (args.algo or "").split(",") if a.strip()]
    algos += [a.strip() for a in (args.impl or "").split(",") if a.strip()]
    if not algos and args.algo is None and args.impl is None:
        algos = ["fa2"]
    hw = hardware_from_args(args)
    problems = _sweep_problems(args)
    rows = len(algos) * len(problems) * max(1, len(args.bq)) * max(1, len(args.bk))
    if rows > MAX_SWEEP_ROWS:
        raise ConfigError(
            "sweep",
            f"{rows:,} rows (algo x seq x bq x bk); a sweep runs at most "
            f"{MAX_SWEEP_ROWS:,}: sweep fewer values per axis",
        )
    rows = []
    for problem in problems:  # --seq outermost, as run_sweep orders its rows
        spec = SweepSpec(
            problem, hw, algos, None, args.bq, args.bk, engine=not args.no_engine, l2=not args.no_l2
        )
        rows += run_sweep(spec)
    text = to_json(rows) if args.format == "json" else to_csv(rows)
    if args.output is not None:
        write_atomic(args.output, text, "output")
        feasible = sum(r["feasible"] for r in rows)
        print(f"wrote {len(rows)} rows ({feasible} feasible) to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _sweep_problems(args) -> list[Problem]:
    """One problem per --seq point: --seq sets both lengths, and --seq-q or --seq-k holds that
    one fixed while --seq sweeps the other (`--seq-q 1` sweeps a decoding KV cache)."""
    if not args.seq:
        return [problem_from_args(args)]
    if args.seq_q is not None and args.seq_k is not None:
        raise ConfigError("seq", "--seq-q and --seq-k fix both lengths: drop --seq or one of them")
    return [problem_from_args(args, seq=seq) for seq in args.seq]


def cmd_trace(args) -> int:
    from .api import build_plan
    from .trace import trace_plan
    from .tracefile import save_trace

    check_writable(args.output, "output")
    plan = build_plan(
        problem_from_args(args),
        hardware_from_args(args),
        args.algo,
        args.impl,
        args.bq,
        args.bk,
        args.bd,
        args.splits,
    )
    trace = trace_plan(plan)
    size = save_trace(trace, args.output)
    print(f"wrote {len(trace.records):,} records ({fmt.bytes_(size)}) to {args.output}")
    return 0


class _Parser(argparse.ArgumentParser):
    """Errors as one line (no usage dump), naming the argument: `hbmsim: error: ...`."""

    def error(self, message: str):
        if len(message) > 300:  # a pasted 5,000-digit value is named, not echoed
            message = message[:150] + " ... " + message[-100:]
        self.exit(2, f"hbmsim: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="hbmsim",
        description="Where do attention's bytes go on a GPU, and what does that cost? Counts "
        "the HBM traffic, trips and flops of standard attention and FlashAttention "
        "(FA1, FA2) tile programs exactly, at any size, and simulates their time on "
        "SMs, L2 and HBM.",
        epilog=EPILOG,
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

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
    sim.add_argument("--seed", type=int, help="seed of --verify's inputs (default 0)")
    _add_engine_args(sim)
    sim.add_argument(
        "--no-engine", action="store_true", help="counts only: skip the timing simulation"
    )
    sim.add_argument("--json", action="store_true", help="print one JSON object")
    sim.set_defaults(func=cmd_simulate)

    sw = sub.add_parser(
        "sweep",
        help="sweep tile sizes and sequence lengths (CSV or JSON)",
        description="Counts for every combination of --algo x --seq x --bq x "
        "--bk. Tiles that do not fit SRAM appear as rows with "
        "feasible=false and the reason.",
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
        "--no-engine",
        action="store_true",
        help="counts only: leave time_s, dram_bytes and l2_hit_bytes blank",
    )
    sw.add_argument("--no-l2", action="store_true", help="simulate without the L2 cache")
    sw.add_argument(
        "--format", choices=("csv", "json"), default="csv", help="output format (default: csv)"
    )
    sw.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    sw.set_defaults(func=cmd_sweep)

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
    tr.set_defaults(func=cmd_trace)

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
    rp.set_defaults(func=cmd_replay)

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
        type=float,
        default=420.0,
        help="the GPU run's time budget in seconds, more than 90: the sweep leaves the last 90 "
        "to ncu and SDPA, which start nothing once it is spent (default 420)",
    )
    va.add_argument(
        "--measurements",
        metavar="FILE",
        help="predict from a recorded measurements.json instead of measuring",
    )
    va.add_argument(
        "--results-dir",
        default=str(Path(__file__).resolve().parent.parent / "kernels" / "results"),
        help="where the results file goes (default kernels/results)",
    )
    va.add_argument(
        "--published",
        nargs="?",
        const="",
        metavar="FILE",
        help="predict published GPU timings instead (the set packaged with hbmsim, or FILE "
        "in its format): per point, per source and implementation, and speedups; a batch "
        "run (minutes) whose engine may take four times simulate's work bound per point",
    )
    va.add_argument("--json", action="store_true", help="with --published: print one JSON object")
    va.add_argument(
        "--report",
        metavar="FILE",
        help="with --published: also write the comparison as JSON to FILE (the app's Validate "
        "page shows hbmsim/data/published_predictions.json, written this way)",
    )
    va.set_defaults(func=cmd_validate)
    return ap


def _add_program_args(ap: argparse.ArgumentParser) -> None:
    from .impls import IMPLS

    g = ap.add_mutually_exclusive_group()
    g.add_argument(
        "--algo", choices=ALGOS, help="textbook algorithm, as the papers write it (default: fa2)"
    )
    g.add_argument(
        "--impl",
        metavar="NAME",
        help=f"what a real library runs instead: {', '.join(IMPLS)}; its kernels, tiles, grid "
        "order and per-call overhead follow the library's source (--bq/--bk override its tiles)",
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
        "--timeline",
        metavar="FILE",
        help="write the simulated timeline (start, end, SM, CTA, op, tensor, tile, "
        "bytes, level) as CSV",
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except HbmsimError as exc:
        print(f"hbmsim: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
