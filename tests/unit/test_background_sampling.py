"""support.background.Sampling: a sampler counts its samples, keeps going when a read
fails (counted and kept, not a sample), and ``check`` fails on a sampler that took too
few samples or whose reads failed too often, naming the failures."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from support.background import KEPT_ERRORS, Sampling


@dataclass
class Reads(Sampling):
    """Fails the reads whose number (from 1) is in ``failing``; stops sampling (sets
    ``done``) after ``last`` reads."""

    failing: set[int]
    last: int
    reads: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        self.reads += 1
        if self.reads >= self.last:
            self.done.set()
            self._stop.set()
        if self.reads in self.failing:
            raise ConnectionResetError(f"read {self.reads}")


def run(failing: set[int], last: int) -> Reads:
    with Reads(failing, last, period=0.0) as sampler:
        assert sampler.done.wait(5)
    return sampler


def test_a_failed_read_is_counted_and_sampling_goes_on() -> None:
    """Reads 3 and 4 of 20 fail: 18 samples, 2 failed, both kept with their type, and
    the reads after them were taken (the loop did not end at the first error)."""
    s = run({3, 4}, 20)
    assert (s.reads, s.samples, s.failed) == (20, 18, 2)
    assert [e.split(" s ", 1)[1] for e in s.errors] == [
        "ConnectionResetError: read 3",
        "ConnectionResetError: read 4",
    ]
    s.check(at_least=18)  # 2 of 20 reads: within a tenth


def test_check_fails_on_too_few_samples_or_too_many_failed_reads() -> None:
    s = run({3, 4, 5}, 20)  # 3 failed of 20 reads: more than a tenth
    with pytest.raises(AssertionError, match=r"3 read errors in 20 reads \(at most 2\)"):
        s.check(at_least=1)
    s.check(at_least=17, max_failed=3)
    with pytest.raises(AssertionError, match="17 samples, at least 18 expected"):
        s.check(at_least=18, max_failed=3)


def test_every_failure_is_counted_and_the_first_ones_kept() -> None:
    s = run(set(range(1, 101)), 100)
    assert (s.samples, s.failed, len(s.errors)) == (0, 100, KEPT_ERRORS)
    with pytest.raises(AssertionError, match=r"0 samples, at least 1 expected"):
        s.check(at_least=1)
