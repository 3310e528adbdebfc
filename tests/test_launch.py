"""Launch commands that start (issue 39 item 7): a replica over several nodes gets one command
per node in each engine's own multi-node form, with the head's address an obvious placeholder;
a checkpoint that ships FP8 is served as it is, with no ``--quantization fp8``.

The flags are checked, after ``shlex.split``, against the argument names the engines define:
the names below are copied from the sources cited beside each set.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from app.answers import launch_dict
from app.resolve import run_inference
from app.schemas.inference import InferenceRequest
from estimator.catalog import get_model
from estimator.inputs.config import model_from_config
from estimator.inputs.precision import get_precision
from estimator.layout.parallel import Parallelism
from estimator.serving.launch import HEAD_NODE, EngineSettings, LaunchCommands, launch_commands

# vllm 0.33.0 (PyPI wheel): vllm/engine/arg_utils.py, EngineArgs.add_cli_args
# (parallel_group: --distributed-executor-backend, --pipeline-parallel-size, --master-addr,
# --master-port, --nnodes, --node-rank, --tensor-parallel-size, --data-parallel-size,
# --data-parallel-start-rank, --data-parallel-size-local, --data-parallel-address,
# --data-parallel-rpc-port, --enable-expert-parallel; cache_group, scheduler_group, model_group
# and vllm_group for the rest) and vllm/entrypoints/common/cli_args.py (--headless).
VLLM_FLAGS = {
    "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
    "--data-parallel-size-local", "--data-parallel-start-rank", "--data-parallel-address",
    "--data-parallel-rpc-port", "--enable-expert-parallel", "--nnodes", "--node-rank",
    "--master-addr", "--master-port", "--distributed-executor-backend", "--headless",
    "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--quantization",
    "--kv-cache-dtype", "--gpu-memory-utilization", "--block-size", "--enable-prefix-caching",
    "--speculative-config",
}  # fmt: skip
# sglang 0.5.23 (PyPI wheel): python/sglang/srt/arg_groups/fields/{model,parallel,schedule,spec}.py,
# each field's flag "--" + its name with "-" for "_" (arg_groups/arg_utils.py): model_path,
# tp_size, pp_size, dp_size, ep_size, nnodes, node_rank, dist_init_addr, context_length,
# quantization, kv_cache_dtype, max_running_requests, chunked_prefill_size, mem_fraction_static,
# page_size, speculative_*; --enable-dp-attention registered in server_args.py add_cli_args.
SGLANG_FLAGS = {
    "--model-path", "--tp-size", "--pp-size", "--dp-size", "--enable-dp-attention", "--ep-size",
    "--nnodes", "--node-rank", "--dist-init-addr", "--context-length", "--max-running-requests",
    "--chunked-prefill-size", "--quantization", "--kv-cache-dtype", "--mem-fraction-static",
    "--page-size", "--speculative-algorithm", "--speculative-draft-model-path",
    "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
}  # fmt: skip
# TensorRT-LLM: tensorrt_llm/commands/serve.py, the click options of ``serve``.
TRTLLM_FLAGS = {
    "--backend", "--tp_size", "--pp_size", "--ep_size", "--max_batch_size", "--max_num_tokens",
    "--max_seq_len", "--kv_cache_free_gpu_memory_fraction", "--extra_llm_api_options",
}  # fmt: skip
# Slurm's srun options, as TensorRT-LLM's trtllm-serve docs ("Multi-node Serving with Slurm")
# launch trtllm-llmapi-launch with them.
SRUN_FLAGS = {"--nodes", "--ntasks", "--ntasks-per-node", "--mpi"}

DSV3 = "deepseek-ai/DeepSeek-V3"
FP8 = get_precision("fp8-serving")
BF16 = get_precision("bf16")
DP16 = Parallelism(tp=1, dp=16, ep=16)
TP16 = Parallelism(tp=16, ep=16)
TP8_PP2 = Parallelism(tp=8, pp=2, ep=8)


SETTINGS = EngineSettings(max_model_len=2048, max_seqs=64, token_budget=8192)


def _commands(parallel: Parallelism, **kw: Any) -> LaunchCommands:
    """DeepSeek-V3 on 8-GPU nodes (H100 SXM HGX), its checkpoint's FP8 served as it is."""
    args: dict[str, Any] = {"gpus_per_node": 8, "checkpoint_quantization": "fp8", **kw}
    return launch_commands(DSV3, parallel, FP8, SETTINGS, **args)


