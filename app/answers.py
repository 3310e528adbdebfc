"""From the core's results to the API's response models, CSV and pages. Nothing is computed
here that the core has not: terms are renamed (units into names) and arranged, never derived,
except the sorting and paging of sweep rows and the serving Pareto front."""

from __future__ import annotations

import csv
import io
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from app.calibration import calibration_dict
from app.energy import energy_answer, token_prices_answer
from app.hub.refs import is_hub_ref
from app.resolve import (
    InferencePlan,
    TrainingPlan,
    engine_of,
    fitting_alternatives,
    group_slots,
    inference_headroom,
    plan_lengths,
    price_for,
    resolve_accelerator,
    run_inference,
    run_training,
    sweep_headroom,
)
from app.run import effective_answer, jobs_answer
from app.schemas.catalog import (
    AcceleratorOut,
    ModelSpecOut,
    Params,
    PrecisionOut,
    PrecisionsOut,
)
from app.store import catalog as team
from estimator import PRESETS, ModelSpec, count_params, model_entry, model_ids
from estimator.accuracy import (
    Plan,
    layout_style,
    plan_accuracy,
    rate_headroom_note,
    time_range,
)
from estimator.counts.layers import LayerTable, ModuleRow
from estimator.counts.tree import ModuleNode, top_modules
from estimator.finetune import FineTune, adapters
from estimator.inputs.accelerator import GIB
from estimator.inputs.cluster import Cluster
from estimator.inputs.lengths import LengthDistribution
from estimator.inputs.precision import DTYPES
from estimator.layout.parallel import Parallelism
from estimator.layout.ranks import RankLayout, gpu_name
from estimator.layout.sharding import serving_layer_split
from estimator.memory.timeline import Timeline
from estimator.memory.training import TrainingMemory
from estimator.memory.verdict import training_fit
from estimator.offload import Offload
from estimator.serving.launch import EngineSettings, launch_commands
from estimator.timing.comms import CommPlan
from estimator.timing.stacks import AUTO_STACK, stack_choice, stack_profile
from estimator.timing.training import BREAKDOWN, TimingOptions, TrainingEstimate

# numpy and the serving and sweep engines are imported where they are used: a training estimate
# on the command line loads none of them (benchmarks/bench_cli.py).
if TYPE_CHECKING:
    import numpy as np

    from app.schemas.inference import InferenceRequest
    from app.schemas.sweep import (
        DisaggregatedOut,
        ServingSweepOut,
        ServingSweepRequest,
        TrainingSweepOut,
        TrainingSweepRequest,
        TrainingSweepRow,
    )
    from app.schemas.training import TrainingRequest
    from estimator.serving.estimate import InferenceEstimate
    from estimator.serving.load import LoadPoint
    from estimator.sweep.disagg import DisaggComparison
    from estimator.sweep.serving import ServingSweep
    from estimator.sweep.training import TrainingSweep

__all__ = [
    "accelerator_out",
    "catalog_accelerators",
    "catalog_models",
    "comm_plan_out",
    "disaggregated_out",
    "inference_out",
    "layer_table_out",
    "model_out",
    "model_summary",
    "needs_fit_suggestions",
    "params_dict",
    "params_of",
    "precisions_out",
    "rank_layout_out",
    "ranks_csv",
    "rows_csv",
    "serving_sweep_out",
    "serving_sweep_rows",
    "timeline_out",
    "training_out",
    "training_sweep_out",
    "training_sweep_rows",
    "tree_out",
]


def params_dict(model: ModelSpec) -> dict[str, Any]:
    """``params_of`` as the plain dict an estimate's JSON holds (no model built and dumped)."""
    c = count_params(model)
    return {"total": c.total, "active": c.active, "by_component": c.by_component()}


def params_of(model: ModelSpec) -> Params:
    return Params(**params_dict(model))


def cluster_dict(c: Cluster) -> dict[str, Any]:
    return {
        "gpus_per_node": c.gpus_per_node,
        "scale_up_domain": c.scale_up_domain,
        "scale_out_gbit_per_s": c.scale_out_bytes_per_s * 8 / 1e9,
        "oversubscription": c.oversubscription,
    }


def finetune_dict(model: ModelSpec, ft: FineTune) -> dict[str, Any]:
    """What a plan trains (``FineTuneOut``)."""
    resolved = adapters(model, ft)
    return {
        "method": ft.method,
        "lora_rank": ft.rank if ft.frozen else None,
        "lora_targets": list(resolved.modules),
        "qlora_double_quant": ft.double_quant if ft.method == "qlora" else None,
        "trainable_params": resolved.trainable_params,
        "total_params": resolved.total_params,
    }


