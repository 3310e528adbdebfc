"""The planner pages' forms, read off the request models (``schemas.fields``): a page names the
fields it shows, in order; each field's label, fieldset, placeholder, help and kind of input
come from its declaration. A form's query turns back into the API's request body
(``request_body``), so a page and the API always take the same fields.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from pydantic import BaseModel

from app.schemas.fields import Leaf, leaves
from app.schemas.inference import InferenceRequest
from app.schemas.sweep import ServingSweepRequest, TrainingSweepRequest
from app.schemas.training import TrainingRequest
from app.service.guards import parse_json
from app.settings import current
from app.store import catalog as team
from estimator import PRESETS, accelerator_ids, get_accelerator, get_model, model_ids
from estimator.errors import SpecError

__all__ = [
    "SERVING_INPUTS",
    "SERVING_SWEEP_INPUTS",
    "SWEEP_INPUTS",
    "TRAINING_INPUTS",
    "Input",
    "inputs_of",
    "pickers",
    "request_body",
]


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
    catalog: str = ""  # "models" or "accelerators": choices from a catalog (a picker)
    # a picker's choices by family (models) or vendor (accelerators), each sorted (``pickers``)
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def option_groups(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The choices as the page lists them: (group label, choices), the empty choice first
        in a group of its own (label ""); one unlabelled group where there are no groups."""
        if not self.groups:
            return (("", tuple(self.choices)),)
        blank = (("", ("",)),) if "" in self.choices else ()
        return (*blank, *self.groups)


# The worked example a planner opens on: the model and accelerator its pickers start at.
PAGE_DEFAULTS = {"model": "llama-3-70b", "accelerator": "h100-sxm-80gb"}
CONFIG = Input("config", "…or paste a config.json", "model", "textarea", help="Overrides the model")


def _choices(leaf: Leaf) -> tuple[str, ...]:
    named = leaf.hints.get("choices")
    if named == "models":
        return tuple(model_ids())
    if named == "accelerators":
        return tuple(accelerator_ids())
    if named == "presets":
        return tuple(PRESETS)
    if leaf.kind == "bool":
        return ("true", "false")
    return leaf.values


def _input(leaf: Leaf) -> Input:
    kind = {"bool": "select", "text": "text"}.get(leaf.kind, leaf.kind)
    named = leaf.hints.get("choices")
    choices = _choices(leaf)
    if kind in ("select", "intselect") and leaf.name not in PAGE_DEFAULTS:
        choices = ("", *choices)  # empty: the API's default
    return Input(
        name=leaf.name,
        label=leaf.label,
        path=leaf.path,
        kind=kind,
        choices=choices,
        placeholder=str(leaf.hints.get("placeholder", "")),
        help=leaf.help if kind == "multi" else "",
        group=str(leaf.hints.get("group", "Plan")),
        default=PAGE_DEFAULTS.get(leaf.name, ""),
        blank=str(leaf.hints.get("placeholder") or "default"),  # a select's empty choice
        catalog=str(named) if named in ("models", "accelerators") else "",
    )


def inputs_of(model: type[BaseModel], *paths: str) -> tuple[Input, ...]:
    """The inputs of ``model``'s fields at ``paths``, in that order (``config``: the pasted
    config.json box)."""
    by_path = {leaf.path: leaf for leaf in leaves(model)}
    return tuple(CONFIG if p == "config" else _input(by_path[p]) for p in paths)


def _natural(ident: str) -> tuple[Any, ...]:
    """A sort key that orders the numbers in an id by value: ``llama-2-7b`` before
    ``llama-2-13b``, ``h20`` before ``h100``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", ident.lower()))


def model_family(model_type: str) -> str:
    """A model's family as the picker groups it: its ``model_type``'s leading name, the
    versions and variants of one family together (``llama4`` -> llama, ``qwen3_moe`` -> qwen,
    ``deepseek_v32`` -> deepseek, ``nemotron_h`` -> nemotron, ``gpt_oss`` -> gpt)."""
    lead = re.match(r"[a-z]+", model_type.lower())
    return lead.group(0) if lead else model_type


# How the accelerator picker names a catalog vendor (the catalog's ``vendor`` field).
VENDOR_LABELS = {
    "nvidia": "NVIDIA",
    "amd": "AMD",
    "google": "Google",
    "intel": "Intel",
    "aws": "AWS",
}


def _grouped(keyed: Mapping[str, str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Ids grouped by their key (family, vendor): groups and ids in natural order."""
    groups: dict[str, list[str]] = {}
    for ident, key in keyed.items():
        groups.setdefault(key, []).append(ident)
    return tuple(
        (key, tuple(sorted(ids, key=_natural)))
        for key, ids in sorted(groups.items(), key=lambda kv: kv[0].lower())
    )


