"""The dashboard: server-rendered pages whose state lives in the URL query.

A page reads its form from the query, builds the same request the REST API takes (the pydantic
request models), calls the same plan functions and renders the result; ``?format=json`` returns
exactly what the API would. Refusals (422/404) become messages next to the form field they name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, ValidationError
from starlette.datastructures import QueryParams

from app import format as fmt
from app.answers import (
    catalog_accelerators,
    catalog_models,
    comm_plan_out,
    inference_out,
    layer_table_out,
    model_out,
    rows_csv,
    serving_sweep_out,
    serving_sweep_rows,
    timeline_out,
    training_out,
    training_sweep_out,
    training_sweep_rows,
    tree_out,
)
from app.api.training import check_csv_rows
from app.deps import bind_team, settings_of
from app.resolve import (
    resolve_model,
    run_inference,
    run_inference_timeline,
    run_load_curve,
    run_serving_sweep,
    run_training,
    run_training_sweep,
    run_training_views,
)
from app.schemas.inference import InferenceRequest
from app.schemas.sweep import (
    ServingSweepRequest,
    ServingSweepRow,
    TrainingSweepRequest,
    TrainingSweepRow,
)
from app.schemas.training import TrainingRequest
from app.service.errors import field_path
from app.service.guards import parse_json
from app.settings import current
from app.store import catalog as team
from app.web import charts
from app.web.assets import TEMPLATES
from app.web.forms import (
    SERVING_INPUTS,
    SERVING_SWEEP_INPUTS,
    SWEEP_INPUTS,
    TRAINING_INPUTS,
    Input,
    pickers,
    request_body,
)
from app.web.static import static_url
from estimator import model_ids
from estimator.errors import SpecError, UnknownIdError
from estimator.serving.load import ENGINES
from estimator.timing.stacks import STACKS

__all__ = ["page_query", "router", "templates"]

templates = Jinja2Templates(directory=TEMPLATES)
router = APIRouter(include_in_schema=False, dependencies=[Depends(bind_team)])

templates.env.filters.update(
    gib=fmt.gib,
    seconds=fmt.seconds,
    usd=fmt.usd,
    pct=fmt.pct,
    num=fmt.num,
    count=fmt.count,
    figure_json=charts.figure_json,
)
templates.env.globals["static_url"] = static_url


@dataclass
class Outcome:
    """What a page shows: the API's result, or the errors by input name."""

    result: dict[str, Any] | None = None
    errors: dict[str, str] = field(default_factory=dict)
    message: str = ""


def _input_for(inputs: Sequence[Input], path: str, query: Mapping[str, str]) -> str:
    """The form input an error path belongs to (``layout.tp`` -> ``tp``; ``model.hidden_size``
    -> the pasted config)."""
    if path.startswith("model.") or (path == "model" and query.get("config")):
        return "config"
    for spec in inputs:
        if spec.path == path and spec.kind != "textarea":
            return spec.name
    return path.split(".")[0]


def evaluate(
    inputs: Sequence[Input],
    query: Mapping[str, str],
    model: type[BaseModel],
    run: Callable[[Any], dict[str, Any]],
) -> Outcome:
    """Read the query into the API request, run it, and sort any refusal by input."""
    try:
        req = model.model_validate(request_body(inputs, query))
        return Outcome(result=run(req))
    except ValidationError as exc:
        errors: dict[str, str] = {}
        for e in exc.errors():
            name = _input_for(inputs, field_path(tuple(e["loc"])), query)
            errors.setdefault(name, str(e["msg"]))
        return Outcome(errors=errors, message="Some inputs need a look.")
    except SpecError as exc:
        name = _input_for(inputs, exc.field, query)
        return Outcome(errors={name: exc.rule}, message=f"{exc.field}: {exc.rule}")
    except UnknownIdError as exc:
        name = "config" if exc.kind == "model" and query.get("config") else exc.kind
        return Outcome(errors={name: f"unknown {exc.kind} id {exc.ident!r}"}, message=str(exc))


def page_query(params: QueryParams, inputs: Sequence[Input]) -> dict[str, str]:
    """The query as one string per input; the checkboxes of a ``multi`` input joined."""
    query = dict(params)
    for spec in inputs:
        if spec.kind == "multi" and spec.name in params:
            query[spec.name] = ",".join(params.getlist(spec.name))
    return query