def training_out(plan: TrainingPlan, e: TrainingEstimate) -> dict[str, Any]:
    p, m, t = plan.parallel, e.memory, e.time
    accuracy = training_accuracy(plan, e)
    fit, fit_note = memory_verdict(m, accuracy["metrics"][1])
    return {
        "model": plan.model.id,
        "accelerator": plan.accelerator.id,
        "num_gpus": e.num_gpus,
        "layout": {
            "tp": p.tp,
            "pp": p.pp,
            "dp": p.dp,
            "cp": p.cp,
            "ep": p.ep,
            "etp": p.expert_tp,
            "vp": p.vp,
            "sequence_parallel": p.sequence_parallel,
            "zero_stage": p.zero_stage,
            "distributed_optimizer": p.distributed_optimizer,
            "pipeline_split": "even" if plan.pipeline is None else plan.pipeline.rule,
            "stage_layers": list(
                p.stage_layers or [plan.model.num_layers // (p.pp * p.vp)] * (p.pp * p.vp)
            ),
        },
        "global_batch_size": e.tokens_per_step // plan.setup.seq_len,
        "memory_per_gpu": {
            **m.terms(),
            "total_bytes": m.total_bytes,
            "capacity_bytes": m.capacity_bytes,
            "headroom_bytes": m.capacity_bytes - m.total_bytes,
            "fits": m.fits,
            "fit": fit,
            "fit_note": fit_note,
            "stage": m.stage,
            "params_on_gpu": m.params_on_gpu,
            "trainable_params_on_gpu": m.trainable_params_on_gpu,
            "in_flight_microbatches": m.in_flight_microbatches,
        },
        "time": {
            "step_s": t.step_s,
            "breakdown": {f"{k}_s": v for k, v in t.breakdown.items()},
            "microbatches": t.microbatches,
            "forward_s": t.forward_s,
            "backward_s": t.backward_s,
            "recompute_s": t.recompute_s,
            "stage": t.stage,
        },
        "throughput": {
            "tokens_per_step": e.tokens_per_step,
            "tokens_per_s": e.tokens_per_s,
            "tokens_per_s_per_gpu": e.tokens_per_s_per_gpu,
            "mfu": e.mfu,
            "hfu": e.hfu,
            "model_tflops_per_gpu": e.model_tflops_per_gpu,
            "model_flops_per_step": e.model_flops_per_step,
            "hardware_flops_per_step": e.hardware_flops_per_step,
            "peak_format": e.peak_format,
        },
        "cost": {
            "price_usd_per_gpu_hour": e.price_usd_per_gpu_hour,
            "price_source": plan.price_source,
            "usd_per_1m_tokens": e.usd_per_1m_tokens,
            "tokens": e.tokens,
            "time_to_train_s": e.time_to_train_s,
            "gpu_hours": e.gpu_hours,
            "usd": e.cost_usd,
        },
        **energy_answer(
            plan.accelerator,
            (plan.power, plan.ownership),
            plan.parallel.num_gpus,
            e.tokens_per_s,
            e.time_to_train_s,
            e.price_usd_per_gpu_hour,
        ),
        **run_blocks(plan, e),
        "params": params_dict(plan.model),
        "finetune": finetune_dict(plan.model, plan.setup.finetune),
        "offload": offload_dict(plan.setup.offload, m),
        "cluster": cluster_dict(plan.cluster),
        "stack": stack_dict(plan.options, plan.accelerator.generation, plan.parallel),
        "accuracy": accuracy,
        "fit_suggestions": None,  # filled by the callers that hold the request when it misses
        "exact": plan.model.exact,
        "calibrated": e.calibrated,
        "notes": ([plan.pipeline.description] if plan.pipeline else []) + list(e.notes),
    }


def run_blocks(plan: TrainingPlan, e: TrainingEstimate) -> dict[str, Any]:
    """The run as it really goes (``app.run``): the effective wall-clock and the jobs."""
    effective = effective_answer(plan, e)
    return {**effective, **jobs_answer(plan, e, effective["effective"])}


def memory_verdict(m: TrainingMemory, accuracy: Mapping[str, Any]) -> tuple[str, str]:
    """The plan's fit verdict (``estimator.memory.verdict``), with the likely range of its peak
    where its ``peak_memory`` accuracy metric gives one."""
    low, high = accuracy["range_low"], accuracy["range_high"]
    return training_fit(m, None if low is None or high is None else (low, high))


def training_answer(req: TrainingRequest) -> dict[str, Any]:
    """A training plan's answer: the estimate and, for a plan that does not fit, the nearest
    layouts that do (``app.resolve.fitting_alternatives``)."""
    plan, e = run_training(req)
    return with_fit_suggestions(req, training_out(plan, e))


def inference_answer(req: InferenceRequest) -> dict[str, Any]:
    """A serving plan's answer."""
    return inference_out(req, *run_inference(req))


def with_fit_suggestions(req: TrainingRequest, out: dict[str, Any]) -> dict[str, Any]:
    """A plan whose verdict is not ``fits`` (it does not fit, or is tight) with the nearest
    layouts that surely do."""
    if needs_fit_suggestions(out):
        out["fit_suggestions"] = fitting_alternatives(req)
    return out


def needs_fit_suggestions(out: Mapping[str, Any]) -> bool:
    """Whether a training answer's plan is not surely fitting, so its answer lists the nearest
    layouts that are."""
    return bool(out["memory_per_gpu"]["fit"] != "fits")


def training_accuracy(plan: TrainingPlan, e: TrainingEstimate) -> dict[str, Any]:
    """How right the planner was on published training runs like this plan (estimator.accuracy),
    and the ranges of its throughput and step time that implies."""
    p = plan.parallel
    acc, model = plan.accelerator, plan.model
    matched = Plan(
        accelerator=acc.id, generation=acc.generation, vendor=acc.vendor,
        family=model.model_type, model_class=model.model_class, stack=plan.options.stack,
        gpus=e.num_gpus, style=layout_style(tp=p.tp, pp=p.pp, cp=p.cp, ep=p.ep),
    )  # fmt: skip
    headline = {
        "tokens_per_s_per_gpu": e.tokens_per_s_per_gpu,
        "peak_memory": e.memory.total_bytes / GIB,
    }
    out = plan_accuracy(matched, headline)
    step = time_range(e.time.step_s, out["metrics"][0])
    out["step_s_range"] = list(step) if step else None
    return out


def serving_accuracy(
    req: InferenceRequest, plan: InferencePlan, e: InferenceEstimate, latency: Mapping[str, Any]
) -> dict[str, Any]:
    """How right the planner was on published serving runs like this plan: its throughput
    against offline max-throughput runs, its TTFT and TPOT (``latency_dict``'s, at the plan's
    load) against runs under load."""
    acc, model = plan.accelerator, plan.model
    matched = Plan(
        accelerator=acc.id, generation=acc.generation, vendor=acc.vendor,
        family=model.model_type, model_class=model.model_class, stack=req.engine,
        gpus=e.num_gpus,
    )  # fmt: skip
    headline = {
        "output_tokens_per_s": e.output_tokens_per_s,
        "ttft": latency["ttft_s"],
        "tpot": latency["tpot_s"],
    }
    return plan_accuracy(matched, headline)


def offload_dict(off: Offload, m: TrainingMemory) -> dict[str, Any]:
    """What the plan offloads to host memory, how much, and the host it assumed."""
    return {
        "optimizer": off.optimizer,
        "params": off.params,
        "activations": off.activations,
        "activation_layers": off.activation_layers,
        "host_optimizer_bytes": m.host_optimizer_bytes,
        "host_weights_bytes": m.host_weights_bytes,
        "host_activations_bytes": m.host_activations_bytes,
        "host_bytes": m.host_bytes,
        "host_capacity_bytes": m.host_capacity_bytes,
    }


def _hf_id(model_id: str, placeholder: str = "/path/to/your/model") -> str:
    """A catalog model's Hugging Face id, or a placeholder path (a pasted or team model)."""
    hf_id = model_entry(model_id).get("hf_id") if model_id in model_ids() else None
    return str(hf_id or placeholder)


def launch_dict(req: InferenceRequest, plan: InferencePlan, e: InferenceEstimate) -> dict[str, Any]:
    """The replica's launch commands for vLLM, SGLang and trtllm-serve (catalog models by their
    Hugging Face id; a pasted or team model by a placeholder path), one a node where the replica
    spans the cluster's nodes, the checkpoint served in the format it ships."""
    model = plan.model
    hf_id = (model_entry(model.id).get("hf_id") if model.id in model_ids() else None) or (
        model.id.split("@")[0] if is_hub_ref(model.id) else "/path/to/your/model"
    )  # a fetched model by its Hugging Face repository
    dp = plan.parallel.dp
    preset = engine_of(req).per_group(dp)  # one scheduler's (a DP group's) limits
    spec = plan.setup.speculative
    draft = spec.draft if spec is not None else None
    settings = EngineSettings(
        max_model_len=plan.setup.input_len + plan.setup.output_len,
        max_seqs=max(group_slots(req, plan, e), 1),
        token_budget=preset.token_budget,
        prefix_caching=plan.setup.prefix_cache_hit_rate > 0,
        engine=req.engine,
        kv_fraction=req.kv_cache_memory_fraction,
        kv_block=req.kv_block_size,
    )
    commands = launch_commands(
        hf_id,
        plan.parallel,
        plan.precision,
        settings,
        speculative=spec,
        draft_id=None if draft is None else _hf_id(draft.id, "/path/to/your/draft-model"),
        gpus_per_node=plan.cluster.gpus_per_node,
        checkpoint_quantization=model.checkpoint_quantization,
    )
    return {f.name: getattr(commands, f.name) for f in fields(commands)}


def _record(record: Any) -> dict[str, Any] | None:
    """A frozen result record (a dataclass) as a plain dict, field by field; None stays None."""
    return None if record is None else {f.name: getattr(record, f.name) for f in fields(record)}


def latency_dict(e: InferenceEstimate) -> dict[str, Any]:
    """A serving answer's latency: TTFT and TPOT in the steady state at the load asked for (the
    load model's means and TTFT percentiles; null where the replica is overloaded and its queue
    grows without end), beside a lone request's and its breakdown by part."""
    load = e.load

    def bounded(value: float | None) -> float | None:
        return value if value is not None and math.isfinite(value) else None

    at_load = (
        {"ttft_s": e.ttft_s, "tpot_s": e.tpot_s, "ttft_p50_s": None, "ttft_p90_s": None,
         "ttft_p99_s": None, "basis": "a lone request"}
        if load is None
        else {
            "ttft_s": bounded(load.ttft_s),
            "tpot_s": bounded(load.tpot_s),
            "ttft_p50_s": bounded(load.ttft_p50_s),
            "ttft_p90_s": bounded(load.ttft_p90_s),
            "ttft_p99_s": bounded(load.ttft_p99_s),
            "basis": (
                f"a run of {load.num_prompts} requests at {load_name(load)} ({load.engine})"
                if load.num_prompts is not None
                else f"steady state at {load_name(load)} ({load.engine}, {load.regime})"
            ),
        }
    )  # fmt: skip
    return {
        **at_load,
        "ttft_lone_s": e.ttft_s,
        "tpot_lone_s": e.tpot_s,
        "ttft_breakdown": _latency(e.ttft_breakdown),
        "tpot_breakdown": _latency(e.tpot_breakdown),
    }


def _fleet_need(req: InferenceRequest, e: InferenceEstimate) -> dict[str, Any] | None:
    """With a request rate: the replicas it needs (``serving.estimate.fleet_need``), the
    headroom they keep and where it comes from."""
    f = e.fleet
    if f is None:
        return None
    return {
        "request_rate": f.request_rate,
        "replicas": f.replicas,
        "headroom": f.headroom,
        "headroom_source": inference_headroom(req)[1],
        "within_targets": f.within_targets,
        "rate_per_replica": f.rate_per_replica,
        "planned_rate_per_replica": f.planned_rate_per_replica,
        "fleet_gpus": None if f.replicas is None else f.replicas * e.num_gpus,
        "basis": f.basis,
    }


def _serving_layout_out(req: InferenceRequest, plan: InferencePlan) -> dict[str, Any]:
    """The request's layout with the decoder layers each pipeline stage took (the engine's
    split, or the request's own)."""
    p = plan.parallel
    split = serving_layer_split(plan.model, p.pp, p.stage_layers)
    return {**req.layout.model_dump(), "stage_layers": list(split)}


def _utilization(e: InferenceEstimate) -> float | None:
    """The share of the replica's capacity the load asked for uses (1 when overloaded: it
    runs at capacity); None without a load model."""
    if e.load is None or not e.capacity_output_tokens_per_s:
        return None
    return min(e.output_tokens_per_s / e.capacity_output_tokens_per_s, 1.0)


def load_name(load: LoadPoint) -> str:
    """The load a steady state is at, as people say it."""
    if load.request_rate is not None:
        return f"{load.request_rate:g} requests/s"
    return f"{load.concurrency:g} requests in flight"


def load_dict(load: LoadPoint | None) -> dict[str, Any] | None:
    """A serving answer's steady state under load (``estimator.serving.load``); a latency an
    overloaded replica never reaches (the queue grows without bound) is null."""
    if load is None:
        return None
    out = {f.name: getattr(load, f.name) for f in fields(load)}
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in out.items()}


