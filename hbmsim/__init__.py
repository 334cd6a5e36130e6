"""hbmsim: where attention's bytes go on a GPU, and what that costs in time.

Each algorithm is written once as a tile program (`hbmsim.algorithms`, and the libraries'
mirrors in `hbmsim.libraries`) and interpreted several ways (`hbmsim.interpret`): executed on
NumPy values, traced op by op and counted exactly at any size; `simulate` times it on the
engine (`hbmsim.engine`). README.md's "How it works" maps the packages.
"""

import importlib

from .algorithms.registry import ALGOS, make_plan
from .errors import (
    ConfigError,
    HbmsimError,
    SramOverflowError,
    TooLargeToExecuteError,
    TraceFileError,
)
from .gpu.hardware import Hardware
from .gpu.presets import PRESETS, get_hardware
from .gpu.profile import load_profile, resolve_hardware
from .interpret.counts import count, count_plan
from .interpret.execute import execute_plan
from .interpret.trace import Trace, trace_plan
from .interpret.tracefile import load_trace, save_trace
from .problem.attention import Problem
from .program.plan import Plan, Tiles
from .result import KernelCounts, Result, TensorTraffic

__version__ = "0.1.0"

# The engine (SimPy) loads only when asked for, so the tile programs, counts and execution
# work where SimPy is not installed (the GPU validation machine, for one).
_LAZY = {"simulate": ".api", "SweepSpec": ".explore.sweep", "run_sweep": ".explore.sweep"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'hbmsim' has no attribute {name!r}")


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
