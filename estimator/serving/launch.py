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
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.layout.parallel import Parallelism
from estimator.spec.precision import Precision

__all__ = ["LaunchCommands", "launch_commands"]

ON_THE_FLY = {"fp8"}  # weight formats the engines quantize a 16-bit checkpoint to at load time


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
) -> LaunchCommands:
    """The three engines' commands for one replica of ``model`` (a Hugging Face id or a path)."""
    tp, pp, ep = parallel.tp, parallel.pp, parallel.ep
    weights, kv = precision.weights, precision.kv_cache
    notes: list[str] = []
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
    vllm = (
        f"vllm serve {model} --tensor-parallel-size {tp}"
        + (f" --pipeline-parallel-size {pp}" if pp > 1 else "")
        + (" --enable-expert-parallel" if ep > 1 else "")
        + f" --max-model-len {max_model_len} --max-num-seqs {max_seqs}"
        + f" --max-num-batched-tokens {token_budget}{quant_vllm}{kv_vllm}"
        + " --gpu-memory-utilization 0.9"
    )
    sglang = (
        f"python -m sglang.launch_server --model-path {model} --tp-size {tp}"
        + (f" --ep-size {ep}" if ep > 1 else "")
        + f" --context-length {max_model_len} --max-running-requests {max_seqs}"
        + f" --chunked-prefill-size {token_budget}{quant_sglang}{kv_sglang}"
    )
    if pp > 1:
        notes.append(
            f"SGLang: pipeline parallelism ({pp} stages) is a newer server argument; check that"
            " your version has --pp-size, or serve the replica with tensor parallelism."
        )
    extra = "kv_cache_config:\\n  dtype: fp8\\n" if kv == "fp8" else ""
    trtllm = (
        f"trtllm-serve serve {model} --backend pytorch --tp_size {tp} --pp_size {pp}"
        + (f" --ep_size {ep}" if ep > 1 else "")
        + f" --max_batch_size {max_seqs} --max_num_tokens {token_budget}"
        + f" --max_seq_len {max_model_len} --kv_cache_free_gpu_memory_fraction 0.9"
        + (" --extra_llm_api_options extra.yaml" if extra else "")
    )
    if extra:
        trtllm = f"printf '{extra}' > extra.yaml && " + trtllm
    return LaunchCommands(vllm, sglang, trtllm, tuple(notes))
