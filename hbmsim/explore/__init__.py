"""Design-space exploration: many simulations from one spec, as tasks on Dask distributed.

spec.py reads and checks a spec (the axes of a study) and yields its points; table.py turns a
point into one row and reads and writes results tables; runner.py runs the points on an
embedded LocalCluster or an existing Dask cluster, resumably.
"""

from .runner import ExploreRun, explore
from .spec import ExploreSpec, parse_spec, read_spec
from .table import read_table, run_point

__all__ = [
    "ExploreRun",
    "ExploreSpec",
    "explore",
    "parse_spec",
    "read_spec",
    "read_table",
    "run_point",
]
