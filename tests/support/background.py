"""A sampler that runs on a daemon thread for the span of a ``with`` block.

Owns: starting ``_run`` on entry and, on exit, setting ``_stop`` and joining the thread
(at most 10 s); for ``Sampling``, the loop of one ``sample()`` every ``period`` s that
counts the samples taken and records the ones whose reads failed instead of ending, and
the check a test makes on those counts. Must not sample anything itself.

    @dataclass
    class Counter(Background):
        n: int = 0

        def _run(self) -> None:
            while not self._stop.is_set():
                self.n += 1
                self._stop.wait(0.1)

    with Counter() as c:
        time.sleep(0.35)
    # c.n is about 4, and the thread has stopped

    @dataclass
    class Pods(Sampling):
        kube: Kube

        def sample(self) -> None:
            self.kube.core.list_namespaced_pod("ns")  # raises while the API is down

    with Pods(kube, period=0.2) as pods:
        time.sleep(10)  # the API server is down from 4 s to 6 s
        pods.still_sampling()  # 2 more samples taken (30 s at most): alive at the end
    pods.check(at_least=25)  # 40 samples, 10 errors ("4.1 s ApiException: ...")
    # -> AssertionError: 10 read errors in 50 reads (at most 5): ['4.1 s ...', ...]
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Self


@dataclass
class Background:
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        raise NotImplementedError


#: How many failed reads ``Sampling.errors`` keeps the text of (all are counted).
KEPT_ERRORS = 50


@dataclass
class Sampling(Background):
    """A ``Background`` that calls ``sample()`` every ``period`` s (keyword-only, after
    the subclass's own fields). A sample that raises is not a sample: the sampler keeps
    going (a drill may be cutting the API server) and counts it in ``failed``, keeping
    the first ``KEPT_ERRORS`` as "seconds since start, type: message" in ``errors``;
    ``samples`` counts the samples taken. A test asserts both with ``check``."""

    period: float = field(default=0.2, kw_only=True)
    samples: int = field(default=0, init=False)
    failed: int = field(default=0, init=False)
    errors: list[str] = field(default_factory=list, init=False)

    def sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as err:  # counted and kept: check() shows them
                self.failed += 1
                if len(self.errors) < KEPT_ERRORS:
                    elapsed = time.monotonic() - t0
                    self.errors.append(f"{elapsed:.1f} s {type(err).__name__}: {err}"[:300])
            else:
                self.samples += 1
            self._stop.wait(self.period)

    def check(self, at_least: int, max_failed: int | None = None) -> None:
        """Fail unless at least ``at_least`` samples were taken and at most
        ``max_failed`` reads failed (None: a tenth of all reads, rounded down), naming
        the failed reads: a sampler that stopped or whose reads kept failing checked
        nothing. 50 samples and 5 failed pass ``check(25)``; 6 failed do not."""
        reads = self.samples + self.failed
        bound = reads // 10 if max_failed is None else max_failed
        name = type(self).__name__
        print(f"{name}: {self.samples} samples, {self.failed} failed reads {self.errors[:3]}")
        assert self.samples >= at_least, (
            f"{name}: {self.samples} samples, at least {at_least} expected "
            f"({self.failed} failed reads: {self.errors[:5]})"
        )
        assert self.failed <= bound, (
            f"{name}: {self.failed} read errors in {reads} reads (at most {bound}): "
            f"{self.errors[:5]}"
        )

    def still_sampling(self, more: int = 2, timeout: float = 30.0) -> None:
        """Wait until ``more`` samples beyond those taken so far are taken (``timeout`` s
        at most), failing otherwise: the sampler was alive at this point, however slowly
        a loaded machine let it sample. Called at the end of a ``with`` block, it proves
        the sampler covered the whole block, which a count floor alone does not (a
        sampler that stopped half-way may already have taken enough)."""
        start = self.samples
        deadline = time.monotonic() + timeout
        while self.samples < start + more and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.samples >= start + more, (
            f"{type(self).__name__}: {self.samples - start} samples in {timeout:g} s, "
            f"{more} expected (stopped? {self.failed} failed reads: {self.errors[-3:]})"
        )
