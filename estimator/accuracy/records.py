"""The measured records the planner's accuracy is read from (``catalog/accuracy.json``).

Every published measurement the planner was compared with (kernels, training throughput,
training peak memory, serving throughput, serving latency under load), exported from the
validation report by ``validation/export.py`` with its accelerator, model, stack, scale, layout
and source. Read once, lazily; each record's accelerator generation and vendor come from the
accelerator catalog, its link from its citation. ``summary`` is the error statistics every
answer about accuracy quotes.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from estimator.catalog import get_accelerator
from estimator.catalog.files import load
from estimator.errors import SpecError, UnknownIdError

__all__ = [
    "STYLES",
    "Record",
    "layout_style",
    "quantile",
    "records",
    "source_url",
    "summary",
    "vendor_of",
]

# Layout styles, as an answer names them: a run with expert parallelism; else one splitting the
# model's layers or tensors (tensor, pipeline or context parallel: Megatron's way); else data
# parallel alone, its weights whole or sharded (DDP, ZeRO, FSDP).
STYLES = {"dp-only": "dp-only (ZeRO/FSDP)", "tp/pp": "tp/pp (Megatron)", "moe/ep": "moe/ep"}


@dataclass(frozen=True, slots=True)
class Record:
    """One compared published measurement."""

    kind: str  # kernel, training, memory, serving, load
    metric: str  # what was measured: op time, tokens_per_s_per_gpu, ttft, tpot, ...
    id: str
    group: str
    accelerator: str
    generation: str
    family: str
    model: str
    model_class: str
    stack: str
    gpus: int
    precision: str
    regime: str
    measured: float
    predicted: float
    unit: str
    source: str
    url: str | None
    vendor: str = ""  # the accelerator's (catalog) vendor
    style: str = ""  # its layout's style (``STYLES``; "" where the record gives no layout)

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


_GITHUB_AT = re.compile(r"^([\w.-]+/[\w.-]+)@([0-9a-f]{7,40}):([^\s:]+)(?::(\d+))?")
_GITHUB_SPACED = re.compile(r"^([\w.-]+/[\w.-]+)/(\S+) @ ([0-9a-f]{7,40})(?: line (\d+))?")
_URL = re.compile(r"https?://[^\s)\"']+")


def source_url(source: str) -> str | None:
    """A link to a record's source where its citation names one: a URL in it, or a GitHub
    ``owner/repo@commit:path[:line]`` or ``owner/repo/path @ commit line N`` citation."""
    text = source.strip()
    if text.startswith("github "):
        text = text[len("github ") :]
    if m := _GITHUB_AT.match(text):
        repo, commit, path, line = m.groups()
        return f"https://github.com/{repo}/blob/{commit}/{path}" + (f"#L{line}" if line else "")
    if m := _GITHUB_SPACED.match(text):
        repo, path, commit, line = m.groups()
        return f"https://github.com/{repo}/blob/{commit}/{path}" + (f"#L{line}" if line else "")
    if m := _URL.search(text):
        return m.group(0).rstrip(".,;")
    return None


def _generation(accelerator: str) -> str:
    """A catalog accelerator's generation; "" for any other (a record's are all catalog ids)."""
    try:
        return get_accelerator(accelerator).generation or ""
    except (SpecError, UnknownIdError):
        return ""


def vendor_of(accelerator: str) -> str:
    """A catalog accelerator's vendor; "" for any other."""
    try:
        return get_accelerator(accelerator).vendor or ""
    except (SpecError, UnknownIdError):
        return ""


def layout_style(*, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1) -> str:
    """A layout's style (``STYLES``): ``moe/ep`` with expert parallelism; ``tp/pp`` with tensor,
    pipeline or context parallelism; else ``dp-only`` (ZeRO / FSDP or plain DDP)."""
    if ep > 1:
        return "moe/ep"
    if tp > 1 or pp > 1 or cp > 1:
        return "tp/pp"
    return "dp-only"


def _style_of(layout: Any) -> str:
    """A report row's layout style; "" where it gives no layout (serving, kernels)."""
    if not isinstance(layout, dict):
        return ""
    return layout_style(**{k: int(layout.get(k) or 1) for k in ("tp", "pp", "cp", "ep")})


def _record(row: Mapping[str, Any]) -> Record:
    """A catalog record; a load row's ITL reads as TPOT (the inter-token latency a source gives
    where it gives no TPOT)."""
    source = str(row.get("source") or "")
    accelerator = str(row.get("accelerator") or "")
    kind, metric = str(row["kind"]), str(row["metric"])
    return Record(
        kind=kind,
        metric="tpot" if kind == "load" and metric == "itl" else metric,
        id=str(row["id"]),
        group=str(row["group"]),
        accelerator=accelerator,
        generation=_generation(accelerator),
        family=str(row.get("family") or ""),
        model=str(row.get("model") or ""),
        model_class=str(row.get("model_class") or ""),
        stack=str(row.get("stack") or ""),
        gpus=int(row.get("gpus") or 0),
        precision=str(row.get("precision") or ""),
        regime=str(row.get("regime") or ""),
        measured=float(row["measured"]),
        predicted=float(row["predicted"]),
        unit=str(row.get("unit") or ""),
        source=source,
        url=source_url(source),
        vendor=vendor_of(accelerator),
        style=_style_of(row.get("layout")),
    )


@cache
def records() -> tuple[Record, ...]:
    """Every record of ``catalog/accuracy.json``, in its order (the report's compared rows, its
    latency-under-load rows, its measured peaks)."""
    return tuple(_record(r) for r in load("accuracy.json")["records"])


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile as the validation report takes it (``validation.report.summarize``):
    the value at rank ``round(q (n - 1))``, so the page's and the report's p90 agree."""
    n = len(sorted_values)
    return sorted_values[min(n - 1, round(q * (n - 1)))]


def summary(rows: Iterable[Record]) -> dict[str, Any] | None:
    """n, median and p90 absolute error, the median and the 10th / 90th percentile signed
    error of ``rows``; None for none."""
    errors = sorted(r.error for r in rows)
    if not errors:
        return None
    ape = sorted(abs(e) for e in errors)
    return {
        "n": len(errors),
        "median_ape": statistics.median(ape),
        "p90_ape": quantile(ape, 0.9),
        "median_signed": statistics.median(errors),
        "p10_signed": quantile(errors, 0.1),
        "p90_signed": quantile(errors, 0.9),
    }
