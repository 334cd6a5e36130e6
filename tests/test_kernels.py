"""The CUDA kernels: compiled by nvcc for real GPUs, run on the CPU through the emulation
harness, and (only with a GPU) on the device. Outside CI a missing nvcc or g++ skips with the
reason; under CI=true nvcc and g++ must be there."""

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hbmsim import Problem, SramOverflowError, get_hardware, make_plan  # noqa: E402
from hbmsim.algorithms.kernel_fa2 import smem_bytes as flash_smem_bytes  # noqa: E402
from hbmsim.algorithms.kernel_fa2 import threads_per_cta as flash_threads  # noqa: E402
from hbmsim.interpret.reference import naive_attention  # noqa: E402
from kernels.build import (  # noqa: E402
    ARCHS,
    Variant,
    compile_with_nvcc,
    emu_run,
    parse_ptxas,
    variants,
)

IN_CI = os.environ.get("CI") == "true"
ARCH_GPU = {"sm_80": "a100-40gb", "sm_90": "h100-sxm"}


def _require(tool: str):
    if shutil.which(tool) is None:
        if IN_CI:
            pytest.fail(f"{tool} is required in CI")
        pytest.skip(f"{tool} is not installed")


@pytest.fixture(scope="module", params=ARCHS)
def ptxas_report(request):
    _require("nvcc")
    return request.param, compile_with_nvcc(request.param, variants())


def test_every_variant_compiles_and_uses_only_the_planned_shared_memory(ptxas_report):
    """ptxas sees no static shared memory, so a launch's shared memory is exactly the dynamic
    request, which is the simulator's footprint for the same tiles and block size; it fits the
    architecture, or the simulator refuses the tiles there as the driver would. Nothing lives
    in local memory (no stack frame, no spills): the simulator counts no such traffic, and the
    kernels say the row state is in registers."""
    arch, report = ptxas_report
    hw = get_hardware(ARCH_GPU[arch])
    assert sum(v.wmma for v in variants()) >= 20
    for v in variants():
        assert v.name in report, f"{v.name} missing from the ptxas report"
        r = report[v.name]
        assert r["static_smem"] == 0 and 0 < r["registers"] <= 255
        assert r["stack_frame"] == r["spill_stores"] == 0, (v.name, r)
        dtype = {"half": "fp16", "bf16": "bf16", "float": "fp32"}[v.elem]
        p = Problem(
            batch=1,
            heads=1,
            seq_q=4096,
            seq_k=4096,
            head_dim=v.head_dim,
            dtype=dtype,
            causal=v.causal,
        )
        if v.smem_bytes > hw.sram_bytes_per_block:
            with pytest.raises(SramOverflowError):
                make_plan(v.algo, p, hw, v.bq, v.bk)
            continue
        kernel = make_plan(v.algo, p, hw, v.bq, v.bk).kernels[0]
        assert kernel.name == v.kernel
        assert kernel.sram_bytes == v.smem_bytes and kernel.threads_per_cta == v.threads


def _require_nvrtc():
    """CuPy's NVRTC binding (a dev dependency) and the CUDA headers; in CI both must be there."""
    from kernels.nvrtc import cuda_include_dirs

    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # noqa: BLE001 - ImportError, or no libnvrtc
        reason = f"CuPy's NVRTC is not usable ({exc})"
    else:
        reason = None if cuda_include_dirs() else "the CUDA headers were not found"
    if reason:
        if IN_CI:
            pytest.fail(f"{reason}: required in CI")
        pytest.skip(reason)


def _runner_sources():
    """(source, defines, kernels) as kernels/runner.py and kernels/validate.py compile them."""
    from kernels.runner import flash_defines, naive_defines

    hw = get_hardware("h200")
    p = Problem(batch=4, heads=16, seq_q=4096, seq_k=4096, head_dim=64, causal=True)
    p128 = Problem(batch=4, heads=16, seq_q=16384, seq_k=16384, head_dim=128)
    return [
        ("flash_fwd.cu", flash_defines(p, 64, 64, "fp16"), {"flash_fwd"}),
        ("flash_fwd.cu", flash_defines(p128, 128, 32, "bf16"), {"flash_fwd"}),
        ("flash_fwd.cu", flash_defines(p, 32, 64, "fp32"), {"flash_fwd"}),
        ("flash_fwd_wmma.cu", flash_defines(p, 64, 64, "fp16"), {"flash_fwd_wmma"}),
        ("flash_fwd_wmma.cu", flash_defines(p128, 64, 32, "bf16"), {"flash_fwd_wmma"}),
        (
            "naive.cu",
            naive_defines(p128, hw, 128, 128, 32, "fp16"),
            {"matmul_nt", "matmul_nn", "softmax_rows"},
        ),
        (
            "calibrate.cu",
            (),
            {"chase", "empty", "fma_loop", "wmma_loop", "red_add_loop", "latency_chain"},
        ),
    ]


