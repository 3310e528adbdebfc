"""Saved plans: save any training, serving or sweep request with a name, description and tags;
list and search, open (re-evaluated with the current estimator, with what changed since it was
saved), edit, duplicate, delete. Writes need the bearer token when one is configured and are
refused in read-only mode."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from threading import Lock
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

import estimator
from app.answers import json_response, serving_sweep_out, training_sweep_out
from app.resolve import run_inference, run_serving_sweep, run_training, run_training_sweep
from app.schemas.common import ERROR_RESPONSES, ErrorResponse
from app.schemas.common import Request as StrictRequest
from app.schemas.inference import InferenceRequest
from app.schemas.sweep import ServingSweepRequest, TrainingSweepRequest
from app.schemas.training import TrainingRequest
from app.service.errors import field_path
from app.service.guards import WriteRate
from app.settings import Settings
from app.store import catalog as team
from app.store.plans import MissingTeamEntry, PlanStore
from app.store.team import TeamStore
from estimator.errors import SpecError, UnknownIdError

__all__ = [
    "KINDS",
    "PLAN_CREATE",
    "WRITE_RESPONSES",
    "bind_team",
    "duplicate",
    "fitted",
    "headline",
    "json_size",
    "open_saved",
    "open_store",
    "reduced",
    "refusal_text",
    "reopened",
    "router",
    "save_plan",
    "team_uses",
    "too_big",
    "update_plan",
    "write_refusal",
    "writer",
]

WRITE_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "A token is configured and was not sent"},
    403: {
        "model": ErrorResponse,
        "description": "The service is read-only, or a browser sent the write from another site",
    },
    409: {"model": ErrorResponse, "description": "A team entry the plan uses was deleted"},
    429: {
        "model": ErrorResponse,
        "description": "Too many writes from this client (PLANNER_WRITES_PER_MINUTE)",
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    },
}
router = APIRouter(
    prefix="/plans", tags=["plans"], responses={**ERROR_RESPONSES, **WRITE_RESPONSES}
)

Name = Annotated[str, Field(min_length=1, max_length=200)]
Tag = Annotated[str, Field(min_length=1, max_length=50)]


class _PlanFields(StrictRequest):
    name: Name
    description: str = Field("", max_length=10_000)
    tags: list[Tag] = Field(default_factory=list, max_length=20)

    def request_body(self) -> dict[str, Any]:
        """The request as it was sent (fields left out stay left out)."""
        request: BaseModel = getattr(self, "request")  # noqa: B009 (each kind declares it)
        return request.model_dump(mode="json", exclude_unset=True)


class TrainingPlanIn(_PlanFields):
    kind: Literal["training"]
    request: TrainingRequest = Field(description="A POST /training/estimate body")


class ServingPlanIn(_PlanFields):
    kind: Literal["inference"]
    request: InferenceRequest = Field(description="A POST /inference/estimate body")


class TrainingSweepPlanIn(_PlanFields):
    kind: Literal["training_sweep"]
    request: TrainingSweepRequest = Field(description="A POST /training/sweep body")


class ServingSweepPlanIn(_PlanFields):
    kind: Literal["inference_sweep"]
    request: ServingSweepRequest = Field(description="A POST /inference/sweep body")


# A plan to save: its kind decides the shape of its request (a tagged union, so the schema says
# which request goes with which kind).
PlanCreate = Annotated[
    TrainingPlanIn | ServingPlanIn | TrainingSweepPlanIn | ServingSweepPlanIn,
    Field(discriminator="kind"),
]
PLAN_CREATE: TypeAdapter[Any] = TypeAdapter(PlanCreate)
AnyPlanRequest = TrainingRequest | InferenceRequest | TrainingSweepRequest | ServingSweepRequest


class PlanUpdate(StrictRequest):
    name: Name | None = None
    description: str | None = Field(None, max_length=10_000)
    tags: list[Tag] | None = Field(None, max_length=20)
    request: AnyPlanRequest | None = Field(
        None, description="A request of the plan's own kind (its endpoint's body)"
    )

    def changes(self) -> dict[str, Any]:
        """The fields given, the request as it was sent."""
        out: dict[str, Any] = self.model_dump(exclude_none=True, exclude={"request"})
        if self.request is not None:
            out["request"] = self.request.model_dump(mode="json", exclude_unset=True)
        return out


class PlanOut(BaseModel):
    id: str
    name: str
    description: str
    tags: list[str]
    kind: str
    request: dict[str, Any]
    saved_result: dict[str, Any] = Field(description="Headline numbers when it was saved")
    estimator_version: str
    revision: int
    created_at: str
    updated_at: str


class PlanOpened(PlanOut):
    current_result: dict[str, Any] | None = Field(
        description="Headline numbers now (null where it cannot be re-evaluated now)"
    )
    current_version: str
    changed: dict[str, dict[str, Any]] = Field(
        description="Numbers that differ from the saved ones: {name: {saved, now}}"
    )
    current_error: str | None = Field(
        None, description="Why the plan cannot be re-evaluated now (a rule added since)"
    )


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


# Each kind: its request model and the headline numbers kept when a plan is saved.
KINDS: dict[str, tuple[type[BaseModel], Callable[[Any], dict[str, Any]]]] = {
    "training": (TrainingRequest, _training),
    "inference": (InferenceRequest, _inference),
    "training_sweep": (TrainingSweepRequest, _training_sweep),
    "inference_sweep": (ServingSweepRequest, _serving_sweep),
}


def headline(kind: str, request: dict[str, Any]) -> dict[str, Any]:
    """Validate ``request`` as the kind's request, evaluate it and keep the numbers a reader
    compares; raises (422/404) before anything is stored."""
    model, numbers = KINDS[kind]
    try:
        req = model.model_validate(request)
    except ValidationError as exc:  # reported like any body error, under "request."
        errors = [{**e, "loc": ("body", "request", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from None
    return numbers(req)


_OPENING = Lock()


def open_store(app: Any) -> PlanStore:
    """The app's plan store, opened and migrated once: at start-up by the lifespan, or on
    first use where the lifespan did not run (an app driven without it, as in tests)."""
    state = app.state
    if getattr(state, "store", None) is None:
        with _OPENING:
            if getattr(state, "store", None) is None:
                state.settings = Settings.from_env()
                store = PlanStore(state.settings.database_url)
                state.team = TeamStore(store.engine)
                state.store = store
    opened: PlanStore = state.store
    return opened


def bind_team_of(request: Request) -> None:
    """Resolve team catalog ids from this app's store for the rest of the request, in the
    context it runs in (the request's own, for an async route or dependency; the lanes and the
    threads of sync routes copy it)."""
    open_store(request.app)
    team.bind(request.app.state.team)


async def bind_team(request: Request) -> None:
    """``bind_team_of`` as a router dependency of the API and the pages. Async, so the binding
    is made in the request's own context."""
    bind_team_of(request)


