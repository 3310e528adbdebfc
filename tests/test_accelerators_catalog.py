"""The accelerator and price catalogs: every entry reads, carries sources and sane units; every
accelerator has a dated default price or is listed as missing with its reason; accelerators
without kernel measurements say whose curves they use (issue 20's additions included)."""

from __future__ import annotations

import re

import pytest

from estimator import accelerator_entry, accelerator_ids, get_accelerator
from estimator.catalog import price
from estimator.catalog.files import load
from estimator.inputs.accelerator import GIB
from estimator.timing.kernels import kernel_profile

NEW = (
    "rtx-pro-6000-bse",
    "b100",
    "h800-sxm-80gb",
    "a800-sxm-80gb",
    "l20",
    "mi300a",
    "tpu-v6e",
    "tpu-v7",
    "trainium2",
)
DATE = re.compile(r"\d{4}-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?")


def _missing() -> dict[str, str]:
    return {m["accelerator"]: m["reason"] for m in load("prices.json")["missing"]}


def test_new_accelerators_are_in_the_catalog() -> None:
    assert set(NEW) <= set(accelerator_ids())
    assert len(accelerator_ids()) == len(set(accelerator_ids()))


@pytest.mark.parametrize("ident", accelerator_ids())
def test_every_entry_reads_with_sources_and_sane_units(ident: str) -> None:
    entry = accelerator_entry(ident)
    acc = get_accelerator(ident)
    assert entry["sources"] and all({"url", "repo", "doc"} & set(s) for s in entry["sources"]), (
        "each source names a page, a repository file or a document"
    )
    assert entry["reliability"].strip()
    dense = acc.peak_flop_per_s
    assert max(dense.get("bf16", 0.0), dense.get("fp16", 0.0)) > 0
    assert all(rate > 0 for rate in dense.values())
    assert acc.memory_bytes > 0 and acc.hbm_bytes_per_s > 0
    # memory_gb is the vendor's figure (GB or GiB as labelled); a driver-reported total in bytes
    # lies near it: a figure entered in MiB or in bytes of the wrong unit would be far off.
    reported = entry["memory_bytes_reported"]
    if reported:
        assert 0.9 * entry["memory_gb"] * 1e9 <= reported <= 1.1 * entry["memory_gb"] * GIB
    assert entry["gpus_per_node"] >= 1 and entry["scale_up"]["domain_gpus"] >= 1


def test_unverified_research_values_stay_flagged() -> None:
    # Values recalled rather than read in a source are marked UNVERIFIED where users see them.
    for ident in ("b100", "h800-sxm-80gb", "l20", "mi300a", "tpu-v7"):
        entry = accelerator_entry(ident)
        assert "UNVERIFIED" in entry["notes"] and "UNVERIFIED" in entry["reliability"], ident
    assert "UNVERIFIED" in load("accelerators.json")["about"]


def test_chips_that_are_not_gpus_say_so() -> None:
    for ident in ("tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7", "trainium2"):
        notes = kernel_profile(ident).notes
        assert any("documented default" in n for n in notes), ident
        assert any("not a GPU" in n for n in notes), ident
    for ident in ("tpu-v6e", "tpu-v7", "trainium2"):
        assert "not a GPU" in accelerator_entry(ident)["notes"]


@pytest.mark.parametrize(
    ("ident", "donor", "base"),
    [
        ("h800-sxm-80gb", "h100-sxm-80gb", "h100_sxm"),
        ("a800-sxm-80gb", "a100-sxm-80gb", "a100_sxm"),
        ("b100", "b200", "b200_sxm"),
        ("mi300a", "mi300x", "h100_sxm"),
    ],
)
def test_same_silicon_borrows_its_donors_curves(ident: str, donor: str, base: str) -> None:
    prof, theirs = kernel_profile(ident), kernel_profile(donor)
    assert load("efficiency.json")["accelerators"][ident]["profile"] == base
    assert not prof.measured
    assert prof.gemm_efficiency_max == theirs.gemm_efficiency_max
    assert prof.gemm_efficiency("fp8") == theirs.gemm_efficiency("fp8")
    assert any(n.startswith("Borrowed profile") for n in prof.notes)


def test_other_chips_stay_on_the_documented_fallback() -> None:
    table = load("efficiency.json")
    for ident in ("rtx-pro-6000-bse", "l20", "tpu-v6e", "tpu-v7", "trainium2"):
        assert ident not in table["accelerators"]
        assert any("documented default" in n for n in kernel_profile(ident).notes)
    # fallback_notes only reach accelerators on the fallback: a mapped id would ignore them.
    assert set(table["fallback_notes"]) <= set(accelerator_ids()) - set(table["accelerators"])


def test_every_accelerator_has_a_price_or_a_reason() -> None:
    missing = _missing()
    assert set(missing) <= set(accelerator_ids())
    for ident in accelerator_ids():
        p = price(ident)
        if p is None:
            assert missing.get(ident, "").strip(), f"{ident}: no price and no reason"
        else:
            assert ident not in missing, f"{ident}: priced and listed as missing"


def test_prices_are_dated_positive_and_sourced() -> None:
    rows = load("prices.json")["prices"]
    ids = [p["accelerator"] for p in rows]
    assert len(ids) == len(set(ids)) and set(ids) <= set(accelerator_ids())
    for p in rows:
        assert DATE.fullmatch(p["date"]), p
        assert p["usd_per_gpu_hour"] > 0 and "http" in p["source"], p


def test_issue_20_prices() -> None:
    # Named providers' on-demand rates picked from the research (see each entry's source).
    expected = {
        "rtx-pro-6000-bse": (2.50, "2026-02", "CoreWeave"),
        "tpu-v6e": (2.70, "2024-12", "Google Cloud"),
        "mi300x": (1.50, "2026-05-18", "TensorWave"),
        "h100-sxm-80gb": (3.0, "2026-05", "Mercatus"),  # kept
    }
    for ident, (usd, date, who) in expected.items():
        p = price(ident)
        assert p is not None and (p.usd_per_gpu_hour, p.date) == (usd, date), ident
        assert who in p.source
    assert "reserved" in _missing()["b300"]


def test_gaudi3_is_the_900_w_oam_module() -> None:
    entry = accelerator_entry("gaudi3")
    assert entry["tdp_w"] == 900 and "OAM" in entry["notes"]