@pytest.mark.parametrize("arch", ARCHS)
def test_the_runner_compiles_its_kernels_with_nvrtc_as_a_gpu_run_would(arch):
    """The same NVRTC call, sources and options a GPU run loads, for both architectures: every
    kernel is in the cubin, and none uses static shared memory (dynamic is what is planned)."""
    _require_nvrtc()
    from kernels.nvrtc import compile_cubin

    for source, defines, kernels in _runner_sources():
        cubin, log = compile_cubin(source, defines, arch)
        assert cubin[:4] == b"\x7fELF", f"{source} {defines}: not an ELF cubin"
        report = parse_ptxas(log)
        assert set(report) == kernels, (source, defines, log)
        assert all(r["static_smem"] == 0 and r["registers"] > 0 for r in report.values())


def test_the_pipes_probe_compiles_for_hopper_with_nvrtc_as_a_gpu_run_would():
    """kernels/pipes_probe.cu (which pipes run beside wgmma: Hardware.async_mma_overlaps) is
    built for sm_90a, the target wgmma needs, by the call a GPU run makes; no spills, and its
    only shared memory the two operand tiles it declares."""
    _require_nvrtc()
    from kernels.nvrtc import NvrtcError, compile_cubin

    cubin, log = compile_cubin("pipes_probe.cu", (), "sm_90a")
    assert cubin[:4] == b"\x7fELF"
    (report,) = parse_ptxas(log).values()
    assert report["static_smem"] == 2 * 64 * 16 * 2 and report["registers"] > 0
    assert report["spill_stores"] == report["spill_loads"] == report["stack_frame"] == 0
    with pytest.raises(NvrtcError, match="pipes_probe"):  # plain sm_90 has no wgmma
        compile_cubin("pipes_probe.cu", (), "sm_90")


def test_a_kernel_that_does_not_compile_reports_nvrtcs_log():
    _require_nvrtc()
    from kernels.nvrtc import NvrtcError, compile_cubin

    with pytest.raises(NvrtcError, match=r"flash_fwd\.cu.*\n.*BK"):
        compile_cubin("flash_fwd.cu", ("-DBQ=64",), "sm_90")


CASES = [  # (bq, bk, d, causal, batch, heads, kv_heads, seq_q, seq_k)
    (16, 16, 16, False, 1, 2, 2, 64, 64),
    (16, 32, 16, True, 2, 4, 2, 50, 70),  # ragged, GQA, causal with seq_q < seq_k
    (32, 16, 32, True, 1, 3, 1, 45, 45),  # MQA, ragged, square causal
    (8, 64, 16, False, 1, 1, 1, 1, 200),  # decoding: one query row
    (64, 32, 64, False, 1, 1, 1, 130, 97),
]


WMMA_CASES = [  # whole 16 x 16 fragments: tiles and head dim in 16s
    (16, 16, 16, False, 1, 2, 2, 64, 64),
    (32, 16, 32, True, 2, 4, 2, 50, 70),  # ragged, GQA, causal with seq_q < seq_k
    (16, 32, 16, True, 1, 3, 1, 45, 45),  # MQA, ragged (zero-padded K/V rows), square causal
    (16, 64, 16, False, 1, 1, 1, 1, 200),  # decoding: one query row
    (64, 32, 64, False, 1, 1, 1, 130, 97),  # 4 warps
]