@dataclass
class Submission:
    """A page's query read and, when it names a model, evaluated."""

    query: dict[str, str]
    fmt: str  # html, json or csv
    submitted: bool
    outcome: Outcome

    def refusal(self) -> Response:
        """The JSON twin of a page whose plan could not be evaluated."""
        body = {"error": "invalid_request", "message": self.outcome.message or "no plan given"}
        status = 422 if self.outcome.errors else 400
        return Response(json.dumps(body), status_code=status, media_type="application/json")

    def export(
        self, rows: Callable[[dict[str, Any]], Iterable[dict[str, Any]]], row_model: type[BaseModel]
    ) -> Response | None:
        """A sweep page's JSON (its API answer) or CSV (``rows`` of the result) twin; None for
        the page itself."""
        result = self.outcome.result
        if self.fmt not in ("json", "csv"):
            return None
        if result is None:
            return self.refusal()
        if self.fmt == "json":
            return _json(result["out"])
        return _csv(rows(result), row_model)


def _submit(
    request: Request,
    inputs: Sequence[Input],
    model: type[BaseModel],
    run: Callable[[Any], dict[str, Any]],
) -> Submission:
    query = page_query(request.query_params, inputs)
    fmt = query.pop("format", "html")
    submitted = bool(query.get("model") or query.get("config"))
    outcome = evaluate(inputs, query, model, run) if submitted else Outcome()
    return Submission(query, fmt, submitted, outcome)


def _json(payload: Any) -> Response:
    return Response(json.dumps(payload), media_type="application/json")


def _csv(rows: Iterable[dict[str, Any]], row_model: type[BaseModel]) -> Response:
    return Response(rows_csv(rows, list(row_model.model_fields)), media_type="text/csv")


def save_form(request: Request, kind: str, result: Any) -> dict[str, Any] | None:
    """The "Save this plan" form under an evaluated plan: the page's query travels with it;
    it asks for the token where one is configured and says so in read-only mode."""
    if result is None:
        return None
    cfg = settings_of(request.app)
    query = [(k, v) for k, v in request.query_params.multi_items() if k != "format"]
    return {
        "kind": kind,
        "query": urlencode(query),
        "read_only": cfg.read_only,
        "needs_token": cfg.api_token is not None,
    }


def _page(
    request: Request,
    template: str,
    kind: str,
    inputs: Sequence[Input],
    model: type[BaseModel],
    run: Callable[[Any], dict[str, Any]],
    figures: Callable[[dict[str, Any], Mapping[str, str]], dict[str, Any]],
) -> Response:
    sub = _submit(request, inputs, model, run)
    query, outcome = sub.query, sub.outcome
    if sub.fmt == "json":
        if outcome.result is None:
            return sub.refusal()
        return _json({k: v for k, v in outcome.result.items() if not k.startswith("_")})
    context = {
        "inputs": pickers(inputs),
        "query": query,
        "outcome": outcome,
        "save": save_form(request, kind, outcome.result),
        "figures": figures(outcome.result, query) if outcome.result else {},
        "json_url": f"{request.url.path}?{request.url.query}&format=json"
        if request.url.query
        else "",
        "compare_url": "/compare?"
        + urlencode({f"a.{k}": v for k, v in query.items() if v and k != "config"}),
    }
    status = 422 if outcome.errors else 200
    return templates.TemplateResponse(request, template, context, status_code=status)


# --- pages ------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
def home(request: Request) -> Response:
    return templates.TemplateResponse(
        request,
        "home.html",
        {
            "models": team.model_choices(),
            "accelerators": team.accelerator_choices(),
            "query": dict(request.query_params),
        },
    )


def _run_training_page(req: TrainingRequest) -> dict[str, Any]:
    """The estimate, and the deep dives the page shows under it (keys with a leading
    underscore stay out of the JSON twin)."""
    v = run_training_views(req)
    out = training_out(v.plan, v.estimate)
    return {
        **out,
        "_ranks": v.ranks,
        "_comms": comm_plan_out(v.comms),
        "_timeline": timeline_out(v.timeline),
        "_layers": layer_table_out(v.layers),
        "_tree": tree_out(v.tree, out["model"], req.seq_len, req.micro_batch_size, 5),
        "_stacks": [
            {
                "name": name,
                "label": STACKS[name].label,
                "fitted_on": STACKS[name].fitted_on,
                "step_s": e.time.step_s,
                "tokens_per_s_per_gpu": e.tokens_per_s_per_gpu,
                "mfu": e.mfu,
                "usd_per_1m_tokens": e.usd_per_1m_tokens,
            }
            for name, e in v.stacks.items()
        ],
    }