def lengths_dict(d: LengthDistribution) -> dict[str, Any]:
    """The request lengths an answer assumed: fixed, or a dataset's distribution with its
    means, prompt quantiles, spread and sources."""
    return {
        "name": d.name,
        "label": d.label,
        "mean_input_tokens": d.mean_input,
        "mean_output_tokens": d.mean_output,
        "input_p50_tokens": d.input_quantile(0.5),
        "input_p90_tokens": d.input_quantile(0.9),
        "input_cv": math.sqrt(d.input_scv),
        "sources": list(d.sources),
    }


def stack_dict(
    options: TimingOptions, generation: str | None = None, parallel: Parallelism | None = None
) -> dict[str, Any]:
    """The software stack profile a training answer assumed, as its options applied it (the
    compute factor on an accelerator of ``generation``), and why it timed ``parallel``."""
    profile = stack_profile(options.stack)
    chosen = f"{profile.label}, as requested."
    if parallel is not None and options.auto:
        p = parallel
        chosen = stack_choice(AUTO_STACK, p.tp, p.pp, p.cp, p.ep, p.vp, p.zero_stage)[1]
    return {
        "chosen": chosen,
        "name": profile.name,
        "label": profile.label,
        "attention_kernel": options.attention_kernel,
        "tp_comm_overlap": options.tp_comm_overlap,
        "ep_comm_overlap": options.ep_comm_overlap,
        "moe_dispatcher": options.moe_dispatcher,
        "cuda_graphs": options.cuda_graphs,
        "overlap_grad_reduce": options.overlap_grad_reduce,
        "overlap_param_gather": options.overlap_param_gather,
        "compute_scale": options.scale_for(generation),
        "fitted_on": profile.fitted_on,
    }


