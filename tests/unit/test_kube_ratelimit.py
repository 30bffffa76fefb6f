"""kube.py's client-side rate limit (a token bucket) and its retries (exponential
backoff with jitter on 429, 5xx and connection errors; never on other answers, never for
the Lease), without a cluster."""

from __future__ import annotations

from typing import Any

import pytest
import urllib3

from pdscaler.kube import RETRY_ATTEMPTS, KubeError, TokenBucket, backoff
from support.fakekube import FakeKube


class Clock:
    def __init__(self) -> None:
        self.t = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 3))
        self.t += seconds


def test_the_bucket_allows_a_burst_then_qps() -> None:
    """qps 10, burst 3: three requests at once, then one every 100 ms."""
    clock = Clock()
    bucket = TokenBucket(10.0, 3, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        bucket.take()
    assert clock.slept == [0.1, 0.1]
    clock.t += 10.0  # idle: the bucket refills up to the burst only
    for _ in range(4):
        bucket.take()
    assert clock.slept == [0.1, 0.1, 0.1]


def test_no_limit_at_zero_qps() -> None:
    clock = Clock()
    bucket = TokenBucket(0.0, 1, clock=clock, sleep=clock.sleep)
    for _ in range(100):
        bucket.take()
    assert clock.slept == []


def test_backoff_doubles_up_to_the_cap_with_jitter() -> None:
    assert [backoff(n, 0.2, 5.0, rng=lambda: 1.0) for n in (1, 2, 3, 4, 5, 6)] == [
        0.2, 0.4, 0.8, 1.6, 3.2, 5.0,
    ]  # fmt: skip
    assert backoff(1, 0.2, 5.0, rng=lambda: 0.0) == 0.1  # jitter: half at least


class Flaky(FakeKube):
    """Answers the first ``fail`` requests with ``error``."""

    def __init__(self, error: BaseException, fail: int) -> None:
        super().__init__()
        self.error, self.fail = error, fail
        self.clock = Clock()
        self.sleep = self.clock.sleep
        self.rng = lambda: 1.0

    def _request(self, method: str, path: str, query: Any = None, body: Any = None,
                 content_type: str = "application/json") -> dict[str, Any]:  # fmt: skip
        if self.fail > 0:
            self.fail -= 1
            self.requests.append((method, path, content_type))
            raise self.error
        return super()._request(method, path, query, body, content_type)


@pytest.mark.parametrize(
    "error",
    [
        KubeError(429, "TooManyRequests", "slow down"),
        KubeError(503, "ServiceUnavailable", "etcd"),
        KubeError(500, "InternalError", "x"),
        urllib3.exceptions.ProtocolError("connection reset"),
        ConnectionResetError(),
    ],
    ids=["429", "503", "500", "protocol", "reset"],
)
def test_retried_with_backoff(error: BaseException) -> None:
    kube = Flaky(error, fail=2)
    assert kube.get_pdd("serving", "chat") is None  # 404 after two failures: NotFound
    assert kube.clock.slept == [0.2, 0.4]
    assert kube.retries == 2
    assert kube.request_counts.snapshot() == {("get", "pddeployments"): 3}


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    kube = Flaky(KubeError(429, "TooManyRequests", "x", retry_after=2.0), fail=1)
    kube.get_pdd("serving", "chat")
    assert kube.clock.slept == [2.0]
    kube = Flaky(KubeError(429, "TooManyRequests", "x", retry_after=3600.0), fail=1)
    kube.get_pdd("serving", "chat")
    assert kube.clock.slept == [5.0]


def test_gives_up_after_the_attempts() -> None:
    kube = Flaky(KubeError(503, "ServiceUnavailable", "x"), fail=100)
    with pytest.raises(KubeError) as info:
        kube.get_pdd("serving", "chat")
    assert info.value.status == 503
    assert len(kube.requests) == RETRY_ATTEMPTS
    assert len(kube.clock.slept) == RETRY_ATTEMPTS - 1


@pytest.mark.parametrize("status", [400, 403, 409, 422])
def test_other_answers_are_not_retried(status: int) -> None:
    kube = Flaky(KubeError(status, "X", "x"), fail=1)
    with pytest.raises(KubeError):
        kube.get_pdd("serving", "chat")
    assert kube.clock.slept == []
    assert len(kube.requests) == 1


def test_lease_calls_are_neither_limited_nor_retried() -> None:
    """The elector has its own timing (retry period, renew deadline): a Lease call
    never waits for a token nor sleeps in a retry."""
    kube = Flaky(KubeError(503, "ServiceUnavailable", "x"), fail=1)
    kube.limiter = TokenBucket(0.001, 1, clock=kube.clock, sleep=kube.clock.sleep)
    kube.limiter.take()  # the bucket is empty for the next ~1000 s
    with pytest.raises(KubeError):
        kube.get_lease("ns", "pdscaler-leader")
    assert kube.clock.slept == []


def test_a_tick_request_waits_for_a_token() -> None:
    kube = Flaky(KubeError(503, "x", "x"), fail=0)
    kube.limiter = TokenBucket(2.0, 1, clock=kube.clock, sleep=kube.clock.sleep)
    kube.get_pdd("serving", "a")
    kube.get_pdd("serving", "b")
    assert kube.clock.slept == [0.5]
