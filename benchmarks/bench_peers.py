"""The peers side by side: aiconfigurator 0.12.0 and llm-analysis 0.2.2 against LLM Planner on
the project's own serving validation records (max-throughput output tokens/s).

The baseline every later accuracy step is measured against. Prints one table per group of
``GROUPS``: n, median and p90 absolute percentage error (APE = |predicted / measured - 1|) and
the median signed error of ours, of aiconfigurator and of llm-analysis, ours again on exactly
the records each peer could express, and the median wall time per estimate of each tool.

Records: the serving throughput group ``tensorrt_llm_perf_overview_v1.0``
(``validation/records.py``: TensorRT-LLM's offline max-throughput runs, total output tokens/s
of one TP x PP replica), split by accelerator as ``validation/report.md``'s "serving by
accelerator" rows, on the five accelerators aiconfigurator has a perf database for (``GROUPS``),
in file order, at most ``MAX_PER_GROUP`` per group (no group is longer today: every record is
run). Ours are the report's own predictions (``validation.report.serving_rows``); the timed
call is the same two ``estimate_inference`` calls, checked to give the report's number.

aiconfigurator (``aiconfigurator.sdk``, deprecated upstream for aisimulate; pinned): a
``Task(serving_mode="agg", backend_name="trtllm")`` on its system (``GROUPS``), its bundled
Hugging Face config (``AIC_MODELS``), its current TensorRT-LLM perf database (1.3.0rc20 on these
systems: it has no v1.0 data), quant modes set as its own ModelOpt checkpoint reading sets them
(FP8: GEMM, MoE, KV cache and FMHA fp8; FP4: GEMM and MoE nvfp4, KV cache and FMHA fp8), the
record's GPUs and layout as the only parallel candidates (a MoE record's ``ep = tp = N`` is
offered both ways its search expresses it: attention TP N or attention DP N, experts EP N), no
SLA (TTFT and TPOT limits ``UNBOUNDED_MS``, ``pareto_sweep=False``), then its agg search
``sweep.sweep_agg(**task.sweep_agg_kwargs(database=...), max_batch_size=AIC_MAX_BATCH,
top_k=0)``: every batch size of its schedule (1 ... 1024; its own default cap is 512, reported
too) x its context-token grid, the highest ``tokens/s`` (output tokens/s of the replica) kept.

llm-analysis (``LLMAnalysis(...).inference``): its bundled GPU config where it has one
(h100-sxm-80gb), else one built from the catalog's datasheet figures (it bundles no H200,
Blackwell or RTX PRO card); the model from the catalog's shapes (SwiGLU as ``ffn_embed_dim`` =
1.5 x intermediate, exact in weights and FLOPs; Llama 4 Scout's shared expert as one more expert
always routed); w8a8 (FP8) or w4a4 (FP4) with an FP8 KV cache; experts sharded by TP (its
inference splits every GPU's share by tp x ep). It has no scheduler: one static batch, the
largest its memory model fits (at most ``DEFAULT_MAX_BATCH``, ours), output tokens/s =
``total_tokens_per_sec``. Records it cannot express are skipped with the reason: pipeline
parallelism, attention width != hidden size (Qwen3), interleaved dense and MoE layers (Llama 4
Maverick).

The project side runs in the test venv; the peers in their own (``.venv-peers``, ``make
bench-peers``: aiconfigurator pulls pandas, pyarrow, scipy and plotting libraries). This file is
both: ``python -m benchmarks.bench_peers`` exports the records' inputs (never the measured
values) to a temporary JSON file and runs ``.venv-peers/bin/python benchmarks/bench_peers.py
--peer IN --out OUT``, which imports nothing from the project, only the standard library and the
peers.

Run: ``make bench-peers`` (part of ``make bench``). A few minutes on 2 cores, most of it
aiconfigurator's sweeps and its perf-database loads (once per system).
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
PEER_VERSIONS = {"aiconfigurator": "0.12.0", "llm-analysis": "0.2.2"}

SOURCE_GROUP = "tensorrt_llm_perf_overview_v1.0"
# The groups compared: (the report's accelerator id, aiconfigurator's system name).
GROUPS: tuple[tuple[str, str], ...] = (
    ("h100-sxm-80gb", "h100_sxm"),
    ("h200-sxm-141gb", "h200_sxm"),
    ("b200", "b200_sxm"),
    ("gb200", "gb200"),
    ("rtx-pro-6000-bse", "rtx_pro_6000_server"),
)
MAX_PER_GROUP = 40
# Our model id -> the Hugging Face config aiconfigurator bundles (model_configs/). Llama 3.3 70B
# is Llama 3.1 70B's architecture; aiconfigurator bundles the latter.
AIC_MODELS = {
    "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B",
    "llama-3.3-70b": "meta-llama/Meta-Llama-3.1-70B",
    "llama-3.1-405b": "meta-llama/Meta-Llama-3.1-405B",
    "llama-4-scout-17b-16e-instruct": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "llama-4-maverick-17b-128e-instruct": "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
}
# Our serving preset -> the checkpoint's format (the records' FP8 / FP4 ModelOpt checkpoints).
QUANT = {"fp8-serving": "fp8", "nvfp4-serving": "nvfp4"}
AIC_BACKEND = "trtllm"
AIC_MAX_BATCH = 1024  # the last batch size of sweep_agg's schedule
AIC_DEFAULT_MAX_BATCH = 512  # sweep_agg's own default cap (what Task.run() sweeps)
UNBOUNDED_MS = 1e9  # TTFT / TPOT limits: no SLA, the max-throughput scenario
OUR_REPEATS = 5
TOOLS = ("aiconfigurator", "llm-analysis")


# --- the project side (test venv) -------------------------------------------------------------


def _shape(model: Any) -> dict[str, Any]:
    """The shapes llm-analysis's ModelConfig reads, from our ModelSpec."""
    kinds = [model.kinds[i] for i in model.layer_kinds]
    dense = [k for k in kinds if not any(lin.component == "experts" for lin in k.linears)]
    # the MLP's width: its row-parallel (down) projection's input
    ffn = {x.in_features for k in dense for x in k.linears if (x.component, x.tp) == ("mlp", "row")}
    attention = {
        (k.attention.num_heads, k.attention.num_kv_heads, k.attention.qk_head_dim) for k in kinds
    }
    moe = model.moe
    return {
        "hidden": model.hidden_size,
        "layers": model.num_layers,
        "vocab": model.vocab_size,
        "max_seq_len": model.max_seq_len,
        "attention": sorted(attention),
        "gated": model.gated_mlp,
        "dense_layers": len(dense),
        "dense_intermediate": sorted(ffn),
        "moe": None
        if moe is None
        else {
            "experts": moe.num_experts,
            "top_k": moe.top_k,
            "intermediate": moe.expert_intermediate_size,
            "shared_intermediate": moe.shared_intermediate_size,
        },
    }