def _latency(parts: dict[str, float]) -> dict[str, float]:
    return {f"{k}_s": v for k, v in parts.items()}


def inference_out(
    req: InferenceRequest, plan: InferencePlan, e: InferenceEstimate
) -> dict[str, Any]:
    m = e.memory
    latency = latency_dict(e)
    return {
        "model": plan.model.id,
        "accelerator": plan.accelerator.id,
        "num_gpus": e.num_gpus,
        "layout": _serving_layout_out(req, plan),
        "concurrency": e.concurrency,
        "memory_per_gpu": {
            **m.terms(),
            "total_bytes": m.total_bytes,
            "capacity_bytes": m.capacity_bytes,
            "headroom_bytes": m.capacity_bytes - m.total_bytes,
            "fits": m.fits,
            "prefill_peak_bytes": m.prefill_peak_bytes,
            "decode_peak_bytes": m.decode_peak_bytes,
            "stage": m.stage,
        },
        "kv_cache_bytes_per_token": m.kv_cache_bytes_per_token,
        "kv_cache_bytes_per_sequence": m.kv_cache_bytes_per_sequence,
        "state_bytes_per_sequence": m.state_bytes_per_sequence,
        "max_concurrency": e.max_concurrency,
        "best_concurrency": e.best_concurrency,
        "latency": latency,
        "throughput": {
            "output_tokens_per_s": e.output_tokens_per_s,
            "output_tokens_per_s_per_gpu": e.output_tokens_per_s_per_gpu,
            "input_tokens_per_s": e.input_tokens_per_s,
            "capacity_output_tokens_per_s": e.capacity_output_tokens_per_s,
            "utilization": _utilization(e),
            "basis": latency["basis"],
        },
        "curve": [
            {
                "concurrency": c.concurrency,
                "ttft_s": c.ttft_s,
                "tpot_s": c.tpot_s,
                "output_tokens_per_s": c.output_tokens_per_s,
                "fits": c.fits,
            }
            for c in e.curve
        ],
        "cost": {
            "price_usd_per_gpu_hour": e.price_usd_per_gpu_hour,
            "price_source": plan.price_source,
            "usd_per_hour": e.usd_per_hour,
            "usd_per_1k_output_tokens": e.usd_per_1k_output_tokens,
            "usd_per_1m_output_tokens": e.usd_per_1m_output_tokens,
            "usd_per_1m_output_tokens_decode": e.usd_per_1m_output_tokens_decode,
            "usd_per_1k_input_tokens": e.usd_per_1k_input_tokens,
            "usd_per_1m_input_tokens": e.usd_per_1m_input_tokens,
            "usd_per_1m_output_tokens_at_capacity": e.usd_per_1m_output_tokens_at_capacity,
            "basis": latency["basis"],
        },
        "token_prices": token_prices_answer(e, req.input_per_output),
        **energy_answer(
            plan.accelerator,
            (plan.power, plan.ownership),
            e.num_gpus,
            e.output_tokens_per_s,
            None,
            e.price_usd_per_gpu_hour,
        ),
        "params": params_dict(plan.model),
        "cluster": cluster_dict(plan.cluster),
        "load": load_dict(e.load),
        "fleet": _fleet_need(req, e),
        "lengths": lengths_dict(plan_lengths(plan)),
        "speculative": _record(e.speculative),
        "prefix_cache": _record(e.prefix_cache),
        "launch": launch_dict(req, plan, e),
        "accuracy": serving_accuracy(req, plan, e, latency),
        "calibrated": calibration_dict(e.calibration, req.engine),
        "exact": plan.model.exact,
        "notes": list(e.notes),
    }


