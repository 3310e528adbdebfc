"""The CLI's renderings of the API's answers: plain-text tables for a terminal, and CSV.

Every function takes the JSON the REST API returns for the same request (``views.*_out``), so
the table and ``--json`` cannot disagree: numbers are only formatted here (GiB, ms, %, $),
never derived, except each term's share of its total.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from app import format as fmt
from estimator.inputs.accelerator import GIB

__all__ = [
    "flat_csv",
    "model_text",
    "serving_sweep_text",
    "serving_text",
    "training_sweep_text",
    "training_text",
]


def _gib(n: float | None) -> str:
    return fmt.gib(n, 2, unit=False, missing="-")


def _ms(s: float | None) -> str:
    return fmt.ms(s, missing="-")


def _usd(x: float | None) -> str:
    return fmt.dollars(x, missing="-")


def _num(x: float | None) -> str:
    return fmt.num(x, missing="-")


def _sig(x: float | None) -> str:
    return "-" if x is None else fmt.sig(x)


def _cents(x: float | None) -> str:
    """Dollars to three significant digits under a dollar (a token price)."""
    return "-" if x is None else fmt.usd(x)


def _price(cost: Mapping[str, Any]) -> str:
    """The price per GPU-hour and the first clause of its source (the JSON has all of it)."""
    if cost["price_usd_per_gpu_hour"] is None:
        return "no price (give one with --price)"
    source = (cost["price_source"] or "").split(",")[0]
    return f"{_usd(cost['price_usd_per_gpu_hour'])} per GPU-hour ({source})"


def _free_share(memory: Mapping[str, Any]) -> float:
    """The share of a GPU's memory a plan leaves free (0 for a GPU of no capacity)."""
    capacity = memory["capacity_bytes"]
    return memory["headroom_bytes"] / capacity if capacity else 0.0


def _headroom(memory: Mapping[str, Any]) -> str:
    """What a GPU has left, and "tight" under the share the sweep keeps free (``MIN_HEADROOM``:
    a plan it would not list as feasible)."""
    from estimator.memory.verdict import MIN_HEADROOM

    free = memory["headroom_bytes"]
    if free < 0:
        return f"{_gib(-free)} GiB over"
    share = _free_share(memory)
    tight = (
        f", tight: under the {MIN_HEADROOM:.0%} the sweep keeps free"
        if share < MIN_HEADROOM
        else ""
    )
    return f"{_gib(free)} GiB free, {share:.1%}{tight}"


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell; the first column left-aligned, the rest right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    return [line(header), *(line(r) for r in rows)]


def _terms(title: str, unit: str, parts: Mapping[str, float], total: float) -> list[str]:
    """A breakdown (``*_bytes`` or ``*_s`` terms) with each term's share of ``total``."""
    scale = GIB if unit == "GiB" else 1e-3
    rows = [
        [
            f"  {name.rsplit('_', 1)[0]}",
            f"{value / scale:,.2f}",
            f"{value / total:.1%}" if total else "",
        ]
        for name, value in parts.items()
        if value
    ]
    return _grid([title, unit, "share"], [*rows, ["  total", f"{total / scale:,.2f}", ""]])