@cache
def _catalog_groups(catalog: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The public catalog's models by family, or its accelerators by vendor (read once)."""
    if catalog == "models":
        return _grouped({m: model_family(get_model(m).model_type) for m in model_ids()})
    vendors = {a: get_accelerator(a).vendor for a in accelerator_ids()}
    return _grouped({a: VENDOR_LABELS.get(v, v) for a, v in vendors.items()})


TEAM_GROUP = "team catalog"  # the group a picker lists the team's own entries under


def pickers(inputs: Sequence[Input]) -> tuple[Input, ...]:
    """The inputs as a page shows them: the model and accelerator pickers group their choices
    by family and by vendor, sorted within; those named ``model`` and ``accelerator`` (also
    ``a.model``, ...) list the team catalog's entries after the public ones."""
    catalog = team.current()
    added = {"model": tuple(catalog.models), "accelerator": tuple(catalog.accelerators)}
    out = []
    for spec in inputs:
        if not spec.catalog or spec.kind not in ("select", "multi"):
            out.append(spec)
            continue
        extra = added.get(spec.name.rpartition(".")[2], ())
        groups = _catalog_groups(spec.catalog) + (((TEAM_GROUP, extra),) if extra else ())
        listed = tuple(c for _, choices in groups for c in choices)
        blank = ("",) if "" in spec.choices else ()
        out.append(replace(spec, choices=(*blank, *listed), team=frozenset(extra), groups=groups))
    return tuple(out)


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
    if spec.kind == "bool" or spec.choices == ("", "true", "false"):
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


# the energy fields (``app.schemas.energy``): a sweep's power, and a single plan's with its costs
FACILITY_INPUTS = ("gpu_power_w", "node_overhead", "pue")
ENERGY_INPUTS = (
    *FACILITY_INPUTS,
    "usd_per_kwh",
    "capex_usd_per_gpu",
    "life_years",
    "cost_of_money",
)
TRAINING_INPUTS = inputs_of(
    TrainingRequest,
    "model",
    "accelerator",
    "config",
    "num_gpus",
    "layout.tp",
    "layout.pp",
    "layout.dp",
    "layout.cp",
    "layout.ep",
    "layout.vp",
    "layout.pipeline_split",
    "layout.first_stage_layers",
    "layout.last_stage_layers",
    "layout.pipeline_layout",
    "layout.zero_stage",
    "seq_len",
    "micro_batch_size",
    "global_batch_size",
    "recompute",
    "recompute_modules",
    "mtp_layers",
    "mtp_repeated",
    "activation_convention",
    "chunked_loss",
    "compiled_loss",
    "gradients_per_step",
    "optimizer_in_backward",
    "no_sync_accumulation",
    "precision",
    "finetune",
    "lora_rank",
    "lora_targets",
    "qlora_double_quant",
    "lora_dropout",
    "offload_optimizer",
    "offload_params",
    "offload_activations",
    "offload_activation_layers",
    "host_link_gb_per_s",
    "host_memory_gb_per_gpu",
    "host_memory_gb_per_s",
    "moe_imbalance",
    "moe_capacity_factor",
    "ep_comm_overlap",
    "moe_dispatcher",
    "cuda_graphs",
    "stack",
    "gpus_per_node",
    "scale_up_domain",
    "scale_out_gbit_per_s",
    "oversubscription",
    "tokens",
    "price_usd_per_gpu_hour",
    *ENERGY_INPUTS,
)
SERVING_INPUTS = inputs_of(
    InferenceRequest,
    "model",
    "accelerator",
    "config",
    "layout.tp",
    "layout.pp",
    "layout.dp",
    "layout.ep",
    "precision",
    "input_len",
    "output_len",
    "dataset",
    "concurrency",
    "request_rate",
    "num_prompts",
    "engine",
    "max_num_batched_tokens",
    "max_num_seqs",
    "kv_cache_memory_fraction",
    "kv_block_size",
    "prefix_cache_hit_rate",
    "moe_imbalance",
    "speculative_method",
    "num_speculative_tokens",
    "acceptance_length",
    "draft_model",
    "ttft_target_s",
    "tpot_target_s",
    "gpus_per_node",
    "scale_up_domain",
    "scale_out_gbit_per_s",
    "oversubscription",
    "price_usd_per_gpu_hour",
    *ENERGY_INPUTS,
    "input_per_output",
)
SWEEP_INPUTS = inputs_of(
    TrainingSweepRequest,
    "model",
    "config",
    "accelerator",
    "num_gpus",
    "layout.tp",
    "layout.pp",
    "layout.dp",
    "layout.ep",
    "layout.zero_stage",
    "micro_batch_size",
    "recompute",
    "recompute_modules",
    "mtp_layers",
    "mtp_repeated",
    "precision",
    "stack",
    "ep_comm_overlap",
    "moe_dispatcher",
    "cuda_graphs",
    "seq_len",
    "global_batch_size",
    "finetune",
    "lora_rank",
    "lora_targets",
    "offload_optimizer",
    "offload_params",
    "moe_imbalance",
    "moe_capacity_factor",
    "scale_up_domain",
    "scale_out_gbit_per_s",
    "oversubscription",
    "tokens",
    "deadline_s",
    "min_headroom",
    "budget_usd",
    "objective",
    *FACILITY_INPUTS,
    "sort",
    "page",
)
SERVING_SWEEP_INPUTS = inputs_of(
    ServingSweepRequest,
    "model",
    "config",
    "accelerator",
    "layout.tp",
    "layout.pp",
    "layout.dp",
    "layout.ep",
    "precision",
    "input_len",
    "output_len",
    "dataset",
    "ttft_target_s",
    "tpot_target_s",
    "output_tokens_per_s",
    "request_rate",
    "rate_headroom",
    "engine",
    "max_num_batched_tokens",
    "max_num_seqs",
    "kv_cache_memory_fraction",
    "kv_block_size",
    "disaggregated",
    "kv_overlap",
    "mixed_pools",
    "scale_up_domain",
    "scale_out_gbit_per_s",
    "oversubscription",
    "objective",
    *FACILITY_INPUTS,
    "input_per_output",
    "page",
)
