"""The `hbmsim` command: simulate, sweep and trace from the shell.

Every user error ends as one line on stderr, `hbmsim: error: FIELD: what is allowed`, and exit
status 2; a traceback means a bug in hbmsim.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

from .. import __version__, fmt
from ..errors import ConfigError, HbmsimError, check_int
from ..files.places import CHECKOUT_DIR
from ..files.writer import check_folder, check_not_input, check_writable, write_atomic
from ..interpret.trace import trace_plan
from ..interpret.tracefile import known_program, load_trace, save_trace
from ..problem.attention import Problem
from ..problem.models import get_model
from ..validation.gpu_runs import render as render_results
from . import finished, started
from .parser import MAX_SEED, hardware_from_args
from .parser import build_parser as _build_parser
from .problem_args import problem_from_args
from .report import render_result, render_timing
from .streams import BROKEN_PIPE_STATUS, OutputError, guarded_output, say, silence_stdout

MAX_SWEEP_ROWS = 512  # each row is one count and simulation: ~0.1 s at small sizes


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


def _check_output(path, field: str, args) -> None:
    """An output path, refused before the work when it cannot be written or when it is one of
    the command's own input files."""
    check_writable(path, field)
    gpu = getattr(args, "gpu", None)
    inputs = {
        "--gpu": gpu if gpu is not None and gpu.endswith(".json") else None,
        "trace": getattr(args, "trace", None),
        "--published": getattr(args, "published", None) or None,
        "--measurements": getattr(args, "measurements", None),
        "spec": getattr(args, "spec", None),
    }
    check_not_input(path, field, inputs)


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
    """A progress bar on stderr, where stderr is a terminal, that appears only once a run has
    taken about a second (AFTER_S), with what it is computing when told (a pipe or a file
    gets none: it would only add carriage returns to what a program reads)."""

    AFTER_S = 1.0

    def __init__(self, enabled: bool = True):
        self.enabled = enabled and sys.stderr.isatty()
        self.start = time.monotonic()
        self.last = 0.0  # redraw at most five times a second
        self.width = 0  # the longest line drawn, to clear

    def __call__(self, fraction: float, what: str = "") -> None:
        now = time.monotonic()
        if not self.enabled or now - self.start < self.AFTER_S or now - self.last < 0.2:
            return
        self.last = now
        filled = int(30 * min(1.0, fraction))
        line = f"simulating [{'#' * filled}{'.' * (30 - filled)}] {100 * fraction:3.0f}%"
        line += f" {what}" if what else ""
        self.width = max(self.width, len(line))
        sys.stderr.write("\r" + line.ljust(self.width))
        sys.stderr.flush()

    def close(self) -> None:
        if self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()


def cmd_simulate(args) -> int:
    # deferred: SimPy (the engine), loaded by the commands that time, not by `hbmsim --help`
    from ..api import engine_result, simulate, simulate_model
    from ..engine.timeline import write_timeline

    _refuse_ignored(args)
    if args.seed is not None and not args.verify:
        raise ConfigError("seed", "seeds --verify's inputs; add --verify or drop --seed")
    if args.seed is not None:
        check_int("seed", args.seed, 0, MAX_SEED)
    if args.timeline is not None:
        _check_output(args.timeline, "timeline", args)  # before the work, not after
    progress = Progress()
    kw = dict(
        algo=args.algo,
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
        timing=args.timing,
    )
    problem = problem_from_args(args, layer_kinds=True)
    hardware = hardware_from_args(args)
    try:
        if args.model is None:
            result, per_model = simulate(problem, hardware, **kw), None
        else:  # each kind of layer, and the per-model total; the report shows the global one
            per_model = simulate_model(args.model, problem, hardware, **kw)
            result = per_model.primary
    finally:
        progress.close()
    if args.timeline:
        timing = engine_result(result)
        if timing is None:
            raise HbmsimError(f"timeline: {result.extra['engine']['skipped']}")
        rows = write_timeline(timing, args.timeline)
        note = " (truncated)" if timing.timeline_truncated else ""
        if per_model and per_model.model.alternating:
            note += " (a global layer's)"
        print(f"wrote {rows:,} timeline rows{note} to {args.timeline}", file=sys.stderr)
    for _, r in per_model.kinds if per_model else [(None, result)]:
        _check_verify_finite(r.extra.get("verify"), r.plan.problem.softmax_scale)
    model = _model_window(args, result.plan.problem)
    if args.json:
        out = result.to_dict()
        if per_model:
            out["model"] = {**per_model.to_dict(), **(model or {})}
        print(strict_json(out))
    else:
        lines = [render_result(result)]
        note = model and (model.get("window_note") or model.get("latent_note"))
        if note:
            lines.append(f"model: {note}")
        if per_model:
            lines += per_model.lines()
        print("\n".join(lines))
    return 0


