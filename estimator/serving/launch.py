"""Launch commands for a serving plan: the replica as vLLM, SGLang and TensorRT-LLM's
``trtllm-serve`` take it (parallelism, context length, sequence cap, token budget, quantization
and KV-cache format), so a plan turns into a deployment.

Flags as the engines document them: vLLM's ``vllm serve`` engine arguments
(``--tensor-parallel-size``, ``--pipeline-parallel-size``, ``--enable-expert-parallel``,
``--max-model-len``, ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--quantization``,
``--kv-cache-dtype``, ``--gpu-memory-utilization``); SGLang's ``sglang.launch_server`` server
arguments (``--tp-size``, ``--ep-size``, ``--context-length``, ``--max-running-requests``,
``--chunked-prefill-size``, ``--quantization``, ``--kv-cache-dtype``); ``trtllm-serve serve``
(``--backend pytorch``, ``--tp_size``, ``--pp_size``, ``--ep_size``, ``--max_batch_size``,
``--max_num_tokens``, ``--max_seq_len``, ``--kv_cache_free_gpu_memory_fraction``; the KV-cache
format in the ``--extra_llm_api_options`` YAML). What a flag cannot say is in ``notes``.

Attention data parallel (``parallel.dp > 1``): vLLM's ``--data-parallel-size`` with
``--enable-expert-parallel`` (its experts then span every DP x TP rank: vLLM's expert-parallel
deployment docs), each DP rank its own scheduler with the per-rank limits; SGLang's
``--enable-dp-attention --dp-size`` with ``--tp-size`` the replica's GPUs (attention TP is
``tp-size / dp-size``) and its ``--max-running-requests`` and ``--chunked-prefill-size`` the
replica's, which SGLang divides over the DP ranks; TensorRT-LLM's ``enable_attention_dp: true``
in the YAML with ``--tp_size`` the replica's GPUs (attention then runs without TP on each rank).

Speculative decoding (a chain of ``k`` drafts, as the estimate models it): vLLM's
``--speculative-config`` JSON (``method`` ``mtp``, ``eagle``, ``eagle3`` or ``draft_model``,
``model``, ``num_speculative_tokens``; vLLM's speculative decoding docs); SGLang's
``--speculative-algorithm`` (``EAGLE`` for MTP and EAGLE-2 heads, ``EAGLE3``, ``STANDALONE`` for a
draft model), ``--speculative-draft-model-path``, ``--speculative-num-steps k``,
``--speculative-eagle-topk 1`` and ``--speculative-num-draft-tokens k + 1`` (SGLang's
speculative decoding docs: a chain has ``k + 1`` draft tokens); TensorRT-LLM's
``speculative_config`` in the YAML (``decoding_type`` ``MTP``, ``Eagle3`` or ``DraftTarget``,
``max_draft_len``, ``speculative_model``; MTP with ``num_nextn_predict_layers`` equal to
``max_draft_len``, DeepSeek models only; its PyTorch backend runs no EAGLE-1/2 head: TensorRT-LLM's
speculative decoding docs). Prefix caching: vLLM's ``--enable-prefix-caching`` (on by default in
V1), SGLang's radix cache (on unless ``--disable-radix-cache``), TensorRT-LLM's
``kv_cache_config.enable_block_reuse`` (default true).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from estimator.layout.parallel import Parallelism
from estimator.spec.precision import Precision
from estimator.spec.speculative import Speculative

__all__ = ["LaunchCommands", "launch_commands"]

ON_THE_FLY = {"fp8"}  # weight formats the engines quantize a 16-bit checkpoint to at load time
HEAD_PATH = "/path/to/{}-head"  # an EAGLE head is a checkpoint of its own, trained for the model
VLLM_METHODS = {"mtp": "mtp", "eagle": "eagle", "eagle3": "eagle3", "draft": "draft_model"}
SGLANG_ALGORITHMS = {"mtp": "EAGLE", "eagle": "EAGLE", "eagle3": "EAGLE3", "draft": "STANDALONE"}
TRTLLM_TYPES = {"mtp": "MTP", "eagle3": "Eagle3", "draft": "DraftTarget"}


@dataclass(frozen=True, slots=True)
class LaunchCommands:
    vllm: str
    sglang: str
    trtllm: str
    notes: tuple[str, ...]


def launch_commands(
    model: str,
    parallel: Parallelism,
    precision: Precision,
    *,
    max_model_len: int,
    max_seqs: int,
    token_budget: int,
    speculative: Speculative | None = None,
    draft_id: str | None = None,
    prefix_caching: bool = False,
    engine: str = "vllm",
    kv_fraction: float | None = None,
    kv_block: int | None = None,
) -> LaunchCommands:
    """The three engines' commands for one replica of ``model`` (a Hugging Face id or a path);
    ``speculative`` with the draft model's id or path (``draft_id``), and ``prefix_caching``
    on where the plan counts on prefix-cache hits. ``max_seqs`` and ``token_budget`` are one
    scheduler's: with attention data parallel, one DP group's. ``kv_fraction`` and
    ``kv_block``, a deployment's KV memory fraction and tokens a block, are ``engine``'s (each
    engine means its own fraction): its command takes them, the others keep their defaults."""
    from estimator.serving.load import ENGINES  # numpy: off the training estimate's imports

    tp, pp, ep, dp = parallel.tp, parallel.pp, parallel.ep, parallel.dp
    weights, kv = precision.weights, precision.kv_cache
    notes: list[str] = []
    spec_vllm, spec_sglang, spec_trtllm = _speculative_flags(speculative, draft_id, notes)
    quant_vllm = quant_sglang = ""
    if weights in ON_THE_FLY:
        quant_vllm, quant_sglang = " --quantization fp8", " --quantization fp8"
        notes.append(
            "--quantization fp8 quantizes a 16-bit checkpoint at load time; leave it out for a"
            " checkpoint that ships FP8 weights (the engines read its quantization_config)."
        )
    elif weights not in ("bf16", "fp16", "fp32"):
        notes.append(
            f"{weights} weights need a checkpoint quantized ahead of time (ModelOpt NVFP4, AWQ,"
            " GPTQ ...): point the commands at it; no flag quantizes to it at load time."
        )
    kv_vllm = " --kv-cache-dtype fp8" if kv == "fp8" else ""
    kv_sglang = " --kv-cache-dtype fp8_e4m3" if kv == "fp8" else ""
    family = "vllm" if engine.startswith("vllm") else engine
    mine = {family: (kv_fraction, kv_block)}
    vllm_fraction, vllm_block = mine.get("vllm", (None, None))
    sglang_fraction, sglang_block = mine.get("sglang", (None, None))
    trtllm_fraction, trtllm_block = mine.get("trtllm", (None, None))
    if kv_fraction is not None or kv_block is not None:
        notes.append(
            f"The KV memory fraction and block size as set are {family}'s (each engine means its"
            " own fraction); the other commands keep their engines' defaults."
        )
    vllm = (
        f"vllm serve {model} --tensor-parallel-size {tp}"
        + (f" --pipeline-parallel-size {pp}" if pp > 1 else "")
        + (f" --data-parallel-size {dp}" if dp > 1 else "")
        + (" --enable-expert-parallel" if ep > 1 else "")
        + f" --max-model-len {max_model_len} --max-num-seqs {max_seqs}"
        + f" --max-num-batched-tokens {token_budget}{quant_vllm}{kv_vllm}"
        + f" --gpu-memory-utilization {vllm_fraction or ENGINES['vllm'].fraction(tp * dp):g}"
        + (f" --block-size {vllm_block}" if vllm_block else "")
        + (" --enable-prefix-caching" if prefix_caching else "")
        + spec_vllm
    )
    sglang = (
        f"python -m sglang.launch_server --model-path {model} --tp-size {tp * dp}"
        + (f" --dp-size {dp} --enable-dp-attention" if dp > 1 else "")
        + (f" --ep-size {ep}" if ep > 1 else "")
        + f" --context-length {max_model_len} --max-running-requests {max_seqs * dp}"
        + f" --chunked-prefill-size {token_budget * dp}{quant_sglang}{kv_sglang}"
        + (f" --mem-fraction-static {sglang_fraction:g}" if sglang_fraction else "")
        + (f" --page-size {sglang_block}" if sglang_block else "")
        + spec_sglang
    )
    if dp > 1 and ep != dp * tp:
        notes.append(
            f"vLLM: --enable-expert-parallel spreads the experts over all {dp * tp} GPUs of the"
            f" DP x TP ranks; it has no flag for the plan's ep = {ep}."
        )
    if dp > 1 and tp > 1:
        notes.append(
            "TensorRT-LLM: enable_attention_dp runs attention without TP on every rank; it has"
            f" no flag for the plan's {tp}-GPU attention groups."
        )
    if pp > 1:
        notes.append(
            f"SGLang: pipeline parallelism ({pp} stages) is a newer server argument; check that"
            " your version has --pp-size, or serve the replica with tensor parallelism."
        )
    cache = (
        ("  dtype: fp8\\n" if kv == "fp8" else "")
        + ("  enable_block_reuse: true\\n" if prefix_caching else "")
        + (f"  tokens_per_block: {trtllm_block}\\n" if trtllm_block else "")
    )
    extra = ("kv_cache_config:\\n" + cache if cache else "") + spec_trtllm
    if dp > 1:
        extra += "enable_attention_dp: true\\n"
    trtllm = (
        f"trtllm-serve serve {model} --backend pytorch --tp_size {tp * dp} --pp_size {pp}"
        + (f" --ep_size {ep}" if ep > 1 else "")
        + f" --max_batch_size {max_seqs} --max_num_tokens {token_budget}"
        + f" --max_seq_len {max_model_len}"
        + " --kv_cache_free_gpu_memory_fraction"
        + f" {trtllm_fraction or ENGINES['trtllm'].fraction(tp * dp):g}"
        + (" --extra_llm_api_options extra.yaml" if extra else "")
    )
    if extra:
        trtllm = f"printf '{extra}' > extra.yaml && " + trtllm
    return LaunchCommands(vllm, sglang, trtllm, tuple(notes))


def _speculative_flags(
    spec: Speculative | None, draft_id: str | None, notes: list[str]
) -> tuple[str, str, str]:
    """(vLLM flag, SGLang flags, TensorRT-LLM YAML lines) of a speculative plan."""
    if spec is None or not spec.drafting:
        return "", "", ""
    k, method = spec.num_tokens, spec.method
    head = draft_id if method == "draft" else HEAD_PATH.format(method)
    config: dict[str, object] = {"method": VLLM_METHODS[method]}
    if method != "mtp":
        config["model"] = head
    config["num_speculative_tokens"] = k
    vllm = f" --speculative-config '{json.dumps(config)}'"
    sglang = f" --speculative-algorithm {SGLANG_ALGORITHMS[method]}"
    if method != "mtp":
        sglang += f" --speculative-draft-model-path {head}"
    sglang += (
        f" --speculative-num-steps {k} --speculative-eagle-topk 1"
        f" --speculative-num-draft-tokens {k + 1}"
    )
    if method in ("eagle", "eagle3"):
        notes.append(
            f"{head}: an {method.upper()} head trained for this model (the EAGLE authors'"
            " yuhuili/* or NVIDIA's and Red Hat's published heads); point the commands at it."
        )
    trtllm = ""
    kind = TRTLLM_TYPES.get(method)
    if kind is None:
        notes.append("TensorRT-LLM: its PyTorch backend runs EAGLE-3 heads only, not EAGLE-1/2.")
    else:
        trtllm = f"speculative_config:\\n  decoding_type: {kind}\\n  max_draft_len: {k}\\n"
        if method == "mtp":
            trtllm += f"  num_nextn_predict_layers: {k}\\n"
            notes.append(
                "TensorRT-LLM runs MTP for DeepSeek-V3/R1 models (its speculative decoding"
                " docs); vLLM and SGLang for the model families they implement it for."
            )
        else:
            trtllm += f"  speculative_model: {head}\\n"
    return vllm, sglang, trtllm
