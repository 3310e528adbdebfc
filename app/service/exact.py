"""The exact module tree and measured module latency, from the real transformers model. Both
need the optional ``groundtruth`` extra (torch, transformers); the service and the CLI refuse
with a clear message without it, and never fetch or execute anything from a config.

- ``exact_modules``: the model built on the meta device (no weights, no memory) and one forward
  under torch's FLOP counter: each module's own parameters and matmul FLOPs, layers summed
  (``validation.groundtruth``, the harness the tests check the estimator with).
- ``profile_modules``: a real model with random weights on a device, timed module by module
  with forward hooks (CUDA events on a GPU, the wall clock on the CPU) over repeated forwards.
"""

from __future__ import annotations

import importlib
import re
import time
from collections import defaultdict
from typing import Any

from estimator.errors import SpecError

__all__ = ["exact_modules", "load_harness", "profile_modules"]

_LAYER_INDEX = re.compile(r"\.(\d+)(?=\.|$)")
_MISSING = "needs the optional torch and transformers: pip install 'llm-planner[groundtruth]'"


def _harness(field: str) -> Any:
    try:
        return importlib.import_module("validation.groundtruth")
    except ImportError:
        raise SpecError(field, _MISSING) from None


def load_harness() -> None:
    """Import the ground-truth harness (torch, transformers) now; SpecError without them."""
    _harness("source")


def exact_modules(config: dict[str, Any], seq_len: int, batch: int) -> list[dict[str, Any]]:
    """Each module's own parameters and FLOPs in one eager forward, by collapsed path
    (``model.layers.*.mlp.up_proj``), largest FLOPs first."""
    gt = _harness("source")
    flops = gt.forward_flops(config, batch=batch, seq=seq_len)["by_module"]
    params: dict[str, int] = defaultdict(int)
    for name, n in gt.param_breakdown(config).items():
        params[name.rsplit(".", 1)[0]] += n
    names = sorted(set(flops) | set(params), key=lambda k: (-flops.get(k, 0), k))
    return [
        {"module": k, "params": int(params.get(k, 0)), "flops": float(flops.get(k, 0))}
        for k in names
    ]


def profile_modules(
    config: dict[str, Any],
    seq_len: int,
    batch: int,
    *,
    device: str = "cuda",
    dtype: str = "bfloat16",
    repeats: int = 10,
    warmup: int = 3,
) -> dict[str, float]:
    """Mean forward milliseconds of each module (collapsed over layers: the sum of the layers'
    times), measured with forward pre/post hooks. On CUDA each module is bracketed by CUDA
    events; elsewhere by ``time.perf_counter`` (meaningful for small models only)."""
    gt = _harness("device")
    import torch
    from transformers import AutoModelForCausalLM

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SpecError("device", "no CUDA device is visible; run this where the GPU is")
    cfg = gt.hf_config(config)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call,unused-ignore]
            cfg, dtype=getattr(torch, dtype), attn_implementation="sdpa"
        )
    model.train(False)
    cuda = device.startswith("cuda")
    starts: dict[str, Any] = {}
    totals: dict[str, float] = defaultdict(float)
    pending: list[tuple[str, Any, Any]] = []

    def pre(name: str) -> Any:
        def hook(*_: Any) -> None:
            if cuda:
                ev = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call,unused-ignore]
                ev.record()
                starts[name] = ev
            else:
                starts[name] = time.perf_counter()

        return hook

    def post(name: str) -> Any:
        def hook(*_: Any) -> None:
            if cuda:
                ev = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call,unused-ignore]
                ev.record()
                pending.append((name, starts[name], ev))
            else:
                totals[name] += (time.perf_counter() - starts[name]) * 1e3

        return hook

    handles = []
    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(pre(name)))
        handles.append(module.register_forward_hook(post(name)))
    ids = torch.zeros(batch, seq_len, dtype=torch.long, device=device)
    with torch.no_grad():
        for i in range(warmup + repeats):
            if i == warmup:
                totals.clear()
                pending.clear()
            model(input_ids=ids, use_cache=False)
    if cuda:
        torch.cuda.synchronize()
        for name, start, end in pending:
            totals[name] += start.elapsed_time(end)
    for h in handles:
        h.remove()
    out: dict[str, float] = defaultdict(float)
    for name, ms in totals.items():
        out[_LAYER_INDEX.sub(".*", name) or "<model>"] += ms / repeats
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