def _model_window(args, problem) -> dict | None:
    """What a --model preset with a sliding window or latent K/V set, said in the output
    (None otherwise)."""
    if args.model is None:
        return None
    m = get_model(args.model)
    if m.latent_kv:
        return {"name": m.name, "latent_note": m.latent_note()}
    if m.window is None:
        return None
    return {
        "name": m.name,
        "window": m.window,
        "window_source": m.window_source,
        "window_note": m.window_note(problem.seq_k),
    }


def _validate_published(args) -> int:
    """Every published timing that names an implementation, predicted and compared."""
    # deferred: SimPy (the engine), loaded by the commands that time, not by `hbmsim --help`
    from ..validation.published import load_published, predict, render, summarize

    for flag, given in (
        ("measurements", args.measurements is not None),
        ("out", args.out is not None),
        ("measure-only", args.measure_only),
    ):
        if given:
            raise ConfigError(flag, "is for kernel measurements; --published needs none")
    if args.report is not None:
        _check_output(args.report, "report", args)
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
    root = CHECKOUT_DIR
    if not (root / "kernels" / "validate.py").exists():
        raise HbmsimError("validate: needs a source checkout (kernels/ beside hbmsim/)")
    sys.path.insert(0, str(root))
    from kernels import validate  # deferred: kernels/ exists only in a source checkout

    results_dir = check_folder(args.results_dir, "results-dir")
    if args.measurements is not None:
        for flag, given in (("out", args.out is not None), ("measure-only", args.measure_only)):
            if given:
                raise ConfigError(flag, "measures on a GPU; --measurements predicts from a file")
        path = validate.predict(Path(args.measurements), results_dir)
        print(render_results(json.loads(path.read_text())))
        print(f"results: {path}")
        return 0
    if args.out is None:
        raise ConfigError("out", "give --out DIR to measure on this GPU, or --measurements FILE")
    check_folder(args.out, "out")
    if problem := validate.budget_problem(args.budget_s):
        raise ConfigError("budget-s", problem)
    try:
        import cupy  # deferred: CuPy, an optional dependency (the `gpu` extra)

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
    # deferred: SimPy (the engine), loaded by the commands that time, not by `hbmsim --help`
    from ..engine.limits import check_replay
    from ..engine.simulation import simulate_workload
    from ..engine.timeline import write_timeline
    from ..engine.workload.work import from_trace

    _refuse_ignored(args)

    if args.timeline is not None:
        _check_output(args.timeline, "timeline", args)
    hw = hardware_from_args(args)
    trace = load_trace(args.trace)
    check_replay(len(trace.records))
    progress = Progress()
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
    timing = dataclasses.replace(timing, timing=args.timing)
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
    if not known_program(trace.meta["algo"]):
        note = "is not a program of this hbmsim: its header was checked against its records only"
        out["note"] = f"{trace.meta['algo']} {note}"
    if args.json:
        print(strict_json(out))
        return 0
    print(
        f"replayed {args.trace} ({trace.meta['algo']}, {len(trace.records):,} records) on {hw.name}"
    )
    if "note" in out:
        print(f"note: {out['note']}")
    print(render_timing(timing))
    return 0


def cmd_sweep(args) -> int:
    # deferred: SimPy (the engine), loaded by the commands that time, not by `hbmsim --help`
    from ..explore.sweep import SweepSpec, run_sweep, to_csv, to_json

    _refuse_ignored(args)
    if args.output is not None:
        _check_output(args.output, "output", args)
    algos = [a.strip() for a in (args.algo or "").split(",") if a.strip()]
    algos += [a.strip() for a in (args.impl or "").split(",") if a.strip()]
    if not algos and args.algo is None and args.impl is None:
        algos = ["fa2"]
    if args.splits is not None and "split-kv" not in algos:
        raise ConfigError("splits", "only applies to split-kv: add it to --algo, or drop --splits")
    hw = hardware_from_args(args)
    problems = _sweep_problems(args)
    total = len(algos) * len(problems) * max(1, len(args.bq)) * max(1, len(args.bk))
    if total > MAX_SWEEP_ROWS:
        raise ConfigError(
            "sweep",
            f"{total:,} rows (algo x seq x bq x bk); a sweep runs at most "
            f"{MAX_SWEEP_ROWS:,}: sweep fewer values per axis",
        )
    rows: list[dict] = []
    progress = Progress()  # for a person at a terminal

    def next_row(i: int, _n: int, what: str) -> None:  # i: the row in this run_sweep call
        at = len(rows) + i
        progress(at / total, f"row {at + 1} of {total}: {what}")

    try:
        for problem in problems:  # --seq outermost, as run_sweep orders its rows
            spec = SweepSpec(
                problem,
                hw,
                algos,
                None,
                args.bq,
                args.bk,
                engine=not args.no_engine,
                l2=not args.no_l2,
                splits=args.splits,
            )
            rows += run_sweep(spec, next_row)
    finally:
        progress.close()
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
    from ..api import build_plan  # deferred: SimPy (api loads the engine)

    _check_output(args.output, "output", args)
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


