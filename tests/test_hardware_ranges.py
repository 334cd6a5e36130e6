"""Hardware values the model cannot honour are refused where every path meets them: in
`Hardware` itself, so presets, overrides, profiles and CLI flags all get the same check."""

import math
import re

import pytest

from hbmsim import get_hardware
from hbmsim.errors import ConfigError


@pytest.mark.parametrize(
    "field,value,range_",
    [
        ("hbm_bytes_per_s", math.inf, "from 1e+06 to 1e+16 bytes/s"),
        ("hbm_bytes_per_s", math.nan, "from 1e+06 to 1e+16 bytes/s"),
        ("l2_bytes_per_s", 1e17, "from 1e+06 to 1e+16 bytes/s"),
        ("sm_bytes_per_s", 0.5, "from 1e+06 to 1e+16 bytes/s"),
        ("hbm_latency_s", 2.0, "from 0 to 1 seconds"),
        ("l2_latency_s", math.inf, "from 0 to 1 seconds"),
        ("launch_overhead_s", -1e-6, "from 0 to 1 seconds"),
        ("clock_hz", math.nan, "from 1e+06 to 1e+11 Hz"),
        ("exp_ops_per_s", math.inf, "from 1e+06 to 1e+18 ops/s"),
        ("hbm_bytes_per_s", True, "from 1e+06 to 1e+16 bytes/s"),
        ("hbm_latency_s", "1e-6", "from 0 to 1 seconds"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_range(field, value, range_):
    with pytest.raises(ConfigError, match="^" + re.escape(f"{field}: must be a number {range_}")):
        get_hardware("h100-sxm").with_overrides(**{field: value})


@pytest.mark.parametrize("table", ["matrix_flops_per_s", "vector_flops_per_s"])
@pytest.mark.parametrize("rate", [math.inf, math.nan, 0.0, 1e19])
def test_each_dtype_rate_is_checked(table, rate):
    hw = get_hardware("h100-sxm")
    rates = {**getattr(hw, table), "bf16": rate}
    with pytest.raises(ConfigError, match=rf"^{table}\[bf16\]: must be a number from 1e\+06"):
        hw.with_overrides(**{table: rates})


def test_the_ends_of_the_ranges_are_allowed():
    """1 MB/s and 1 s of latency are extreme, not wrong: the engine still runs them."""
    hw = get_hardware("l4").with_overrides(
        hbm_bytes_per_s=1e6, hbm_latency_s=1.0, l2_latency_s=0.0, launch_overhead_s=1.0
    )
    assert hw.hbm_bytes_per_s == 1e6 and hw.hbm_latency_s == 1.0
