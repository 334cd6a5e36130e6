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
    for name in (
        "a100-40gb",
        "h100-sxm",
        "h100-pcie",
        "b200",
        "gb200",
        "l40s",
        "a10",
        "rtx3090",
        "rtx-a6000",
    ):
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


# The Blackwell presets' datasheet numbers, transcribed here from the sources presets.py cites
# (dense, per GPU): [B200-DS] HGX B200 and [GB200-DS] one GPU of a GB200; [CNC-B200] 148 SMs;
# [FA4] 16 exponentials and 128 shared-memory bytes per clock per SM, 8,192 dense BF16 FLOPs
# per clock per SM (twice GH100's 4,096).
BLACKWELL_DS = {
    # name: (tf32, bf16, fp8 FLOP/s, HBM bytes/s)
    "b200": (1.1e15, 2.25e15, 4.5e15, 8e12),
    "gb200": (1.25e15, 2.5e15, 5e15, 8e12),
}


@pytest.mark.parametrize("name", sorted(BLACKWELL_DS))
def test_blackwell_presets_follow_their_datasheets(name):
    tf32, bf16, fp8, hbm = BLACKWELL_DS[name]
    hw = get_hardware(name)
    assert hw.matrix_flops_per_s["bf16"] == hw.matrix_flops_per_s["fp16"] == bf16
    assert (hw.matrix_flops_per_s["tf32"], hw.matrix_flops_per_s["fp8"]) == (tf32, fp8)
    assert hw.hbm_bytes_per_s == hbm and hw.sm_count == 148
    # the datasheets' own arithmetic: TF32 half of BF16 and FP8 twice it per SM and clock
    # (within the 2.2 of "2.2 PFLOPS sparse" rounded from 2.25)
    assert tf32 == pytest.approx(bf16 / 2, rel=0.03) and fp8 == pytest.approx(2 * bf16)
    # the clock the dense BF16 peak implies, in the range a B200's boost clock is reported in
    clock = bf16 / (148 * 8192)
    assert hw.clock_hz == pytest.approx(clock) and 1.7e9 < clock < 2.2e9
    assert hw.exp_ops_per_s == pytest.approx(148 * 16 * clock)
    assert hw.smem_rate() == pytest.approx(148 * 128 * clock)
    assert hw.vector_flops_per_s["fp32"] == pytest.approx(148 * 256 * clock)
    # compute capability 10.0 ([CUDA-CC]): the same per-SM limits as 9.0
    assert (hw.sram_bytes_per_sm, hw.sram_bytes_per_block) == (228 * 1024, 227 * 1024)
    assert (hw.max_ctas_per_sm, hw.max_threads_per_sm, hw.registers_per_sm) == (32, 2048, 65536)
    # warp-level MMA, a guess: between GH100's per-SM rate and the tcgen05 peak
    warp = hw.warp_mma_flops_per_s["bf16"]
    assert 148 * 2560 * clock * 0.99 < warp < bf16
    # the tensor cores run asynchronously beside the FP32 pipe and the SFU ([FA4])
    assert set(hw.async_mma_overlaps) == {"vector", "exp"}


def test_blackwell_multiplies_faster_than_hopper_but_exponentiates_at_the_same_rate():
    """[FA4]: H100 to B200, the BF16 tensor rate goes up 2.25x, the SFU count does not."""
    h100, b200 = get_hardware("h100-sxm"), get_hardware("b200")
    assert b200.matrix_rate("bf16") / h100.matrix_rate("bf16") == pytest.approx(2.25 / 0.9894)
    assert 1.0 < b200.exp_ops_per_s / h100.exp_ops_per_s < 1.1


def _fa2_forward(capsys, gpu):
    """The textbook FlashAttention-2 forward at 8k tokens, head dim 128, bf16, as the CLI's
    JSON gives it."""
    from hbmsim.cli.commands import main

    args = ["simulate", "--gpu", gpu, "--algo", "fa2", "--batch", "1", "--heads", "16"]
    args += ["--seq", "8192", "--head-dim", "128", "--dtype", "bf16", "--json"]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_fa2_forward_on_b200_is_faster_than_on_h100_by_less_than_its_tensor_cores(capsys):
    """Every pipe's time shrinks by its own ratio, so the speedup lies between the smallest
    and the largest of them: above the SFU's ratio (~1.05), below the tensor cores' 2.27 and
    the HBM's 2.39, the exponentials holding it back."""
    h100, b200 = _fa2_forward(capsys, "h100-sxm"), _fa2_forward(capsys, "b200")
    speedup = h100["time_s"] / b200["time_s"]
    tensor = 2.25e15 / 989.4e12  # [B200-DS] / [H100-DS], dense BF16
    hbm = 8e12 / 3.35e12  # [B200-DS] / [H100-DS]
    sfu = (148 * 16 * 2.25e15 / (148 * 8192)) / (132 * 16 * 1.98e9)  # [FA4], [H100-DS] clock
    assert sfu < 1.5 < speedup < min(tensor, hbm)
    assert h100["flops"] == b200["flops"]  # the same work


def _exp_share(d):
    """The exponentials' share of the forward kernel's compute time: its exp ops over the
    GPU's SFU rate, both from the JSON."""
    (k,) = d["by_kernel"]
    return k["exp_ops"] / d["hardware"]["exp_ops_per_s"] / k["compute_time_s"]


def test_the_exponential_takes_a_larger_share_of_the_forward_on_b200(capsys):
    h100, b200 = _fa2_forward(capsys, "h100-sxm"), _fa2_forward(capsys, "b200")
    assert h100["exp_ops"] == b200["exp_ops"]
    assert _exp_share(b200) > 1.3 * _exp_share(h100)


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