@pytest.mark.parametrize(
    "case,wmma",
    [(c, False) for c in CASES] + [(c, True) for c in WMMA_CASES],
    ids=[f"flash_fwd{c}" for c in CASES] + [f"flash_fwd_wmma{c}" for c in WMMA_CASES],
)
def test_the_kernel_runs_on_the_cpu_and_equals_naive_attention(case, wmma):
    _require("g++")
    bq, bk, d, causal, b, h, kvh, nq, nk = case
    p = Problem(batch=b, heads=h, kv_heads=kvh, seq_q=nq, seq_k=nk, head_dim=d, causal=causal)
    rng = np.random.default_rng(hash(case) % 2**32)
    q = rng.standard_normal((b, h, nq, d))
    k = rng.standard_normal((b, kvh, nk, d))
    v = rng.standard_normal((b, kvh, nk, d))
    o, lse = emu_run(Variant(bq, bk, d, causal, "float", wmma), q, k, v, p.softmax_scale)
    ref, ref_lse = naive_attention(q, k, v, p)
    assert np.linalg.norm(o - ref) / np.linalg.norm(ref) < 1e-5
    assert np.abs(lse - ref_lse).max() < 1e-4


@pytest.mark.parametrize("wmma", [False, True], ids=["flash_fwd", "flash_fwd_wmma"])
def test_less_shared_memory_than_planned_is_caught(wmma):
    """The planned footprint is tight: the kernel uses its last byte before the last row's
    padding (which it never reads), and the same run with 4 bytes less fails under ASan."""
    _require("g++")
    from hbmsim.algorithms.kernel_fa2 import smem_layout
    from kernels import build

    v = Variant(16, 16, 16, False, "float", wmma)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 1, 32, 16))
    _, _, size, pad = smem_layout(16, 16, 16, 4, wmma)[-1]
    assert (pad > 0) == wmma
    original = build.smem_bytes
    try:
        build.smem_bytes = lambda *a: original(*a) - pad * size
        emu_run(v, q, q, q, 0.25)  # the last row's padding is not needed
        build.smem_bytes = lambda *a: original(*a) - pad * size - 4
        with pytest.raises(RuntimeError, match="emulated kernel failed"):
            emu_run(v, q, q, q, 0.25)
    finally:
        build.smem_bytes = original


def _gpu_available() -> str | None:
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (pip install -e '.[gpu]')"
    try:
        if not cupy.cuda.is_available():
            return "CuPy finds no CUDA device"
    except Exception as exc:  # noqa: BLE001 - no driver at all
        return f"CuPy finds no CUDA device ({exc})"
    return None


@pytest.mark.skipif(_gpu_available() is not None, reason=_gpu_available() or "")
def test_the_kernels_on_the_gpu_equal_naive_attention():
    from kernels.runner import run_flash

    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 4, 300, 64))
    k = rng.standard_normal((2, 2, 333, 64))
    v = rng.standard_normal((2, 2, 333, 64))
    for dtype, wmma, tolerance in (("fp32", False, 1e-4), ("fp16", True, 2e-3)):
        p = Problem(
            batch=2,
            heads=4,
            kv_heads=2,
            seq_q=300,
            seq_k=333,
            head_dim=64,
            causal=True,
            dtype=dtype,
        )
        o, lse = run_flash(q, k, v, p, bq=64, bk=64, dtype=dtype, wmma=wmma)
        ref, ref_lse = naive_attention(q, k, v, p)
        assert np.linalg.norm(o - ref) / np.linalg.norm(ref) < tolerance, (dtype, wmma)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_naive_kernels_compile_with_no_static_shared_memory_and_no_local_memory(arch):
    _require("nvcc")
    from kernels.build import compile_naive_with_nvcc, naive_variants

    for v in naive_variants():
        report = compile_naive_with_nvcc(arch, v)
        assert set(report) == {"matmul_nt", "matmul_nn", "softmax_rows"}, v.name
        assert all(r["static_smem"] == 0 for r in report.values()), v.name
        assert all(r["stack_frame"] == r["spill_stores"] == 0 for r in report.values()), v.name


@pytest.mark.parametrize(
    "causal,tiles",
    [(False, (32, 16, 8, 4)), (True, (32, 16, 8, 4)), (True, (64, 64, 16, 2))],
    ids=["32x16", "32x16-causal", "64x64-causal"],  # 64 x 64: 16-byte vector loads of floats
)
def test_the_naive_path_runs_on_the_cpu_and_equals_naive_attention(causal, tiles):
    _require("g++")
    from kernels.build import NaiveVariant, naive_emu_run

    p = Problem(batch=2, heads=4, kv_heads=2, seq_q=45, seq_k=70, head_dim=16, causal=causal)
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 4, 45, 16))
    k = rng.standard_normal((2, 2, 70, 16))
    v = rng.standard_normal((2, 2, 70, 16))
    o = naive_emu_run(NaiveVariant(*tiles, causal, "float"), q, k, v, p.softmax_scale)
    ref, _ = naive_attention(q, k, v, p)
    assert np.linalg.norm(o - ref) / np.linalg.norm(ref) < 1e-5


