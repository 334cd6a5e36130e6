"""Which time a result names: the three ways a call of attention is timed.

Why: one kernel launch sequence gives different times depending on how it is measured, and
a published figure, a profiler and a server each measure one of them. The engine computes all
three (simulation.py, host.py); a caller says which one its `time_s` is:

- `kernel`: the GPU's time alone, the first launch to the last CTA's end. What a profiler's
  kernel rows report, and what a CUDA-graph replay of decode steps (vLLM, SGLang, TensorRT-LLM)
  leaves once the host's launches are out of the way.
- `loop`: one call in the steady state of a timed loop: the host issues the next call while the
  GPU runs this one, so a call takes the longer of the two. How the FlashAttention papers'
  benchmarks time (many calls between two synchronisations); the default.
- `alone`: one call timed by itself, synchronised before and after: the GPU waits for the
  host's wrapper work and launches before its first kernel (host.py).

For the textbook programs, which have no host to wait for, the three are equal.
"""

from __future__ import annotations

from ..errors import ConfigError

TIMINGS = {
    "kernel": "the GPU's time alone, as a profiler or a CUDA-graph replay sees it",
    "loop": "a call in a timed loop: the longer of the host's issuing and the GPU's work",
    "alone": "one call timed by itself, the GPU waiting for the host's launches",
}
DEFAULT_TIMING = "loop"


def check_timing(mode: str) -> str:
    """`mode` if it names a timing, else a ConfigError naming the field and the choices."""
    if mode not in TIMINGS:
        raise ConfigError("timing", f"must be one of {', '.join(TIMINGS)} (got {mode!r})")
    return mode
