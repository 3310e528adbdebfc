"""The dashboard: server-rendered pages whose state lives in the URL query.

A page reads its form from the query, builds the same request the REST API takes (the pydantic
request models), calls the same plan functions and renders the result; ``?format=json`` returns
exactly what the API would. Refusals (422/404) become messages next to the form field they name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, ValidationError
from starlette.datastructures import QueryParams

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
from estimator import PRESETS, accelerator_ids, model_ids
from estimator.errors import SpecError, UnknownIdError

__all__ = [
    "SERVING_INPUTS",
    "SERVING_SWEEP_INPUTS",
    "SWEEP_INPUTS",
    "TRAINING_INPUTS",
    "Input",
    "page_query",
    "pickers",
    "request_body",
    "router",
    "templates",
]

ROOT = Path(__file__).resolve().parents[2]
templates = Jinja2Templates(directory=ROOT / "templates")
router = APIRouter(include_in_schema=False, dependencies=[Depends(bind_team)])

GIB = 2**30


# --- formatting filters (display only) -------------------------------------------------------


def _gib(value: float | None) -> str:
    return "—" if value is None else f"{value / GIB:,.1f} GiB"


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1e3:,.1f} ms"
    if value < 3600 * 2:
        return f"{value:,.2f} s"
    if value < 86400 * 3:
        return f"{value / 3600:,.1f} h"
    return f"{value / 86400:,.1f} days"


def _usd(value: float | None) -> str:
    if value is None:
        return "—"
    return (
        f"${value:,.4f}" if value < 1 else f"${value:,.0f}" if value >= 1000 else f"${value:,.2f}"
    )


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _num(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _count(value: float | None) -> str:
    """Large counts in words: 70.55 B parameters, 2.0 T tokens."""
    if value is None:
        return "—"
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {unit}"
    return f"{value:,.0f}"


templates.env.filters.update(
    gib=_gib,
    seconds=_seconds,
    usd=_usd,
    pct=_pct,
    num=_num,
    count=_count,
    figure_json=charts.figure_json,
)


# --- forms ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """One form input: its query name, where it goes in the API request, how it is read."""

    name: str
    label: str
    path: str  # dotted path in the request body
    # int, float, text, select, intselect (a select of whole numbers), bool, textarea,
    # ints (a comma-separated list), multi (checkboxes)
    kind: str = "int"
    choices: Sequence[str] = ()
    placeholder: str = ""
    help: str = ""
    group: str = "Plan"
    default: str = ""  # shown selected when the query leaves the input out
    blank: str = "default"  # what an empty choice of a select says
    team: frozenset[str] = frozenset()  # choices from the team catalog, marked as such


def _read(spec: Input, raw: str) -> Any:
    if spec.kind in ("int", "intselect"):
        try:
            return int(raw)
        except ValueError:
            raise SpecError(spec.path, "must be a whole number", raw) from None
    if spec.kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise SpecError(spec.path, "must be a number", raw) from None
    if spec.kind == "bool":
        return raw in ("1", "true", "on", "yes")
    if spec.kind == "ints":  # "64, 128" -> [64, 128]; one value stays a value
        try:
            values = [int(v) for v in raw.replace(" ", "").split(",") if v]
        except ValueError:
            raise SpecError(spec.path, "must be whole numbers separated by commas", raw) from None
        return values[0] if len(values) == 1 else values
    if spec.kind == "multi":  # checkboxes, joined with commas by the page
        return [v for v in raw.split(",") if v]
    return raw


def request_body(inputs: Sequence[Input], query: Mapping[str, str]) -> dict[str, Any]:
    """The API request body the query describes: empty inputs take the API's defaults; a pasted
    config replaces the model id."""
    body: dict[str, Any] = {}
    for spec in inputs:
        raw = query.get(spec.name, "").strip()
        if raw == "" or spec.kind == "textarea":
            continue
        node = body
        *parents, leaf = spec.path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = _read(spec, raw)
    pasted = query.get("config", "").strip()
    if pasted:
        config = parse_json(pasted, "config", current().max_json_depth)
        if not isinstance(config, dict):
            raise SpecError("config", "must be a JSON object (a config.json)")
        body["model"] = config
    return body


MODELS = tuple(model_ids())
ACCELERATORS = tuple(accelerator_ids())


def pickers(inputs: Sequence[Input]) -> tuple[Input, ...]:
    """The inputs as a page shows them: the model and accelerator pickers (``model``,
    ``a.model``, ...) list the team catalog's entries after the public ones."""
    catalog = team.current()
    added = {"model": tuple(catalog.models), "accelerator": tuple(catalog.accelerators)}
    out = []
    for spec in inputs:
        extra = added.get(spec.name.rpartition(".")[2], ())
        if extra and spec.kind in ("select", "multi"):
            spec = replace(spec, choices=(*spec.choices, *extra), team=frozenset(extra))
        out.append(spec)
    return tuple(out)