def _training_figures(result: dict[str, Any], _: Mapping[str, str]) -> dict[str, Any]:
    figures = {
        "memory": charts.training_memory_figure(result),
        "time": charts.training_time_figure(result),
        "timeline": charts.timeline_figure(result["_timeline"]),
    }
    grid = charts.rank_grid_figure(result["_ranks"])
    if grid is not None:
        figures["ranks"] = grid
    return figures


@router.get("/training", response_class=HTMLResponse)
def training_page(request: Request) -> Response:
    return _page(
        request,
        "training.html",
        "training",
        TRAINING_INPUTS,
        TrainingRequest,
        _run_training_page,
        _training_figures,
    )


def _serving_figures(result: dict[str, Any], query: Mapping[str, str]) -> dict[str, Any]:
    def target(name: str) -> float | None:
        try:
            return float(query[name]) if query.get(name) else None
        except ValueError:
            return None

    return {
        "memory": charts.inference_memory_figure(result),
        "latency": charts.inference_latency_figure(result),
        "curve": charts.serving_curve_figure(
            result, target("tpot_target_s"), target("ttft_target_s")
        ),
        "timeline": charts.timeline_figure(result["_timeline"]),
        "load": charts.serving_load_figure(
            result["_load_curve"],
            result["_slots"],
            target("tpot_target_s"),
            target("ttft_target_s"),
        ),
    }


@router.get("/serving", response_class=HTMLResponse)
def serving_page(request: Request) -> Response:
    def run(req: InferenceRequest) -> dict[str, Any]:
        plan, estimate = run_inference(req)
        out = inference_out(req, plan, estimate)
        best = out["best_concurrency"]
        at_best = None
        if best is not None and best != out["concurrency"]:  # a link to the same plan at it
            query = {k: v for k, v in request.query_params.items() if k != "format"}
            at_best = f"{request.url.path}?{urlencode({**query, 'concurrency': best})}"
        return {
            **out,
            "_timeline": timeline_out(run_inference_timeline(req)),
            "_at_best": at_best,
            "_load_curve": run_load_curve(req, plan, estimate),
            "_slots": ENGINES[req.engine].slots(estimate.max_concurrency),
        }

    return _page(
        request,
        "serving.html",
        "inference",
        SERVING_INPUTS,
        InferenceRequest,
        run,
        _serving_figures,
    )


def _row_link(
    path: str, row_keys: str, query_keys: str, **defaults: Any
) -> Callable[[Mapping[str, Any], Mapping[str, str]], str]:
    """The planner's address for one sweep row: the row's layout (``row_keys``, space-separated)
    with the sweep's model and workload (``query_keys``, else ``defaults``)."""

    def link(row: Mapping[str, Any], query: Mapping[str, str]) -> str:
        params = {
            "model": query.get("model", ""),
            "config": query.get("config", ""),
            **{k: row[k] for k in row_keys.split()},
            **{k: query.get(k) or defaults.get(k, "") for k in query_keys.split()},
        }
        return path + "?" + urlencode({k: v for k, v in params.items() if v not in ("", None)})

    return link


_planner_url = _row_link(
    "/training",
    "accelerator num_gpus tp pp cp ep vp zero_stage micro_batch_size recompute precision",
    "seq_len global_batch_size tokens",
    global_batch_size=1024,
)
_serving_planner_url = _row_link(
    "/serving",
    "accelerator precision tp pp concurrency",
    "input_len output_len ttft_target_s tpot_target_s",
)


def _run_sweep(req: TrainingSweepRequest) -> dict[str, Any]:
    sweep = run_training_sweep(req)
    return {"sweep": sweep, "out": training_sweep_out(sweep, req).model_dump(), "req": req}


def _run_serving_sweep(req: ServingSweepRequest) -> dict[str, Any]:
    sweep = run_serving_sweep(req)
    return {"sweep": sweep, "out": serving_sweep_out(sweep, req).model_dump(), "req": req}


