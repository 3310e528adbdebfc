"""Property-based fuzzing of the REST API from its own OpenAPI schema (schemathesis): generated
requests, valid and invalid, to every operation, under every check schemathesis has (server
errors, response schema, status codes, content types, headers, negative data refused,
unsupported methods answered 405 with ``Allow``, ...). Schemathesis' own positive-data check
expects every schema-valid request to be accepted; a planner must refuse some plans the schema
cannot describe (``tp=3`` with 64 heads), so it is replaced by a stricter reading of the same
idea: a schema-valid request may only be refused as ``invalid_plan`` (a rule of the model,
layout or framework), never as ``invalid_request`` (the shape the schema describes).

Bounded: ``FUZZ_EXAMPLES`` cases per operation (default 300; ``FUZZ_EXAMPLES=1000`` for a longer
run), no shrinking deadline. Sweeps answer in bounded time because the request bounds keep every
space under the API's layout limit and the sweep cache absorbs repeats.
"""

from __future__ import annotations

import os
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import positive_data_acceptance

from app.main import app
from app.service.isolated import STARTUP_S
from app.settings import current

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
# The client waits longer than the server's own bound on its slowest answer, an exact tree (its
# child's start-up, importing torch and transformers: ~10 s on two idle cores, then its
# deadline), so a slow answer is judged by what the server does at its limit, not cut short by
# schemathesis' default 10 s read timeout; a hang still fails.
CLIENT_TIMEOUT_S = STARTUP_S + current().exact_timeout_s + 30


