"""The rules a plan is saved under, whichever door it comes in by (the API, the pages' forms,
the CLI): its request is validated and evaluated first and its headline numbers kept; it is
stored within the size cap (a pasted config over it is kept as the keys the reader uses); the
team entries it uses are indexed so they cannot be deleted under it; opened later, it is
re-evaluated with the current estimator, or kept as saved with why it cannot be."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

import estimator
from app import hub
from app.answers import serving_sweep_out, training_sweep_out
from app.resolve import run_inference, run_serving_sweep, run_training, run_training_sweep
from app.schemas.inference import InferenceRequest
from app.schemas.sweep import ServingSweepRequest, TrainingSweepRequest
from app.schemas.training import TrainingRequest
from app.service.errors import ShapeError, refusal_text
from app.store import catalog as team
from app.store.plans import MissingTeamEntry, PlanStore, StaleRevision
from estimator.errors import SpecError, UnknownIdError

__all__ = [
    "KINDS",
    "MEANING_CHANGES",
    "MODEL_SOURCE",
    "duplicate",
    "fitted",
    "found",
    "headline",
    "json_size",
    "open_saved",
    "reduced",
    "reopened",
    "save_plan",
    "team_uses",
    "too_big",
    "update_plan",
]


def _training(req: TrainingRequest) -> dict[str, Any]:
    _, e = run_training(req)
    return {
        "memory_per_gpu_bytes": e.memory.total_bytes,
        "fits": e.memory.fits,
        "step_s": e.time.step_s,
        "tokens_per_s": e.tokens_per_s,
        "mfu": e.mfu,
        "cost_usd": e.cost_usd,
        "usd_per_1m_tokens": e.usd_per_1m_tokens,
    }


def _inference(req: InferenceRequest) -> dict[str, Any]:
    _, i = run_inference(req)
    return {
        "memory_per_gpu_bytes": i.memory.total_bytes,
        "fits": i.memory.fits,
        "ttft_s": i.ttft_s,
        "tpot_s": i.tpot_s,
        "output_tokens_per_s": i.output_tokens_per_s,
        "usd_per_1m_output_tokens": i.usd_per_1m_output_tokens,
    }


def _training_sweep(req: TrainingSweepRequest) -> dict[str, Any]:
    out = training_sweep_out(run_training_sweep(req), req)
    best = out.recommendations[0].row if out.recommendations else None
    return {
        "feasible": out.counts.feasible,
        "best_tokens_per_s": best.tokens_per_s if best else None,
        "best_usd_per_1m_tokens": best.usd_per_1m_tokens if best else None,
    }


def _serving_sweep(req: ServingSweepRequest) -> dict[str, Any]:
    out = serving_sweep_out(run_serving_sweep(req), req)
    cheapest = out.rows[0] if out.rows else None
    return {
        "ok": out.counts.get("ok", 0),
        "cheapest_usd_per_1m_output_tokens": cheapest.usd_per_1m_output_tokens
        if cheapest
        else None,
    }


# The saved result's record of a model fetched by its Hugging Face id: commit, endpoint and the
# config's keys the reader uses (``hub.HubModel.snapshot``), never a token.
MODEL_SOURCE = "model_source"

# Headline numbers whose meaning changed, and how: a saved plan's page says it beside a number
# that moved (CHANGELOG; docs/api.md, "Changes").
MEANING_CHANGES: dict[str, str] = {
    "output_tokens_per_s": "Since 2026-12-01 a serving plan's throughput is at the load its"
    " latencies are at (the load model at the concurrency or request rate asked for); it was a"
    " batched-prefill cycle at the concurrency before.",
    "usd_per_1m_output_tokens": "Since 2026-12-01 a serving plan's cost per token is at the load"
    " its latencies are at (a partly idle replica pays for its idle capacity); it was the"
    " cycle's at the concurrency before.",
}

# Each kind: its request model and the headline numbers kept when a plan is saved.
KINDS: dict[str, tuple[type[BaseModel], Callable[[Any], dict[str, Any]]]] = {
    "training": (TrainingRequest, _training),
    "inference": (InferenceRequest, _inference),
    "training_sweep": (TrainingSweepRequest, _training_sweep),
    "inference_sweep": (ServingSweepRequest, _serving_sweep),
}


def headline(
    kind: str, request: dict[str, Any], snapshot: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Validate ``request`` as the kind's request, evaluate it and keep the numbers a reader
    compares; raises (422/404) before anything is stored. A model named by a Hugging Face id is
    read from ``snapshot`` where one is given (a saved plan's ``MODEL_SOURCE``), and a fetched
    one's snapshot is kept under ``MODEL_SOURCE``: the plan reopens with no fetch."""
    model, numbers = KINDS[kind]
    try:
        req = model.model_validate(request)
    except ValidationError as exc:  # reported like any body error, under "request."
        errors = [{**e, "loc": ("body", "request", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from None
    with hub.pinned(snapshot):
        out = numbers(req)
        source = snapshot or hub.snapshot_of(request.get("model"))
    return out if source is None else {**out, MODEL_SOURCE: source}


def team_uses(request: dict[str, Any]) -> dict[str, list[str]]:
    """The team catalog entries a request names: its model, its accelerator (or a sweep's
    list of accelerators), where those are team ids."""
    found = team.current()

    def named(key: str, ids: Any) -> list[str]:
        value = request.get(key)
        names = value if isinstance(value, list) else [value]
        return list(dict.fromkeys(n for n in names if isinstance(n, str) and n in ids))

    return {
        "models": named("model", found.models),
        "accelerators": named("accelerator", found.accelerators),
    }


def json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def too_big(what: str, field: str, size: int, max_bytes: int) -> HTTPException:
    """The 413 of a stored record over the size cap."""
    return HTTPException(
        413,
        detail={
            "message": f"{what} is at most {max_bytes:,} bytes of JSON (PLANNER_MAX_PLAN_BYTES); "
            f"this one is {size:,}",
            "detail": [
                {"field": field, "rule": f"at most {max_bytes:,} bytes of JSON", "value": size}
            ],
        },
    )


def reduced(config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A pasted config as the keys the reader uses (``estimator.used_config``: the same spec,
    so the same numbers) and the keys left out."""
    used = estimator.used_config(config)
    return used, sorted(set(config) - set(used))


def fitted(plan: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """``plan`` (its stored fields) within ``max_bytes`` of JSON. A pasted config that takes it
    over is kept as the keys the reader uses, those left out named in the plan's
    ``saved_result.dropped_config_keys``; a plan still over is refused (413)."""
    if json_size(plan) <= max_bytes:
        return plan
    request = plan["request"]
    model = request.get("model")
    if isinstance(model, dict):
        used, dropped = reduced(model)
        plan = {**plan, "request": {**request, "model": used}}
        plan["saved_result"] = {**plan["saved_result"], "dropped_config_keys": dropped[:50]}
        if json_size(plan) <= max_bytes:
            return plan
    raise too_big("a saved plan", "request", json_size(plan), max_bytes)


def _stored(store: PlanStore, max_bytes: int, **plan: Any) -> dict[str, Any]:
    """Create ``plan`` within the size cap, indexed by the team entries it uses."""
    plan = fitted(plan, max_bytes)
    try:
        return store.create(**plan, uses=team_uses(plan["request"]))
    except MissingTeamEntry:
        raise HTTPException(409, "a team entry this plan uses was deleted meanwhile") from None


def save_plan(
    store: PlanStore,
    name: str,
    description: str,
    tags: list[str],
    kind: str,
    request: dict[str, Any],
    max_bytes: int,
) -> dict[str, Any]:
    """Validate and evaluate ``request`` as a plan of ``kind``, then store it with its headline
    numbers and the estimator version; nothing is stored if it cannot be evaluated."""
    return _stored(
        store,
        max_bytes,
        name=name,
        description=description,
        tags=tags,
        kind=kind,
        request=request,
        saved_result=headline(kind, request),
        estimator_version=estimator.__version__,
    )


def update_plan(
    store: PlanStore,
    plan: dict[str, Any],
    changes: dict[str, Any],
    max_bytes: int,
    expected_revision: int | None = None,
) -> dict[str, Any]:
    """Apply ``changes`` (name, description, tags, request) to a stored ``plan``, a new request
    evaluated first, the result within the size cap; only at ``expected_revision`` where one
    is given (409 if the plan moved on)."""
    changes = {k: v for k, v in changes.items() if v is not None}
    if "request" in changes:
        try:
            changes["saved_result"] = headline(plan["kind"], changes["request"])
        except RequestValidationError as exc:  # a request, but one of another kind's shape
            first = refusal_text(exc)
            raise SpecError(
                "request", f"this is a {plan['kind']} plan and its request must fit: {first}"
            ) from None
        changes["estimator_version"] = estimator.__version__
    stored = {k: plan[k] for k in ("name", "description", "tags", "request", "saved_result")}
    merged = fitted({**stored, **changes}, max_bytes)
    changes = {k: merged[k] for k in changes}
    uses = team_uses(changes["request"]) if "request" in changes else None
    try:
        updated = store.update(
            plan["id"], uses=uses, expected_revision=expected_revision, **changes
        )
    except MissingTeamEntry:
        raise HTTPException(409, "a team entry this plan uses was deleted meanwhile") from None
    except StaleRevision as exc:
        raise HTTPException(409, str(exc), headers={"ETag": etag(exc.current)}) from None
    return found(updated, plan["id"])


def etag(revision: int) -> str:
    """A saved plan's entity tag: its revision, which every edit bumps."""
    return f'"{revision}"'


def revision_of(if_match: str | None) -> int | None:
    """The revision an ``If-Match`` header names (``"3"``, or ``*`` and absent for none);
    ShapeError naming the header for anything else."""
    if if_match is None or if_match.strip() == "*":
        return None
    text = if_match.strip().removeprefix("W/").strip('"')
    if not text.isdigit() or len(text) > 12:
        raise ShapeError("If-Match", 'must be a plan\'s ETag, as its GET answered ("3")')
    return int(text)


def open_saved(plan: dict[str, Any]) -> dict[str, Any]:
    """A saved plan re-evaluated with the current estimator: the numbers now and those that
    differ from the saved ones. Raises (422/404) where it cannot be re-evaluated."""
    saved = plan["saved_result"]
    now = headline(plan["kind"], plan["request"], saved.get(MODEL_SOURCE))
    changed = {k: {"saved": saved.get(k), "now": v} for k, v in now.items() if saved.get(k) != v}
    return {
        **plan,
        "current_result": now,
        "current_version": estimator.__version__,
        "changed": changed,
        "current_error": None,
    }


def reopened(plan: dict[str, Any]) -> dict[str, Any]:
    """``open_saved``, or the plan as saved with why it cannot be re-evaluated now (a rule the
    current estimator adds): a saved plan is never lost to a refusal."""
    try:
        return open_saved(plan)
    except (RequestValidationError, ValidationError, SpecError, UnknownIdError) as exc:
        return {
            **plan,
            "current_result": None,
            "current_version": estimator.__version__,
            "changed": {},
            "current_error": refusal_text(exc),
        }


def duplicate(store: PlanStore, plan: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """A copy of ``plan`` under "<name> (copy)", with the numbers and version it was saved with."""
    return _stored(
        store,
        max_bytes,
        name=f"{plan['name']} (copy)"[:200],
        description=plan["description"],
        tags=plan["tags"],
        kind=plan["kind"],
        request=plan["request"],
        saved_result=plan["saved_result"],
        estimator_version=plan["estimator_version"],
    )


def found(plan: dict[str, Any] | None, plan_id: str) -> dict[str, Any]:
    if plan is None:
        raise HTTPException(404, f"no saved plan {plan_id!r}")
    return plan
