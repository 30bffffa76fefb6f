"""Window fields have upper bounds (issue 30, item 3): scaleDownStabilization,
roleFlips.window and metrics.window at most 1h, progressDeadline at most 24h. The API
server and the spec model refuse longer ones (tests/support/invalid_manifests.py, run
against both); a stored spec admitted before the bound is read by the operator (the
lenient read) with the bound, so it keeps scaling instead of freezing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pdscaler import spec as pdspec
from pdscaler.invariants import spec_example


def _raw(**scaling: str) -> dict[str, object]:
    raw = spec_example().model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["scaling"].update(scaling)
    raw["metrics"]["window"] = "3h"
    raw["rollout"]["progressDeadline"] = "48h"
    return raw


def test_the_model_refuses_a_thousand_hour_window() -> None:
    with pytest.raises(ValidationError, match="scaleDownStabilization must be at most 1h"):
        pdspec.PDDeploymentSpec.model_validate(_raw(scaleDownStabilization="1000h"))


def test_a_stored_spec_over_the_bounds_is_read_with_them() -> None:
    stored, unknown = pdspec.parse_spec_lenient(_raw(scaleDownStabilization="1000h"))
    assert unknown == ()
    assert stored.scaling.scale_down_stabilization_seconds == pdspec.MAX_WINDOW_S
    assert stored.metrics.window_seconds == pdspec.MAX_WINDOW_S
    assert stored.rollout.progress_deadline_seconds == pdspec.MAX_PROGRESS_DEADLINE_S


def test_windows_within_the_bounds_are_as_written() -> None:
    ok = spec_example().model_dump(mode="json", by_alias=True, exclude_none=True)
    ok["scaling"]["scaleDownStabilization"] = "1h"
    parsed = pdspec.PDDeploymentSpec.model_validate(ok)
    assert parsed.scaling.scale_down_stabilization_seconds == 3600.0