@schemathesis.check
def refused_only_as_a_plan(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
    """A request the schema accepts is answered, or refused for what it plans (422
    ``invalid_plan``), never for its shape (422 ``invalid_request``)."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 422:
        return None
    error = response.json().get("error")
    if error != "invalid_plan":
        raise AssertionError(f"a schema-valid request was refused as {error}: {response.text}")
    return None


schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)
def test_no_server_error_and_schema_holds(case: schemathesis.Case) -> None:
    case.call_and_validate(
        excluded_checks=[positive_data_acceptance],
        additional_checks=[refused_only_as_a_plan],
        timeout=CLIENT_TIMEOUT_S,
    )


# --- plans the schema fuzzer rarely reaches: catalog ids with random layouts and configs ------

from fastapi.testclient import TestClient  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from app.schemas.inference import InferenceEstimateOut  # noqa: E402
from app.schemas.sweep import TrainingSweepOut  # noqa: E402
from app.schemas.training import TrainingEstimateOut  # noqa: E402
from estimator import PRESETS, accelerator_ids, model_entry, model_ids  # noqa: E402

client = TestClient(app)
SIZES = st.sampled_from([1, 2, 3, 4, 8, 16, 64, 1024])
BOUNDED = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True
)


def _answered(response: object, model: type) -> None:
    status = response.status_code  # type: ignore[attr-defined]
    assert status in (200, 404, 422), response.text  # type: ignore[attr-defined]
    if status == 200:
        model.model_validate(response.json())  # type: ignore[attr-defined]


@BOUNDED
@given(
    model=st.sampled_from(model_ids()),
    accelerator=st.sampled_from(accelerator_ids()),
    layout=st.fixed_dictionaries(
        {},
        optional={
            "tp": SIZES,
            "pp": SIZES,
            "dp": SIZES,
            "cp": SIZES,
            "ep": SIZES,
            "vp": SIZES,
            "etp": SIZES,
            "zero_stage": st.sampled_from([0, 1, 2, 3]),
            "sequence_parallel": st.booleans(),
            "distributed_optimizer": st.booleans(),
        },
    ),
    extra=st.fixed_dictionaries(
        {},
        optional={
            "seq_len": st.sampled_from([1, 7, 2048, 4096, 131072]),
            "micro_batch_size": st.sampled_from([1, 2, 3, 16]),
            "global_batch_size": st.sampled_from([1, 64, 1000, 4096]),
            "recompute": st.sampled_from(["none", "selective", "full"]),
            "precision": st.sampled_from(list(PRESETS)),
            "optimizer": st.sampled_from(["adamw", "adam8bit", "sgd", "adafactor"]),
            "flash_attention": st.booleans(),
            "attention_kernel": st.sampled_from(["fused", "flash2"]),
            "activation_convention": st.sampled_from(["megatron", "hf"]),
            "tokens": st.sampled_from([1.0, 1e12]),
            "gpus_per_node": st.sampled_from([1, 4, 8, 72]),
            "measured_mfu": st.sampled_from([1e-6, 0.4, 1.0]),
        },
    ),
)
def test_training_plans_never_fail(
    model: str, accelerator: str, layout: dict[str, object], extra: dict[str, object]
) -> None:
    body = {"model": model, "accelerator": accelerator, "layout": layout, **extra}
    _answered(client.post("/api/v1/training/estimate", json=body), TrainingEstimateOut)


@BOUNDED
@given(
    model=st.sampled_from(model_ids()),
    accelerator=st.sampled_from(accelerator_ids()),
    tp=SIZES,
    pp=SIZES,
    ep=SIZES,
    precision=st.sampled_from(list(PRESETS)),
    lengths=st.tuples(st.sampled_from([1, 100, 4096]), st.sampled_from([0, 1, 512])),
    concurrency=st.sampled_from([1, 7, 256, 100_000]),
    targets=st.sampled_from([{}, {"ttft_target_s": 0.5, "tpot_target_s": 0.05}]),
    speculation=st.sampled_from(
        [
            {},
            {"prefix_cache_hit_rate": 0.9},
            {"speculative_method": "mtp", "num_speculative_tokens": 2, "acceptance_length": 2.0},
            {"speculative_method": "eagle3", "num_speculative_tokens": 4, "acceptance_length": 5},
            {
                "speculative_method": "draft",
                "draft_model": "llama-3.2-1b",
                "num_speculative_tokens": 1,
                "acceptance_length": 1.5,
                "prefix_cache_hit_rate": 1.0,
            },
        ]
    ),
)
def test_serving_plans_never_fail(
    model: str,
    accelerator: str,
    tp: int,
    pp: int,
    ep: int,
    precision: str,
    lengths: tuple[int, int],
    concurrency: int,
    targets: dict[str, float],
    speculation: dict[str, object],
) -> None:
    body = {
        "model": model,
        "accelerator": accelerator,
        "layout": {"tp": tp, "pp": pp, "ep": ep},
        "precision": precision,
        "input_len": lengths[0],
        "output_len": lengths[1],
        "concurrency": concurrency,
        **targets,
        **speculation,
    }
    _answered(client.post("/api/v1/inference/estimate", json=body), InferenceEstimateOut)


CONFIG_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "head_dim",
    "max_position_embeddings",
    "num_local_experts",
    "num_experts_per_tok",
    "sliding_window",
    "tie_word_embeddings",
    "layer_types",
)
HOSTILE = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 3, 7, 2**24 + 1, 1.5, "8", None, True, [], {}]),
    st.lists(st.sampled_from(["full_attention", "sliding_attention", 3]), max_size=4),
)


@BOUNDED
@given(
    base=st.sampled_from(model_ids()),
    changes=st.dictionaries(st.sampled_from(CONFIG_KEYS), HOSTILE, max_size=4),
    tp=st.sampled_from([1, 2, 8]),
)
def test_pasted_configs_never_fail(base: str, changes: dict[str, object], tp: int) -> None:
    config = {**model_entry(base)["config"], **changes}
    body = {"model": config, "layout": {"tp": tp}, "seq_len": 1024}
    _answered(client.post("/api/v1/training/estimate", json=body), TrainingEstimateOut)
    _answered(
        client.post("/api/v1/inference/estimate", json={"model": config, "input_len": 512}),
        InferenceEstimateOut,
    )


@settings(
    max_examples=max(EXAMPLES // 10, 10), deadline=None, suppress_health_check=list(HealthCheck)
)
@given(
    model=st.sampled_from(model_ids()),
    accelerator=st.lists(st.sampled_from(accelerator_ids()), min_size=1, max_size=3),
    num_gpus=st.lists(st.sampled_from([1, 8, 12, 64, 512]), min_size=1, max_size=3),
    tp=st.lists(SIZES, min_size=1, max_size=3),
    pp=st.lists(SIZES, min_size=1, max_size=3),
    zero=st.lists(st.sampled_from([0, 1, 2, 3]), min_size=1, max_size=4),
    tokens=st.sampled_from([None, 1e12]),
    deadline=st.sampled_from([None, 1.0, 1e7]),
)
def test_small_sweeps_never_fail(
    model: str,
    accelerator: list[str],
    num_gpus: list[int],
    tp: list[int],
    pp: list[int],
    zero: list[int],
    tokens: float | None,
    deadline: float | None,
) -> None:
    body: dict[str, object] = {
        "model": model,
        "accelerator": accelerator,
        "num_gpus": num_gpus,
        "layout": {"tp": tp, "pp": pp, "zero_stage": zero},
        "tokens": tokens,
    }
    if deadline is not None and tokens is not None:
        body["deadline_s"] = deadline
    _answered(client.post("/api/v1/training/sweep", json=body), TrainingSweepOut)
