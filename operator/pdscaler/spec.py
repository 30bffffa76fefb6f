"""The PDDeployment resource as typed Python: the spec the user writes and the status
the operator writes. Mirrors ``crds/pdscaler.io_pddeployments.yaml`` field by field
(a test keeps the two equal). Pure: parsing and validation only, no I/O.

Attribute names are snake_case; the Kubernetes (camelCase) names are the aliases, so
``PDDeploymentSpec.model_validate(obj["spec"])`` reads a manifest as written and
``model_dump(by_alias=True)`` writes one back.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

GROUP = "pdscaler.io"
VERSION = "v1alpha1"
KIND = "PDDeployment"
PLURAL = "pddeployments"

_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration: ``"90s"`` -> 90.0, ``"2m"`` -> 120.0,
    ``"1h30m"`` -> 5400.0. Raises ValueError on anything else (``"5 min"``, ``""``)."""
    if not _DURATION.match(text):
        raise ValueError(f"invalid duration {text!r}: use a number with ms, s, m or h, e.g. 90s")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class EngineSpec(_Model):
    """The ONE engine version both pools run: a P/D version mismatch cannot be written."""

    image: str = Field(min_length=1)
    version: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class ReplicaBounds(_Model):
    min: int = Field(default=1, ge=0)
    max: int = Field(default=16, ge=1)

    @model_validator(mode="after")
    def _min_le_max(self) -> ReplicaBounds:
        if self.min > self.max:
            raise ValueError("replicas.min must be <= replicas.max")
        return self


class PoolSpec(_Model):
    """A pool: pod template, capacity facts of one replica, and bounds."""

    template: dict[str, Any] = Field(default_factory=dict)
    gpus_per_replica: int = Field(default=1, ge=1)
    replicas: ReplicaBounds = Field(default_factory=ReplicaBounds)
    tokens_per_second: float = Field(gt=0)
    target_utilization: float = Field(default=0.7, gt=0, le=1)


class SLOSpec(_Model):
    ttft_seconds: float = Field(default=2.0, gt=0)
    tpot_seconds: float = Field(default=0.05, gt=0)
    percentile: float = Field(default=0.95, gt=0, lt=1)
    recovery_seconds: float = Field(default=60.0, gt=0)


class PrometheusSpec(_Model):
    url: str = Field(default="http://prometheus.monitoring:9090", pattern=r"^https?://")


Preset = Literal["vllm", "sglang", "dynamo", "custom"]


class CustomQueries(_Model):
    """PromQL templates for the ``custom`` preset. ``{selector}`` is replaced with the
    pool's label matchers, ``{window}`` with ``metrics.window``, ``{quantile}`` with
    ``slo.percentile``."""

    request_rate: str = Field(min_length=1)
    prompt_tokens: str = Field(min_length=1)
    output_tokens: str = Field(min_length=1)
    queue_depth: str = Field(min_length=1)
    ttft: str = Field(min_length=1)
    tpot: str = Field(min_length=1)
    running: str | None = None
    kv_usage: str | None = None


class MetricsSpec(_Model):
    prometheus: PrometheusSpec = Field(default_factory=PrometheusSpec)
    preset: Preset = "vllm"
    queries: CustomQueries | None = None
    window: str = "2m"

    @model_validator(mode="after")
    def _check(self) -> MetricsSpec:
        parse_duration(self.window)
        if self.preset == "custom" and self.queries is None:
            raise ValueError("metrics.queries is required when metrics.preset is custom")
        if self.preset != "custom" and self.queries is not None:
            raise ValueError("metrics.queries is only allowed when metrics.preset is custom")
        return self

    @property
    def window_seconds(self) -> float:
        return parse_duration(self.window)


class ScalingSpec(_Model):
    mode: Literal["Auto", "Recommend"] = "Auto"
    interval: str = "15s"
    max_gpus: int = Field(default=64, ge=1, alias="maxGPUs")
    scale_down_stabilization: str = "5m"

    @model_validator(mode="after")
    def _check(self) -> ScalingSpec:
        parse_duration(self.interval)
        parse_duration(self.scale_down_stabilization)
        return self

    @property
    def interval_seconds(self) -> float:
        return parse_duration(self.interval)

    @property
    def scale_down_stabilization_seconds(self) -> float:
        return parse_duration(self.scale_down_stabilization)


class RolloutSpec(_Model):
    max_surge_gpus: int = Field(default=8, ge=1, alias="maxSurgeGPUs")
    progress_deadline: str = "10m"

    @model_validator(mode="after")
    def _check(self) -> RolloutSpec:
        parse_duration(self.progress_deadline)
        return self

    @property
    def progress_deadline_seconds(self) -> float:
        return parse_duration(self.progress_deadline)


class PDDeploymentSpec(_Model):
    engine: EngineSpec
    prefill: PoolSpec
    decode: PoolSpec
    slo: SLOSpec = Field(default_factory=SLOSpec)
    startup_seconds: float = Field(default=60.0, gt=0)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    scaling: ScalingSpec = Field(default_factory=ScalingSpec)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)

    @model_validator(mode="after")
    def _budget_covers_minimums(self) -> PDDeploymentSpec:
        floor = (
            self.prefill.replicas.min * self.prefill.gpus_per_replica
            + self.decode.replicas.min * self.decode.gpus_per_replica
        )
        if self.scaling.max_gpus < floor:
            raise ValueError(
                "scaling.maxGPUs must be at least the GPUs of both pools' minimum replicas"
            )
        return self
