"""kstatus for tests: sigs.k8s.io/cli-utils pkg/kstatus/status ``Compute`` for a custom
resource, rule for rule (generic.go ``checkGenericProperties`` / ``checkGeneration``,
status.go ``Compute``), the status Flux's health checks and kpt read:

1. ``metadata.deletionTimestamp`` set: Terminating;
2. ``status.observedGeneration`` present and not ``metadata.generation``: InProgress,
   ``LatestGenerationNotObserved``;
3. the first condition in list order that is Reconciling=True (InProgress) or
   Stalled=True (Failed), with its reason;
4. else Current (a custom resource has no type-specific rule).

    kstatus({"metadata": {"generation": 2}, "status": {"observedGeneration": 1}})
    # -> ("InProgress", "LatestGenerationNotObserved")
"""

from __future__ import annotations

from typing import Any


def kstatus(obj: dict[str, Any]) -> tuple[str, str]:
    """(status, reason) as kstatus computes them for the custom resource ``obj``."""
    meta, status = obj.get("metadata", {}), obj.get("status") or {}
    if meta.get("deletionTimestamp"):
        return "Terminating", ""
    observed = status.get("observedGeneration")
    if "generation" in meta and observed is not None and observed != meta["generation"]:
        return "InProgress", "LatestGenerationNotObserved"
    for c in status.get("conditions") or []:
        if c["type"] == "Reconciling" and c["status"] == "True":
            return "InProgress", c["reason"]
        if c["type"] == "Stalled" and c["status"] == "True":
            return "Failed", c["reason"]
    return "Current", ""