def _node_out(n: ModuleNode) -> dict[str, Any]:
    return {
        "name": n.name,
        "repeat": n.repeat,
        "params": n.params,
        "macs": n.macs,
        "flops": n.flops,
        "time_s": n.time_s,
        "shares": n.shares,
        "children": [_node_out(c) for c in n.children],
    }


def tree_out(root: ModuleNode, model_id: str, seq_len: int, batch: int, k: int) -> dict[str, Any]:
    top = {
        measure: {
            str(d): [n.name for n in nodes] for d, nodes in top_modules(root, measure, k).items()
        }
        for measure in ("params", "flops", "time_s")
    }
    return {
        "model": model_id,
        "seq_len": seq_len,
        "batch_size": batch,
        "root": _node_out(root),
        "top": top,
    }


def _module_out(m: ModuleRow) -> dict[str, Any]:
    return {
        f.name: (list(v) if isinstance(v := getattr(m, f.name), tuple) else v) for f in fields(m)
    }


def layer_table_out(t: LayerTable) -> dict[str, Any]:
    return {
        "layers": [
            {
                "kind": layer.kind,
                "layers_in_model": layer.layers_in_model,
                "layers_on_gpu": layer.layers_on_gpu,
                "params_per_gpu": layer.params_per_gpu,
                "resident_params_per_gpu": layer.resident_params_per_gpu,
                "activation_bytes": layer.activation_bytes,
                "modules": [_module_out(m) for m in layer.modules],
                "activations": [{"name": n, "bytes": b} for n, b in layer.activations],
                "tp_collectives": [
                    {"after": a, "collectives": c, "message_bytes": b, "message_shape": list(sh)}
                    for a, c, b, sh in layer.tp_collectives
                ],
            }
            for layer in t.layers
        ],
        "embedding": _module_out(t.embedding),
        "head": None if t.head is None else _module_out(t.head),
        "model_params": t.model_params,
        "model_bytes": t.model_bytes,
        "gpu_bytes": {**t.memory.terms(), "total_bytes": t.memory.total_bytes},
    }


