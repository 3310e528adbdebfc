"""Disaggregated prefill/decode serving (xPyD): a pool of prefill replicas that only prefill
prompts, a pool of decode replicas that only decode, and the KV cache of each prompt sent from
the one to the other (vLLM's disaggregated prefilling with the NixlConnector, SGLang's PD
disaggregation, NVIDIA Dynamo; DistServe, OSDI 2024, arXiv:2401.09670, for the idea and the
goodput framing). Each pool's replicas have their own layout; both run the same model and
formats, and their step times come from the same engine step as an aggregated
replica's (``serving.engine_step``).

- **A prefill replica** is one server, first come first served (vLLM's scheduler takes waiting
  prompts in order within ``max_num_batched_tokens``): a prompt rides ``s = max(1, ISL / B)``
  steps; a busy step carries ``max(min(ISL, B), rho B)`` prompt tokens (prompts batch up to the
  budget ``B`` as the queue grows: at ``rho -> 1`` the replica prefills ``B`` tokens a step, its
  capacity ``B / (ISL tau(B))`` requests/s). The wait is M/D/1 in those steps,
  ``s tau rho / (2 (1 - rho))``, with the load model's exponential tail for percentiles
  (``load.quantile_wait``), plus half a step for a Poisson arrival landing mid-step (as
  ``estimate_load``); no decode step ever shares its steps.
- **A decode replica** runs only decodes: ``D`` sequences a step, TPOT the step's time
  ``tau(D, 0)``, and it computes every output token (vLLM's proxy sends the prefill request
  with ``max_tokens=1`` and the decode instance computes the prompt's last partial block and the
  first token itself: ``NixlConnectorScheduler.get_num_new_matched_tokens`` loads only whole
  blocks), so it finishes ``D / (OSL tau)`` requests/s; ``D`` is capped by its KV cache at
  ``ISL + OSL`` tokens a sequence, the engine's sequence cap and its token budget. Waiting for a
  free slot is not modelled (as in the aggregated open loop).
- **The KV transfer** of a request is its prompt's whole KV cache (and recurrent state), the
  model's real size (``memory.inference``: GQA heads, MLA's latent, sliding windows, the
  KV-cache format): each GPU sends or receives its own shard (replicated caches in full), over
  NVLink when the deployment sits in one scale-up domain, else over the GPU's scale-out NIC
  (``timing.kernels.collective_time``'s send/recv, the fitted link efficiency and latency). It
  starts when the prefill ends (``overlap="none"``: vLLM's decode instance pulls the blocks after
  the prefill finishes, ``NixlConnector``'s read mode) or layer by layer as the prefill runs
  (``"layerwise"``: Mooncake's layer-wise prefill, FAST 2025, arXiv:2407.00079; vLLM's KV
  connector API's ``save_kv_layer``, called from each attention layer), which hides it behind
  the prefill but for its last layer's share. Each link is an M/D/1 queue too (its utilization:
  requests/s x its busy seconds a request); a link at or past 1 caps the pool's rate.
- **TTFT** = the prefill replica's queue and prefill + the sending link's wait + the exposed
  transfer + the receiving link's wait + the decode replica's first step (half a step's wait for
  the step boundary, then the step). Each part's p99 is added (an upper bound on the p99 of the
  sum); **TPOT** = the decode step, whose spread the model takes as nil (no prefill shares it:
  disaggregation's point).

The two pools may run on different accelerators (a prefill pool on a compute-rich GPU, the
decode pool on one with more memory bandwidth or capacity: aiconfigurator's ``--decode_system``
question): each pool's steps are its own accelerator's, and the KV cache crosses the scale-out
network, sent at the prefill GPU's NIC and received at the decode GPU's.

Not modelled: length distributions, prefix caching and speculative decoding on either pool,
different formats per pool, the proxy's own latency, KV transfers competing
with TP/PP traffic for the scale-out NIC, and prefill-replica KV memory for prompts waiting to
be sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from estimator.context import Context
from estimator.errors import SpecError
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.cluster import Cluster
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import Precision
from estimator.layout.parallel import Parallelism
from estimator.layout.sharding import distinct_stages
from estimator.memory.inference import (
    InferenceMemory,
    InferenceSetup,
    inference_memory,
    kv_cache_bytes_per_sequence,
    state_bytes_per_sequence,
)
from estimator.serving.engine_step import StepTime, engine_step_time
from estimator.serving.load import EnginePreset, md1_wait, quantile_wait
from estimator.timing.kernels import collective_time
from estimator.xp import Num

__all__ = [
    "FIRST_TOKEN_STEPS",
    "OVERLAPS",
    "TTFT_QUANTILE",
    "DecodeCurve",
    "KvTransfer",
    "Link",
    "Overlap",
    "PoolReplica",
    "PrefillCurve",
    "decode_curve",
    "highest_rate",
    "kv_bytes_per_gpu",
    "kv_bytes_per_request",
    "kv_transfer",
    "link_wait",
    "prefill_curve",
]

Overlap = Literal["none", "layerwise"]
OVERLAPS: tuple[Overlap, ...] = ("none", "layerwise")
Link = Literal["nvlink", "scale-out"]

TTFT_QUANTILE = 0.99  # the TTFT target is a p99 (as the serving sweep's)
# The decode replica's first token: half a step's wait for the running step to end, then its
# own step (a Poisson arrival lands mid-step, as in ``estimate_load``).
FIRST_TOKEN_STEPS = 1.5
# Prefill utilizations the curve is evaluated at: fine near 1, where the wait grows fastest;
# the last leaves the queue finite.
_UTILIZATIONS = np.unique(
    np.concatenate([np.geomspace(1e-3, 0.5, 24), 1 - np.geomspace(0.5, 1e-3, 40)])
)
_DECODE_LEVELS = 48  # decoding levels a decode curve is evaluated at (whole sequences)


def kv_bytes_per_request(model: ModelSpec, precision: Precision, isl: int) -> float:
    """A prompt's whole KV cache (every layer, every KV head, in the KV-cache format) and
    recurrent state: what a prefill replica hands a decode replica."""
    kv = kv_cache_bytes_per_sequence(model, precision, isl)
    return float(kv + state_bytes_per_sequence(model, precision))


def kv_bytes_per_gpu(
    model: ModelSpec, precision: Precision, isl: int, layout: Parallelism
) -> float:
    """One GPU's shard of a prompt's KV cache and state under ``layout``, on its most loaded
    pipeline stage (a cache replicated over TP, as MLA's latent, is whole on every rank)."""
    tp = layout.tp
    return max(
        float(
            kv_cache_bytes_per_sequence(model, precision, isl, tp=tp, counts=shape.counts)
            + state_bytes_per_sequence(model, precision, tp=tp, counts=shape.counts)
        )
        for shape in distinct_stages(model, layout.pp, layout.stage_layers)
    )


@dataclass(frozen=True, slots=True)
class KvTransfer:
    """One request's KV cache from its prefill replica to its decode replica."""

    bytes_per_request: float  # the whole prompt's KV cache and state
    send_bytes_per_gpu: float  # a prefill GPU's shard
    receive_bytes_per_gpu: float  # a decode GPU's shard
    link: Link
    send_s: float  # a prefill GPU's link busy per request
    receive_s: float  # a decode GPU's link busy per request
    time_s: float  # the transfer: the slower side
    exposed_s: float  # what TTFT sees of it after the overlap with the prefill
    overlap: Overlap


def kv_transfer(
    prefill: Context,
    decode: Context,
    isl: int,
    prefill_s: float,
    *,
    link: Link,
    overlap: Overlap = "none",
) -> KvTransfer:
    """The transfer of a prompt of ``isl`` tokens prefilled in ``prefill_s`` seconds, from the
    prefill pool (``prefill``: the model and formats, the pool's accelerator, layout and
    network) to the decode pool (``decode``: the same model and formats under the decode
    layout, on the same accelerator, ``prefill.with_layout``, or on another, then over the
    scale-out network, each side at its own NIC): each GPU sends (receives) its shard over its
    own link, in parallel with the others; ``layerwise`` overlaps it with the prefill, one
    layer's share behind the compute."""
    if overlap not in OVERLAPS:
        raise SpecError("kv_overlap", f"must be one of {', '.join(OVERLAPS)}", overlap)
    if decode.acc.id != prefill.acc.id and link == "nvlink":
        raise SpecError("kv_link", "pools on two accelerators share no NVLink domain", link)

    def seconds(payload: float, side: Context) -> float:
        # Two ranks in one scale-up domain (stride 1), or in two (stride: the domain's size).
        net = side.domain
        stride = 1 if link == "nvlink" else net.scale_up_domain
        return float(collective_time(side.acc, side.prof, "send_recv", payload, 2, stride, net))

    model, precision = prefill.model, prefill.precision
    send = kv_bytes_per_gpu(model, precision, isl, prefill.p)
    receive = kv_bytes_per_gpu(model, precision, isl, decode.p)
    send_s = seconds(send, prefill)
    receive_s = seconds(receive, decode)
    time_s = max(send_s, receive_s)
    exposed = time_s
    if overlap == "layerwise":  # layer l's KV leaves as layer l + 1 computes
        layers = model.num_layers
        exposed = max(time_s / layers, time_s - prefill_s * (1 - 1 / layers))
    return KvTransfer(
        bytes_per_request=kv_bytes_per_request(model, precision, isl),
        send_bytes_per_gpu=send,
        receive_bytes_per_gpu=receive,
        link=link,
        send_s=send_s,
        receive_s=receive_s,
        time_s=time_s,
        exposed_s=exposed,
        overlap=overlap,
    )


def link_wait(rate: Num, busy_s: float, quantile: float = TTFT_QUANTILE) -> Num:
    """A link's wait at ``rate`` requests/s, each keeping it busy ``busy_s`` (M/D/1, the
    load model's exponential tail); infinite at or past its capacity."""
    rho = np.asarray(rate, dtype=float) * busy_s
    mean = md1_wait(busy_s, rho)
    return np.where(rho < 1, quantile_wait(np.where(rho < 1, mean, 0.0), rho, quantile), np.inf)


@dataclass(frozen=True, slots=True)
class PoolReplica:
    """A replica of one pool: the model, accelerator, layout, formats and network it runs on,
    the workload's lengths and the engine whose budget and caps it keeps."""

    model: ModelSpec
    accelerator: Accelerator
    layout: Parallelism
    isl: int
    osl: int
    precision: Precision
    engine: EnginePreset
    cluster: Cluster

    def memory(self, setup: InferenceSetup) -> InferenceMemory:
        return inference_memory(self.model, self.accelerator, self.layout, setup, self.precision)

    def step(self) -> StepTime:
        """Its engine step (``serving.engine_step``) at the workload's lengths."""
        return engine_step_time(
            self.model, self.accelerator, self.layout, InferenceSetup(self.isl, self.osl),
            self.precision, mixed=self.engine.mixed, cluster=self.cluster,
        )  # fmt: skip


@dataclass(frozen=True, slots=True, eq=False)
class PrefillCurve:
    """A prefill replica's part of TTFT against the requests/s it takes (arrays, both rising
    with the utilization ``rho``)."""

    layout: Parallelism
    lone_s: float  # a lone prompt: ``s`` steps of one chunk, nothing queued
    capacity: float  # requests/s at full budget
    rho: np.ndarray
    rate: np.ndarray  # requests/s a replica takes
    ttft_s: np.ndarray  # mean: queue + prefill
    ttft_p99_s: np.ndarray


def prefill_curve(r: PoolReplica) -> PrefillCurve:
    """A prefill-only replica under Poisson arrivals (module docstring); refused (``SpecError``
    on ``memory``) where its KV cache cannot hold one prompt."""
    isl = r.isl
    if r.memory(InferenceSetup(isl, 1)).max_concurrency < 1:
        raise SpecError("memory", "the KV cache holds no prompt of this length")
    step = r.step()
    budget = r.engine.token_budget
    chunk = min(isl, budget)
    service = max(1.0, isl / budget)  # steps a prompt rides
    rho = _UTILIZATIONS
    tokens = np.maximum(chunk, rho * budget)  # a busy step's prompt tokens
    # A prompt's chunk rides one micro-batch through every pipeline stage: its latency is a step
    # whose micro-batches each hold a whole chunk (``estimate_load`` alike); the cycle ``tau``
    # (the throughput's) spreads a step's tokens over the pp micro-batches.
    pp = r.layout.pp
    taus = step(0.0, np.concatenate([tokens, [pp * chunk, budget]]))
    tau, lone_tau, full_tau = taus[:-2], float(taus[-2]), float(taus[-1])
    rate = rho * tokens / (isl * tau)
    own = tau if pp == 1 else np.maximum(tau, lone_tau)  # its own chunk's pass
    ride = service * own + rho * tau / 2  # its own steps, and the step under way on arrival
    wait = md1_wait(service * tau, rho)
    return PrefillCurve(
        layout=r.layout,
        lone_s=service * lone_tau,
        capacity=budget / (isl * full_tau),
        rho=rho,
        rate=rate,
        ttft_s=ride + wait,
        ttft_p99_s=ride + quantile_wait(wait, rho, TTFT_QUANTILE),
    )


@dataclass(frozen=True, slots=True, eq=False)
class DecodeCurve:
    """A decode replica's TPOT and the requests/s it finishes against the sequences it decodes
    (arrays, rising with ``decoding``)."""

    layout: Parallelism
    slots: int  # the most sequences it decodes at once
    decoding: np.ndarray
    tpot_s: np.ndarray  # the step
    rate: np.ndarray  # requests/s a replica finishes


def decode_curve(r: PoolReplica) -> DecodeCurve:
    """A decode-only replica of ``layout`` at whole numbers of sequences, 1 to what the engine's
    KV cache (at ``ISL + OSL`` tokens each), its sequence cap and its token budget allow (with
    attention data parallel, each group's: the replica decodes ``dp`` times as many);
    refused (``SpecError`` on ``memory``) where the KV cache holds no sequence."""
    memory = r.memory(InferenceSetup(r.isl, r.osl))
    groups = r.layout.dp  # attention data parallel: one group's scheduler, every group alike
    engine = r.engine.per_group(groups)
    held = engine.kv_slots(memory, r.layout.tp * groups) // groups
    slots = min(engine.slots(held), engine.token_budget)
    if slots < 1:
        raise SpecError("memory", "the KV cache holds no sequence of this length")
    levels = np.unique(np.round(np.geomspace(1, slots, _DECODE_LEVELS)))
    tau = r.step()(levels, 0.0)
    return DecodeCurve(
        layout=r.layout,
        slots=groups * slots,
        decoding=groups * levels,
        tpot_s=tau,
        rate=groups * levels / (max(r.osl, 1) * tau),
    )


def highest_rate(rate: np.ndarray, latency: np.ndarray, budget: Num) -> Num:
    """The most requests/s whose ``latency`` (rising with ``rate``) stays within ``budget``
    (each entry of an array of budgets): linear between the curve's points, its last finite
    point past them, 0 where even its first is over."""
    finite = np.isfinite(latency)
    if not finite.any():
        return np.zeros_like(np.asarray(budget, dtype=float))
    xs = np.maximum.accumulate(latency[finite])
    ys = rate[finite]
    rates: Num = np.interp(budget, xs, ys, left=0.0, right=float(ys[-1]))
    return rates
