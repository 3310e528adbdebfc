"""Launch commands for a serving plan: the replica as vLLM, SGLang and TensorRT-LLM's
``trtllm-serve`` take it (parallelism, context length, sequence cap, token budget, quantization
and KV-cache format), so a plan turns into a deployment, on one node or several.

Flags as the engines document them: vLLM's ``vllm serve`` engine arguments
(``--tensor-parallel-size``, ``--pipeline-parallel-size``, ``--enable-expert-parallel``,
``--max-model-len``, ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--quantization``,
``--kv-cache-dtype``, ``--gpu-memory-utilization``); SGLang's ``sglang.launch_server`` server
arguments (``--tp-size``, ``--pp-size``, ``--ep-size``, ``--context-length``,
``--max-running-requests``, ``--chunked-prefill-size``, ``--quantization``,
``--kv-cache-dtype``); ``trtllm-serve serve``
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
SGLang 0.5.23 (``python/sglang/srt/server_args.py``: a deprecated flag until after 2026-12-31)
spells that ``--attn-dp-size N``; ``--dp-size N --enable-dp-attention`` still starts there and
on every earlier release, so the command keeps it and a note names the new spelling.

A replica over more than one node (``gpus_per_node`` below its GPUs), one command per node,
node 0 the head whose address every command reads from ``$HEAD_NODE_IP``:

- vLLM with attention data parallel whose DP ranks each fit a node: vLLM's multi-node data
  parallel (docs/serving/data_parallel_deployment.md, "Internal Load Balancing"): every node
  ``--data-parallel-size`` (the replica's), ``--data-parallel-size-local`` (its ranks),
  ``--data-parallel-address`` and ``--data-parallel-rpc-port`` (node 0's), the others
  ``--data-parallel-start-rank`` (their first rank) and ``--headless`` (engines only, the API on
  node 0).
- vLLM otherwise (TP or PP over nodes, a DP rank bigger than a node): its multiprocessing
  executor across nodes, ``--nnodes``, ``--node-rank`` and ``--master-addr`` (vllm 0.33.0's
  ``vllm/engine/arg_utils.py`` and ``vllm/config/parallel.py``: ``nnodes > 1`` picks the ``mp``
  backend on CUDA, and with ``--data-parallel-size`` the DP ranks and their local count follow
  from the node rank), ``--headless`` on the nodes past 0 (``vllm/entrypoints/cli/serve.py``:
  headless workers "for multi-node PP/TP"). A vLLM without ``--nnodes`` runs the same replica on
  a Ray cluster (``ray start --head`` / ``ray start --address``, then one ``vllm serve`` with
  ``--distributed-executor-backend ray``: vLLM's parallelism and scaling docs): a note says so.
- SGLang: the same command on every node with ``--nnodes``, ``--node-rank`` and
  ``--dist-init-addr HOST:PORT`` (server_args' ``nnodes``, ``node_rank`` and ``dist_init_addr``:
  "the host address for initializing distributed backend").
- TensorRT-LLM: one MPI world over the nodes, ``srun ... trtllm-llmapi-launch trtllm-serve``
  started once (TensorRT-LLM's trtllm-serve docs, "Multi-node Serving with Slurm";
  ``tensorrt_llm/llmapi/trtllm-llmapi-launch`` makes MPI rank 0 the server under Slurm or
  Open MPI, so ``mpirun`` does too).

Quantization: ``--quantization fp8`` (vLLM, SGLang) quantizes a 16-bit checkpoint at load time.
A checkpoint quantized ahead of time (``checkpoint_quantization``: its config's
``quantization_config.quant_method``, ``ModelSpec.checkpoint_quantization``) is served as it is,
with no ``--quantization``: the engines read the format from the config, and a
``--quantization`` that names another method is refused by vLLM's config check.

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

from estimator.inputs.precision import Precision
from estimator.inputs.speculative import Speculative
from estimator.layout.parallel import Parallelism

__all__ = ["HEAD_NODE", "EngineSettings", "LaunchCommands", "launch_commands"]

ON_THE_FLY = {"fp8"}  # weight formats the engines quantize a 16-bit checkpoint to at load time
HEAD_PATH = "/path/to/{}-head"  # an EAGLE head is a checkpoint of its own, trained for the model
VLLM_METHODS = {"mtp": "mtp", "eagle": "eagle", "eagle3": "eagle3", "draft": "draft_model"}
SGLANG_ALGORITHMS = {"mtp": "EAGLE", "eagle": "EAGLE", "eagle3": "EAGLE3", "draft": "STANDALONE"}
TRTLLM_TYPES = {"mtp": "MTP", "eagle3": "Eagle3", "draft": "DraftTarget"}
# The planner's weight format of a checkpoint's quant_method, where one names it (transformers'
# quantizers: DeepSeek-V3's block FP8 says fp8, Meta's Llama-3.1-405B-Instruct-FP8 fbgemm_fp8,
# gpt-oss mxfp4); others (modelopt, compressed-tensors, awq ...) are served as they are too.
CHECKPOINT_FORMATS = {"fp8": "fp8", "fbgemm_fp8": "fp8", "mxfp4": "mxfp4"}
HEAD_NODE = "$HEAD_NODE_IP"  # node 0's address, a shell variable each node's command reads
VLLM_DP_RPC_PORT = 13345  # the port of vLLM's multi-node data-parallel example (its docs)
SGLANG_DIST_PORT = 5000  # the port of SGLang's multi-node examples (--dist-init-addr HOST:5000)


@dataclass(frozen=True, slots=True)
class LaunchCommands:
    """Each engine's commands for one replica. ``vllm`` and ``sglang`` are the whole deployment:
    one command on one node; across ``nodes`` nodes, node ``i``'s command after a ``# node i``
    line, the same commands ``vllm_nodes`` and ``sglang_nodes`` hold one per node. ``trtllm`` is
    one command on any number of nodes (across nodes, started once through Slurm)."""

    vllm: str
    sglang: str
    trtllm: str
    notes: tuple[str, ...]
    nodes: int = 1
    vllm_nodes: tuple[str, ...] = ()
    sglang_nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """One scheduler's settings as the commands pass them: ``max_model_len`` (a sequence's
    tokens), ``max_seqs`` and ``token_budget`` (a step's sequences and tokens; with attention
    data parallel, one DP group's), ``prefix_caching`` (on where the plan counts on
    prefix-cache hits), and ``engine``'s own KV memory fraction and tokens a block
    (``kv_fraction``, ``kv_block``: each engine means its own fraction, so only ``engine``'s
    command takes them and the others keep their defaults)."""

    max_model_len: int
    max_seqs: int
    token_budget: int
    prefix_caching: bool = False
    engine: str = "vllm"
    kv_fraction: float | None = None
    kv_block: int | None = None


@dataclass(frozen=True, slots=True)
class _Shared:
    """What more than one engine's command reads besides the plan: whether the weights are
    quantized at load time (``--quantization fp8``), the speculative flags (vLLM, SGLang,
    TensorRT-LLM's YAML), the planned pipeline split as the partition variables take it ("":
    the engines' own) and each engine family's KV memory fraction and block size (None: its
    default)."""

    quantize: bool
    speculative: tuple[str, str, str]
    layers: str
    kv: dict[str, tuple[float | None, int | None]]


def launch_commands(
    model: str,
    parallel: Parallelism,
    precision: Precision,
    settings: EngineSettings,
    *,
    speculative: Speculative | None = None,
    draft_id: str | None = None,
    gpus_per_node: int | None = None,
    checkpoint_quantization: str | None = None,
) -> LaunchCommands:
    """The three engines' commands for one replica of ``model`` (a Hugging Face id or a path)
    with one scheduler's ``settings``; ``speculative`` with the draft model's id or path
    (``draft_id``). ``gpus_per_node``: a node's GPUs (the cluster's); a replica over more GPUs
    than that gets one command per node (None: one node holds it). ``checkpoint_quantization``:
    how the checkpoint at ``model`` ships its weights (``ModelSpec.checkpoint_quantization``),
    served as it is."""
    notes: list[str] = []
    shared = _shared(
        parallel, precision, settings, speculative, draft_id, checkpoint_quantization, notes
    )
    head, rest = _vllm_parts(model, parallel, precision, settings, shared)
    sglang = _sglang_command(model, parallel, precision, settings, shared)
    notes.extend(_layout_notes(parallel))
    trtllm, extra = _trtllm_command(model, parallel, precision, settings, shared)
    gpus = parallel.num_gpus
    per_node = gpus_per_node or gpus
    nodes = -(-gpus // per_node)
    vllm_nodes: tuple[str, ...]
    sglang_nodes: tuple[str, ...]
    if nodes == 1:
        vllm = head + rest
        vllm_nodes, sglang_nodes = (vllm,), (sglang,)
    else:
        vllm_nodes = _vllm_nodes(head, rest, parallel, per_node, notes)
        sglang_nodes = tuple(
            sglang + f" --nnodes {nodes} --node-rank {r}"
            f" --dist-init-addr {HEAD_NODE}:{SGLANG_DIST_PORT}"
            for r in range(nodes)
        )
        trtllm = (
            f"srun --nodes {nodes} --ntasks {gpus} --ntasks-per-node {min(per_node, gpus)}"
            f" --mpi=pmix trtllm-llmapi-launch {trtllm}"
        )
        vllm, sglang = _by_node(vllm_nodes), _by_node(sglang_nodes)
        notes.extend(_multi_node_notes(nodes, per_node, gpus, parallel, vllm_nodes))
    if extra:
        trtllm = f"printf '{extra}' > extra.yaml && " + trtllm
    return LaunchCommands(vllm, sglang, trtllm, tuple(notes), nodes, vllm_nodes, sglang_nodes)


def _shared(
    parallel: Parallelism,
    precision: Precision,
    settings: EngineSettings,
    speculative: Speculative | None,
    draft_id: str | None,
    checkpoint_quantization: str | None,
    notes: list[str],
) -> _Shared:
    """The flags more than one engine takes (``_Shared``), with their notes in ``notes``: the
    speculative flags', the weight format's, the KV settings' owner, the pipeline split's."""
    spec = _speculative_flags(speculative, draft_id, notes)
    quantize = _quantizes_at_load(precision, checkpoint_quantization, notes)
    family = "vllm" if settings.engine.startswith("vllm") else settings.engine
    if settings.kv_fraction is not None or settings.kv_block is not None:
        notes.append(
            f"The KV memory fraction and block size as set are {family}'s (each engine means its"
            " own fraction); the other commands keep their engines' defaults."
        )
    layers = ""
    split = parallel.stage_layers
    if parallel.pp > 1 and split is not None:  # the planned split, as each engine's variable
        layers = ",".join(map(str, split))
        notes.append(
            f"The planned pipeline split ({layers} layers a stage) is set by"
            " VLLM_PP_LAYER_PARTITION (vllm/distributed/utils.py, get_pp_indices) and"
            " SGLANG_PP_LAYER_PARTITION; TensorRT-LLM splits as torch.tensor_split does"
            " (tensorrt_llm/mapping.py, pp_layers), its first stages taking the extra layers."
        )
    kv = {family: (settings.kv_fraction, settings.kv_block)}
    return _Shared(quantize, spec, layers, kv)


def _quantizes_at_load(
    precision: Precision, checkpoint_quantization: str | None, notes: list[str]
) -> bool:
    """Whether vLLM and SGLang take ``--quantization fp8`` (a 16-bit checkpoint quantized at
    load time: ``ON_THE_FLY``), with what the weight format asks of the checkpoint in
    ``notes``; a checkpoint quantized ahead of time is served as it is (``_checkpoint_notes``)."""
    weights = precision.weights
    if checkpoint_quantization:
        notes.extend(_checkpoint_notes(checkpoint_quantization, precision))
        return False
    if weights in ON_THE_FLY:
        notes.append(
            "--quantization fp8 quantizes a 16-bit checkpoint at load time; leave it out for a"
            " checkpoint that ships FP8 weights (the engines read its quantization_config)."
        )
        return True
    if weights not in ("bf16", "fp16", "fp32"):
        notes.append(
            f"{weights} weights need a checkpoint quantized ahead of time (ModelOpt NVFP4, AWQ,"
            " GPTQ ...): point the commands at it; no flag quantizes to it at load time."
        )
    return False


def _vllm_parts(
    model: str,
    parallel: Parallelism,
    precision: Precision,
    settings: EngineSettings,
    shared: _Shared,
) -> tuple[str, str]:
    """vLLM's ``vllm serve`` engine arguments, as (the program, the model and the parallel
    flags; the limits, formats and features), which the multi-node forms put their flags
    between (``_vllm_nodes``)."""
    from estimator.serving.load import ENGINES  # numpy: off the training estimate's imports

    tp, pp, ep, dp = parallel.tp, parallel.pp, parallel.ep, parallel.dp
    fraction, block = shared.kv.get("vllm", (None, None))
    env = f"VLLM_PP_LAYER_PARTITION={shared.layers} " if shared.layers else ""
    head = (
        f"{env}vllm serve {model} --tensor-parallel-size {tp}"
        + (f" --pipeline-parallel-size {pp}" if pp > 1 else "")
        + (f" --data-parallel-size {dp}" if dp > 1 else "")
        + (" --enable-expert-parallel" if ep > 1 else "")
    )
    rest = (
        f" --max-model-len {settings.max_model_len} --max-num-seqs {settings.max_seqs}"
        + f" --max-num-batched-tokens {settings.token_budget}"
        + (" --quantization fp8" if shared.quantize else "")
        + (" --kv-cache-dtype fp8" if precision.kv_cache == "fp8" else "")
        + f" --gpu-memory-utilization {fraction or ENGINES['vllm'].fraction(tp * dp):g}"
        + (f" --block-size {block}" if block else "")
        + (" --enable-prefix-caching" if settings.prefix_caching else "")
        + shared.speculative[0]
    )
    return head, rest


def _sglang_command(
    model: str,
    parallel: Parallelism,
    precision: Precision,
    settings: EngineSettings,
    shared: _Shared,
) -> str:
    """SGLang's ``sglang.launch_server`` on one node: ``--tp-size`` the replica's GPUs, its
    request cap and chunk size the replica's (it divides them over the DP ranks)."""
    tp, pp, ep, dp = parallel.tp, parallel.pp, parallel.ep, parallel.dp
    fraction, block = shared.kv.get("sglang", (None, None))
    env = f"SGLANG_PP_LAYER_PARTITION={shared.layers} " if shared.layers else ""
    return (
        f"{env}python -m sglang.launch_server --model-path {model} --tp-size {tp * dp}"
        + (f" --pp-size {pp}" if pp > 1 else "")
        + (f" --dp-size {dp} --enable-dp-attention" if dp > 1 else "")
        + (f" --ep-size {ep}" if ep > 1 else "")
        + f" --context-length {settings.max_model_len}"
        + f" --max-running-requests {settings.max_seqs * dp}"
        + f" --chunked-prefill-size {settings.token_budget * dp}"
        + (" --quantization fp8" if shared.quantize else "")
        + (" --kv-cache-dtype fp8_e4m3" if precision.kv_cache == "fp8" else "")
        + (f" --mem-fraction-static {fraction:g}" if fraction else "")
        + (f" --page-size {block}" if block else "")
        + shared.speculative[1]
    )