def cmd_explore(args) -> int:
    """`hbmsim explore`: a run on Dask, or with --dry-run the count of what it would run.
    SIGTERM and SIGHUP end it as Ctrl-C does: the table written whole, one line, the exit
    status the signal calls for (130, 143, 129)."""
    # deferred: Dask distributed and pyarrow, loaded by `explore` only
    from ..explore.runner import ExploreInterrupted, interrupts

    with interrupts():
        try:
            return _explore(args)
        except ExploreInterrupted as exc:
            run = exc.run
            _exit_now(
                exc.status,
                f"\ninterrupted: {run.output} holds {run.held:,} of the {run.points:,} points; "
                "the same command runs the rest",
            )
        except KeyboardInterrupt as exc:  # before the run began: nothing was written
            status = {15: 143, 1: 129}.get(getattr(exc, "signum", 2), 130)
            _exit_now(status, f"\ninterrupted before the run began; {args.output} is as it was")
    return 130  # not reached: _exit_now ends the process


def _exit_now(status: int, line: str) -> None:
    """Say `line` and end the process at once: the table is written, and nothing Dask still
    has running (a cluster half started, its threads) may print or hang after the line."""
    say(line)
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    os._exit(status)


def _explore(args) -> int:
    # deferred: Dask distributed and pyarrow, loaded by `explore` only
    from ..explore import explore, read_spec
    from ..explore.runner import check_run, pending, print_progress

    spec = read_spec(args.spec)
    _check_output(args.output, "output", args)
    check_run(spec, args.output, args.scheduler, args.workers, args.limit, args.timeout)
    if args.dry_run:
        total, todo, note = pending(spec, args.output, args.limit)
        if note:
            say(note)
        print(
            f"{args.spec}: {total:,} points ({spec.mode}, of a grid of {spec.grid_size:,}); "
            f"{todo:,} not yet in {args.output}"
        )
        return 0

    def started(run) -> None:
        if run.kept == run.points:
            return  # nothing to run: the summary says so
        where = args.scheduler or "an embedded cluster"
        line = f"{run.points - run.kept:,} of {run.points:,} points to run on {where}"
        if run.workers:
            line += f" ({run.workers} worker{'s' * (run.workers != 1)})"
        if run.dashboard:
            line += f"; Dask dashboard: {run.dashboard}"
        print(line, file=sys.stderr)

    show = print_progress() if sys.stderr.isatty() else None
    run = explore(
        spec,
        args.output,
        args.scheduler,
        args.workers,
        args.limit,
        show,
        started,
        timeout=args.timeout,
        notice=say,
    )
    print(run.summary(), file=sys.stderr)
    return 0


def build_parser():
    return _build_parser(
        {
            "simulate": cmd_simulate,
            "sweep": cmd_sweep,
            "trace": cmd_trace,
            "replay": cmd_replay,
            "validate": cmd_validate,
            "explore": cmd_explore,
        }
    )


def main(argv: list[str] | None = None) -> int:
    started()  # loaded: Ctrl-C is a KeyboardInterrupt again (cli/__init__.py)
    with guarded_output():
        try:
            code = _run(argv)
            finished()  # done and said: a signal while the interpreter exits stops nothing
            sys.stdout.flush()
            return code
        except BrokenPipeError:  # the reader of stdout (or stderr) has gone: end quietly
            silence_stdout()
            return BROKEN_PIPE_STATUS
        except OutputError as exc:
            silence_stdout()
            say(f"hbmsim: error: stdout: cannot write the output ({exc.strerror})")
            return 2


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except HbmsimError as exc:
        say(f"hbmsim: error: {exc}")
        return 2
    except KeyboardInterrupt:  # Ctrl-C: outputs are written whole or not at all (files/writer.py)
        say(
            f"\nhbmsim: interrupted before {args.command} finished; no output file was left "
            "half written"
        )
        return 130