def _flags(command: str, program: tuple[str, ...]) -> dict[str, str | None]:
    """A command's flags, after ``program`` (its leading words): a flag's value, or None for a
    switch. Raises where the command does not start with ``program``."""
    words = shlex.split(command)
    if tuple(words[: len(program)]) != program:
        raise AssertionError(f"{command!r} does not start with {program}")
    rest, out = words[len(program) :], {}
    for i, word in enumerate(rest):
        if word.startswith("--"):
            name, _, inline = word.partition("=")
            following = rest[i + 1] if i + 1 < len(rest) else None
            value = inline or (
                None if following is None or following.startswith("--") else following
            )
            out[name] = value
    return out


def _vllm(command: str) -> dict[str, str | None]:
    flags = _flags(command, ("vllm", "serve", DSV3))
    assert set(flags) <= VLLM_FLAGS, set(flags) - VLLM_FLAGS
    return flags


def _sglang(command: str) -> dict[str, str | None]:
    flags = _flags(command, ("python", "-m", "sglang.launch_server"))
    assert set(flags) <= SGLANG_FLAGS, set(flags) - SGLANG_FLAGS
    return flags


def test_a_replica_on_one_node_keeps_its_commands() -> None:
    """One node holds the replica (8 GPUs on an 8-GPU node): the command is the one it was, and
    the only one."""
    c = _commands(Parallelism(tp=8, ep=8))
    assert c.vllm == (
        f"vllm serve {DSV3} --tensor-parallel-size 8 --enable-expert-parallel"
        " --max-model-len 2048 --max-num-seqs 64 --max-num-batched-tokens 8192"
        " --kv-cache-dtype fp8 --gpu-memory-utilization 0.9"
    )
    assert c.sglang == (
        f"python -m sglang.launch_server --model-path {DSV3} --tp-size 8 --ep-size 8"
        " --context-length 2048 --max-running-requests 64 --chunked-prefill-size 8192"
        " --kv-cache-dtype fp8_e4m3"
    )
    assert c.trtllm.endswith(
        f"&& trtllm-serve serve {DSV3} --backend pytorch --tp_size 8 --pp_size 1 --ep_size 8"
        " --max_batch_size 64 --max_num_tokens 8192 --max_seq_len 2048"
        " --kv_cache_free_gpu_memory_fraction 0.9 --extra_llm_api_options extra.yaml"
    )
    assert c.nodes == 1 and c.vllm_nodes == (c.vllm,) and c.sglang_nodes == (c.sglang,)
    assert "#" not in c.vllm + c.sglang and HEAD_NODE not in c.vllm + c.sglang + c.trtllm
    assert not any("HEAD_NODE_IP" in n for n in c.notes)
    assert _commands(Parallelism(tp=8, ep=8), gpus_per_node=None) == c  # no cluster: one node


def test_vllm_runs_attention_dp_over_two_nodes_with_its_multi_node_dp_flags() -> None:
    """dp 16 / ep 16 on 16 x H100: vLLM's multi-node data parallel, 8 DP ranks a node, the
    second node headless from rank 8 (vLLM's data_parallel_deployment.md)."""
    c = _commands(DP16)
    assert c.nodes == 2 and len(c.vllm_nodes) == 2
    head, other = (_vllm(n) for n in c.vllm_nodes)
    for node in (head, other):
        assert node["--data-parallel-size"] == "16" and node["--tensor-parallel-size"] == "1"
        assert node["--data-parallel-size-local"] == "8"
        assert node["--data-parallel-address"] == HEAD_NODE == "$HEAD_NODE_IP"
        assert node["--data-parallel-rpc-port"] == "13345"
        assert "--enable-expert-parallel" in node and "--nnodes" not in node
        assert node["--max-num-seqs"] == "64"  # one DP rank's scheduler
    assert "--headless" not in head and "--data-parallel-start-rank" not in head
    assert "--headless" in other and other["--data-parallel-start-rank"] == "8"
    assert c.vllm == "\n".join(
        ["# node 0 (the head: $HEAD_NODE_IP)", c.vllm_nodes[0], "# node 1", c.vllm_nodes[1]]
    )


