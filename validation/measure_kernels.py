"""Time the kernels of a mixture-of-experts training layer on a GPU, for the kernel model.

The measured kernel tables the model is fitted on (``validation/data/kernels``) hold GEMMs whose
N and K are 3,584 or more and attention with 128-dimension heads only. Fine-grained MoE layers
run outside that range: gpt-oss's experts are 2,880 x 5,760 and 2,880 x 2,880 GEMMs over a few
thousand tokens, Qwen3-30B-A3B's 2,048 x 1,536 and 768 x 2,048, and gpt-oss's attention has
64-dimension heads. This script times, in PyTorch on one GPU (``--parts``, comma-separated):

- ``gemm``: every GEMM of those layers in its three shapes (forward, input gradient, weight
  gradient) as Megatron-Core's published recipes lay them out, the routed experts one GEMM per
  local expert (Transformer Engine's ``GroupedLinear`` on Hopper runs one cuBLAS GEMM per
  expert) and, where PyTorch has it, as one grouped GEMM; and a grid of single mid-size GEMMs,
  bf16 and FP8. GPU time from CUDA-graph replays: timed one launch at a time, the host's launch
  gaps make a small GEMM look several times slower than its kernel;
- ``attention``: causal attention forward and forward + backward through cuDNN's and
  FlashAttention-2's fused kernels over head dims 64-256, and the unfused path;
- ``elementwise``: the gated activation (fused by ``torch.compile`` as Megatron-Core's
  ``jit_fuser`` does, and eager), RMSNorm, the token permutes;
- ``moe_host``: an eager MoE layer's forward + backward timed whole against its kernels' busy
  time, the host time it exposes;
- ``windowed``: FlexAttention with gpt-oss's 128-token window.

Run on the GPU machine: ``python3 validation/measure_kernels.py --out results.json``; a CPU dry
run (``--dry``) checks the script with tiny shapes. Times are medians of CUDA-event-timed
repetitions after warm-up, on random data. ``validation/calibrate.py`` fits the H100 GEMM curve
and the attention head-dim rates on the results (``validation/data/kernels/h100_lent.json``);
``validation/report.py`` compares them with the model.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

# (model, hidden, heads, kv heads, head dim, expert intermediate, experts, top-k)
MODELS = {
    "gpt-oss-120b": (2880, 64, 8, 64, 2880, 128, 4),
    "qwen3-30b-a3b": (2048, 32, 4, 128, 768, 128, 8),
}
# (model, tokens per micro-batch, expert-parallel size): the published recipes' layouts on H100
# (gpt-oss 120B: EP 8, MBS 1 and 4 at 4,096; Qwen3-30B-A3B: EP 8 and 16, MBS 1) and gpt-oss's
# Blackwell layout (EP 64, MBS 4), whose per-expert GEMMs are large.
LAYOUTS = [
    ("gpt-oss-120b", 4096, 8),
    ("gpt-oss-120b", 16384, 8),
    ("gpt-oss-120b", 16384, 64),
    ("qwen3-30b-a3b", 4096, 8),
    ("qwen3-30b-a3b", 4096, 16),
]


GROUPED = getattr(torch, "_grouped_mm", None)  # one grouped GEMM over the experts, where present


class Timer:
    def __init__(self, device: str, warmup: int, reps: int) -> None:
        self.device, self.warmup, self.reps = device, warmup, reps

    def __call__(self, fn: Callable[[], Any]) -> float:
        """Median milliseconds of ``fn``."""
        for _ in range(self.warmup):
            fn()
        times = []
        if self.device == "cuda":
            torch.cuda.synchronize()
            for _ in range(self.reps):
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
        else:
            for _ in range(self.reps):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def graphed(self, fn: Callable[[], Any], copies: int = 4) -> float:
        """Median milliseconds of one ``fn`` on the GPU alone: ``copies`` calls captured in a
        CUDA graph and replayed, so that the host's launch time (tens of microseconds for a
        small GEMM here) does not sit between the kernels. Plain timing on the CPU."""
        if self.device != "cuda":
            return self(fn)
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(copies):
                fn()
        return self(graph.replay) / copies


def rand(*shape: int, dev: str, dtype: torch.dtype = torch.bfloat16, grad: bool = False):
    return torch.randn(*shape, device=dev, dtype=dtype, requires_grad=grad)


def gemms(timer: Timer, dev: str, scale: int) -> list[dict[str, Any]]:
    """Each linear's forward, input-gradient and weight-gradient GEMM, one per local expert."""
    rows = []
    seen = set()
    for model, tokens, ep in LAYOUTS:
        h, nh, kvh, hd, inter, experts, top_k = MODELS[model]
        t = tokens // scale
        local = experts // ep
        per_expert = t * top_k * ep // experts  # balanced routing over the EP group
        linears = [
            ("qkv", t, h, (nh + 2 * kvh) * hd, 1),
            ("proj", t, nh * hd, h, 1),
            ("router", t, h, experts, 1),
            ("fc1", per_expert, h, 2 * inter, local),
            ("fc2", per_expert, inter, h, local),
        ]
        for name, m, k, n, count in linears:
            k, n = max(k // scale, 8), max(n // scale, 8)
            key = (m, k, n, count)
            if key in seen:
                continue
            seen.add(key)
            for phase, (a, b, c) in (
                ("fwd", (m, k, n)),
                ("dgrad", (m, n, k)),
                ("wgrad", (n, m, k)),
            ):
                xs = [rand(a, b, dev=dev) for _ in range(count)]
                ws = [rand(b, c, dev=dev) for _ in range(count)]

                def loop(xs=xs, ws=ws) -> None:
                    for x, w in zip(xs, ws, strict=True):
                        torch.matmul(x, w)

                ms = timer.graphed(loop)
                row = {
                    "op": "gemm", "model": model, "linear": name, "phase": phase,
                    "m": a, "k": b, "n": c, "count": count, "dtype": "bf16",
                    "tokens": t, "ep": ep, "ms": ms,
                    "tflops": 2 * a * b * c * count / ms / 1e9,
                }  # fmt: skip
                if GROUPED is not None and count > 1 and dev == "cuda":
                    x = torch.cat(xs)
                    w = torch.stack([w.t() for w in ws]).transpose(1, 2)  # column-major
                    offs = torch.arange(1, count + 1, device=dev, dtype=torch.int32) * a
                    try:
                        row["grouped_ms"] = timer.graphed(
                            lambda x=x, w=w, offs=offs: GROUPED(x, w, offs=offs)
                        )
                    except Exception as exc:
                        row["grouped_error"] = str(exc)[:200]
                if model.startswith("qwen3") and dev == "cuda":  # its published runs are FP8
                    row["fp8_ms"] = fp8_loop(timer, xs, ws)
                rows.append(row)
                del xs, ws
    return rows


def fp8_loop(timer: Timer, xs: list[torch.Tensor], ws: list[torch.Tensor]) -> float | None:
    """The same GEMMs in FP8 (E4M3, per-tensor scales: Transformer Engine's Hopper recipe)."""
    f8 = torch.float8_e4m3fn
    a8 = [x.to(f8) for x in xs]
    b8 = [w.t().contiguous().to(f8).t() for w in ws]  # column-major, as cuBLASLt wants it
    one = torch.ones((), device=xs[0].device, dtype=torch.float32)

    def loop() -> None:
        for a, b in zip(a8, b8, strict=True):
            torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)

    try:
        return timer.graphed(loop)
    except Exception:
        return None