def _gpu(accelerator: str) -> dict[str, Any]:
    """The datasheet figures a hand-built llm-analysis GPUConfig takes, from our catalog."""
    from estimator import get_accelerator

    acc = get_accelerator(accelerator)
    peak = acc.peak_flop_per_s
    return {
        "name": acc.id,
        "memory_bytes": acc.memory_bytes,
        "hbm_bytes_per_s": acc.hbm_bytes_per_s,
        "scale_up_bytes_per_s": acc.scale_up_bytes_per_s,
        "scale_out_bytes_per_s": acc.scale_out_bytes_per_s,
        "bf16": peak["bf16"],
        "fp8": peak.get("fp8"),
        "fp4": peak.get("fp4"),
    }


def our_estimate(case: Any) -> float:
    """Our output tokens/s of one record, as ``validation.report.serving_rows`` makes it: a
    probe for the concurrency that fits, then the estimate at it (capped at the default)."""
    from estimator import InferenceSetup, Parallelism, get_accelerator, get_precision
    from estimator.serving.estimate import DEFAULT_MAX_BATCH, estimate_inference

    acc = get_accelerator(case.accelerator)
    layout = Parallelism(tp=case.tp, pp=case.pp, ep=case.ep)
    precision = get_precision(case.precision)
    setup = InferenceSetup(case.input_len, case.output_len, 1)
    probe = estimate_inference(case.model, acc, layout, setup, precision)
    concurrency = max(min(probe.max_concurrency, DEFAULT_MAX_BATCH), 1)
    setup = InferenceSetup(case.input_len, case.output_len, concurrency)
    return float(estimate_inference(case.model, acc, layout, setup, precision).output_tokens_per_s)


