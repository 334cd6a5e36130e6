"""The public entry points: one call from a problem to a result.

`simulate` is what the CLI and the app call: exact counts, then the engine's predicted time
(replayed step by step, or its long kernels stretched, within the engine's bounds), so both
always report the same thing for the same inputs. `simulate_model` does it for each kind of
layer of a model preset and adds them up into a per-model total (model_result.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .algorithms.names import ALGOS
from .algorithms.registry import make_plan
from .engine.limits import MAX_ENGINE_STEPS, TIMELINE_MAX_STEPS, engine_problem
from .engine.result import EngineResult
from .engine.timing import DEFAULT_TIMING, check_timing
from .errors import ConfigError, TooLargeToExecuteError
from .gpu.hardware import Hardware
from .interpret.counts import count_plan
from .interpret.execute import check_executable, execute_plan
from .interpret.intensity import latent_roofline
from .libraries.registry import make_impl_plan
from .model_result import ModelResult
from .problem.attention import Problem
from .problem.models import Model, get_model
from .result import Result


def simulate(
    problem: Problem,
    hardware: Hardware,
    algo: str | None = None,
    bq: int | None = None,
    bk: int | None = None,
    bd: int | None = None,
    splits: int | None = None,
    verify: bool = False,
    seed: int = 0,
    engine: bool = True,
    l2: bool = True,
    exact: bool = False,
    timeline: bool = False,
    progress: Callable[[float], None] | None = None,
    engine_max_trips: int | None = None,
    impl: str | None = None,
    engine_max_steps: int = MAX_ENGINE_STEPS,
    timing: str = DEFAULT_TIMING,
) -> Result:
    """Exact counts of `algo` on `problem`, plus the engine's timing when `engine` is set.

    A plan too large for the engine (or with more loads and stores than `engine_max_trips`,
    the budget an interactive caller sets, or past the engine's estimated work bound,
    `engine_max_steps` for the replay, see limits.py) keeps its counts and says why in
    `extra["engine"]`; past the replay's bound its kernels are stretched instead. A timeline
    replays every step, up to limits.TIMELINE_MAX_STEPS.
    `verify` executes the tile programs and compares with naive attention; its size is checked
    before the engine runs. A latent-K/V (MLA) problem also gets `extra["latent_roofline"]`:
    its arithmetic intensity with each latent row read once per request against the GPU's
    ridge (interpret/intensity.py).
    `algo` names a textbook tile program (default fa2), `impl` a mirror of a real library
    (hbmsim.libraries); give one or the other. `timing` says which time `time_s` is: the
    GPU's alone (`kernel`), a call in a timed loop (`loop`) or one call by itself (`alone`;
    engine/timing.py); the engine's part of the result carries all three.
    """
    check_timing(timing)
    plan = build_plan(problem, hardware, algo, impl, bq, bk, bd, splits)
    result = count_plan(plan)
    if timeline:  # a timeline replays every step: its caller waits for more of them
        engine_max_steps = max(engine_max_steps, TIMELINE_MAX_STEPS)
    if verify:  # refused before the engine runs, not after
        check_executable(plan, result)
    extra = dict(result.extra)
    if problem.latent_kv:  # MLA: the bound of a kernel reading each latent row once
        extra["latent_roofline"] = latent_roofline(problem, hardware)
    if engine and engine_max_trips is not None and result.trips > engine_max_trips:
        extra["engine"] = {
            "skipped": f"{result.trips:,} loads and stores is more than this "
            f"view simulates ({engine_max_trips:,}); "
            "`hbmsim simulate` runs it"
        }
    elif engine and (too_long := engine_problem(plan, result, engine_max_steps, None, timeline)):
        if exact:  # the slow reference was asked for by name: refuse rather than skip
            raise TooLargeToExecuteError(too_long)
        extra["engine"] = {"skipped": too_long}  # counts stand; the time would take too long
    elif engine:
        # deferred: SimPy (the engine), loaded when a time is asked for, not for counts alone
        from .engine.simulation import run_engine

        try:
            run = run_engine(
                plan,
                l2=l2,
                exact=exact,
                timeline=timeline,
                progress=progress,
                trips=result.trips,
                max_steps=engine_max_steps,
                counts=result,
            )
        except TooLargeToExecuteError as exc:
            if exact:
                raise
            extra["engine"] = {"skipped": str(exc)}
        else:
            extra.update(_timed(plan, result, dataclasses.replace(run, timing=timing)))
    if verify:
        extra["verify"] = execute_plan(plan, seed=seed).to_dict()
    return dataclasses.replace(result, extra=extra)


def simulate_model(model: str | Model, problem: Problem, hardware: Hardware, **kw) -> ModelResult:
    """`simulate` for each kind of layer of `model` (a preset or its name), with the per-model
    total over its layers. `problem` is the model's layer as the user asked for it (its shape,
    the batch, lengths, pass and the global layers' mask); each kind sets its own mask on it
    (a local layer: causal with its window). Kinds whose problems come out equal (a context
    within the local window) share one simulation. The problem's softmax scale is used as
    given (the CLI and the app set the model's, `Model.scale`). `kw` goes to `simulate` for
    every kind."""
    m = get_model(model) if isinstance(model, str) else model
    for name, value in m.shape().items():
        if getattr(problem, name) != value:
            raise ConfigError(
                name, f"{m.name} has {name} {value}; the problem has {getattr(problem, name)}"
            )
    done: dict[Problem, Result] = {}
    kinds = []
    for kind in m.layer_kinds(problem.seq_k):
        p = dataclasses.replace(problem, **kind.mask)
        if p not in done:
            done[p] = simulate(p, hardware, **kw)
        kinds.append((kind, done[p]))
    return ModelResult(m, tuple(kinds))


def _timed(plan, result: Result, run: EngineResult) -> dict:
    """What the engine's run adds to a result's extra: its timing, the run itself (for the
    app's pages), and each pass's time (its kernels' GPU time)."""
    passes = {k: dict(v) for k, v in result.by_pass.items()}
    for kernel, kt in zip(plan.kernels, run.kernels, strict=True):
        passes[kernel.pass_]["time_s"] = passes[kernel.pass_].get("time_s", 0.0) + kt.time_s
    return {**run.to_dict(), "_engine_result": run, "passes": passes}


def program_kw(program: str) -> dict:
    """simulate()'s keyword for a program named either way: `algo=` for a textbook algorithm,
    `impl=` for a library mirror (sweeps and explore specs take both in one list)."""
    return {"algo": program} if program in ALGOS else {"impl": program}


def engine_result(result: Result) -> EngineResult | None:
    """The engine's full result (timeline included) behind a simulate() result, if it ran."""
    return result.extra.get("_engine_result")


def build_plan(
    problem: Problem,
    hardware: Hardware,
    algo: str | None = None,
    impl: str | None = None,
    bq: int | None = None,
    bk: int | None = None,
    bd: int | None = None,
    splits: int | None = None,
):
    """The plan of a textbook algorithm (`algo`, default fa2) or of a library mirror (`impl`),
    whose tiles come from the library's own rules unless bq/bk override them."""
    if impl is None:
        return make_plan(algo or "fa2", problem, hardware, bq, bk, bd, splits)
    if algo is not None:
        raise ConfigError("impl", f"give an algorithm or an implementation, not both ({algo})")
    for name, value in (("bd", bd), ("splits", splits)):
        if value is not None:
            raise ConfigError(name, f"applies to textbook algorithms only; {impl} picks its own")

    return make_impl_plan(impl, problem, hardware, bq, bk)
