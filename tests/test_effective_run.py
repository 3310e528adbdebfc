"""The effective wall-clock of a training run (``estimator.timing.effective``): the first-order
checkpoint/restart model against its closed forms and against published long runs."""

from __future__ import annotations

import math

import pytest

from estimator.errors import SpecError
from estimator.timing.effective import (
    INTERRUPTIONS_PER_GPU_HOUR,
    RESTART_S,
    Reliability,
    checkpoint_bytes,
    effective_run,
    optimal_interval_s,
)

DAY_S = 86_400.0

# Llama 3 405B (arXiv:2407.21783, section 3.3): 16,384 H100s, 466 interruptions (419 unexpected)
# in a 54-day snapshot, "higher than 90% effective training time"; Tectonic sustains 2 TB/s.
LLAMA3_GPUS = 16_384
LLAMA3_DAYS = 54
LLAMA3_CHECKPOINT = checkpoint_bytes(405e9, 405e9, 2, 4 + 8)  # bf16 weights, fp32 master, AdamW


def test_checkpoint_bytes_counts_weights_and_trained_state() -> None:
    assert checkpoint_bytes(70e9, 70e9, 2, 12) == 70e9 * 14
    # LoRA: the frozen base in its weight format, the adapters' state only
    assert checkpoint_bytes(8e9, 40e6, 2, 12) == 8e9 * 2 + 40e6 * 12


def test_daly_interval_is_the_minimum_of_the_wall_clock() -> None:
    """The interval the module uses minimizes its own wall-clock formula (checked on a grid)."""
    blocking, mtbf, restart = 30.0, 3 * 3600.0, 600.0

    def wall(t: float) -> float:
        return (1 + blocking / t) / (1 - (restart + (t + blocking) / 2) / mtbf)

    best = optimal_interval_s(blocking, mtbf, restart)
    # Daly's first-order form, to the few percent R / M moves it
    assert best == pytest.approx(math.sqrt(2 * blocking * mtbf) - blocking, rel=0.05)
    grid = [best * f for f in (0.5, 0.8, 0.95, 1.05, 1.25, 2.0)]
    assert all(wall(best) <= wall(t) for t in grid)
    assert optimal_interval_s(mtbf, mtbf) <= mtbf  # never more than one save per M
    assert optimal_interval_s(0.0, mtbf) == 0.0


def test_llama3_405b_effective_time_matches_the_published_goodput() -> None:
    """Llama 3's snapshot at its measured rate (the default's source) and its storage: the
    expected interruptions come back (in-sample for the rate) and the effective fraction lands
    above the reported 90%, synchronous saves or not."""
    wall_s = LLAMA3_DAYS * DAY_S
    for sync in (True, False):
        r = Reliability(async_checkpoint=not sync)
        guess = effective_run(wall_s * 0.92, LLAMA3_GPUS, LLAMA3_CHECKPOINT, 55.0, r)
        assert 0.90 < guess.effective_time_fraction < 0.97
        assert guess.expected_interruptions == pytest.approx(419, rel=0.06)
    assert pytest.approx(419) == INTERRUPTIONS_PER_GPU_HOUR * LLAMA3_GPUS * LLAMA3_DAYS * 24


def test_opt_175b_saw_more_interruptions_than_the_default_rate() -> None:
    """OPT-175B (arXiv:2205.01068 and its logbook): about two months on 992 A100s, 35 manual and
    more than 70 automatic restarts. The default rate predicts about a quarter of that; the
    module's notes say older clusters failed about 3.7x as often. Pinned so a changed default
    is seen against both runs."""
    hours = 60 * 24
    predicted = INTERRUPTIONS_PER_GPU_HOUR * 992 * hours
    assert 0.2 < predicted / 105 < 0.35
    stated = Reliability(interruptions_per_gpu_hour=105 / (992 * hours))
    run = effective_run(50 * DAY_S, 992, checkpoint_bytes(175e9, 175e9, 2, 12), 31.5, stated)
    assert run.expected_interruptions == pytest.approx(105 * run.effective_time_s / (60 * DAY_S))


def test_a_typical_70b_run_and_its_parts() -> None:
    state = checkpoint_bytes(70e9, 70e9, 2, 12)
    run = effective_run(40 * DAY_S, 512, state, 55.0, usd_per_gpu_hour=2.0, step_s=8.0)
    assert 0.98 < run.effective_time_fraction < 1
    assert run.effective_time_s == pytest.approx(run.ideal_time_s / run.effective_time_fraction)
    assert run.effective_gpu_hours == pytest.approx(run.effective_time_s * 512 / 3600)
    assert run.effective_cost_usd == pytest.approx(run.effective_gpu_hours * 2.0)
    assert run.checkpoint_storage_bytes == 2 * state
    assert run.checkpoint_blocking_s < run.checkpoint_write_s  # async: the host copy only
    assert run.checkpoint_interval_s >= max(run.checkpoint_write_s, 8.0)
    lost = run.checkpoint_overhead_fraction + run.failure_overhead_fraction
    assert lost == pytest.approx(1 - run.effective_time_fraction, rel=0.05)
    assert any("(the optimum)" in n for n in run.notes)