def collect(max_per_group: int) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The records compared (inputs only: what the peers get) and, by id, what stays here:
    measured, ours, our time per estimate."""
    from estimator.serving.estimate import DEFAULT_MAX_BATCH
    from validation.records import InferenceCase, inference_cases
    from validation.report import serving_rows

    rows = {r.id: r for r in serving_rows()[0]}
    systems = dict(GROUPS)
    taken: dict[str, int] = {}
    exported: list[dict[str, Any]] = []
    kept: dict[str, dict[str, Any]] = {}
    for case in inference_cases():
        if not isinstance(case, InferenceCase) or case.group != SOURCE_GROUP:
            continue
        if case.accelerator not in systems or case.id not in rows:
            continue
        if taken.get(case.accelerator, 0) >= max_per_group:
            continue
        taken[case.accelerator] = taken.get(case.accelerator, 0) + 1
        row = rows[case.id]
        times = []
        for _ in range(OUR_REPEATS):
            start = time.perf_counter()
            value = our_estimate(case)
            times.append(time.perf_counter() - start)
        if abs(value / row.predicted - 1) > 1e-9:
            raise SystemExit(
                f"{case.id}: timed estimate {value} is not the report's {row.predicted}"
            )
        kept[case.id] = {
            "group": case.accelerator,
            "model": case.model_name,
            "measured": row.measured,
            "ours": row.predicted,
            "ours_s": statistics.median(times),
        }
        exported.append(
            {
                "id": case.id,
                "model": case.model.id,
                "aic_model": AIC_MODELS.get(case.model.id),
                "aic_system": systems[case.accelerator],
                "accelerator": case.accelerator,
                "gpus": case.num_gpus,
                "tp": case.tp,
                "pp": case.pp,
                "ep": case.ep,
                "quant": QUANT.get(str(case.precision)),
                "isl": case.input_len,
                "osl": case.output_len,
                "gpu": _gpu(case.accelerator),
                "shape": _shape(case.model),
                "max_batch": DEFAULT_MAX_BATCH,
            }
        )
    return exported, kept


def _ape_stats(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """Median APE, p90 APE (the report's rank rule) and median signed error."""
    signed = [p / m - 1 for p, m in pairs]
    apes = sorted(abs(e) for e in signed)
    p90 = apes[min(len(apes) - 1, round(0.9 * (len(apes) - 1)))]
    return statistics.median(apes), p90, statistics.median(signed)


def _line(name: str, pairs: list[tuple[float, float]], seconds: list[float]) -> str:
    if not pairs:
        return f"  {name:<34} {0:>4}"
    med, p90, signed = _ape_stats(pairs)
    t = statistics.median(seconds) if seconds else float("nan")
    when = f"{t * 1e3:9.1f} ms" if t < 1 else f"{t:9.2f} s "
    return f"  {name:<34} {len(pairs):>4} {med:>8.1%} {p90:>8.1%} {signed:>+8.1%}  {when}"


def _table(title: str, ids: list[str], kept: dict[str, Any], peers: dict[str, Any]) -> list[str]:
    def ours(sel: list[str]) -> tuple[list[tuple[float, float]], list[float]]:
        pairs = [(kept[i]["ours"], kept[i]["measured"]) for i in sel]
        return pairs, [kept[i]["ours_s"] for i in sel]

    head = f"{'n':>4} {'med APE':>8} {'p90 APE':>8} {'signed':>8}  {'time/estimate':>12}"
    out = [
        "",
        f"{title} ({len(ids)} records)",
        f"  {'tool':<34} {head}",
        _line("LLM Planner (ours)", *ours(ids)),
    ]
    results = peers.get("results", {})
    variants: list[tuple[str, str, str]] = [
        ("aiconfigurator", "value", f"aiconfigurator {PEER_VERSIONS['aiconfigurator']}"),
        (
            "aiconfigurator",
            "value_default_cap",
            f"  same, its default cap bs<={AIC_DEFAULT_MAX_BATCH}",
        ),
        ("llm-analysis", "value", f"llm-analysis {PEER_VERSIONS['llm-analysis']}"),
    ]
    for tool, key, name in variants:
        done = [i for i in ids if key in results.get(i, {}).get(tool, {})]
        pairs = [(results[i][tool][key], kept[i]["measured"]) for i in done]
        out.append(_line(name, pairs, [results[i][tool]["s"] for i in done]))
        if key != "value":
            continue
        if len(done) != len(ids):
            out.append(_line("  ours on the same records", *ours(done)))
        skips: dict[str, int] = {}
        for i in ids:
            reason = results.get(i, {}).get(tool, {}).get("skip")
            if reason:
                skips[reason] = skips.get(reason, 0) + 1
        for reason, n in sorted(skips.items(), key=lambda kv: -kv[1]):
            out.append(f"    skipped {n}: {reason}")
    return out


def _by_model(kept: dict[str, dict[str, Any]], peers: dict[str, Any]) -> list[str]:
    """Median APE by model over all groups: each tool on the records it expressed."""
    results = peers.get("results", {})
    out = ["", "By model, median APE (n): ours / aiconfigurator / llm-analysis"]
    for model in sorted({k["model"] for k in kept.values()}):
        ids = [i for i, k in kept.items() if k["model"] == model]
        cells = []
        for tool in (None, *TOOLS):
            pairs = [
                (
                    kept[i]["ours"] if tool is None else results[i][tool]["value"],
                    kept[i]["measured"],
                )
                for i in ids
                if tool is None or "value" in results.get(i, {}).get(tool, {})
            ]
            cells.append(f"{_ape_stats(pairs)[0]:.1%} ({len(pairs)})" if pairs else "-")
        out.append(f"  {model:<36} " + " / ".join(cells))
    return out


def report(kept: dict[str, dict[str, Any]], peers: dict[str, Any]) -> str:
    lines = [
        f"Peers side by side on {SOURCE_GROUP} (max-throughput output tokens/s),"
        f" {len(kept)} records; APE = |predicted / measured - 1|, p90 as validation/report.md",
    ]
    for accelerator, _ in GROUPS:
        ids = [i for i, k in kept.items() if k["group"] == accelerator]
        if ids:
            lines += _table(f"{SOURCE_GROUP} / {accelerator}", ids, kept, peers)
    lines += _table(f"{SOURCE_GROUP}, all five", list(kept), kept, peers)
    lines += _by_model(kept, peers)
    cold = peers.get("cold_s", {})
    if cold:
        lines += [
            "",
            "Time per estimate: the median over records, each timed once from its inputs to the"
            " number (ours: the median of"
            f" {OUR_REPEATS} calls). aiconfigurator's first estimate on each system also loads"
            " its perf database: "
            + ", ".join(f"{s} {t:.1f} s" for s, t in cold.items())
            + f"; importing it took {peers.get('import_s', {}).get('aiconfigurator', 0):.1f} s.",
        ]
    aic = [
        r["aiconfigurator"].get("parallel")
        for r in peers.get("results", {}).values()
        if "value" in r.get("aiconfigurator", {})
    ]
    dp_wins = sum(1 for p in aic if p and int(re.search(r"dp(\d+)", p)[1]) > 1)
    if aic:
        lines.append(f"aiconfigurator chose attention DP on {dp_wins} of {len(aic)} records.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", help="(the peers' side) records JSON to estimate")
    parser.add_argument("--out", help="(the peers' side) where to write the estimates")
    parser.add_argument("--peers-python", default=str(PEERS_PYTHON))
    parser.add_argument("--max-per-group", type=int, default=MAX_PER_GROUP)
    parser.add_argument("--json", help="also write the per-record results here")
    args = parser.parse_args(argv)
    if args.peer:
        return peer_main(Path(args.peer), Path(args.out))
    exported, kept = collect(args.max_per_group)
    peers: dict[str, Any] = {}
    if not Path(args.peers_python).exists():
        print(f"{args.peers_python} not found (make bench-peers creates it): peers skipped")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            records, out = Path(tmp) / "records.json", Path(tmp) / "peers.json"
            records.write_text(json.dumps({"records": exported}), encoding="utf-8")
            start = time.perf_counter()
            subprocess.run(
                [args.peers_python, __file__, "--peer", str(records), "--out", str(out)],
                check=True,
            )
            peers = json.loads(out.read_text(encoding="utf-8"))
            print(f"peers ran in {time.perf_counter() - start:.0f} s ({peers['versions']})")
    print(report(kept, peers))
    if args.json:
        results = peers.get("results", {})
        merged = {i: {**k, **results.get(i, {})} for i, k in kept.items()}
        Path(args.json).write_text(json.dumps(merged, indent=1) + "\n", encoding="utf-8")
    return 0


# --- the peers' side (.venv-peers: the standard library and the peers only) -------------------


def _aic_estimate(rec: dict[str, Any]) -> dict[str, Any]:
    """aiconfigurator's max throughput of one record: its agg search over its batch schedule."""
    from aiconfigurator.sdk import common
    from aiconfigurator.sdk.perf_database import get_database_view
    from aiconfigurator.sdk.sweep import sweep_agg
    from aiconfigurator.sdk.task_v2 import Task

    if rec["aic_model"] is None:
        return {"skip": f"no bundled config for {rec['model']}"}
    if rec["quant"] is None:
        return {"skip": "precision has no checkpoint format here"}
    n, tp, pp, ep = rec["gpus"], rec["tp"], rec["pp"], rec["ep"]
    moe = rec["shape"]["moe"] is not None
    # A MoE record's ep = tp = N: attention TP N or attention DP N (tp x dp = moe_tp x moe_ep)
    attention = {tp, 1} if moe and ep > 1 else {tp}
    task = Task(
        serving_mode="agg",
        model_path=rec["aic_model"],
        system_name=rec["aic_system"],
        backend_name=AIC_BACKEND,
        isl=rec["isl"],
        osl=rec["osl"],
        ttft=UNBOUNDED_MS,
        tpot=UNBOUNDED_MS,
        pareto_sweep=False,
        total_gpus=n,
        agg_num_gpu_candidates=[n],
        agg_tp_candidates=sorted(attention),
        agg_pp_candidates=[pp],
        agg_dp_candidates=sorted({n // (t * pp) for t in attention}),
        agg_moe_tp_candidates=[1],
        agg_moe_ep_candidates=[ep],
        agg_cp_candidates=[1],
        gemm_quant_mode=common.GEMMQuantMode[rec["quant"]],
        moe_quant_mode=common.MoEQuantMode[rec["quant"]],
        kvcache_quant_mode=common.KVCacheQuantMode.fp8,
        fmha_quant_mode=common.FMHAQuantMode.fp8,
    )
    task.validate()
    database = get_database_view(task.system_name, task.backend_name, task.backend_version)
    frame = sweep_agg(
        **task.sweep_agg_kwargs(database=database),
        predictor=task.predictor,
        speculative_profile=task.build_speculative_profile(),
        max_batch_size=AIC_MAX_BATCH,
        top_k=0,
    )
    best = frame.loc[frame["tokens/s"].idxmax()]
    capped = frame[frame["bs"] <= AIC_DEFAULT_MAX_BATCH]
    return {
        "value": float(best["tokens/s"]),
        "value_default_cap": float(capped["tokens/s"].max()),
        "bs": int(best["bs"]),
        "parallel": str(best["parallel"]),
        "version": str(task.backend_version),
    }


def _llma_model(rec: dict[str, Any], config: Any) -> tuple[Any, str]:
    """llm-analysis's ModelConfig for a record's model, or None and why it cannot say it."""
    s = rec["shape"]
    if len(s["attention"]) != 1:
        return None, "layers with different attention shapes"
    heads, kv_heads, head_dim = s["attention"][0]
    if heads * head_dim != s["hidden"]:
        return None, (
            f"attention width heads x head_dim ({heads * head_dim}) != hidden size"
            f" ({s['hidden']}): llm-analysis ties the projections and head size to hidden_dim"
        )
    factor = 1.5 if s["gated"] else 1.0  # its MLP has two matrices; a SwiGLU has three
    moe = s["moe"]
    if moe is None:
        if len(s["dense_intermediate"]) != 1:
            return None, "layers with different MLP widths"
        ffn, experts, top_k = s["dense_intermediate"][0], 1, 1
    else:
        if s["dense_layers"]:
            return None, (
                f"{s['dense_layers']} dense layers among {s['layers']} MoE ones: llm-analysis"
                " has one layer kind"
            )
        shared = moe["shared_intermediate"]
        if shared not in (0, moe["intermediate"]):
            return None, "a shared expert wider than the routed ones"
        ffn = moe["intermediate"]
        experts, top_k = moe["experts"] + bool(shared), moe["top_k"] + bool(shared)
    width = int(factor * ffn)
    return config(
        name=rec["model"],
        num_layers=s["layers"],
        n_head=heads,
        hidden_dim=s["hidden"],
        vocab_size=s["vocab"],
        max_seq_len=s["max_seq_len"],
        num_key_value_heads=kv_heads,
        ffn_embed_dim=width,
        expansion_ratio=width / s["hidden"],
        moe_num_experts=experts,
        moe_top_k=top_k,
    ), ""


def _llma_gpu(rec: dict[str, Any], gpu_config: Any, bundled: Any) -> Any:
    try:
        return bundled(rec["accelerator"])
    except Exception:  # not bundled: the catalog's datasheet figures
        g = rec["gpu"]
        return gpu_config(
            name=g["name"],
            mem_per_GPU_in_GB=g["memory_bytes"] / 2**30,  # it multiplies by 1024**3
            hbm_bandwidth_in_GB_per_sec=g["hbm_bytes_per_s"] / 1e9,
            intra_node_bandwidth_in_GB_per_sec=g["scale_up_bytes_per_s"] / 1e9,
            intra_node_min_message_latency=8e-6,  # its bundled H100's
            peak_fp16_TFLOPS=g["bf16"] / 1e12,
            peak_i8_TFLOPS=g["fp8"] / 1e12 if g["fp8"] else None,
            peak_i4_TFLOPS=g["fp4"] / 1e12 if g["fp4"] else None,
            inter_node_bandwidth_in_GB_per_sec=g["scale_out_bytes_per_s"] / 1e9,
        )


def _llma_estimate(rec: dict[str, Any], llma: dict[str, Any]) -> dict[str, Any]:
    """llm-analysis's throughput of one record: one static batch, the largest that fits."""
    if rec["pp"] > 1:
        return {
            "skip": "pipeline parallelism: its inference keeps every layer's weights on each GPU"
            " and times one stage, with no pipelined micro-batches"
        }
    if rec["quant"] is None:
        return {"skip": "precision has no dtype config"}
    model, why = _llma_model(rec, llma["ModelConfig"])
    if model is None:
        return {"skip": why}
    dtype = llma["dtype"]("w8a8e16" if rec["quant"] == "fp8" else "w4a4e16")
    analysis = llma["LLMAnalysis"](
        model,
        _llma_gpu(rec, llma["GPUConfig"], llma["gpu"]),
        dtype,
        llma["ParallelismConfig"](tp_size=rec["tp"], pp_size=1, ep_size=1),
    )

    def run(batch: int) -> dict[str, Any]:
        return dict(
            analysis.inference(
                batch_size_per_gpu=batch,
                seq_len=rec["isl"],
                num_tokens_to_generate=rec["osl"],
                kv_cache_dtype_bytes=1,
                layernorm_dtype_bytes=2,
            )
        )

    try:
        probe = run(1)
    except AssertionError as exc:
        return {"skip": f"does not fit in its memory model ({str(exc).split(',')[0]})"}
    fits = min(probe["decode_max_batch_size_per_gpu"], probe["prefill_max_batch_size_per_gpu"])
    batch = min(fits, rec["max_batch"])
    while True:
        try:
            summary = run(batch)
            break
        except AssertionError:
            batch = max(1, int(batch * 0.99))
    return {"value": float(summary["total_tokens_per_sec"]), "bs": batch}


def _load_llm_analysis() -> dict[str, Any]:
    import logging

    # Its config module imports transformers only to fetch unknown models from the Hub, which
    # this never does (and there is no network): blocked, as in bench_estimate.
    sys.modules["transformers"] = None  # type: ignore[assignment]
    from llm_analysis.logger import logger

    logger.setLevel(logging.ERROR)
    from llm_analysis.analysis import LLMAnalysis
    from llm_analysis.config import (
        GPUConfig,
        ModelConfig,
        ParallelismConfig,
        get_dtype_config_by_name,
        get_gpu_config_by_name,
    )

    return {
        "LLMAnalysis": LLMAnalysis,
        "GPUConfig": GPUConfig,
        "ModelConfig": ModelConfig,
        "ParallelismConfig": ParallelismConfig,
        "dtype": get_dtype_config_by_name,
        "gpu": get_gpu_config_by_name,
    }


def peer_main(records_path: Path, out_path: Path) -> int:
    import logging
    import warnings
    from importlib.metadata import version

    # sweep_agg's deprecation notice (aisimulate) and its per-point info logs
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    versions = {name: version(name) for name in PEER_VERSIONS}
    if versions != PEER_VERSIONS:
        print(f"warning: peers {versions}, pinned {PEER_VERSIONS}", file=sys.stderr)
    import_s = {}
    start = time.perf_counter()
    for module in ("aiconfigurator.sdk.sweep", "aiconfigurator.sdk.task_v2"):
        importlib.import_module(module)
    import_s["aiconfigurator"] = time.perf_counter() - start
    start = time.perf_counter()
    llma = _load_llm_analysis()
    import_s["llm-analysis"] = time.perf_counter() - start
    records = json.loads(records_path.read_text(encoding="utf-8"))["records"]
    results: dict[str, dict[str, Any]] = {}
    cold: dict[str, float] = {}
    for rec in records:
        mine: dict[str, Any] = {}
        for tool in TOOLS:
            start = time.perf_counter()
            try:
                got = _aic_estimate(rec) if tool == "aiconfigurator" else _llma_estimate(rec, llma)
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [""])[0][:160]
                got = {"skip": f"{type(exc).__name__}: {first}"}
            elapsed = time.perf_counter() - start
            if tool == "aiconfigurator" and rec["aic_system"] not in cold:
                cold[rec["aic_system"]] = elapsed  # loads its perf database: not a timing
            elif "value" in got:
                got["s"] = elapsed
            mine[tool] = got
        results[rec["id"]] = mine
        if "s" not in mine["aiconfigurator"] and "value" in mine["aiconfigurator"]:
            # the cold one's time is kept apart; its value still counts, timed again warm
            start = time.perf_counter()
            _aic_estimate(rec)
            mine["aiconfigurator"]["s"] = time.perf_counter() - start
        print(
            f"  {rec['id']}: "
            + ", ".join(
                f"{t} {mine[t]['value']:,.0f}" if "value" in mine[t] else f"{t} skipped"
                for t in TOOLS
            ),
            file=sys.stderr,
            flush=True,
        )
    out_path.write_text(
        json.dumps(
            {"versions": versions, "import_s": import_s, "cold_s": cold, "results": results}
        ),
        encoding="utf-8",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
