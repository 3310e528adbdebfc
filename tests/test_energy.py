"""Energy, TCO and token prices (issue 48): the core's formulas, every accelerator's power
figure sourced or its absence explained, two published energy figures the model is checked
against, and the API, sweeps and CLI that carry them."""

from __future__ import annotations

import io
import math

import pytest
from fastapi.testclient import TestClient

from app.cli.commands import main
from app.main import app
from estimator import accelerator_entry, accelerator_ids, get_accelerator, get_model
from estimator.energy import (
    NoPowerFigure,
    Ownership,
    PowerSetup,
    cached_token_cost,
    default,
    energy_of,
    measured,
    missing_power,
    power_per_gpu,
    tco,
    token_prices,
)
from estimator.sweep.serving import ServingSearch, ServingWorkload, sweep_serving
from estimator.sweep.training import TrainingSearch, TrainingWorkload, sweep_training

API = "/api/v1"
client = TestClient(app)
H100 = get_accelerator("h100-sxm-80gb")
TPU = get_accelerator("tpu-v5p")
PLAN = {
    "model": "llama-3-8b",
    "accelerator": "h100-sxm-80gb",
    "num_gpus": 64,
    "layout": {"tp": 1, "pp": 1},
    "seq_len": 4096,
    "global_batch_size": 256,
    "tokens": 1e12,
}


@pytest.mark.parametrize("ident", accelerator_ids())
def test_every_accelerator_has_a_sourced_power_figure_or_a_reason(ident: str) -> None:
    entry = accelerator_entry(ident)
    if entry["tdp_w"] is None:
        assert len(missing_power().get(ident, "")) > 20
    else:
        assert ident not in missing_power()
        assert 50 <= entry["tdp_w"] <= 2000 and entry["sources"]


def test_power_is_the_tdp_with_node_and_facility_overheads() -> None:
    p = power_per_gpu(H100, PowerSetup(node_overhead=0.5, pue=1.2))
    assert (p.gpu_w, p.node_w, p.basis) == (700, 1050, "tdp")
    assert p.facility_w == pytest.approx(1260)
    given = power_per_gpu(TPU, PowerSetup(gpu_w={"tpu-v5p": 400}, node_overhead=0, pue=1))
    assert (given.facility_w, given.basis) == (400, "given")
    with pytest.raises(NoPowerFigure) as err:
        power_per_gpu(TPU, PowerSetup())
    assert err.value.field == "gpu_power_w" and "Google" in err.value.reason


def test_energy_is_power_over_time_and_over_the_rate() -> None:
    e = energy_of(1000.0, 8, 4000.0, seconds=3600.0)  # 8 kW for an hour at 4,000 tokens/s
    assert e.mwh == pytest.approx(0.008)
    assert e.j_per_token == pytest.approx(2.0)
    assert e.kwh_per_1m_tokens == pytest.approx(2e6 / 3.6e6)
    assert e.tokens_per_s_per_mw == pytest.approx(4000 / 0.008)
    assert e.tokens_per_s_per_mw * e.j_per_token == pytest.approx(1e6)  # the same figure twice


def test_owning_spreads_the_purchase_over_its_life_plus_power() -> None:
    power = power_per_gpu(H100, PowerSetup(node_overhead=0, pue=1))
    straight = tco(power, Ownership(capex_usd_per_gpu=43_830, life_years=5, usd_per_kwh=0.1), 3.0)
    assert straight.capital_usd_per_gpu_hour == pytest.approx(1.0)  # 43,830 / (5 x 8,766 h)
    assert straight.power_usd_per_gpu_hour == pytest.approx(0.07)
    assert straight.owned_usd_per_gpu_hour == pytest.approx(1.07)
    assert straight.rental_usd_per_gpu_hour == 3.0
    interest = tco(power, Ownership(capex_usd_per_gpu=43_830, life_years=5, cost_of_money=0.1), 3.0)
    assert interest.capital_usd_per_gpu_hour == pytest.approx(0.1 / (1 - 1.1**-5) * 5)
    assert tco(power, Ownership(), None).owned_usd_per_gpu_hour is None


def test_token_prices_recover_the_all_in_cost_at_the_traffic_mix() -> None:
    # $36/h replica, 4,000 input and 1,000 output tokens/s, prefill a quarter of the time
    p = token_prices(36.0, (4000.0, 1000.0), 0.25, input_per_output=4.0)
    assert p.input == pytest.approx(0.01 * 0.25 / 4000 * 1e6)
    assert p.output == pytest.approx(0.01 * 0.75 / 1000 * 1e6)
    all_in = 0.01 / 5000 * 1e6  # every dollar over every token
    assert p.blended == pytest.approx(all_in)
    cached = token_prices(36.0, (4000.0, 1000.0), 0.25, (0.5, 0.2), 4.0)
    assert cached.cached_input == pytest.approx(0.2 * cached.input)
    assert 0.5 * cached.input + 0.5 * cached.cached_input == pytest.approx(p.input)
    assert token_prices(None, (1.0, 1.0), 0.5).blended is None