def _layout(layout: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={layout[k]}" for k in ("tp", "pp", "dp", "cp", "ep", "vp") if k in layout)


def _notes(notes: Sequence[str]) -> list[str]:
    return ["", "notes:", *(f"  - {n}" for n in notes)] if notes else []


_FIT_WORDS = {"fits": "yes", "tight": "TIGHT", "does_not_fit": "NO"}


def _serving_fit(memory: Mapping[str, Any]) -> str:
    """A serving plan's fit in a word: yes, TIGHT (under ``MIN_HEADROOM`` free) or NO."""
    from estimator.memory.verdict import MIN_HEADROOM

    if not memory["fits"]:
        return "NO"
    return "TIGHT" if _free_share(memory) < MIN_HEADROOM else "yes"


def _energy_lines(out: Mapping[str, Any], token: str) -> list[str]:
    """Energy at the facility (or why there is none) and $ per GPU-hour rented and owned."""
    e, tco = out.get("energy"), out.get("tco")
    if e is None:
        return [f"energy: none ({out.get('energy_refused')}); give --gpu-power-w"]
    run = "" if e["mwh"] is None else f"{e['mwh']:,.1f} MWh for the run, "
    basis = "TDP, a bound" if e["basis"] == "tdp" else "given"
    lines = [
        f"energy: {run}{e['j_per_token']:.4g} J per {token} ({e['kwh_per_1m_tokens']:.4g} kWh"
        f" per 1M), {e['tokens_per_s_per_mw']:,.0f} {token}s/s per MW; {e['gpu_w']:,.0f} W"
        f" per GPU ({basis}), {e['facility_w_per_gpu']:,.0f} W at the facility"
    ]
    if tco is not None:
        owned = (
            "give --capex to cost owning"
            if tco["owned_usd_per_gpu_hour"] is None
            else f"owned {_cents(tco['owned_usd_per_gpu_hour'])} (capital"
            f" {_cents(tco['capital_usd_per_gpu_hour'])})"
        )
        lines.append(
            f"per GPU-hour: rented {_cents(tco['rental_usd_per_gpu_hour'])}; power"
            f" {_cents(tco['power_usd_per_gpu_hour'])}; {owned}"
        )
    return lines


def _token_price_lines(p: Mapping[str, Any]) -> list[str]:
    """Token prices as providers state them (nothing unpriced)."""
    if p["usd_per_1m_blended_tokens"] is None:
        return []
    cached = p["usd_per_1m_cached_input_tokens"]
    return [
        f"token prices per 1M: input {_cents(p['usd_per_1m_input_tokens'])}"
        + ("" if cached is None else f", cached input {_cents(cached)}")
        + f", output {_cents(p['usd_per_1m_output_tokens'])}; blended"
        f" {_cents(p['usd_per_1m_blended_tokens'])} at {p['input_per_output']:g}:1"
    ]


def _effective_lines(out: Mapping[str, Any]) -> list[str]:
    """The run as it goes: its effective time, wall-clock and cost with interruptions, restarts
    and checkpoints (or why there is none)."""
    x = out.get("effective")
    if x is None:
        return [f"effective: none ({out.get('effective_refused')})"]
    cost = "" if x["effective_cost_usd"] is None else f", {_usd(x['effective_cost_usd'])}"
    days = x["effective_time_to_train_s"] / 86400
    return [
        f"effective {x['effective_time_fraction']:.2%}: {days:,.1f} days,"
        f" {_num(x['effective_gpu_hours'])} GPU-hours{cost};"
        f" {x['expected_interruptions']:,.1f} interruptions, a {_gib(x['checkpoint_bytes'])} GiB"
        f" checkpoint every {x['checkpoint_every_steps']:,} steps"
    ]


def training_text(out: Mapping[str, Any]) -> str:
    """A training estimate: the verdict and key numbers, then memory and step time by term."""
    m, t, tp, c = out["memory_per_gpu"], out["time"], out["throughput"], out["cost"]
    lay = out["layout"]
    memory = {k: v for k, v in m.items() if k.endswith("_bytes") and k not in _MEMORY_TOTALS}
    lines = [
        f"{out['model']} on {out['num_gpus']} x {out['accelerator']}: {_layout(lay)} "
        f"zero={lay['zero_stage']}, global batch {out['global_batch_size']:,}",
        f"fits: {_FIT_WORDS[m['fit']]}: {_gib(m['total_bytes'])} of "
        f"{_gib(m['capacity_bytes'])} GiB per GPU ({_headroom(m)}; stage {m['stage']})",
        f"  {m['fit_note']}",
        f"step {t['step_s']:,.3f} s ({t['microbatches']} micro-batches), "
        f"{tp['tokens_per_s']:,.0f} tokens/s ({tp['tokens_per_s_per_gpu']:,.0f} per GPU), "
        f"MFU {tp['mfu']:.1%}, HFU {tp['hfu']:.1%} (of the {tp['peak_format']} peak)",
        f"cost: {_usd(c['usd_per_1m_tokens'])} per 1M tokens at {_price(c)}",
    ]
    if c["tokens"] is not None:
        lines.append(
            f"{c['tokens']:,.0f} tokens: {c['time_to_train_s'] / 86400:,.1f} days, "
            f"{_num(c['gpu_hours'])} GPU-hours, {_usd(c['usd'])}"
        )
    lines += _effective_lines(out)
    if out.get("jobs"):  # the plan as each stack's job: the files are in the JSON answer
        jobs = ", ".join(
            f"{j['stack']} {j['version']} ({', '.join(j['files'])})" for j in out["jobs"]
        )
        lines.append(f"jobs: {jobs}; the files with --json (jobs[].files)")
    lines += _energy_lines(out, "token")
    if out.get("fit_suggestions"):  # a plan that does not surely fit: the nearest that do
        flag = _training_flags()
        lines += ["", "nearest layouts that fit (the flags to change):"]
        lines += [
            f"  {' '.join(f'{flag.get(k, k)} {v}' for k, v in s['changes'].items())}: "
            f"{_gib(s['memory_bytes'])} of {_gib(s['capacity_bytes'])} GiB per GPU, "
            f"{s['tokens_per_s']:,.0f} tokens/s, MFU {s['mfu']:.1%}"
            for s in out["fit_suggestions"]
        ]
    breakdown = t["breakdown"]
    lines += ["", *_terms("memory per GPU", "GiB", memory, m["total_bytes"])]
    lines += ["", *_terms("time per step", "ms", breakdown, t["step_s"])]
    return "\n".join(lines + _notes(out["notes"]))


def _training_flags() -> dict[str, str]:
    """The training command's flag of each request field, by the field's page name."""
    from app.schemas.fields import leaves
    from app.schemas.training import TrainingRequest

    return {leaf.name: leaf.flag for leaf in leaves(TrainingRequest)}


_MEMORY_TOTALS = {
    "total_bytes",
    "capacity_bytes",
    "headroom_bytes",
    "prefill_peak_bytes",
    "decode_peak_bytes",
}


def serving_text(out: Mapping[str, Any]) -> str:
    """A serving estimate: key numbers, memory by term, TTFT and TPOT by term."""
    m, lat, tp, c = out["memory_per_gpu"], out["latency"], out["throughput"], out["cost"]
    memory = {k: v for k, v in m.items() if k.endswith("_bytes") and k not in _MEMORY_TOTALS}
    lines = [
        f"{out['model']} on {out['num_gpus']} x {out['accelerator']}: {_layout(out['layout'])}, "
        + (
            f"{out['load']['request_rate']:.4g} requests/s"
            if out.get("load") and out["load"]["request_rate"] is not None
            else f"concurrency {out['concurrency']}"
        ),
        f"fits: {_serving_fit(m)}: {_gib(m['total_bytes'])} of "
        f"{_gib(m['capacity_bytes'])} GiB per GPU ({_headroom(m)}); "
        f"KV cache {out['kv_cache_bytes_per_token'] / 2**10:,.1f} KiB per token, at most "
        f"{out['max_concurrency']:,} sequences",
        f"TTFT {_ms(lat['ttft_s'])} ms (p99 {_ms(lat['ttft_p99_s'])}), TPOT {_ms(lat['tpot_s'])}"
        f" ms at the {lat['basis']}; a lone request: TTFT {_ms(lat['ttft_lone_s'])} ms, TPOT"
        f" {_ms(lat['tpot_lone_s'])} ms",
        f"{tp['output_tokens_per_s']:,.0f} output tokens/s "
        f"({tp['output_tokens_per_s_per_gpu']:,.0f} per GPU) at the {tp['basis'] or 'lone request'}"
        + _capacity(tp),
        f"cost: {_usd(c['usd_per_1m_output_tokens'])} per 1M output tokens all-in at "
        f"{_price(c)} (decode {_usd(c['usd_per_1m_output_tokens_decode'])} per 1M output, "
        f"prefill {_usd(c['usd_per_1m_input_tokens'])} per 1M input tokens)" + _at_capacity(tp, c),
        *_token_price_lines(out["token_prices"]),
        *_energy_lines(out, "output token"),
        *_fleet(out.get("fleet")),
        *_effects(out),
        "",
        *_terms("memory per GPU", "GiB", memory, m["total_bytes"]),
        "",
        *_terms("time to first token", "ms", lat["ttft_breakdown"], lat["ttft_lone_s"]),
        "",
        *_terms("time per output token", "ms", lat["tpot_breakdown"], lat["tpot_lone_s"]),
    ]
    return "\n".join(lines + _notes(out["notes"]))


def _capacity(tp: dict[str, Any]) -> str:
    """The replica's capacity beside a throughput at a lighter load."""
    cap, used = tp.get("capacity_output_tokens_per_s"), tp.get("utilization")
    if not cap or used is None or used >= 0.995:
        return ""
    return f"; capacity {cap:,.0f} ({used:.0%} used)"


def _at_capacity(tp: dict[str, Any], c: dict[str, Any]) -> str:
    """The all-in cost with the replica at capacity, beside the cost at a lighter load."""
    used, at_cap = tp.get("utilization"), c.get("usd_per_1m_output_tokens_at_capacity")
    if at_cap is None or used is None or used >= 0.995:
        return ""
    return f"; {_usd(at_cap)} per 1M output tokens at capacity"


def _fleet(f: dict[str, Any] | None) -> list[str]:
    """The replicas a request rate needs (with request_rate)."""
    if f is None:
        return []
    if f["replicas"] is None:
        return [f"fleet: no replica count carries {f['request_rate']:.4g} requests/s: {f['basis']}"]
    return [
        f"fleet: {f['request_rate']:.4g} requests/s needs {f['replicas']:,} replica"
        f"{'' if f['replicas'] == 1 else 's'}"
        f" ({f['fleet_gpus']:,} GPUs), {f['basis']}"
    ]


def _effects(out: Mapping[str, Any]) -> list[str]:
    """What speculative decoding and the prefix cache change, where the plan has them; the
    end-to-end latency under load and, with latency targets, the goodput."""
    lines = []
    sp, pc = out.get("speculative"), out.get("prefix_cache")
    if sp:
        lines.append(
            f"speculative decoding: {sp['method']}, {sp['num_speculative_tokens']} draft tokens,"
            f" acceptance length {sp['acceptance_length']:g}: step {_ms(sp['step_s'])} ms"
            f" (verify {_ms(sp['verify_s_per_step'])}, draft {_ms(sp['draft_s_per_step'])}),"
            f" TPOT {_ms(out['latency']['tpot_lone_s'])} ms vs {_ms(sp['tpot_without_s'])} ms"
            f" without ({sp['tpot_speedup']:.2f}x)"
        )
    if pc:
        lines.append(
            f"prefix cache: {pc['cached_tokens']:,} tokens cached, {pc['computed_tokens']:,}"
            f" computed: TTFT {_ms(out['latency']['ttft_lone_s'])} ms vs"
            f" {_ms(pc['ttft_without_s'])} ms uncached ({pc['ttft_speedup']:.2f}x)"
        )
    load = out.get("load")
    if load and load["e2e_s"] is not None:
        lines.append(
            f"end to end {_ms(load['e2e_s'])} ms (p50 {_ms(load['e2e_p50_s'])}, p99"
            f" {_ms(load['e2e_p99_s'])})"
        )
    if load and load["slo_attainment"] is not None:
        lines.append(
            f"goodput {load['goodput_requests_per_s']:.3g} requests/s:"
            f" {load['slo_attainment']:.1%} of requests within the latency targets"
        )
    return lines


def training_sweep_text(out: Mapping[str, Any]) -> str:
    """A training sweep: the counts, the recommendations with their reasons, the page of rows."""
    n = out["counts"]
    lines = [
        f"{out['model']}: {n['enumerated']:,} layouts, {n['invalid']:,} broke a rule, "
        f"{n['evaluated']:,} evaluated, {n['out_of_memory']:,} out of memory, "
        + (f"{n['tight']:,} tight, " if n.get("tight") else "")
        + f"{n['feasible']:,} feasible (objective: {out['objective']})",
    ]
    if out["recommendations"]:
        lines += ["", "recommended:"]
    several = len(out["stacks"]) > 1
    for r in out["recommendations"]:
        row = r["row"]
        stack = f" {row['stack']}" if several else ""
        lines.append(
            f"{r['rank']:>3}.{'=' if r.get('tie') else ' '}{row['num_gpus']} x"
            f" {row['accelerator']}{stack} {row['precision']} "
            f"{_layout(row)} zero={row['zero_stage']} mb={row['micro_batch_size']} "
            f"recompute={row['recompute']}: {row['tokens_per_s']:,.0f} tokens/s, MFU "
            f"{row['mfu']:.1%}, {_usd(row['usd_per_1m_tokens'])} per 1M tokens"
        )
        lines += [f"       {why}" for why in r["why"]]
    named = ("accelerator", "stack") if several else ("accelerator",)
    header = [*named, "precision", "recompute", "gpus", "tp", "pp", "dp", "cp", "ep"]
    header += ["vp", "zero", "mb", "GiB", "step s", "tokens/s", "MFU", "$/1M tok", "kWh/1M"]
    rows = [
        [
            *(str(row[k]) for k in (*named, "precision", "recompute", "num_gpus")),
            *(str(row[k]) for k in ("tp", "pp", "dp", "cp", "ep", "vp", "zero_stage")),
            str(row["micro_batch_size"]),
            _gib(row["memory_bytes"]),
            f"{row['step_s']:,.3f}",
            f"{row['tokens_per_s']:,.0f}",
            f"{row['mfu']:.1%}",
            _usd(row["usd_per_1m_tokens"]),
            _sig(row.get("kwh_per_1m_tokens")),
        ]
        for row in out["rows"]
    ]
    lines += ["", *_page_title(out), *(_grid(header, rows) if rows else [])]
    return "\n".join(lines + _notes(out["notes"]))


def _page_title(out: Mapping[str, Any]) -> list[str]:
    first = (out["page"] - 1) * out["page_size"] + 1
    last = first + len(out["rows"]) - 1
    return [f"{out['rows_kind']} rows {first:,}-{last:,} of {out['total_rows']:,}:"]


def serving_sweep_text(out: Mapping[str, Any]) -> str:
    """A serving sweep: the counts, then the page of replica layouts (cheapest first)."""
    counts = ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in out["counts"].items())
    header = ["accelerator", "precision", "tp", "pp", "dp", "ep", "gpus", "concurrency"]
    header += ["TTFT ms", "TPOT ms", "out tok/s/GPU", "$/1M out", "$/1M blend", "J/out tok"]
    header += ["replicas", "refused"]
    rows = [
        [
            *(str(row[k]) for k in ("accelerator", "precision", "tp", "pp", "dp", "ep")),
            str(row["num_gpus"]),
            _num(row["concurrency"]),
            _ms(row["ttft_s"]),
            _ms(row["tpot_s"]),
            _num(row["output_tokens_per_s_per_gpu"]),
            _usd(row["usd_per_1m_output_tokens"]),
            _cents(row.get("usd_per_1m_blended_tokens")),
            _sig(row.get("j_per_output_token")),
            _num(row["replicas"]),
            "" if row["ok"] else f"{row['field']}: {row['reason']}",
        ]
        for row in out["rows"]
    ]
    lines = [f"{out['model']}: {counts}", "", *_page_title(out)]
    lines += _grid(header, rows) if rows else []
    if out.get("disaggregated"):
        lines += ["", *_disaggregated_lines(out["disaggregated"])]
    return "\n".join(lines + _notes(out["notes"]))


