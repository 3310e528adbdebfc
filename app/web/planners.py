"""The dashboard: server-rendered pages whose state lives in the URL query.

A page reads its form from the query, builds the same request the REST API takes (the pydantic
request models), calls the same plan functions and renders the result; ``?format=json`` returns
exactly what the API would. Refusals (422/404) become messages next to the form field they name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, ValidationError
from starlette.datastructures import QueryParams

import estimator
from app import accuracy
from app import format as fmt
from app.answers import (
    catalog_accelerators,
    catalog_models,
    comm_plan_out,
    inference_answer,
    inference_out,
    layer_table_out,
    model_out,
    rows_csv,
    serving_sweep_out,
    serving_sweep_rows,
    timeline_out,
    training_answer,
    training_out,
    training_sweep_out,
    training_sweep_rows,
    tree_out,
    with_fit_suggestions,
)
from app.api.training import check_csv_rows
from app.deps import bind_team, settings_of
from app.resolve import (
    all_refusals,
    group_slots,
    resolve_model,
    run_inference,
    run_inference_timeline,
    run_load_curve,
    run_serving_sweep,
    run_training_sweep,
    run_training_views,
)
from app.run import schedule_of
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
from app.web.schedule_chart import schedule_figure
from app.web.static import static_url
from app.web.sweep_memory_chart import sweep_memory_figure
from estimator import model_ids
from estimator.errors import SpecError, UnknownIdError
from estimator.timing.stacks import DEFAULT_STACK, STACKS
from estimator.timing.training import ep_overlap_runs

__all__ = ["page_query", "router", "templates"]

templates = Jinja2Templates(directory=TEMPLATES)
router = APIRouter(include_in_schema=False, dependencies=[Depends(bind_team)])

templates.env.filters.update(
    gib=fmt.gib,
    seconds=fmt.seconds,
    usd=fmt.usd,
    pct=fmt.pct,
    num=fmt.num,
    sig=fmt.sig,
    count=fmt.count,
    md=fmt.md,
    figure_json=charts.figure_json,
    figure_rows=charts.figure_rows,
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
    """Read the query into the API request, run it, and sort any refusal by input: every rule
    the plan's layout breaks at once (``all_refusals``), the model's own first."""
    req = None
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
        refusals = [exc] if req is None else all_refusals(req, exc)
        errors = {}
        for refusal in refusals:
            errors.setdefault(_input_for(inputs, refusal.field, query), refusal.rule)
        first = refusals[0]
        more = f" (and {len(errors) - 1} more, by their fields)" if len(errors) > 1 else ""
        return Outcome(errors=errors, message=f"{first.field}: {first.rule}{more}")
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


def save_form(
    request: Request, kind: str, result: Any, shown: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The "Save this plan" form under an evaluated plan: the page's query (or ``shown``, the
    query of a worked example) travels with it; it asks for the token where one is configured
    and says so in read-only mode."""
    if result is None:
        return None
    query = list(shown.items()) if shown is not None else _page_query_items(request)
    return {"kind": kind, "query": urlencode(query), **write_access(request)}


def write_access(request: Request) -> dict[str, bool]:
    """What a page's write form needs to say: the service is read-only, or writes need the
    token."""
    cfg = settings_of(request.app)
    return {"read_only": cfg.read_only, "needs_token": cfg.api_token is not None}


# What a planner opens on when a first-time visitor brings no query: a worked example, estimated
# and labelled as such, its inputs filled into the form.
EXAMPLES: dict[str, tuple[str, dict[str, str]]] = {
    "training": (
        "pre-training Llama 3.1 70B on 1T tokens, 256 H100s, TP 4 x PP 4, FP8",
        {
            "model": "llama-3.1-70b",
            "accelerator": "h100-sxm-80gb",
            "num_gpus": "256",
            "tp": "4",
            "pp": "4",
            "global_batch_size": "512",
            "precision": "fp8",
            "tokens": "1000000000000",
        },
    ),
    "inference": (
        "Llama 3.1 70B in FP8 on 2 H100s (TP 2), 8k-token prompts, 1k-token answers, 32 requests"
        " in flight",
        {
            "model": "llama-3.1-70b",
            "accelerator": "h100-sxm-80gb",
            "tp": "2",
            "precision": "fp8-serving",
            "input_len": "8192",
            "output_len": "1024",
            "concurrency": "32",
        },
    ),
}


def _page_query_items(request: Request) -> list[tuple[str, str]]:
    """The page's query as it was asked, but its ``format``."""
    return [(k, v) for k, v in request.query_params.multi_items() if k != "format"]


def base_address(request: Request) -> str:
    """The service's own address for links that leave it (a Markdown summary's): the
    configured ``PLANNER_PUBLIC_URL``, else the request's, whose Host the guard has checked
    against the allowed hosts."""
    public = settings_of(request.app).public_url
    return (public or str(request.base_url)).rstrip("/")


def _link_back(request: Request) -> str:
    """This page's absolute address with its query (a Markdown summary's link back)."""
    query = urlencode(_page_query_items(request))
    return f"{base_address(request)}{request.url.path}?{query}"