def test_the_naive_tile_program_uses_the_kernels_shared_memory():
    from hbmsim.algorithms.kernel_naive import matmul_smem_bytes, softmax_smem_bytes

    p = Problem(batch=1, heads=2, seq_q=1000, seq_k=1000, head_dim=64, causal=True)
    plan = make_plan("standard-kernel", p, get_hardware("h100-sxm"), 128, 128, 32)
    qk, softmax, pv = plan.kernels
    assert qk.sram_bytes == pv.sram_bytes == matmul_smem_bytes(128, 128, 32, 2)
    assert softmax.sram_bytes == softmax_smem_bytes(4, 1000, 2)


RESOURCES = {  # what the GPU run records per CUDA kernel (test inputs, not measurements)
    "flash": {"flash_fwd": {"registers": 230, "local_bytes": 0}},
    "flash-wmma": {"flash_fwd_wmma": {"registers": 96, "local_bytes": 0}},
    "naive": {
        name: {"registers": regs, "local_bytes": 0}
        for name, regs in (("matmul_nt", 128), ("softmax_rows", 40), ("matmul_nn", 128))
    },
    "cublas": {"softmax_rows": {"registers": 40, "local_bytes": 0}},
}


OCCUPANCY_ROWS = (  # (kind, CTAs per SM, made-up time): padded flash-wmma at 1024 tokens
    ("flash-wmma-occupancy", 1, 1.1e-3),
    ("flash-wmma-occupancy", 2, 5.9e-4),
)
OCCUPANCY_BASE_S = 4.2e-4  # the unpadded kernel's made-up time


def _recorded_run(tmp_path, occupancy: bool = False) -> Path:
    """A measurements.json as the GPU run writes it. The numbers are test inputs (H200 preset
    values and made-up times), not measurements: they exercise the prediction code path.
    `occupancy`: with OCCUPANCY_ROWS, padded as kernels/validate.py pads them."""
    import json

    from recorded_run import measurements_doc

    from kernels.runner import padded_smem_bytes

    configs = []
    for kind, algo, seq, causal, tiles, t in (
        ("flash", "fa2-kernel", 1024, False, (64, 64), 4.1e-4),
        ("flash", "fa2-kernel", 1024, True, (64, 64), 2.6e-4),
        ("flash", "fa2-kernel", 1024, False, (32, 64), 5.3e-4),
        ("flash", "fa2-kernel", 1024, False, (128, 64), 4.4e-4),
        ("flash-wmma", "fa2-wmma-kernel", 1024, False, (64, 64), 1.2e-4),
        ("naive", "standard-kernel", 1024, False, (128, 128), 3.0e-3),
        ("cublas", "standard-kernel", 1024, False, (128, 128), 6.0e-4),
    ):
        p = Problem(batch=1, heads=4, seq_q=seq, seq_k=seq, causal=causal)
        configs.append(
            {
                "name": f"{kind} {seq} {tiles}",
                "kind": kind,
                "algo": algo,
                "problem": p.to_dict(),
                "tiles": {
                    "bq": tiles[0],
                    "bk": tiles[1],
                    **({"bd": 32} if algo == "standard-kernel" else {}),
                },
                "measured_time_s": t,
                **({"matmul": "cublas"} if kind == "cublas" else {}),
                "resources": RESOURCES[kind],
            }
        )
    if occupancy:  # the sweep's problem: 1,024 CTAs, several waves at any occupancy
        hw = get_hardware("h200")
        own = flash_smem_bytes(64, 64, 64, 2, wmma=True)
        reserve = hw.sram_bytes_per_sm - hw.sram_bytes_per_block
        base = {
            **configs[4],  # flash-wmma 1024 (64, 64)
            "name": "flash-wmma 1024 (64, 64) b4 h16",
            "problem": Problem(batch=4, heads=16, seq_q=1024, seq_k=1024).to_dict(),
            "measured_time_s": OCCUPANCY_BASE_S,
        }
        configs.append(base)
        for kind, k, t in OCCUPANCY_ROWS:
            configs.append(
                {
                    **base,
                    "name": f"{kind} 1024 {k} per SM",
                    "kind": kind,
                    "measured_time_s": t,
                    "smem_bytes": padded_smem_bytes(k, own, hw.sram_bytes_per_sm, reserve),
                    "ctas_per_sm": k,
                }
            )
    configs.append({"name": "flash seq16384", "kind": "flash", "error": "CUDADriverError: ..."})
    doc = measurements_doc(configs, sdpa_seq=1024, wmma_fp16_flops_per_s=400e12)
    path = tmp_path / "measurements.json"
    path.write_text(json.dumps(doc))
    return path


