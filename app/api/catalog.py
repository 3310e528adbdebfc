"""Catalog endpoints: models with their exact parameter counts, accelerators with sources,
precisions, and the import of a pasted or uploaded config.json."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from app.answers import (
    accelerator_out,
    catalog_accelerators,
    catalog_models,
    model_out,
    precisions_out,
    tree_out,
)
from app.api.responses import json_response
from app.deps import settings_of
from app.resolve import resolve_model, run_tree
from app.schemas.catalog import (
    AcceleratorOut,
    ModelSpecOut,
    ModelSummary,
    PrecisionsOut,
    TreeOut,
    TreeRequest,
)
from app.schemas.common import ERROR_RESPONSES, has_model_type
from app.service.errors import ShapeError, TooLarge
from app.service.guards import parse_json
from app.service.isolated import TreeWorker
from app.settings import current
from app.store import catalog as team
from estimator import supported_model_types
from estimator.errors import SpecError

__all__ = ["MAX_CONFIG_BYTES", "router"]

MAX_CONFIG_BYTES = 1_000_000
# The exact tree runs transformers' forward on meta tensors; FLOPs scale exactly with tokens, so
# a few thousand are as good as many and keep the request quick.
EXACT_MAX_TOKENS = 65_536

router = APIRouter(tags=["catalog"], responses=ERROR_RESPONSES)

_IMPORT_BODY = {
    "description": (
        "A Hugging Face config.json (<= 1 MB), as the JSON body or as a multipart file upload "
        f"under 'file'. Families read exactly: {', '.join(supported_model_types())}; others "
        "are read as Llama-style."
    ),
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {"model_type": {"type": "string", "minLength": 1}},
                "required": ["model_type"],
                "additionalProperties": True,
            },
            "example": {
                "model_type": "llama",
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "intermediate_size": 11008,
                "vocab_size": 32000,
            },
        },
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "properties": {"file": {"type": "string", "format": "binary"}},
                "required": ["file"],
                "additionalProperties": False,
            }
        },
    },
    "required": True,
}


@router.get("/models", response_model=list[ModelSummary])
def list_models() -> list[dict[str, Any]]:
    """Every catalog model with its exact parameter counts: the public catalog's, then the
    team's (``scope``)."""
    return catalog_models()


@router.post(
    "/models/import", response_model=ModelSpecOut, openapi_extra={"requestBody": _IMPORT_BODY}
)
async def import_model(request: Request) -> ModelSpecOut:
    """Read a config.json into the planner's spec and exact counts, or name what is missing.
    Nothing in it is executed and nothing is fetched."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "multipart/form-data":
        try:
            form = await request.form(max_files=1, max_fields=1)
        except HTTPException as exc:  # starlette's refusal of a malformed multipart body
            raise ShapeError("file", f"malformed multipart upload: {exc.detail}") from None
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise ShapeError("file", "a multipart upload needs its config.json under 'file'")
        raw = await upload.read(MAX_CONFIG_BYTES + 1)
        field = "file"
    else:
        raw = await request.body()
        field = "body"
    if len(raw) > MAX_CONFIG_BYTES:
        raise TooLarge(MAX_CONFIG_BYTES)
    return await run_in_threadpool(_import, raw, field)


def _import(raw: bytes, field: str) -> ModelSpecOut:
    """Read ``raw`` as a config.json. A JSON body that is not a config breaks the documented
    body schema (``invalid_request``); an uploaded file's content is not described by the
    schema (a binary), so what it lacks is the plan's problem (``invalid_plan``)."""
    refusal = ShapeError if field == "body" else SpecError
    try:
        config = parse_json(raw, field, current().max_json_depth)
    except ShapeError as exc:
        raise refusal(exc.field, exc.rule) from None
    if not isinstance(config, dict):
        raise refusal(field, "must be a JSON object (config.json)", type(config).__name__)
    try:
        has_model_type(config)
    except ValueError as exc:
        raise refusal("model_type", str(exc)) from None
    return model_out(resolve_model(config, "config"), {"config": config})


@router.post("/models/tree", response_model=TreeOut)
async def model_tree(req: TreeRequest, request: Request) -> Response:
    """The model's modules as a tree (layers of one kind summed): parameters, MACs, FLOPs and
    estimated time of one forward of ``batch_size x seq_len`` tokens on one GPU, each as a
    share of the total, and the largest modules at every depth. With ``source=exact``, also
    transformers' own modules, built in a separate process under the exact tree's limits
    (layers, time, queue: docs/deployment.md, "Limits")."""
    model, tree = await run_in_threadpool(run_tree, req)
    out = tree_out(tree, model.id or "custom", req.seq_len, req.batch_size, req.top_k)
    if req.source == "exact":
        limits = settings_of(request.app)
        if req.seq_len * req.batch_size > EXACT_MAX_TOKENS:
            raise SpecError(
                "seq_len",
                f"the exact tree counts at most {EXACT_MAX_TOKENS:,} tokens (seq_len x batch_size)",
                req.seq_len * req.batch_size,
            )
        if model.num_layers > limits.exact_max_layers:
            raise SpecError(
                "model",
                f"the exact tree builds models of at most {limits.exact_max_layers} layers "
                "(PLANNER_EXACT_MAX_LAYERS); use source=analytical",
                model.num_layers,
            )
        config = req.model if isinstance(req.model, dict) else team.model_entry(req.model)["config"]
        out["exact"] = await tree_worker(request.app).run(
            config, req.seq_len, req.batch_size, request.is_disconnected
        )
    return json_response(out)


def tree_worker(app: Any) -> TreeWorker:
    """The app's exact-tree worker, made on first use."""
    worker: TreeWorker | None = getattr(app.state, "tree_worker", None)
    if worker is None:
        limits = settings_of(app)
        worker = app.state.tree_worker = TreeWorker(limits.exact_timeout_s, limits.exact_queue)
    return worker


# After /models/import and /models/tree: a method refused on those paths is answered from
# their own routes (Allow: POST), not from this pattern, which their paths also match.
@router.get("/models/{model_id}", response_model=ModelSpecOut)
def show_model(model_id: str) -> ModelSpecOut:
    """One catalog model (public or the team's): its normalized spec, counts, config and
    sources."""
    return model_out(team.get_model(model_id), team.model_entry(model_id))


@router.get("/accelerators", response_model=list[AcceleratorOut])
def list_accelerators() -> list[AcceleratorOut]:
    """Every catalog accelerator in base units, with sources and its default price: the public
    catalog's, then the team's (``scope``; its default price is the negotiated one)."""
    return catalog_accelerators()


@router.get("/accelerators/{accelerator_id}", response_model=AcceleratorOut)
def show_accelerator(accelerator_id: str) -> AcceleratorOut:
    return accelerator_out(accelerator_id)


@router.get("/precisions", response_model=PrecisionsOut)
def list_precisions() -> PrecisionsOut:
    """Precision presets (data type by role) and the bytes per element of each data type."""
    return precisions_out()