def _layout_notes(parallel: Parallelism) -> list[str]:
    """What the engines' flags cannot say of a layout with attention data parallel or
    pipeline stages."""
    tp, pp, ep, dp = parallel.tp, parallel.pp, parallel.ep, parallel.dp
    out = []
    if dp > 1:
        out.append(
            f"SGLang: newer releases spell --dp-size {dp} --enable-dp-attention as"
            f" --attn-dp-size {dp} (0.5.23 still takes both); the command keeps the spelling every"
            " release takes."
        )
    if dp > 1 and ep != dp * tp:
        out.append(
            f"vLLM: --enable-expert-parallel spreads the experts over all {dp * tp} GPUs of the"
            f" DP x TP ranks; it has no flag for the plan's ep = {ep}."
        )
    if dp > 1 and tp > 1:
        out.append(
            "TensorRT-LLM: enable_attention_dp runs attention without TP on every rank; it has"
            f" no flag for the plan's {tp}-GPU attention groups."
        )
    if pp > 1:
        out.append(
            f"SGLang: --pp-size ({pp} pipeline stages) is a newer server argument (0.5.23 has"
            " it); on a release without it, serve the replica with tensor parallelism."
        )
    return out


def _trtllm_command(
    model: str,
    parallel: Parallelism,
    precision: Precision,
    settings: EngineSettings,
    shared: _Shared,
) -> tuple[str, str]:
    """TensorRT-LLM's ``trtllm-serve serve`` on one MPI world, and the lines of its
    ``--extra_llm_api_options`` YAML (the KV-cache config, speculative config and attention
    data parallel; "": none)."""
    from estimator.serving.load import ENGINES  # numpy: off the training estimate's imports

    tp, pp, ep, dp = parallel.tp, parallel.pp, parallel.ep, parallel.dp
    fraction, block = shared.kv.get("trtllm", (None, None))
    cache = (
        ("  dtype: fp8\\n" if precision.kv_cache == "fp8" else "")
        + ("  enable_block_reuse: true\\n" if settings.prefix_caching else "")
        + (f"  tokens_per_block: {block}\\n" if block else "")
    )
    extra = ("kv_cache_config:\\n" + cache if cache else "") + shared.speculative[2]
    if dp > 1:
        extra += "enable_attention_dp: true\\n"
    command = (
        f"trtllm-serve serve {model} --backend pytorch --tp_size {tp * dp} --pp_size {pp}"
        + (f" --ep_size {ep}" if ep > 1 else "")
        + f" --max_batch_size {settings.max_seqs} --max_num_tokens {settings.token_budget}"
        + f" --max_seq_len {settings.max_model_len}"
        + " --kv_cache_free_gpu_memory_fraction"
        + f" {fraction or ENGINES['trtllm'].fraction(tp * dp):g}"
        + (" --extra_llm_api_options extra.yaml" if extra else "")
    )
    return command, extra