def test_prediction_from_a_recorded_run_writes_a_results_file(tmp_path, capsys):
    import json

    from hbmsim.cli.commands import main
    from hbmsim.validation.gpu_runs import load_results

    measurements = _recorded_run(tmp_path)
    assert (
        main(
            [
                "validate",
                "--measurements",
                str(measurements),
                "--results-dir",
                str(tmp_path / "results"),
            ]
        )
        == 0
    )
    files, problems = load_results(tmp_path / "results")
    assert not problems and len(files) == 1 and files[0].gpu == "Test GPU"
    doc = json.loads(files[0].path.read_text())
    assert all(c["predicted_time_s"] > 0 and c["predicted_dram_bytes"] > 0 for c in doc["configs"])
    profile = doc["hardware_profile"]  # the measured rates, not the preset's
    assert profile["matrix_flops_per_s"]["fp16"] == profile["matrix_flops_per_s"]["bf16"] == 400e12
    assert profile["vector_flops_per_s"]["fp32"] == 50e12
    summary = doc["summary"]
    assert {"time_median_abs_pct_error", "time_spearman"} <= set(summary)
    assert summary["flash_vs_naive_speedup"] == {"seq1024 d64": pytest.approx(3.0e-3 / 4.1e-4)}
    assert summary["flash-wmma_vs_cublas_speedup"] == {
        "seq1024 d64": pytest.approx(6.0e-4 / 1.2e-4)
    }
    assert summary["flash-wmma_fraction_of_sdpa"] == {"seq1024 d64": pytest.approx(1.0e-4 / 1.2e-4)}
    assert len(summary["by_kind"]["flash"]["tile_sweep_spearman"]) == 1  # three tile settings
    assert [c["name"] for c in doc["failed_configs"]] == ["flash seq16384"]
    kernels = {c["kind"]: set(c["predicted_ctas_per_sm"]) for c in doc["configs"]}
    assert {"sgemm_qk", "cast_s", "sgemm_pv"} <= kernels["cublas"]  # what cupy.matmul runs
    # the recorded registers limit occupancy: 64 K registers per SM, 256 per warp at a time
    occupancy = {c["name"]: c["predicted_ctas_per_sm"] for c in doc["configs"]}
    assert occupancy["naive 1024 (128, 128)"]["qk"] == 2  # 8 warps x 128 x 32 = 32 K each
    assert occupancy["flash 1024 (64, 64)"]["flash_fwd"] == 4  # 2 warps x 7,424: 14,848 each
    # cuBLAS's registers are unknown: 2048 threads of 128 per SM, 24 KiB + 1 KiB each of
    # the H200's 228 KiB of shared memory: 9
    assert occupancy["cublas 1024 (128, 128)"]["sgemm_qk"] == 9


def _validate_page(results_dir: Path, monkeypatch):
    """The app's Validate page reading the results files in `results_dir`."""
    from streamlit.testing.v1 import AppTest

    from hbmsim.validation import gpu_runs as validation

    monkeypatch.setattr(validation, "RESULTS_DIR", results_dir)
    at = AppTest.from_file(
        str(Path(__file__).resolve().parent.parent / "app_pages" / "main.py"), default_timeout=120
    )
    at.run()
    at.switch_page("validate.py").run()
    assert not at.exception
    return at


def test_the_validate_page_shows_a_results_file(tmp_path, monkeypatch):
    from kernels.validate import predict

    predict(_recorded_run(tmp_path), tmp_path / "results")
    at = _validate_page(tmp_path / "results", monkeypatch)
    assert any(m.label == "rank correlation" for m in at.metric)
    # the per-kernel table, one row per kind recorded (the headline table comes first)
    (kinds,) = [d.value for d in at.dataframe if "kernel" in d.value.columns]
    assert list(kinds["kernel"]) == ["flash", "flash-wmma", "naive", "cublas"]
    assert at.get("plotly_chart")