def test_a_cached_token_costs_what_is_left_of_the_prefill() -> None:
    assert cached_token_cost(0.6, 1.0, 0.5) == pytest.approx(0.2)  # 0.6 = 0.5 + 0.5 x 0.2
    assert cached_token_cost(0.4, 1.0, 0.5) == 0.0  # clipped
    assert cached_token_cost(1.0, 1.0, 0.0) == 0.0


def test_llama_3_1_405b_training_energy_against_metas_model_card() -> None:
    """Meta's Llama 3.1 model card (https://huggingface.co/meta-llama/Llama-3.1-405B, 'Training
    Energy Use'; TweakTown's report of it, 2024-07-23): 405B trained for 30.84M H100-80GB
    GPU-hours, its energy counted at the GPUs' 700 W TDP = 21,588 MWh (the card's 11,390 t
    CO2eq location-based covers 39.3M GPU-hours of the three sizes at the same TDP). The
    planner's run on Meta's published layout (16,384 GPUs, TP 8 x PP 16 x DP 128, 8,192-token
    sequences, 16M-token batches, 15.6T tokens), counted the same way (no node or facility
    overhead): 27,810 MWh, 1.29x, the planner's MFU 28% against Meta's reported 38-43%."""
    body = PLAN | {
        "model": "llama-3.1-405b",
        "num_gpus": 16384,
        "layout": {"tp": 8, "pp": 16},
        "seq_len": 8192,
        "global_batch_size": 2048,
        "tokens": 15.6e12,
        "node_overhead": 0,
        "pue": 1,
    }
    out = client.post(f"{API}/training/estimate", json=body).json()
    theirs_mwh = 30.84e6 * 0.700 / 1e3
    assert out["energy"]["mwh"] == pytest.approx(out["cost"]["gpu_hours"] * 0.7 / 1e3)
    # 1.29x today: a ceiling that fails if the planner's throughput on this run drops further
    assert 1.0 < out["energy"]["mwh"] / theirs_mwh <= 1.34


def test_mlperf_node_power_below_the_bound() -> None:
    """SMC's MLPerf Training v4.0 Llama 2 70B LoRA run (https://smc.co/mlperfv40/results/
    llama2-70b-lora): one 8x H100 node averaged 6,741 W (DC) for 29:06, 3.27 kWh. The
    planner's bound for the same node and time (TDP plus the DGX H100 host share, no PUE:
    the measurement is at the node) is 10,192 W and 4.94 kWh, 1.51x; the GPUs' TDP alone
    (5,600 W) is below the measured node, which the host share accounts for."""
    (run,) = [m for m in measured() if m["accelerator"] == "h100-sxm-80gb"]
    node = power_per_gpu(H100, PowerSetup(pue=1)).node_w * run["gpus"]
    ours = energy_of(node, 1, 1.0, run["seconds"]).mwh
    assert ours is not None and run["energy_kwh"] == pytest.approx(
        run["node_w"] * run["seconds"] / 3.6e6, rel=0.01
    )
    assert ours * 1e3 / run["energy_kwh"] == pytest.approx(1.51, abs=0.05)
    assert H100.tdp_w is not None and H100.tdp_w * run["gpus"] < run["node_w"] < node


def test_api_energy_tco_and_the_refusal_of_a_missing_figure() -> None:
    out = client.post(f"{API}/training/estimate", json=PLAN | {"capex_usd_per_gpu": 25000})
    body = out.json()
    assert out.status_code == 200 and body["energy"]["basis"] == "tdp"
    assert body["energy"]["mwh"] == pytest.approx(
        body["energy"]["facility_w"] * body["cost"]["time_to_train_s"] / 3.6e9
    )
    assert body["tco"]["owned_usd_per_gpu_hour"] == pytest.approx(
        25000 / (default("life_years") * 8766) + body["tco"]["power_usd_per_gpu_hour"]
    )
    tpu = client.post(f"{API}/training/estimate", json=PLAN | {"accelerator": "tpu-v5p"}).json()
    assert tpu["energy"] is None and "Google" in tpu["energy_refused"]
    owned = client.post(
        f"{API}/training/estimate",
        json=PLAN | {"accelerator": "tpu-v5p", "capex_usd_per_gpu": 1000},
    )
    assert owned.status_code == 422 and owned.json()["detail"][0]["field"] == "gpu_power_w"
    given = client.post(
        f"{API}/training/estimate", json=PLAN | {"accelerator": "tpu-v5p", "gpu_power_w": 450}
    ).json()
    assert given["energy"]["gpu_w"] == 450 and given["energy"]["basis"] == "given"