def _serving_picks(rows: list[dict[str, Any]], query: Mapping[str, str]) -> list[dict[str, Any]]:
    """The serving sweep's recommendations over every served layout: the cheapest per output
    token, the most tokens/s per GPU and the quickest first token, each with why."""
    served = [r for r in rows if r["ok"]]
    if not served:
        return []
    priced = [r for r in served if r.get("usd_per_1m_output_tokens") is not None]
    picks = []
    if priced:
        r = min(priced, key=lambda r: r["usd_per_1m_output_tokens"])
        picks.append(
            (
                "Cheapest per output token",
                r,
                f"${r['usd_per_1m_output_tokens']:.3g} per 1M output tokens all-in",
            )
        )
    r = max(served, key=lambda r: r["output_tokens_per_s_per_gpu"])
    picks.append(
        (
            "Most tokens/s per GPU",
            r,
            f"{r['output_tokens_per_s_per_gpu']:,.0f} output tokens/s per GPU",
        )
    )
    r = min(served, key=lambda r: r["ttft_s"])
    picks.append(("Quickest first token", r, f"TTFT {r['ttft_s'] * 1e3:,.1f} ms"))
    return [
        {"title": title, "row": row, "why": why, "planner_url": _serving_planner_url(row, query)}
        for title, row, why in picks
    ]


def serving_sweep_page(request: Request) -> Response:
    """The serving side of the explorer: replica layouts at their best concurrency."""
    sub = _submit(request, SERVING_SWEEP_INPUTS, ServingSweepRequest, _run_serving_sweep)
    query, outcome, submitted, result = sub.query, sub.outcome, sub.submitted, sub.outcome.result
    exported = sub.export(lambda r: serving_sweep_rows(r["sweep"], r["req"]), ServingSweepRow)
    if exported is not None:
        return exported
    figures: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    if result is not None:
        accelerators = list(dict.fromkeys(r["accelerator"] for r in result["sweep"].rows))
        figures = {
            "scatter": charts.serving_sweep_scatter_figure(result["sweep"].rows, accelerators),
            "bars": charts.serving_sweep_bars_figure(result["sweep"].rows, accelerators),
        }
        rows = [
            {**r, "planner_url": _serving_planner_url(r, query)}
            for r in result["out"]["rows"]
            if r["ok"]
        ]
        refused = [r for r in result["sweep"].rows if not r["ok"]]
    base = {k: v for k, v in query.items() if k != "page" and v}
    picks = _serving_picks(result["sweep"].rows, query) if result is not None else []
    context = {
        "inputs": pickers(SERVING_SWEEP_INPUTS),
        "picks": picks,
        "query": query,
        "outcome": outcome,
        "save": save_form(request, "inference_sweep", result),
        "figures": figures,
        "rows": rows,
        "refused": refused,
        "out": result["out"] if result else None,
        "page_url": lambda n: "/sweep?" + urlencode({**base, "page": n}),
        "csv_url": "/sweep?" + urlencode({**base, "format": "csv"}),
        "json_url": "/sweep?" + urlencode({**base, "format": "json"}) if submitted else "",
        "training_url": "/sweep?" + urlencode({k: v for k, v in base.items() if k != "mode"}),
    }
    status = 422 if outcome.errors else 200
    return templates.TemplateResponse(request, "sweep_serving.html", context, status_code=status)


@router.get("/sweep", response_class=HTMLResponse)
def sweep_page(request: Request) -> Response:
    """The sweep explorer: what fits, what is fastest, what is cheapest across layouts
    (``mode=serving`` for serving replicas)."""
    if request.query_params.get("mode") == "serving":
        return serving_sweep_page(request)
    sub = _submit(request, SWEEP_INPUTS, TrainingSweepRequest, _run_sweep)
    query, outcome, submitted, result = sub.query, sub.outcome, sub.submitted, sub.outcome.result

    def csv_rows(r: dict[str, Any]) -> Iterable[dict[str, Any]]:
        check_csv_rows(r["out"]["total_rows"])
        return training_sweep_rows(r["sweep"], r["req"])

    exported = sub.export(csv_rows, TrainingSweepRow)
    if exported is not None:
        return exported
    figures: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    recommendations: list[dict[str, Any]] = []
    if result is not None:
        s = result["sweep"]
        figures = {
            "scatter": charts.sweep_scatter_figure(s),
            "heatmap": charts.sweep_heatmap_figure(s),
            "bars": charts.sweep_bars_figure(s),
        }
        out = result["out"]
        rows = [{**r, "planner_url": _planner_url(r, query)} for r in out["rows"]]
        recommendations = [
            {**r, "planner_url": _planner_url(r["row"], query)} for r in out["recommendations"]
        ]
    base = {k: v for k, v in query.items() if k not in ("page", "sort") and v}
    sort = {"sort": query["sort"]} if query.get("sort") else {}
    context = {
        "inputs": pickers(SWEEP_INPUTS),
        "query": query,
        "outcome": outcome,
        "save": save_form(request, "training_sweep", result),
        "figures": figures,
        "rows": rows,
        "recommendations": recommendations,
        "out": result["out"] if result else None,
        "sort_url": lambda key: "/sweep?" + urlencode({**base, "sort": key}),
        "page_url": lambda n: "/sweep?" + urlencode({**base, **sort, "page": n}),
        "csv_url": "/sweep?" + urlencode({**base, "format": "csv"}),
        "json_url": "/sweep?" + urlencode({**base, "format": "json"}) if submitted else "",
    }
    status = 422 if outcome.errors else 200
    return templates.TemplateResponse(request, "sweep.html", context, status_code=status)


