"""Saved-plan pages: the list (search and tag filter), one plan at its stable share link
(``/plans/{id}``: its inputs, the numbers it was saved with against the numbers now, the
estimator versions, and forms to edit, duplicate and delete it), and two to four saved plans
side by side. Plans are saved from the planner pages' "Save this plan" form.

Every page has its ``?format=json`` twin (the API's answer); the forms post here and go
through the same validation, token and read-only rules as ``/api/v1/plans``. Refusals and
unknown ids are pages that say what went wrong, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, QueryParams

from app import format as fmt
from app.answers import inference_answer, training_answer
from app.api.team import create_team_entry
from app.deps import bind_team, open_store, settings_of, write_refusal
from app.schemas.inference import InferenceRequest
from app.schemas.plans import PLAN_CREATE, PlanUpdate
from app.schemas.team import TeamModelIn
from app.schemas.training import TrainingRequest
from app.service.errors import refusal_text
from app.service.guards import parse_json
from app.settings import current
from app.store.plans import PlanStore
from app.store.saving import (
    MEANING_CHANGES,
    MODEL_SOURCE,
    duplicate,
    reopened,
    save_plan,
    update_plan,
)
from app.web.forms import (
    SERVING_INPUTS,
    SERVING_SWEEP_INPUTS,
    SWEEP_INPUTS,
    TRAINING_INPUTS,
    Input,
    request_body,
)
from app.web.planners import (
    compare_figures,
    input_rows,
    page_query,
    plan_markdown,
    templates,
    write_access,
)
from estimator.errors import SpecError, UnknownIdError

__all__ = ["router"]

router = APIRouter(include_in_schema=False, dependencies=[Depends(bind_team)])

# kind -> the planner page that shows it, its extra query, and its inputs
PLANNERS: dict[str, tuple[str, dict[str, str], Sequence[Input]]] = {
    "training": ("/training", {}, TRAINING_INPUTS),
    "inference": ("/serving", {}, SERVING_INPUTS),
    "training_sweep": ("/sweep", {}, SWEEP_INPUTS),
    "inference_sweep": ("/sweep", {"mode": "serving"}, SERVING_SWEEP_INPUTS),
}
KIND_NAMES = {
    "training": "training plan",
    "inference": "serving plan",
    "training_sweep": "training sweep",
    "inference_sweep": "serving sweep",
}

# The saved-plan kinds a Markdown summary is written for: the request model and its answer.
ANSWERS: dict[str, tuple[type[BaseModel], Callable[[Any], dict[str, Any]]]] = {
    "training": (TrainingRequest, training_answer),
    "inference": (InferenceRequest, inference_answer),
}


_F = templates.env.filters  # the pages' display filters
# Headline numbers (``api.plans.headline``) by key: their label and how they are shown.
HEADLINES: dict[str, tuple[str, Callable[[Any], str]]] = {
    "memory_per_gpu_bytes": ("Memory per GPU", _F["gib"]),
    "fits": ("Fits", fmt.yes_no),
    "step_s": ("Step time", _F["seconds"]),
    "tokens_per_s": ("Tokens/s", _F["num"]),
    "mfu": ("MFU", _F["pct"]),
    "cost_usd": ("Cost", _F["usd"]),
    "usd_per_1m_tokens": ("$ per 1M tokens", _F["usd"]),
    "ttft_s": ("Time to first token", _F["seconds"]),
    "tpot_s": ("Time per output token", _F["seconds"]),
    "output_tokens_per_s": ("Output tokens/s", _F["num"]),
    "usd_per_1m_output_tokens": ("$ per 1M output tokens", _F["usd"]),
    "feasible": ("Feasible layouts", _F["num"]),
    "best_tokens_per_s": ("Best tokens/s", _F["num"]),
    "best_usd_per_1m_tokens": ("Best $ per 1M tokens", _F["usd"]),
    "ok": ("Layouts meeting the targets", _F["num"]),
    "cheapest_usd_per_1m_output_tokens": ("Cheapest $ per 1M output tokens", _F["usd"]),
}


def _shown(key: str, value: Any) -> str:
    label_format = HEADLINES.get(key)
    if label_format is None:
        return "—" if value is None else str(value)
    return label_format[1](value)


def _label(key: str) -> str:
    return HEADLINES.get(key, (key, str))[0]


def _json(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload), status_code=status, media_type="application/json")


def _store(request: Request) -> PlanStore:
    return open_store(request.app)


def _message(request: Request, title: str, message: str, status: int) -> Response:
    """A refusal or a missing plan as a page (or JSON, for the JSON twin)."""
    if request.query_params.get("format") == "json":
        kind = {404: "not_found", 401: "unauthorized", 403: "forbidden"}.get(status)
        return _json({"error": kind or "invalid_request", "message": message}, status)
    context = {"title": title, "message": message}
    return templates.TemplateResponse(request, "message.html", context, status_code=status)


REFUSED = (RequestValidationError, ValidationError, SpecError, UnknownIdError, HTTPException)


def _refused(request: Request, title: str, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 422
    if isinstance(exc, UnknownIdError):
        status = 404
    return _message(request, title, refusal_text(exc), status)


def _tags(raw: str) -> list[str]:
    return list(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))


def _checked(request: Request, form: FormData) -> None:
    """Refuse a form write the API would refuse (read-only, token)."""
    refusal = write_refusal(request, str(form.get("token", "")) or None)
    if refusal is not None:
        raise refusal


def planner_url(kind: str, body: Mapping[str, Any]) -> str:
    """The planner page that shows a saved request: each input read back from the request
    (a pasted config as the config box). Fields the page has no input for are left out."""
    path, extra, inputs = PLANNERS[kind]
    params = dict(extra)
    for spec in inputs:
        node: Any = body
        for part in spec.path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is None or isinstance(node, Mapping) or spec.kind == "textarea":
            continue
        if isinstance(node, bool):
            params[spec.name] = "true" if node else "false"
        elif isinstance(node, list):
            params[spec.name] = ",".join(map(str, node))
        else:
            params[spec.name] = str(node)
    if isinstance(body.get("model"), Mapping):
        params["config"] = json.dumps(body["model"])
    return f"{path}?{urlencode(params)}"


def _reopened(plan: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The plan re-evaluated now, or why it cannot be (a rule the current estimator adds)."""
    opened = reopened(plan)
    if opened["current_error"] is not None:
        return None, f"It cannot be re-evaluated now: {opened['current_error']}"
    return opened, ""