def test_api_serving_token_prices_and_energy_per_output_token() -> None:
    body = {
        "model": "llama-3-8b",
        "accelerator": "h100-sxm-80gb",
        "input_len": 1024,
        "output_len": 256,
        "concurrency": 32,
        "prefix_cache_hit_rate": 0.5,
    }
    out = client.post(f"{API}/inference/estimate", json=body).json()
    p, cost, e = out["token_prices"], out["cost"], out["energy"]
    assert p["usd_per_1m_output_tokens"] == pytest.approx(cost["usd_per_1m_output_tokens_decode"])
    assert 0 < p["usd_per_1m_cached_input_tokens"] < p["usd_per_1m_input_tokens"]
    mix = out["throughput"]["input_tokens_per_s"] / out["throughput"]["output_tokens_per_s"]
    at_mix = client.post(f"{API}/inference/estimate", json=body | {"input_per_output": mix})
    blended = at_mix.json()["token_prices"]["usd_per_1m_blended_tokens"]
    assert blended * (mix + 1) == pytest.approx(cost["usd_per_1m_output_tokens"])
    assert e["j_per_token"] == pytest.approx(
        e["facility_w"] / out["throughput"]["output_tokens_per_s"]
    )


def test_training_sweep_ranks_by_energy_and_refuses_it_without_power() -> None:
    model = get_model("llama-3-8b")
    workload = TrainingWorkload(seq_len=4096, global_batch_size=256, tokens=1e12)
    space = TrainingSearch(accelerators=("h100-sxm-80gb", "b200"), num_gpus=(64,), tp=(1, 2))
    s = sweep_training(model, workload, space, objective="energy")
    ranked = [r.row["kwh_per_1m_tokens"] for r in s.recommendations]
    assert ranked == sorted(ranked) and s.objective == "energy"
    row = s.recommendations[0].row
    assert row["mwh"] == pytest.approx(row["kwh_per_1m_tokens"] * 1e12 / 1e6 / 1e3)
    sweep = {
        "model": "llama-3-8b",
        "accelerator": ["h100-sxm-80gb", "tpu-v5p"],
        "num_gpus": [64],
        "seq_len": 4096,
        "global_batch_size": 256,
        "objective": "energy",
    }
    refused = client.post(f"{API}/training/sweep", json=sweep)
    assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == "gpu_power_w"
    given = client.post(f"{API}/training/sweep", json=sweep | {"gpu_powers_w": {"tpu-v5p": 500}})
    assert given.status_code == 200 and given.json()["objective"] == "energy"


def test_serving_sweep_rows_carry_token_prices_and_energy() -> None:
    model = get_model("llama-3-8b")
    space = ServingSearch(accelerators=("h100-sxm-80gb", "h200-sxm-141gb"), tp=(1, 2), pp=(1,))
    work = ServingWorkload(512, 128, ttft_target_s=1.0, tpot_target_s=0.05, objective="energy")
    rows = [r for r in sweep_serving(model, work, space).rows if r["ok"]]
    joules = [r["j_per_output_token"] for r in rows]
    assert joules == sorted(joules)
    for r in rows:
        total = r["usd_per_1m_input_tokens"] * 512 / 128 + r["usd_per_1m_output_tokens_decode"]
        assert total == pytest.approx(r["usd_per_1m_output_tokens"], rel=0.02)
        assert r["output_tokens_per_s_per_mw"] * r["j_per_output_token"] == pytest.approx(1e6)
        assert r["usd_per_1m_blended_tokens"] is not None
    with pytest.raises(ValueError, match="objective"):
        ServingWorkload(512, 128, objective="speed")


def test_cli_shows_energy_and_the_reason_without_it(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "--model", "llama-3-8b", "--gpus", "64", "--tp", "1", "--pp", "1"]
    argv += ["--seq-len", "4096", "--global-batch-size", "256", "--tokens", "1e12"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdin", io.StringIO(""))
        assert main([*argv, "--accelerator", "h100-sxm-80gb", "--capex", "25000"]) == 0
        assert main([*argv, "--accelerator", "tpu-v5p"]) == 0
    out = capsys.readouterr().out
    assert "MWh for the run" in out and "owned $0.68" in out
    assert "energy: none (Google publishes no power figure" in out
    assert not math.isnan(default("pue"))