def plan_markdown(
    request: Request, kind: str, result: Mapping[str, Any], path: str | None = None
) -> Response:
    """A plan as a short Markdown summary (``?format=md``): the compare page's rows for its kind,
    the layout, the accuracy lines, the notes and a link back to the plan (this page with its
    query, or ``path``: a saved plan's share link)."""
    serving = kind == "inference"
    link = base_address(request) + path if path else _link_back(request)
    lay = result["layout"]
    if serving:
        title = f"Serving plan: {result['model']} on {result['num_gpus']} × {result['accelerator']}"
        layout = (
            f"Layout: tp {lay['tp']} · pp {lay['pp']} · attention dp {lay['dp']} · ep"
            f" {lay['ep']} · concurrency {result['concurrency']}."
        )
    else:
        title = (
            f"Training plan: {result['model']} on {result['num_gpus']} × {result['accelerator']}"
        )
        layout = (
            f"Layout: tp {lay['tp']} · pp {lay['pp']} · dp {lay['dp']} · cp {lay['cp']} · ep"
            f" {lay['ep']} · ZeRO {lay['zero_stage']} · global batch {result['global_batch_size']}"
            f" · stack {result['stack']['label']}."
        )

    def range_text(m: Mapping[str, Any]) -> str:
        shown = fmt.seconds if m["metric"] in ("ttft", "tpot") else fmt.num
        unit = "" if m["metric"] in ("ttft", "tpot") else f" {m['unit']}"
        return f"{shown(m['range_low'])} – {shown(m['range_high'])}{unit}"

    text = templates.env.get_template("plan.md").render(
        title=title,
        layout=layout,
        table=compare_table(SERVING_ROWS if serving else TRAINING_ROWS, [("", result)]),
        accuracy=result["accuracy"],
        range_text=range_text,
        notes=result["notes"],
        exact=result["exact"],
        link=link,
        version=estimator.__version__,
    )
    return Response(text, media_type="text/markdown; charset=utf-8")


def sweep_markdown(
    request: Request,
    title: str,
    counts: str,
    columns: Sequence[str],
    rows: list[dict[str, Any]],
    notes: Sequence[str],
) -> Response:
    """A sweep's recommendations as a short Markdown summary (``?format=md``): ``rows`` of a
    ``layout`` and its ``cells`` under ``columns``, the counts, the notes, a link back."""
    text = templates.env.get_template("sweep.md").render(
        title=title,
        counts=counts,
        columns=columns,
        rows=rows,
        notes=notes,
        link=_link_back(request),
        version=estimator.__version__,
    )
    return Response(text, media_type="text/markdown; charset=utf-8")


def _training_sweep_markdown(request: Request, out: Mapping[str, Any]) -> Response:
    c = out["counts"]
    counts = (
        f"{c['enumerated']:,} layouts enumerated: {c['invalid']:,} break a framework rule,"
        f" {c['out_of_memory']:,} do not fit, {c['tight']:,} are tight (their likely peak"
        f" crosses the memory), {c['under_headroom']:,} leave less than"
        f" {out['min_headroom']:.0%} free, {c['past_deadline']:,} miss the deadline,"
        f" {c['over_budget']:,} are over budget, {c['feasible']:,} feasible."
    )
    rows = [
        {
            "layout": f"{r['num_gpus']} × {r['accelerator']}: tp {r['tp']} · pp {r['pp']} · dp"
            f" {r['dp']} · ep {r['ep']} · ZeRO {r['zero_stage']} · micro-batch"
            f" {r['micro_batch_size']} · recompute {r['recompute']} · {r['precision']}"
            + (f" · {r['stack']}" if len(out["stacks"]) > 1 else ""),
            "cells": [
                fmt.num(r["tokens_per_s"]),
                fmt.pct(r["mfu"]),
                fmt.gib(r["memory_bytes"]),
                fmt.usd(r["usd_per_1m_tokens"]),
                fmt.seconds(r["time_to_train_s"]),
                fmt.usd(r["cost_usd"]),
            ],
        }
        for r in (rec["row"] for rec in out["recommendations"])
    ]
    by = "cost per token" if out["objective"] == "cost" else "throughput"
    return sweep_markdown(
        request,
        f"Training sweep: {out['model']}, recommended by {by}",
        counts,
        ("Tokens/s", "MFU", "Memory per GPU", "$ per 1M tokens", "Time to train", "Run cost"),
        rows,
        out["notes"],
    )


