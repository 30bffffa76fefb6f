"""The rollout state of a restarted operator: from ``status.rollout``
(``state_from_status``), or, when the status is lost, from the cells and the marks a
rollout keeps on the front Service (``to_marks``, ``state_from_marks``).

Owns: reading a persisted phase (an unknown one reads as Stable), revisions matched to
the cells by version for a status written before revisions were kept, the required
totals and the progress clock, so a restart neither shrinks a cell nor restarts the
deadline; and a rollback's failed revision, so a failed version is not retried. Must
not: read clocks (``now`` is passed in) or talk to Kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pdscaler import naming
from pdscaler.rollout.cells import (
    Cells,
    by_serving,
    views,
)
from pdscaler.rollout.phases import BACK, RolloutState, remember_image, spec_revision
from pdscaler.spec import PDDeploymentSpec, RolloutStatus
from pdscaler.types import PerRole, RolloutPhase


def _seconds(t: datetime | None) -> float | None:
    return t.timestamp() if t is not None else None


def _phase(value: str) -> RolloutPhase:
    """A phase read from status; one this operator does not know reads as Stable (the
    next step moves on from it as from Stable)."""
    known = {p.value: p for p in RolloutPhase}
    return known.get(value, RolloutPhase.STABLE)


def to_marks(state: RolloutState) -> dict[str, str]:
    """What a rollout must not forget even when the status is lost (a restore without
    status, a status wiped by hand), kept as annotations on the front Service: the
    revision rolled back from while a rollback holds it (it must not be retried), and
    the required totals while a rollout moves (the surge must not be taken for the
    size). Empty when neither applies, so a settled PDDeployment carries no marks.

    >>> to_marks(RolloutState(RolloutPhase.ROLLED_BACK, failed_rev="v2-abcde"))
    {'pdscaler.io/failed-revision': 'v2-abcde'}
    """
    out: dict[str, str] = {}
    if state.phase in BACK and state.failed_rev is not None:
        out[naming.ANNOTATION_FAILED_REVISION] = state.failed_rev
    if state.phase.moving and state.required is not None:
        out[naming.ANNOTATION_REQUIRED] = f"{state.required.prefill}/{state.required.decode}"
    return out


def _required_mark(marks: Mapping[str, str]) -> PerRole[int] | None:
    p, sep, d = marks.get(naming.ANNOTATION_REQUIRED, "").partition("/")
    if not sep or not p.isdigit() or not d.isdigit():
        return None
    return PerRole(prefill=int(p), decode=int(d))


def state_from_marks(
    marks: Mapping[str, str], spec: PDDeploymentSpec, cells: Cells
) -> RolloutState:
    """The state of an operator that has neither memory nor ``status.rollout``, from
    the cells and the marks (``to_marks``): the spec's revision marked failed while
    another cell runs -> back on that cell (RollingBack while the failed cell still
    has pods, else RolledBack), so the failed version is not retried; the required
    totals of a rollout under way. Anything else: a fresh state (``RolloutState()``)."""
    required = _required_mark(marks)
    failed = marks.get(naming.ANNOTATION_FAILED_REVISION)
    view = views(spec, cells, ())
    others = [c for c in view.values() if c.rev != failed and not c.empty]
    if failed is None or failed != spec_revision(spec) or not others:
        return RolloutState(required=required)
    dest = by_serving(others)[0]
    gone = failed not in view or view[failed].empty
    return RolloutState(
        phase=RolloutPhase.ROLLED_BACK if gone else RolloutPhase.ROLLING_BACK,
        target_rev=dest.rev,
        target_version=dest.version,
        failed_rev=failed,
        failed_version=spec.engine.version,
        required=required,
        images=remember_image((), dest.rev, dest.image),
    )


def state_from_status(
    status: RolloutStatus | None,
    spec: PDDeploymentSpec,
    cells: Cells,
    now: float,
    marks: Mapping[str, str] | None = None,
) -> RolloutState:
    """The state of a restarted operator from ``status.rollout`` and the cells: phase,
    revisions, versions, start time, step count, the required totals and the progress
    clock (``progressAt``, ``progressMark``, ``checkedAt``), so a restart neither
    shrinks a cell nor restarts the deadline. A status written before these were kept
    reads as: revisions matched to the cells by version (the spec's image when a cell
    is gone), no totals (``policy_pools`` then sums the cells), the clock at ``now``.
    No ``status.rollout`` at all (lost or wiped): ``state_from_marks``."""
    if status is None or status.phase is None:
        return state_from_marks(marks or {}, spec, cells)
    view = views(spec, cells, ())

    def rev_of(version: str | None, persisted: str | None = None) -> str | None:
        if persisted is not None:
            return persisted
        if version is None:
            return None
        matches = sorted(c.rev for c in view.values() if c.version == version)
        own = (
            spec_revision(spec)
            if version == spec.engine.version
            else naming.revision(spec.engine.image, version)
        )
        if own in matches or not matches:
            return own
        return matches[0]

    phase = _phase(status.phase)
    back = phase in BACK
    progress_at = _seconds(status.progress_at)
    required = status.required
    from_rev = rev_of(status.from_version, status.from_revision)
    return RolloutState(
        phase=phase,
        target_rev=rev_of(status.to_version, status.to_revision),
        target_version=status.to_version,
        from_rev=None if back else from_rev,
        from_version=None if back else status.from_version,
        failed_rev=from_rev if back else None,
        failed_version=status.from_version if back else None,
        started_at=_seconds(status.started_at),
        progress_at=now if progress_at is None else progress_at,
        progress_mark=status.progress_mark if progress_at is not None else None,
        steps=status.step or 0,
        required=(
            PerRole(prefill=required.prefill, decode=required.decode)
            if required is not None
            else None
        ),
        checked_at=_seconds(status.checked_at),
    )