def test_knobs_move_the_answer_the_right_way() -> None:
    state = checkpoint_bytes(70e9, 70e9, 2, 12)
    base = effective_run(30 * DAY_S, 2048, state, 55.0)
    slower = effective_run(30 * DAY_S, 2048, state, 55.0, Reliability(restart_s=4 * RESTART_S))
    flaky = effective_run(
        30 * DAY_S, 2048, state, 55.0, Reliability(interruptions_per_gpu_hour=1e-4)
    )
    sync = effective_run(30 * DAY_S, 2048, state, 55.0, Reliability(async_checkpoint=False))
    hourly = effective_run(30 * DAY_S, 2048, state, 55.0, Reliability(checkpoint_interval_s=3600))
    for worse in (slower, flaky, sync, hourly):
        assert worse.effective_time_fraction < base.effective_time_fraction
    spares = effective_run(30 * DAY_S, 2048, state, 55.0, Reliability(spare_gpus=16))
    assert spares.effective_time_s == base.effective_time_s
    assert spares.effective_gpu_hours == pytest.approx(base.effective_gpu_hours * 2064 / 2048)


def test_a_run_that_cannot_progress_is_refused_with_the_reason() -> None:
    flaky = Reliability(interruptions_per_gpu_hour=1e-3, restart_s=3600)
    with pytest.raises(SpecError) as err:
        effective_run(DAY_S, 16_384, LLAMA3_CHECKPOINT, 55.0, flaky)
    assert err.value.field == "reliability"
    assert "never" in err.value.rule and "finishes" in err.value.rule


def test_a_plans_checkpoint_is_its_weights_and_trained_state() -> None:
    from estimator import TrainingSetup, count_params, get_model, get_precision
    from estimator.finetune import FineTune, adapters
    from estimator.timing.effective import checkpoint_of

    model, bf16 = get_model("llama-3-8b"), get_precision("bf16")
    total = count_params(model).total
    assert checkpoint_of(model, bf16, TrainingSetup(seq_len=4096)) == total * (2 + 4 + 8)
    lora = FineTune(method="lora")
    trained = adapters(model, lora).trainable_params
    with_lora = checkpoint_of(model, bf16, TrainingSetup(seq_len=4096, finetune=lora))
    assert with_lora == total * 2 + trained * (2 + 4 + 8)


def test_the_array_form_is_the_scalar_one() -> None:
    """The sweep's ``effective_fraction`` over arrays of layouts equals ``effective_run``'s
    fraction for each."""
    import numpy as np

    from estimator.timing.effective import effective_fraction

    gpus = np.array([64, 512, 4096, 16_384])
    steps = np.array([20.0, 6.0, 2.0, 0.5])
    state = checkpoint_bytes(70e9, 70e9, 2, 12)
    for r in (Reliability(), Reliability(async_checkpoint=False), Reliability(restart_s=1800)):
        got = effective_fraction(gpus, state, 55.0, r, steps)
        for i, n in enumerate(gpus):
            one = effective_run(1e6, int(n), state, 55.0, r, step_s=float(steps[i]))
            assert got[i] == pytest.approx(one.effective_time_fraction, rel=1e-12)


def test_the_api_and_the_sweep_judge_deadlines_on_the_effective_run() -> None:
    from fastapi.testclient import TestClient

    from app.main import app

    client = TestClient(app, base_url="http://localhost")
    plan = {"model": "llama-3-8b", "num_gpus": 64, "tokens": 2e11}
    one = client.post("/api/v1/training/estimate", json=plan).json()
    ideal = one["cost"]["time_to_train_s"]
    assert one["effective"]["effective_time_to_train_s"] > ideal
    assert one["jobs"] and one["jobs"][0]["stack"] == "megatron"
    flaky = {"interruptions_per_gpu_hour": 5e-3, "restart_s": 1200}
    worse = client.post("/api/v1/training/estimate", json=plan | flaky).json()["effective"]
    assert worse["effective_time_fraction"] < one["effective"]["effective_time_fraction"]
    bad = client.post("/api/v1/training/estimate", json=plan | {"restart_s": -1})
    assert bad.status_code == 422 and "restart_s" in bad.text
    sweep = {
        "model": "llama-3-8b", "accelerator": ["h100-sxm-80gb"], "num_gpus": [64],
        "tokens": 2e11, "deadline_s": ideal * 1.05,
    }  # fmt: skip
    calm = client.post("/api/v1/training/sweep", json=sweep).json()["counts"]
    rough = client.post("/api/v1/training/sweep", json=sweep | flaky).json()["counts"]
    assert rough["past_deadline"] > calm["past_deadline"]
    assert rough["evaluated"] == calm["evaluated"]


def test_the_cli_says_the_effective_run_and_the_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_cli import run

    argv = ("train", "--model", "llama-3-8b", "--gpus", "64", "--tokens", "2e11")
    code, out, _ = run(capsys, *argv, "--restart-s", "3600")
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("effective "))
    assert "days" in line and "interruptions" in line and "checkpoint every" in line
    assert "jobs: megatron 0.20.0 (megatron.sbatch)" in out
    assert "(of the bf16 peak)" in out
