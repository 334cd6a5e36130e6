"""Where hbmsim's own files are: the package's data, and the source checkout around it.

One place for these paths, so a module that moves inside the package never changes what it
reads. The checkout's `kernels/` (CUDA sources, GPU-run scripts, recorded results) exists only
beside a source checkout, not in an installed wheel.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # hbmsim/
DATA_DIR = PACKAGE_DIR / "data"  # shipped with the package (pyproject's package-data)
CHECKOUT_DIR = PACKAGE_DIR.parent  # the repository root, in a source checkout
KERNELS_DIR = CHECKOUT_DIR / "kernels"
RESULTS_DIR = KERNELS_DIR / "results"  # recorded GPU runs (the app's Validate page reads them)