def _store(request: Request) -> PlanStore:
    return open_store(request.app)


def write_refusal(request: Request, token: str | None) -> HTTPException | None:
    """Why a write with ``token`` is refused (a read-only service, a token configured and not
    given, too many writes from this client), or None where it may go ahead. The API reads the
    token from the Authorization header, the pages from their forms."""
    open_store(request.app)
    cfg: Settings = request.app.state.settings
    if cfg.read_only:
        return HTTPException(403, "the service is read-only (PLANNER_READ_ONLY)")
    if cfg.api_token is not None and not secrets.compare_digest(
        (token or "").encode(), cfg.api_token.encode()
    ):
        return HTTPException(401, "writes need 'Authorization: Bearer <PLANNER_API_TOKEN>'")
    rate: WriteRate | None = getattr(request.app.state, "write_rate", None)
    client = request.client.host if request.client else "unknown"
    wait = rate.wait_s(client) if rate is not None else 0.0
    if wait > 0:
        return HTTPException(
            429,
            f"more than {cfg.writes_per_minute} writes a minute from {client} "
            "(PLANNER_WRITES_PER_MINUTE); retry later",
            headers={"Retry-After": WriteRate.retry_after(wait)},
        )
    return None


def writer(request: Request) -> PlanStore:
    """The store, for a request allowed to write (a dependency)."""
    sent = request.headers.get("authorization", "")
    token = sent.removeprefix("Bearer ") if sent.startswith("Bearer ") else None
    refusal = write_refusal(request, token)
    if refusal is not None:
        raise refusal
    return _store(request)


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
    store: PlanStore, plan: dict[str, Any], changes: dict[str, Any], max_bytes: int
) -> dict[str, Any]:
    """Apply ``changes`` (name, description, tags, request) to a stored ``plan``, a new request
    evaluated first, the result within the size cap."""
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
        return _found(store.update(plan["id"], uses=uses, **changes), plan["id"])
    except MissingTeamEntry:
        raise HTTPException(409, "a team entry this plan uses was deleted meanwhile") from None