@pytest.mark.parametrize("parallel", [TP16, TP8_PP2], ids=["tp16", "tp8-pp2"])
def test_vllm_runs_tp_and_pp_over_two_nodes_with_nnodes(parallel: Parallelism) -> None:
    """TP or PP across nodes: vLLM's multiprocessing executor over them (vllm/config/parallel.py:
    nnodes > 1 picks mp), --nnodes/--node-rank/--master-addr on every node, --headless past 0."""
    c = _commands(parallel)
    assert c.nodes == 2 and len(c.vllm_nodes) == 2
    for rank, command in enumerate(c.vllm_nodes):
        node = _vllm(command)
        assert node["--nnodes"] == "2" and node["--node-rank"] == str(rank)
        assert node["--master-addr"] == "$HEAD_NODE_IP"
        assert ("--headless" in node) == (rank > 0)
        assert node["--tensor-parallel-size"] == str(parallel.tp)
        assert node.get("--pipeline-parallel-size") == (
            str(parallel.pp) if parallel.pp > 1 else None
        )
        assert "--data-parallel-size" not in node
    assert any(
        "ray start --head" in n and "--distributed-executor-backend ray" in n for n in c.notes
    )


@pytest.mark.parametrize("parallel", [DP16, TP16, TP8_PP2], ids=["dp16", "tp16", "tp8-pp2"])
def test_sglang_runs_every_node_with_nnodes_node_rank_and_dist_init_addr(
    parallel: Parallelism,
) -> None:
    c = _commands(parallel)
    assert len(c.sglang_nodes) == c.nodes == 2
    nodes = [_sglang(n) for n in c.sglang_nodes]
    for rank, node in enumerate(nodes):
        assert node["--nnodes"] == "2" and node["--node-rank"] == str(rank)
        assert node["--dist-init-addr"] == "$HEAD_NODE_IP:5000"
        assert node["--ep-size"] == str(parallel.ep)
        assert node["--tp-size"] == str(parallel.tp * parallel.dp)  # attention DP inside TP
        assert node.get("--pp-size") == (str(parallel.pp) if parallel.pp > 1 else None)
        assert (node.get("--dp-size"), "--enable-dp-attention" in node) == (
            ("16", True) if parallel.dp > 1 else (None, False)
        )
    strip = [{k: v for k, v in n.items() if k != "--node-rank"} for n in nodes]
    assert strip[0] == strip[1]  # the same command but for the node's rank
    assert c.sglang.splitlines()[0] == "# node 0 (the head: $HEAD_NODE_IP)"


@pytest.mark.parametrize("parallel", [DP16, TP16, TP8_PP2], ids=["dp16", "tp16", "tp8-pp2"])
def test_trtllm_runs_one_mpi_world_over_the_nodes(parallel: Parallelism) -> None:
    """trtllm-llmapi-launch under srun, 16 ranks, 8 a node (TensorRT-LLM's trtllm-serve docs);
    a note says how to do it with mpirun."""
    c = _commands(parallel)
    launch = c.trtllm.split(" && ")[-1]
    srun = _flags(launch.split(" trtllm-llmapi-launch ")[0], ("srun",))
    assert set(srun) <= SRUN_FLAGS
    assert (srun["--nodes"], srun["--ntasks"], srun["--ntasks-per-node"]) == ("2", "16", "8")
    serve = _flags(launch.split(" trtllm-llmapi-launch ")[1], ("trtllm-serve", "serve", DSV3))
    assert set(serve) <= TRTLLM_FLAGS
    assert serve["--tp_size"] == str(parallel.tp * parallel.dp)
    assert serve["--pp_size"] == str(parallel.pp)
    assert any("mpirun -H $HEAD_NODE_IP:8" in n and "Slurm" in n for n in c.notes)


def test_a_note_says_what_to_set_the_head_address_to() -> None:
    c = _commands(DP16)
    assert "$HEAD_NODE_IP" in c.vllm and "$HEAD_NODE_IP" in c.sglang
    (say,) = [n for n in c.notes if "HEAD_NODE_IP set on every node" in n]
    assert "node 0's address" in say and "export HEAD_NODE_IP=" in say
    assert any("--moe-a2a-backend deepep" in n for n in c.notes)  # EP over nodes


def test_an_fp8_checkpoint_is_served_as_it_ships() -> None:
    """DeepSeek-V3 ships block-scaled FP8 (its config's quantization_config): no
    --quantization fp8 on any node, a note saying the checkpoint is served as it is."""
    assert get_model("deepseek-v3").checkpoint_quantization == "fp8"
    for parallel in (Parallelism(tp=8, ep=8), DP16, TP16):
        c = _commands(parallel)
        for command in c.vllm_nodes:
            assert "--quantization" not in _vllm(command)
        for command in c.sglang_nodes:
            assert "--quantization" not in _sglang(command)
        assert any("serve it as it is, with no --quantization" in n for n in c.notes)
        assert not any("quantizes a 16-bit checkpoint" in n for n in c.notes)
    bf16 = launch_commands(DSV3, Parallelism(tp=8, ep=8), BF16, SETTINGS,
                           checkpoint_quantization="fp8")  # fmt: skip
    assert "--quantization" not in bf16.vllm
    assert any("The plan's bf16 weights are not the checkpoint's fp8" in n for n in bf16.notes)