def _serving_sweep_markdown(
    request: Request, picks: list[dict[str, Any]], result: Mapping[str, Any]
) -> Response:
    rows = [
        {
            "layout": f"{p['title']}: {r['num_gpus']} × {r['accelerator']} · {r['precision']} · tp"
            f" {r['tp']} · pp {r['pp']} · dp {r['dp']} · ep {r['ep']} at concurrency"
            f" {r['concurrency']}",
            "cells": [
                fmt.seconds(r["ttft_s"]),
                fmt.seconds(r["tpot_s"]),
                fmt.num(r["output_tokens_per_s_per_gpu"]),
                fmt.usd(r["usd_per_1m_output_tokens"]),
                fmt.num(r["replicas"]),
            ],
        }
        for p in picks
        for r in (p["row"],)
    ]
    ok = sum(1 for r in result["sweep"].rows if r["ok"])
    return sweep_markdown(
        request,
        f"Serving sweep: {result['out']['model']}",
        f"{len(result['sweep'].rows):,} replica layouts, {ok:,} serve it.",
        ("TTFT", "TPOT", "Output tokens/s per GPU", "$ per 1M output tokens", "Replicas"),
        rows,
        result["out"]["notes"],
    )


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
    example = None
    if not request.url.query and kind in EXAMPLES:  # a first visit: the worked example
        example, query = EXAMPLES[kind]
        sub = Submission(dict(query), "html", True, evaluate(inputs, dict(query), model, run))
    query, outcome = sub.query, sub.outcome
    if sub.fmt in ("json", "md"):
        if outcome.result is None:
            return sub.refusal()
        if sub.fmt == "md":
            return plan_markdown(request, kind, outcome.result)
        return _json({k: v for k, v in outcome.result.items() if not k.startswith("_")})
    context = {
        "inputs": pickers(inputs),
        "query": query,
        "example": example,
        "outcome": outcome,
        "save": save_form(request, kind, outcome.result, query if example else None),
        "figures": figures(outcome.result, query) if outcome.result else {},
        "json_url": f"{request.url.path}?{urlencode(query)}&format=json" if query else "",
        "md_url": f"{request.url.path}?{urlencode(query)}&format=md"
        if outcome.result is not None
        else "",
        "compare_url": "/compare?"
        + urlencode(
            ({"kind": "serving"} if kind == "inference" else {})
            | {f"a.{k}": v for k, v in query.items() if v and k != "config"}
        ),
    }
    status = 422 if outcome.errors else 200
    return templates.TemplateResponse(request, template, context, status_code=status)


# --- pages ------------------------------------------------------------------------------------


LORA_EXAMPLE = {
    "model": "llama-3.1-70b",
    "accelerator": "h100-sxm-80gb",
    "num_gpus": "2",
    "tp": "2",
    "finetune": "lora",
    "lora_rank": "16",
    "seq_len": "4096",
    "micro_batch_size": "1",
    "global_batch_size": "16",
    "recompute": "full",
}


def _home_examples() -> list[dict[str, str]]:
    """Three questions a first-time visitor brings, answered by the planner itself: each links
    to the plan that answers it."""

    def training(query: Mapping[str, str]) -> dict[str, Any] | None:
        return evaluate(TRAINING_INPUTS, query, TrainingRequest, training_answer).result

    lora = training(LORA_EXAMPLE)
    pretrain_text, pretrain_query = EXAMPLES["training"]
    pretrain = training(pretrain_query)
    serve_text, serve_query = EXAMPLES["inference"]
    serve = evaluate(
        SERVING_INPUTS, serve_query, InferenceRequest, lambda r: inference_out(r, *run_inference(r))
    ).result
    out = []
    if lora is not None:
        m = lora["memory_per_gpu"]
        verdict = {"fits": "Yes", "tight": "Only just, maybe", "does_not_fit": "No"}[m["fit"]]
        out.append(
            {
                "question": "Will a LoRA fine-tune (rank 16) of Llama 3.1 70B fit on 2 H100s?",
                "answer": f"{verdict}: it needs {fmt.gib(m['total_bytes'])} of"
                f" {fmt.gib(m['capacity_bytes'])} per GPU at 4k tokens, full recompute.",
                "link": "/training?" + urlencode(LORA_EXAMPLE),
            }
        )
    if pretrain is not None:
        out.append(
            {
                "question": f"How long and how much: {pretrain_text}?",
                "answer": f"{fmt.seconds(pretrain['cost']['time_to_train_s'])} and"
                f" {fmt.usd(pretrain['cost']['usd'])} at"
                f" {fmt.pct(pretrain['throughput']['mfu'])} MFU (of the"
                f" {pretrain['throughput']['peak_format'].upper()} peak)"
                + _effective_words(pretrain)
                + ".",
                "link": "/training?" + urlencode(pretrain_query),
            }
        )
    if serve is not None:
        load = serve["load"]
        out.append(
            {
                "question": f"What will users see: {serve_text}?",
                "answer": f"TTFT {fmt.seconds(load['ttft_s'])}, TPOT {fmt.seconds(load['tpot_s'])}"
                f", {fmt.usd(serve['cost']['usd_per_1m_output_tokens'])} per 1M output tokens.",
                "link": "/serving?" + urlencode(serve_query),
            }
        )
    return out


@router.get("/", response_class=HTMLResponse)
def home(request: Request) -> Response:
    return templates.TemplateResponse(
        request,
        "home.html",
        {
            "models": team.model_choices(),
            "accelerators": team.accelerator_choices(),
            "query": dict(request.query_params),
            "examples": _home_examples(),
        },
    )


def _effective_words(answer: dict[str, Any]) -> str:
    """A plan's effective run as the home page says it, beside the ideal figures."""
    x = answer.get("effective")
    if not x:
        return ""
    cost = "" if x["effective_cost_usd"] is None else f", {fmt.usd(x['effective_cost_usd'])}"
    return (
        f"; effective {fmt.pct(x['effective_time_fraction'])} with interruptions and"
        f" checkpoints: {fmt.seconds(x['effective_time_to_train_s'])}{cost}"
    )


