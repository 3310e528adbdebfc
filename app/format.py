"""Numbers as people read them, for the pages (Jinja filters) and the command line's tables:
one place for units and rounding. Display only: every number is computed by the core; a missing
one shows as ``MISSING`` (the pages) or ``-`` (the CLI's plain-text tables)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from estimator.inputs.accelerator import GIB

__all__ = [
    "MISSING",
    "count",
    "disagg_layout",
    "dollars",
    "gib",
    "md",
    "ms",
    "num",
    "pct",
    "seconds",
    "sig",
    "usd",
    "yes_no",
]

MISSING = "—"


def gib(value: float | None, digits: int = 1, *, unit: bool = True, missing: str = MISSING) -> str:
    """Bytes in GiB (2^30 bytes)."""
    if value is None:
        return missing
    return f"{value / GIB:,.{digits}f}" + (" GiB" if unit else "")


def seconds(value: float | None) -> str:
    """A duration in the unit that reads best: ms, s, hours or days."""
    if value is None:
        return MISSING
    if value < 1:
        return f"{value * 1e3:,.1f} ms"
    if value < 3600 * 2:
        return f"{value:,.2f} s"
    if value < 86400 * 3:
        return f"{value / 3600:,.1f} h"
    return f"{value / 86400:,.1f} days"


def ms(value: float | None, digits: int = 2, *, missing: str = MISSING) -> str:
    """Seconds as milliseconds, without the unit (a table's header says it)."""
    return missing if value is None else f"{value * 1e3:,.{digits}f}"


def usd(value: float | None) -> str:
    """Dollars with the precision their size needs: three significant digits under a dollar
    ($0.0123, $0.0000412: never a bare $0.0000), cents up to $1,000, whole dollars above."""
    if value is None:
        return MISSING
    if 0 < abs(value) < 1:
        digits = min(max(2 - math.floor(math.log10(abs(value))), 2), 12)
        return f"${value:,.{digits}f}"
    return f"${value:,.0f}" if abs(value) >= 1000 else f"${value:,.2f}"


def dollars(value: float | None, *, missing: str = MISSING) -> str:
    """Dollars to the cent."""
    return missing if value is None else f"${value:,.2f}"


def pct(value: float | None) -> str:
    """A fraction as a percentage."""
    return MISSING if value is None else f"{value * 100:.1f}%"


def num(value: float | None, digits: int = 0, *, missing: str = MISSING) -> str:
    return missing if value is None else f"{value:,.{digits}f}"


def sig(value: float | None, digits: int = 4) -> str:
    """A rate as people write one: ``digits`` significant figures (3.333, not
    3.3333333333333335; 0.0125, not 0.013)."""
    return MISSING if value is None else f"{value:,.{digits}g}"


def count(value: float | None) -> str:
    """Large counts in words: 70.55 B parameters, 2.0 T tokens."""
    if value is None:
        return MISSING
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {unit}"
    return f"{value:,.0f}"


def yes_no(value: object) -> str:
    return MISSING if value is None else "yes" if value else "no"


def disagg_layout(p: Mapping[str, Any], prefill: str = "prefill", decode: str = "decode") -> str:
    """A disaggregated fleet's or front point's pools: one accelerator named once, two (mixed
    pools) each at its pool."""
    prefill_acc, decode_acc = p["accelerator"], p.get("decode_accelerator", p["accelerator"])
    mixed = decode_acc != prefill_acc
    head = p["precision"] if mixed else f"{prefill_acc} {p['precision']}"
    on_p, on_d = (f" on {prefill_acc}", f" on {decode_acc}") if mixed else ("", "")
    dp = f" dp {p['decode_dp']}" if p.get("decode_dp", 1) > 1 else ""
    return (
        f"{head} {prefill}{on_p} tp {p['prefill_tp']} pp {p['prefill_pp']},"
        f" {decode}{on_d} tp {p['decode_tp']} pp {p['decode_pp']}{dp}"
    )


_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#])")


def md(value: object) -> str:
    """Text for a Markdown summary: HTML's ``<``, ``>`` and ``&`` as entities and Markdown's
    own marks escaped, so a name or note taken from a pasted config is shown as written and
    never becomes a tag, a link or a table cell of its own."""
    text = str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text).replace("\n", " ")