def _checkpoint_notes(shipped: str, precision: Precision) -> list[str]:
    """What the commands do with a checkpoint quantized ahead of time, and where the plan's
    weight format is not the checkpoint's (a known one: ``CHECKPOINT_FORMATS``)."""
    out = [
        f"The checkpoint ships {shipped} weights (its config's quantization_config): the commands"
        " serve it as it is, with no --quantization flag (the engines read the format from the"
        " config)."
    ]
    planned = {precision.weights, precision.expert_format}
    fmt = CHECKPOINT_FORMATS.get(shipped)
    if fmt is not None and fmt not in planned:
        out.append(
            f"The plan's {precision.weights} weights are not the checkpoint's {fmt}: served as it"
            f" is the checkpoint runs {fmt}; to serve {precision.weights}, point the commands at a"
            " checkpoint in that format (a 16-bit one for bf16)."
        )
    return out


def _vllm_nodes(
    head: str, rest: str, parallel: Parallelism, per_node: int, notes: list[str]
) -> tuple[str, ...]:
    """vLLM's command on each node of a replica over several (the module docstring's forms):
    multi-node data parallel where each DP rank fits a node, else ``--nnodes`` across them."""
    dp, rank_gpus = parallel.dp, parallel.num_gpus // parallel.dp
    if dp > 1 and rank_gpus <= per_node:
        local = per_node // rank_gpus
        where = f" --data-parallel-address {HEAD_NODE} --data-parallel-rpc-port {VLLM_DP_RPC_PORT}"
        out = []
        for start in range(0, dp, local):
            here = min(local, dp - start)
            out.append(
                head
                + (" --headless" if start else "")
                + f" --data-parallel-size-local {here}"
                + (f" --data-parallel-start-rank {start}" if start else "")
                + where
                + rest
            )
        return tuple(out)
    nodes = -(-parallel.num_gpus // per_node)
    if parallel.num_gpus % nodes or (dp > 1 and nodes % dp):
        notes.append(
            f"vLLM: --nnodes {nodes} needs the replica's {parallel.num_gpus} GPUs split evenly"
            + (f" and its {dp} DP ranks on whole nodes" if dp > 1 else "")
            + f" over the nodes; choose a layout that does, on {per_node}-GPU nodes."
        )
    return tuple(
        head
        + f" --nnodes {nodes} --node-rank {r} --master-addr {HEAD_NODE}"
        + (" --headless" if r else "")
        + rest
        for r in range(nodes)
    )


def _by_node(commands: tuple[str, ...]) -> str:
    """Per-node commands as one block: node ``i``'s after a ``# node i`` line."""
    lines: list[str] = []
    for i, c in enumerate(commands):
        lines += [f"# node {i}" + (f" (the head: {HEAD_NODE})" if i == 0 else ""), c]
    return "\n".join(lines)


def _multi_node_notes(
    nodes: int, per_node: int, gpus: int, parallel: Parallelism, vllm_nodes: tuple[str, ...]
) -> list[str]:
    """How to run a replica over ``nodes`` nodes: the head's address, each engine's form."""
    out = [
        f"The replica's {gpus} GPUs span {nodes} nodes of {per_node}: run node i's command on"
        f" node i, with HEAD_NODE_IP set on every node to node 0's address on the network the"
        " nodes reach each other over (export HEAD_NODE_IP=10.0.0.1, your head's address); the"
        " API is served from node 0. The checkpoint must be at the same path on every node."
    ]
    if "--nnodes" in vllm_nodes[0]:
        out.append(
            "vLLM: --nnodes, --node-rank and --master-addr run its multiprocessing executor"
            " across the nodes (the nodes past 0 --headless). On a vLLM whose vllm serve has no"
            f" --nnodes, start a Ray cluster (ray start --head --port 6379 on node 0, ray start"
            f" --address {HEAD_NODE}:6379 on the others) and run node 0's command alone, without"
            " those three flags, with --distributed-executor-backend ray."
        )
    else:
        out.append(
            "vLLM: multi-node data parallel, each node running its --data-parallel-size-local"
            " ranks; the nodes past 0 run --headless (engines only) and reach node 0 at"
            f" --data-parallel-address, port {VLLM_DP_RPC_PORT} (--data-parallel-rpc-port)."
        )
    out.append(
        f"SGLang: the same command on every node with its --node-rank; port {SGLANG_DIST_PORT}"
        " on node 0 (--dist-init-addr) must be free and reachable from the others."
    )
    out.append(
        f"TensorRT-LLM: one MPI world over the {nodes} nodes, started once from a Slurm"
        f" allocation of them (srun: {min(per_node, gpus)} ranks a node; trtllm-llmapi-launch"
        " makes rank 0 the server). Without Slurm, mpirun does the same from node 0:"
        f" mpirun -H {HEAD_NODE}:{per_node},$NODE_1_IP:{per_node},... -n {gpus}"
        " trtllm-llmapi-launch trtllm-serve serve .... extra.yaml must be on a path every node"
        " sees."
    )
    if parallel.ep > 1:
        out.append(
            "Expert parallelism across nodes: both engines have all-to-all backends over RDMA"
            " (vLLM --all2all-backend deepep_high_throughput or deepep_low_latency, SGLang"
            " --moe-a2a-backend deepep; DeepEP installed on every node); the commands keep their"
            " defaults."
        )
    return out


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