def _rows(plan: Mapping[str, Any], opened: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Saved numbers against the numbers now, each marked when it changed."""
    saved = plan["saved_result"]
    now = opened["current_result"] if opened else {}
    changed = opened["changed"] if opened else {}
    return [
        {
            "key": k,
            "label": _label(k),
            "saved": _shown(k, saved.get(k)),
            "now": _shown(k, now.get(k)) if opened else "—",
            "changed": k in changed,
            "why": MEANING_CHANGES.get(k) if k in changed else None,
        }
        for k in dict.fromkeys([*saved, *now])
        if k != MODEL_SOURCE  # the fetched model's snapshot, not a number
    ]


# --- the list ------------------------------------------------------------------------------


@router.get("/plans", response_class=HTMLResponse)
def plans_page(request: Request) -> Response:
    q = request.query_params.get("q", "")[:200]
    tag = request.query_params.get("tag", "")[:50]
    plans = _store(request).list(q, tag, 500)
    if request.query_params.get("format") == "json":
        return _json(plans)
    tags = sorted({t for p in plans for t in p["tags"]})
    context = {
        "plans": [
            {**p, "kind_name": KIND_NAMES.get(p["kind"], p["kind"]), "url": f"/plans/{p['id']}"}
            for p in plans
        ],
        "q": q,
        "tag": tag,
        "tags": tags,
        "tag_url": lambda t: "/plans?" + urlencode({"q": q, "tag": t} if q else {"tag": t}),
        "json_url": "/plans?" + urlencode({"q": q, "tag": tag, "format": "json"}),
    }
    return templates.TemplateResponse(request, "plans.html", context)


@router.post("/plans", response_class=HTMLResponse)
async def save_plan_page(request: Request) -> Response:
    """The planner pages' "Save this plan": the page's query read into the API's request,
    then saved as ``POST /api/v1/plans`` would."""
    form = await request.form(max_files=0, max_fields=10)
    return await run_in_threadpool(_save, request, form)


def _save(request: Request, form: FormData) -> Response:
    kind = str(form.get("kind", ""))
    if kind not in PLANNERS:
        return _message(request, "Plan not saved", f"unknown plan kind {kind!r}", 422)
    inputs = PLANNERS[kind][2]
    try:
        _checked(request, form)
        query = page_query(QueryParams(str(form.get("query", ""))), inputs)
        body = PLAN_CREATE.validate_python(
            {
                "name": str(form.get("name", "")).strip(),
                "description": str(form.get("description", "")),
                "tags": _tags(str(form.get("tags", ""))),
                "kind": kind,
                "request": request_body(inputs, query),
            }
        )
        plan = save_plan(
            _store(request),
            body.name,
            body.description,
            body.tags,
            kind,
            body.request_body(),
            settings_of(request.app).max_plan_bytes,
        )
    except REFUSED as exc:
        return _refused(request, "Plan not saved", exc)
    return RedirectResponse(f"/plans/{plan['id']}", status_code=303)


# --- side by side (before /plans/{plan_id}, which would take "compare" as an id) ------------


def _ids(params: QueryParams) -> list[str]:
    """``ids=a,b`` or ``ids=a&ids=b`` (the list page's checkboxes), in order, once each."""
    raw = [i.strip() for v in params.getlist("ids") for i in v.split(",")]
    return list(dict.fromkeys(i for i in raw if i))


@router.get("/plans/compare", response_class=HTMLResponse)
def compare_saved_page(request: Request) -> Response:
    """Two to four saved plans side by side, each by its saved name: their numbers now (or as
    saved), their inputs (those that differ first), and for the training plans and the serving
    plans among them the compare page's aligned charts."""
    ids = _ids(request.query_params)
    if not 2 <= len(ids) <= 4:
        return _message(
            request, "Compare saved plans", "choose two to four saved plans to compare", 422
        )
    store = _store(request)
    columns: list[dict[str, Any]] = []
    for plan_id in ids:
        plan = store.get(plan_id)
        if plan is None:
            return _message(request, "Plan not found", f"no saved plan {plan_id!r}", 404)
        opened, problem = _reopened(plan)
        columns.append({"plan": plan, "opened": opened, "problem": problem})
    if request.query_params.get("format") == "json":
        return _json({c["plan"]["id"]: c["opened"] or c["plan"] for c in columns})
    _name_columns(columns)
    keys = list(dict.fromkeys(k for c in columns for k in _current(c) if k != MODEL_SOURCE))
    rows = [
        {"label": _label(k), "cells": [_shown(k, _current(c).get(k)) for c in columns]}
        for k in keys
    ]
    reopened = [c for c in columns if c["opened"] is not None]
    trained = [
        (c["label"], training_answer(TrainingRequest.model_validate(c["plan"]["request"])))
        for c in reopened
        if c["plan"]["kind"] == "training"
    ]
    served = [
        (c["label"], inference_answer(InferenceRequest.model_validate(c["plan"]["request"])))
        for c in reopened
        if c["plan"]["kind"] == "inference"
    ]
    figures = {
        **compare_figures("training", trained),
        **{f"serving-{k}": v for k, v in compare_figures("serving", served).items()},
    }
    context = {
        "columns": [
            {**c, "kind_name": KIND_NAMES[c["plan"]["kind"]], "url": f"/plans/{c['plan']['id']}"}
            for c in columns
        ],
        "rows": rows,
        "plans": [{"name": c["label"]} for c in columns],
        "inputs": input_rows([_compared_inputs(c) for c in columns]),
        "figures": figures,
        "json_url": "/plans/compare?" + urlencode({"ids": ",".join(ids), "format": "json"}),
    }
    return templates.TemplateResponse(request, "plans_compare.html", context)


def _name_columns(columns: Sequence[dict[str, Any]]) -> None:
    """Each compared plan's heading: its saved name; plans saved under one name told apart by
    their revision where that differs, else by the start of their id."""
    for c in columns:
        plan = c["plan"]
        twins = [o["plan"] for o in columns if o["plan"]["name"] == plan["name"]]
        c["label"] = plan["name"]
        if len(twins) > 1:
            revisions = {t.get("revision") for t in twins}
            apart = f"rev {plan['revision']}" if len(revisions) == len(twins) else plan["id"][:8]
            c["label"] += f" · {apart}"


def _compared_inputs(column: Mapping[str, Any]) -> tuple[Sequence[Input], Mapping[str, Any]]:
    """A compared plan's form inputs and its request; a training or serving plan the current
    estimator reads again has the planner's defaults filled in, so that an input left to its
    default compares equal to one set to the same value."""
    plan = column["plan"]
    body = plan["request"]
    if plan["kind"] in ANSWERS and column["opened"] is not None:
        model, _ = ANSWERS[plan["kind"]]
        body = model.model_validate(body).model_dump(mode="json")
    return PLANNERS[plan["kind"]][2], body


def _current(column: Mapping[str, Any]) -> dict[str, Any]:
    """A compared plan's numbers now, or as saved where it cannot be re-evaluated."""
    opened = column["opened"]
    return dict(opened["current_result"] if opened else column["plan"]["saved_result"])


# --- one plan ---------------------------------------------------------------------------------


@router.get("/plans/{plan_id}", response_class=HTMLResponse)
def plan_page(request: Request, plan_id: str) -> Response:
    """A saved plan at its stable share link, re-evaluated with the current estimator."""
    plan = _store(request).get(plan_id)
    if plan is None:
        return _message(request, "Plan not found", f"no saved plan {plan_id!r}", 404)
    opened, problem = _reopened(plan)
    fmt = request.query_params.get("format")
    if fmt in ("json", "md"):
        if opened is None:
            return _message(request, "Plan not re-evaluated", problem, 422)
        if fmt == "md" and plan["kind"] in ANSWERS:
            model, answer = ANSWERS[plan["kind"]]
            result = answer(model.model_validate(plan["request"]))
            return plan_markdown(request, plan["kind"], result, f"/plans/{plan_id}")
        return _json(opened)
    context = {
        "plan": plan,
        "kind_name": KIND_NAMES.get(plan["kind"], plan["kind"]),
        "opened": opened,
        "problem": problem,
        "rows": _rows(plan, opened),
        "request_json": json.dumps(plan["request"], indent=2),
        "planner_url": planner_url(plan["kind"], plan["request"]),
        "json_url": f"/plans/{plan_id}?format=json",
        "md_url": f"/plans/{plan_id}?format=md" if plan["kind"] in ANSWERS else "",
        "access": write_access(request),
    }
    return templates.TemplateResponse(request, "plan.html", context)


# A write form posted to one plan: what it does to the plan (its form, the stored plan and the
# size cap in, the address to go to out), and the title of its refusal.
PlanAction = Callable[[PlanStore, FormData, dict[str, Any], int], str]


def _edit(store: PlanStore, form: FormData, plan: dict[str, Any], max_bytes: int) -> str:
    edit = PlanUpdate(
        name=str(form.get("name", "")).strip(),
        description=str(form.get("description", "")),
        tags=_tags(str(form.get("tags", ""))),
    )
    given = str(form.get("revision", "")).strip()
    expected = int(given) if given.isdigit() and len(given) <= 12 else None
    update_plan(store, plan, edit.changes(), max_bytes, expected)
    return f"/plans/{plan['id']}"


def _duplicate(store: PlanStore, _: FormData, plan: dict[str, Any], max_bytes: int) -> str:
    return f"/plans/{duplicate(store, plan, max_bytes)['id']}"


def _delete(store: PlanStore, _: FormData, plan: dict[str, Any], __: int) -> str:
    store.delete(plan["id"])
    return "/plans"


ACTIONS: dict[str, tuple[PlanAction, str]] = {
    "edit": (_edit, "Plan not changed"),
    "duplicate": (_duplicate, "Plan not duplicated"),
    "delete": (_delete, "Plan not deleted"),
}


@router.post("/plans/{plan_id}/{action}", response_class=HTMLResponse)
async def plan_action_page(request: Request, plan_id: str, action: str) -> Response:
    """The plan page's edit, duplicate and delete forms, under the API's rules."""
    if action not in ACTIONS:
        return _message(request, "Not found", f"no action {action!r} on a saved plan", 404)
    form = await request.form(max_files=0, max_fields=12)
    return await run_in_threadpool(_act, request, plan_id, action, form)


def _act(request: Request, plan_id: str, action: str, form: FormData) -> Response:
    act, title = ACTIONS[action]
    try:
        _checked(request, form)
        store = _store(request)
        plan = store.get(plan_id)
        if plan is None:
            raise HTTPException(404, f"no saved plan {plan_id!r}")
        cap = settings_of(request.app).max_plan_bytes
        return RedirectResponse(act(store, form, plan, cap), status_code=303)
    except REFUSED as exc:
        return _refused(request, title, exc)


# --- a pasted config saved as a team model ------------------------------------------------------


@router.post("/catalog/team-models", response_class=HTMLResponse)
async def save_team_model_page(request: Request) -> Response:
    """The catalog page's "Save as a team model": a pasted config.json stored under a team id,
    as ``POST /api/v1/team/models`` would (the same checks: read by the core, not a public id,
    not taken, within the size cap); then the planner opens on it."""
    form = await request.form(max_files=0, max_fields=10)
    return await run_in_threadpool(_save_team_model, request, form)


def _save_team_model(request: Request, form: FormData) -> Response:
    try:
        _checked(request, form)
        config = parse_json(str(form.get("config", "")), "config", current().max_json_depth)
        body = TeamModelIn.model_validate(
            {
                "id": str(form.get("id", "")).strip(),
                "name": str(form.get("name", "")).strip(),
                "config": config,
                "source": "pasted on the catalog page",
            }
        )
        open_store(request.app)
        create_team_entry(request.app.state.team, "models", body.model_dump())
    except REFUSED as exc:
        return _refused(request, "Team model not saved", exc)
    return RedirectResponse(f"/training?model={body.id}", status_code=303)
