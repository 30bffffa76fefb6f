"""Leader election over a ``coordination.k8s.io/v1`` Lease: the decisions, purely
computational (no I/O, no clock: every time is passed in).

Owns: the Lease record as the elector sees it (``Record``), when a record was first
seen (``Seen``: the local monotonic time its content last changed, as client-go's
``observedTime``; the record's own ``renewTime`` is another host's wall clock and is
never compared with ours), what to do next (``decide``: CREATE / TAKE / RENEW / WAIT),
the spec to write for it (``desired``, ``released``), and the fence (``may_write``).
Must not: talk to Kubernetes (``kube`` does, ``leader.py`` runs the loop) or read
a clock.

Timings as client-go's (``Timings``): leaseDuration 15 s, renewDeadline 10 s,
retryPeriod 2 s. The fence: a replica writes only while ``now < last_renew +
renewDeadline``, where ``last_renew`` is the local time just BEFORE it sent its last
successful create/update. Another replica may take the Lease only once
``now >= seen.at + leaseDuration``, where ``seen.at`` is when it first saw that very
record, which is after the holder sent it. So the old holder's fence closes at least
``leaseDuration - renewDeadline`` (5 s) before anyone else can hold the Lease.

Worked example (15/10/2): A renews, sending at t = 100.0 (its clock); the update lands
and B's poll sees the new resourceVersion at t = 101.3 (B's clock, same rate). A is
SIGSTOPped at 100.5. A may write while t < 110.0; B decides TAKE first at its poll
with t >= 101.3 + 15 = 116.3 (the poll at 117.3 with a 2 s period). From 110.0 to
117.3 nobody writes. When A is continued at t = 125, ``may_write`` is False (125 >=
110) before A makes any request, its next GET shows holder B, so A decides WAIT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"
JITTER_FACTOR = 1.2  # client-go: renewDeadline must exceed 1.2 x retryPeriod


@dataclass(frozen=True)
class Timings:
    """leaseDuration > renewDeadline > 1.2 x retryPeriod > 0 (client-go's checks)."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.retry_period > 0:
            raise ValueError(f"retry period {self.retry_period} s must be > 0")
        if not self.renew_deadline > JITTER_FACTOR * self.retry_period:
            raise ValueError(
                f"renew deadline {self.renew_deadline} s must exceed "
                f"{JITTER_FACTOR} x retry period {self.retry_period} s"
            )
        if not self.lease_duration > self.renew_deadline:
            raise ValueError(
                f"lease duration {self.lease_duration} s must exceed "
                f"renew deadline {self.renew_deadline} s"
            )


@dataclass(frozen=True)
class Record:
    """A Lease's spec and resourceVersion (an empty ``holder`` is a released Lease)."""

    holder: str = ""
    duration_seconds: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0
    resource_version: str = ""
    #: the Lease was seen and is now missing (deleted); ``holder`` is its last holder
    gone: bool = False

    @staticmethod
    def from_lease(obj: dict[str, Any]) -> Record:
        spec = obj.get("spec") or {}
        meta = obj.get("metadata") or {}
        duration = spec.get("leaseDurationSeconds")
        return Record(
            holder=str(spec.get("holderIdentity") or ""),
            duration_seconds=int(duration) if duration is not None else None,
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str(meta.get("resourceVersion") or ""),
        )

    def spec(self) -> dict[str, Any]:
        """The Lease ``spec`` for this record."""
        out: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseTransitions": self.transitions,
        }
        if self.duration_seconds is not None:
            out["leaseDurationSeconds"] = self.duration_seconds
        if self.acquire_time is not None:
            out["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            out["renewTime"] = self.renew_time
        return out


@dataclass(frozen=True)
class Seen:
    """``record``, first seen (content last changed) at local monotonic time ``at``."""

    record: Record
    at: float


class Move(StrEnum):
    CREATE = "create"  # no Lease yet: POST one naming us
    TAKE = "take"  # released or expired: PUT us as holder (one more transition)
    RENEW = "renew"  # ours: PUT a new renewTime
    WAIT = "wait"  # someone else holds it and it has not expired


def observe(previous: Seen | None, record: Record | None, now: float) -> Seen | None:
    """The new ``Seen``: an unchanged record (same resourceVersion and spec: nobody wrote
    it) keeps its first-seen time, any write makes it seen ``now``. E.g. previous seen
    at 100 at version 5; at 102 version 5 again -> still 100; at 104 version 6 -> 104.
    A Lease seen before and missing now (deleted) is a ``gone`` record of its last
    holder, first seen missing ``now`` (still missing at 110 -> still 104): its holder
    may still write until its fence closes, so nobody else creates it before a
    leaseDuration has passed (``decide``). Never seen one: None."""
    if record is None:
        if previous is None:
            return None
        if previous.record.gone:
            return previous
        gone = Record(holder=previous.record.holder, duration_seconds=None, gone=True)
        return Seen(gone, now)
    if previous is not None and previous.record == record:
        return Seen(record, previous.at)
    return Seen(record, now)


def expired(seen: Seen, now: float, timings: Timings) -> bool:
    """The holder's term is over: ``now >= seen.at + leaseDurationSeconds`` (the
    record's own duration; ours when it has none)."""
    duration = seen.record.duration_seconds
    span = float(duration) if duration is not None else timings.lease_duration
    return now >= seen.at + span


def decide(identity: str, seen: Seen | None, now: float, timings: Timings) -> Move:
    """What ``identity`` does at ``now`` given the Lease it last saw (None: no Lease)."""
    if seen is None:
        return Move.CREATE
    holder = seen.record.holder
    if seen.record.gone:  # deleted: its holder re-creates it at once, others wait it out
        if holder in ("", identity) or expired(seen, now, timings):
            return Move.CREATE
        return Move.WAIT
    if holder == identity:
        return Move.RENEW
    if not holder or expired(seen, now, timings):
        return Move.TAKE
    return Move.WAIT


def desired(
    identity: str, current: Record | None, move: Move, wall: datetime, timings: Timings
) -> Record:
    """The record to write for ``move`` at wall time ``wall`` (RFC 3339 micro, UTC).

    RENEW keeps acquireTime and the transitions; TAKE starts a term (transitions + 1);
    CREATE starts the first (0)."""
    stamp = wall.strftime(MICRO_TIME)
    duration = math.ceil(timings.lease_duration)
    if move is Move.RENEW and current is not None:
        return replace(current, renew_time=stamp, duration_seconds=duration)
    transitions = current.transitions + 1 if current is not None else 0
    return Record(
        holder=identity,
        duration_seconds=duration,
        acquire_time=stamp,
        renew_time=stamp,
        transitions=transitions,
        resource_version=current.resource_version if current is not None else "",
    )


def released(current: Record, wall: datetime) -> Record:
    """A Lease given up on shutdown (client-go's ReleaseOnCancel): no holder, 1 s
    duration, so the next replica takes it at its next poll instead of after 15 s."""
    return replace(current, holder="", duration_seconds=1, renew_time=wall.strftime(MICRO_TIME))


def may_write(last_renew: float | None, now: float, timings: Timings) -> bool:
    """The fence: True iff this replica renewed (sending at ``last_renew``) less than
    renewDeadline ago. 15/10/2, renewed at 100.0: True at 109.99, False at 110.0."""
    return last_renew is not None and now < last_renew + timings.renew_deadline
