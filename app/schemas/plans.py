"""Saved plans: what a client sends to save or edit one (its kind decides its request's shape)
and what it gets back."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from app.schemas.common import Request as StrictRequest
from app.schemas.inference import InferenceRequest
from app.schemas.sweep import ServingSweepRequest, TrainingSweepRequest
from app.schemas.training import TrainingRequest

__all__ = [
    "PLAN_CREATE",
    "AnyPlanRequest",
    "PlanCreate",
    "PlanOpened",
    "PlanOut",
    "PlanUpdate",
    "ServingPlanIn",
    "ServingSweepPlanIn",
    "TrainingPlanIn",
    "TrainingSweepPlanIn",
]

Name = Annotated[str, Field(min_length=1, max_length=200)]


Tag = Annotated[str, Field(min_length=1, max_length=50)]


class _PlanFields(StrictRequest):
    name: Name
    description: str = Field("", max_length=10_000)
    tags: list[Tag] = Field(default_factory=list, max_length=20)

    def request_body(self) -> dict[str, Any]:
        """The request as it was sent (fields left out stay left out)."""
        request: BaseModel = getattr(self, "request")  # noqa: B009 (each kind declares it)
        return request.model_dump(mode="json", exclude_unset=True)


class TrainingPlanIn(_PlanFields):
    kind: Literal["training"]
    request: TrainingRequest = Field(description="A POST /training/estimate body")


class ServingPlanIn(_PlanFields):
    kind: Literal["inference"]
    request: InferenceRequest = Field(description="A POST /inference/estimate body")


class TrainingSweepPlanIn(_PlanFields):
    kind: Literal["training_sweep"]
    request: TrainingSweepRequest = Field(description="A POST /training/sweep body")


class ServingSweepPlanIn(_PlanFields):
    kind: Literal["inference_sweep"]
    request: ServingSweepRequest = Field(description="A POST /inference/sweep body")


# A plan to save: its kind decides the shape of its request (a tagged union, so the schema says
# which request goes with which kind).
PlanCreate = Annotated[
    TrainingPlanIn | ServingPlanIn | TrainingSweepPlanIn | ServingSweepPlanIn,
    Field(discriminator="kind"),
]


PLAN_CREATE: TypeAdapter[Any] = TypeAdapter(PlanCreate)


AnyPlanRequest = TrainingRequest | InferenceRequest | TrainingSweepRequest | ServingSweepRequest


class PlanUpdate(StrictRequest):
    name: Name | None = None
    description: str | None = Field(None, max_length=10_000)
    tags: list[Tag] | None = Field(None, max_length=20)
    request: AnyPlanRequest | None = Field(
        None, description="A request of the plan's own kind (its endpoint's body)"
    )

    def changes(self) -> dict[str, Any]:
        """The fields given, the request as it was sent."""
        out: dict[str, Any] = self.model_dump(exclude_none=True, exclude={"request"})
        if self.request is not None:
            out["request"] = self.request.model_dump(mode="json", exclude_unset=True)
        return out


class PlanOut(BaseModel):
    id: str
    name: str
    description: str
    tags: list[str]
    kind: str
    request: dict[str, Any]
    saved_result: dict[str, Any] = Field(description="Headline numbers when it was saved")
    estimator_version: str
    revision: int
    created_at: str
    updated_at: str


class PlanOpened(PlanOut):
    current_result: dict[str, Any] | None = Field(
        description="Headline numbers now (null where it cannot be re-evaluated now)"
    )
    current_version: str
    changed: dict[str, dict[str, Any]] = Field(
        description="Numbers that differ from the saved ones: {name: {saved, now}}"
    )
    current_error: str | None = Field(
        None, description="Why the plan cannot be re-evaluated now (a rule added since)"
    )