def _disaggregated_lines(d: Mapping[str, Any]) -> list[str]:
    """The cheapest aggregated and disaggregated fleets side by side."""
    a, p = d["aggregated"], d["disaggregated"]
    rows = [
        ["layout", _agg_layout(a), _dis_layout(p)],
        ["replicas (x:y)", _num(a and a["replicas"]), _ratio(p)],
        ["GPUs", _num(a and a["fleet_gpus"]), _num(p and p["fleet_gpus"])],
        ["$/hour", _usd(a and a["usd_per_hour"]), _usd(p and p["usd_per_hour"])],
        ["$/1M out", *(_usd(f and f["usd_per_1m_output_tokens"]) for f in (a, p))],
        ["TTFT p99 ms", *(_ms(f and f["ttft_p99_s"]) for f in (a, p))],
        ["TPOT ms", *(_ms(f and f["tpot_s"]) for f in (a, p))],
        ["out tok/s/GPU", *(_num(f and f["output_tokens_per_s_per_gpu"]) for f in (a, p))],
    ]
    lines = [f"Aggregated against disaggregated at {d['request_rate']:g} requests/s:"]
    lines += _grid(["", "aggregated", "disaggregated"], rows)
    if d["winner"]:
        lines.append(f"cheaper: {d['winner']} (disaggregated/aggregated {d['cost_ratio']:.3f})")
    lines += [n for n in (d["no_plan_aggregated"], d["no_plan_disaggregated"]) if n]
    return lines


