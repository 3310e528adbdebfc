"""How right the planner was on published runs like a plan: the core's accuracy search.

The measured records (``catalog/accuracy.json``, exported from the validation report by
``validation/export.py``) hold every published measurement the estimator was compared with:
kernels, training throughput and peak memory, serving throughput and serving latency under
load, each with the accelerator, model, software stack or engine, scale, layout and source.
Read once, lazily (``records``), they answer:

* ``plan_accuracy``: for one plan, the records nearest to it (``select``) and their observed
  error, and the range that error implies for the plan's headline numbers;
* ``peak_memory_factors``: the likely range of a training plan's peak memory, which the fit
  verdict (``memory.verdict``) and the training sweep read;
* ``rate_headroom`` and ``tie_band``: the margins a fleet's replica count and a sweep's ties are
  read with.

Pure and memoized: nothing here touches the network or reads outside the package.
"""

from estimator.accuracy.margins import MIN_GROUP, rate_headroom, rate_headroom_note, tie_band
from estimator.accuracy.nearest import (
    LIMIT,
    MIN_MATCH,
    MIN_RANGE,
    Match,
    Plan,
    nearest,
    select,
)
from estimator.accuracy.ranges import (
    FAMILY_BIAS,
    METRIC_LABELS,
    METRIC_UNITS,
    cross_vendor,
    peak_memory_factors,
    plan_accuracy,
    time_range,
)
from estimator.accuracy.records import (
    STYLES,
    Record,
    layout_style,
    records,
    source_url,
    summary,
)

__all__ = [
    "FAMILY_BIAS",
    "LIMIT",
    "METRIC_LABELS",
    "METRIC_UNITS",
    "MIN_GROUP",
    "MIN_MATCH",
    "MIN_RANGE",
    "STYLES",
    "Match",
    "Plan",
    "Record",
    "cross_vendor",
    "layout_style",
    "nearest",
    "peak_memory_factors",
    "plan_accuracy",
    "rate_headroom",
    "rate_headroom_note",
    "records",
    "select",
    "source_url",
    "summary",
    "tie_band",
    "time_range",
]
