"""The serving kernel curves measured on NVIDIA aiconfigurator-core 0.12.0's operator tables
(``estimator/catalog/kernels/aiconfigurator.json``, ``validation/derive_kernels.py``) and their
lookup (``estimator.timing.measured``): the shipped file equals a fresh derivation, which never
opens the package's reserved end-to-end samples; the lookup per accelerator, engine and version,
its notes (tables and versions used, fallbacks, shapes beyond the measured grid); training keeps
its profiles."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from estimator import get_accelerator
from estimator.catalog.files import DIR, load
from estimator.timing.kernels import gemm_time, kernel_profile
from estimator.timing.measured import (
    TABLES,
    engine_tables,
    grid_notes,
    nearest_version,
    serving_profile,
)

ROOT = Path(__file__).resolve().parents[1]
HAVE_TABLES = (
    importlib.util.find_spec("aiconfigurator_core") is not None
    and importlib.util.find_spec("pyarrow") is not None
)
# Skipped where they are missing outside CI; in CI (``CI`` set, ``make test`` installs them) the
# test runs and fails instead, as the browser tests do.
needs_tables = pytest.mark.skipif(
    not HAVE_TABLES and not os.environ.get("CI"),
    reason="aiconfigurator-core 0.12.0 and pyarrow not installed (make test does)",
)

# every file the derivation opens while the audit hook is armed
_OPENED: list[str] = []
_ARMED: list[bool] = []


def _hook(event: str, args: tuple[object, ...]) -> None:
    if event == "open" and _ARMED and args and isinstance(args[0], str | bytes | Path):
        _OPENED.append(str(args[0]))


@pytest.mark.slow
@needs_tables
def test_shipped_tables_equal_a_fresh_derivation_that_never_opens_the_samples() -> None:
    from validation import derive_kernels

    sys.addaudithook(_hook)  # hooks cannot be removed: this one records only while armed
    _OPENED.clear()
    _ARMED.append(True)
    try:
        fresh = derive_kernels.render(derive_kernels.derive(derive_kernels.data_root()))
    finally:
        _ARMED.clear()
    tables = [p for p in _OPENED if p.endswith(".parquet")]
    assert len(tables) > 100, "the hook sees the tables the derivation reads"
    assert not [p for p in _OPENED if "sample" in Path(p).name.lower()]
    assert not [p for p in _OPENED if p.endswith("silicon_sample.csv")]
    assert all("/systems/data/" in p for p in tables)
    assert (DIR / TABLES).read_text(encoding="utf-8") == fresh


def test_shipped_file_names_its_source_and_ships_the_license() -> None:
    table = load(TABLES)
    src = table["source"]
    assert (src["package"], src["version"], src["license"]) == (
        "aiconfigurator-core",
        "0.12.0",
        "Apache-2.0",
    )
    license_file = DIR / "kernels" / src["license_file"]
    assert "Apache License" in license_file.read_text(encoding="utf-8")
    assert (DIR / TABLES).stat().st_size < 1_000_000
    for system, entry in table["systems"].items():
        get_accelerator(entry["accelerator"])  # a catalog accelerator
        for engines in entry["ops"].values():
            for fits in engines.values():
                for fit in fits:
                    assert fit["path"].startswith(f"{system}/")
                    assert fit["version"] in fit["path"]


@needs_tables
def test_in_grid_gemms_follow_the_measured_table() -> None:
    """B200 NVFP4 GEMMs under TensorRT-LLM: the serving profile's times against the table's own
    measurements (the fit's error, not the derived Blackwell profile's 2x)."""
    import numpy as np
    import pyarrow.parquet as pq

    from validation.derive_kernels import data_root

    path = data_root() / "b200_sxm/gemm/trtllm/1.3.0rc20/gemm_perf.parquet"
    with path.open("rb") as f:
        t = pq.read_table(f, columns=["gemm_dtype", "m", "n", "k", "latency"]).to_pydict()
    acc = get_accelerator("b200")
    prof = serving_profile("b200")
    errors = []
    for dtype, m, n, k, ms in zip(*t.values(), strict=True):
        if dtype != "nvfp4" or n != k or n not in (4096, 8192) or m not in (1, 64, 1024, 8192):
            continue
        moved = m * k * 0.5625 + k * n * 0.5625 + m * n * 2
        predicted = float(gemm_time(acc, prof, 2.0 * m * n * k, moved, "fp4"))
        errors.append(predicted / (ms * 1e-3) - 1)
    assert len(errors) >= 8
    assert float(np.median(np.abs(errors))) < 0.3
    big = 2.0 * 8192**3
    fitted = float(gemm_time(acc, kernel_profile("b200"), big, 3 * 8192**2, "fp4"))
    assert float(gemm_time(acc, prof, big, 3 * 8192**2, "fp4")) > 1.5 * fitted


def test_the_notes_name_the_engine_tables_and_versions() -> None:
    notes = " ".join(serving_profile("b200").notes)
    assert "TensorRT-LLM tables of aiconfigurator-core 0.12.0 (b200_sxm" in notes
    assert "GEMM bf16/fp4/fp8/fp8_block (1.3.0rc20)" in notes
    vllm = " ".join(serving_profile("b200", "vllm", "0.22.0").notes)
    # GEMMs exist at vLLM 0.24.0 only, prefill attention at 0.22.0 and 0.24.0
    assert "GEMM bf16/fp4/fp8/fp8_block (0.24.0)" in vllm
    assert "prefill attention bf16 (0.22.0)" in vllm
    assert "the nearest covered versions to 0.22.0" in vllm
    assert serving_profile("b200", "vllm").attention_curves != (
        serving_profile("b200", "vllm", "0.22.0").attention_curves
    )


def test_versions_and_engines() -> None:
    assert nearest_version(["0.19.0", "0.22.0", "0.24.0"], None) == "0.24.0"
    assert nearest_version(["0.19.0", "0.22.0", "0.24.0"], "0.22.0") == "0.22.0"
    assert nearest_version(["0.19.0", "0.22.0", "0.24.0"], "0.23.0") == "0.24.0"  # tie: newer
    assert nearest_version(["0.19.0", "0.22.0", "0.24.0"], "0.20") == "0.19.0"
    assert nearest_version(["1.3.0rc10", "1.3.0rc20"], "1.3.0rc11") == "1.3.0rc10"
    assert nearest_version(["0.5.6.post2", "0.5.14"], "0.5.6") == "0.5.6.post2"
    assert engine_tables(None) == "trtllm"
    assert engine_tables("vllm-small-gpu") == "vllm"
    assert serving_profile("h100-sxm-80gb", "sglang").gemm_curves != (
        serving_profile("h100-sxm-80gb", "trtllm").gemm_curves
    )


def test_fallbacks_keep_todays_curves_and_say_so() -> None:
    pcie = serving_profile("h100-pcie-80gb")
    assert pcie.gemm_curves == ()
    assert any("No measured serving kernel tables for h100-pcie-80gb" in n for n in pcie.notes)
    # A100 tables have no fp8 (no fp8 tensor cores): an int8 GEMM keeps the fitted curve
    a100, acc = serving_profile("a100-sxm-80gb"), get_accelerator("a100-sxm-80gb")
    assert a100.gemm_curve("int8") is None
    fitted = gemm_time(acc, kernel_profile(acc.id), 2e12, 1e9, "int8")
    assert gemm_time(acc, a100, 2e12, 1e9, "int8") == fitted
    assert gemm_time(acc, a100, 2e12, 1e9, "bf16") != gemm_time(
        acc, kernel_profile(acc.id), 2e12, 1e9, "bf16"
    )
    assert "as does a format without a table" in " ".join(a100.notes)


def test_shapes_beyond_the_measured_grid_get_a_note() -> None:
    assert grid_notes(serving_profile("b200"), 4096, 8192) == []
    rows, wide = grid_notes(serving_profile("b200", "vllm"), 65_536, 100_000)
    assert "65,536 rows, beyond the measured grid's 32,768 (b200_sxm)" in rows
    assert "100,000 wide lies beyond the measured grid's 16,384" in wide
    assert grid_notes(serving_profile("h100-pcie-80gb"), 10**6, 10**6) == []
    # a plan: Llama 3.1 405B's MLP (53,248 wide) at TP 2 is 26,624 wide per rank
    from estimator import get_model
    from estimator.layout.parallel import Parallelism
    from estimator.timing.measured import step_grid_notes

    model = get_model("llama-3.1-405b")
    notes = step_grid_notes(model, serving_profile("b200"), Parallelism(tp=2), 4096)
    assert notes and "26,624 wide" in notes[0]
    assert step_grid_notes(model, serving_profile("b200"), Parallelism(tp=8), 4096) == []


def test_training_keeps_its_profiles() -> None:
    for ident in ("h100-sxm-80gb", "b200", "gb200", "rtx-pro-6000-bse"):
        assert kernel_profile(ident).gemm_curves == ()
        assert kernel_profile(ident).attention_curves == ()


def test_the_tables_are_read_lazily() -> None:
    code = (
        "import sys\n"
        "seen = []\n"
        "sys.addaudithook(lambda e, a: seen.append(str(a[0])) if e == 'open' else None)\n"
        "import estimator, estimator.timing.measured\n"
        "print(any(s.endswith('aiconfigurator.json') for s in seen))\n"
        "estimator.timing.measured.serving_profile('b200')\n"
        "print(any(s.endswith('aiconfigurator.json') for s in seen))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.split() == ["False", "True"]
    assert json.loads((DIR / TABLES).read_text(encoding="utf-8"))["systems"]


def test_measured_kernels_are_an_opt_in_of_a_plan_without_load() -> None:
    """The default answer reads the fitted curves, as the load model does (one answer, one set
    of kernels); ``kernels="measured"`` reads the tables for a plan without load, and refuses
    one under load, naming the field."""
    from estimator import InferenceSetup, Parallelism, get_model, get_precision
    from estimator.errors import SpecError
    from estimator.serving.estimate import estimate_inference

    args = (get_model("llama-3.1-8b"), get_accelerator("b200"), Parallelism(tp=1))
    setup, fp8 = InferenceSetup(1024, 256, 64), get_precision("fp8-serving")
    fitted = estimate_inference(*args, setup, fp8)
    measured = estimate_inference(*args, setup, fp8, kernels="measured")
    assert measured.output_tokens_per_s != fitted.output_tokens_per_s
    assert any("Serving kernels measured" in n for n in measured.notes)
    assert not any("Serving kernels measured" in n for n in fitted.notes)
    for under_load in ({"engine": "vllm"}, {"request_rate": 1.0}):
        with pytest.raises(SpecError) as err:
            estimate_inference(*args, setup, fp8, kernels="measured", **under_load)  # type: ignore[arg-type]
        assert err.value.field == "kernels"
    with pytest.raises(SpecError):
        estimate_inference(*args, setup, fp8, kernels="tables")
