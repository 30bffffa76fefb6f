"""The drain sizing gives new capacity at least one scaling interval to drain: a
recovery deadline a fraction of a second after the (refined) start-up time must not ask
for hundreds of replicas (seen on the long-context replay: decode 16 -> 64, "needs
1033")."""

from __future__ import annotations

from pdscaler.policy import decide
from pdscaler.policy.sizing import PoolFacts, plan_drain
from pdscaler.types import PolicyMemory, Role
from support.builders import chat_spec, snapshot, tick


def decode_facts() -> PoolFacts:
    """Decode of 0.42 req/s per replica (its KV binds), 4 ready, 139 queued."""
    return PoolFacts(
        role=Role.DECODE,
        current=4,
        ready=4,
        in_flight=0,
        tps=1400.0,
        tokens=350.0,
        target_utilization=0.7,
        slo_seconds=0.05,
        latency=None,
        queue=139.0,
        kv_usage=None,
        memory_rate=0.42,
    )


def test_a_deadline_just_after_startup_is_given_one_interval() -> None:
    """T_s 59.5 s, deadline 60 s, lambda 3.5 req/s, 4 x 0.42 = 1.68 req/s now: B = 139 +
    1.82 x 59.5 = 247.3. With 0.5 s to drain: 3.5 + 247.3 / 0.5 = 498 req/s -> 1,186
    replicas. With one 15 s interval: 3.5 + 247.3 / 15 = 19.99 req/s -> 48."""
    bare = plan_drain(decode_facts(), 3.5, 59.5, 60.0, None)
    slack = plan_drain(decode_facts(), 3.5, 59.5, 60.0, None, min_slack=15.0)
    assert bare is not None
    assert slack is not None
    assert bare.backlog == slack.backlog
    assert round(slack.backlog, 1) == 247.3
    assert bare.replicas == 1186
    assert slack.replicas == 48
    assert slack.feasible
    assert slack.deadline == 60.0


def test_decide_uses_the_interval_as_slack() -> None:
    """Through ``decide``: the refined T_s is 59.5 s (memory), the decode queue 139 on 4
    ready long-context replicas (12,175-token sequences over 350 x 50 ms = 17.5 s:
    90,000 / 12,175 / 17.5 = 0.42 req/s each): decode grows to the 48 of the test above,
    not to its max 64."""
    spec = chat_spec(
        prefill={"tokensPerSecond": 8500},
        decode={
            "tokensPerSecond": 1400,
            "kvCacheTokens": 100_000,
            "replicas": {"min": 1, "max": 64},
        },
        slo={"tpotSeconds": 0.05, "ttftSeconds": 15},
        scaling={"maxGPUs": 128},
    )
    snap = snapshot(3.5, 12_000.0, 350.0, tpot=0.05, decode_queue=139.0)
    d = decide(tick(spec, snap, 8, 4, memory=PolicyMemory(startup_seconds=59.5)))
    assert d.decode == 48