def gemm_grid(timer: Timer, dev: str, scale: int) -> list[dict[str, Any]]:
    """Single GEMMs over a grid of mid-size shapes (the fine-grained MoE and mid-size dense
    range the kernel tables lack), bf16 and FP8, GPU time from graph replays."""
    rows = []
    sizes = [512, 1024, 2048, 4096, 8192, 16384]
    dims = [768, 1536, 2048, 2880, 4096, 5760, 7168]
    for m in sizes:
        for k in dims:
            for n in dims:
                a, b = rand(m // scale, k // scale, dev=dev), rand(k // scale, n // scale, dev=dev)
                row = {"op": "gemm_grid", "m": m // scale, "k": k // scale, "n": n // scale,
                       "ms": timer.graphed(lambda a=a, b=b: torch.matmul(a, b))}  # fmt: skip
                if dev == "cuda":
                    row["fp8_ms"] = fp8_loop(timer, [a], [b])
                rows.append(row)
    return rows


def unfused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention without a fused kernel, as Transformer Engine's ``UnfusedDotProductAttention``
    runs it: the full score matrix from a batched GEMM, the causal mask and softmax over it in
    memory-bound passes, then a second batched GEMM with V."""
    b, h, s, d = q.shape
    scores = torch.bmm(q.reshape(b * h, s, d), k.reshape(b * h, s, d).transpose(1, 2))
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu_(1)
    probs = torch.softmax((scores * d**-0.5).masked_fill(mask, float("-inf")), dim=-1)
    return torch.bmm(probs, v.reshape(b * h, s, d)).view(b, h, s, d)


def attention(timer: Timer, dev: str, scale: int) -> list[dict[str, Any]]:
    """Causal attention, forward and forward + backward: the fused kernels (cuDNN's, as
    Transformer Engine calls it on Hopper, and FlashAttention-2, PyTorch's flash backend) over
    head dimensions 64-256 and 2,048-8,192 tokens, gpt-oss's 64 x 64-dimension heads, and the
    unfused path on a few shapes."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    fused = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION)]
    if dev != "cuda":
        fused = [("math", SDPBackend.MATH)]
    cases = [(32, hd, 1, seq, name) for hd in (64, 80, 96, 128, 192, 256)
             for seq in (2048, 4096, 8192) for name in fused]  # fmt: skip
    cases += [(64, 64, batch, 4096, name) for batch in (1, 4) for name in fused]  # gpt-oss
    eager = ("unfused", None)
    cases += [(heads, hd, 1, seq, eager) for heads, hd in ((32, 64), (32, 128), (64, 64))
              for seq in (2048, 4096)]  # fmt: skip
    for heads, hd, batch, seq, (name, backend) in cases:
        s = seq // scale
        q, k, v = (rand(batch, heads, s, hd, dev=dev, grad=True) for _ in range(3))
        dout = rand(batch, heads, s, hd, dev=dev)
        row = {"op": "attention", "heads": heads, "head_dim": hd, "batch": batch, "seq": s,
               "backend": name, "flops_fwd": 4 * batch * heads * hd * s * (s + 1) / 2}  # fmt: skip

        def fwd(q=q, k=k, v=v, backend=backend) -> torch.Tensor:
            if backend is None:
                return unfused(q, k, v)
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def both(fwd=fwd, dout=dout) -> None:
            fwd().backward(dout)

        try:
            row["fwd_ms"] = timer(fwd)
            row["fwd_bwd_ms"] = timer(both)
        except Exception as exc:
            row["error"] = str(exc)[:200]
        rows.append(row)
        del q, k, v, dout
        if dev == "cuda":
            torch.cuda.empty_cache()
    return rows


def windowed_attention(timer: Timer, dev: str, scale: int, budget_s: float) -> list[dict[str, Any]]:
    """gpt-oss's attention as FlexAttention runs it: learnable sinks, full and 128-token
    sliding-window causal masks (compiled by Triton; skipped when the time is short)."""
    if dev != "cuda" or budget_s < 60:
        return []
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    flex = torch.compile(flex_attention)
    rows = []
    heads, hd, s = 64, 64, 4096 // scale
    q, k, v = (rand(1, heads, s, hd, dev=dev, grad=True) for _ in range(3))
    dout = rand(1, heads, s, hd, dev=dev)
    for window in (None, 128):

        def mask(b, h, qi, ki, window=window):
            keep = qi >= ki
            return keep if window is None else keep & (qi - ki < window)

        block = create_block_mask(mask, 1, 1, s, s, device=dev)
        row = {"op": "flex_attention", "model": "gpt-oss-120b", "heads": heads, "head_dim": hd,
               "batch": 1, "seq": s, "window": window}  # fmt: skip
        try:
            row["fwd_ms"] = timer(lambda block=block: flex(q, k, v, block_mask=block))

            def both(block=block) -> None:
                flex(q, k, v, block_mask=block).backward(dout)

            row["fwd_bwd_ms"] = timer(both)
        except Exception as exc:
            row["error"] = str(exc)[:300]
        rows.append(row)
    return rows


def quick_geglu(x: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """gpt-oss's expert activation as Megatron-Core writes it (clamp 7, offset 1, alpha 1.702)."""
    glu, lin = x.chunk(2, dim=-1)
    glu = glu.clamp(max=7.0)
    lin = lin.clamp(min=-7.0, max=7.0)
    return (glu * torch.sigmoid(1.702 * glu) * (lin + 1.0) * probs).to(x.dtype)


def swiglu(x: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    glu, lin = x.chunk(2, dim=-1)
    return (F.silu(glu) * lin * probs).to(x.dtype)


def _activation_rows(timer: Timer, dev: str, model: str, routed: int, width: int, budget_s: float):
    act = quick_geglu if model.startswith("gpt-oss") else swiglu
    x = rand(routed, width, dev=dev, grad=True)
    probs = torch.rand(routed, 1, device=dev, dtype=torch.float32)
    dy = rand(routed, width // 2, dev=dev)
    variants = [("eager", act)]
    if dev == "cuda" and budget_s > 30:  # Megatron-Core's jit_fuser: torch.compile
        variants.append(("compiled", torch.compile(act)))
    for name, fn in variants:
        ms = timer(lambda fn=fn: fn(x, probs).backward(dy))
        yield {"op": "activation", "model": model, "variant": name, "rows": routed,
               "width": width, "ms": ms}  # fmt: skip


def elementwise(timer: Timer, dev: str, scale: int, budget_s: float) -> list[dict[str, Any]]:
    """The activation (eager and compiled), RMSNorm and the token permutes, forward + backward."""
    rows = []
    for model, tokens, _ in (LAYOUTS[0], LAYOUTS[3]):
        h, _, _, _, inter, _, top_k = MODELS[model]
        t, width = tokens // scale, h // scale
        routed = t * top_k
        rows += _activation_rows(timer, dev, model, routed, 2 * inter // scale, budget_s)
        hs = rand(t, width, dev=dev, grad=True)
        w = torch.ones(width, device=dev, dtype=torch.bfloat16, requires_grad=True)
        dh = rand(t, width, dev=dev)
        norm = timer(lambda hs=hs, w=w, dh=dh: F.rms_norm(hs, (hs.shape[1],), w, 1e-5).backward(dh))
        src = rand(t, width, dev=dev)
        idx = torch.randint(0, t, (routed,), device=dev)
        out = torch.zeros(t, width, device=dev, dtype=torch.bfloat16)
        gathered = src.index_select(0, idx)
        permute = timer(lambda src=src, idx=idx: src.index_select(0, idx))
        unpermute = timer(lambda out=out, idx=idx, g=gathered: out.index_add_(0, idx, g))
        rows += [
            {"op": "rmsnorm", "model": model, "rows": t, "width": width, "ms": norm},
            {"op": "permute", "model": model, "rows": routed, "width": width, "ms": permute},
            {"op": "unpermute", "model": model, "rows": routed, "width": width, "ms": unpermute},
        ]
    return rows


class EagerMoE(torch.nn.Module):
    """One rank's mixture-of-experts layer run eagerly, as Megatron-Core's all-to-all dispatcher
    runs it without CUDA graphs (the all-to-all itself left out: one GPU): the router's GEMM,
    softmax and top-k, the token counts read on the host (the device-to-host sync the
    dispatcher makes for its splits), the tokens permuted by expert, one GEMM pair per local
    expert with the gated activation between, and the weighted un-permute."""

    def __init__(self, hidden: int, inter: int, experts: int, top_k: int, dev: str) -> None:
        super().__init__()
        self.top_k, self.experts = top_k, experts
        self.router = torch.nn.Linear(hidden, experts, bias=False, device=dev)
        self.fc1 = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(hidden, 2 * inter, device=dev) * 0.02)
            for _ in range(experts)
        )
        self.fc2 = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(inter, hidden, device=dev) * 0.02)
            for _ in range(experts)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.router(x).float()
        probs, idx = torch.topk(torch.softmax(logits, dim=-1), self.top_k, dim=-1)
        probs = probs / probs.sum(dim=-1, keepdim=True)
        flat = idx.flatten()
        counts = torch.bincount(flat, minlength=self.experts).tolist()  # the host sync
        order = torch.argsort(flat, stable=True)
        rows = x.index_select(0, order // self.top_k)
        outs = []
        for e, chunk in enumerate(torch.split(rows, counts)):
            h = chunk @ self.fc1[e].to(x.dtype)
            glu, lin = h.chunk(2, dim=-1)
            outs.append((F.silu(glu) * lin) @ self.fc2[e].to(x.dtype))
        weighted = torch.cat(outs) * probs.flatten()[order].unsqueeze(-1).to(x.dtype)
        out = torch.zeros_like(x)
        return out.index_add(0, order // self.top_k, weighted)


def moe_host(timer: Timer, dev: str, scale: int) -> list[dict[str, Any]]:
    """An eager MoE layer's forward + backward: wall time (CUDA events around it, the host's
    launches and syncs included) against the GPU's busy time (the profiler's kernel times):
    their difference is the host time the layer exposes. Qwen3-30B-A3B's layer on one rank of
    EP 8 (16 local experts, 4,096 tokens routed to them) and gpt-oss-120b's."""
    from torch.profiler import ProfilerActivity, profile

    rows = []
    for model, tokens, ep in (LAYOUTS[3], LAYOUTS[0]):
        h, _, _, _, inter, experts, top_k = MODELS[model]
        local = experts // ep
        layer = EagerMoE(h // scale, inter // scale, local, top_k, dev).to(torch.bfloat16)
        x = rand(tokens // scale, h // scale, dev=dev, grad=True)
        dy = rand(tokens // scale, h // scale, dev=dev)

        def step(layer: EagerMoE = layer, x: torch.Tensor = x, dy: torch.Tensor = dy) -> None:
            layer(x).backward(dy)

        wall = timer(step)
        busy = wall
        launches = None
        if dev == "cuda":
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    step()
                torch.cuda.synchronize()
            kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
            busy = sum(e.device_time for e in kernels) / 1e3 / 5  # us -> ms, per step
            launches = len(kernels) / 5
        rows.append({"op": "moe_host", "model": model, "tokens": tokens // scale,
                     "local_experts": local, "wall_ms": wall, "gpu_busy_ms": busy,
                     "kernels": launches})  # fmt: skip
    return rows


def ceilings(timer: Timer, dev: str, scale: int) -> dict[str, float]:
    n = 8192 // scale
    a, b = rand(n, n, dev=dev), rand(n, n, dev=dev)
    ms = timer(lambda: torch.matmul(a, b))
    big = torch.empty(1 << (30 if dev == "cuda" else 20), device=dev, dtype=torch.uint8)
    dst = torch.empty_like(big)
    copy_ms = timer(lambda: dst.copy_(big))
    return {"gemm_8192_tflops": 2 * n**3 / ms / 1e9, "copy_gb_s": 2 * big.numel() / copy_ms / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true", help="tiny shapes on the CPU")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds for compiled variants")
    ap.add_argument("--parts", default="gemm,attention,elementwise,windowed")
    args = ap.parse_args()
    dev = "cpu" if args.dry else "cuda"
    scale = 32 if args.dry else 1
    timer = Timer(dev, warmup=1 if args.dry else 5, reps=2 if args.dry else 20)
    start = time.monotonic()
    torch.manual_seed(0)
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if dev == "cuda" else platform.processor(),
        "cudnn": torch.backends.cudnn.version(),
        "date": time.strftime("%Y-%m-%d"),
    }
    info["ceilings"] = ceilings(timer, dev, scale)
    parts = args.parts.split(",")
    rows: list[dict[str, Any]] = []
    if "gemm" in parts:
        rows += gemms(timer, dev, scale) + gemm_grid(timer, dev, scale)
    if "attention" in parts:
        rows += attention(timer, dev, scale)
    if "elementwise" in parts:
        rows += elementwise(timer, dev, scale, args.budget - (time.monotonic() - start))
    if "moe_host" in parts:
        rows += moe_host(timer, dev, scale)
    if "windowed" in parts:
        rows += windowed_attention(timer, dev, scale, args.budget - (time.monotonic() - start))
    print(f"done {time.monotonic() - start:.0f}s", flush=True)
    info["seconds"] = time.monotonic() - start
    with open(args.out, "w") as f:
        json.dump({"info": info, "rows": rows}, f, indent=1)
    for r in rows:
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})
    print(json.dumps(info))


if __name__ == "__main__":
    main()
