"""Every background sampler the lab tests and drills check invariants with counts its
failed reads instead of dropping them (support.background.Sampling): with an API server
(or an operator /metrics) that answers nothing, each takes 0 samples, counts every read
as failed, keeps the errors' text, keeps trying, and its ``check`` fails naming them, as
the drill using it then does. Before, metrics_feed.Sampler's thread ended silently at
the first error and the others skipped failed reads without counting them.
``still_sampling`` fails on a sampler that stopped and passes on one that runs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

import pytest

from drills.faults import ClusterSampler, DrillOperator, TickSampler
from drills.operator_process import Sampler as PairSampler
from drills.samplers import MixSampler
from pdscaler.spec import PDDeploymentSpec
from support.background import Sampling
from support.labkit import Kube
from support.metrics_feed import Sampler as ReplicaSampler


class DownKube:
    """A Kube whose every API (core, apps, custom, ...) refuses the connection."""

    def __getattr__(self, name: str) -> Any:
        raise ConnectionRefusedError(f"{name}: the API server is down")


class SilentOperator:
    """A DrillOperator whose /metrics answers nothing (``ticks`` is then {})."""

    def ticks(self) -> dict[str, float]:
        return {}


def samplers() -> list[Sampling]:
    kube = cast(Kube, DownKube())
    spec = cast(PDDeploymentSpec, None)  # never reached: the pod read fails first
    return [
        ReplicaSampler(kube, "ns", "d8", period=0.01),
        ClusterSampler(kube, "ns", period=0.01),
        TickSampler(cast(DrillOperator, SilentOperator()), period=0.01),
        PairSampler(kube, "ns", "d2", spec, floor=(1, 1), period=0.01),
        MixSampler(kube, "ns", "drift", period=0.01),
    ]


@pytest.mark.parametrize(
    "sampler", samplers(), ids=lambda s: type(s).__module__ + "." + type(s).__name__
)
def test_a_sampler_whose_reads_all_fail_counts_them_and_fails_its_check(
    sampler: Sampling,
) -> None:
    with sampler:
        deadline = time.monotonic() + 5
        while sampler.failed < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert sampler.samples == 0
    assert sampler.failed >= 5  # kept trying after the first failed read
    assert sampler.errors, "the failed reads' text is kept"
    assert "down" in sampler.errors[0] or "tick" in sampler.errors[0], sampler.errors[0]
    with pytest.raises(AssertionError, match=r"0 samples, at least 1 expected"):
        sampler.check(at_least=1)
    with pytest.raises(AssertionError, match=r"read errors in \d+ reads \(at most 0\)"):
        sampler.check(at_least=0, max_failed=0)


@dataclass
class Ticking(Sampling):
    """Stops sampling for good in its sample number ``last`` + 1 (counted: it did not
    raise)."""

    last: int = 1_000_000

    def sample(self) -> None:
        if self.samples >= self.last:
            self._stop.set()


def test_still_sampling_passes_on_a_running_sampler_and_fails_on_a_stopped_one() -> None:
    with Ticking(period=0.01) as running:
        running.still_sampling(more=3, timeout=5)
    with Ticking(last=2, period=0.01) as stopped:
        assert stopped._thread is not None
        stopped._thread.join(5)  # it stopped after its 3rd sample
        assert stopped.samples == 3
        with pytest.raises(AssertionError, match=r"0 samples in 0.5 s, 2 expected \(stopped\?"):
            stopped.still_sampling(timeout=0.5)