BOOL_CHOICES = ("", "true", "false")

COMMON = (
    Input("model", "Model", "model", "select", MODELS, default="llama-3-70b"),
    Input(
        "accelerator", "Accelerator", "accelerator", "select", ACCELERATORS, default="h100-sxm-80gb"
    ),
    Input("config", "…or paste a config.json", "model", "textarea", help="Overrides the model"),
)
TRAINING_INPUTS = (
    *COMMON,
    Input("num_gpus", "GPUs", "num_gpus", placeholder="tp·pp·dp·cp"),
    Input("tp", "TP", "layout.tp", placeholder="1", group="Layout"),
    Input("pp", "PP", "layout.pp", placeholder="1", group="Layout"),
    Input("dp", "DP", "layout.dp", placeholder="from GPUs", group="Layout"),
    Input("cp", "CP", "layout.cp", placeholder="1", group="Layout"),
    Input("ep", "EP", "layout.ep", placeholder="1", group="Layout"),
    Input("vp", "Virtual stages", "layout.vp", placeholder="1", group="Layout"),
    Input(
        "zero_stage",
        "ZeRO stage",
        "layout.zero_stage",
        "intselect",
        ("", "0", "1", "2", "3"),
        group="Layout",
    ),
    Input("seq_len", "Sequence length", "seq_len", placeholder="4096", group="Batch"),
    Input("micro_batch_size", "Micro-batch", "micro_batch_size", placeholder="1", group="Batch"),
    Input(
        "global_batch_size",
        "Global batch",
        "global_batch_size",
        placeholder="micro × dp",
        group="Batch",
    ),
    Input(
        "recompute",
        "Recompute",
        "recompute",
        "select",
        ("", "none", "selective", "full"),
        group="Batch",
    ),
    Input("precision", "Precision", "precision", "select", ("", *PRESETS), group="Batch"),
    Input("tokens", "Tokens to train", "tokens", "float", placeholder="e.g. 2e12", group="Cost"),
    Input(
        "price_usd_per_gpu_hour",
        "Price $/GPU-hour",
        "price_usd_per_gpu_hour",
        "float",
        placeholder="catalog",
        group="Cost",
    ),
)
SERVING_INPUTS = (
    *COMMON,
    Input("tp", "TP", "layout.tp", placeholder="1", group="Layout"),
    Input("pp", "PP", "layout.pp", placeholder="1", group="Layout"),
    Input("ep", "EP", "layout.ep", placeholder="1", group="Layout"),
    Input("precision", "Precision", "precision", "select", ("", *PRESETS), group="Layout"),
    Input("input_len", "Prompt tokens", "input_len", placeholder="1024", group="Workload"),
    Input("output_len", "Output tokens", "output_len", placeholder="256", group="Workload"),
    Input("concurrency", "Concurrency", "concurrency", placeholder="1", group="Workload"),
    Input(
        "ttft_target_s",
        "TTFT target (s)",
        "ttft_target_s",
        "float",
        placeholder="none",
        group="Targets",
    ),
    Input(
        "tpot_target_s",
        "TPOT target (s)",
        "tpot_target_s",
        "float",
        placeholder="none",
        group="Targets",
    ),
    Input(
        "price_usd_per_gpu_hour",
        "Price $/GPU-hour",
        "price_usd_per_gpu_hour",
        "float",
        placeholder="catalog",
        group="Targets",
    ),
)


