"""hbmsim: where attention's bytes go on a GPU, and what that costs in time.

Each algorithm is written once as a tile program (`hbmsim.algorithms`, and the libraries'
mirrors in `hbmsim.libraries`) and interpreted several ways (`hbmsim.interpret`): executed on
NumPy values, traced op by op and counted exactly at any size; `simulate` times it on the
engine (`hbmsim.engine`). README.md's "How it works" maps the packages.
"""

import importlib

__version__ = "0.1.0"

# Every public name loads its module when first asked for: `import hbmsim` costs little, so
# the command line can answer Ctrl-C from its first moment (cli/__init__.py), a program that
# needs one part (the CLI's parser) loads that part only, and the engine (SimPy) loads only
# where it is used (not on the GPU validation machine, which lacks it).
_PUBLIC = {
    "ALGOS": ".algorithms.names",
    "make_plan": ".algorithms.registry",
    "ConfigError": ".errors",
    "HbmsimError": ".errors",
    "SramOverflowError": ".errors",
    "TooLargeToExecuteError": ".errors",
    "TraceFileError": ".errors",
    "Hardware": ".gpu.hardware",
    "PRESETS": ".gpu.presets",
    "get_hardware": ".gpu.presets",
    "load_profile": ".gpu.profile",
    "resolve_hardware": ".gpu.profile",
    "count": ".interpret.counts",
    "count_plan": ".interpret.counts",
    "execute_plan": ".interpret.execute",
    "Trace": ".interpret.trace",
    "trace_plan": ".interpret.trace",
    "load_trace": ".interpret.tracefile",
    "save_trace": ".interpret.tracefile",
    "Problem": ".problem.attention",
    "Plan": ".program.plan",
    "Tiles": ".program.plan",
    "KernelCounts": ".result",
    "Result": ".result",
    "TensorTraffic": ".result",
    "simulate": ".api",
    "simulate_model": ".api",
    "ModelResult": ".model_result",
    "SweepSpec": ".explore.sweep",
    "run_sweep": ".explore.sweep",
}


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name], __name__), name)
        globals()[name] = value  # looked up once
        return value
    raise AttributeError(f"module 'hbmsim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


__all__ = [
    "ALGOS",
    "PRESETS",
    "ConfigError",
    "Hardware",
    "HbmsimError",
    "KernelCounts",
    "Plan",
    "Problem",
    "Result",
    "SramOverflowError",
    "SweepSpec",
    "TensorTraffic",
    "Tiles",
    "TooLargeToExecuteError",
    "Trace",
    "TraceFileError",
    "count",
    "count_plan",
    "execute_plan",
    "get_hardware",
    "load_profile",
    "load_trace",
    "make_plan",
    "resolve_hardware",
    "run_sweep",
    "save_trace",
    "simulate",
    "trace_plan",
]