def _run_training_page(req: TrainingRequest) -> dict[str, Any]:
    """The estimate, and the deep dives the page shows under it (keys with a leading
    underscore stay out of the JSON twin)."""
    v = run_training_views(req)
    out = with_fit_suggestions(req, training_out(v.plan, v.estimate))
    return {
        **out,
        "_schedule": schedule_of(v.plan, v.estimate),
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
    if result.get("_schedule") is not None:
        step, time = result["time"], result["time"]["breakdown"]
        figures["schedule"] = schedule_figure(
            result["_schedule"], step["microbatches"], time["bubble_s"] / step["step_s"]
        )
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
            query = query or EXAMPLES["inference"][1]  # the first visit's worked example
            at_best = f"{request.url.path}?{urlencode({**query, 'concurrency': best})}"
        return {
            **out,
            "_timeline": timeline_out(run_inference_timeline(req)),
            "_fleet_url": _fleet_url(request.query_params or EXAMPLES["inference"][1]),
            "_at_best": at_best,
            "_targets": {"ttft": req.ttft_target_s, "tpot": req.tpot_target_s},
            "_load_curve": run_load_curve(req, plan, estimate),
            "_slots": plan.parallel.dp * group_slots(req, plan, estimate),
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


# What a serving plan hands the fleet sweep: its workload, targets and engine limits as they are,
# its accelerator and precision as the sweep's single choices (the sweep tries every layout).
_FLEET_KEYS = [
    "model",
    "input_len",
    "output_len",
    "dataset",
    "engine",
    "max_num_batched_tokens",
    "max_num_seqs",
    "ttft_target_s",
    "tpot_target_s",
    "kv_cache_memory_fraction",
    "kv_block_size",
    "scale_up_domain",
    "scale_out_gbit_per_s",
    "oversubscription",
    "request_rate",
    "accelerator",
    "precision",
    "price_usd_per_gpu_hour",
]


def _fleet_url(query: Mapping[str, str]) -> str:
    """The serving sweep sizing a fleet for this plan's workload: the rate and latency
    question, with the plan's model, lengths, targets, engine, accelerator and precision."""
    params = {k: query[k] for k in _FLEET_KEYS if query.get(k)}
    return "/sweep?" + urlencode({"mode": "serving", **params})


# A row link's adjustment: the planner's fields for one row as the sweep evaluated it, from the
# row, the sweep's query and the fields gathered so far (None drops a field).
Adjust = Callable[[Mapping[str, Any], Mapping[str, str], dict[str, Any]], dict[str, Any]]


class _RowLink:
    """The planner's address for one sweep row: the row's layout (``row_keys``, space-separated)
    with the sweep's model and workload (``query_keys``, else ``defaults``), then ``adjust``
    (what the sweep applied to that row alone); and the compare page's address for several rows
    side by side."""

    def __init__(
        self,
        path: str,
        kind: str,
        row_keys: str,
        query_keys: str | Sequence[str],
        adjust: Adjust = lambda row, query, params: params,
        **defaults: Any,
    ):
        self.path, self.kind, self.adjust = path, kind, adjust
        self.row_keys, self.query_keys, self.defaults = (
            row_keys.split(),
            query_keys.split() if isinstance(query_keys, str) else list(query_keys),
            defaults,
        )

    def params(self, row: Mapping[str, Any], query: Mapping[str, str]) -> dict[str, Any]:
        params = {
            "model": query.get("model", ""),
            "config": query.get("config", ""),
            **{k: row[k] for k in self.row_keys},
            **{k: query.get(k) or self.defaults.get(k, "") for k in self.query_keys},
        }
        params = self.adjust(row, query, params)
        return {k: v for k, v in params.items() if v not in ("", None)}

    def __call__(self, row: Mapping[str, Any], query: Mapping[str, str]) -> str:
        return self.path + "?" + urlencode(self.params(row, query))

    def compare(self, rows: Sequence[Mapping[str, Any]], query: Mapping[str, str]) -> str:
        """The compare page with the first four ``rows`` as its plans (catalog models only: a
        pasted config does not travel into the compare page's plans)."""
        params: dict[str, Any] = {"kind": self.kind}
        for slot, row in zip(SLOTS, rows, strict=False):
            params |= {
                f"{slot}.{k}": v for k, v in self.params(row, query).items() if k != "config"
            }
        return "/compare?" + urlencode(params)


_TRAINING_ROW = (
    "accelerator stack num_gpus tp pp cp ep vp zero_stage micro_batch_size recompute precision"
)
# The sweep's workload fields the training planner takes too (LoRA, offload, the MoE router and
# dispatcher, ...): a row opened in the planner is the plan the sweep evaluated. ``dp`` is the
# row's (the GPU count's rest), not the sweep's filter.
_TRAINING_WORKLOAD = [
    i.name
    for i in SWEEP_INPUTS
    if i.name in {t.name for t in TRAINING_INPUTS}
    and i.name not in {*_TRAINING_ROW.split(), "model", "config", "dp"}
]


def _training_row(
    row: Mapping[str, Any], query: Mapping[str, str], params: dict[str, Any]
) -> dict[str, Any]:
    """The sweep's workload fields as the sweep applied them to a row: the recompute modules to
    its selective layouts, Megatron-Core's expert all-to-all overlap to its layouts that allow
    it (``training_time_terms``: expert parallelism, a virtual pipeline with a pipeline, no full
    recomputation), which a single plan elsewhere refuses."""
    overlap = (
        row["stack"] == DEFAULT_STACK
        and row["ep"] > 1
        and ep_overlap_runs(row["pp"], row["vp"], row["recompute"])
    )
    return params | {
        "recompute_modules": params.get("recompute_modules")
        if row["recompute"] == "selective"
        else None,
        "ep_comm_overlap": params.get("ep_comm_overlap") if overlap else None,
    }


def _serving_row(
    row: Mapping[str, Any], query: Mapping[str, str], params: dict[str, Any]
) -> dict[str, Any]:
    """A row of a sweep at a fleet request rate opens at its replica's share of that rate, the
    open loop it was planned at (not the requests in flight that load keeps)."""
    rate, replicas = query.get("request_rate"), row.get("replicas")
    if not rate or not replicas:  # the rate parsed: the sweep that made the row took it
        return params
    return params | {"concurrency": None, "request_rate": float(rate) / replicas}


_planner_url = _RowLink(
    "/training",
    "training",
    _TRAINING_ROW,
    _TRAINING_WORKLOAD,
    _training_row,
    global_batch_size=1024,
)
_serving_planner_url = _RowLink(
    "/serving",
    "serving",
    "accelerator precision tp pp dp ep concurrency",
    "input_len output_len dataset engine max_num_batched_tokens max_num_seqs ttft_target_s"
    " tpot_target_s kv_cache_memory_fraction kv_block_size scale_up_domain scale_out_gbit_per_s"
    " oversubscription",
    _serving_row,
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


def _distinct_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The picks' rows once each (one layout can be the cheapest and the fastest both): a
    compare of one plan against itself says nothing."""
    seen: dict[int, Mapping[str, Any]] = {}
    for r in rows:
        seen.setdefault(id(r), r)
    return list(seen.values())


def serving_sweep_page(request: Request) -> Response:
    """The serving side of the explorer: replica layouts at their best concurrency."""
    sub = _submit(request, SERVING_SWEEP_INPUTS, ServingSweepRequest, _run_serving_sweep)
    query, outcome, submitted, result = sub.query, sub.outcome, sub.submitted, sub.outcome.result
    if sub.fmt == "md" and result is not None:
        picks = _serving_picks(result["sweep"].rows, query)
        return _serving_sweep_markdown(request, picks, result)
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
        fleet = charts.fleet_curve_figure(result["out"])
        if fleet is not None:
            figures["fleet"] = fleet
        compared = result["out"]["disaggregated"]
        if compared is not None:
            target = result["req"].tpot_target_s
            figures["fronts"] = charts.disaggregated_front_figure(compared, target)
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
        "compare_picks_url": _serving_planner_url.compare(distinct, query)
        if len(distinct := _distinct_rows([p["row"] for p in picks])) > 1
        else "",
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
        "md_url": "/sweep?" + urlencode({**base, "format": "md"}) if result else "",
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

    if sub.fmt == "md" and result is not None:
        return _training_sweep_markdown(request, result["out"])
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
            "memory": sweep_memory_figure(s),
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
        "compare_picks_url": _planner_url.compare(distinct, query)
        if result
        and len(distinct := _distinct_rows([r["row"] for r in result["out"]["recommendations"]]))
        > 1
        else "",
        "out": result["out"] if result else None,
        "sort_url": lambda key: "/sweep?" + urlencode({**base, "sort": key}),
        "page_url": lambda n: "/sweep?" + urlencode({**base, **sort, "page": n}),
        "csv_url": "/sweep?" + urlencode({**base, "format": "csv"}),
        "json_url": "/sweep?" + urlencode({**base, "format": "json"}) if submitted else "",
        "md_url": "/sweep?" + urlencode({**base, "format": "md"}) if result else "",
    }
    status = 422 if outcome.errors else 200
    return templates.TemplateResponse(request, "sweep.html", context, status_code=status)


SLOTS = ("a", "b", "c", "d")


def _slot_inputs(inputs: Sequence[Input]) -> dict[str, tuple[Input, ...]]:
    """A plan of the comparison: a planner's inputs but the pasted config, named
    "<slot>.<input>". An empty model leaves the plan out."""
    return {
        slot: tuple(
            replace(spec, name=f"{slot}.{spec.name}")
            if spec.name != "model"
            else replace(
                spec,
                name=f"{slot}.model",
                choices=("", *model_ids()),
                default="",
                blank="(no plan)",
            )
            for spec in inputs
            if spec.kind != "textarea"
        )
        for slot in SLOTS
    }


COMPARE_INPUTS = _slot_inputs(TRAINING_INPUTS)
COMPARE_SERVING_INPUTS = _slot_inputs(SERVING_INPUTS)
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
COMPARE_SERVING_EXAMPLE = {
    "kind": "serving",
    "a.model": "llama-3-70b", "a.accelerator": "h100-sxm-80gb", "a.tp": "2",
    "a.precision": "fp8-serving", "a.concurrency": "32",
    "b.model": "llama-3-70b", "b.accelerator": "h200-sxm-141gb", "b.tp": "1",
    "b.precision": "fp8-serving", "b.concurrency": "32",
    "c.model": "llama-3-70b", "c.accelerator": "h100-sxm-80gb", "c.tp": "4",
    "c.precision": "fp8-serving", "c.concurrency": "32",
}  # fmt: skip


@dataclass(frozen=True)
class CompareRow:
    """A row of a comparison: its label, the value of a plan's answer (None: not known), how to
    show it, and which way is better (for the change against the first plan; None: neither)."""

    label: str
    value: Callable[[Mapping[str, Any]], Any]
    shown: Callable[[Any], str]
    better: str | None = None  # "higher" or "lower"


def _fleet_usd_per_hour(r: Mapping[str, Any]) -> float | None:
    price = r["cost"]["price_usd_per_gpu_hour"]
    return None if price is None else price * r["num_gpus"]


def _training_fit(r: Mapping[str, Any]) -> str:
    """A training answer's fit verdict; a plan saved before verdicts existed reads its bool."""
    m = r["memory_per_gpu"]
    verdict = m.get("fit") or ("fits" if m["fits"] else "does_not_fit")
    return {"fits": "yes", "tight": "tight", "does_not_fit": "no"}[verdict]


TRAINING_ROWS = (
    CompareRow("GPUs", lambda r: r["num_gpus"], fmt.num, "lower"),
    CompareRow("Fits", _training_fit, str),
    CompareRow("Memory per GPU", lambda r: r["memory_per_gpu"]["total_bytes"], fmt.gib, "lower"),
    CompareRow("Step time", lambda r: r["time"]["step_s"], fmt.seconds, "lower"),
    CompareRow("Tokens/s", lambda r: r["throughput"]["tokens_per_s"], fmt.num, "higher"),
    CompareRow("Tokens/s per GPU", lambda r: r["throughput"]["tokens_per_s_per_gpu"], fmt.num,
               "higher"),
    CompareRow("MFU", lambda r: r["throughput"]["mfu"], fmt.pct, "higher"),
    CompareRow("Time to train", lambda r: r["cost"]["time_to_train_s"], fmt.seconds, "lower"),
    CompareRow("GPU-hours", lambda r: r["cost"]["gpu_hours"], fmt.num, "lower"),
    CompareRow("Fleet $ per hour", _fleet_usd_per_hour, fmt.usd, "lower"),
    CompareRow("Cost", lambda r: r["cost"]["usd"], fmt.usd, "lower"),
    CompareRow("$ per 1M tokens", lambda r: r["cost"]["usd_per_1m_tokens"], fmt.usd, "lower"),
)  # fmt: skip
SERVING_ROWS = (
    CompareRow("GPUs (replica)", lambda r: r["num_gpus"], fmt.num, "lower"),
    CompareRow("Fits", lambda r: r["memory_per_gpu"]["fits"], lambda v: "yes" if v else "no"),
    CompareRow("Memory per GPU", lambda r: r["memory_per_gpu"]["total_bytes"], fmt.gib, "lower"),
    CompareRow("Max concurrency", lambda r: r["max_concurrency"], fmt.num, "higher"),
    CompareRow("Concurrency", lambda r: r["concurrency"], fmt.num),
    CompareRow("TTFT (at this load)", lambda r: r["latency"]["ttft_s"], fmt.seconds, "lower"),
    CompareRow("TPOT (at this load)", lambda r: r["latency"]["tpot_s"], fmt.seconds, "lower"),
    CompareRow("Output tokens/s", lambda r: r["throughput"]["output_tokens_per_s"], fmt.num,
               "higher"),
    CompareRow("Output tokens/s per GPU",
               lambda r: r["throughput"]["output_tokens_per_s_per_gpu"], fmt.num, "higher"),
    CompareRow("$ per hour (replica)", lambda r: r["cost"]["usd_per_hour"], fmt.usd, "lower"),
    CompareRow("$ per 1M output tokens", lambda r: r["cost"]["usd_per_1m_output_tokens"],
               fmt.usd, "lower"),
    CompareRow("$ per 1M input tokens", lambda r: r["cost"]["usd_per_1m_input_tokens"], fmt.usd,
               "lower"),
)  # fmt: skip


def compare_table(
    rows: Sequence[CompareRow], plans: Sequence[tuple[str, Mapping[str, Any]]]
) -> list[dict[str, Any]]:
    """The comparison's rows: each plan's value shown, and its change against the first plan's
    (a share; None where either is unknown or zero), marked better or worse where that has a
    direction."""
    out = []
    for row in rows:
        values = [row.value(r) for _, r in plans]
        first = values[0] if values else None
        cells = []
        for n, v in enumerate(values):
            delta = None
            numbers = all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in (v, first)
            )
            if n and numbers and first:
                delta = v / first - 1
            verdict = ""
            if delta and row.better:
                verdict = "better" if (delta > 0) == (row.better == "higher") else "worse"
            cells.append(
                {"value": v, "text": "–" if v is None else row.shown(v), "delta": delta,
                 "delta_text": None if delta is None else f"{100 * delta:+.0f}%",
                 "verdict": verdict}
            )  # fmt: skip
        out.append({"label": row.label, "cells": cells})
    return out


def _model_name(model_id: str) -> str:
    """A model as a compared plan names it: its Hugging Face name (``meta-llama/Llama-3.1-70B``
    -> ``Llama-3.1-70B``), else its id (a team model, a pasted config)."""
    try:
        hf_id = team.model_entry(model_id).get("hf_id")
    except (UnknownIdError, KeyError):
        hf_id = None
    return str(hf_id).rsplit("/", 1)[-1] if hf_id else model_id


def _accelerator_name(accelerator_id: str) -> str:
    """An accelerator as a compared plan names it: its catalog name without the vendor and the
    bracketed remark (``NVIDIA H100 NVL 94GB (per GPU)`` -> ``H100 NVL 94GB``), else its id."""
    try:
        a = team.get_accelerator(accelerator_id)
    except UnknownIdError:
        return accelerator_id
    name = a.name.split(" (", 1)[0].strip()
    vendor, _, rest = name.partition(" ")
    return (rest if rest and vendor.lower() == a.vendor.lower() else name) or accelerator_id


# The layout degrees a plan's name shows (tp always, the others where above 1).
NAMED_DEGREES = {
    "training": ("tp", "pp", "cp", "ep", "vp", "dp"),
    "serving": ("tp", "pp", "ep", "dp"),
}


def _plan_parts(kind: str, r: Mapping[str, Any]) -> list[str]:
    """What a compared plan is: its model, GPUs × accelerator, and layout (joined, its name:
    ``Llama-3.1-70B · 8 × H100 SXM 80GB · tp 8``)."""
    lay = r["layout"]
    degrees = [f"{k} {lay[k]}" for k in NAMED_DEGREES[kind] if k == "tp" or (lay.get(k) or 1) > 1]
    return [
        _model_name(r["model"]),
        f"{r['num_gpus']} × {_accelerator_name(r['accelerator'])}",
        " ".join(degrees),
    ]


def plan_names(
    kind: str, results: Sequence[Mapping[str, Any]], differ: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Each compared plan's name, its parts, and its label on the charts. The name says what
    the plan is (``_plan_parts``); plans alike in that are told apart by the inputs in which
    they differ (``differ``, rows of ``input_rows``: "Micro-batch 2"), else by their place.
    A part the same in every plan is marked ``shared`` (the page shows it muted), and the chart
    label keeps only the parts that are not, so the charts' axes read what varies."""
    base = [tuple(_plan_parts(kind, r)) for r in results]
    parts = [list(b) for b in base]
    for i, b in enumerate(base):
        twins = [j for j, other in enumerate(base) if other == b]
        if len(twins) > 1:
            told = [
                f"{row['label']} {row['cells'][i]}"
                for row in differ
                if len({row["cells"][j] for j in twins}) > 1
            ]
            parts[i] += told[:3]
    names = [" · ".join(p) for p in parts]
    for i, name in enumerate(names):
        if names.count(name) > 1:  # the same plan twice (or told apart past three inputs)
            parts[i].append(f"#{i + 1}")
    width = max((len(p) for p in parts), default=0)
    padded = [p + [""] * (width - len(p)) for p in parts]
    shared = [len(results) > 1 and len({p[k] for p in padded}) == 1 for k in range(width)]
    out = []
    for p in padded:
        name = " · ".join(t for t in p if t)
        varies = " · ".join(t for t, same in zip(p, shared, strict=True) if t and not same)
        out.append(
            {
                "name": name,
                "chart": varies or name,
                "parts": [
                    {"text": t, "shared": same} for t, same in zip(p, shared, strict=True) if t
                ],
            }
        )
    return out


_UNSET = object()


def _value_at(body: Mapping[str, Any], path: str) -> Any:
    node: Any = body
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _UNSET
        node = node[part]
    return node


def _input_text(value: Any) -> str:
    """An input's value as the inputs table shows it ("default" where the plan left it to the
    planner)."""
    if value is _UNSET or value is None:
        return "default"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        return "pasted config.json"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}".replace("e+", "e")  # 1e+11 -> 1e11, as the forms take it
    return str(value)


def input_rows(
    plans: Sequence[tuple[Sequence[Input], Mapping[str, Any]]],
) -> dict[str, list[dict[str, Any]]]:
    """The inputs of compared plans side by side, from each plan's form inputs and its request
    body: every input (by its place in the request, labelled as its form labels it) with each
    plan's value, sorted into those that differ between the plans and those the same in all.
    A plan whose kind has no such input shows "—"."""
    labels: dict[str, str] = {}
    for inputs, _ in plans:
        for spec in inputs:
            if spec.kind != "textarea":
                labels.setdefault(spec.path, spec.label)
    paths = [{spec.path for spec in inputs} for inputs, _ in plans]
    out: dict[str, list[dict[str, Any]]] = {"differ": [], "same": []}
    for path, label in labels.items():
        cells = [
            _input_text(_value_at(body, path)) if path in mine else "—"
            for (_, body), mine in zip(plans, paths, strict=True)
        ]
        row = {"key": path, "label": label, "cells": cells}
        out["differ" if len(set(cells)) > 1 else "same"].append(row)
    return out


def compare_figures(kind: str, plans: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The aligned charts of a comparison of training or of serving plans. The bar charts put
    each plan's label under its bars a part a line (``a · b`` -> ``a<br>b``), so that names
    stay level rather than slanting into the legend; the points keep the one-line label."""
    if not plans:
        return {}
    if kind == "serving":
        figures = {
            "memory": charts.compare_memory_figure(plans, charts.inference_terms),
            "latency": charts.compare_latency_figure(plans),
            "curve": charts.compare_curve_figure(plans),
        }
    else:
        figures = {
            "memory": charts.compare_memory_figure(plans, charts.training_terms),
            "time": charts.compare_time_figure(plans),
        }
    labels = [label for label, _ in plans]
    ticks = {"tickvals": labels, "ticktext": [label.replace(" · ", "<br>") for label in labels]}
    for name in ("memory", "time", "latency"):
        if name in figures:
            layout = figures[name]["layout"]
            layout["xaxis"] = {**layout.get("xaxis", {}), **ticks, "tickangle": 0}
    return figures


def _filled(slots: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in slots if s["outcome"].result is not None]


def _name_slots(slots: Sequence[dict[str, Any]], names: Iterator[str], plans: int) -> None:
    """Each plan's form: the one-line summary it shows collapsed (the plan's name; why it was
    not compared; or that it is empty), and whether it opens: where its inputs need a look, and
    the first empty ones while fewer than two plans are compared."""
    empty_open = max(2 - plans, 0)
    for n, slot in enumerate(slots, 1):
        outcome = slot["outcome"]
        if outcome.result is not None:
            slot["summary"], slot["open"] = f"Plan {n}: {next(names)}", False
        elif outcome.errors:
            slot["summary"], slot["open"] = f"Plan {n}: not compared, {outcome.message}", True
        else:
            slot["summary"], slot["open"] = f"Plan {n}: empty (choose a model to add it)", False
            if empty_open:
                slot["open"], empty_open = True, empty_open - 1


@router.get("/compare", response_class=HTMLResponse)
def compare_page(request: Request) -> Response:
    """Two to four training plans, or serving plans (``kind=serving``), side by side: their key
    numbers with the change against the first plan, and aligned charts."""
    query = dict(request.query_params)
    fmt_ = query.pop("format", "html")
    kind = query.get("kind", "training")
    if kind not in ("training", "serving"):
        kind = "training"
    slot_inputs = COMPARE_SERVING_INPUTS if kind == "serving" else COMPARE_INPUTS
    model: type[BaseModel] = InferenceRequest if kind == "serving" else TrainingRequest
    run = inference_answer if kind == "serving" else training_answer
    slots: list[dict[str, Any]] = []
    plans: list[tuple[str, dict[str, Any]]] = []
    bodies: list[tuple[Sequence[Input], dict[str, Any]]] = []
    for slot in SLOTS:
        inputs = slot_inputs[slot]
        outcome = Outcome()
        if query.get(f"{slot}.model"):
            outcome = evaluate(inputs, query, model, run)
            if outcome.result is not None:
                plans.append((f"Plan {slot.upper()}", outcome.result))  # the JSON twin's keys
                body = model.model_validate(request_body(inputs, query)).model_dump(mode="json")
                bodies.append((inputs, body))
        slots.append({"key": slot, "inputs": pickers(inputs), "outcome": outcome})
    if fmt_ == "json":
        return _json(dict(plans))
    rows = SERVING_ROWS if kind == "serving" else TRAINING_ROWS
    inputs_compared = input_rows(bodies)
    names = plan_names(kind, [r for _, r in plans], inputs_compared["differ"])
    _name_slots(slots, iter(n["name"] for n in names), len(plans))
    charted = [(n["chart"], r) for n, (_, r) in zip(names, plans, strict=True)]
    context = {
        "kind": kind,
        "slots": slots,
        "plans": [{**n, "slot": s["key"]} for n, s in zip(names, _filled(slots), strict=True)],
        "table": compare_table(rows, plans),
        "inputs": inputs_compared,
        "figures": compare_figures(kind, charted),
        "query": query,
        "json_url": f"/compare?{request.url.query}&format=json" if plans else "",
        "example_url": "/compare?"
        + urlencode(COMPARE_SERVING_EXAMPLE if kind == "serving" else COMPARE_EXAMPLE),
        "other_url": "/compare" + ("" if kind == "serving" else "?kind=serving"),
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
        "access": write_access(request),
        "imported": imported,
        "error": error,
        "pasted": pasted,
    }
    return templates.TemplateResponse(
        request, "catalog.html", context, status_code=422 if error else 200
    )


ACCURACY_UNITS = {"kernel": "ms", "training": "tokens/s per GPU", "serving": "output tokens/s"}


@router.get("/accuracy", response_class=HTMLResponse)
def accuracy_page(request: Request) -> Response:
    """The validation report in the product: predicted against measured per kind and metric,
    summaries by group, accelerator, family and stack, every record linked to its source;
    filtered by the query (``?format=json``: the JSON twin, as ``GET /api/v1/accuracy``)."""
    query = {k: request.query_params.get(k, "") for k in accuracy.FILTERS}
    try:
        view = accuracy.report_view(query)
    except SpecError as exc:
        if request.query_params.get("format") == "json":
            raise
        view, error = accuracy.report_view({}), f"{exc.field}: {exc.rule}"
    else:
        error = ""
    if request.query_params.get("format") == "json":
        return _json(view)
    panels: dict[str, list[dict[str, Any]]] = {}
    for r in view["records"]:
        panels.setdefault(f"{r['kind']} / {r['metric']}", []).append(r)
    figures = {
        f"accuracy-{i}": charts.accuracy_figure(
            accuracy.KINDS[rows[0]["kind"]]
            + ("" if rows[0]["kind"] in ("training", "serving") else f": {rows[0]['metric']}"),
            ACCURACY_UNITS.get(rows[0]["kind"], rows[0]["unit"]),
            rows,
        )
        for i, (_, rows) in enumerate(sorted(panels.items()))
    }
    context = {
        "view": view,
        "error": error,
        "figures": figures,
        "panels": sorted(panels),
        "json_url": f"/accuracy?{request.url.query}&format=json"
        if request.url.query
        else "/accuracy?format=json",
    }
    return templates.TemplateResponse(
        request, "accuracy.html", context, status_code=422 if error else 200
    )