# Sweeps take the model and the pasted config, and a choice of several accelerators.
SWEEP_COMMON = (
    *COMMON[::2],
    Input(
        "accelerator",
        "Accelerators",
        "accelerator",
        "multi",
        ACCELERATORS,
        help="None ticked: ten data-centre GPUs",
        group="Space",
    ),
)
SWEEP_INPUTS = (
    *SWEEP_COMMON,
    Input("num_gpus", "GPU counts", "num_gpus", "ints", placeholder="8,16,…,1024", group="Space"),
    Input("tp", "TP", "layout.tp", "ints", placeholder="1,2,4,8", group="Space"),
    Input("pp", "PP", "layout.pp", "ints", placeholder="1,2,4,8,16", group="Space"),
    Input("dp", "DP", "layout.dp", "ints", placeholder="any", group="Space"),
    Input("ep", "EP", "layout.ep", "ints", placeholder="auto", group="Space"),
    Input("zero_stage", "ZeRO", "layout.zero_stage", "ints", placeholder="0,1,2,3", group="Space"),
    Input(
        "micro_batch_size",
        "Micro-batch",
        "micro_batch_size",
        "ints",
        placeholder="1,2,4,8",
        group="Space",
    ),
    Input(
        "recompute",
        "Recompute",
        "recompute",
        "multi",
        ("none", "selective", "full"),
        help="None ticked: all three",
        group="Space",
    ),
    Input("precision", "Precision", "precision", "select", ("", *PRESETS), group="Space"),
    Input("seq_len", "Sequence length", "seq_len", placeholder="4096", group="Workload"),
    Input(
        "global_batch_size",
        "Global batch",
        "global_batch_size",
        placeholder="1024",
        group="Workload",
    ),
    Input(
        "tokens", "Tokens to train", "tokens", "float", placeholder="e.g. 2e12", group="Workload"
    ),
    Input(
        "deadline_s", "Deadline (s)", "deadline_s", "float", placeholder="none", group="Workload"
    ),
    Input("budget_usd", "Budget ($)", "budget_usd", "float", placeholder="none", group="Workload"),
    Input("objective", "Rank by", "objective", "select", ("", "cost", "time"), group="Workload"),
    Input(
        "sort",
        "Sort table by",
        "sort",
        "select",
        ("", "tokens_per_s", "usd_per_1m_tokens", "memory_bytes", "num_gpus"),
        group="Workload",
    ),
    Input("page", "Page", "page", placeholder="1", group="Workload"),
)


SERVING_SWEEP_INPUTS = (
    *SWEEP_COMMON,
    Input("tp", "TP", "layout.tp", "ints", placeholder="1,2,4,8", group="Space"),
    Input("pp", "PP", "layout.pp", "ints", placeholder="1,2,4", group="Space"),
    Input(
        "precision",
        "Precisions",
        "precision",
        "multi",
        tuple(PRESETS),
        help="None ticked: bf16 and fp8-serving",
        group="Space",
    ),
    Input("input_len", "Prompt tokens", "input_len", placeholder="1024", group="Workload"),
    Input("output_len", "Output tokens", "output_len", placeholder="256", group="Workload"),
    Input(
        "ttft_target_s",
        "TTFT target (s)",
        "ttft_target_s",
        "float",
        placeholder="none",
        group="Workload",
    ),
    Input(
        "tpot_target_s",
        "TPOT target (s)",
        "tpot_target_s",
        "float",
        placeholder="none",
        group="Workload",
    ),
    Input(
        "output_tokens_per_s",
        "Fleet output tokens/s",
        "output_tokens_per_s",
        "float",
        placeholder="one replica",
        group="Workload",
    ),
    Input("page", "Page", "page", placeholder="1", group="Workload"),
)


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
    }