def timeline_out(t: Timeline) -> dict[str, Any]:
    peak = t.peak
    return {
        "points": [
            {"label": p.label, "phase": p.phase, "parts": p.parts, "total_bytes": p.total_bytes}
            for p in t.points
        ],
        "peak_index": t.points.index(peak),
        "peak_bytes": peak.total_bytes,
        "capacity_bytes": t.capacity_bytes,
        "notes": list(t.notes),
    }


def comm_plan_out(plan: CommPlan) -> dict[str, Any]:
    return {
        "microbatches": plan.microbatches,
        "world": plan.world,
        "events": [
            {
                **{f.name: getattr(e, f.name) for f in fields(e)},
                "sent_bytes_per_iteration": e.sent_bytes_per_iteration,
                "time_per_iteration_s": e.time_per_iteration_s,
            }
            for e in plan.events
        ],
        "sent_bytes_per_gpu": plan.sent_bytes_per_gpu,
        "sent_bytes_by_dimension": plan.by_dimension(),
        "cluster_bytes_per_iteration": plan.sent_bytes_per_gpu * plan.world,
    }


def ranks_csv(layout: RankLayout) -> str:
    """One row per rank: its GPU, and per dimension the index of its group and its position
    in it."""
    dims = layout.dimensions
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["rank", "gpu", *(f"{d}_group" for d in dims), *(f"{d}_rank" for d in dims)])
    n = layout.gpus_per_node
    for r in range(layout.world):
        coords = layout.coordinates(r)
        groups = [layout.group_index(d, r) for d in dims]
        writer.writerow([r, gpu_name(r, n), *groups, *(coords[d] for d in dims)])
    return out.getvalue()


def rank_layout_out(layout: RankLayout) -> dict[str, Any]:
    n = layout.gpus_per_node
    return {
        "world": layout.world,
        "gpus_per_node": n,
        "order": "tp-cp-dp-pp (experts: etp-ep-edp-pp), Megatron-LM",
        "complete": layout.complete,
        "dimensions": [
            {
                "dimension": dim,
                "size": layout.sizes[dim],
                "stride": layout.strides[dim],
                "groups": layout.world // layout.sizes[dim],
                "nodes_per_group": layout.nodes_spanned(dim),
                "listed": [[gpu_name(r, n) for r in g] for g in layout.groups[dim]],
            }
            for dim in layout.dimensions
        ],
    }


# --- training sweep ---------------------------------------------------------------------------

_RENAMED = {"zero": "zero_stage", "micro_batch": "micro_batch_size"} | {
    k: f"{k}_s" for k in BREAKDOWN
}


