"""The `hbmsim` command: simulate, sweep and trace from the shell.

Every user error ends as one line on stderr, `hbmsim: error: FIELD: what is allowed`, and exit
status 2; a traceback means a bug in hbmsim.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import fmt
from .errors import ConfigError, HbmsimError
from .hardware import PRESETS, Hardware, resolve_hardware
from .problem import ITEMSIZE, PASSES, Problem
from .report import render_result, render_timing
from .schedules import ALGOS

EPILOG = "Sizes are exact: ragged tiles are counted as they are, never rounded up."


def _int_list(field: str):
    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{field}: expected integers separated by commas (got {text!r})"
            ) from None
        if not values:
            raise argparse.ArgumentTypeError(f"{field}: give at least one value")
        return values

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
            help=f"sequence lengths to sweep (sets seq_q and seq_k; default: {d.seq_q})",
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
    g.add_argument("--scale", type=float, help="softmax scale (default: 1/sqrt(head_dim))")
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
        if args.sram_kib < 2:
            raise ConfigError("sram-kib", f"must be at least 2 KiB (got {args.sram_kib})")
        changes["sram_bytes_per_sm"] = args.sram_kib * 1024
    if args.hbm_gbps is not None:
        if not args.hbm_gbps > 0:
            raise ConfigError("hbm-gbps", f"must be > 0 GB/s (got {args.hbm_gbps})")
        changes["hbm_bytes_per_s"] = args.hbm_gbps * 1e9
    return hw.with_overrides(**changes) if changes else hw


def problem_from_args(args, seq: int | None = None) -> Problem:
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

    if args.timeline and args.no_engine:
        raise ConfigError("timeline", "needs the engine; drop --no-engine")
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
            seed=args.seed,
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
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        print(render_result(result))
    return 0


def _validate_published(args) -> int:
    """Every published timing that names an implementation, predicted and compared."""
    from .published import load_published, predict, render, summarize

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
    if args.json:
        print(json.dumps({"points": rows, **summary}, indent=1, allow_nan=False))
    else:
        print(render(rows, summary))
    return 0


def cmd_validate(args) -> int:
    """The GPU validation run (kernels/validate.py), or its prediction half alone; or, with
    --published, the published timings."""
    if args.published is not None:
        return _validate_published(args)
    root = Path(__file__).resolve().parent.parent
    if not (root / "kernels" / "validate.py").exists():
        raise HbmsimError("validate: needs a source checkout (kernels/ beside hbmsim/)")
    sys.path.insert(0, str(root))
    from kernels import validate

    if args.measurements:
        if not args.measurements.exists():
            raise HbmsimError(f"measurements: no such file {args.measurements}")
        print(f"results: {validate.predict(args.measurements, args.results_dir)}")
        return 0
    if args.out is None:
        raise ConfigError("out", "give --out DIR to measure on this GPU, or --measurements FILE")
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
    from .timeline import write_timeline
    from .trace import load_trace
    from .workload import from_trace

    trace = load_trace(args.trace)
    hw = hardware_from_args(args)
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
        print(json.dumps(out, indent=1))
        return 0
    print(
        f"replayed {args.trace} ({trace.meta['algo']}, {len(trace.records):,} records) on {hw.name}"
    )
    print(render_timing(timing))
    return 0


def cmd_sweep(args) -> int:
    from .sweep import SweepSpec, run_sweep, to_csv, to_json

    algos = [a.strip() for a in (args.algo or "").split(",") if a.strip()]
    algos += [a.strip() for a in (args.impl or "").split(",") if a.strip()]
    if not algos and args.algo is None and args.impl is None:
        algos = ["fa2"]
    seqs = args.seq or []
    problem = problem_from_args(args, seq=seqs[0] if seqs else None)
    spec = SweepSpec(
        problem,
        hardware_from_args(args),
        algos,
        seqs or None,
        args.bq,
        args.bk,
        engine=not args.no_engine,
        l2=not args.no_l2,
    )
    rows = run_sweep(spec)
    text = to_json(rows) if args.format == "json" else to_csv(rows)
    if args.output:
        Path(args.output).write_text(text)
        feasible = sum(r["feasible"] for r in rows)
        print(f"wrote {len(rows)} rows ({feasible} feasible) to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_trace(args) -> int:
    from .api import build_plan
    from .trace import save_trace, trace_plan

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
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


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
    sim.add_argument("--seed", type=int, default=0, help="seed of --verify's inputs (default 0)")
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
    va.add_argument("--out", type=Path, help="directory for measurements.json (GPU run)")
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
        type=Path,
        metavar="FILE",
        help="predict from a recorded measurements.json instead of measuring",
    )
    va.add_argument(
        "--results-dir",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "kernels" / "results",
        help="where the results file goes (default kernels/results)",
    )
    va.add_argument(
        "--published",
        nargs="?",
        const="",
        metavar="FILE",
        help="predict published GPU timings instead (the set packaged with hbmsim, or FILE "
        "in its format): per point, per source and implementation, and speedups",
    )
    va.add_argument("--json", action="store_true", help="with --published: print one JSON object")
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