def open_saved(plan: dict[str, Any]) -> dict[str, Any]:
    """A saved plan re-evaluated with the current estimator: the numbers now and those that
    differ from the saved ones. Raises (422/404) where it cannot be re-evaluated."""
    now = headline(plan["kind"], plan["request"])
    saved = plan["saved_result"]
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


def refusal_text(exc: Exception) -> str:
    """A refusal of the core, of validation or of the store as one line a reader can act on."""
    if isinstance(exc, RequestValidationError | ValidationError):
        parts = [f"{field_path(tuple(e['loc']))}: {e['msg']}" for e in list(exc.errors())[:5]]
        return "; ".join(parts)
    if isinstance(exc, HTTPException):
        detail = exc.detail
        return str(detail.get("message", detail)) if isinstance(detail, dict) else str(detail)
    if isinstance(exc, UnknownIdError):
        return f"unknown {exc.kind} id {exc.ident!r} (not in the public or the team catalog)"
    if isinstance(exc, SpecError):
        return f"{exc.field}: {exc.rule}"
    return str(exc)


def _found(plan: dict[str, Any] | None, plan_id: str) -> dict[str, Any]:
    if plan is None:
        raise HTTPException(404, f"no saved plan {plan_id!r}")
    return plan


def _max_bytes(request: Request) -> int:
    cap: int = request.app.state.settings.max_plan_bytes
    return cap


@router.post("", response_model=PlanOut, status_code=201)
def create_plan(
    body: PlanCreate, request: Request, store: Annotated[PlanStore, Depends(writer)]
) -> Response:
    """Save a plan: its request is validated and evaluated first; nothing is stored if it
    cannot be."""
    plan = save_plan(
        store,
        body.name,
        body.description,
        body.tags,
        body.kind,
        body.request_body(),
        _max_bytes(request),
    )
    response = json_response(plan)
    response.status_code = 201
    return response


@router.get("", response_model=list[PlanOut])
def list_plans(
    store: Annotated[PlanStore, Depends(_store)],
    q: Annotated[str, Query(max_length=200, description="Search names and descriptions")] = "",
    tag: Annotated[str, Query(max_length=50)] = "",
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**6)] = 0,
) -> Response:
    return json_response(store.list(q, tag, limit, offset))


@router.get("/{plan_id}", response_model=PlanOpened)
def open_plan(plan_id: str, store: Annotated[PlanStore, Depends(_store)]) -> Response:
    """The saved plan, re-evaluated with the current estimator, and what changed; where it
    cannot be re-evaluated now, the plan as saved and why (``current_error``)."""
    return json_response(reopened(_found(store.get(plan_id), plan_id)))


@router.patch("/{plan_id}", response_model=PlanOut)
def edit_plan(
    plan_id: str,
    body: PlanUpdate,
    request: Request,
    store: Annotated[PlanStore, Depends(writer)],
) -> Response:
    plan = _found(store.get(plan_id), plan_id)
    return json_response(update_plan(store, plan, body.changes(), _max_bytes(request)))


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


@router.post("/{plan_id}/duplicate", response_model=PlanOut, status_code=201)
def duplicate_plan(
    plan_id: str, request: Request, store: Annotated[PlanStore, Depends(writer)]
) -> Response:
    plan = _found(store.get(plan_id), plan_id)
    response = json_response(duplicate(store, plan, _max_bytes(request)))
    response.status_code = 201
    return response


@router.delete("/{plan_id}", status_code=204)
def delete_plan(plan_id: str, store: Annotated[PlanStore, Depends(writer)]) -> Response:
    if not store.delete(plan_id):
        raise HTTPException(404, f"no saved plan {plan_id!r}")
    return Response(status_code=204)