@router.get("/serving", response_class=HTMLResponse)
def serving_page(request: Request) -> Response:
    def run(req: InferenceRequest) -> dict[str, Any]:
        out = inference_out(req, *run_inference(req))
        return {**out, "_timeline": timeline_out(run_inference_timeline(req))}

    return _page(
        request,
        "serving.html",
        "inference",
        SERVING_INPUTS,
        InferenceRequest,
        run,
        _serving_figures,
    )


def _planner_url(row: Mapping[str, Any], query: Mapping[str, str]) -> str:
    """The training planner's address for one sweep row, with the sweep's workload."""
    params = {
        "model": query.get("model", ""),
        "config": query.get("config", ""),
        "accelerator": row["accelerator"],
        "num_gpus": row["num_gpus"],
        "tp": row["tp"],
        "pp": row["pp"],
        "cp": row["cp"],
        "ep": row["ep"],
        "vp": row["vp"],
        "zero_stage": row["zero_stage"],
        "micro_batch_size": row["micro_batch_size"],
        "recompute": row["recompute"],
        "precision": row["precision"],
        "seq_len": query.get("seq_len", ""),
        "global_batch_size": query.get("global_batch_size") or 1024,
        "tokens": query.get("tokens", ""),
    }
    return "/training?" + urlencode({k: v for k, v in params.items() if v not in ("", None)})


def _run_sweep(req: TrainingSweepRequest) -> dict[str, Any]:
    sweep = run_training_sweep(req)
    return {"sweep": sweep, "out": training_sweep_out(sweep, req).model_dump(), "req": req}


def _run_serving_sweep(req: ServingSweepRequest) -> dict[str, Any]:
    sweep = run_serving_sweep(req)
    return {"sweep": sweep, "out": serving_sweep_out(sweep, req).model_dump(), "req": req}


def _serving_planner_url(row: Mapping[str, Any], query: Mapping[str, str]) -> str:
    params = {
        "model": query.get("model", ""),
        "config": query.get("config", ""),
        "accelerator": row["accelerator"],
        "precision": row["precision"],
        "tp": row["tp"],
        "pp": row["pp"],
        "concurrency": row["concurrency"],
        "input_len": query.get("input_len", ""),
        "output_len": query.get("output_len", ""),
        "ttft_target_s": query.get("ttft_target_s", ""),
        "tpot_target_s": query.get("tpot_target_s", ""),
    }
    return "/serving?" + urlencode({k: v for k, v in params.items() if v not in ("", None)})


def serving_sweep_page(request: Request) -> Response:
    """The serving side of the explorer: replica layouts at their best concurrency."""
    sub = _submit(request, SERVING_SWEEP_INPUTS, ServingSweepRequest, _run_serving_sweep)
    query, outcome, submitted, result = sub.query, sub.outcome, sub.submitted, sub.outcome.result
    if sub.fmt in ("json", "csv"):
        if result is None:
            return sub.refusal()
        if sub.fmt == "json":
            return _json(result["out"])
        return _csv(serving_sweep_rows(result["sweep"], result["req"]), ServingSweepRow)
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
    context = {
        "inputs": pickers(SERVING_SWEEP_INPUTS),
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
    if sub.fmt in ("json", "csv"):
        if result is None:
            return sub.refusal()
        if sub.fmt == "json":
            return _json(result["out"])
        check_csv_rows(result["out"]["total_rows"])
        return _csv(training_sweep_rows(result["sweep"], result["req"]), TrainingSweepRow)
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
            spec, name=f"{slot}.model", choices=("", *MODELS), default="", blank="(no plan)"
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
