"""A model by its Hugging Face id: the resolution the API answers with (where it came from, the
commit, the quantization found and the default precision it sets, the parameter cross-check),
and the request that saves a fetched model to the team catalog."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.schemas.catalog import ModelSpecOut
from app.schemas.common import Request
from app.schemas.team import TeamId

__all__ = ["CrossCheckOut", "HubModelOut", "HubTeamModelIn", "QuantizationOut"]

HfId = Field(
    min_length=3,
    max_length=240,
    pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9._/-]+)?$",
    description="A Hugging Face id, org/name, with an optional @revision (branch, tag, commit)",
    examples=["Qwen/Qwen3-8B", "Qwen/Qwen3-8B@main"],
)


class QuantizationOut(BaseModel):
    method: str = Field(description="As the engines name it: fp8, modelopt, awq, gptq ...")
    source: str = Field(description="The file that says so")
    detail: str
    preset: str | None = Field(description="The precision preset serving it; None: no match")


class CrossCheckOut(BaseModel):
    ours: int = Field(description="The planner's exact parameter count")
    index_total_bytes: int = Field(description="model.safetensors.index.json's total_size")
    dtype: str | None = Field(description="The config's torch_dtype the implied count assumes")
    implied: int | None = Field(description="total_size / bytes of dtype")
    ratio: float | None = Field(description="implied / ours - 1")
    verdict: Literal["matches", "differs", "unknown dtype"]
    explanations: list[str] = Field(description="Why it differs, read off the tensor names")


class HubModelOut(BaseModel):
    hf_id: str
    repo_id: str
    revision: str | None
    origin: Literal["catalog", "hub", "cache", "snapshot"] = Field(
        description="catalog: the bundled entry, offline; hub: fetched now; cache: the on-disk"
        " copy (offline, or the hub did not answer)"
    )
    catalog_id: str | None
    commit: str | None
    endpoint: str | None
    quantization: QuantizationOut | None
    default_precision: str | None = Field(
        description="The precision a serving plan of this id defaults to (None: bf16)"
    )
    cross_check: CrossCheckOut | None
    notes: list[str]
    model: ModelSpecOut


class HubTeamModelIn(Request):
    """Save a model fetched by its Hugging Face id to the team catalog, its config and commit
    kept, so plans use it offline and after the repository is gated or deleted."""

    id: TeamId
    hf_id: str = HfId
    name: str | None = Field(None, min_length=1, max_length=200, description="Default: hf_id")

    def entry(self, config: dict[str, Any], source: str, notes: str) -> dict[str, Any]:
        name = self.name or self.hf_id
        return {"id": self.id, "name": name, "config": config, "source": source, "notes": notes}
