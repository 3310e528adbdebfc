"""The validation report as the API returns it (``GET /api/v1/accuracy``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from app.schemas.common import AccuracyRecordOut, ErrorSummaryOut

__all__ = ["AccuracyReportOut"]


class AccuracySummaryOut(ErrorSummaryOut):
    kind: str = Field(description="kind / metric, e.g. 'training / tokens_per_s_per_gpu'")
    name: str = Field(description="The group, accelerator, family or stack summarized")


class AccuracyReportRecordOut(AccuracyRecordOut):
    """A compared record as the report lists it: what it measured, and how."""

    kind: str = Field(description="kernel, training, serving or load")
    metric: str
    family: str
    precision: str
    regime: str = Field(description="Latency under load: the load model's regime")
    unit: str


class AccuracyReportOut(BaseModel):
    filters: dict[str, str]
    options: dict[str, list[str]] = Field(description="The values each filter can take")
    n: int
    summary: list[AccuracySummaryOut]
    by_group: list[AccuracySummaryOut]
    by_accelerator: list[AccuracySummaryOut]
    by_family: list[AccuracySummaryOut]
    by_stack: list[AccuracySummaryOut]
    records: list[AccuracyReportRecordOut]