def _agg_layout(a: Mapping[str, Any] | None) -> str:
    if a is None:
        return "-"
    dp = f" dp {a['dp']}" if a.get("dp", 1) > 1 else ""
    return f"{a['accelerator']} {a['precision']} tp {a['tp']} pp {a['pp']}{dp}"


def _dis_layout(p: Mapping[str, Any] | None) -> str:
    return "-" if p is None else fmt.disagg_layout(p, "P", "D")


def _ratio(p: Mapping[str, Any] | None) -> str:
    return "-" if p is None else f"{p['prefill_replicas']}:{p['decode_replicas']}"


def model_text(out: Mapping[str, Any]) -> str:
    """A model's spec and exact parameter counts."""
    p = out["params"]
    experts = (
        f", {out['num_experts']} experts ({out['experts_per_token']} per token)"
        if out["num_experts"]
        else ""
    )
    context = f", up to {out['max_seq_len']:,} tokens" if out["max_seq_len"] else ""
    lines = [
        f"{out['id'] or 'custom'} ({out['model_type']}): {p['total']:,} parameters, "
        f"{p['active']:,} active per token",
        f"{out['num_layers']} layers, hidden {out['hidden_size']:,}, "
        f"{out['num_attention_heads']} heads ({out['num_key_value_heads']} KV) of "
        f"{out['head_dim']}, vocabulary {out['vocab_size']:,}{context}{experts}, "
        f"tied embeddings: {'yes' if out['tied_embeddings'] else 'no'}",
        "",
        *_grid(
            ["component", "parameters", "share"],
            [[k, f"{v:,}", f"{v / p['total']:.1%}"] for k, v in p["by_component"].items() if v],
        ),
        "",
        *_grid(
            ["layer kind", "layers", "params per layer", "window"],
            [
                [k["name"], str(k["count"]), f"{k['params_per_layer']:,}", _num(k["window"])]
                for k in out["layer_kinds"]
            ],
        ),
    ]
    return "\n".join(lines + _notes(out["notes"]))


def _flatten(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _flatten(v, f"{prefix}.{i}")
    else:
        yield prefix, value


def flat_csv(out: Mapping[str, Any]) -> str:
    """An answer as ``key,value`` rows, nested keys dotted (``memory_per_gpu.weights_bytes``,
    ``notes.0``); None is empty."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["key", "value"])
    writer.writerows((k, "" if v is None else v) for k, v in _flatten(out, ""))
    return text.getvalue()
