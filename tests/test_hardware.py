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
    with pytest.raises(ConfigError) as err:
        get_hardware("v100")
    for name in ("a100-40gb", "h100-sxm", "h100-pcie", "l40s", "a10", "rtx3090", "rtx-a6000"):
        assert name in str(err.value)


# Datasheet identities the transcribed numbers must satisfy (a check on the transcription,
# independent of the fields it checks): on GA10x, Ada and Hopper SMs 128 FP32 lanes do an FMA
# (two flops) per clock, so the FP32 rate is SMs x 256 x boost clock; dense FP16 tensor-core
# rate per SM per clock is 1,024 on GA10x (A10, RTX A6000; GeForce with FP32 accumulate:
# 512) and on GH100 4,096 at the tensor-core clock the H100 datasheets use (1,830 MHz SXM,
# 1,620 MHz PCIe) - within 2%, the datasheets' rounding.
@pytest.mark.parametrize(
    "name,fp16_per_sm_clock,tensor_clock",
    [
        ("h100-sxm", 4096, 1.83e9),
        ("h100-pcie", 4096, 1.62e9),
        ("a10", 1024, None),
        ("rtx-a6000", 1024, None),
        ("rtx3090", 512, None),
        ("rtx4090", 512, None),
        ("l40s", 1024, None),
    ],
)
def test_preset_rates_follow_from_sm_count_and_clock(name, fp16_per_sm_clock, tensor_clock):
    hw = get_hardware(name)
    assert hw.vector_flops_per_s["fp32"] == pytest.approx(hw.sm_count * 256 * hw.clock_hz, 0.02)
    clock = tensor_clock or hw.clock_hz
    fp16 = hw.sm_count * fp16_per_sm_clock * clock
    assert hw.matrix_flops_per_s["fp16"] == pytest.approx(fp16, rel=0.02)


def test_the_h100_pcie_gets_the_calibrated_share_of_its_warp_level_mma():
    """The H200's measured mma.sync rate is a share of the GH100 SM's wgmma peak; the PCIe
    part, the same SM, gets that share of its own peak."""
    sxm, pcie = get_hardware("h100-sxm"), get_hardware("h100-pcie")
    share = sxm.warp_mma_flops_per_s["fp16"] / sxm.matrix_flops_per_s["fp16"]
    assert 0.6 < share < 0.65
    assert pcie.warp_mma_flops_per_s["fp16"] / pcie.matrix_flops_per_s["fp16"] == pytest.approx(
        share, rel=1e-12
    )


def test_ga10x_presets_have_compute_capability_8_6_limits():
    """[CUDA-CC] 8.6: 100 KB of shared memory per SM (99 KB a block), 16 CTAs and 1,536
    threads per SM; no FP8 tensor cores."""
    for name in ("a10", "rtx3090", "rtx-a6000"):
        hw = get_hardware(name)
        assert (hw.sram_bytes_per_sm, hw.sram_bytes_per_block) == (100 * 1024, 99 * 1024)
        assert (hw.max_ctas_per_sm, hw.max_threads_per_sm) == (16, 1536)
        assert "fp8" not in hw.matrix_flops_per_s


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