def test_the_validate_page_shows_the_occupancy_points_beside_their_unpadded_kernel(
    tmp_path, monkeypatch
):
    """A results file with occupancy points gets a table of each point's time over its
    unpadded kernel's, measured and predicted, as the results file gives them."""
    from kernels.validate import predict

    path = predict(_recorded_run(tmp_path, occupancy=True), tmp_path / "results")
    ratios = json.loads(path.read_text())["summary"]["occupancy_ratios"]
    at = _validate_page(tmp_path / "results", monkeypatch)
    (table,) = [d.value for d in at.dataframe if "CTAs per SM" in d.value.columns]
    points = ratios["flash-wmma-occupancy"]["seq1024 d64"]
    assert list(table["CTAs per SM"]) == [
        f"{k} (of {r['unpadded_ctas_per_sm']})" for k, r in points.items()
    ]
    assert list(table["measured"]) == [f"{r['measured']:.2f}x" for r in points.values()]
    assert list(table["predicted"]) == [f"{r['predicted']:.2f}x" for r in points.values()]


def test_the_gpu_side_needs_neither_simpy_nor_streamlit_nor_plotly():
    """The validation machine has CuPy and NumPy only: the measuring half must import there."""
    import subprocess

    code = (
        "import sys\n"
        "for name in ('simpy', 'streamlit', 'plotly'): sys.modules[name] = None\n"
        "import kernels.runner, kernels.validate, kernels.build\n"
        "from hbmsim import Problem, get_hardware\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.stdout.strip() == "ok", done.stderr


# what `ncu --csv` prints for a two-kernel launch: ==PROF== lines, then one row per metric;
# units as ncu scales them when not asked for base units
NCU_STDOUT = (Path(__file__).resolve().parent / "data" / "ncu_stdout.txt").read_text()


def test_ncu_csv_is_summed_over_the_profiled_kernels_in_bytes():
    from kernels.validate import parse_ncu_csv

    totals, kernels = parse_ncu_csv(NCU_STDOUT)
    assert kernels == ["matmul_nt", "softmax_rows"]
    assert totals["dram__bytes_read.sum"] == pytest.approx(67_108_864 + 2.15e9)
    assert totals["dram__bytes_write.sum"] == pytest.approx(2_147_483_648 + 2_147.48e6)


def test_an_ncu_unit_it_does_not_know_is_an_error_not_a_guess():
    from kernels.validate import parse_ncu_csv

    with pytest.raises(ValueError, match="furlong"):
        parse_ncu_csv(NCU_STDOUT.replace('"Gbyte"', '"furlong"'))


def test_a_budget_too_small_for_the_run_is_refused_before_anything_runs(tmp_path, capsys):
    from hbmsim.cli.commands import main
    from kernels.validate import main as validate_main

    assert main(["validate", "--out", str(tmp_path / "run"), "--budget-s", "30"]) == 2
    assert "budget-s: must be more than 90 seconds (got 30)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # python -m kernels.validate, as on the GPU machine
        validate_main(["--out", str(tmp_path / "run"), "--budget-s", "30"])
    assert exc.value.code == 2
    assert "--budget-s: must be more than 90 seconds (got 30)" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_instructions_per_fma_follow_the_kernels_inner_loops():
    """Counted by hand from flash_fwd.cuh and naive.cuh (and seen in cuobjdump --dump-sass of
    the sm_90 build: 512 FFMA, 576 HADD2, 128 LDS in flash_fwd's unrolled d64 score loop).

    flash_fwd fp16, d 64, bk 64: the score loop does 64 FMAs per 8 K vectors (8 loads), 8 Qt
    elements (8 loads) and 72 conversions: 152 / 64; the P V loop per key does 64 FMAs, one
    score load, 8 V vector loads and 64 conversions: 137 / 64. fp32 (4 per 16-byte vector):
    32 FMAs per 8 + 4 loads; 64 FMAs per 1 + 16 loads. naive 128 x 128 fp16: 64 FMAs per
    2 vector loads and 16 conversions."""
    from hbmsim.algorithms import loop_costs

    assert loop_costs.flash_fwd(64, 64, 2) == pytest.approx((152 / 64 + 137 / 64) / 2)
    assert loop_costs.flash_fwd(64, 64, 4) == pytest.approx((44 / 32 + 81 / 64) / 2)
    assert loop_costs.naive_matmul(128, 128, 2) == pytest.approx(82 / 64)
    assert loop_costs.naive_matmul(64, 64, 4) == pytest.approx((16 + 2) / 16)
    # the mirrors carry them: scalar kernels issue-bound, the WMMA kernel on warp-level MMA
    p = Problem(batch=1, heads=2, seq_q=256, seq_k=256, head_dim=64)
    hw = get_hardware("h200")
    (scalar,) = make_plan("fa2-kernel", p, hw, 64, 64).kernels
    (wmma,) = make_plan("fa2-wmma-kernel", p, hw, 64, 64).kernels
    # the compiled count where the cache has the variant (tests/test_sass.py checks it)
    compiled, _curve = loop_costs.compiled(loop_costs.sass_key_flash(64, 64, 64, False, "fp16"))
    assert scalar.instructions_per_fma == compiled and not scalar.warp_mma
    assert wmma.warp_mma and wmma.instructions_per_fma == 1.0
    assert (
        hw.matrix_rate("fp16", False, scalar.instructions_per_fma) < hw.vector_flops_per_s["fp32"]
    )
    # a variant the cache lacks (fp32) keeps the hand count
    p32 = Problem(batch=1, heads=2, seq_q=256, seq_k=256, head_dim=64, dtype="fp32")
    (scalar32,) = make_plan("fa2-kernel", p32, hw, 64, 64).kernels
    assert scalar32.instructions_per_fma == loop_costs.flash_fwd(64, 64, 4)
    assert scalar32.cycles_per_fma_by_warps == ()


def test_the_wmma_kernels_shared_memory_traffic_follows_its_source():
    """flash_fwd_wmma, fp16, 64 x 64 tiles, d 64, per K/V tile, counted by hand: each of the 4
    warps loads 16 Q and 16 K fragments (512 B each) and stores 4 S blocks (1 KiB); its
    softmax row loops make 32 + 32 + 32 two-access iterations, each access two 128-byte
    wavefronts (rows 68 words apart: rows r and r + 8 share banks); its P V products load and
    store 4 O blocks (1 KiB each way) and load 16 P and 16 V fragments; the CTA writes its K
    and V tiles (8 KiB each). Over 4 * 64^3 flops."""
    from hbmsim.algorithms import loop_costs

    per_warp = (16 * 2 * 512 + 4 * 1024) + 96 * 2 * 2 * 128 + (4 * 2 * 1024 + 16 * 2 * 512)
    assert loop_costs.wmma_smem_bytes_per_flop(64, 64, 64, 2) == pytest.approx(
        (4 * per_warp + 2 * 8192) / (4 * 64**3)
    )
    p = Problem(batch=1, heads=2, seq_q=256, seq_k=256, head_dim=64)
    (wmma,) = make_plan("fa2-wmma-kernel", p, get_hardware("h200"), 64, 64).kernels
    (scalar,) = make_plan("fa2-kernel", p, get_hardware("h200"), 64, 64).kernels
    assert wmma.smem_bytes_per_flop == loop_costs.wmma_smem_bytes_per_flop(64, 64, 64, 2)
    assert scalar.smem_bytes_per_flop == 0.0


def test_validate_measurements_prints_the_errors_per_kernel_kind(tmp_path, capsys):
    """The command writes the results file and prints one row per kernel kind and one for
    all: the median time error in the row is the file's own, to the printed percent."""
    from hbmsim.cli.commands import main

    code = main(
        ["validate", "--measurements", str(_recorded_run(tmp_path)), "--results-dir", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert code == 0
    (path,) = tmp_path.glob("*-*.json")
    configs = json.loads(path.read_text())["configs"]
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
    for kind in ("flash", "flash-wmma", "naive", "cublas", "all"):
        assert kind in rows, out
    errors = sorted(abs(c["predicted_time_s"] / c["measured_time_s"] - 1) for c in configs)
    n = len(errors)
    median = (errors[(n - 1) // 2] + errors[n // 2]) / 2 * 100
    assert rows["all"][1] == str(n) and rows["all"][2] == f"{median:.0f}%"
    assert out.strip().endswith(str(path))


def test_each_occupancy_point_pads_its_kernel_to_exactly_its_ctas_per_sm():
    """The occupancy points' launches ask for the most shared memory that still lets k CTAs
    share an SM: on the H200 preset, hbmsim's occupancy rule then gives k, below what the
    unpadded kernel gets, and one byte more per CTA would give fewer."""
    from hbmsim.gpu.occupancy import occupancy
    from kernels.runner import padded_smem_bytes
    from kernels.validate import OCCUPANCY_POINTS, SWEEP

    hw = get_hardware("h200")
    reserve = hw.sram_bytes_per_sm - hw.sram_bytes_per_block
    assert OCCUPANCY_POINTS and set(OCCUPANCY_POINTS) <= set(SWEEP)
    for pt in OCCUPANCY_POINTS:
        wmma = pt.kind.startswith("flash-wmma")
        own = flash_smem_bytes(pt.bq, pt.bk, pt.head_dim, 2, wmma)
        threads = flash_threads(pt.bq, wmma)
        smem = padded_smem_bytes(pt.ctas_per_sm, own, hw.sram_bytes_per_sm, reserve)
        assert occupancy(hw, smem, threads) == pt.ctas_per_sm, pt
        assert pt.ctas_per_sm == 1 or occupancy(hw, smem + 1, threads) == pt.ctas_per_sm - 1
        assert occupancy(hw, own, threads) > pt.ctas_per_sm, pt


def test_a_padding_the_kernel_does_not_fit_is_refused_with_both_sizes():
    from kernels.runner import flash_launcher, padded_smem_bytes

    with pytest.raises(ValueError, match="leave 115,712 bytes .* needs 200,000"):
        padded_smem_bytes(2, 200_000, 233_472, 1024)
    p = Problem(batch=1, heads=2, seq_q=256, seq_k=256, head_dim=64)
    with pytest.raises(ValueError, match="needs 71,680 bytes of shared memory; 1,000 were given"):
        flash_launcher(p, 64, 64, "fp16", wmma=True, smem=1000)  # refused before compiling


def test_occupancy_points_are_predicted_padded_and_compared_with_their_unpadded_kernel(
    tmp_path, capsys
):
    """A recorded run with padded flash-wmma points: each is simulated at the CTAs per SM its
    launch asked for, the summary gives its time over the unpadded kernel's (the measured
    ratio from the recorded times, the predicted one from the file's own predictions), and
    `hbmsim validate` prints them."""
    from hbmsim.cli.commands import main

    measurements = _recorded_run(tmp_path, occupancy=True)
    assert (
        main(["validate", "--measurements", str(measurements), "--results-dir", str(tmp_path)]) == 0
    )
    out = capsys.readouterr().out
    (path,) = tmp_path.glob("*-*.json")
    doc = json.loads(path.read_text())
    by_name = {c["name"]: c for c in doc["configs"]}
    base = by_name["flash-wmma 1024 (64, 64) b4 h16"]
    ratios = doc["summary"]["occupancy_ratios"]["flash-wmma-occupancy"]["seq1024 d64"]
    assert set(ratios) == {"1", "2"}
    for kind, k, t in OCCUPANCY_ROWS:
        row = by_name[f"{kind} 1024 {k} per SM"]
        assert row["predicted_ctas_per_sm"] == {"flash_fwd_wmma": k}
        assert ratios[str(k)]["measured"] == pytest.approx(t / OCCUPANCY_BASE_S)
        assert ratios[str(k)]["predicted"] == pytest.approx(
            row["predicted_time_s"] / base["predicted_time_s"]
        )
        assert (
            ratios[str(k)]["unpadded_ctas_per_sm"]
            == base["predicted_ctas_per_sm"]["flash_fwd_wmma"]
        )
    assert ratios["1"]["predicted"] != ratios["2"]["predicted"]  # simulated, not copied
    assert "fewer CTAs per SM" in out
    assert f"{ratios['1']['measured']:.2f}x" in out and f"{ratios['1']['predicted']:.2f}x" in out


@pytest.mark.parametrize(
    "change, message",
    [
        ({"smem_bytes": -1}, "smem_bytes: must be from 0"),
        ({"smem_bytes": 100_000, "ctas_per_sm": None}, "ctas_per_sm: must be an integer from 1"),
        (
            {"smem_bytes": 1000, "ctas_per_sm": 1},
            "smem_bytes: must be at least flash_fwd_wmma's own",
        ),
    ],
)
def test_a_bad_occupancy_field_in_a_measurements_file_is_named(tmp_path, capsys, change, message):
    from hbmsim.cli.commands import main

    path = _recorded_run(tmp_path, occupancy=True)
    doc = json.loads(path.read_text())
    row = next(c for c in doc["configs"] if "ctas_per_sm" in c)
    row.update(change)
    path.write_text(json.dumps(doc))
    assert main(["validate", "--measurements", str(path), "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