def test_a_16_bit_model_served_at_fp8_still_quantizes_at_load_time() -> None:
    assert get_model("llama-3.1-70b").checkpoint_quantization is None
    c = launch_commands("meta-llama/Llama-3.1-70B", Parallelism(tp=4), FP8,
                        EngineSettings(max_model_len=4096, max_seqs=64, token_budget=8192),
                        gpus_per_node=8)  # fmt: skip
    assert _flags(c.vllm, ("vllm", "serve", "meta-llama/Llama-3.1-70B"))["--quantization"] == "fp8"
    assert _sglang(c.sglang)["--quantization"] == "fp8"
    assert any("quantizes a 16-bit checkpoint at load time" in n for n in c.notes)


def test_the_checkpoint_quantization_is_read_from_the_config() -> None:
    """quantization_config.quant_method at load time; a catalog entry whose config copy lacks
    it says it (DeepSeek-V3, MiniMax-M2.7, NVIDIA's ModelOpt checkpoints); none for BF16."""
    config = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256}  # fmt: skip
    assert model_from_config(config).checkpoint_quantization is None
    quantized = {**config, "quantization_config": {"quant_method": "FP8", "fmt": "e4m3"}}
    assert model_from_config(quantized).checkpoint_quantization == "fp8"
    assert model_from_config(quantized) == model_from_config(config)  # no count changes
    shipped = {m: get_model(m).checkpoint_quantization for m in (
        "deepseek-v3", "kimi-k2-instruct", "minimax-m2.7", "gpt-oss-20b",
        "nemotron-3-super-120b-a12b", "qwen3-235b-a22b", "glm-4.5")}  # fmt: skip
    assert shipped == {
        "deepseek-v3": "fp8", "kimi-k2-instruct": "fp8", "minimax-m2.7": "fp8",
        "gpt-oss-20b": "mxfp4", "nemotron-3-super-120b-a12b": "modelopt",
        "qwen3-235b-a22b": None, "glm-4.5": None,
    }  # fmt: skip


def test_the_serving_answer_carries_the_nodes_and_the_checkpoint() -> None:
    """The answer's launch block: a 16-GPU DeepSeek-V3 replica on 8-GPU H100 nodes is two
    nodes' commands, with no --quantization (its checkpoint ships FP8)."""
    req = InferenceRequest.model_validate({
        "model": "deepseek-v3", "accelerator": "h100-sxm-80gb", "num_gpus": 16,
        "layout": {"tp": 1, "dp": 16, "ep": 16}, "precision": "fp8-serving",
        "input_len": 1024, "output_len": 1024})  # fmt: skip
    plan, e = run_inference(req)
    launch = launch_dict(req, plan, e)
    assert launch["nodes"] == 2 and len(launch["vllm_nodes"]) == len(launch["sglang_nodes"]) == 2
    assert "--headless" in launch["vllm_nodes"][1] and "--quantization" not in launch["vllm"]
    assert "--node-rank 1" in launch["sglang_nodes"][1] and "srun --nodes 2" in launch["trtllm"]


def test_an_uneven_pipeline_split_travels_with_the_commands() -> None:
    """The split the estimate planned (vLLM's 31 + 30 for DeepSeek-V3's 61 layers over pp 2) is
    set by each engine's partition variable; an even split sets none."""
    from fastapi.testclient import TestClient

    from app.main import app

    client = TestClient(app)
    body = {"model": "deepseek-v3", "layout": {"tp": 8, "pp": 2}, "precision": "fp8-serving"}
    out = client.post("/api/v1/inference/estimate", json=body).json()
    split = ",".join(map(str, out["layout"]["stage_layers"]))
    assert split == "31,30"
    for command in out["launch"]["vllm_nodes"]:
        assert shlex.split(command)[0] == f"VLLM_PP_LAYER_PARTITION={split}"
    for command in out["launch"]["sglang_nodes"]:
        assert shlex.split(command)[0] == f"SGLANG_PP_LAYER_PARTITION={split}"
    even = client.post(
        "/api/v1/inference/estimate", json={"model": "llama-3-70b", "layout": {"tp": 4, "pp": 2}}
    ).json()
    assert "PP_LAYER_PARTITION" not in even["launch"]["vllm"] + even["launch"]["sglang"]
