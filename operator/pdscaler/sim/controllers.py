"""The interface every autoscaler in the closed loop implements, and the two that are
not baselines: pdscaler itself (the operator's own pure policy) and the replay of a
precomputed schedule (the oracle's).

Owns: ``View`` (what a controller is shown at a tick: the Prometheus snapshot and the
API server's pool observations, nothing else), ``Target`` (the replicas it wants, with
a note), the ``Controller`` protocol, and ``PdscalerController``, which turns a view
into the same ``TickInput`` the live operator builds, calls ``pdscaler.policy.decide``
and carries the policy's memory from tick to tick exactly as the operator persists it
in status. Must not: let a controller see the engine or the trace directly.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pdscaler.policy import decide as policy_decide
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import (
    Decision,
    Flip,
    FlipOptions,
    MetricsSnapshot,
    PolicyMemory,
    PoolObservation,
    TickInput,
)

Decide = Callable[[TickInput], Decision]


@dataclass(frozen=True)
class View:
    """One tick's inputs: ``metrics`` is None when Prometheus has nothing yet."""

    now: float
    metrics: MetricsSnapshot | None
    prefill: PoolObservation
    decode: PoolObservation


@dataclass(frozen=True)
class Target:
    """Desired replicas per pool. ``note`` is the controller's reason (pdscaler's
    ``action: message``); ``drain_seconds`` its predicted drain time, when it has one;
    ``flip``: ready replicas that reach their new pool by a role change (counted in
    ``prefill``/``decode``), not by a cold start."""

    prefill: int
    decode: int
    note: str = ""
    drain_seconds: float | None = None
    flip: Flip | None = None


class Controller(Protocol):
    """An autoscaler: called every ``interval`` with a view; None means "no opinion"
    (hold what is there)."""

    name: str

    def tick(self, view: View) -> Target | None: ...


class PdscalerController:
    """The operator's policy in the loop: ``decide(TickInput) -> Decision``, memory
    carried over, ``spec.scaling.mode`` ignored (the simulator always applies).
    ``flips``: the engine can change a replica's role at this cost (``Engine.flip``);
    None: every change is a scale, as in the live operator today."""

    name = "pdscaler"

    def __init__(
        self,
        spec: PDDeploymentSpec,
        decide: Decide | None = None,
        flips: FlipOptions | None = None,
    ) -> None:
        self.spec = spec
        self._decide = decide if decide is not None else policy_decide
        self.flips = flips
        self.memory = PolicyMemory()
        self.decisions: list[Decision] = []

    def tick(self, view: View) -> Target:
        decision = self._decide(
            TickInput(
                now=view.now,
                spec=self.spec,
                metrics=view.metrics,
                prefill=view.prefill,
                decode=view.decode,
                memory=self.memory,
                flips=self.flips,
            )
        )
        self.memory = decision.memory
        self.decisions.append(decision)
        return Target(
            decision.prefill,
            decision.decode,
            note=f"{decision.action}: {decision.message}",
            drain_seconds=decision.model.drain_seconds,
            flip=decision.flip,
        )


class ScheduleController:
    """Replays a schedule known in advance: at ``now`` it asks for the most replicas the
    schedule needs in ``[now, now + lead]`` (lead = start-up + one interval), so what
    it orders is up in time. Used to check the oracle's schedule in the engine.

    ``times`` are bin starts; bin k (``times[k]`` to the next) needs ``prefill[k]``
    and ``decode[k]`` replicas.
    """

    def __init__(
        self,
        name: str,
        times: Sequence[float],
        prefill: Sequence[int],
        decode: Sequence[int],
        lead: float,
    ) -> None:
        if not len(times) == len(prefill) == len(decode) > 0:
            raise ValueError("a schedule needs equally long, non-empty columns")
        self.name = name
        self._times = list(times)
        self._p = list(prefill)
        self._d = list(decode)
        self._lead = lead

    def at(self, now: float) -> tuple[int, int]:
        lo = max(0, bisect.bisect_right(self._times, now) - 1)
        hi = max(lo + 1, bisect.bisect_right(self._times, now + self._lead))
        return max(self._p[lo:hi]), max(self._d[lo:hi])

    def tick(self, view: View) -> Target:
        p, d = self.at(view.now)
        return Target(p, d, note="schedule")