SLOTS = ("a", "b", "c", "d")
# A plan of the comparison: the training inputs but the pasted config, named "<slot>.<input>".
# An empty model leaves the plan out.
COMPARE_INPUTS = {
    slot: tuple(
        replace(spec, name=f"{slot}.{spec.name}")
        if spec.name != "model"
        else replace(
            spec, name=f"{slot}.model", choices=("", *model_ids()), default="", blank="(no plan)"
        )
        for spec in TRAINING_INPUTS
        if spec.kind != "textarea"
    )
    for slot in SLOTS
}
COMPARE_EXAMPLE = {
    "a.model": "llama-3-70b", "a.accelerator": "h100-sxm-80gb", "a.num_gpus": "64",
    "a.tp": "8", "a.pp": "2", "a.global_batch_size": "1024", "a.recompute": "selective",
    "a.tokens": "2e12",
    "b.model": "llama-3-70b", "b.accelerator": "h200-sxm-141gb", "b.num_gpus": "64",
    "b.tp": "8", "b.pp": "1", "b.global_batch_size": "1024", "b.recompute": "selective",
    "b.tokens": "2e12",
    "c.model": "llama-3-70b", "c.accelerator": "h100-sxm-80gb", "c.num_gpus": "128",
    "c.tp": "8", "c.pp": "2", "c.global_batch_size": "1024", "c.recompute": "selective",
    "c.tokens": "2e12",
}  # fmt: skip


@router.get("/compare", response_class=HTMLResponse)
def compare_page(request: Request) -> Response:
    """Two to four training plans side by side: their key numbers and aligned charts."""
    query = dict(request.query_params)
    fmt = query.pop("format", "html")
    slots: list[dict[str, Any]] = []
    plans: list[tuple[str, dict[str, Any]]] = []
    for slot in SLOTS:
        inputs = COMPARE_INPUTS[slot]
        outcome = Outcome()
        if query.get(f"{slot}.model"):
            outcome = evaluate(
                inputs, query, TrainingRequest, lambda req: training_out(*run_training(req))
            )
            if outcome.result is not None:
                plans.append((f"Plan {slot.upper()}", outcome.result))
        slots.append({"key": slot, "inputs": pickers(inputs), "outcome": outcome})
    if fmt == "json":
        return _json(dict(plans))
    figures = {}
    if plans:
        figures = {
            "memory": charts.compare_memory_figure(plans),
            "time": charts.compare_time_figure(plans),
        }
    context = {
        "slots": slots,
        "plans": plans,
        "figures": figures,
        "query": query,
        "json_url": f"/compare?{request.url.query}&format=json" if plans else "",
        "example_url": "/compare?" + urlencode(COMPARE_EXAMPLE),
    }
    errors = any(outcome.errors for outcome in (slot["outcome"] for slot in slots))
    return templates.TemplateResponse(
        request, "compare.html", context, status_code=422 if errors else 200
    )


@router.get("/catalog", response_class=HTMLResponse)
def catalog_page(request: Request) -> Response:
    models = catalog_models()
    accelerators = catalog_accelerators()
    if request.query_params.get("format") == "json":
        body = {
            "models": [{**m, "params": m["params"].model_dump()} for m in models],
            "accelerators": [a.model_dump() for a in accelerators],
        }
        return _json(body)
    pasted = request.query_params.get("config", "").strip()
    imported: dict[str, Any] | None = None
    error = ""
    if pasted:
        try:
            config = parse_json(pasted, "config", current().max_json_depth)
            if not isinstance(config, dict):
                raise SpecError("config", "must be a JSON object (a config.json)")
            imported = model_out(resolve_model(config, "config"), {"config": config}).model_dump()
        except SpecError as exc:
            error = f"{exc.field}: {exc.rule}"
    context = {
        "models": models,
        "accelerators": accelerators,
        "imported": imported,
        "error": error,
        "pasted": pasted,
    }
    return templates.TemplateResponse(
        request, "catalog.html", context, status_code=422 if error else 200
    )