def _renamed(row: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep row with the API's names (units in names, request field names)."""
    return {_RENAMED.get(k, k): v for k, v in row.items()}


def _sweep_rows(s: TrainingSweep, index: np.ndarray | list[int]) -> list[dict[str, Any]]:
    return [_renamed(row) for row in s.rows(index)]


_ORDERS: OrderedDict[tuple[int, str, str], tuple[TrainingSweep, np.ndarray]] = OrderedDict()
_ORDERS_KEPT = 16


def _listed(s: TrainingSweep, rows: str, sort: str) -> np.ndarray:
    """The listed rows (feasible or every evaluated one) in the requested order, kept for the
    last few sweeps so that paging through one does not sort it again."""
    import numpy as np

    key = (id(s), rows, sort)
    hit = _ORDERS.get(key)
    if hit is not None and hit[0] is s:
        return hit[1]
    index = s.feasible if rows == "feasible" else np.arange(len(s))
    ordered = _order(s, index, sort)
    _ORDERS[key] = (s, ordered)
    while len(_ORDERS) > _ORDERS_KEPT:
        _ORDERS.popitem(last=False)
    return ordered


def _order(s: TrainingSweep, index: np.ndarray, sort: str) -> np.ndarray:
    """``index`` sorted by ``sort`` (stable: ties keep evaluation order, so pages are
    deterministic). ``objective``: cheapest first for cost (unpriced last), fastest first
    for time."""
    import numpy as np

    c = s.columns
    if sort == "objective":
        sort = "usd_per_1m_tokens" if s.objective == "cost" else "tokens_per_s"
    if index.size == 0:
        return index
    values = c[sort][index].astype(float)
    if sort == "tokens_per_s":
        values = -values
    values = np.where(np.isnan(values), np.inf, values)
    return index[np.argsort(values, kind="stable")]


def training_sweep_rows(s: TrainingSweep, req: TrainingSweepRequest) -> Iterable[dict[str, Any]]:
    """Every listed row (feasible or evaluated) in the requested order, for the CSV."""
    ordered = _listed(s, req.rows, req.sort)
    for start in range(0, ordered.size, 4096):
        yield from _sweep_rows(s, ordered[start : start + 4096])


def training_sweep_out(s: TrainingSweep, req: TrainingSweepRequest) -> TrainingSweepOut:
    from app.schemas.sweep import Recommendation, TrainingSweepOut, TrainingSweepRow

    ordered = _listed(s, req.rows, req.sort)
    start = (req.page - 1) * req.page_size
    page = ordered[start : start + req.page_size]

    def rows(ix: np.ndarray) -> list[TrainingSweepRow]:
        return [TrainingSweepRow(**r) for r in _sweep_rows(s, ix)]

    return TrainingSweepOut(
        model=s.model_id,
        objective=s.objective,
        counts=s.counts,
        min_headroom=s.workload.min_headroom,
        stacks=list(s.stacks),
        rows_kind=req.rows,
        total_rows=int(ordered.size),
        page=req.page,
        page_size=req.page_size,
        rows=rows(page),
        recommendations=[
            Recommendation(
                rank=r.rank,
                row=TrainingSweepRow(**_renamed(r.row)),
                why=list(r.why),
                tie=r.tie,
            )
            for r in s.recommendations
        ],
        pareto_cost=rows(s.pareto_cost),
        pareto_memory=rows(s.pareto_memory),
        exact=s.exact,
        notes=list(s.notes),
    )


# --- serving sweep ----------------------------------------------------------------------------


def serving_sweep_rows(sweep: ServingSweep, req: ServingSweepRequest) -> list[dict[str, Any]]:
    return [r for r in sweep.rows if r["ok"]] if req.rows == "ok" else list(sweep.rows)


def serving_sweep_out(sweep: ServingSweep, req: ServingSweepRequest) -> ServingSweepOut:
    from app.schemas.sweep import ServingSweepOut, ServingSweepRow

    listed = serving_sweep_rows(sweep, req)
    start = (req.page - 1) * req.page_size
    return ServingSweepOut(
        model=req.model if isinstance(req.model, str) else "custom",
        counts=sweep.counts,
        rows_kind=req.rows,
        total_rows=len(listed),
        page=req.page,
        page_size=req.page_size,
        rows=[ServingSweepRow(**r) for r in listed[start : start + req.page_size]],
        pareto_cost=[ServingSweepRow(**r) for r in sweep.pareto_cost],
        exact=sweep.exact,
        notes=list(sweep.notes) + _rate_notes(req),
        disaggregated=disaggregated_out(sweep.disaggregated),
        widen=sweep.widen,
        **_fleet_fields(sweep, req),
    )


FLEET_CURVES = 3  # served layouts a sweep's replicas-against-rate chart draws
FLEET_POINTS = 40  # rates per curve, 0 to twice the rate asked


def _fleet_fields(sweep: ServingSweep, req: ServingSweepRequest) -> dict[str, Any]:
    """With a request rate: the headroom the fleet was counted with and where it comes from,
    and the cheapest served layouts' replicas against the fleet's rate (``fleet_replicas``)."""
    from estimator.serving.estimate import fleet_replicas

    if req.request_rate is None:
        return {}
    headroom, source = sweep_headroom(req)
    curves = []
    top = 2 * req.request_rate
    rates = [top * (i + 1) / FLEET_POINTS for i in range(FLEET_POINTS)]
    for r in [r for r in sweep.rows if r["ok"] and r.get("rate_per_replica")][:FLEET_CURVES]:
        counts = [fleet_replicas(x, r["rate_per_replica"], headroom) for x in rates]
        curves.append(
            {
                **{k: r[k] for k in ("accelerator", "precision", "tp", "pp", "dp", "ep")},
                "num_gpus": r["num_gpus"],
                "rate_per_replica": r["rate_per_replica"],
                "planned_rate_per_replica": r["planned_rate_per_replica"],
                "points": [
                    {"request_rate": x, "replicas": n, "fleet_gpus": n * r["num_gpus"]}
                    for x, n in zip(rates, counts, strict=True)
                ],
            }
        )
    return {"rate_headroom": headroom, "rate_headroom_source": source, "fleet_curves": curves}


def _rate_notes(req: ServingSweepRequest) -> list[str]:
    """With a request rate: how optimistic the rate within the targets has been on published
    runs (estimator.accuracy)."""
    if req.request_rate is None:
        return []
    note = rate_headroom_note(req.engine)
    headroom, source = sweep_headroom(req)
    kept = (
        f"The replica counts keep {headroom:.0%} headroom on each replica's rate ({source};"
        " rate_headroom sets it, 0 keeps none)."
    )
    return [kept if note is None else f"{note} {kept}"]


def disaggregated_out(c: DisaggComparison | None) -> DisaggregatedOut | None:
    """The comparison of aggregated and disaggregated fleets, field by field."""
    from app.schemas.sweep import DisaggregatedOut

    if c is None:
        return None
    return DisaggregatedOut(**{f.name: getattr(c, f.name) for f in fields(c)})


def rows_csv(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows as CSV with a fixed header (the response model's fields, in order); None is empty."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([r.get(k) for k in columns] for r in rows)
    return out.getvalue()


# --- catalog ----------------------------------------------------------------------------------


def model_summary(model: ModelSpec, hf_id: str | None) -> dict[str, Any]:
    return {
        "id": model.id,
        "scope": team.scope_of("model", model.id) if model.id else "public",
        "hf_id": hf_id,
        "model_type": model.model_type,
        "num_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "vocab_size": model.vocab_size,
        "max_seq_len": model.max_seq_len,
        "moe": model.moe is not None,
        "exact": model.exact,
        "params": params_of(model),
    }


def model_out(model: ModelSpec, entry: dict[str, Any] | None) -> ModelSpecOut:
    moe = model.moe
    return ModelSpecOut(
        **model_summary(model, entry.get("hf_id") if entry else None),
        num_attention_heads=model.num_heads,
        num_key_value_heads=model.num_kv_heads,
        head_dim=model.head_dim,
        intermediate_sizes=list(model.intermediate_sizes),
        num_experts=moe.num_experts if moe else None,
        experts_per_token=moe.top_k if moe else None,
        tied_embeddings=model.tie_embeddings,
        layer_kinds=[
            {
                "name": kind.name,
                "count": n,
                "params_per_layer": kind.params,
                "mixer": (
                    kind.mixer.kind
                    if kind.mixer is not None
                    else "attention"
                    if kind.attention is not None
                    else None
                ),
                "window": kind.attention.window if kind.attention is not None else None,
            }
            for kind, n in zip(model.kinds, model.kind_counts, strict=True)
        ],
        config=entry.get("config") if entry else None,
        sources=list(entry.get("sources", [])) if entry else [],
        notes=list(model.notes) + ([entry["notes"]] if entry and entry.get("notes") else []),
    )


def catalog_models() -> list[dict[str, Any]]:
    """Every model a plan may name: the public catalog's, then the team's."""
    return [
        model_summary(team.get_model(i), team.model_entry(i).get("hf_id"))
        for i in team.model_choices()
    ]


def catalog_accelerators() -> list[AcceleratorOut]:
    return [accelerator_out(i) for i in team.accelerator_choices()]


def accelerator_out(accelerator_id: str) -> AcceleratorOut:
    a = resolve_accelerator(accelerator_id)
    usd, source = price_for(accelerator_id, None)
    return AcceleratorOut(
        id=a.id,
        scope=team.scope_of("accelerator", a.id),
        name=a.name,
        vendor=a.vendor,
        generation=a.generation,
        memory_bytes=a.memory_bytes,
        hbm_bytes_per_s=a.hbm_bytes_per_s,
        peak_flop_per_s=dict(a.peak_flop_per_s),
        scale_up_bytes_per_s=a.scale_up_bytes_per_s,
        scale_up_domain=a.scale_up_domain,
        scale_out_bytes_per_s=a.scale_out_bytes_per_s,
        gpus_per_node=a.gpus_per_node,
        tdp_w=a.tdp_w,
        fp8_any_layout=a.fp8_any_layout,
        price_usd_per_gpu_hour=usd,
        price_source=source,
        notes=a.notes,
        sources=list(a.sources),
    )


def precisions_out() -> PrecisionsOut:
    presets = [
        PrecisionOut(
            name=name,
            roles={f.name: getattr(p, f.name) for f in fields(p) if f.name != "name"},
            compute=p.compute,
        )
        for name, p in PRESETS.items()
    ]
    return PrecisionsOut(presets=presets, dtypes={k: d.bytes for k, d in DTYPES.items()})
