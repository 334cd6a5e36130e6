"""Presets, overrides and calibrated profiles."""

import json

import pytest

from hbmsim import PRESETS, ConfigError, HbmsimError, get_hardware, load_profile


def test_every_preset_has_a_source_and_sane_numbers():
    for name, hw in PRESETS.items():
        assert hw.name == name and hw.source
        assert hw.sram_bytes_per_block <= hw.sram_bytes_per_sm
        # HBM bandwidth below the matmul rate in bytes: every preset is a modern, math-rich GPU
        assert hw.matrix_rate("fp16") > hw.hbm_bytes_per_s


def test_unknown_gpu_lists_the_presets():
    with pytest.raises(ConfigError, match="a100-40gb, a100-80gb, h100-sxm, h200, rtx4090, l4"):
        get_hardware("v100")


def test_sram_override_moves_the_block_limit_with_it():
    hw = get_hardware("a100-40gb").with_overrides(sram_bytes_per_sm=64 * 1024)
    assert hw.sram_bytes_per_sm == 64 * 1024
    assert hw.sram_bytes_per_block == 63 * 1024
    assert hw.name == "a100-40gb+custom"


def test_override_of_unknown_field_is_refused():
    with pytest.raises(ConfigError, match="not a hardware field"):
        get_hardware("h100-sxm").with_overrides(sram=1)


def test_negative_bandwidth_is_refused():
    with pytest.raises(ConfigError, match="hbm_bytes_per_s"):
        get_hardware("h100-sxm").with_overrides(hbm_bytes_per_s=-1.0)


def test_profile_on_a_base_preset(tmp_path):
    f = tmp_path / "measured.json"
    f.write_text(json.dumps({"base": "h200", "hbm_bytes_per_s": 4.1e12, "source": "run"}))
    hw = load_profile(f)
    assert hw.hbm_bytes_per_s == 4.1e12 and hw.sm_count == 132 and hw.name == "h200+measured"


def test_full_profile_round_trips(tmp_path):
    f = tmp_path / "gpu.json"
    f.write_text(json.dumps(get_hardware("l4").to_dict()))
    assert load_profile(f) == get_hardware("l4")


@pytest.mark.parametrize(
    "text,words",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"base": "h200", "warp_size": 32}', "not a hardware field"),
        ('{"sm_count": 10}', "lacks fields"),
    ],
)
def test_bad_profiles_say_what_is_wrong(tmp_path, text, words):
    f = tmp_path / "p.json"
    f.write_text(text)
    with pytest.raises(HbmsimError, match=words):
        load_profile(f)
